/*
 * Shared-memory transport tests: test_shm <case>
 *   transports   which transport each pair uses: 4 ranks on two "hosts" (COLL_TEST_HOST_ID_SUFFIX
 *                a,a,b,b): shared memory inside a host, sockets between; a rank with
 *                COLL_SHM_DISABLE=1 is reached over sockets by everyone; results checked
 *   kill_ring    4 local ranks loop 8 MiB all_reduces (ring: COLL_SHM_DIRECT_MIN=0); the
 *                parent SIGKILLs rank 2
 *   kill_small   the same with 8-byte all_reduces (recursive doubling); rank 1 is killed
 *   kill_mixed   4 ranks on two hosts (a,a,b,b), 8 MiB all_reduces; rank 1 is killed
 *   kill_a2a     5 local ranks loop all_to_alls (every pair has rings); rank 3 is killed
 *   clean        5 local ranks run every collective, then ranks 0-2 destroy, 3-4 abort
 *   reuse        repeated all_reduces of one shape on changing buffers (swapped, in place and
 *                out of place, sums and averages), every element checked: the engine reuses
 *                the op of the previous identical call; 3 ranks on one host, then on two
 * In their own files: direct, kill_direct, kill_cma (shm_direct.c), sweep (shm_sweep.c),
 * ib_wc_error, ib_port_down, ib_qp_error, ib_lazy, ib_fork (shm_ib.c); shared parts in
 * shm_common.c. Survivors of a kill must fail at once (well within COLL_TIMEOUT) with
 * COLL_ERR_REMOTE or COLL_ERR_TIMEOUT naming the victim by rank and pid. After every case no
 * shared-memory segment may be left in /dev/shm. As root the test runs in its own mount namespace
 * with a private tmpfs on /dev/shm, so that anything found there is its own; otherwise it compares
 * the kcoll entries of /dev/shm before and after.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shm_test.h"

/* ---- transports ---- */

static void transports_body(dh_ctx_t *ctx)
{
    const int *disable = ctx->arg;
    if (*disable == ctx->rank)
        dh_setenv("COLL_SHM_DISABLE", "1");
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    dh_record(ctx, "init", rc);
    if (rc != COLL_SUCCESS)
        return;
    /* small (recursive doubling), large (ring) and every pair (all_to_all) */
    const size_t counts[] = {2, 3 * 65536 + 5};
    long bad = 0;
    for (int k = 0; k < 2 && rc == COLL_SUCCESS; k++) {
        size_t n = counts[k];
        float *s = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
        for (size_t i = 0; i < n; i++)
            s[i] = value(i, ctx->rank);
        rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc == COLL_SUCCESS)
            bad += wrong_sums(r, n, ctx->nranks);
        free(s);
        free(r);
    }
    size_t n = 4097, total = n * (size_t)ctx->nranks;
    float *s = malloc(total * sizeof(float)), *r = malloc(total * sizeof(float));
    for (size_t i = 0; i < total; i++)
        s[i] = value(i, ctx->rank);
    if (rc == COLL_SUCCESS)
        rc = coll_all_to_all(s, r, n, COLL_FLOAT32, comm, NULL);
    for (size_t i = 0; i < total && rc == COLL_SUCCESS; i++)
        bad += r[i] != value((size_t)ctx->rank * n + i % n, (int)(i / n));
    free(s);
    free(r);
    dh_record(ctx, "collectives", rc);
    ctx->sh->out[ctx->rank].bad = bad;
    coll_comm_destroy(comm);
}

static void transports_job(const char *name, const char *suffix, int disable,
                           const char *const want[4])
{
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", suffix);
    debug_on("INIT");
    dh_opts_t o = {.name = name,
                   .nranks = 4,
                   .deadline_s = 60,
                   .body = transports_body,
                   .arg = &disable,
                   .quiet = 1};
    dh_log("--- %s", name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    for (int r = 0; r < 4; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "%s: rank %d", name, r);
        CHECK(out->bad == 0, "%s: rank %d: %ld wrong elements", name, r, out->bad);
        char line[128];
        snprintf(line, sizeof(line), "rank %d: %s", r, want[r]);
        CHECK(dh_count_lines(dh_output(j, r), line, NULL) == 1, "%s: rank %d logs \"%s\"", name, r,
              line);
    }
    dh_free(j);
    debug_off();
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", NULL);
}

static void test_transports(void)
{
    const char *const local[4] = {
        "3 peers over shared memory, 0 over sockets", "3 peers over shared memory, 0 over sockets",
        "3 peers over shared memory, 0 over sockets", "3 peers over shared memory, 0 over sockets"};
    transports_job("one host", NULL, -1, local);
    const char *const two[4] = {
        "1 peers over shared memory, 2 over sockets", "1 peers over shared memory, 2 over sockets",
        "1 peers over shared memory, 2 over sockets", "1 peers over shared memory, 2 over sockets"};
    transports_job("two hosts (a,a,b,b)", "a,a,b,b", -1, two);
    const char *const three[4] = {
        "1 peers over shared memory, 2 over sockets", "0 peers over shared memory, 3 over sockets",
        "1 peers over shared memory, 2 over sockets", "0 peers over shared memory, 3 over sockets"};
    transports_job("three hosts (a,b,a,c)", "a,b,a,c", -1, three);
    const char *const off2[4] = {
        "2 peers over shared memory, 1 over sockets", "2 peers over shared memory, 1 over sockets",
        "0 peers over shared memory, 3 over sockets", "2 peers over shared memory, 1 over sockets"};
    transports_job("one host, rank 2 with COLL_SHM_DISABLE=1", NULL, 2, off2);
    check_no_segments("transports");
}

/* ---- clean run ---- */

static void clean_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const size_t n = 300001;
    const int nr = ctx->nranks;
    float *s = calloc(n * (size_t)nr, sizeof(float)), *r = calloc(n * (size_t)nr, sizeof(float));
    for (int k = 0; k < 3 && rc == COLL_SUCCESS; k++) {
        rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc == COLL_SUCCESS)
            rc = coll_all_to_all(s, r, n, COLL_FLOAT32, comm, NULL);
        if (rc == COLL_SUCCESS)
            rc = coll_broadcast(s, r, n, COLL_FLOAT32, k, comm, NULL);
        if (rc == COLL_SUCCESS)
            rc = coll_reduce(s, r, n, COLL_FLOAT32, COLL_MAX, nr - 1 - k, comm, NULL);
        if (rc == COLL_SUCCESS)
            rc = coll_all_gather(s, r, n, COLL_FLOAT32, comm, NULL);
        if (rc == COLL_SUCCESS)
            rc = coll_reduce_scatter(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc == COLL_SUCCESS)
            rc = coll_all_reduce(s, r, 1, COLL_FLOAT32, COLL_SUM, comm, NULL);
    }
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: collectives", ctx->rank);
    /* No barrier before a destroy: a rank that finishes first leaves while the others may still
     * read what it sent. An abort tells everyone that the communicator failed, so ranks 3 and 4
     * abort only once every rank is done. */
    if (ctx->rank >= 3) {
        wait_done(ctx, nr, 40);
        CHECK_RC(coll_comm_abort(comm), COLL_SUCCESS, coll_get_last_error(), "abort");
    } else {
        dh_add(&ctx->sh->user[0], 1);
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    }
    free(s);
    free(r);
}

static void test_clean(void)
{
    for (int round = 0; round < 3; round++) {
        dh_opts_t o = {.name = "clean", .nranks = 5, .deadline_s = 60, .body = clean_body};
        dh_log("--- every collective on 5 local ranks, then destroy (ranks 0-2) / abort (3-4)");
        dh_job_t *j = dh_start(&o);
        if (j == NULL)
            return;
        dh_wait(j);
        dh_free(j);
        check_no_segments("clean");
    }
}

/* ---- op reuse ---- */

static float rvalue(size_t i, int rank, int call)
{
    return (float)((i * 5 + (size_t)rank * 11 + (size_t)call * 3) % 17);
}

static void reuse_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const size_t counts[] = {2, 1000, 300007}; /* recursive doubling, and the ring */
    long bad = 0, calls = 0;
    for (int c = 0; c < 3 && rc == COLL_SUCCESS; c++) {
        const size_t n = counts[c];
        float *buf[3];
        for (int b = 0; b < 3; b++)
            buf[b] = malloc(n * sizeof(float));
        /* (send, recv) buffer indices; equal indices: in place */
        static const int plan[][2] = {{0, 1}, {0, 1}, {1, 2}, {2, 0}, {0, 0}, {1, 1},
                                      {1, 0}, {0, 1}, {2, 2}, {2, 1}, {0, 2}, {0, 2}};
        for (int k = 0; k < (int)(sizeof(plan) / sizeof(plan[0])) && rc == COLL_SUCCESS; k++) {
            int call = (int)calls++;
            coll_op_t op = k % 4 == 3 ? COLL_AVG : COLL_SUM;
            float *sb = buf[plan[k][0]], *rb = buf[plan[k][1]];
            for (size_t i = 0; i < n; i++)
                sb[i] = rvalue(i, ctx->rank, call);
            if (rb != sb)
                memset(rb, 0xCD, n * sizeof(float));
            rc = coll_all_reduce(sb, rb, n, COLL_FLOAT32, op, comm, NULL);
            for (size_t i = 0; i < n && rc == COLL_SUCCESS; i++) {
                float want = 0;
                for (int q = 0; q < ctx->nranks; q++)
                    want += rvalue(i, q, call);
                if (op == COLL_AVG)
                    want /= (float)ctx->nranks;
                bad += rb[i] != want;
            }
        }
        for (int b = 0; b < 3; b++)
            free(buf[b]);
    }
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: all_reduces", ctx->rank);
    CHECK(bad == 0, "rank %d: %ld wrong elements over %ld reused all_reduces", ctx->rank, bad,
          calls);
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
}

static void test_reuse(void)
{
    const char *hosts[] = {NULL, "a,a,b"};
    for (int h = 0; h < 2; h++) {
        dh_setenv("COLL_TEST_HOST_ID_SUFFIX", hosts[h]);
        dh_opts_t o = {.name = "reuse", .nranks = 3, .deadline_s = 60, .body = reuse_body};
        dh_log("--- reused all_reduce ops on changing buffers, 3 ranks, %s",
               h ? "two hosts (a,a,b)" : "one host");
        dh_job_t *j = dh_start(&o);
        if (j == NULL)
            return;
        dh_wait(j);
        dh_free(j);
    }
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", NULL);
    check_no_segments("reuse");
}

/* ---- kills in a loop ---- */

static void test_kill_ring(void)
{
    targs_t a = {.name = "kill_ring", .victim = 2, .count = 2u << 20, .rings = 1};
    kill_case(&a, 4);
}

static void test_kill_small(void)
{
    targs_t a = {.name = "kill_small", .victim = 1, .count = 2};
    kill_case(&a, 4);
}

static void test_kill_mixed(void)
{
    targs_t a = {.name = "kill_mixed", .victim = 1, .count = 2u << 20, .hosts = "a,a,b,b"};
    kill_case(&a, 4);
}

static void test_kill_a2a(void)
{
    targs_t a = {.name = "kill_a2a", .victim = 3, .count = 65536 + 3, .a2a = 1, .rings = 1};
    kill_case(&a, 5);
}

static const struct {
    const char *name;
    void (*run)(void);
} cases[] = {
    {"transports", test_transports},
    {"kill_ring", test_kill_ring},
    {"kill_small", test_kill_small},
    {"kill_mixed", test_kill_mixed},
    {"kill_a2a", test_kill_a2a},
    {"clean", test_clean},
    {"reuse", test_reuse},
    {"kill_direct", test_kill_direct},
    {"kill_cma", test_kill_cma},
    {"direct", test_direct},
    {"ib_wc_error", test_ib_wc_error},
    {"ib_port_down", test_ib_port_down},
    {"ib_qp_error", test_ib_qp_error},
    {"sweep", test_sweep},
    {"ib_lazy", test_ib_lazy},
    {"ib_fork", test_ib_fork},
    {"ib_efa", test_ib_efa},
};

int main(int argc, char **argv)
{
    dh_init();
    const size_t ncases = sizeof(cases) / sizeof(cases[0]);
    for (size_t k = 0; argc == 2 && k < ncases; k++) {
        if (strcmp(argv[1], cases[k].name) == 0) {
            private_dev_shm();
            cases[k].run();
            return dh_finish();
        }
    }
    fprintf(stderr, "usage: test_shm <case>; cases:");
    for (size_t k = 0; k < ncases; k++)
        fprintf(stderr, " %s", cases[k].name);
    fprintf(stderr, "\n");
    return 2;
}
