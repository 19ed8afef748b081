/*
 * Shared-memory transport tests: test_shm <case>
 *   transports   which transport each pair uses: 4 ranks on two "hosts" (COLL_HOST_ID_SUFFIX
 *                a,a,b,b): shared memory inside a host, sockets between; a rank with
 *                COLL_SHM_DISABLE=1 is reached over sockets by everyone; results checked
 *   kill_ring    4 local ranks loop 8 MiB all_reduces (ring); the parent SIGKILLs rank 2
 *   kill_small   the same with 8-byte all_reduces (recursive doubling); rank 1 is killed
 *   kill_mixed   4 ranks on two hosts (a,a,b,b), 8 MiB all_reduces; rank 1 is killed
 *   kill_a2a     5 local ranks loop all_to_alls (every pair has rings); rank 3 is killed
 *   clean        5 local ranks run every collective, then ranks 0-2 destroy, 3-4 abort
 *   reuse        repeated all_reduces of one shape on changing buffers (swapped, in place and
 *                out of place, sums and averages), every element checked: the engine reuses
 *                the op of the previous identical call; 3 ranks on one host, then on two
 *   kill_direct  4 local ranks loop 8 MiB all_reduces on coll_mem_alloc buffers (the
 *                single-copy path); the parent SIGKILLs rank 2
 *   ib_wc_error  (with tests/ib/fake_verbs.c and RequireIB) 2 ranks on two hosts loop 8 MiB
 *                all_reduces; rank 1's fake HCA fails its 40th RDMA write with "transport retry
 *                counter exceeded": rank 1 fails naming the verb's status, the HCA, the port
 *                and rank 0; rank 0 fails with rank 1's report
 *   ib_port_down the same with port 1 of rank 1's HCA going down after 40 writes
 *   ib_lazy      (fake verbs, RequireIB) 4 ranks on 4 hosts: a ring exchange of send/recv
 *                connects each rank to its 2 neighbours only (2 connection lines per rank);
 *                an all_to_all afterwards connects the third pair; results checked
 *   sweep        names left in /dev/shm by pairs that both died: a kcoll segment of this
 *                version, an hour old, that nobody holds locked is removed when a communicator
 *                starts (and logged); one locked by a live process, a young one, one of another
 *                segment version and a file that is no segment stay
 *   direct       3 local ranks, coll_mem_alloc buffers: every collective, checked, takes the
 *                single-copy path (each rank logs so once); then rank 1 turns non-dumpable (its
 *                /proc/<pid>/fd cannot be opened): every rank logs the two-copy path and the
 *                results stay exact; then rank 0 calls all_reduce where the others call
 *                all_gather: a collective mismatch naming the single-copy path
 * Survivors of a kill must fail at once (well within COLL_TIMEOUT) with COLL_ERR_REMOTE or
 * COLL_ERR_TIMEOUT naming the victim by rank and pid. After every case no shared-memory
 * segment may be left in /dev/shm. As root the test runs in its own mount namespace with a
 * private tmpfs on /dev/shm, so that anything found there is its own; otherwise it compares
 * the kcoll entries of /dev/shm before and after.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>

#include "dh.h"

#define MARGIN 3.0 /* seconds: survivors of a kill must fail well before COLL_TIMEOUT (10 s) */

enum {
    C_TRANSPORTS,
    C_KILL_RING,
    C_KILL_SMALL,
    C_KILL_MIXED,
    C_KILL_A2A,
    C_CLEAN,
    C_REUSE,
    C_KILL_DIRECT,
    C_DIRECT,
    C_IB_WC_ERROR,
    C_IB_PORT_DOWN,
    C_SWEEP,
    C_IB_LAZY
};
static const char *const case_names[] = {
    "transports",  "kill_ring", "kill_small",  "kill_mixed",   "kill_a2a", "clean",  "reuse",
    "kill_direct", "direct",    "ib_wc_error", "ib_port_down", "sweep",    "ib_lazy"};
_Static_assert(sizeof(case_names) / sizeof(case_names[0]) == C_IB_LAZY + 1, "a name per case");

typedef struct targs {
    int c;
    int victim;
    size_t count; /* elements per call (float32) */
    int a2a;
    int shared;         /* buffers from coll_mem_alloc */
    const char *inject; /* FAKE_VERBS_INJECT for the victim (tests/ib/fake_verbs.c) */
} targs_t;

/* ---- /dev/shm ---- */

static int private_shm; /* the test has its own tmpfs on /dev/shm */
static char *before[4096];
static int nbefore;

static int list_kcoll(char **names, int max)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "kcoll-", 6) == 0 && n < max)
            names[n++] = strdup(e->d_name);
    if (d)
        closedir(d);
    return n;
}

static void private_dev_shm(void)
{
    if (geteuid() != 0) {
        dh_log("not root: comparing /dev/shm before and after instead of a private tmpfs");
    } else if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
               mount("kcoll-test", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
                     "size=1g,mode=1777")) {
        dh_log("no private /dev/shm (%s): comparing before and after instead", strerror(errno));
    } else {
        private_shm = 1;
    }
    nbefore = list_kcoll(before, 4096);
}

static void check_no_segments(const char *what)
{
    char *now[4096];
    int n = list_kcoll(now, 4096), left = 0;
    for (int i = 0; i < n; i++) {
        int old = 0;
        for (int k = 0; k < nbefore && !private_shm; k++)
            old |= strcmp(now[i], before[k]) == 0;
        if (!old) {
            dh_fail("%s: /dev/shm/%s was left behind", what, now[i]);
            left++;
        }
        free(now[i]);
    }
    CHECK(left == 0, "%s: %d shared-memory segments left in /dev/shm", what, left);
    if (left == 0)
        dh_log("%s: no kcoll segment left in /dev/shm", what);
}

/* ---- bodies ---- */

/* Count this rank as done, then wait until `want` ranks are. */
static void wait_done(dh_ctx_t *ctx, long want, double max_s)
{
    dh_add(&ctx->sh->user[0], 1);
    double end = dh_now() + max_s;
    while (dh_load(&ctx->sh->user[0]) < want && dh_now() < end)
        dh_sleep(0.01);
}

static float value(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 3) % 13);
}

/* Loop checked all_reduces (or all_to_alls) until one fails or 60 s passed. */
static void loop_body(dh_ctx_t *ctx)
{
    const targs_t *a = ctx->arg;
    dh_out_t *out = &ctx->sh->out[ctx->rank];
    if (a->inject != NULL && ctx->rank == a->victim)
        dh_setenv("FAKE_VERBS_INJECT", a->inject);
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const size_t n = a->count, total = a->a2a ? n * (size_t)ctx->nranks : n;
    float *s = NULL, *r = NULL;
    if (a->shared) {
        void *p = NULL, *q = NULL;
        CHECK_RC(coll_mem_alloc(&p, total * sizeof(float)), COLL_SUCCESS, coll_get_last_error(),
                 "coll_mem_alloc");
        CHECK_RC(coll_mem_alloc(&q, total * sizeof(float)), COLL_SUCCESS, coll_get_last_error(),
                 "coll_mem_alloc");
        s = p;
        r = q;
    } else {
        s = malloc(total * sizeof(float));
        r = malloc(total * sizeof(float));
    }
    if (s == NULL || r == NULL)
        return;
    for (size_t i = 0; i < total; i++)
        s[i] = value(i, ctx->rank);
    double end = dh_now() + 60;
    dh_begin(ctx, ctx->rank);
    while (dh_now() < end) {
        rc = a->a2a ? coll_all_to_all(s, r, n, COLL_FLOAT32, comm, NULL)
                    : coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        size_t bad = 0;
        for (size_t i = 0; i < total; i += out->iters == 0 ? 1 : 4099) {
            float want = 0;
            if (a->a2a)
                want = value((size_t)ctx->rank * n + i % n, (int)(i / n));
            else
                for (int k = 0; k < ctx->nranks; k++)
                    want += value(i, k);
            bad += r[i] != want;
        }
        out->bad += (long)bad;
        dh_store(&out->iters, out->iters + 1);
    }
    dh_record(ctx, a->a2a ? "all_to_all loop" : "all_reduce loop", rc);
    CHECK(out->bad == 0, "rank %d: %ld wrong elements before the failure", ctx->rank, out->bad);
    wait_done(ctx, ctx->nranks - 1, 40); /* every survivor */
    if (ctx->rank % 2)
        CHECK_RC(coll_comm_abort(comm), COLL_SUCCESS, coll_get_last_error(), "abort");
    else
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    if (a->shared) {
        coll_mem_free(s);
        coll_mem_free(r);
    } else {
        free(s);
        free(r);
    }
}

static void kill_case(targs_t *a, int nranks)
{
    dh_setenv("COLL_TIMEOUT", "10");
    dh_setenv("COLL_HOST_ID_SUFFIX", a->c == C_KILL_MIXED ? "a,a,b,b" : NULL);
    dh_opts_t o = {
        .name = case_names[a->c], .nranks = nranks, .deadline_s = 60, .body = loop_body, .arg = a};
    dh_log("--- %s: %d ranks, %zu floats per %s%s, rank %d is killed", o.name, nranks, a->count,
           a->a2a ? "all_to_all" : "all_reduce", a->shared ? " (coll_mem_alloc buffers)" : "",
           a->victim);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_shared_t *sh = dh_shared(j);
    double end = dh_now() + 30;
    while (dh_load(&sh->out[a->victim].iters) < 3 && dh_now() < end)
        dh_pump(j, 0.0005);
    sh->t_event = dh_now();
    dh_expect_signal(j, a->victim, SIGKILL);
    kill(dh_pid(j, a->victim), SIGKILL);
    dh_wait(j);
    char victim[64];
    snprintf(victim, sizeof(victim), "rank %d (pid %d on ", a->victim, (int)dh_pid(j, a->victim));
    for (int r = 0; r < nranks; r++) {
        if (r == a->victim)
            continue;
        const dh_out_t *out = &sh->out[r];
        double dt = out->t - sh->t_event;
        dh_log("rank %d: %s %.3f s after the kill, after %ld iterations: %s", r,
               dh_rc_name(out->rc), dt, out->iters, out->msg);
        CHECK(out->rc == COLL_ERR_REMOTE || out->rc == COLL_ERR_TIMEOUT,
              "rank %d: expected COLL_ERR_REMOTE or COLL_ERR_TIMEOUT, got %s", r,
              dh_rc_name(out->rc));
        CHECK_HAS(out->msg, victim, "rank %d: names the killed rank with its pid", r);
        CHECK(dt >= 0 && dt < MARGIN, "rank %d failed %.2f s after the kill (want < %.0f s)", r, dt,
              MARGIN);
    }
    dh_free(j);
    check_no_segments(case_names[a->c]);
}

/* An HCA error injected on the victim (2 ranks on two hosts, InfiniBand between): the victim
 * fails naming the verb's status or event, the HCA and the port; the other fails with its report.
 */
static void ib_fault_case(targs_t *a, const char *const want[], int nwant)
{
    dh_setenv("COLL_TIMEOUT", "10");
    dh_setenv("COLL_HOST_ID_SUFFIX", "a,b");
    dh_opts_t o = {
        .name = case_names[a->c], .nranks = 2, .deadline_s = 60, .body = loop_body, .arg = a};
    dh_log("--- %s: 2 ranks on two hosts over InfiniBand (fake verbs), rank %d: %s", o.name,
           a->victim, a->inject);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    dh_shared_t *sh = dh_shared(j);
    for (int r = 0; r < 2; r++) {
        const dh_out_t *out = &sh->out[r];
        dh_log("rank %d: %s after %ld iterations: %s", r, dh_rc_name(out->rc), out->iters,
               out->msg);
        CHECK(out->rc == COLL_ERR_NETWORK || out->rc == COLL_ERR_REMOTE,
              "rank %d: expected COLL_ERR_NETWORK (or the peer's report), got %s", r,
              dh_rc_name(out->rc));
        for (int k = 0; k < nwant; k++)
            CHECK_HAS(out->msg, want[k], "rank %d: the message names it", r);
    }
    CHECK(sh->out[a->victim].rc == COLL_ERR_NETWORK, "rank %d (the HCA that failed): %s", a->victim,
          dh_rc_name(sh->out[a->victim].rc));
    dh_free(j);
    dh_setenv("COLL_HOST_ID_SUFFIX", NULL);
    check_no_segments(case_names[a->c]);
}

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
        for (size_t i = 0; i < n && rc == COLL_SUCCESS; i++) {
            float want = 0;
            for (int q = 0; q < ctx->nranks; q++)
                want += value(i, q);
            bad += r[i] != want;
        }
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
    dh_setenv("COLL_HOST_ID_SUFFIX", suffix);
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", "INIT");
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
    dh_setenv("COLL_DEBUG", NULL);
    dh_setenv("COLL_DEBUG_SUBSYS", NULL);
    dh_setenv("COLL_HOST_ID_SUFFIX", NULL);
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
        dh_setenv("COLL_HOST_ID_SUFFIX", hosts[h]);
        dh_opts_t o = {.name = "reuse", .nranks = 3, .deadline_s = 60, .body = reuse_body};
        dh_log("--- reused all_reduce ops on changing buffers, 3 ranks, %s",
               h ? "two hosts (a,a,b)" : "one host");
        dh_job_t *j = dh_start(&o);
        if (j == NULL)
            return;
        dh_wait(j);
        dh_free(j);
    }
    dh_setenv("COLL_HOST_ID_SUFFIX", NULL);
    check_no_segments("reuse");
}

/* ---- InfiniBand connections made at the first transfer ---- */

#define LAZY_MARK "=== ring exchange done ==="

static void lazy_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const int n = ctx->nranks, me = ctx->rank;
    const size_t count = 100000;
    float *s = malloc(count * (size_t)n * sizeof(float)),
          *r = malloc(count * (size_t)n * sizeof(float));
    long bad = 0;
    for (size_t i = 0; i < count * (size_t)n; i++)
        s[i] = value(i, me);
    coll_group_start();
    coll_send(s, count, COLL_FLOAT32, (me + 1) % n, comm, NULL);
    coll_recv(r, count, COLL_FLOAT32, (me + n - 1) % n, comm, NULL);
    rc = coll_group_end();
    for (size_t i = 0; i < count && rc == COLL_SUCCESS; i++)
        bad += r[i] != value(i, (me + n - 1) % n);
    fprintf(stderr, "%s\n", LAZY_MARK);
    if (rc == COLL_SUCCESS)
        rc = coll_all_to_all(s, r, count, COLL_FLOAT32, comm, NULL);
    for (size_t i = 0; i < count * (size_t)n && rc == COLL_SUCCESS; i++)
        bad += r[i] != value((size_t)me * count + i % count, (int)(i / count));
    dh_record(ctx, "ring exchange, then all_to_all", rc);
    ctx->sh->out[me].bad = bad;
    coll_comm_destroy(comm);
    free(s);
    free(r);
}

static void test_ib_lazy(void)
{
    dh_setenv("COLL_HOST_ID_SUFFIX", "a,b,c,d");
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", "IB");
    dh_opts_t o = {.name = "ib_lazy", .nranks = 4, .deadline_s = 60, .body = lazy_body, .quiet = 1};
    dh_log("--- 4 ranks on 4 hosts over InfiniBand (fake verbs): ring exchange, then all_to_all");
    dh_job_t *j = dh_start(&o);
    if (j != NULL) {
        dh_wait(j);
        for (int r = 0; r < 4; r++) {
            const dh_out_t *out = &dh_shared(j)->out[r];
            CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d", r);
            CHECK(out->bad == 0, "rank %d: %ld wrong elements", r, out->bad);
            const char *log = dh_output(j, r), *mark = strstr(log, LAZY_MARK);
            CHECK(dh_count_lines(log, "3 peers reachable over InfiniBand", NULL) == 1,
                  "rank %d: logs its 3 InfiniBand peers once", r);
            if (!CHECK(mark != NULL, "rank %d: reached the all_to_all", r))
                continue;
            char *head = strndup(log, (size_t)(mark - log));
            int first = dh_count_lines(head, "InfiniBand connection to rank", "ready");
            int total = dh_count_lines(log, "InfiniBand connection to rank", "ready");
            free(head);
            dh_log("rank %d: %d connections after the ring exchange, %d after the all_to_all", r,
                   first, total);
            CHECK(first == 2, "rank %d: the ring exchange connects its 2 neighbours only (%d)", r,
                  first);
            CHECK(total == 3, "rank %d: the all_to_all connects the third peer (%d)", r, total);
        }
        dh_free(j);
    }
    dh_setenv("COLL_DEBUG", NULL);
    dh_setenv("COLL_DEBUG_SUBSYS", NULL);
    dh_setenv("COLL_HOST_ID_SUFFIX", NULL);
    check_no_segments("ib_lazy");
}

/* ---- sweep of leftover names ---- */

static void sweep_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    dh_record(ctx, "init", rc);
    if (rc == COLL_SUCCESS)
        coll_comm_destroy(comm);
}

/* Write /dev/shm/NAME: a segment header (magic "KSHM", version) or junk, mtime age_s ago. */
static int make_leftover(const char *name, uint32_t version, int junk, long age_s)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (!CHECK(fd >= 0, "create %s: %s", path, strerror(errno)))
        return -1;
    unsigned char page[8192];
    memset(page, junk ? 0x5a : 0, sizeof(page));
    uint32_t head[2] = {0x4d48534bu, version};
    if (!junk)
        memcpy(page, head, sizeof(head));
    CHECK(write(fd, page, sizeof(page)) == (ssize_t)sizeof(page), "write %s", path);
    struct timespec ts[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
    CHECK(futimens(fd, ts) == 0, "futimens %s: %s", path, strerror(errno));
    return fd;
}

static int shm_exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    return access(path, F_OK) == 0;
}

static void test_sweep(void)
{
    static const char *const names[] = {
        "kcoll-00000000deadbeef-0-1", /* dead: removed */
        "kcoll-00000000deadbeef-1-0", /* locked by this process: a live creator */
        "kcoll-00000000deadbeef-2-0", /* young */
        "kcoll-00000000deadbeef-3-0", /* segment version 1 */
        "kcoll-00000000deadbeef-4-0", /* not a segment */
    };
    int fds[5];
    fds[0] = make_leftover(names[0], 2, 0, 3600);
    fds[1] = make_leftover(names[1], 2, 0, 3600);
    fds[2] = make_leftover(names[2], 2, 0, 0);
    fds[3] = make_leftover(names[3], 1, 0, 3600);
    fds[4] = make_leftover(names[4], 2, 1, 3600);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
    CHECK(fds[1] >= 0 && fcntl(fds[1], F_OFD_SETLK, &fl) == 0, "OFD read lock: %s",
          strerror(errno));
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", "SHM");
    dh_opts_t o = {.name = "sweep", .nranks = 2, .deadline_s = 60, .body = sweep_body, .quiet = 1};
    dh_log("--- leftover names in /dev/shm, then a communicator of 2 local ranks starts");
    dh_job_t *j = dh_start(&o);
    if (j != NULL) {
        dh_wait(j);
        int logged = 0;
        for (int r = 0; r < 2; r++) {
            const dh_out_t *out = &dh_shared(j)->out[r];
            CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d: init", r);
            logged += dh_count_lines(dh_output(j, r),
                                     "removed /dev/shm/kcoll-00000000deadbeef-0-1: a segment whose "
                                     "creator and receiver are both gone",
                                     NULL);
        }
        CHECK(logged == 1, "one rank logs the removal (%d)", logged);
        dh_free(j);
    }
    dh_setenv("COLL_DEBUG", NULL);
    dh_setenv("COLL_DEBUG_SUBSYS", NULL);
    CHECK(!shm_exists(names[0]), "the dead pair's name is gone");
    static const char *const why[] = {"", "locked by a live process", "younger than the grace",
                                      "another segment version", "not a segment"};
    for (int i = 1; i < 5; i++) {
        CHECK(shm_exists(names[i]), "%s stays: %s", names[i], why[i]);
        char path[128];
        snprintf(path, sizeof(path), "/dev/shm/%s", names[i]);
        unlink(path);
    }
    for (int i = 0; i < 5; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    check_no_segments("sweep");
}

/* ---- single-copy path ---- */

enum { D_ALL, D_FALLBACK, D_MISMATCH };

static float dvalue(size_t i, int rank)
{
    return (float)((i * 3 + (size_t)rank * 5) % 11);
}

/* Every collective once on coll_mem_alloc buffers, each result checked element by element. */
static long direct_collectives(dh_ctx_t *ctx, coll_comm_t comm, size_t n, coll_result_t *rc)
{
    const int nr = ctx->nranks, me = ctx->rank;
    const size_t total = n * (size_t)nr;
    void *sp = NULL, *rp = NULL;
    *rc = coll_mem_alloc(&sp, total * sizeof(float));
    if (*rc == COLL_SUCCESS)
        *rc = coll_mem_alloc(&rp, total * sizeof(float));
    if (*rc != COLL_SUCCESS)
        return 0;
    float *s = sp, *r = rp;
    long bad = 0;
    for (int k = 0; k < 6 && *rc == COLL_SUCCESS; k++) {
        for (size_t i = 0; i < total; i++)
            s[i] = dvalue(i, me);
        memset(r, 0xCD, total * sizeof(float));
        size_t check = n;
        switch (k) {
        case 0:
            *rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
            break;
        case 1:
            *rc = coll_broadcast(s, r, n, COLL_FLOAT32, nr - 1, comm, NULL);
            break;
        case 2:
            *rc = coll_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, 1, comm, NULL);
            check = me == 1 ? n : 0;
            break;
        case 3:
            *rc = coll_all_gather(s, r, n, COLL_FLOAT32, comm, NULL);
            check = total;
            break;
        case 4:
            *rc = coll_reduce_scatter(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
            break;
        default:
            *rc = coll_all_to_all(s, r, n, COLL_FLOAT32, comm, NULL);
            check = total;
            break;
        }
        for (size_t i = 0; i < check && *rc == COLL_SUCCESS; i++) {
            float want = 0;
            if (k == 0 || k == 2)
                for (int q = 0; q < nr; q++)
                    want += dvalue(i, q);
            else if (k == 1)
                want = dvalue(i, nr - 1);
            else if (k == 3)
                want = dvalue(i % n, (int)(i / n));
            else if (k == 4)
                for (int q = 0; q < nr; q++)
                    want += dvalue((size_t)me * n + i, q);
            else
                want = dvalue((size_t)me * n + i % n, (int)(i / n));
            bad += r[i] != want;
        }
    }
    coll_mem_free(sp);
    coll_mem_free(rp);
    return bad;
}

static void direct_body(dh_ctx_t *ctx)
{
    const int mode = *(const int *)ctx->arg;
    if (mode == D_FALLBACK && ctx->rank == 1)
        prctl(PR_SET_DUMPABLE, 0);
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const size_t n = 100003; /* 400 KB per rank: above COLL_SHM_DIRECT_MIN (256 KiB) */
    if (mode == D_MISMATCH) {
        wait_done(ctx, ctx->nranks, 30); /* every rank's init is over before anyone fails */
        void *s = NULL, *r = NULL;
        coll_mem_alloc(&s, n * sizeof(float) * (size_t)ctx->nranks);
        coll_mem_alloc(&r, n * sizeof(float) * (size_t)ctx->nranks);
        dh_begin(ctx, ctx->rank);
        rc = ctx->rank == 0 ? coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL)
                            : coll_all_gather(s, r, n, COLL_FLOAT32, comm, NULL);
        dh_record(ctx, "mismatched collectives", rc);
        coll_comm_abort(comm);
        coll_mem_free(s);
        coll_mem_free(r);
        return;
    }
    long bad = 0;
    for (int round = 0; round < 2 && rc == COLL_SUCCESS; round++)
        bad += direct_collectives(ctx, comm, n, &rc);
    dh_record(ctx, "collectives", rc);
    ctx->sh->out[ctx->rank].bad = bad;
    coll_comm_destroy(comm);
}

static void direct_job(int mode)
{
    static const char *const what[] = {
        "every collective on coll_mem_alloc buffers, 3 local ranks",
        "the same with rank 1 not dumpable (its buffers cannot be mapped)",
        "rank 0 calls all_reduce, ranks 1 and 2 all_gather"};
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", "SHM");
    dh_opts_t o = {.name = "direct",
                   .nranks = 3,
                   .deadline_s = 60,
                   .body = direct_body,
                   .arg = &mode,
                   .quiet = getenv("TEST_SHM_VERBOSE") == NULL};
    dh_log("--- %s", what[mode]);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    int mismatch = 0;
    for (int r = 0; r < 3; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        const char *log = dh_output(j, r);
        if (mode == D_MISMATCH) {
            dh_log("rank %d: %s: %s", r, dh_rc_name(out->rc), out->msg);
            CHECK(out->rc == COLL_ERR_MISMATCH || out->rc == COLL_ERR_REMOTE,
                  "rank %d: expected a mismatch (or the peer's abort), got %s", r,
                  dh_rc_name(out->rc));
            mismatch += out->rc == COLL_ERR_MISMATCH && strstr(out->msg, "collective mismatch") &&
                        strstr(out->msg, "(single-copy path)");
            continue;
        }
        CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "%s: rank %d", what[mode], r);
        CHECK(out->bad == 0, "%s: rank %d: %ld wrong elements", what[mode], r, out->bad);
        int direct = dh_count_lines(log, "single-copy path: every rank's buffers", NULL);
        int ring = dh_count_lines(log, "two-copy ring path", NULL);
        if (mode == D_ALL) {
            CHECK(direct == 1 && ring == 0,
                  "rank %d logs the single-copy path once (%d) and no fallback (%d)", r, direct,
                  ring);
        } else {
            CHECK(direct == 0 && ring == 1,
                  "rank %d logs the two-copy path once (%d) and never the single-copy path (%d)", r,
                  ring, direct);
        }
    }
    if (mode == D_MISMATCH)
        CHECK(mismatch >= 1, "a rank reports the collective mismatch on the single-copy path");
    dh_free(j);
    dh_setenv("COLL_DEBUG", NULL);
    dh_setenv("COLL_DEBUG_SUBSYS", NULL);
}

int main(int argc, char **argv)
{
    dh_init();
    int c = -1;
    for (int k = 0; argc == 2 && k <= C_IB_LAZY; k++)
        if (strcmp(argv[1], case_names[k]) == 0)
            c = k;
    if (c < 0) {
        fprintf(stderr, "usage: test_shm transports|kill_ring|kill_small|kill_mixed|kill_a2a|"
                        "clean|reuse|kill_direct|direct|ib_wc_error|ib_port_down|sweep|ib_lazy\n");
        return 2;
    }
    private_dev_shm();
    targs_t a = {.c = c};
    switch (c) {
    case C_TRANSPORTS:
        test_transports();
        break;
    case C_KILL_RING:
        a.victim = 2;
        a.count = 2u << 20;
        kill_case(&a, 4);
        break;
    case C_KILL_SMALL:
        a.victim = 1;
        a.count = 2;
        kill_case(&a, 4);
        break;
    case C_KILL_MIXED:
        a.victim = 1;
        a.count = 2u << 20;
        kill_case(&a, 4);
        break;
    case C_KILL_A2A:
        a.victim = 3;
        a.count = 65536 + 3;
        a.a2a = 1;
        kill_case(&a, 5);
        break;
    case C_CLEAN:
        test_clean();
        break;
    case C_KILL_DIRECT:
        a.victim = 2;
        a.count = 2u << 20;
        a.shared = 1;
        kill_case(&a, 4);
        break;
    case C_IB_WC_ERROR: {
        static const char *const want[] = {
            "InfiniBand work completion error on rank 1: transport retry counter exceeded "
            "(status 12, vendor error 0x81) for an RDMA write to rank 0 (pid ",
            "on fake_roce0 port 1", "Check the link of both hosts"};
        a.victim = 1;
        a.count = 2u << 20;
        a.inject = "wc_error:40";
        ib_fault_case(&a, want, 3);
        break;
    }
    case C_IB_PORT_DOWN: {
        static const char *const want[] = {
            "InfiniBand port went down on rank 1: fake_roce0 port 1 (port error) during "
            "all_reduce(count 2097152, float32, sum)",
            "Check the cable, the switch port and the subnet manager"};
        a.victim = 1;
        a.count = 2u << 20;
        a.inject = "port_down:40";
        ib_fault_case(&a, want, 2);
        break;
    }
    case C_SWEEP:
        test_sweep();
        break;
    case C_IB_LAZY:
        test_ib_lazy();
        break;
    case C_DIRECT:
        for (int mode = D_ALL; mode <= D_MISMATCH; mode++)
            direct_job(mode);
        check_no_segments("direct");
        break;
    default:
        test_reuse();
        break;
    }
    return dh_finish();
}
