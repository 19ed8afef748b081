/*
 * Fault tests: test_fault <mode>
 *   kill_self    4 ranks loop 8 MiB all_reduces; rank 2 raise(SIGKILL)s itself after 3 iterations
 *   kill_parent  the same, but the parent SIGKILLs rank 2 while it is inside iteration 4
 *   abort        rank 1 calls coll_comm_abort after 3 iterations (and stays alive)
 *   noinit       rank 3 never calls coll_comm_init_rank (COLL_BOOTSTRAP_TIMEOUT)
 *   noinit2      ranks 0 and 2 never call coll_comm_init_rank
 *   mismatch     2 ranks call collectives that differ in count / datatype / op / root / kind
 *   stop         the parent SIGSTOPs rank 2 inside iteration 4: alive but stuck, its sockets
 *                stay open, so only the COLL_TIMEOUT deadline can end the wait
 * Survivors must fail (not hang) within COLL_TIMEOUT (+ margin), name the failed rank, report
 * the async error, and destroy/abort without hanging.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NRANKS    4
#define COUNT     (2u * 1024 * 1024) /* float32: 8 MiB */
#define MAX_ITERS 100000

typedef enum {
    M_KILL_SELF,
    M_KILL_PARENT,
    M_ABORT,
    M_NOINIT,
    M_NOINIT2,
    M_MISMATCH,
    M_STOP
} mode_t_;

typedef struct fshared {
    double t_fail; /* when the victim died / aborted (mp_now) */
    long iters[MP_MAX_RANKS];
    long killed;
    long done;  /* survivors that finished their checks */
    long named; /* survivors whose error named the victim */
    long rc[MP_MAX_RANKS];
} fshared_t;

typedef struct fargs {
    mode_t_ mode;
    int victim;
    double timeout; /* COLL_TIMEOUT or COLL_BOOTSTRAP_TIMEOUT, seconds */
    double margin;
    int sub; /* mismatch variant */
} fargs_t;

static const char *mode_names[] = {"kill_self", "kill_parent", "abort", "noinit",
                                   "noinit2",   "mismatch",    "stop"};

static void wait_done(fshared_t *fs, long want, double max_s)
{
    double end = mp_now() + max_s;
    while (mp_load(&fs->done) < want && mp_now() < end)
        mp_sleep(0.01);
}

/* Checks on a survivor after its failed call; rc is the failed call's result. */
static void survivor_checks(mp_ctx_t *ctx, const fargs_t *a, coll_result_t rc, double t_err,
                            float *s, float *r)
{
    fshared_t *fs = ctx->shared;
    const char *msg = coll_get_last_error();
    char msgcopy[1024];
    snprintf(msgcopy, sizeof(msgcopy), "%s", msg ? msg : "");
    double t_fail = mp_load_d(&fs->t_fail);
    double elapsed = t_fail > 0 ? t_err - t_fail : -1;
    mp_log("%s: failed with %s %.2f s after rank %d %s: \"%s\"", mode_names[a->mode],
           mp_result_name(rc), elapsed, a->victim,
           a->mode == M_ABORT  ? "aborted"
           : a->mode == M_STOP ? "was stopped"
                               : "died",
           msgcopy);
    CHECK(t_fail > 0, "the collective failed before rank %d failed (%s: \"%s\")", a->victim,
          mp_result_name(rc), msgcopy);
    if (a->mode == M_ABORT) {
        /* coll.h: the others "fail with COLL_ERR_REMOTE naming this rank" */
        CHECK(rc == COLL_ERR_REMOTE, "after rank %d aborted: expected COLL_ERR_REMOTE, got %s",
              a->victim, mp_result_name(rc));
    } else {
        /* a dead peer: REMOTE (connection lost, or told by another rank) or TIMEOUT */
        CHECK(rc == COLL_ERR_REMOTE || rc == COLL_ERR_TIMEOUT,
              "after rank %d was killed: expected COLL_ERR_REMOTE or COLL_ERR_TIMEOUT, got %s",
              a->victim, mp_result_name(rc));
    }
    CHECK(elapsed >= 0 && elapsed < a->timeout + a->margin,
          "error came %.2f s after the failure of rank %d (limit: COLL_TIMEOUT %.0f s + %.0f s)",
          elapsed, a->victim, a->timeout, a->margin);
    if (a->mode == M_STOP) {
        /* A stuck rank: only its neighbours can see that it is the one not moving; the
         * others may time out on a neighbour first. At least one survivor must name it
         * (checked by the parent). */
        if (mp_mentions_rank(msgcopy, a->victim))
            mp_add(&fs->named, 1);
    } else {
        CHECK(mp_mentions_rank(msgcopy, a->victim), "the last error does not name rank %d: \"%s\"",
              a->victim, msgcopy);
    }

    coll_result_t ae = COLL_SUCCESS;
    coll_result_t arc = coll_comm_get_async_error(ctx->comm, &ae);
    CHECK_RC(arc, COLL_SUCCESS, "coll_comm_get_async_error after the failure");
    CHECK(arc != COLL_SUCCESS || ae != COLL_SUCCESS,
          "coll_comm_get_async_error reports COLL_SUCCESS after the failure");

    /* "After an error every further operation fails": promptly, not after another timeout */
    double t0 = mp_now();
    coll_result_t rc2 = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, ctx->comm, NULL);
    double d2 = mp_now() - t0;
    CHECK(rc2 != COLL_SUCCESS, "an all_reduce after the failure succeeded");
    CHECK(d2 < 2.0, "an all_reduce after the failure took %.2f s to fail (%s)", d2,
          mp_result_name(rc2));

    /* cleanup must not hang: ranks 0 and 1 destroy, the others abort */
    t0 = mp_now();
    int use_abort = ctx->rank >= 2;
    coll_result_t crc = use_abort ? coll_comm_abort(ctx->comm) : coll_comm_destroy(ctx->comm);
    double d3 = mp_now() - t0;
    CHECK_RC(crc, COLL_SUCCESS, "%s of the failed communicator",
             use_abort ? "coll_comm_abort" : "coll_comm_destroy");
    CHECK(d3 < 5.0, "%s of the failed communicator took %.2f s",
          use_abort ? "coll_comm_abort" : "coll_comm_destroy", d3);
    ctx->comm = NULL;
}

static void loop_body(mp_ctx_t *ctx)
{
    const fargs_t *a = ctx->arg;
    fshared_t *fs = ctx->shared;
    int rank = ctx->rank;
    float *s = malloc(COUNT * sizeof(float));
    float *r = malloc(COUNT * sizeof(float));
    if (!s || !r)
        abort();
    for (size_t i = 0; i < COUNT; i++)
        s[i] = (float)((i + (size_t)rank) % 7);
    coll_result_t rc = COLL_SUCCESS;
    long it;
    for (it = 0; it < MAX_ITERS; it++) {
        if (rank == a->victim && it == 3) {
            if (a->mode == M_KILL_SELF) {
                mp_store_d(&fs->t_fail, mp_now());
                raise(SIGKILL);
            }
            if (a->mode == M_ABORT) {
                mp_store_d(&fs->t_fail, mp_now());
                double t0 = mp_now();
                rc = coll_comm_abort(ctx->comm);
                double d = mp_now() - t0;
                ctx->comm = NULL;
                CHECK_RC(rc, COLL_SUCCESS, "coll_comm_abort mid-loop");
                CHECK(d < 5.0, "coll_comm_abort took %.2f s", d);
                /* stay alive, so that the others learn of the abort from the abort itself */
                wait_done(fs, ctx->nranks - 1, 3 * a->timeout + 30);
                goto out;
            }
        }
        rc = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, ctx->comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        if (it == 0) {
            size_t bad = 0;
            for (size_t i = 0; i < COUNT; i++) {
                float exp = 0;
                for (int k = 0; k < ctx->nranks; k++)
                    exp += (float)((i + (size_t)k) % 7);
                bad += r[i] != exp;
            }
            CHECK(bad == 0, "first all_reduce: %zu wrong elements", bad);
        }
        mp_store(&fs->iters[rank], it + 1);
    }
    if (rc == COLL_SUCCESS) {
        mp_fail("%ld all_reduces succeeded although rank %d failed", it, a->victim);
        ctx->fatal = 1;
        goto out;
    }
    if (rank == a->victim) {
        mp_fail("rank %d (the victim) failed before being killed: %s: \"%s\"", rank,
                mp_result_name(rc), coll_get_last_error());
        ctx->fatal = 1;
        goto out;
    }
    survivor_checks(ctx, a, rc, mp_now(), s, r);
    mp_add(&fs->done, 1);
out:
    free(s);
    free(r);
}

/* SIGSTOP the victim inside iteration 4; SIGKILL it once the survivors are done. */
static void stop_poll(mp_parent_t *p)
{
    const fargs_t *a = p->arg;
    fshared_t *fs = p->shared;
    if (p->exited[a->victim])
        return;
    if (!fs->killed && mp_load(&fs->iters[a->victim]) >= 3) {
        mp_store_d(&fs->t_fail, mp_now());
        kill(p->pids[a->victim], SIGSTOP);
        fs->killed = 1;
    } else if (fs->killed == 1 && mp_load(&fs->done) >= p->nranks - 1) {
        kill(p->pids[a->victim], SIGKILL);
        fs->killed = 2;
    } else if (fs->killed == 1 && mp_now() > mp_load_d(&fs->t_fail) + 3 * a->timeout + 20) {
        kill(p->pids[a->victim], SIGKILL); /* survivors hang: let the deadline report them */
        fs->killed = 2;
    }
}

static void stop_done(mp_parent_t *p)
{
    const fargs_t *a = p->arg;
    fshared_t *fs = p->shared;
    long named = mp_load(&fs->named);
    CHECK(named >= 1, "no survivor's error named the stuck rank %d", a->victim);
    mp_log("stop: %ld of %d survivors named rank %d", named, p->nranks - 1, a->victim);
}

static void kill_poll(mp_parent_t *p)
{
    const fargs_t *a = p->arg;
    fshared_t *fs = p->shared;
    if (fs->killed || p->exited[a->victim])
        return;
    if (mp_load(&fs->iters[a->victim]) >= 3) {
        mp_store_d(&fs->t_fail, mp_now());
        kill(p->pids[a->victim], SIGKILL);
        fs->killed = 1;
    }
}

/* ---- ranks that never call init ---- */

static int is_missing(const fargs_t *a, int rank)
{
    if (a->mode == M_NOINIT)
        return rank == 3;
    return rank == 0 || rank == 2;
}

static void noinit_body(mp_ctx_t *ctx)
{
    const fargs_t *a = ctx->arg;
    fshared_t *fs = ctx->shared;
    int present = 0;
    for (int r = 0; r < ctx->nranks; r++)
        present += !is_missing(a, r);
    if (is_missing(a, ctx->rank)) {
        wait_done(fs, present, a->timeout * 3 + 20); /* alive, but never joins */
        return;
    }
    static int sentinel;
    coll_comm_t comm = (coll_comm_t)(void *)&sentinel;
    double t0 = mp_now();
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    double d = mp_now() - t0;
    const char *msg = coll_get_last_error();
    mp_log("%s: coll_comm_init_rank returned %s after %.2f s: \"%s\"", mode_names[a->mode],
           mp_result_name(rc), d, msg);
    if (rc == COLL_SUCCESS) {
        mp_fail("coll_comm_init_rank succeeded although ranks are missing");
        ctx->comm = comm;
        ctx->fatal = 1;
        mp_add(&fs->done, 1);
        return;
    }
    CHECK(rc == COLL_ERR_TIMEOUT, "expected COLL_ERR_TIMEOUT, got %s", mp_result_name(rc));
    CHECK(d < a->timeout + a->margin,
          "init failed after %.2f s (limit: COLL_BOOTSTRAP_TIMEOUT %.0f s + %.0f s)", d, a->timeout,
          a->margin);
    CHECK(d > a->timeout - 1.0, "init gave up after %.2f s, before COLL_BOOTSTRAP_TIMEOUT (%.0f s)",
          d, a->timeout);
    for (int r = 0; r < ctx->nranks; r++) {
        if (is_missing(a, r))
            CHECK(mp_mentions_rank(msg, r), "the error does not name missing rank %d: \"%s\"", r,
                  msg);
        else if (r != ctx->rank && mp_mentions_rank(msg, r))
            mp_log("note: the error also names rank %d, which did call init: \"%s\"", r, msg);
    }
    /* style.md: outputs are written only on success */
    CHECK(comm == (coll_comm_t)(void *)&sentinel,
          "coll_comm_init_rank overwrote its comm output on failure (%p)", (void *)comm);
    mp_add(&fs->done, 1);
}

/* ---- mismatched collectives between 2 ranks ---- */

typedef struct msub {
    const char *name;
    const char *const keywords[4]; /* one must appear in a COLL_ERR_MISMATCH message */
    /* Two ranks that both believe they are the broadcast root only send: neither can see the
     * mismatch during the call, so detection may come with the next (matching) call. */
    int may_defer;
} msub_t;

static const msub_t msubs[] = {
    {"count 1000 vs 1001", {"count", NULL}, 0},
    {"datatype float32 vs int32", {"datatype", "dtype", "type", NULL}, 0},
    {"op sum vs max", {" op", "operator", "sum", NULL}, 0},
    {"broadcast root 0 vs 1", {"root", "broadcast", NULL}, 1},
    {"all_reduce vs broadcast", {"all_reduce", "broadcast", "collective", NULL}, 0},
};

static void mismatch_body(mp_ctx_t *ctx)
{
    const fargs_t *a = ctx->arg;
    fshared_t *fs = ctx->shared;
    int rank = ctx->rank;
    size_t n = 1000;
    float *s = calloc(2048, sizeof(float)), *r = calloc(2048, sizeof(float));
    /* one matching call first, so that connections exist */
    coll_result_t rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, ctx->comm, NULL);
    if (!CHECK_RC(rc, COLL_SUCCESS, "matching all_reduce before the mismatch")) {
        ctx->fatal = 1;
        goto out;
    }
    double t0 = mp_now();
    switch (a->sub) {
    case 0:
        rc = coll_all_reduce(s, r, n + (size_t)rank, COLL_FLOAT32, COLL_SUM, ctx->comm, NULL);
        break;
    case 1:
        rc = coll_all_reduce(s, r, n, rank ? COLL_INT32 : COLL_FLOAT32, COLL_SUM, ctx->comm, NULL);
        break;
    case 2:
        rc = coll_all_reduce(s, r, n, COLL_FLOAT32, rank ? COLL_MAX : COLL_SUM, ctx->comm, NULL);
        break;
    case 3:
        rc = coll_broadcast(s, r, n, COLL_FLOAT32, rank, ctx->comm, NULL);
        break;
    default:
        if (rank == 0)
            rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, ctx->comm, NULL);
        else
            rc = coll_broadcast(s, r, n, COLL_FLOAT32, 0, ctx->comm, NULL);
        break;
    }
    double d = mp_now() - t0;
    if (rc == COLL_SUCCESS && msubs[a->sub].may_defer) {
        mp_log("mismatch %s: not detected by the call itself; the next call must fail",
               msubs[a->sub].name);
        rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, ctx->comm, NULL);
        d = mp_now() - t0;
    }
    const char *msg = coll_get_last_error();
    mp_store(&fs->rc[rank], rc);
    mp_log("mismatch %s: %s after %.2f s: \"%s\"", msubs[a->sub].name, mp_result_name(rc), d,
           rc == COLL_SUCCESS ? "" : msg);
    CHECK(rc != COLL_SUCCESS, "mismatch %s: the call succeeded", msubs[a->sub].name);
    CHECK(d < a->timeout + a->margin, "mismatch %s: the error took %.2f s", msubs[a->sub].name, d);
    if (rc == COLL_ERR_MISMATCH) {
        int found = 0;
        for (int k = 0; k < 4 && msubs[a->sub].keywords[k]; k++)
            found |= mp_contains(msg, msubs[a->sub].keywords[k]);
        CHECK(found, "mismatch %s: the COLL_ERR_MISMATCH message does not say what differs: \"%s\"",
              msubs[a->sub].name, msg);
        CHECK(mp_mentions_rank(msg, 1 - rank),
              "mismatch %s: the message does not name rank %d: \"%s\"", msubs[a->sub].name,
              1 - rank, msg);
    } else if (rc != COLL_SUCCESS) {
        CHECK(rc == COLL_ERR_REMOTE || rc == COLL_ERR_ABORTED,
              "mismatch %s: expected COLL_ERR_MISMATCH (or REMOTE from the peer's abort), got %s",
              msubs[a->sub].name, mp_result_name(rc));
    }
    if (rc != COLL_SUCCESS) {
        double t1 = mp_now();
        CHECK_RC(coll_comm_destroy(ctx->comm), COLL_SUCCESS,
                 "coll_comm_destroy after the mismatch");
        CHECK(mp_now() - t1 < 5.0, "coll_comm_destroy after the mismatch took %.2f s",
              mp_now() - t1);
        ctx->comm = NULL;
    }
out:
    free(s);
    free(r);
}

static void mismatch_done(mp_parent_t *p)
{
    const fargs_t *a = p->arg;
    fshared_t *fs = p->shared;
    int found = 0;
    for (int r = 0; r < p->nranks; r++)
        found |= mp_load(&fs->rc[r]) == COLL_ERR_MISMATCH;
    CHECK(found, "mismatch %s: no rank reported COLL_ERR_MISMATCH (rank 0: %s, rank 1: %s)",
          msubs[a->sub].name, mp_result_name((coll_result_t)mp_load(&fs->rc[0])),
          mp_result_name((coll_result_t)mp_load(&fs->rc[1])));
}

int main(int argc, char **argv)
{
    mp_init();
    if (argc < 2) {
        fprintf(stderr, "usage: %s kill_self|kill_parent|abort|noinit|noinit2|mismatch|stop\n",
                argv[0]);
        return 2;
    }
    fargs_t a;
    memset(&a, 0, sizeof(a));
    a.mode = (mode_t_)-1;
    for (int m = 0; m <= M_STOP; m++)
        if (strcmp(argv[1], mode_names[m]) == 0)
            a.mode = (mode_t_)m;
    if ((int)a.mode < 0) {
        fprintf(stderr, "unknown mode %s\n", argv[1]);
        return 2;
    }
    a.margin = mp_env_int("FAULT_MARGIN", 5);
    mp_opts_t o;
    memset(&o, 0, sizeof(o));
    o.name = argv[1];
    o.nranks = NRANKS;
    o.deadline_s = 75;
    o.expect_sigkill_rank = -1;
    o.arg = &a;
    switch (a.mode) {
    case M_KILL_SELF:
    case M_KILL_PARENT:
        a.victim = 2;
        a.timeout = mp_env_int("COLL_TIMEOUT", 10);
        o.body = loop_body;
        o.expect_sigkill_rank = 2;
        if (a.mode == M_KILL_PARENT)
            o.parent_poll = kill_poll;
        break;
    case M_STOP:
        a.victim = 2;
        a.timeout = mp_env_int("COLL_TIMEOUT", 10);
        o.body = loop_body;
        o.expect_sigkill_rank = 2;
        o.parent_poll = stop_poll;
        o.parent_done = stop_done;
        break;
    case M_ABORT:
        a.victim = 1;
        a.timeout = mp_env_int("COLL_TIMEOUT", 10);
        o.body = loop_body;
        break;
    case M_NOINIT:
    case M_NOINIT2:
        a.timeout = mp_env_int("COLL_BOOTSTRAP_TIMEOUT", 5);
        o.manual_init = 1;
        o.body = noinit_body;
        break;
    case M_MISMATCH:
        a.timeout = mp_env_int("COLL_TIMEOUT", 10);
        o.nranks = 2;
        o.body = mismatch_body;
        o.parent_done = mismatch_done;
        o.deadline_s = a.timeout * 2 + 15;
        for (a.sub = 0; a.sub < (int)(sizeof(msubs) / sizeof(msubs[0])); a.sub++) {
            long f0 = mp_failed;
            mp_run(&o);
            printf("mismatch %-28s %s\n", msubs[a.sub].name, mp_failed == f0 ? "ok" : "FAILED");
        }
        return mp_finish();
    }
    mp_run(&o);
    return mp_finish();
}
