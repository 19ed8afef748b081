/* Calls captured into CUDA graphs (libcoll/src/device/graph.c) through a GPU plugin
 * (COLL_CUDA_PLUGIN: the fake one here, the CUDA one on a GPU machine):
 *   replay    an all-reduce (in place and out of place), a PreMulSum and a send/recv ring
 *             captured into one graph; the graph replayed 4 times on new inputs, with eager
 *             calls on the same stream between replays (posted in stream order), once on
 *             another stream: every result right on every replay; a PreMulSum whose scalar is
 *             read at each call refused in a capture (3 ranks)
 *   late      the communicator destroyed while graphs that hold its calls exist: a replay then
 *             runs to its end and does nothing, never hangs; a graph destroyed before its
 *             communicator frees what it kept (2 ranks)
 *   failed    a copy fails on rank 1 during a replay: every rank's async error is set, every
 *             later replay runs through, nothing hangs (2 ranks)
 *   window    a call beyond the 1024 that wait behind a held stream fails after COLL_TIMEOUT
 *             saying why, the queued ones then run; with a graph alive (window) and without
 *             (window_eager), 2 ranks; window_room: 1500 calls behind a stream held for 0.5 s
 *             all run, the calls beyond 1024 waiting for room (2 ranks)
 *   refused   with a gate (COLL_CUDA_GATE=hostfunc, memop) a call on a capturing stream is
 *             refused before anything is enqueued on it (the capture ends clean), a collective
 *             and a group alike, on the default stream of another GPU too (2 ranks) */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dev_test.h"

/* Input element i of rank r at replay k: small integers, so every sum is exact. */
static float val(size_t i, int r, int k)
{
    return (float)((i * 3 + (size_t)r * 5 + (size_t)k * 7) % 13);
}

static void *dev_alloc(const colli_gpu_ops_t *o, size_t bytes)
{
    void *p = NULL;
    if (!CHECK(o->dev_alloc(&p, bytes) == 0, "device memory"))
        exit(1);
    return p;
}

static float *pinned(const colli_gpu_ops_t *o, size_t count)
{
    void *p = NULL;
    if (!CHECK(o->host_alloc(&p, count * sizeof(float)) == 0, "pinned memory"))
        exit(1);
    return p;
}

/* ---- replay ---- */

typedef struct {
    size_t count;
    float *in, *out, *acc, *scaled, *ring;      /* device */
    float *hin, *hout, *hacc, *hscaled, *hring; /* pinned */
} bufs_t;

/* The graph's calls: out = sum(in); acc = max(acc) in place (acc = in before each replay);
 * scaled = sum(in * (r + 1))
 * (PreMulSum, the scalar read at capture); ring = in of rank me - 1. */
static coll_result_t calls(coll_comm_t comm, const bufs_t *b, int me, int n, void *s)
{
    coll_result_t rc = coll_all_reduce(b->in, b->out, b->count, COLL_FLOAT32, COLL_SUM, comm, s);
    if (rc == COLL_SUCCESS)
        rc = coll_all_reduce(b->acc, b->acc, b->count, COLL_FLOAT32, COLL_MAX, comm, s);
    coll_op_t pre = 0;
    const float scalar = (float)(me + 1);
    if (rc == COLL_SUCCESS)
        rc = coll_op_create_premul_sum(&pre, &scalar, COLL_FLOAT32, COLL_SCALAR_IMMEDIATE, comm);
    if (rc == COLL_SUCCESS)
        rc = coll_all_reduce(b->in, b->scaled, b->count, COLL_FLOAT32, pre, comm, s);
    if (pre != 0)
        (void)coll_op_destroy(pre, comm);
    if (rc != COLL_SUCCESS)
        return rc;
    coll_group_start();
    coll_send(b->in, b->count, COLL_FLOAT32, (me + 1) % n, comm, s);
    coll_recv(b->ring, b->count, COLL_FLOAT32, (me + n - 1) % n, comm, s);
    return coll_group_end();
}

/* Check replay k's results on rank me. */
static long wrong(const bufs_t *b, int me, int n, int k)
{
    long bad = 0;
    for (size_t i = 0; i < b->count; i++) {
        float sum = 0, scaled = 0, max = 0;
        for (int r = 0; r < n; r++) {
            sum += val(i, r, k);
            scaled += val(i, r, k) * (float)(r + 1);
        }
        for (int r = 0; r < n; r++)
            max = val(i, r, k) > max ? val(i, r, k) : max;
        const bool no = b->hout[i] != sum || b->hacc[i] != max || b->hscaled[i] != scaled ||
                        b->hring[i] != val(i, (me + n - 1) % n, k);
        if (no && bad++ == 0)
            dh_log("rank %d: replay %d, element %zu: sum %g (want %g), max %g (%g), premul sum %g "
                   "(%g), ring %g (%g)",
                   me, k, i, (double)b->hout[i], (double)sum, (double)b->hacc[i], (double)max,
                   (double)b->hscaled[i], (double)scaled, (double)b->hring[i],
                   (double)val(i, (me + n - 1) % n, k));
    }
    return bad;
}

static void replay_size(dh_ctx_t *ctx, coll_comm_t comm, size_t count)
{
    const colli_gpu_ops_t *o = plugin();
    const int n = ctx->nranks, me = ctx->rank;
    void *s = NULL, *s2 = NULL;
    CHECK(o->stream_create(&s) == 0 && o->stream_create(&s2) == 0, "streams");
    const size_t bytes = count * sizeof(float);
    bufs_t b = {.count = count};
    b.in = dev_alloc(o, bytes), b.out = dev_alloc(o, bytes), b.acc = dev_alloc(o, bytes);
    b.scaled = dev_alloc(o, bytes), b.ring = dev_alloc(o, bytes);
    b.hin = pinned(o, count), b.hout = pinned(o, count), b.hacc = pinned(o, count);
    b.hscaled = pinned(o, count), b.hring = pinned(o, count);
    float *eager = dev_alloc(o, bytes), *heager = pinned(o, count);
    /* an eager call first (CUDA IPC's first agreement happens outside the graph, as in a
     * framework's warm-up), then the capture */
    coll_result_t rc = coll_all_reduce(b.in, eager, count, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: eager warm-up", me);
    CHECK(o->stream_sync(s) == 0, "warm-up ran");
    void *exec = NULL;
    CHECK(o->capture(s, 1, NULL) == 0, "rank %d: begin a capture", me);
    rc = calls(comm, &b, me, n, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: calls on a capturing stream", me);
    CHECK(o->capture(s, 0, &exec) == 0 && exec != NULL, "rank %d: the capture ends clean", me);
    for (int k = 0; k < 4; k++) {
        for (size_t i = 0; i < count; i++) {
            b.hin[i] = val(i, me, k);
            heager[i] = (float)(me + k);
        }
        /* replay 2 on another stream; an eager call before and after each replay */
        void *on = k == 2 ? s2 : s;
        CHECK(o->memcpy_async(eager, heager, bytes, on) == 0, "eager input");
        rc = coll_all_reduce(eager, eager, count, COLL_FLOAT32, COLL_SUM, comm, on);
        CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: eager call before replay %d",
                 me, k);
        CHECK(o->memcpy_async(b.in, b.hin, bytes, on) == 0 &&
                  o->memcpy_async(b.acc, b.hin, bytes, on) == 0,
              "inputs of replay %d", k);
        CHECK(o->graph_launch(exec, on) == 0, "rank %d: replay %d", me, k);
        rc = coll_all_reduce(eager, eager, count, COLL_FLOAT32, COLL_MAX, comm, on);
        CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: eager call after replay %d", me,
                 k);
        CHECK(o->memcpy_async(b.hout, b.out, bytes, on) == 0 &&
                  o->memcpy_async(b.hacc, b.acc, bytes, on) == 0 &&
                  o->memcpy_async(b.hscaled, b.scaled, bytes, on) == 0 &&
                  o->memcpy_async(b.hring, b.ring, bytes, on) == 0 &&
                  o->memcpy_async(heager, eager, bytes, on) == 0 && o->stream_sync(on) == 0,
              "rank %d: replay %d ran", me, k);
        long bad = wrong(&b, me, n, k);
        float esum = 0;
        for (int r = 0; r < n; r++)
            esum += (float)(r + k);
        for (size_t i = 0; i < count; i++)
            bad += heager[i] != esum;
        CHECK(bad == 0, "rank %d: %zu elements: %ld wrong after replay %d", me, count, bad, k);
    }
    coll_result_t ae = COLL_ERR_INTERNAL;
    CHECK(coll_comm_get_async_error(comm, &ae) == COLL_SUCCESS && ae == COLL_SUCCESS,
          "rank %d: no async error (%s)", me, dh_rc_name(ae));
    CHECK(o->graph_destroy(exec) == 0, "destroy the graph");
    float *bufs[] = {b.in, b.out, b.acc, b.scaled, b.ring, eager};
    float *hbufs[] = {b.hin, b.hout, b.hacc, b.hscaled, b.hring, heager};
    for (int i = 0; i < 6; i++) {
        o->dev_free(bufs[i]);
        o->host_free(hbufs[i]);
    }
    o->stream_destroy(s);
    o->stream_destroy(s2);
}

/* A PreMulSum whose scalar is read at each call cannot be captured: refused, and the capture
 * ends clean (nothing was put in it). */
static void pointer_scalar(dh_ctx_t *ctx, coll_comm_t comm)
{
    const colli_gpu_ops_t *o = plugin();
    const int me = ctx->rank;
    void *s = NULL;
    float *d = dev_alloc(o, 4000), scalar = 2.0f;
    coll_op_t pre = COLL_SUM;
    CHECK(o->stream_create(&s) == 0, "stream");
    CHECK_RC(coll_op_create_premul_sum(&pre, &scalar, COLL_FLOAT32, COLL_SCALAR_POINTER, comm),
             COLL_SUCCESS, coll_get_last_error(), "a pointer PreMulSum");
    CHECK(o->capture(s, 1, NULL) == 0, "rank %d: begin a capture", me);
    coll_result_t rc = coll_all_reduce(d, d, 1000, COLL_FLOAT32, pre, comm, s);
    CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(), "a pointer PreMulSum captured");
    CHECK_HAS(coll_get_last_error(), "COLL_SCALAR_IMMEDIATE", "says what to do");
    CHECK(o->capture(s, 0, NULL) == 0, "rank %d: the capture ends clean", me);
    CHECK_RC(coll_op_destroy(pre, comm), COLL_SUCCESS, coll_get_last_error(), "destroy the op");
    o->dev_free(d);
    o->stream_destroy(s);
}

static void replay_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = init(ctx);
    replay_size(ctx, comm, 1000);
    replay_size(ctx, comm, (1u << 20) + 3); /* several pipeline steps */
    pointer_scalar(ctx, comm);
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
}

/* ---- late ---- */

/* A graph of one all-reduce of count floats at buf on s (its exec). */
static void *captured(const colli_gpu_ops_t *o, coll_comm_t comm, float *buf, size_t count, void *s,
                      int me)
{
    void *exec = NULL;
    CHECK(o->capture(s, 1, NULL) == 0, "rank %d: begin a capture", me);
    coll_result_t rc = coll_all_reduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: a captured call", me);
    CHECK(o->capture(s, 0, &exec) == 0 && exec != NULL, "rank %d: the capture ends", me);
    return exec;
}

static void late_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    const int me = ctx->rank;
    const size_t count = 4096;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    float *buf = dev_alloc(o, count * sizeof(float)), *h = pinned(o, count);
    for (size_t i = 0; i < count; i++)
        h[i] = 1.0f;
    CHECK(o->memcpy_async(buf, h, count * sizeof(float), s) == 0, "fill");
    /* a graph destroyed before its communicator, replayed once */
    coll_comm_t comm = init(ctx);
    void *exec = captured(o, comm, buf, count, s, me);
    CHECK(o->graph_launch(exec, s) == 0 && o->stream_sync(s) == 0, "rank %d: a replay", me);
    CHECK(o->graph_destroy(exec) == 0, "destroy the graph");
    /* a graph that outlives its communicator */
    exec = captured(o, comm, buf, count, s, me);
    CHECK(o->graph_launch(exec, s) == 0 && o->stream_sync(s) == 0, "rank %d: a replay", me);
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    const double t0 = dh_now();
    for (int k = 0; k < 3; k++)
        CHECK(o->graph_launch(exec, s) == 0, "rank %d: replay %d after destroy", me, k);
    CHECK(o->memcpy_async(h, buf, count * sizeof(float), s) == 0 && o->stream_sync(s) == 0,
          "rank %d: the replays after destroy run to their end", me);
    CHECK(dh_now() - t0 < 10.0, "rank %d: at once (%.1f s)", me, dh_now() - t0);
    /* through CUDA IPC they run no stale list of an earlier call (which would add again);
     * the pipeline's copies run, on buffers whose contents are undefined by then */
    const char *ipc = getenv("COLL_CUDA_IPC");
    if (ipc == NULL || strcmp(ipc, "0") != 0)
        CHECK(h[0] == 4.0f && h[count - 1] == 4.0f,
              "rank %d: the replays after destroy change nothing (%g, want 4: two replays)", me,
              (double)h[0]);
    CHECK(o->graph_destroy(exec) == 0, "destroy the graph");
    o->dev_free(buf);
    o->host_free(h);
    o->stream_destroy(s);
}

/* ---- failed ---- */

static void failed_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    const int me = ctx->rank;
    const char *ipc = getenv("COLL_CUDA_IPC");
    /* CUDA IPC copies at each replay (2 per call with 2 ranks: the second replay fails);
     * the pipeline's copies are counted at the capture (its fifth: the capture fails them all) */
    if (me == 1)
        dh_setenv("COLL_TEST_DEV_FAIL_COPY", ipc != NULL && strcmp(ipc, "0") == 0 ? "5" : "3");
    coll_comm_t comm = init(ctx);
    const size_t count = 100000;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    float *buf = dev_alloc(o, count * sizeof(float));
    coll_result_t rc = coll_all_reduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: eager warm-up", me);
    void *exec = captured(o, comm, buf, count, s, me);
    const double t0 = dh_now();
    for (int k = 0; k < 4; k++)
        CHECK(o->graph_launch(exec, s) == 0, "rank %d: replay %d", me, k);
    CHECK(o->stream_sync(s) == 0, "rank %d: the stream goes on after the failure", me);
    CHECK(dh_now() - t0 < 20.0, "rank %d: no replay waited for a timeout (%.1f s)", me,
          dh_now() - t0);
    coll_result_t ae = COLL_SUCCESS;
    CHECK(coll_comm_get_async_error(comm, &ae) == COLL_SUCCESS, "get_async_error");
    CHECK(ae == (me == 1 ? COLL_ERR_CUDA : COLL_ERR_REMOTE), "rank %d: async error %s", me,
          dh_rc_name(ae));
    /* the next call fails with the communicator's error, which names the failed copy */
    rc = coll_all_reduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK(rc == ae, "rank %d: the next call fails with it (%s)", me, dh_rc_name(rc));
    CHECK_HAS(coll_get_last_error(), "injected failure", "rank %d: names the failed copy", me);
    coll_comm_destroy(comm);
    CHECK(o->graph_destroy(exec) == 0, "destroy the graph");
    o->dev_free(buf);
    o->stream_destroy(s);
}

/* ---- window ---- */

/* DEV_GATE_WORDS (1024) calls wait behind a stream held for hold_us, with a graph alive (every
 * call then posted by its stream) or not: a call beyond them waits for room, and fails after
 * COLL_TIMEOUT (2 s) saying why when none comes; the queued ones run. */
static void window_check(dh_ctx_t *ctx, bool graph, unsigned hold_us, int calls_want)
{
    const colli_gpu_ops_t *o = plugin();
    const int me = ctx->rank;
    dh_setenv("COLL_TIMEOUT", "2");
    coll_comm_t comm = init(ctx);
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    float *buf = dev_alloc(o, 16), *h = pinned(o, 4);
    void *exec = graph ? captured(o, comm, buf, 4, s, me) : NULL;
    for (int i = 0; i < 4; i++)
        h[i] = 1.0f;
    CHECK(o->delay(s, hold_us) == 0 && o->memcpy_async(buf, h, 16, s) == 0, "hold the stream");
    int calls = 0;
    coll_result_t rc = COLL_SUCCESS;
    for (; calls < calls_want && rc == COLL_SUCCESS; calls++)
        rc = coll_all_reduce(buf, buf, 4, COLL_FLOAT32, COLL_MAX, comm, s);
    if (calls_want > 1100) {
        CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "calls beyond the window wait");
    } else {
        CHECK(calls == 1025, "rank %d: the call refused is the 1025th (%d)", me, calls);
        CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(), "a call beyond the window");
        CHECK_HAS(coll_get_last_error(), "cannot be queued beyond 1024", "says why");
    }
    CHECK(o->memcpy_async(h, buf, 16, s) == 0 && o->stream_sync(s) == 0,
          "rank %d: the queued calls run", me);
    CHECK(h[0] == 1.0f && h[3] == 1.0f, "rank %d: their result (%g)", me, (double)h[0]);
    coll_result_t ae = COLL_ERR_INTERNAL;
    CHECK(coll_comm_get_async_error(comm, &ae) == COLL_SUCCESS && ae == COLL_SUCCESS,
          "rank %d: no async error (%s)", me, dh_rc_name(ae));
    CHECK(exec == NULL || o->graph_destroy(exec) == 0, "destroy the graph");
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    o->dev_free(buf);
    o->host_free(h);
    o->stream_destroy(s);
}

static void window_body(dh_ctx_t *ctx)
{
    window_check(ctx, true, 8000000, 1100);
}

static void window_eager_body(dh_ctx_t *ctx)
{
    window_check(ctx, false, 8000000, 1100);
}

static void window_room_body(dh_ctx_t *ctx)
{
    window_check(ctx, false, 500000, 1500);
}

/* ---- refused ---- */

static void refused_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    coll_comm_t comm = init(ctx);
    const int me = ctx->rank, peer = 1 - me;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    float *d = dev_alloc(o, 4000);
    CHECK(o->capture(s, 1, NULL) == 0, "rank %d: begin a capture", me);
    coll_result_t rc = coll_all_reduce(d, d, 1000, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(), "a call on a capturing stream");
    CHECK_HAS(coll_get_last_error(), "capturing a CUDA graph", "says why");
    CHECK_HAS(coll_get_last_error(), "leave COLL_CUDA_GATE unset", "says what to do");
    coll_group_start();
    coll_send(d, 1000, COLL_FLOAT32, peer, comm, s);
    coll_recv(d, 1000, COLL_FLOAT32, peer, comm, s);
    rc = coll_group_end();
    CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(), "a group on a capturing stream");
    CHECK_HAS(coll_get_last_error(), "capturing a CUDA graph", "says why");
    CHECK(o->capture(s, 0, NULL) == 0, "rank %d: the capture ends clean", me);
    rc = coll_all_reduce(d, d, 1000, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: the communicator works on", me);
    CHECK(o->stream_sync(s) == 0, "sync");
    /* the default stream of a call is its buffers' GPU's: a capture there is seen with GPU 0
     * current, and nothing is put in it */
    void *d1 = NULL;
    if (o->set_device(1) == 0 && o->dev_alloc(&d1, 4000) == 0) {
        coll_comm_t c1 = NULL;
        CHECK_RC(coll_comm_split(comm, 0, me, &c1), COLL_SUCCESS, coll_get_last_error(),
                 "a second communicator, no device call yet");
        CHECK(o->set_device(1) == 0 && o->capture(NULL, 1, NULL) == 0,
              "rank %d: begin a capture on GPU 1's default stream", me);
        (void)o->set_device(0);
        rc = coll_all_reduce(d1, d1, 1000, COLL_FLOAT32, COLL_SUM, c1, NULL);
        CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(),
                 "GPU 1 buffers on the default stream, GPU 0 current, GPU 1's capturing");
        CHECK(o->set_device(1) == 0 && o->capture(NULL, 0, NULL) == 0,
              "rank %d: GPU 1's capture ends clean", me);
        (void)o->set_device(0);
        CHECK_RC(coll_comm_destroy(c1), COLL_SUCCESS, coll_get_last_error(), "destroy");
        o->dev_free(d1);
    } else {
        dh_log("rank %d: one GPU: the second GPU's default stream is not tried", me);
        (void)o->set_device(0);
    }
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    o->dev_free(d);
    o->stream_destroy(s);
}

static void run(const char *name, int nranks, void (*body)(dh_ctx_t *))
{
    dh_job_t *j = start_wait(name, nranks, body, 120);
    if (j != NULL)
        dh_free(j);
}

int main(int argc, char **argv)
{
    dh_init();
    if (argc != 2) {
        fprintf(stderr,
                "usage: test_graph replay|late|failed|window|window_eager|window_room|refused\n");
        return 2;
    }
    require_plugin();
    const char *c = argv[1];
    if (strcmp(c, "replay") == 0)
        run("replay", 3, replay_body);
    else if (strcmp(c, "late") == 0)
        run("late", 2, late_body);
    else if (strcmp(c, "window") == 0)
        run("window", 2, window_body);
    else if (strcmp(c, "window_eager") == 0)
        run("window_eager", 2, window_eager_body);
    else if (strcmp(c, "window_room") == 0)
        run("window_room", 2, window_room_body);
    else if (strcmp(c, "failed") == 0)
        run("failed", 2, failed_body);
    else if (strcmp(c, "refused") == 0)
        run("refused", 2, refused_body);
    else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    return dh_finish();
}
