/*
 * A rank for the network-namespace test. Joins the communicator named by COLL_UNIQUE_ID,
 * COLL_RANK and COLL_NRANKS, then runs `iterations` checked all_reduces of `count` float32
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
    const char *ids = getenv(COLL_ENV_UNIQUE_ID), *rs = getenv(COLL_ENV_RANK),
               *ns = getenv(COLL_ENV_NRANKS);
    if (argc != 3 || !ids || !rs || !ns) {
        fprintf(stderr, "usage: netns_rank <iterations> <count> (with %s, %s, %s set)\n",
                COLL_ENV_UNIQUE_ID, COLL_ENV_RANK, COLL_ENV_NRANKS);
        return 2;
    }
    int rank = atoi(rs), nranks = atoi(ns);
    long iters = atol(argv[1]);
    size_t count = (size_t)atol(argv[2]);
    coll_unique_id_t id;
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_unique_id_from_string(&id, ids);
    if (rc == COLL_SUCCESS)
        rc = coll_comm_init_rank(&comm, nranks, id, rank);
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
