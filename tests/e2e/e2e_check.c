/*
 * e2e_check: one rank of an end-to-end test. It creates its communicator the way a pod does,
 * from the kcoll agent (COLL_AGENT_SOCKET, coll_comm_init_agent), and then either checks
 * collectives or keeps a large all_reduce running so that a test can kill a rank mid-operation.
 *
 *   e2e_check [--mode check|loop] [--count N] [--iters N]
 *   e2e_check --version          print the library's version string
 *
 * Output, one line each, for the driver to assert on:
 *   init ok rank=R nranks=N
 *   init failed result=ERR_VERSION msg=...              (exit 3)
 *   all_reduce ok count=N | all_reduce avg ok count=N | all_gather ok ... | broadcast ok ... |
 *   all_to_all ok ...
 *   WRONG all_reduce i=I got=G want=W                     (exit 1)
 *   looping rank=R                                        (loop mode, after the first iteration)
 *   collective failed op=all_reduce result=ERR_REMOTE msg=...   (exit 4)
 *   done rank=R
 */
#include <coll.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *result_name(coll_result_t r)
{
    switch (r) {
#define COLL_RESULT_NAME_(name, val, str)                                                          \
    case COLL_##name:                                                                              \
        return #name;
        COLL_RESULT_MAP(COLL_RESULT_NAME_)
#undef COLL_RESULT_NAME_
    default:
        return "UNKNOWN";
    }
}

static int g_rank = -1;

/* A failed collective: name it and the library's message, then leave (exit 4). */
static void collective_failed(coll_comm_t comm, const char *op, coll_result_t r)
{
    printf("collective failed op=%s result=%s msg=%s\n", op, result_name(r), coll_get_last_error());
    fflush(stdout);
    (void)coll_comm_destroy(comm);
    exit(4);
}

#define RUN(comm, op, call)                                                                        \
    do {                                                                                           \
        coll_result_t r_ = (call);                                                                 \
        if (r_ != COLL_SUCCESS)                                                                    \
            collective_failed(comm, op, r_);                                                       \
    } while (0)

static int wrong(const char *op, size_t i, double got, double want)
{
    printf("WRONG %s rank=%d i=%zu got=%.17g want=%.17g\n", op, g_rank, i, got, want);
    fflush(stdout);
    return 1;
}

/* all_reduce (int32 and float32 sums: recursive doubling for the small count, ring for the
 * large one), all_gather and a broadcast from the last rank, every element checked. */
static int check_collectives(coll_comm_t comm, int rank, int nranks, size_t count)
{
    size_t counts[2] = {7, count};
    int bad = 0;

    for (int k = 0; k < 2 && !bad; k++) {
        size_t n = counts[k];
        int32_t *ib = malloc(n * sizeof(*ib)), *ob = malloc(n * sizeof(*ob));
        float *fb = malloc(n * sizeof(*fb));
        if (ib == NULL || ob == NULL || fb == NULL) {
            printf("out of memory\n");
            exit(2);
        }
        for (size_t i = 0; i < n; i++) {
            ib[i] = (int32_t)((rank + 1) * (int)(i % 7 + 1));
            fb[i] = (float)((rank % 3) - 1) * (float)(i % 5); /* small integers: exact sums */
        }
        RUN(comm, "all_reduce", coll_all_reduce(ib, ob, n, COLL_INT32, COLL_SUM, comm, NULL));
        RUN(comm, "all_reduce", coll_all_reduce(fb, fb, n, COLL_FLOAT32, COLL_SUM, comm, NULL));
        double fsum = 0;
        for (int r = 0; r < nranks; r++)
            fsum += (double)((r % 3) - 1);
        for (size_t i = 0; i < n && !bad; i++) {
            int32_t want = (int32_t)(nranks * (nranks + 1) / 2 * (int)(i % 7 + 1));
            if (ob[i] != want)
                bad = wrong("all_reduce", i, ob[i], want);
            else if (fb[i] != (float)(fsum * (double)(i % 5)))
                bad = wrong("all_reduce", i, fb[i], fsum * (double)(i % 5));
        }
        free(ib);
        free(ob);
        free(fb);
        if (!bad)
            printf("all_reduce ok count=%zu\n", n);
    }

    /* average: rank + i % 5 everywhere, so the mean (nranks-1)/2 + i % 5 is exact in float */
    float *avg = malloc(count * sizeof(*avg));
    if (avg == NULL) {
        printf("out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < count; i++)
        avg[i] = (float)rank + (float)(i % 5);
    RUN(comm, "all_reduce", coll_all_reduce(avg, avg, count, COLL_FLOAT32, COLL_AVG, comm, NULL));
    for (size_t i = 0; i < count && !bad; i++)
        if (avg[i] != (float)(nranks - 1) / 2.0f + (float)(i % 5))
            bad = wrong("all_reduce avg", i, avg[i], (nranks - 1) / 2.0 + (double)(i % 5));
    free(avg);
    if (!bad)
        printf("all_reduce avg ok count=%zu\n", count);

    size_t per = count / (size_t)nranks > 0 ? count / (size_t)nranks : 1;
    uint32_t *mine = malloc(per * sizeof(*mine));
    uint32_t *all = malloc(per * (size_t)nranks * sizeof(*all));
    if (mine == NULL || all == NULL) {
        printf("out of memory\n");
        exit(2);
    }
    for (size_t i = 0; i < per; i++)
        mine[i] = (uint32_t)rank * 1000003u + (uint32_t)i;
    memset(all, 0xee, per * (size_t)nranks * sizeof(*all));
    RUN(comm, "all_gather", coll_all_gather(mine, all, per, COLL_UINT32, comm, NULL));
    for (int r = 0; r < nranks && !bad; r++)
        for (size_t i = 0; i < per && !bad; i++)
            if (all[(size_t)r * per + i] != (uint32_t)r * 1000003u + (uint32_t)i)
                bad = wrong("all_gather", (size_t)r * per + i, all[(size_t)r * per + i],
                            (double)((uint32_t)r * 1000003u + (uint32_t)i));
    if (!bad)
        printf("all_gather ok per_rank=%zu\n", per);

    int root = nranks - 1;
    for (size_t i = 0; i < per * (size_t)nranks; i++)
        all[i] = rank == root ? (uint32_t)(i * 2654435761u) : 0xdeadbeefu;
    RUN(comm, "broadcast",
        coll_broadcast(all, all, per * (size_t)nranks, COLL_UINT32, root, comm, NULL));
    for (size_t i = 0; i < per * (size_t)nranks && !bad; i++)
        if (all[i] != (uint32_t)(i * 2654435761u))
            bad = wrong("broadcast", i, all[i], (double)(uint32_t)(i * 2654435761u));
    if (!bad)
        printf("broadcast ok count=%zu root=%d\n", per * (size_t)nranks, root);

    /* all_to_all: block j of rank r goes to rank j, which finds r's block at r */
    uint32_t *recv = malloc(per * (size_t)nranks * sizeof(*recv));
    if (recv == NULL) {
        printf("out of memory\n");
        exit(2);
    }
    for (int j = 0; j < nranks; j++)
        for (size_t i = 0; i < per; i++)
            all[(size_t)j * per + i] = (uint32_t)rank * 65599u + (uint32_t)j * 131u + (uint32_t)i;
    RUN(comm, "all_to_all", coll_all_to_all(all, recv, per, COLL_UINT32, comm, NULL));
    for (int r = 0; r < nranks && !bad; r++)
        for (size_t i = 0; i < per && !bad; i++) {
            uint32_t want = (uint32_t)r * 65599u + (uint32_t)rank * 131u + (uint32_t)i;
            if (recv[(size_t)r * per + i] != want)
                bad = wrong("all_to_all", (size_t)r * per + i, recv[(size_t)r * per + i], want);
        }
    if (!bad)
        printf("all_to_all ok per_rank=%zu\n", per);
    free(recv);
    free(mine);
    free(all);
    fflush(stdout);
    return bad;
}

/* Large all_reduces, one after the other, until iters are done or one fails. */
static int loop_all_reduce(coll_comm_t comm, int rank, int nranks, size_t count, long iters)
{
    float *buf = malloc(count * sizeof(*buf));
    if (buf == NULL) {
        printf("out of memory\n");
        exit(2);
    }
    for (long it = 0; it < iters; it++) {
        for (size_t i = 0; i < count; i++)
            buf[i] = 1.0f;
        RUN(comm, "all_reduce",
            coll_all_reduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, comm, NULL));
        if (buf[0] != (float)nranks || buf[count - 1] != (float)nranks)
            return wrong("all_reduce", 0, buf[0], nranks);
        if (it == 0) {
            printf("looping rank=%d\n", rank);
            fflush(stdout);
        }
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = "check";
    size_t count = 1 << 18;
    long iters = 1000000;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("%s\n", coll_get_version_string());
            return 0;
        } else if (strcmp(argv[i], "--mode") == 0 && i + 1 < argc) {
            mode = argv[++i];
        } else if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
            count = strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
            iters = strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr,
                    "usage: e2e_check [--mode check|loop] [--count N] [--iters N] | --version\n");
            return 2;
        }
    }
    if (count == 0 || iters <= 0 || (strcmp(mode, "check") != 0 && strcmp(mode, "loop") != 0)) {
        fprintf(stderr, "e2e_check: bad --mode, --count or --iters\n");
        return 2;
    }

    coll_comm_t comm = NULL;
    coll_result_t r = coll_comm_init_agent(&comm);
    if (r != COLL_SUCCESS) {
        printf("init failed result=%s msg=%s\n", result_name(r), coll_get_last_error());
        return 3;
    }
    int rank = -1, nranks = 0;
    if (coll_comm_user_rank(comm, &rank) != COLL_SUCCESS ||
        coll_comm_count(comm, &nranks) != COLL_SUCCESS) {
        printf("cannot read rank and size: %s\n", coll_get_last_error());
        return 1;
    }
    g_rank = rank;
    printf("init ok rank=%d nranks=%d\n", rank, nranks);
    if (getenv("LOCAL_RANK") != NULL) /* several ranks per pod: which process this is */
        printf("local rank=%d local_rank=%s pid=%d\n", rank, getenv("LOCAL_RANK"), (int)getpid());
    fflush(stdout);

    int bad = strcmp(mode, "check") == 0 ? check_collectives(comm, rank, nranks, count)
                                         : loop_all_reduce(comm, rank, nranks, count, iters);
    r = coll_comm_destroy(comm);
    if (r != COLL_SUCCESS) {
        printf("destroy failed result=%s msg=%s\n", result_name(r), coll_get_last_error());
        return 1;
    }
    printf("done rank=%d\n", rank);
    return bad;
}
