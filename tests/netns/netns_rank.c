/*
 * A rank for the network-namespace test. Joins the communicator its environment names
 * (coll_comm_init_env: COLL_UNIQUE_ID, COLL_RANK and COLL_NRANKS, or torchrun's MASTER_ADDR,
 * MASTER_PORT, RANK and WORLD_SIZE), then runs `iterations` checked all_reduces of `count` float32
 * (0 iterations: until one fails, at most 120 s), printing "INIT rank=<r> t=<monotonic s>" once
 * the communicator exists and "ITER <n>" after each call, and ends with
 *   DIAG-RESULT rank=<r> call=<init|all_reduce> rc=<COLL_... name> t=<monotonic s> iters=<n>
 *   bad=<wrong elements> msg=<coll_get_last_error()>
 *   netns_rank <iterations> <count> [all_to_all]
 * (all_to_all: checked all_to_alls of count float32 per peer instead, reported as call=all_to_all)
 *   netns_rank --now        prints CLOCK_MONOTONIC seconds (shared by every namespace)
 */
#define _GNU_SOURCE
#include <stdbool.h>
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

/* The closing line; the communicator destroyed (or aborted after a failure), the buffers freed. */
static int finish(coll_comm_t comm, int rank, const char *call, coll_result_t rc, long done,
                  long bad, float *s, float *r)
{
    result(rank, call, rc, done, bad);
    if (rc == COLL_SUCCESS)
        coll_comm_destroy(comm);
    else
        coll_comm_abort(comm);
    free(s);
    free(r);
    return 0;
}

/* Checked all_to_alls: block j of rank i holds i * 1000 + j + iteration. */
static int all_to_all(coll_comm_t comm, int rank, int nranks, long iters, size_t count)
{
    const size_t n = count * (size_t)nranks;
    float *s = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    long done = 0, bad = 0;
    coll_result_t rc = COLL_SUCCESS;
    while (s != NULL && r != NULL && done < iters) {
        for (size_t i = 0; i < n; i++)
            s[i] = (float)(rank * 1000 + (int)(i / count) + done);
        rc = coll_all_to_all(s, r, count, COLL_FLOAT32, comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        for (size_t i = 0; i < n; i++)
            bad += r[i] != (float)((int)(i / count) * 1000 + rank + done);
        printf("ITER %ld\n", ++done);
    }
    return finish(comm, rank, "all_to_all", rc, done, bad, s, r);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 2 && strcmp(argv[1], "--now") == 0) {
        printf("%.3f\n", now());
        return 0;
    }
    const bool a2a = argc == 4 && strcmp(argv[3], "all_to_all") == 0;
    if (argc != 3 && !a2a) {
        fprintf(
            stderr,
            "usage: netns_rank <iterations> <count> [all_to_all] (with COLL_UNIQUE_ID, COLL_RANK "
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
    printf("INIT rank=%d t=%.3f\n", rank, now());
    if (a2a)
        return all_to_all(comm, rank, nranks, iters, count);
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
    return finish(comm, rank, "all_reduce", rc, done, bad, s, r);
}
