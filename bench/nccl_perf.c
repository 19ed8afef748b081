/*
 * The price of kcoll's NCCL face: ncclAllReduce (kcoll's libnccl.so.2) beside coll_all_reduce
 * (libcoll.so) in the same processes, on the same buffers, alternating rounds. Run under coll-run:
 *   coll-run -n 2 bench/nccl-perf [-b BYTES]... [-r ROUNDS] [-n ITERS] [-o sum|avg|premul]
 * The coll communicator comes from coll-run's unique id; rank 0 makes the NCCL one's id and
 * broadcasts it over the first. Prints, per size, the best time per call of each (microseconds)
 * and the bus bandwidth, as coll-perf computes it (2(n-1)/n * bytes / time). With -o avg both
 * average: coll_all_reduce sums and divides, ncclAllReduce's ncclAvg of float32 is a PreMulSum by
 * 1/n, as NVIDIA NCCL makes it (a scale pass before the sum). With -o premul, coll_all_reduce
 * sums and ncclAllReduce runs a PreMulSum operator (ncclRedOpCreatePreMulSum, scalar 0.5): the
 * price of the scale pass.
 */
#define _GNU_SOURCE
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { OP_SUM, OP_AVG, OP_PREMUL };
static const char *const op_names[] = {"sum", "avg", "premul"};

/* One all_reduce through kcoll's API (which 0) or its NCCL face (1); 1 on success. */
static int call(int which, int op, ncclRedOp_t premul, coll_comm_t coll, ncclComm_t nccl,
                const float *in, float *out, size_t count)
{
    if (which == 0)
        return coll_all_reduce(in, out, count, COLL_FLOAT32, op == OP_AVG ? COLL_AVG : COLL_SUM,
                               coll, NULL) == COLL_SUCCESS;
    const ncclRedOp_t nop = op == OP_AVG ? ncclAvg : op == OP_PREMUL ? premul : ncclSum;
    return ncclAllReduce(in, out, count, ncclFloat32, nop, nccl, NULL) == ncclSuccess;
}

static int die(const char *what, const char *why)
{
    fprintf(stderr, "nccl-perf: %s: %s\n", what, why);
    return 1;
}

int main(int argc, char **argv)
{
    size_t sizes[8] = {0};
    int nsizes = 0, rounds = 5, iters = 20, op = OP_SUM;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "-b") == 0 && nsizes < 8)
            sizes[nsizes++] = strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "-r") == 0)
            rounds = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-n") == 0)
            iters = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "-o") == 0) {
            op = -1;
            for (int k = 0; k < 3; k++)
                if (strcmp(argv[i + 1], op_names[k]) == 0)
                    op = k;
            if (op < 0)
                return die("-o", "the operator is sum, avg or premul");
        }
    }
    if (nsizes == 0) {
        sizes[nsizes++] = 8;
        sizes[nsizes++] = 64u << 20;
    }
    const char *ids = getenv(COLL_ENV_UNIQUE_ID), *rs = getenv(COLL_ENV_RANK),
               *ns = getenv(COLL_ENV_NRANKS);
    if (ids == NULL || rs == NULL || ns == NULL)
        return die("environment", "run it under coll-run");
    int rank = atoi(rs), nranks = atoi(ns);
    coll_unique_id_t cid;
    coll_comm_t coll;
    if (coll_unique_id_from_string(&cid, ids) != COLL_SUCCESS ||
        coll_comm_init_rank(&coll, nranks, cid, rank) != COLL_SUCCESS)
        return die("coll_comm_init_rank", coll_get_last_error());
    ncclUniqueId nid;
    memset(&nid, 0, sizeof(nid));
    if (rank == 0 && ncclGetUniqueId(&nid) != ncclSuccess)
        return die("ncclGetUniqueId", ncclGetLastError(NULL));
    ncclComm_t nccl;
    if (coll_broadcast(&nid, &nid, sizeof(nid), COLL_UINT8, 0, coll, NULL) != COLL_SUCCESS)
        return die("coll_broadcast", coll_get_last_error());
    if (ncclCommInitRank(&nccl, nranks, nid, rank) != ncclSuccess)
        return die("ncclCommInitRank", ncclGetLastError(NULL));
    float half = 0.5f;
    ncclRedOp_t premul = ncclSum;
    if (op == OP_PREMUL && ncclRedOpCreatePreMulSum(&premul, &half, ncclFloat32,
                                                    ncclScalarHostImmediate, nccl) != ncclSuccess)
        return die("ncclRedOpCreatePreMulSum", ncclGetLastError(NULL));
    if (rank == 0)
        printf("# %d ranks, best of %d alternating rounds of %d calls, float32 %s, out of place\n"
               "# %12s %14s %14s %12s %12s %8s\n",
               nranks, rounds, iters, op_names[op], "bytes", "coll (us)", "nccl (us)", "coll GB/s",
               "nccl GB/s", "nccl/coll");
    for (int s = 0; s < nsizes; s++) {
        size_t count = sizes[s] / 4 ? sizes[s] / 4 : 1;
        float *in = malloc(count * 4), *out = malloc(count * 4);
        for (size_t i = 0; i < count; i++)
            in[i] = (float)(rank + 1);
        double best[2] = {1e30, 1e30};
        for (int r = 0; r < rounds; r++)
            for (int which = 0; which < 2; which++) {
                int ok = 1;
                /* two warm-up calls, a one-element all_reduce to line the ranks up, then the
                 * timed calls */
                for (int k = 0; k < 2 && ok; k++)
                    ok = call(which, op, premul, coll, nccl, in, out, count);
                float one = 1, sum;
                ok = ok && coll_all_reduce(&one, &sum, 1, COLL_FLOAT32, COLL_SUM, coll, NULL) ==
                               COLL_SUCCESS;
                double t0 = now();
                for (int k = 0; k < iters && ok; k++)
                    ok = call(which, op, premul, coll, nccl, in, out, count);
                if (!ok)
                    return die("all_reduce",
                               which ? ncclGetLastError(NULL) : coll_get_last_error());
                double t = (now() - t0) / iters;
                if (t < best[which])
                    best[which] = t;
            }
        double f = 2.0 * (nranks - 1) / nranks * (double)(count * 4);
        if (rank == 0)
            printf("  %12zu %14.2f %14.2f %12.3f %12.3f %8.3f\n", count * 4, best[0] * 1e6,
                   best[1] * 1e6, f / best[0] / 1e9, f / best[1] / 1e9, best[1] / best[0]);
        free(in);
        free(out);
    }
    ncclCommDestroy(nccl);
    coll_comm_destroy(coll);
    return 0;
}
