/*
 * Ranks that never arrive, a root that is gone, stopped peers and aborts:
 *   test_faults noinit    4 ranks, rank 3 never calls coll_comm_init_rank; COLL_BOOTSTRAP_TIMEOUT=3
 *   test_faults rootgone  the process that created the unique id is gone; COLL_BOOTSTRAP_TIMEOUT=11
 *   test_faults rootgone_forked  the same, and it forked a child that lives on (it must not keep
 *                         the root's listener open)
 *   test_faults stopped   4 ranks loop all_reduces; rank 2 gets SIGSTOP; COLL_TIMEOUT=3
 *   test_faults stopped_far  the same, with COLL_TIMEOUT=6 on rank 2's neighbours: rank 0,
 *                         which has no transfer with rank 2, times out first
 *   test_faults abort     4 ranks loop all_reduces; rank 1 calls coll_comm_abort
 *   test_faults fdlimit   16 ranks all_to_all; rank 0 runs with a descriptor limit of 24
 *   test_faults fdfull    8 ranks all_to_all; rank 0 takes every descriptor it may open after
 *                         init, so it has none left when it fails: its notices must still go
 *   test_faults killed_root  4 ranks over sockets; rank 0 is killed after init, before any
 *                         transfer; the others broadcast from it. Nobody sends to rank 0, so no
 *                         connection breaks: a probe of its listener must find it gone, long
 *                         before COLL_TIMEOUT=20 (which took the whole timeout before)
 *   test_faults dropped   3 ranks over sockets in a network namespace of their own whose firewall
 *                         drops every connection request but the bootstrap root's (a
 *                         NetworkPolicy that admits one port): the first all_reduce fails on
 *                         every rank after 10 s naming the cause (root, iptables; before: the
 *                         stall at COLL_TIMEOUT=30, or the kernel's give-up after two minutes)
 * The others must fail within the timeout plus a margin, with the code and a message that names
 * the rank at fault.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dh.h"

#define NRANKS 4
#define COUNT  (256 * 1024) /* float32: 1 MiB, the ring algorithm */
#define MARGIN 3.0          /* seconds of slack on a busy (or sanitized) 2-core machine */

enum { M_NOINIT, M_ROOTGONE, M_STOPPED, M_ABORT, M_FDLIMIT, M_FDFULL, M_KILLED_ROOT, M_DROPPED };
enum { U_DONE = 0, U_INIT = 1 }; /* dh_shared.user[] slots */

typedef struct fargs {
    int mode;
    int victim;
    int far; /* stopped: the victim's ring neighbours wait 6 s, rank 0 only 3 s */
    double timeout;
} fargs_t;

static void wait_all_done(dh_ctx_t *ctx, double max_s)
{
    dh_add(&ctx->sh->user[U_DONE], 1);
    double end = dh_now() + max_s;
    while (dh_load(&ctx->sh->user[U_DONE]) < ctx->nranks && dh_now() < end)
        dh_sleep(0.01);
}

static void init_body(dh_ctx_t *ctx)
{
    const fargs_t *a = ctx->arg;
    if (a->mode == M_NOINIT && ctx->rank == a->victim) {
        wait_all_done(ctx, 30); /* alive, but never joins */
        return;
    }
    coll_comm_t comm = NULL;
    dh_begin(ctx, ctx->rank);
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    dh_record(ctx, "coll_comm_init_rank", rc);
    if (rc == COLL_SUCCESS)
        coll_comm_destroy(comm);
    wait_all_done(ctx, 30);
}

static void loop_body(dh_ctx_t *ctx)
{
    const fargs_t *a = ctx->arg;
    dh_out_t *out = &ctx->sh->out[ctx->rank];
    coll_comm_t comm = NULL;
    if (a->far && ctx->rank != 0)
        dh_setenv("COLL_TIMEOUT", "6");
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    float *s = malloc(COUNT * sizeof(float)), *r = malloc(COUNT * sizeof(float));
    for (size_t i = 0; i < COUNT; i++)
        s[i] = (float)((i + (size_t)ctx->rank) % 7);
    double end = dh_now() + 60;
    dh_begin(ctx, ctx->rank);
    while (dh_now() < end) {
        if (a->mode == M_ABORT && ctx->rank == a->victim && out->iters == 3) {
            ctx->sh->t_event = dh_now();
            rc = coll_comm_abort(comm);
            double d = dh_now() - ctx->sh->t_event;
            CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "coll_comm_abort");
            CHECK(d < 3.0, "coll_comm_abort took %.1f s", d);
            dh_record(ctx, "coll_comm_abort", rc);
            wait_all_done(ctx, 30); /* stay alive: the others learn from the notice */
            free(s);
            free(r);
            return;
        }
        rc = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        size_t bad = 0;
        for (size_t i = 0; i < COUNT; i += out->iters == 0 ? 1 : 4099) {
            float want = 0;
            for (int k = 0; k < ctx->nranks; k++)
                want += (float)((i + (size_t)k) % 7);
            bad += r[i] != want;
        }
        out->bad += (long)bad;
        dh_store(&out->iters, out->iters + 1);
    }
    dh_record(ctx, "all_reduce loop", rc);
    CHECK(out->bad == 0, "%ld wrong elements before the failure", out->bad);
    if (rc != COLL_SUCCESS) {
        coll_result_t ae = COLL_SUCCESS;
        CHECK_RC(coll_comm_get_async_error(comm, &ae), COLL_SUCCESS, coll_get_last_error(),
                 "coll_comm_get_async_error");
        CHECK(ae == rc, "async error %s, the failed call returned %s", dh_rc_name(ae),
              dh_rc_name(rc));
        double t0 = dh_now();
        coll_result_t rc2 = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, comm, NULL);
        CHECK(rc2 == rc && dh_now() - t0 < 1.0,
              "a call on the failed communicator returned %s after %.1f s (want %s at once)",
              dh_rc_name(rc2), dh_now() - t0, dh_rc_name(rc));
    }
    wait_all_done(ctx, 40);
    CHECK_RC(coll_comm_abort(comm), COLL_SUCCESS, coll_get_last_error(), "abort");
    free(s);
    free(r);
}

#define FD_RANKS 16
#define FD_LIMIT 24

static void fdlimit_body(dh_ctx_t *ctx)
{
    const fargs_t *a = ctx->arg;
    if (ctx->rank == a->victim) {
        struct rlimit rl = {FD_LIMIT, FD_LIMIT};
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            dh_fail("setrlimit: cannot lower the descriptor limit");
    }
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    size_t count = 1024, bytes = count * sizeof(int32_t) * (size_t)ctx->nranks;
    int32_t *s = calloc(1, bytes), *r = calloc(1, bytes);
    dh_begin(ctx, ctx->rank);
    rc = coll_all_to_all(s, r, count, COLL_INT32, comm, NULL);
    dh_record(ctx, "all_to_all", rc);
    wait_all_done(ctx, 40);
    coll_comm_abort(comm);
    free(s);
    free(r);
}

static void test_fdlimit(fargs_t *a)
{
    dh_setenv("COLL_TIMEOUT", "5");
    dh_opts_t o = {.name = "rank 0 with a descriptor limit of 24 in a 16-rank all_to_all",
                   .nranks = FD_RANKS,
                   .deadline_s = 60,
                   .body = fdlimit_body,
                   .arg = a};
    dh_log("--- %s (COLL_TIMEOUT=5)", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    const dh_out_t *v = &dh_shared(j)->out[0];
    char want[256];
    /* one estimate, phrased in peers, at init and in the error */
    char estimate[256];
    snprintf(estimate, sizeof(estimate),
             "the open-file limit (ulimit -n) is %d (hard %d), but rank 0 with %d peers (%d over "
             "sockets, 0 over shared memory, 0 over InfiniBand) may need about %d descriptors: "
             "raise it (ulimit -n %d",
             FD_LIMIT, FD_LIMIT, FD_RANKS - 1, FD_RANKS - 1, (FD_RANKS - 1) * 2 + 64,
             (FD_RANKS - 1) * 2 + 64);
    snprintf(want, sizeof(want), "%s", estimate);
    CHECK(dh_count_lines(dh_output(j, 0), "kcoll WARN NET", want) >= 1,
          "rank 0 warns about the descriptor limit at init: \"%s\"", want);
    dh_log("rank 0: %s: %s", dh_rc_name(v->rc), v->msg);
    CHECK_RC(v->rc, COLL_ERR_SYSTEM, v->msg, "rank 0: all_to_all over its descriptor limit");
    CHECK_HAS(v->msg, "Too many open files", "rank 0: says why");
    CHECK_HAS(v->msg, estimate, "rank 0: the same estimate as at init");
    CHECK(v->t - v->t0 < MARGIN, "rank 0 failed after %.1f s (want < %.0f; COLL_TIMEOUT is 5)",
          v->t - v->t0, MARGIN);
    /* the place that decides an error logs it once */
    int floods = dh_count_lines(dh_output(j, 0), "accept: Too many open files", NULL);
    CHECK(floods <= 3, "rank 0 logged \"accept: Too many open files\" %d%s times", floods,
          floods > 100000 ? "+" : "");
    int remote = 0; /* ranks that finished before rank 0 failed may return COLL_SUCCESS */
    for (int r = 1; r < FD_RANKS; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        if (out->rc == COLL_SUCCESS)
            continue; /* exchanged everything with rank 0 before it failed */
        remote++;
        CHECK_RC(out->rc, COLL_ERR_REMOTE, out->msg, "rank %d", r);
        snprintf(want, sizeof(want), "rank 0 (pid %d on ", (int)dh_pid(j, 0));
        CHECK_HAS(out->msg, want, "rank %d: names rank 0", r);
        CHECK_HAS(out->msg, "Too many open files", "rank %d: carries rank 0's reason", r);
        CHECK_HAS(out->msg, "ulimit -n", "rank %d: names the limit and the fix", r);
        CHECK(out->t - out->t0 < 5.0, "rank %d failed after %.1f s", r, out->t - out->t0);
    }
    dh_log("%d other ranks failed, naming rank 0; the rest completed their exchange with it",
           remote);
    dh_free(j);
}

static void test_noinit(fargs_t *a)
{
    dh_setenv("COLL_BOOTSTRAP_TIMEOUT", "3"); /* the root reads it when the id is created */
    dh_opts_t o = {.name = "rank 3 never calls init",
                   .nranks = NRANKS,
                   .deadline_s = 30,
                   .body = init_body,
                   .arg = a};
    dh_log("--- %s (COLL_BOOTSTRAP_TIMEOUT=11)", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    for (int r = 0; r < NRANKS - 1; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        double dt = out->t - dh_t_start(j);
        CHECK_RC(out->rc, COLL_ERR_TIMEOUT, out->msg, "rank %d: coll_comm_init_rank", r);
        CHECK_HAS(out->msg, "bootstrap timeout: 3 of 4 ranks checked in; missing: rank 3.",
                  "rank %d: names the missing rank", r);
        CHECK_HAS(out->msg, "COLL_BOOTSTRAP_TIMEOUT", "rank %d: names the setting", r);
        CHECK(dt > 2.5 && dt < 3.0 + MARGIN,
              "rank %d failed %.1f s after the id was created "
              "(want 3 s + %.0f)",
              r, dt, MARGIN);
        dh_log("rank %d: %s after %.2f s", r, dh_rc_name(out->rc), dt);
    }
    dh_free(j);
}

/* forked: the process that held the root forked a child first, which outlives it (a
 * DataLoader worker of the rank that made the id): the child closed the root's sockets at the
 * fork, so the ranks are refused and told so as when no child is left (before, the child's copy
 * of the listener accepted them, and they waited for an answer that never came). */
static void test_rootgone(fargs_t *a, int forked)
{
    dh_setenv("COLL_BOOTSTRAP_TIMEOUT", "11"); /* past the 10 s after which a rank says so */
    dh_opts_t o = {.name = forked ? "the process holding the root is gone, its forked child lives"
                                  : "the process holding the root is gone",
                   .nranks = 2,
                   .deadline_s = 40,
                   .root_dead = 1,
                   .root_forked = forked,
                   .body = init_body,
                   .arg = a};
    dh_log("--- %s (COLL_BOOTSTRAP_TIMEOUT=11)", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    /* "kcoll1:127.0.0.1:PORT:secret" -> "127.0.0.1:PORT" */
    char root[80];
    snprintf(root, sizeof(root), "%s", dh_id_string(j) + 7);
    char *colon = strrchr(root, ':');
    if (colon)
        *colon = '\0';
    for (int r = 0; r < 2; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        double dt = out->t - out->t0;
        CHECK_RC(out->rc, COLL_ERR_TIMEOUT, out->msg, "rank %d: coll_comm_init_rank", r);
        char want[160];
        snprintf(want, sizeof(want), "rank %d cannot reach the bootstrap root at %s: ", r, root);
        CHECK_HAS(out->msg, want, "rank %d: names the root address", r);
        CHECK_HAS(out->msg, "Is the process that created the unique id still running",
                  "rank %d: says what to check", r);
        /* connection refusals are retried until COLL_BOOTSTRAP_TIMEOUT + 5 s, and said after
         * 10 s of them */
        CHECK(dt < 16.0 + MARGIN, "rank %d failed after %.1f s (want < %.0f)", r, dt, 16 + MARGIN);
        char told[256];
        snprintf(told, sizeof(told),
                 "rank %d: nothing has listened at the bootstrap root %s for 10 s (connection "
                 "refused); still trying",
                 r, root);
        CHECK_HAS(dh_output(j, r), told, "rank %d: says so after 10 s", r);
        CHECK_HAS(dh_output(j, r), "a unique id serves one creation", "rank %d: says why", r);
        dh_log("rank %d: %s after %.2f s", r, dh_rc_name(out->rc), dt);
    }
    dh_free(j);
}

/* Survivors of a stopped or aborted rank: code, message and timing. */
static void check_survivors(dh_job_t *j, const fargs_t *a)
{
    dh_shared_t *sh = dh_shared(j);
    char victim[64];
    snprintf(victim, sizeof(victim), "rank %d (pid %d on ", a->victim, (int)dh_pid(j, a->victim));
    int naming = 0;
    for (int r = 0; r < NRANKS; r++) {
        if (r == a->victim)
            continue;
        const dh_out_t *out = &sh->out[r];
        double dt = out->t - sh->t_event;
        dh_log("rank %d: %s %.2f s after rank %d was %s, after %ld iterations: %s", r,
               dh_rc_name(out->rc), dt, a->victim, a->mode == M_ABORT ? "aborted" : "stopped",
               out->iters, out->msg);
        /* the victim was stopped after its 3rd all_reduce; a rank may be one behind */
        CHECK(out->iters >= 2, "rank %d: only %ld iterations before the failure", r, out->iters);
        /* Every survivor must name the victim, also rank 0, which has no transfer with it: a
         * rank that times out asks the others whom they wait on, and the rank that nobody hears
         * from is the stopped one. The `far` variant makes rank 0 time out first, alone. */
        int names = dh_contains(out->msg, victim);
        naming += names;
        /* relayed reports are passed on, not nested ("reported: ... reported: ...") */
        const char *rep = strstr(out->msg, " reported: ");
        CHECK(rep == NULL || strstr(rep + 1, " reported: ") == NULL,
              "rank %d: the error nests reports: \"%s\"", r, out->msg);
        CHECK_HAS(out->msg, victim, "rank %d: names rank %d with its pid", r, a->victim);
        if (a->mode == M_ABORT) {
            CHECK_RC(out->rc, COLL_ERR_REMOTE, out->msg, "rank %d", r);
            CHECK_HAS(out->msg, ") reported: rank 1 called coll_comm_abort", "rank %d", r);
            CHECK(dt >= 0 && dt < MARGIN, "rank %d failed %.1f s after the abort (want < %.0f)", r,
                  dt, MARGIN);
            continue;
        }
        if (out->rc == COLL_ERR_TIMEOUT) {
            CHECK_HAS(out->msg, "(COLL_TIMEOUT): ", "rank %d", r);
            CHECK_HAS(out->msg, "sent no data and no status", "rank %d: the victim is silent", r);
        } else if (out->rc == COLL_ERR_REMOTE) {
            /* told by another survivor that timed out (on one host, 1 MiB per rank takes the
             * single-copy path: "... sum) (single-copy path) #5 ...") */
            CHECK_HAS(out->msg, ") reported: all_reduce(count 262144, float32, sum) ",
                      "rank %d: carries the reporter's error", r);
            CHECK_HAS(out->msg, "sent no data and no status", "rank %d: the victim is silent", r);
        } else {
            dh_fail("rank %d: expected COLL_ERR_TIMEOUT or COLL_ERR_REMOTE, got %s: \"%s\"", r,
                    dh_rc_name(out->rc), out->msg);
        }
        CHECK(dt > 1.0 && dt < a->timeout + MARGIN,
              "rank %d failed %.1f s after rank %d was stopped (want COLL_TIMEOUT %.0f s + %.0f)",
              r, dt, a->victim, a->timeout, MARGIN);
    }
    if (naming == 0)
        dh_log("KNOWN GAP: no survivor's error names the stopped rank %d", a->victim);
}

static void test_loop(fargs_t *a)
{
    dh_setenv("COLL_TIMEOUT", "3");
    a->timeout = a->far ? 6 : 3;
    dh_opts_t o = {.name = a->mode == M_ABORT ? "rank 1 aborts mid-loop"
                           : a->far
                               ? "rank 2 stopped; COLL_TIMEOUT 3 s on rank 0, 6 s on ranks 1 and 3"
                               : "rank 2 stopped (SIGSTOP) mid all_reduce",
                   .nranks = NRANKS,
                   .deadline_s = 60,
                   .body = loop_body,
                   .arg = a};
    dh_log("--- %s", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_shared_t *sh = dh_shared(j);
    if (a->mode == M_STOPPED) {
        double end = dh_now() + 30;
        while (dh_load(&sh->out[a->victim].iters) < 3 && dh_now() < end)
            dh_pump(j, 0.001);
        kill(dh_pid(j, a->victim), SIGSTOP);
        sh->t_event = dh_now();
        /* the others give up; then let the victim run on and see that it fails, too */
        end = dh_now() + a->timeout + 20;
        int survivors = 0;
        while (dh_now() < end) {
            survivors = 0;
            for (int r = 0; r < NRANKS; r++)
                survivors += r != a->victim && sh->out[r].done;
            if (survivors == NRANKS - 1)
                break;
            dh_pump(j, 0.02);
        }
        CHECK(survivors == NRANKS - 1, "only %d of %d survivors failed within %.0f s", survivors,
              NRANKS - 1, a->timeout + 20);
        double t_cont = dh_now();
        kill(dh_pid(j, a->victim), SIGCONT);
        end = dh_now() + 10;
        while (!sh->out[a->victim].done && dh_now() < end)
            dh_pump(j, 0.02);
        const dh_out_t *v = &sh->out[a->victim];
        dh_log("rank %d after SIGCONT: %s after %.2f s: %s", a->victim, dh_rc_name(v->rc),
               v->t - t_cont, v->msg);
        CHECK(v->done && (v->rc == COLL_ERR_REMOTE || v->rc == COLL_ERR_TIMEOUT),
              "rank %d, continued after the others failed: %s (want REMOTE or TIMEOUT, not a "
              "hang or success)",
              a->victim, dh_rc_name(v->rc));
        CHECK(v->done && v->t - t_cont < MARGIN, "rank %d failed %.1f s after SIGCONT", a->victim,
              v->t - t_cont);
    }
    dh_wait(j);
    check_survivors(j, a);
    dh_free(j);
}

#define FULL_RANKS 8
#define FULL_LIMIT 256

static void fdfull_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    int held[FULL_LIMIT], nheld = 0;
    if (ctx->rank == 0) {
        /* a soft limit that bounds the filling, then every descriptor below it taken */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
            dh_fail("getrlimit");
        rl.rlim_cur = FULL_LIMIT;
        if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
            dh_fail("setrlimit: cannot lower the descriptor limit");
        int fd;
        while (nheld < FULL_LIMIT && (fd = dup(2)) >= 0)
            held[nheld++] = fd;
        CHECK(nheld < FULL_LIMIT && errno == EMFILE, "rank 0 took %d descriptors: %s", nheld,
              strerror(errno));
    }
    size_t count = 1024, bytes = count * sizeof(int32_t) * (size_t)ctx->nranks;
    int32_t *s = calloc(1, bytes), *r = calloc(1, bytes);
    dh_begin(ctx, ctx->rank);
    rc = coll_all_to_all(s, r, count, COLL_INT32, comm, NULL);
    dh_record(ctx, "all_to_all", rc);
    for (int i = 0; i < nheld; i++)
        close(held[i]);
    wait_all_done(ctx, 40); /* rank 0 stays: its peers must learn from its notices */
    coll_comm_abort(comm);
    free(s);
    free(r);
}

static void test_fdfull(fargs_t *a)
{
    dh_setenv("COLL_TIMEOUT", "10");
    dh_opts_t o = {.name = "rank 0 out of descriptors, none left, in an 8-rank all_to_all",
                   .nranks = FULL_RANKS,
                   .deadline_s = 60,
                   .body = fdfull_body,
                   .arg = a};
    dh_log("--- %s (COLL_TIMEOUT=10)", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    const dh_out_t *v = &dh_shared(j)->out[0];
    dh_log("rank 0: %s: %s", dh_rc_name(v->rc), v->msg);
    CHECK_RC(v->rc, COLL_ERR_SYSTEM, v->msg, "rank 0: all_to_all with no descriptor left");
    CHECK_HAS(v->msg, "Too many open files", "rank 0: says why");
    /* the limit covers the communicator: the advice names the program's descriptors, not a
     * smaller limit than the one in force */
    char advice[160];
    snprintf(advice, sizeof(advice), "is %d (hard ", FULL_LIMIT);
    CHECK_HAS(v->msg, advice, "rank 0: names its limit");
    snprintf(advice, sizeof(advice), "may need about %d descriptors, but the process holds %d",
             (FULL_RANKS - 1) * 2 + 64, FULL_LIMIT);
    CHECK_HAS(v->msg, advice, "rank 0: what it needs and what the process holds");
    snprintf(advice, sizeof(advice), "raise it (ulimit -n %d",
             FULL_LIMIT + (FULL_RANKS - 1) * 2 + 64);
    CHECK_HAS(v->msg, advice, "rank 0: a limit above the one that ran out");
    char want[64];
    snprintf(want, sizeof(want), "rank 0 (pid %d on ", (int)dh_pid(j, 0));
    for (int r = 1; r < FULL_RANKS; r++) {
        /* the descriptor held back for the notices: without it every peer waits COLL_TIMEOUT
         * on a rank that is alive and says nothing */
        const dh_out_t *out = &dh_shared(j)->out[r];
        CHECK_RC(out->rc, COLL_ERR_REMOTE, out->msg, "rank %d", r);
        CHECK_HAS(out->msg, want, "rank %d: names rank 0", r);
        CHECK_HAS(out->msg, "Too many open files", "rank %d: carries rank 0's reason", r);
        CHECK(out->t - out->t0 < MARGIN, "rank %d failed after %.1f s (COLL_TIMEOUT is 10)", r,
              out->t - out->t0);
    }
    dh_free(j);
}

static void killed_root_body(dh_ctx_t *ctx)
{
    const fargs_t *a = ctx->arg;
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    dh_add(&ctx->sh->user[U_INIT], 1); /* every rank has its communicator before the kill */
    double end = dh_now() + 30;
    while (dh_load(&ctx->sh->user[U_INIT]) < ctx->nranks && dh_now() < end)
        dh_sleep(0.005);
    if (ctx->rank == a->victim)
        kill(getpid(), SIGKILL);
    float *b = calloc(COUNT, sizeof(float));
    dh_begin(ctx, ctx->rank);
    rc = coll_broadcast(b, b, COUNT, COLL_FLOAT32, a->victim, comm, NULL);
    dh_record(ctx, "broadcast", rc);
    free(b);
    coll_comm_abort(comm);
}

static void test_killed_root(fargs_t *a)
{
    dh_setenv("COLL_TIMEOUT", "20");
    dh_opts_t o = {.name = "the root of a broadcast killed after init, before any transfer",
                   .nranks = NRANKS,
                   .deadline_s = 60,
                   .body = killed_root_body,
                   .arg = a};
    dh_log("--- %s (sockets, COLL_TIMEOUT=20)", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_expect_signal(j, a->victim, SIGKILL);
    dh_wait(j);
    char victim[64];
    snprintf(victim, sizeof(victim), "rank %d (pid %d on ", a->victim, (int)dh_pid(j, a->victim));
    for (int r = 0; r < NRANKS; r++) {
        if (r == a->victim)
            continue;
        const dh_out_t *out = &dh_shared(j)->out[r];
        dh_log("rank %d: %s after %.2f s: %s", r, dh_rc_name(out->rc), out->t - out->t0, out->msg);
        CHECK_RC(out->rc, COLL_ERR_REMOTE, out->msg, "rank %d: broadcast from a dead root", r);
        CHECK_HAS(out->msg, victim, "rank %d: names rank %d with its pid", r, a->victim);
        CHECK_HAS(out->msg, "is gone", "rank %d: says it is gone, not stopped", r);
        CHECK(out->t - out->t0 < 1.0 + MARGIN,
              "rank %d failed after %.1f s (want about 1 s; COLL_TIMEOUT is 20)", r,
              out->t - out->t0);
    }
    dh_free(j);
}

static void dropped_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init (the root's port is open)"))
        return;
    float *s = calloc(COUNT, sizeof(float)), *r = calloc(COUNT, sizeof(float));
    dh_begin(ctx, ctx->rank);
    rc = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, comm, NULL);
    dh_record(ctx, "all_reduce", rc);
    free(s);
    free(r);
    coll_comm_abort(comm);
}

/* The firewall: connection requests (SYN) to any port but the bootstrap root's are dropped. */
static void drop_but_root(dh_job_t *j, void *arg)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "iptables -A INPUT -p tcp --syn ! --dport %d -j DROP",
             dh_id_port(j));
    dh_log("%s", cmd);
    if (system(cmd) != 0)
        dh_fail("%s failed", cmd);
}

static void test_dropped(fargs_t *a)
{
    if (geteuid() != 0)
        dh_skip("needs root (a network namespace with a firewall of its own)");
    if (system("command -v iptables >/dev/null") != 0)
        dh_skip("iptables is not installed (scripts/setup.sh installs it)");
    if (unshare(CLONE_NEWNET) != 0 || system("ip link set lo up") != 0)
        dh_skip("cannot make a network namespace: %s", strerror(errno));
    dh_setenv("COLL_TIMEOUT", "30");
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", "a,b,c");
    dh_opts_t o = {.name = "every connection request but the root's dropped",
                   .nranks = 3,
                   .deadline_s = 60,
                   .body = dropped_body,
                   .before_ranks = drop_but_root,
                   .arg = a};
    dh_log("--- %s (sockets, COLL_TIMEOUT=30)", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    for (int r = 0; r < 3; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        const double dt = out->t - out->t0;
        dh_log("rank %d: %s after %.2f s: %s", r, dh_rc_name(out->rc), dt, out->msg);
        CHECK(out->rc == COLL_ERR_NETWORK || out->rc == COLL_ERR_REMOTE,
              "rank %d: expected COLL_ERR_NETWORK (or another rank's report), got %s", r,
              dh_rc_name(out->rc));
        CHECK_HAS(out->msg, "no answer to its connection request for 10 s",
                  "rank %d: says what happened", r);
        CHECK_HAS(out->msg, "NetworkPolicy", "rank %d: names the likely cause", r);
        CHECK(dt > 9.0 && dt < 10.0 + MARGIN, "rank %d failed after %.1f s (want 10 s)", r, dt);
    }
    dh_free(j);
}

int main(int argc, char **argv)
{
    dh_init();
    fargs_t a = {.victim = -1};
    const char *m = argc == 2 ? argv[1] : "";
    if (strcmp(m, "noinit") == 0) {
        a.mode = M_NOINIT;
        a.victim = 3;
        test_noinit(&a);
    } else if (strcmp(m, "rootgone") == 0) {
        a.mode = M_ROOTGONE;
        test_rootgone(&a, 0);
    } else if (strcmp(m, "rootgone_forked") == 0) {
        a.mode = M_ROOTGONE;
        test_rootgone(&a, 1);
    } else if (strcmp(m, "stopped") == 0) {
        a.mode = M_STOPPED;
        a.victim = 2;
        test_loop(&a);
    } else if (strcmp(m, "stopped_far") == 0) {
        a.mode = M_STOPPED;
        a.victim = 2;
        a.far = 1;
        test_loop(&a);
    } else if (strcmp(m, "abort") == 0) {
        a.mode = M_ABORT;
        a.victim = 1;
        test_loop(&a);
    } else if (strcmp(m, "fdlimit") == 0) {
        a.mode = M_FDLIMIT;
        a.victim = 0;
        test_fdlimit(&a);
    } else if (strcmp(m, "fdfull") == 0) {
        a.mode = M_FDFULL;
        a.victim = 0;
        test_fdfull(&a);
    } else if (strcmp(m, "dropped") == 0) {
        a.mode = M_DROPPED;
        test_dropped(&a);
    } else if (strcmp(m, "killed_root") == 0) {
        a.mode = M_KILLED_ROOT;
        a.victim = 0;
        test_killed_root(&a);
    } else {
        printf("usage: test_faults noinit|rootgone|rootgone_forked|stopped|stopped_far|abort|"
               "fdlimit|fdfull|killed_root|dropped\n");
        return 2;
    }
    return dh_finish();
}
