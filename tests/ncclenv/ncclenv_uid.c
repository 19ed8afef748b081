/* Real NVIDIA NCCL (linked from the CUDA toolkit) with libnccl-env.so loaded: ncclGetUniqueId,
 * then the bootstrap address NCCL put in the 128-byte id. Prints
 *   rc=RESULT err=STRING addr=ADDRESS family=FAMILY version=NCCL_VERSION
 * Also checks at compile time that the plugin's ABI codes are nccl.h's.
 * NCCLENV_UID_HOLD_MS=N: then N ms of waiting (a process blocked in a collective). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>

#include <nccl.h>

#include "nccl_env_abi.h"

_Static_assert((int)ncclSuccess == KCOLL_NCCL_SUCCESS &&
                   (int)ncclSystemError == KCOLL_NCCL_SYSTEM_ERROR &&
                   (int)ncclInternalError == KCOLL_NCCL_INTERNAL_ERROR &&
                   (int)ncclInvalidArgument == KCOLL_NCCL_INVALID_ARGUMENT &&
                   (int)ncclInvalidUsage == KCOLL_NCCL_INVALID_USAGE,
               "nccl_env_abi.h's result codes are nccl.h's");

int main(void)
{
    ncclUniqueId id;
    char addr[INET6_ADDRSTRLEN] = "-";
    int version = 0, family;
    ncclResult_t rc;
    struct sockaddr_storage sa;

    memset(&id, 0, sizeof(id));
    rc = ncclGetUniqueId(&id);
    /* NCCL's bootstrap handle: an 8-byte magic, then the root's socket address */
    memcpy(&sa, id.internal + 8, sizeof(struct sockaddr_in6));
    family = sa.ss_family;
    if (family == AF_INET)
        inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, addr, sizeof(addr));
    else if (family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, addr, sizeof(addr));
    ncclGetVersion(&version);
    printf("rc=%d err=%s addr=%s family=%d version=%d\n", (int)rc, ncclGetErrorString(rc), addr,
           family, version);
    fflush(stdout);
    const char *hold = getenv("NCCLENV_UID_HOLD_MS");
    if (hold != NULL) {
        struct timespec ts = {atoi(hold) / 1000, (long)(atoi(hold) % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    return 0;
}
