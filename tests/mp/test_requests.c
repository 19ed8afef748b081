/*
 * Non-blocking send/recv requests (coll_isend, coll_irecv, coll_test, coll_wait,
 * coll_comm_progress): test_requests <mode> <nranks>
 *   ok:      rings whose recv is posted long before the send (8 B and 4 MiB), a 4 MiB send
 *            posted before its recv, many requests to each side tested out of order, a blocking
 *            send joining outstanding requests, a freed request that still completes, a
 *            collective refused while requests are outstanding, and the argument errors;
 *   abort:   rank 0 waits on a recv rank 1 never sends; another thread aborts rank 0's
 *            communicator: the wait ends with COLL_ERR_ABORTED naming rank 1, and rank 1's
 *            request fails naming rank 0; abort_progress: the same with rank 0 in
 *            coll_comm_progress calls of 50 ms (the abort must end the call it comes in, not
 *            be left to the next one, which would find the communicator gone);
 *   timeout: the same recv under COLL_TIMEOUT: COLL_ERR_TIMEOUT naming rank 1, in time;
 *   tag:     a recv whose tag differs from its send's: COLL_ERR_MISMATCH naming both tags;
 *   dead:    rank 0 is killed (SIGKILL) before it posted or sent anything; rank 1 waits on a
 *            recv from it: COLL_ERR_REMOTE naming rank 0, not COLL_TIMEOUT's finding. Over
 *            shared memory its link ends; over sockets and InfiniBand no connection from it
 *            exists, and a probe of its listener finds it gone.
 * Without requests, the first ring deadlocks: each rank's recv would hold back its send.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

static unsigned char pattern(int from, int msg, size_t i)
{
    return (unsigned char)(from * 37 + msg * 11 + i * 7 + (i >> 12));
}

static void fill(unsigned char *p, size_t n, int from, int msg)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pattern(from, msg, i);
}

static size_t wrong(const unsigned char *p, size_t n, int from, int msg)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += p[i] != pattern(from, msg, i);
    return bad;
}

/* Every rank reached point `at` (shared memory; the collectives cannot serve while requests are
 * out), or 20 s passed. */
static void arrive(mp_ctx_t *ctx, int at)
{
    long *count = (long *)ctx->shared + at;
    mp_add(count, 1);
    const double end = mp_now() + 20;
    while (mp_load(count) < ctx->nranks && mp_now() < end)
        mp_sleep(0.001);
}

static int ok(coll_result_t rc, const char *what)
{
    return CHECK_RC(rc, COLL_SUCCESS, "%s", what);
}

/* Each rank posts its recv from the left, works for `delay` s, then posts its send to the right
 * (send_first: the send first, then the recv after the delay). */
static void ring(mp_ctx_t *ctx, size_t bytes, double delay, bool send_first, int msg)
{
    const int n = ctx->nranks, right = (ctx->rank + 1) % n, left = (ctx->rank + n - 1) % n;
    unsigned char *s = malloc(bytes), *r = malloc(bytes);
    fill(s, bytes, ctx->rank, msg);
    memset(r, 0, bytes);
    coll_request_t rs = NULL, rr = NULL;
    char what[160];
    snprintf(what, sizeof(what), "ring of %zu B, %s first, %.0f ms apart", bytes,
             send_first ? "send" : "recv", delay * 1e3);
    const double t0 = mp_now();
    if (send_first)
        ok(coll_isend(s, bytes, COLL_UINT8, right, 7, ctx->comm, &rs), what);
    else
        ok(coll_irecv(r, bytes, COLL_UINT8, left, 7, ctx->comm, &rr), what);
    mp_sleep(delay);
    if (send_first)
        ok(coll_irecv(r, bytes, COLL_UINT8, left, 7, ctx->comm, &rr), what);
    else
        ok(coll_isend(s, bytes, COLL_UINT8, right, 7, ctx->comm, &rs), what);
    ok(coll_wait(rr), what);
    ok(coll_wait(rs), what);
    CHECK(wrong(r, bytes, left, msg) == 0, "%s: wrong data from rank %d", what, left);
    if (ctx->rank == 0)
        mp_log("%s: %.1f ms", what, (mp_now() - t0) * 1e3);
    coll_request_free(rs);
    coll_request_free(rr);
    free(s);
    free(r);
}

/* K messages of varied sizes (0 included) each way with both neighbours, posted in opposite
 * orders on the two sides of each link, completed through coll_comm_progress with an eventfd,
 * and tested in reverse. */
#define K 24
static void many(mp_ctx_t *ctx)
{
    const int n = ctx->nranks, right = (ctx->rank + 1) % n, left = (ctx->rank + n - 1) % n;
    unsigned char *s[K], *r[K];
    size_t len[K];
    coll_request_t rq[2 * K];
    int done[2 * K] = {0};
    for (int k = 0; k < K; k++) {
        len[k] = k % 5 == 0 ? 0 : (size_t)1 << (k % 21);
        s[k] = malloc(len[k] + 1);
        r[k] = malloc(len[k] + 1);
        fill(s[k], len[k], ctx->rank, k);
        memset(r[k], 0, len[k] + 1);
    }
    bool ok_posts = true;
    for (int k = 0; k < K && ok_posts; k++) { /* odd ranks: every recv first */
        ok_posts =
            ok(ctx->rank % 2 ? coll_irecv(r[k], len[k], COLL_UINT8, left, k, ctx->comm, &rq[K + k])
                             : coll_isend(s[k], len[k], COLL_UINT8, right, k, ctx->comm, &rq[k]),
               "post");
    }
    for (int k = 0; k < K && ok_posts; k++)
        ok_posts =
            ok(ctx->rank % 2 ? coll_isend(s[k], len[k], COLL_UINT8, right, k, ctx->comm, &rq[k])
                             : coll_irecv(r[k], len[k], COLL_UINT8, left, k, ctx->comm, &rq[K + k]),
               "post");
    if (!ok_posts) {
        ctx->fatal = 1;
        return;
    }
    int efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    int left_n = 2 * K, calls = 0;
    const double end = mp_now() + 30;
    while (left_n > 0 && mp_now() < end) {
        if (!ok(coll_comm_progress(ctx->comm, 50, efd), "coll_comm_progress"))
            break;
        calls++;
        for (int i = 2 * K - 1; i >= 0; i--) {
            if (done[i])
                continue;
            int d = 0;
            if (!ok(coll_test(rq[i], &d), "coll_test"))
                goto out;
            if (d) {
                done[i] = 1;
                left_n--;
            }
        }
    }
out:
    CHECK(left_n == 0, "%d of %d requests did not complete", left_n, 2 * K);
    size_t bad = 0;
    for (int k = 0; k < K; k++)
        bad += wrong(r[k], len[k], left, k) + (r[k][len[k]] != 0);
    CHECK(bad == 0, "many requests: %zu wrong bytes", bad);
    /* a finished request stays finished, and a second test of it says so */
    int d = 0;
    CHECK_RC(coll_test(rq[0], &d), COLL_SUCCESS, "coll_test of a finished request");
    CHECK(d == 1, "a finished request tests as not done");
    if (ctx->rank == 0)
        mp_log("many: %d requests, %d progress calls", 2 * K, calls);
    for (int k = 0; k < 2 * K; k++)
        coll_request_free(rq[k]);
    for (int k = 0; k < K; k++) {
        free(s[k]);
        free(r[k]);
    }
    close(efd);
}

/* A blocking send while this rank's recv request is outstanding: the send joins it, and the
 * recv completes too. Then a freed recv request that completes on its own. */
static void joined(mp_ctx_t *ctx)
{
    const int n = ctx->nranks, right = (ctx->rank + 1) % n, left = (ctx->rank + n - 1) % n;
    enum { B = 3 << 20 };
    unsigned char *s = malloc(B), *r = malloc(B), *r2 = malloc(B);
    fill(s, B, ctx->rank, 90);
    coll_request_t rr = NULL, rr2 = NULL;
    ok(coll_irecv(r, B, COLL_UINT8, left, 0, ctx->comm, &rr), "irecv before a blocking send");
    ok(coll_send(s, B, COLL_UINT8, right, ctx->comm, NULL), "blocking send joining a request");
    ok(coll_wait(rr), "the request the send joined");
    CHECK(wrong(r, B, left, 90) == 0, "recv joined by a blocking send: wrong data");
    coll_request_free(rr);
    /* a recv whose handle is freed at once still lands: a collective completes it first (the
     * next message's completion does not prove it, on several streams) */
    memset(r, 0, B);
    ok(coll_irecv(r, B, COLL_UINT8, left, 0, ctx->comm, &rr), "irecv then free");
    coll_request_free(rr);
    ok(coll_irecv(r2, 16, COLL_UINT8, left, 1, ctx->comm, &rr2), "irecv after a freed one");
    ok(coll_send(s, B, COLL_UINT8, right, ctx->comm, NULL), "send to the freed recv");
    ok(coll_send_tagged(s, 16, COLL_UINT8, right, 1, ctx->comm, NULL), "send after it");
    ok(coll_wait(rr2), "the recv after a freed one");
    int v = 1;
    ok(coll_all_reduce(&v, &v, 1, COLL_INT32, COLL_SUM, ctx->comm, NULL),
       "all_reduce after a freed request");
    CHECK(v == n, "all_reduce after a freed request: %d, not %d", v, n);
    CHECK(wrong(r, B, left, 90) == 0, "a freed recv request: wrong data");
    coll_request_free(rr2);
    free(s);
    free(r);
    free(r2);
}

/* Rank 1 sends 32 MiB to rank 0 and both free their requests before either completes: the
 * all_reduce that follows completes them first (a freed request cannot be waited on). */
static void freed_then_collective(mp_ctx_t *ctx)
{
    enum { B = 32 << 20 };
    unsigned char *buf = calloc(1, B);
    coll_request_t rq = NULL;
    if (ctx->rank == 1)
        fill(buf, B, 1, 95);
    if (ctx->rank == 0)
        ok(coll_irecv(buf, B, COLL_UINT8, 1, 0, ctx->comm, &rq), "irecv to be freed");
    arrive(ctx, 4); /* the send cannot have completed before its recv was freed */
    if (ctx->rank == 1)
        ok(coll_isend(buf, B, COLL_UINT8, 0, 0, ctx->comm, &rq), "isend to be freed");
    coll_request_free(rq);
    int v = 1;
    ok(coll_all_reduce(&v, &v, 1, COLL_INT32, COLL_SUM, ctx->comm, NULL),
       "all_reduce after freed requests");
    CHECK(v == ctx->nranks, "all_reduce after freed requests: %d, not %d", v, ctx->nranks);
    if (ctx->rank == 0)
        CHECK(wrong(buf, B, 1, 95) == 0, "a freed 32 MiB recv: wrong data");
    free(buf);
}

/* A collective while a request is outstanding is refused, and runs once it completed; the
 * argument errors. */
static void refusals(mp_ctx_t *ctx)
{
    const int n = ctx->nranks, right = (ctx->rank + 1) % n, left = (ctx->rank + n - 1) % n;
    /* 32 MiB each way: more than the transports buffer, so neither request can complete before
     * this rank waits on it, whatever the other ranks have done */
    enum { B = 32 << 20 };
    unsigned char *s = malloc(B), *r = calloc(1, B);
    fill(s, B, ctx->rank, 70);
    int v = 1;
    coll_request_t rr = NULL, rs = NULL;
    ok(coll_irecv(r, B, COLL_UINT8, left, 0, ctx->comm, &rr), "irecv");
    ok(coll_isend(s, B, COLL_UINT8, right, 0, ctx->comm, &rs), "isend");
    coll_result_t rc = coll_all_reduce(&v, &v, 1, COLL_INT32, COLL_SUM, ctx->comm, NULL);
    CHECK_RC(rc, COLL_ERR_INVALID_USAGE, "all_reduce with requests outstanding");
    CHECK(mp_contains(coll_get_last_error(), "coll_wait") &&
              mp_contains(coll_get_last_error(), "coll_comm_split"),
          "the refusal says what to do: %s", coll_get_last_error());
    ok(coll_wait(rr), "wait recv");
    ok(coll_wait(rs), "wait send");
    CHECK(wrong(r, B, left, 70) == 0, "32 MiB from rank %d: wrong data", left);
    ok(coll_all_reduce(&v, &v, 1, COLL_INT32, COLL_SUM, ctx->comm, NULL), "all_reduce after");
    CHECK(v == n, "all_reduce after the requests: %d, not %d", v, n);
    coll_request_free(rr);
    coll_request_free(rs);
    free(s);
    free(r);
    coll_request_t q = NULL;
    CHECK_RC(coll_isend(&v, 1, COLL_INT32, ctx->rank, 0, ctx->comm, &q), COLL_ERR_INVALID_USAGE,
             "isend to itself");
    CHECK(q == NULL, "a refused isend left a request");
    CHECK_RC(coll_isend(&v, 1, COLL_INT32, n, 0, ctx->comm, &q), COLL_ERR_INVALID_ARGUMENT,
             "isend to rank nranks");
    CHECK_RC(coll_irecv(&v, 1, COLL_INT32, left, 0, ctx->comm, NULL), COLL_ERR_INVALID_ARGUMENT,
             "irecv without a request");
    CHECK_RC(coll_irecv(NULL, 1, COLL_INT32, left, 0, ctx->comm, &q), COLL_ERR_INVALID_ARGUMENT,
             "irecv into NULL");
    CHECK_RC(coll_comm_progress(ctx->comm, -1, -1), COLL_ERR_INVALID_ARGUMENT,
             "coll_comm_progress with a negative timeout");
    CHECK_RC(coll_test(NULL, &v), COLL_ERR_INVALID_ARGUMENT, "coll_test(NULL)");
    coll_group_start();
    CHECK_RC(coll_isend(&v, 1, COLL_INT32, right, 0, ctx->comm, &q), COLL_ERR_INVALID_USAGE,
             "isend inside a group");
    coll_group_discard();
    /* empty messages: complete at once, on both sides, without a message */
    coll_request_t e = NULL;
    int d = 0;
    ok(coll_irecv(NULL, 0, COLL_INT32, left, 0, ctx->comm, &e), "empty irecv");
    CHECK_RC(coll_test(e, &d), COLL_SUCCESS, "test of an empty recv");
    CHECK(d == 1, "an empty recv is not complete at once");
    coll_request_free(e);
    coll_request_free(NULL);
    ok(coll_comm_progress(ctx->comm, 0, -1), "progress with nothing outstanding");
}

static void body_ok(mp_ctx_t *ctx)
{
    ring(ctx, 8, 0.05, false, 1);
    ring(ctx, 4 << 20, 0.05, false, 2);
    ring(ctx, 4 << 20, 0.05, true, 3);
    many(ctx);
    if (ctx->fatal)
        return;
    joined(ctx);
    freed_then_collective(ctx);
    refusals(ctx);
    coll_result_t ae = COLL_ERR_INTERNAL;
    ok(coll_comm_get_async_error(ctx->comm, &ae), "coll_comm_get_async_error");
    CHECK(ae == COLL_SUCCESS, "async error after the requests: %s", mp_result_name(ae));
    /* a recv nobody sends: a split is refused, saying why; then the communicator is destroyed
     * under it, and the request, which outlives it, says so */
    const int left = (ctx->rank + ctx->nranks - 1) % ctx->nranks;
    char x[8];
    coll_request_t late = NULL;
    coll_comm_t child = NULL;
    int d = 0;
    ok(coll_irecv(x, sizeof(x), COLL_UINT8, left, 9, ctx->comm, &late), "irecv never sent");
    CHECK_RC(coll_comm_split(ctx->comm, 0, ctx->rank, &child), COLL_ERR_INVALID_USAGE,
             "coll_comm_split with a request outstanding");
    CHECK(mp_contains(coll_get_last_error(), "coll_comm_split on a communicator with 1"),
          "the split's refusal: %s", coll_get_last_error());
    arrive(ctx, 0); /* no rank closes its connections before every one posted its recv */
    ok(coll_comm_destroy(ctx->comm), "destroy with a request outstanding");
    ctx->comm = NULL;
    CHECK_RC(coll_test(late, &d), COLL_ERR_ABORTED, "test of a request whose communicator is gone");
    CHECK(d == 1 && mp_contains(coll_get_last_error(), "destroyed or aborted before the request"),
          "done %d: %s", d, coll_get_last_error());
    coll_request_free(late);
}

static void *abort_later(void *arg)
{
    mp_sleep(0.3);
    (void)coll_comm_abort(arg);
    return NULL;
}

/* Rank 0 waits on a recv from rank 1, which posts its own recv from rank 0 and waits too. */
static void body_fail(mp_ctx_t *ctx, const char *mode)
{
    const int peer = ctx->rank == 0 ? 1 : 0;
    char buf[64] = {0};
    coll_request_t rr = NULL;
    if (ctx->rank > 1)
        return;
    if (strcmp(mode, "tag") == 0) {
        coll_request_t rs = NULL;
        /* The recv is posted before the send leaves, so the mismatch is found by the wait (a
         * send already there would fail the irecv itself: a CI run once saw that). */
        if (ctx->rank == 0)
            ok(coll_irecv(buf, sizeof(buf), COLL_UINT8, 1, 6, ctx->comm, &rr), "irecv tag 6");
        arrive(ctx, 3);
        if (ctx->rank == 1)
            ok(coll_isend(buf, sizeof(buf), COLL_UINT8, 0, 5, ctx->comm, &rs), "isend tag 5");
        coll_result_t rc = coll_wait(ctx->rank == 0 ? rr : rs);
        if (ctx->rank == 0) {
            CHECK_RC(rc, COLL_ERR_MISMATCH, "recv of tag 6 from a send of tag 5");
            CHECK(mp_contains(coll_get_last_error(), "tag"), "the mismatch names the tags: %s",
                  coll_get_last_error());
        }
        arrive(ctx, 1); /* rank 1 aborts (fatal) only once rank 0 has seen the mismatch */
        ctx->fatal = 1;
        coll_request_free(rr);
        coll_request_free(rs);
        return;
    }
    if (strcmp(mode, "dead") == 0) {
        /* rank 0 dies before it sent anything to rank 1 or posted anything at all, so no
         * connection from it exists to break (sockets: the sender connects; InfiniBand: the
         * lower rank does) */
        if (ctx->rank == 1)
            ok(coll_irecv(buf, sizeof(buf), COLL_UINT8, 0, 0, ctx->comm, &rr), "irecv from 0");
        arrive(ctx, 2);
        if (ctx->rank == 0)
            kill(getpid(), SIGKILL);
        const double t0 = mp_now();
        coll_result_t rc = coll_wait(rr);
        const double took = mp_now() - t0;
        /* COLL_ERR_TIMEOUT would be COLL_TIMEOUT's finding ("sent no data and no status") */
        CHECK_RC(rc, COLL_ERR_REMOTE, "recv from a rank killed meanwhile");
        CHECK(mp_mentions_rank(coll_get_last_error(), 0), "the error names rank 0: %s",
              coll_get_last_error());
        mp_log("the wait failed after %.2f s: %s", took, coll_get_last_error());
        ctx->fatal = 1;
        coll_request_free(rr);
        return;
    }
    ok(coll_irecv(buf, sizeof(buf), COLL_UINT8, peer, 0, ctx->comm, &rr), "irecv");
    arrive(ctx, 2); /* both recvs are posted before anything fails */
    pthread_t t;
    const bool aborts = strncmp(mode, "abort", 5) == 0, aborter = aborts && ctx->rank == 0;
    if (aborter && pthread_create(&t, NULL, abort_later, ctx->comm) != 0) {
        mp_fail("pthread_create");
        return;
    }
    const double t0 = mp_now();
    if (ctx->rank == 1 && strcmp(mode, "timeout") == 0) {
        mp_sleep(6); /* never sends; its own recv is not waited on */
        coll_request_free(rr);
        ctx->fatal = 1;
        return;
    }
    coll_result_t rc = COLL_SUCCESS;
    if (aborter && strcmp(mode, "abort_progress") == 0) /* calls that each sleep up to 50 ms */
        while (rc == COLL_SUCCESS && mp_now() - t0 < 10)
            rc = coll_comm_progress(ctx->comm, 50, -1);
    else
        rc = coll_wait(rr);
    const double took = mp_now() - t0;
    const char *msg = coll_get_last_error();
    if (aborter) {
        pthread_join(t, NULL);
        ctx->comm = NULL; /* freed by the abort */
        CHECK_RC(rc, COLL_ERR_ABORTED, "wait stopped by coll_comm_abort");
        CHECK(mp_contains(msg, "waiting on rank 1"), "the abort names rank 1: %s", msg);
        CHECK(took < 2.0, "the wait ended %.2f s after it began (abort at 0.3 s)", took);
        int d = 0; /* the communicator is gone: the request says so */
        CHECK_RC(coll_test(rr, &d), COLL_ERR_ABORTED, "test after the abort");
        CHECK(d == 1, "a request of an aborted communicator is not done");
    } else if (aborts) {
        CHECK(rc == COLL_ERR_REMOTE || rc == COLL_ERR_ABORTED,
              "rank 1's request after rank 0 aborted: %s", mp_result_name(rc));
        CHECK(mp_mentions_rank(msg, 0), "rank 1's error names rank 0: %s", msg);
        ctx->fatal = 1;
    } else {
        CHECK_RC(rc, COLL_ERR_TIMEOUT, "recv that never comes, COLL_TIMEOUT=2");
        CHECK(mp_mentions_rank(msg, 1), "the timeout names rank 1: %s", msg);
        CHECK(took > 1.5 && took < 5.0, "the timeout came after %.2f s (COLL_TIMEOUT=2)", took);
        ctx->fatal = 1;
    }
    coll_request_free(rr);
}

static const char *g_mode;

static void body(mp_ctx_t *ctx)
{
    if (strcmp(g_mode, "ok") == 0)
        body_ok(ctx);
    else
        body_fail(ctx, g_mode);
}

int main(int argc, char **argv)
{
    mp_init();
    if (argc < 3) {
        fprintf(stderr, "usage: %s ok|abort|abort_progress|timeout|tag|dead <nranks>\n", argv[0]);
        return 2;
    }
    g_mode = argv[1];
    mp_opts_t o;
    memset(&o, 0, sizeof(o));
    o.name = "requests";
    o.nranks = atoi(argv[2]);
    o.deadline_s = mp_env_int("MP_DEADLINE", 100);
    o.expect_sigkill_rank = strcmp(g_mode, "dead") == 0 ? 0 : -1;
    o.body = body;
    mp_run(&o);
    return mp_finish();
}
