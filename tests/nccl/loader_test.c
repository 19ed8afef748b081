/* A program built against NVIDIA's libnccl.so.2 (linked with it, nothing of kcoll) that runs on
 * kcoll's when the loader is pointed at it (LD_PRELOAD or LD_LIBRARY_PATH): one rank, an
 * all_reduce on host memory. It prints whose NCCL answered; NCCL_DEBUG=VERSION makes kcoll's
 * print its banner. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>

int main(void)
{
    const char *(*kcoll)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "kcollGetVersion");
    int version = 0;
    ncclGetVersion(&version);
    printf("NCCL API %d, %s%s\n", version, kcoll ? "kcoll " : "NVIDIA NCCL", kcoll ? kcoll() : "");
    if (kcoll == NULL)
        return 1;
    ncclUniqueId id;
    ncclComm_t comm;
    float x = 2, y = 0;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess ||
        ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess ||
        ncclCommDestroy(comm) != ncclSuccess) {
        printf("FAIL: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    printf("all_reduce on 1 rank: %g\n", y);
    return y == 2 ? 0 : 1;
}
