/*
 * An NCCL program as a framework writes it, under the kcoll agent (coll-run --agent, as in a pod
 * with the sidecar): rank 0 makes the unique id with ncclGetUniqueId and hands it to the others
 * through a file (frameworks use their own store), every rank calls ncclCommInitRank and
 * all-reduces. The agent's pins must win over the environment (the test sets a wrong
 * COLL_SOCKET_IFNAME), and a pinned version this library does not match must fail the init.
 *   nccl_agent NRANKS IDFILE      (rank from COLL_LOCAL_RANK, which coll-run sets)
 * Prints "init ok", "all_reduce ok sum=S" or "init failed: CODE: MESSAGE"; exits 0, 1 (a wrong
 * result or a broken step) or 3 (the init failed).
 */
#define _GNU_SOURCE
#include <nccl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int publish_id(const char *path, const ncclUniqueId *id)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (f == NULL)
        return -1;
    size_t n = fwrite(id, sizeof(*id), 1, f);
    if (fclose(f) != 0 || n != 1)
        return -1;
    return rename(tmp, path);
}

static int read_id(const char *path, ncclUniqueId *id)
{
    const double end = now() + 30;
    while (now() < end) {
        FILE *f = fopen(path, "rb");
        if (f != NULL) {
            size_t n = fread(id, sizeof(*id), 1, f);
            fclose(f);
            if (n == 1)
                return 0;
        }
        usleep(10000);
    }
    return -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *lr = getenv("COLL_LOCAL_RANK");
    if (argc != 3 || lr == NULL) {
        fprintf(stderr, "usage: COLL_LOCAL_RANK=R nccl_agent NRANKS IDFILE\n");
        return 2;
    }
    const int nranks = atoi(argv[1]), rank = atoi(lr);
    ncclUniqueId id;
    if (rank == 0) {
        if (ncclGetUniqueId(&id) != ncclSuccess || publish_id(argv[2], &id) != 0) {
            printf("unique id failed: %s\n", ncclGetLastError(NULL));
            return 1;
        }
    } else if (read_id(argv[2], &id) != 0) {
        printf("no unique id in %s after 30 s\n", argv[2]);
        return 1;
    }
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRank(&comm, nranks, id, rank);
    if (rc != ncclSuccess) {
        printf("init failed: %s: %s\n", ncclGetErrorString(rc), ncclGetLastError(NULL));
        return 3;
    }
    printf("init ok\n");
    int64_t mine = rank + 1, sum = 0;
    rc = ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, comm, NULL);
    const int64_t want = (int64_t)nranks * (nranks + 1) / 2;
    if (rc != ncclSuccess || sum != want) {
        printf("all_reduce failed: %d sum=%lld want=%lld: %s\n", (int)rc, (long long)sum,
               (long long)want, ncclGetLastError(NULL));
        return 1;
    }
    printf("all_reduce ok sum=%lld\n", (long long)sum);
    return ncclCommDestroy(comm) == ncclSuccess ? 0 : 1;
}
