/*
 * An exec'd rank for the diagnostics tests: joins the communicator named by COLL_UNIQUE_ID,
 * COLL_RANK and COLL_NRANKS and prints one machine-readable line with the result of
 * coll_comm_init_rank:
 *   DIAG-RESULT rank=<r> rc=<code> t=<CLOCK_MONOTONIC seconds> msg=<coll_get_last_error()>
 * preceded by "DIAG-VERSION <coll_get_version_string()>". On success it runs one all_reduce
 * (checked) and destroys the communicator. The same source is linked against libcoll and
 * against coll_altversion (a build that reports another version).
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

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *ids = getenv(COLL_ENV_UNIQUE_ID), *rs = getenv(COLL_ENV_RANK),
               *ns = getenv(COLL_ENV_NRANKS);
    if (!ids || !rs || !ns) {
        printf("diag_rank: set %s, %s and %s\n", COLL_ENV_UNIQUE_ID, COLL_ENV_RANK,
               COLL_ENV_NRANKS);
        return 2;
    }
    int rank = atoi(rs), nranks = atoi(ns);
    printf("DIAG-VERSION %s\n", coll_get_version_string());
    coll_unique_id_t id;
    coll_result_t rc = coll_unique_id_from_string(&id, ids);
    coll_comm_t comm = NULL;
    if (rc == COLL_SUCCESS)
        rc = coll_comm_init_rank(&comm, nranks, id, rank);
    char msg[2048];
    snprintf(msg, sizeof(msg), "%s", rc == COLL_SUCCESS ? "" : coll_get_last_error());
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    printf("DIAG-RESULT rank=%d rc=%d t=%.6f msg=%s\n", rank, (int)rc, now(), msg);
    if (rc != COLL_SUCCESS)
        return 0;
    int v = rank + 1, sum = 0;
    rc = coll_all_reduce(&v, &sum, 1, COLL_INT32, COLL_SUM, comm, NULL);
    printf("DIAG-ALLREDUCE rc=%d sum=%d expected=%d\n", (int)rc, sum, nranks * (nranks + 1) / 2);
    coll_comm_destroy(comm);
    return 0;
}
