/*
 * A rank for the network-namespace test. Joins the communicator its environment names
 * (coll_comm_init_env: COLL_UNIQUE_ID, COLL_RANK and COLL_NRANKS, or torchrun's MASTER_ADDR,
 * MASTER_PORT, RANK and WORLD_SIZE), then runs `iterations` checked all_reduces of `count` float32
 * (0 iterations: until one fails, at most 120 s), printing "ITER <n>" after each, and ends with
 *   DIAG-RESULT rank=<r> call=<init|all_reduce> rc=<COLL_... name> t=<monotonic s> iters=<n>
 *   bad=<wrong elements> msg=<coll_get_last_error()>
 *   netns_rank <iterations> <count>
 *   netns_rank --now        prints CLOCK_MONOTONIC seconds (shared by every namespace)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "coll.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static const char *rc_name(coll_result_t rc)
{
    switch (rc) {
#define NAME_(name, val, str)                                                                      \
    case COLL_##name:                                                                              \
        return "COLL_" #name;
        COLL_RESULT_MAP(NAME_)
#undef NAME_
    default:
        return "COLL_?";
    }
}

static void result(int rank, const char *call, coll_result_t rc, long iters, long bad)
{
    char msg[2048];
    snprintf(msg, sizeof(msg), "%s", rc == COLL_SUCCESS ? "" : coll_get_last_error());
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    printf("DIAG-RESULT rank=%d call=%s rc=%s t=%.3f iters=%ld bad=%ld msg=%s\n", rank, call,
           rc_name(rc), now(), iters, bad, msg);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "--now") == 0) {
        printf("%.3f\n", now());
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: netns_rank <iterations> <count> (with COLL_UNIQUE_ID, COLL_RANK "
                        "and COLL_NRANKS, or MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE)\n");
        return 2;
    }
    long iters = atol(argv[1]);
    size_t count = (size_t)atol(argv[2]);
    coll_comm_t comm = NULL;
    const char *rs = getenv(COLL_ENV_RANK) ? getenv(COLL_ENV_RANK) : getenv("RANK");
    int rank = rs ? atoi(rs) : -1, nranks = 0;
    /* whichever launcher set the environment: coll-run's variables or torchrun's */
    coll_result_t rc = coll_comm_init_env(&comm);
    if (rc == COLL_SUCCESS)
        rc = coll_comm_count(comm, &nranks);
    if (rc != COLL_SUCCESS) {
        result(rank, "init", rc, 0, 0);
        return 0;
    }
    float *s = malloc(count * sizeof(float)), *r = malloc(count * sizeof(float));
    long done = 0, bad = 0;
    double end = now() + 120;
    while ((iters == 0 && now() < end) || done < iters) {
        for (size_t i = 0; i < count; i++)
            s[i] = (float)((i + (size_t)rank + (size_t)done) % 13);
        rc = coll_all_reduce(s, r, count, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int k = 0; k < nranks; k++)
                want += (float)((i + (size_t)k + (size_t)done) % 13);
            bad += r[i] != want;
        }
        printf("ITER %ld\n", ++done);
    }
    result(rank, "all_reduce", rc, done, bad);
    if (rc == COLL_SUCCESS)
        coll_comm_destroy(comm);
    else
        coll_comm_abort(comm);
    free(s);
    free(r);
    return 0;
}
