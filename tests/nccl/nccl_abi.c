/* The ABI kcoll's libnccl.so.2 claims, checked against NVIDIA's real nccl.h (compiled with it):
 * sizes, enum values and config layout frameworks rely on; then the library answers with the
 * values of that header (version, result strings, the unique id's size). */
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId is 128 bytes");
_Static_assert(NCCL_UNIQUE_ID_BYTES == 128, "NCCL_UNIQUE_ID_BYTES");
_Static_assert(ncclSuccess == 0 && ncclUnhandledCudaError == 1 && ncclSystemError == 2 &&
                   ncclInternalError == 3 && ncclInvalidArgument == 4 && ncclInvalidUsage == 5 &&
                   ncclRemoteError == 6 && ncclInProgress == 7 && ncclNumResults == 8,
               "ncclResult_t 0..7");
_Static_assert(ncclSum == 0 && ncclProd == 1 && ncclMax == 2 && ncclMin == 3 && ncclAvg == 4 &&
                   ncclNumOps == 5,
               "ncclRedOp_t");
_Static_assert(ncclInt8 == 0 && ncclUint8 == 1 && ncclInt32 == 2 && ncclUint32 == 3 &&
                   ncclInt64 == 4 && ncclUint64 == 5 && ncclFloat16 == 6 && ncclFloat32 == 7 &&
                   ncclFloat64 == 8 && ncclBfloat16 == 9 && ncclFloat8e4m3 == 10 &&
                   ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
               "ncclDataType_t");
_Static_assert(NCCL_SPLIT_NOCOLOR == -1, "NCCL_SPLIT_NOCOLOR");
_Static_assert(offsetof(ncclConfig_t, size) == 0 && offsetof(ncclConfig_t, magic) == 8 &&
                   offsetof(ncclConfig_t, version) == 12 && offsetof(ncclConfig_t, blocking) == 16,
               "the config fields every 2.x caller shares");

int main(void)
{
    int failed = 0, version = 0;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (ncclGetVersion(&version) != ncclSuccess || version != NCCL_VERSION_CODE) {
        printf("FAIL: ncclGetVersion gives %d, the header says %d\n", version, NCCL_VERSION_CODE);
        failed++;
    }
    if (config.magic != 0xcafebeef || config.size != sizeof(ncclConfig_t)) {
        printf("FAIL: NCCL_CONFIG_INITIALIZER: magic 0x%x size %zu\n", config.magic, config.size);
        failed++;
    }
    for (int r = 0; r < ncclNumResults; r++)
        if (ncclGetErrorString((ncclResult_t)r) == NULL ||
            strcmp(ncclGetErrorString((ncclResult_t)r), "unknown result code") == 0) {
            printf("FAIL: no string for result %d\n", r);
            failed++;
        }
    printf("%s: ABI asserts hold against nccl.h %d.%d.%d; ncclGetVersion %d\n",
           failed ? "FAIL" : "ok", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, version);
    return failed ? 1 : 0;
}
