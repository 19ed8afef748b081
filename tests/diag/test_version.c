/*
 * Version drift: a 3-rank job where one rank runs a library built with another version string
 * (coll_altversion, "9.9.9-test"). The bootstrap root must fail every rank with COLL_ERR_VERSION
 * and a message that names the odd rank and both versions.
 *   test_version <diag_rank> <diag_rank_alt>
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dh.h"

#define ALT_VERSION "9.9.9-test"

typedef struct {
    char *prog[2]; /* [0] this build, [1] the alternative build */
    int alt_rank;
    char *argv[DH_MAX_RANKS][2];
} vargs_t;

static char *const *argv_for(int rank, void *arg)
{
    vargs_t *a = arg;
    a->argv[rank][0] = a->prog[rank == a->alt_rank];
    a->argv[rank][1] = NULL;
    return a->argv[rank];
}

static void run_case(vargs_t *a, int alt_rank)
{
    const int n = 3;
    a->alt_rank = alt_rank;
    char name[64];
    snprintf(name, sizeof(name), "version drift, rank %d on %s", alt_rank, ALT_VERSION);
    dh_log("--- %s", name);
    dh_opts_t o = {.name = name, .nranks = n, .deadline_s = 30, .argv_for = argv_for, .arg = a};
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    const char *mine = coll_get_version_string();
    char pidpat[64];
    for (int r = 0; r < n; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        const char *want = r == alt_rank ? ALT_VERSION : mine;
        char vline[64];
        snprintf(vline, sizeof(vline), "DIAG-VERSION %s", want);
        CHECK_HAS(dh_output(j, r), vline, "rank %d runs the intended library build", r);
        if (!CHECK(out->done, "rank %d printed no result", r))
            continue;
        CHECK_RC(out->rc, COLL_ERR_VERSION, out->msg, "rank %d: coll_comm_init_rank", r);
        CHECK_HAS(out->msg, "version mismatch: ", "rank %d", r);
        CHECK_HAS(out->msg, ALT_VERSION, "rank %d: message names the alternative version", r);
        CHECK_HAS(out->msg, mine, "rank %d: message names this build's version", r);
        CHECK_HAS(out->msg, "Run one library build on every node", "rank %d: says what to do", r);
        /* rank 0's version is the one the job pins; the message names the odd rank(s) by pid */
        snprintf(pidpat, sizeof(pidpat), "rank %d (pid %d on ", alt_rank, (int)dh_pid(j, alt_rank));
        CHECK_HAS(out->msg, pidpat, "rank %d: message names rank %d with its pid", r, alt_rank);
        if (alt_rank == 0) {
            for (int k = 1; k < n; k++) {
                snprintf(pidpat, sizeof(pidpat), "rank %d (pid %d on ", k, (int)dh_pid(j, k));
                CHECK_HAS(out->msg, pidpat, "rank %d: names every rank that differs from rank 0",
                          r);
            }
            snprintf(pidpat, sizeof(pidpat), "but rank 0 (pid %d on", (int)dh_pid(j, 0));
        } else {
            snprintf(pidpat, sizeof(pidpat), "has kcoll %s (wire protocol", ALT_VERSION);
            CHECK_HAS(out->msg, pidpat, "rank %d", r);
            snprintf(pidpat, sizeof(pidpat), "but rank 0 (pid %d on", (int)dh_pid(j, 0));
        }
        CHECK_HAS(out->msg, pidpat, "rank %d: message names the pinning rank 0", r);
        CHECK(out->t - dh_t_start(j) < 10.0, "rank %d failed %.1f s after the start (want < 10)", r,
              out->t - dh_t_start(j));
        CHECK(!dh_contains(dh_output(j, r), "DIAG-ALLREDUCE"),
              "rank %d ran a collective on a mismatched communicator", r);
    }
    dh_free(j);
}

/* CUDA versions (COLL_TEST_CUDA_VERSIONS stands in for the runtime and cuDriverGetVersion,
 * which need a GPU node). Mixed drivers, as real clusters run them, start the job, and rank 0
 * says which rank runs what; a driver of an older CUDA major version than the runtime cannot run
 * the build: every rank fails naming that rank, its driver, and the fix. */
static dh_job_t *cuda_job(vargs_t *a, const char *name, const char *versions)
{
    a->alt_rank = -1;
    dh_log("--- %s (%s)", name, versions);
    if (setenv("COLL_TEST_CUDA_VERSIONS", versions, 1) != 0) {
        CHECK(0, "setenv failed");
        return NULL;
    }
    dh_opts_t o = {.name = name, .nranks = 3, .deadline_s = 30, .argv_for = argv_for, .arg = a};
    dh_job_t *j = dh_start(&o);
    unsetenv("COLL_TEST_CUDA_VERSIONS");
    if (j != NULL)
        dh_wait(j);
    return j;
}

static void run_cuda_case(vargs_t *a)
{
    dh_job_t *j =
        cuda_job(a, "mixed CUDA drivers, rank 1 on 12.8", "12040/12060,12040/12080,12040/12060");
    char pat[160];
    for (int r = 0; j != NULL && r < 3; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        if (!CHECK(out->done, "rank %d printed no result", r))
            continue;
        CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d: mixed drivers start the job", r);
        CHECK(dh_contains(dh_output(j, r), "DIAG-ALLREDUCE"), "rank %d ran its all_reduce", r);
    }
    if (j != NULL) {
        CHECK_HAS(dh_output(j, 0), "rank 1 (", "rank 0 names the rank on another driver");
        CHECK_HAS(dh_output(j, 0), "runs CUDA driver 12.8", "rank 0 names its driver");
        CHECK_HAS(dh_output(j, 0), "(rank 0 (", "rank 0 gives its own versions");
        CHECK(!dh_contains(dh_output(j, 0), "rank 2 ("), "rank 2 (rank 0's driver) is not named");
        dh_free(j);
    }
    j = cuda_job(a, "rank 1's driver of an older CUDA major",
                 "12040/12060,12040/11080,12040/12060");
    for (int r = 0; j != NULL && r < 3; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        if (!CHECK(out->done, "rank %d printed no result", r))
            continue;
        CHECK_RC(out->rc, COLL_ERR_VERSION, out->msg, "rank %d: coll_comm_init_rank", r);
        snprintf(pat, sizeof(pat), "rank 1 (pid %d on ", (int)dh_pid(j, 1));
        CHECK_HAS(out->msg, pat, "rank %d: names rank 1", r);
        CHECK_HAS(out->msg, "driver 11.8 for CUDA runtime 12.4", "rank %d: rank 1's versions", r);
        CHECK_HAS(out->msg, "update the NVIDIA driver on that node", "rank %d: the fix", r);
        CHECK(!dh_contains(out->msg, "rank 2 ("), "rank %d: rank 2 is not named", r);
        CHECK(!dh_contains(dh_output(j, r), "DIAG-ALLREDUCE"), "rank %d ran a collective", r);
    }
    if (j != NULL)
        dh_free(j);
}

int main(int argc, char **argv)
{
    dh_init();
    if (argc != 3) {
        printf("usage: test_version <diag_rank> <diag_rank_alt>\n");
        return 2;
    }
    vargs_t a;
    memset(&a, 0, sizeof(a));
    a.prog[0] = argv[1];
    a.prog[1] = argv[2];
    CHECK(strcmp(coll_get_version_string(), ALT_VERSION) != 0, "this build already has version %s",
          ALT_VERSION);
    run_case(&a, 1);
    run_case(&a, 0);
    run_cuda_case(&a);
    return dh_finish();
}
