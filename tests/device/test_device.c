/* The device-buffer path through a GPU plugin (COLL_CUDA_PLUGIN: the fake one here, the CUDA one
 * on a GPU machine). Every buffer comes from the plugin and is filled and read with the
 * plugin's copies, so the same cases run on a real GPU:
 *   order     a call returns while its stream is held; it sees the copy enqueued before it,
 *             the next call and copy see its result (2 ranks)
 *   p2p       a ring exchange and an uneven all-to-all-v in groups, a send to self (3 ranks)
 *   errors    a copy fails on rank 1 (between the ranks' buffers through CUDA IPC, or a staging
 *             copy of the pipeline with COLL_CUDA_IPC=0): every rank's stream goes on, every
 *             rank's async error is set (rank 1's names the copy, the others name rank 1), the
 *             next call fails (3 ranks)
 *   mismatch  ranks that call different reductions on device buffers, or one on host buffers
 *             and one on device buffers, fail with a mismatch naming both calls; a corrupt CUDA
 *             IPC descriptor fails every rank naming its sender (fake GPU only) (2 ranks)
 *   usage     host and device buffers mixed, a stream with host buffers, a group mixing them,
 *             count 0, buffers on a second GPU
 *             (FAKE_GPU_DEVICES=2); a plugin that cannot be loaded, is not a plugin or has no
 *             GPU
 *   stall     one hardware queue for every stream: inline programs give the right sums; with
 *             a held gate (memop, hostfunc) a call whose copies queue behind its own gate
 *             fails at COLL_TIMEOUT saying why, never hangs (2 ranks)
 *   evict     more peers' buffers than the CUDA IPC mapping cache holds, calls queued: the
 *             evicted mappings are closed on the caller's thread, never on the progress thread
 *             (2 ranks)
 *   teardown  destroy waits for a queued call; abort while a call waits for its stream returns
 *             at once and opens the gate (2 ranks) */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dev_test.h"

#define HOLD_FLAG(r) (&ctx->sh->user[8 + (r)]) /* set: the hold on rank r's stream ends */
#define PAST_BARRIER (&ctx->sh->user[40])      /* ranks whose barrier all_reduce returned */

/* Does this run take CUDA IPC between the ranks (COLL_CUDA_IPC, default 1; not with one
 * hardware queue, CUDA_DEVICE_MAX_CONNECTIONS=1)? */
static bool via_ipc(void)
{
    const char *v = getenv("COLL_CUDA_IPC"), *q = getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    return (v == NULL || strcmp(v, "0") != 0) && (q == NULL || strcmp(q, "1") != 0);
}

typedef struct {
    long *flag;
    double max_s;
} hold_t;

/* On the stream: wait until *flag is set (or max_s passed: never a hang). */
static void hold_fn(void *arg)
{
    hold_t *h = arg;
    double end = dh_now() + h->max_s;
    while (dh_load(h->flag) == 0 && dh_now() < end)
        dh_sleep(0.002);
}

static float val(size_t i, int rank)
{
    return (float)((i * 5 + (size_t)rank * 7) % 11);
}

/* count floats of device memory filled with val(., rank) through pinned staging. */
static float *dev_filled(const colli_gpu_ops_t *o, size_t count, int rank, void *stream)
{
    void *d = NULL, *h = NULL;
    if (!CHECK(o->dev_alloc(&d, count * 4) == 0 && o->host_alloc(&h, count * 4) == 0,
               "device and pinned memory"))
        exit(1);
    for (size_t i = 0; i < count; i++)
        ((float *)h)[i] = val(i, rank);
    CHECK(o->memcpy_async(d, h, count * 4, stream) == 0 && o->stream_sync(stream) == 0, "fill");
    o->host_free(h);
    return d;
}

/* Bytes of device memory back to a new host buffer (synchronously). */
static float *dev_read(const colli_gpu_ops_t *o, const void *d, size_t count)
{
    float *h = malloc(count * 4);
    if (h == NULL ||
        !CHECK(o->memcpy_async(h, d, count * 4, NULL) == 0 && o->stream_sync(NULL) == 0,
               "read back"))
        exit(1);
    return h;
}

/* ---- order ---- */

static void order_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    coll_comm_t comm = init(ctx);
    const int n = ctx->nranks, me = ctx->rank;
    const size_t count = (1u << 20) + 3;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    float *in = dev_filled(o, count, 99, s), *out = dev_filled(o, count, 98, s);
    float *hin = NULL, *hout = NULL;
    CHECK(o->host_alloc((void **)&hin, count * 4) == 0 &&
              o->host_alloc((void **)&hout, count * 4) == 0,
          "pinned");
    for (size_t i = 0; i < count; i++) {
        hin[i] = val(i, me);
        hout[i] = -1.0f;
    }
    /* the stream: held, a delay, the copy that writes the input, the collective, an in-place
     * collective on its output, the copy that reads that */
    hold_t hold = {HOLD_FLAG(me), 30.0};
    CHECK(o->host_func(s, hold_fn, &hold) == 0 && o->delay(s, 20000) == 0 &&
              o->memcpy_async(in, hin, count * 4, s) == 0,
          "enqueue before");
    coll_result_t rc = coll_all_reduce(in, out, count, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "all_reduce returns while its stream waits");
    rc = coll_all_reduce(out, out, count, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "a second call queues behind it");
    CHECK(o->memcpy_async(hout, out, count * 4, s) == 0, "enqueue after");
    dh_sleep(0.2);
    CHECK(hout[0] == -1.0f && hout[count - 1] == -1.0f,
          "rank %d: nothing ran while the stream was held", me);
    dh_store(HOLD_FLAG(me), 1);
    CHECK(o->stream_sync(s) == 0, "stream_sync");
    long bad = 0;
    for (size_t i = 0; i < count; i++) {
        float sum = 0;
        for (int r = 0; r < n; r++)
            sum += val(i, r);
        bad += hout[i] != sum * (float)n;
    }
    CHECK(bad == 0, "rank %d: %ld wrong elements after the two all_reduces", me, bad);
    coll_result_t ae = COLL_ERR_INTERNAL;
    CHECK(coll_comm_get_async_error(comm, &ae) == COLL_SUCCESS && ae == COLL_SUCCESS,
          "no async error");
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    o->dev_free(in);
    o->dev_free(out);
    o->host_free(hin);
    o->host_free(hout);
    o->stream_destroy(s);
}

/* ---- p2p ---- */

static void p2p_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    coll_comm_t comm = init(ctx);
    const int n = ctx->nranks, me = ctx->rank;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    /* ring: send to me+1, receive from me-1, and a send to self, in one group */
    const size_t count = 300001;
    float *snd = dev_filled(o, count, me, s), *rcv = dev_filled(o, count, 77, s);
    float *self = dev_filled(o, 5, 66, s);
    coll_group_start();
    coll_send(snd, count, COLL_FLOAT32, (me + 1) % n, comm, s);
    coll_recv(rcv, count, COLL_FLOAT32, (me + n - 1) % n, comm, s);
    coll_send(snd, 5, COLL_FLOAT32, me, comm, s);
    coll_recv(self, 5, COLL_FLOAT32, me, comm, s);
    coll_result_t rc = coll_group_end();
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "ring group");
    CHECK(o->stream_sync(s) == 0, "sync");
    float *h = dev_read(o, rcv, count), *hs = dev_read(o, self, 5);
    long bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += h[i] != val(i, (me + n - 1) % n);
    for (size_t i = 0; i < 5; i++)
        bad += hs[i] != val(i, me);
    CHECK(bad == 0, "rank %d: %ld wrong elements in the ring exchange", me, bad);
    free(h);
    free(hs);
    /* all-to-all-v: rank i sends (i + j + 1) * 1000 elements to rank j */
    float *big = dev_filled(o, 64000, me, s), *got = dev_filled(o, 64000, 55, s);
    coll_group_start();
    size_t off = 0;
    for (int j = 0; j < n; j++) {
        coll_send(big, (size_t)(me + j + 1) * 1000, COLL_FLOAT32, j, comm, s);
        coll_recv(got + off, (size_t)(j + me + 1) * 1000, COLL_FLOAT32, j, comm, s);
        off += (size_t)(j + me + 1) * 1000;
    }
    rc = coll_group_end();
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "all-to-all-v group");
    CHECK(o->stream_sync(s) == 0, "sync");
    h = dev_read(o, got, off);
    bad = 0;
    off = 0;
    for (int j = 0; j < n; j++)
        for (size_t i = 0; i < (size_t)(j + me + 1) * 1000; i++)
            bad += h[off++] != val(i, j);
    CHECK(bad == 0, "rank %d: %ld wrong elements in the all-to-all-v", me, bad);
    free(h);
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    o->stream_destroy(s);
}

/* ---- errors ---- */

static void errors_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    /* through CUDA IPC a call makes 2 copies (to the 2 peers), through the pipeline 4 (one step):
     * the first copy of the second call fails */
    if (ctx->rank == 1)
        dh_setenv("COLL_TEST_DEV_FAIL_COPY", via_ipc() ? "3" : "5");
    coll_comm_t comm = init(ctx);
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    const size_t count = 100000;
    float *buf = dev_filled(o, count, ctx->rank, s);
    coll_result_t rc = COLL_SUCCESS;
    int calls = 0;
    for (; calls < 4 && rc == COLL_SUCCESS; calls++)
        rc = coll_all_reduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, comm, s);
    /* the gates open even though calls failed: the stream finishes */
    CHECK(o->stream_sync(s) == 0, "rank %d: the stream goes on after the failure", ctx->rank);
    coll_result_t ae = COLL_SUCCESS;
    CHECK(coll_comm_get_async_error(comm, &ae) == COLL_SUCCESS, "get_async_error");
    dh_record(ctx, "async error", ae);
    rc = coll_all_reduce(buf, buf, count, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK(rc == ae && rc != COLL_SUCCESS, "rank %d: the next call fails with it (%s)", ctx->rank,
          dh_rc_name(rc));
    coll_comm_destroy(comm);
    o->stream_destroy(s);
}

/* ---- stall ---- */

/* Does this run hold the caller's stream while the progress thread runs the call on streams of
 * its own (COLL_CUDA_GATE=memop or hostfunc), rather than enqueue the call's whole program on
 * the caller's stream (inline, the default where the driver has stream memory operations)? */
static bool held_gate(void)
{
    const char *g = getenv("COLL_CUDA_GATE");
    return g != NULL && (strcmp(g, "memop") == 0 || strcmp(g, "hostfunc") == 0);
}

/* One hardware queue for every stream (FAKE_GPU_CONNECTIONS=1 on the fake GPU,
 * CUDA_DEVICE_MAX_CONNECTIONS=1 on a GPU, set for both). Inline programs never wait behind
 * their own stream: an all_reduce through the pipeline and one of CUDA IPC's size (which the
 * library then runs inline too) give the right sums. With a held gate the copies queue behind
 * the gate on the fake GPU: the call must then fail at COLL_TIMEOUT saying why, the stream
 * going on, never hang; on a GPU either outcome is accepted and told. */
static void stall_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    const bool fake = strstr(getenv("COLL_CUDA_PLUGIN"), "fake") != NULL;
    coll_comm_t comm = init(ctx);
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    /* 4 KB, 400 KB (CUDA IPC's size; FAKE_GPU_NO_IPC=1: the fallback, then the pipeline) */
    const size_t counts[3] = {1000, 100000, 100000};
    for (int c = 0; c < 3; c++) {
        const size_t count = counts[c];
        float *d = dev_filled(o, count, ctx->rank, s);
        coll_result_t rc = coll_all_reduce(d, d, count, COLL_FLOAT32, COLL_SUM, comm, s);
        CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: the call is queued", ctx->rank);
        CHECK(o->stream_sync(s) == 0, "rank %d: the stream goes on", ctx->rank);
        coll_result_t ae = COLL_ERR_INTERNAL;
        CHECK(coll_comm_get_async_error(comm, &ae) == COLL_SUCCESS, "get_async_error");
        const char *m = coll_get_last_error();
        const bool stalled = strstr(m, "CUDA_DEVICE_MAX_CONNECTIONS") != NULL;
        if (ae == COLL_SUCCESS && !(fake && held_gate())) {
            float *r = dev_read(o, d, count);
            long bad = 0;
            for (size_t i = 0; i < count; i++)
                bad += r[i] != val(i, 0) + val(i, 1);
            CHECK(bad == 0, "rank %d: %ld wrong sums of %zu", ctx->rank, bad, count);
            dh_log("rank %d: %zu floats: no stall with one hardware queue", ctx->rank, count);
            free(r);
            o->dev_free(d);
            continue;
        }
        CHECK(held_gate() || (!fake && stalled),
              "rank %d: %zu floats: an inline program stalled or failed: %s (%s)", ctx->rank, count,
              m, dh_rc_name(ae));
        CHECK(ae == COLL_ERR_CUDA || ae == COLL_ERR_REMOTE, "rank %d: async error %s", ctx->rank,
              dh_rc_name(ae));
        rc = coll_all_reduce(d, d, count, COLL_FLOAT32, COLL_SUM, comm, s);
        CHECK(rc == ae, "rank %d: the next call fails with it", ctx->rank);
        m = coll_get_last_error();
        CHECK(strstr(m, "CUDA_DEVICE_MAX_CONNECTIONS") != NULL || dh_names_rank(m, 1 - ctx->rank),
              "rank %d: says why, or names the peer that stalled: %s", ctx->rank, m);
        dh_log("rank %d: stalled with one hardware queue: %s", ctx->rank, m);
        break; /* d not freed: the stalled copies may still run (the fake's free does not wait
                * for the device, as cudaFree does) */
    }
    coll_comm_destroy(comm);
    o->stream_destroy(s);
}

/* ---- mismatch ---- */

typedef struct {
    const colli_gpu_ops_t *o;
    void *s;
    float *d;
    coll_comm_t comm;
} mm_t;

static mm_t mm_setup(dh_ctx_t *ctx, size_t count)
{
    mm_t m = {.o = plugin()};
    CHECK(m.o->stream_create(&m.s) == 0, "stream");
    m.d = dev_filled(m.o, count, ctx->rank, m.s);
    m.comm = init(ctx);
    return m;
}

static void mm_teardown(mm_t *m)
{
    coll_comm_destroy(m->comm);
    m->o->dev_free(m->d);
    m->o->stream_destroy(m->s);
}

/* Rank 0 sums, rank 1 takes the max, both on device buffers: each rank reduces its own piece
 * (pipeline) or slice (CUDA IPC), so without the call's fingerprint on every step the ranks would
 * end with different results and no error. */
static void mismatch_op(dh_ctx_t *ctx, size_t count)
{
    const int me = ctx->rank;
    mm_t m = mm_setup(ctx, count);
    CHECK_RC(
        coll_all_reduce(m.d, m.d, count, COLL_FLOAT32, me == 0 ? COLL_SUM : COLL_MAX, m.comm, m.s),
        COLL_SUCCESS, coll_get_last_error(), "rank %d: queued", me);
    CHECK(m.o->stream_sync(m.s) == 0, "rank %d: the stream goes on", me);
    coll_result_t ae = COLL_SUCCESS;
    CHECK(coll_comm_get_async_error(m.comm, &ae) == COLL_SUCCESS, "get_async_error");
    CHECK(ae == COLL_ERR_MISMATCH || ae == COLL_ERR_REMOTE, "rank %d: op mismatch: async error %s",
          me, dh_rc_name(ae));
    (void)coll_all_reduce(m.d, m.d, count, COLL_FLOAT32, COLL_SUM, m.comm, m.s);
    const char *msg = coll_get_last_error();
    char want[2][96];
    for (int i = 0; i < 2; i++)
        snprintf(want[i], sizeof(want[i]), "all_reduce(count %zu, float32, %s) (device buffers",
                 count, i == 0 ? "sum" : "max"); /* ", single-copy path)" where it took one */
    CHECK_HAS(msg, want[0], "rank %d: count %zu: names sum", me, count);
    CHECK_HAS(msg, want[1], "rank %d: count %zu: names max", me, count);
    mm_teardown(&m);
}

static void mismatch_op_small(dh_ctx_t *ctx)
{
    mismatch_op(ctx, 4096); /* below COLL_SHM_DIRECT_MIN: the pipeline */
}

static void mismatch_op_large(dh_ctx_t *ctx)
{
    mismatch_op(ctx, 1 << 17); /* 512 KiB: CUDA IPC between the two ranks (where via_ipc) */
}

/* Rank 1's CUDA IPC descriptor cannot describe its buffer (FAKE_GPU_BAD_EXPORT=1 in the fake):
 * every rank fails naming rank 1, none maps anything from it. */
static void corrupt_desc_body(dh_ctx_t *ctx)
{
    const int me = ctx->rank;
    const size_t count = 1 << 17;
    if (me == 1)
        dh_setenv("FAKE_GPU_BAD_EXPORT", "1");
    mm_t m = mm_setup(ctx, count);
    CHECK_RC(coll_all_reduce(m.d, m.d, count, COLL_FLOAT32, COLL_SUM, m.comm, m.s), COLL_SUCCESS,
             coll_get_last_error(), "rank %d: queued", me);
    CHECK(m.o->stream_sync(m.s) == 0, "rank %d: the stream goes on", me);
    coll_result_t ae = COLL_SUCCESS;
    CHECK(coll_comm_get_async_error(m.comm, &ae) == COLL_SUCCESS, "get_async_error");
    CHECK(ae == COLL_ERR_REMOTE, "rank %d: async error %s", me, dh_rc_name(ae));
    (void)coll_all_reduce(m.d, m.d, count, COLL_FLOAT32, COLL_SUM, m.comm, m.s);
    CHECK_HAS(coll_get_last_error(), "sent a corrupt CUDA IPC descriptor", "rank %d: says so", me);
    CHECK(dh_names_rank(coll_get_last_error(), 1), "rank %d: names rank 1", me);
    mm_teardown(&m);
}

/* COLL_CUDA_IPC=0 on rank 1 only: every rank still takes the exchange (rank 1 then runs the
 * pipeline inline after it; rank 0 falls back to it on its slot streams), all agree on the
 * pipeline, and the sums are right. */
static void ipc_one_off_body(dh_ctx_t *ctx)
{
    const int me = ctx->rank;
    const size_t count = 1 << 17;
    if (me == 1)
        dh_setenv("COLL_CUDA_IPC", "0");
    mm_t m = mm_setup(ctx, count);
    /* 1: rank 1 runs the pipeline, rank 0 the fallback in its program; 2: both the pipeline */
    for (int call = 1; call <= 2; call++) {
        CHECK_RC(coll_all_reduce(m.d, m.d, count, COLL_FLOAT32, COLL_SUM, m.comm, m.s),
                 COLL_SUCCESS, coll_get_last_error(), "rank %d: call %d queued", me, call);
        CHECK(m.o->stream_sync(m.s) == 0, "rank %d: the stream goes on", me);
        coll_result_t ae = COLL_ERR_INTERNAL;
        CHECK(coll_comm_get_async_error(m.comm, &ae) == COLL_SUCCESS && ae == COLL_SUCCESS,
              "rank %d: call %d: async error %s: %s", me, call, dh_rc_name(ae),
              coll_get_last_error());
        float *r = dev_read(m.o, m.d, count);
        long bad = 0;
        for (size_t i = 0; i < count; i++)
            bad += r[i] != (float)call * (val(i, 0) + val(i, 1));
        CHECK(bad == 0, "rank %d: call %d: %ld wrong sums", me, call, bad);
        free(r);
    }
    mm_teardown(&m);
}

/* Rank 0 calls on host buffers and rank 1 on device buffers: both fail with a mismatch. */
static void mismatch_kind_body(dh_ctx_t *ctx)
{
    const int me = ctx->rank;
    const size_t count = 4096;
    mm_t m = mm_setup(ctx, count);
    const colli_gpu_ops_t *o = m.o;
    void *s = m.s;
    float *d = m.d;
    coll_comm_t comm = m.comm;
    float *h = calloc(count, sizeof(float));
    coll_result_t rc = coll_all_reduce(me == 0 ? (void *)h : (void *)d, me == 0 ? (void *)h : d,
                                       count, COLL_FLOAT32, COLL_SUM, comm, me == 0 ? NULL : s);
    if (me == 0) {
        CHECK(rc == COLL_ERR_MISMATCH || rc == COLL_ERR_REMOTE, "rank 0: host call fails (%s)",
              dh_rc_name(rc));
    } else {
        CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank 1: queued");
        CHECK(o->stream_sync(s) == 0, "rank 1: the stream goes on");
        rc = coll_all_reduce(d, d, count, COLL_FLOAT32, COLL_SUM, comm, s);
        CHECK(rc == COLL_ERR_MISMATCH || rc == COLL_ERR_REMOTE, "rank 1: next call fails (%s)",
              dh_rc_name(rc));
    }
    const char *msg = coll_get_last_error();
    CHECK_HAS(msg, "collective mismatch", "rank %d: host/device: a mismatch", me);
    CHECK_HAS(msg, "(device buffers)", "rank %d: host/device: names the device call", me);
    free(h);
    mm_teardown(&m);
}

/* ---- usage ---- */

static void usage_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    coll_comm_t comm = init(ctx);
    const int me = ctx->rank, peer = 1 - me;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    float *d = dev_filled(o, 1000, me, s), *h = calloc(1000, sizeof(float));
    coll_result_t rc = coll_all_reduce(h, d, 1000, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_ERR_INVALID_ARGUMENT, coll_get_last_error(), "host sendbuf, device recvbuf");
    CHECK_HAS(coll_get_last_error(), "is host memory but recvbuf", "names both buffers");
    CHECK_HAS(coll_get_last_error(), "memory of GPU 0", "names the GPU");
    rc = coll_all_reduce(h, h, 1000, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(), "host buffers with a stream");
    coll_group_start();
    coll_send(d, 1000, COLL_FLOAT32, peer, comm, s);
    coll_recv(h, 1000, COLL_FLOAT32, peer, comm, NULL);
    rc = coll_group_end();
    CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(), "a group mixing host and device");
    CHECK_HAS(coll_get_last_error(), "mix host and device buffers", "says what is mixed");
    rc = coll_all_reduce(d, d, 0, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "count 0 on device buffers");
    /* device calls, then a host call: it waits for them */
    rc = coll_all_reduce(d, d, 1000, COLL_FLOAT32, COLL_MAX, comm, s);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "device call");
    for (int i = 0; i < 1000; i++)
        h[i] = (float)me;
    rc = coll_all_reduce(h, h, 1000, COLL_FLOAT32, COLL_SUM, comm, NULL);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "host call after device calls");
    CHECK(h[0] == 1.0f && h[999] == 1.0f, "host call result %g", (double)h[0]);
    CHECK(o->stream_sync(s) == 0, "sync");
    float *r = dev_read(o, d, 1000);
    long bad = 0;
    for (size_t i = 0; i < 1000; i++)
        bad += r[i] != (val(i, 0) > val(i, 1) ? val(i, 0) : val(i, 1));
    CHECK(bad == 0, "rank %d: %ld wrong elements of the max", me, bad);
    free(r);
    /* buffers on a second GPU: the communicator's device calls are on GPU 0 */
    void *d1 = NULL;
    if (o->set_device(1) == 0 && o->dev_alloc(&d1, 4000) == 0) {
        rc = coll_all_reduce(d1, d1, 1000, COLL_FLOAT32, COLL_SUM, comm, s);
        CHECK_RC(rc, COLL_ERR_INVALID_USAGE, coll_get_last_error(), "buffers on another GPU");
        CHECK_HAS(coll_get_last_error(), "buffers are on GPU 1, but the communicator's",
                  "names both GPUs");
        o->dev_free(d1);
    } else {
        dh_log("rank %d: no second GPU: the one-GPU-per-communicator check is not run", me);
    }
    (void)o->set_device(0);
    free(h);
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    o->stream_destroy(s);
}

/* FAKE_GPU_NO_KERNELS=1 (fake GPU): the plugin has no kernel for this GPU. The communicator is
 * made (host buffers need no kernel); a device call fails at once saying why, and host calls
 * still work. */
static void no_kernels_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    coll_comm_t comm = init(ctx);
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    float *d = dev_filled(o, 1000, ctx->rank, s), h[4] = {1, 2, 3, 4};
    coll_result_t rc = coll_all_reduce(d, d, 1000, COLL_FLOAT32, COLL_SUM, comm, s);
    CHECK_RC(rc, COLL_ERR_CUDA, coll_get_last_error(), "a device call without kernels");
    CHECK_HAS(coll_get_last_error(), "cannot load kcoll's GPU kernels on GPU 0", "says what");
    CHECK_HAS(coll_get_last_error(), "CMAKE_CUDA_ARCHITECTURES", "says what to do");
    rc = coll_all_reduce(h, h, 4, COLL_FLOAT32, COLL_SUM, comm, NULL);
    CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "host buffers still work");
    CHECK(h[3] == 8.0f, "host call result %g", (double)h[3]);
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    o->dev_free(d);
    o->stream_destroy(s);
}

static void init_fails_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    dh_begin(ctx, ctx->rank);
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    dh_record(ctx, "init", rc);
    if (rc == COLL_SUCCESS)
        coll_comm_destroy(comm);
}

static void init_fails(const char *name, const char *var, const char *value, coll_result_t want,
                       const char *needle)
{
    const char *was = getenv(var);
    char *old = was != NULL ? strdup(was) : NULL;
    dh_setenv(var, value);
    dh_opts_t opt = {.name = name, .nranks = 1, .deadline_s = 60, .body = init_fails_body};
    dh_job_t *j = dh_start(&opt);
    if (j != NULL) {
        dh_wait(j);
        const dh_out_t *out = &dh_shared(j)->out[0];
        CHECK_RC(out->rc, want, out->msg, "%s", name);
        CHECK_HAS(out->msg, needle, "%s: the message says why", name);
        dh_free(j);
    }
    dh_setenv(var, old);
    free(old);
}

/* ---- teardown ---- */

static void teardown_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    const int n = ctx->nranks, me = ctx->rank;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    const size_t count = 50000;
    float *d = dev_filled(o, count, me, s);
    /* destroy with a call still waiting for its stream (held 0.3 s): it runs, then destroy
     * returns */
    coll_comm_t comm = init(ctx);
    long never = 0;
    hold_t brief = {&never, 0.3};
    CHECK(o->host_func(s, hold_fn, &brief) == 0, "hold");
    CHECK_RC(coll_all_reduce(d, d, count, COLL_FLOAT32, COLL_SUM, comm, s), COLL_SUCCESS,
             coll_get_last_error(), "queued");
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(),
             "destroy with a call queued");
    CHECK(o->stream_sync(s) == 0, "sync");
    float *h = dev_read(o, d, count);
    long bad = 0;
    for (size_t i = 0; i < count; i++) {
        float sum = 0;
        for (int r = 0; r < n; r++)
            sum += val(i, r);
        bad += h[i] != sum;
    }
    CHECK(bad == 0, "rank %d: the queued call ran before destroy returned (%ld wrong)", me, bad);
    free(h);
    o->stream_destroy(s);
}

/* abort while the call waits for its stream: abort returns, the call never runs, the gate opens
 * once the stream reaches it */
static void abort_body(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    const int me = ctx->rank;
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    const size_t count = 50000;
    coll_comm_t comm = init(ctx);
    /* every rank's creation is over before any aborts: a rank whose creation ends first and
     * aborts at once makes a peer still creating fail its creation with that abort (correctly;
     * seen under ctest -j2) */
    int one = 1, sum = 0;
    CHECK_RC(coll_all_reduce(&one, &sum, 1, COLL_INT32, COLL_SUM, comm, NULL), COLL_SUCCESS,
             coll_get_last_error(), "rank %d: all created", me);
    /* and every rank's all_reduce returned: a rank whose part ended first and aborted at once
     * failed a peer still reading that all_reduce (seen once in CI, 29 Nov 2026) */
    dh_add(PAST_BARRIER, 1);
    for (double end = dh_now() + 30; dh_load(PAST_BARRIER) < ctx->nranks && dh_now() < end;)
        dh_sleep(0.001);
    float *d2 = dev_filled(o, count, me, s), *h;
    long bad;
    hold_t hold = {HOLD_FLAG(me), 30.0};
    CHECK(o->host_func(s, hold_fn, &hold) == 0, "hold");
    CHECK_RC(coll_all_reduce(d2, d2, count, COLL_FLOAT32, COLL_SUM, comm, s), COLL_SUCCESS,
             coll_get_last_error(), "queued");
    double t0 = dh_now();
    CHECK_RC(coll_comm_abort(comm), COLL_SUCCESS, coll_get_last_error(), "abort");
    /* the hold lasts up to 30 s: an abort that waited for the stream would take that long */
    CHECK(dh_now() - t0 < 15.0, "rank %d: abort returned while the stream was held (%.2f s)", me,
          dh_now() - t0);
    dh_store(HOLD_FLAG(me), 1);
    CHECK(o->stream_sync(s) == 0, "rank %d: the stream goes on after abort", me);
    h = dev_read(o, d2, count);
    bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += h[i] != val(i, me);
    /* a held gate opens without the call having run; an inline program runs through once its
     * waits are released, on stale staging: its outputs are undefined, as after ncclCommAbort */
    if (held_gate())
        CHECK(bad == 0, "rank %d: the aborted call did not touch its buffer (%ld changed)", me,
              bad);
    free(h);
    o->stream_destroy(s);
}

/* ---- evict ---- */

/* More peers' allocations than the CUDA IPC mapping cache holds (32): rounds of calls, each on a
 * send and a receive buffer of its own, queued on one stream with no sync in between, so that
 * mappings are evicted while later calls wait behind their gates. The fake GPU's ipc_close
 * waits for every stream, as cudaFree does: a close on the library's progress thread would
 * deadlock (the fake aborts). The first round fills the cache and evicts; the second round's
 * first call closes those evicted, the rest evict more than can wait to be closed, so some calls
 * fall back to the pipeline. Every result is checked. */
static void evict_body(dh_ctx_t *ctx)
{
    enum { CALLS = 24, ROUNDS = 2 };
    const colli_gpu_ops_t *o = plugin();
    coll_comm_t comm = init(ctx);
    const int n = ctx->nranks, me = ctx->rank;
    const size_t count = 96 * 1024; /* 384 KiB: from COLL_SHM_DIRECT_MIN (256 KiB), CUDA IPC */
    void *s = NULL;
    CHECK(o->stream_create(&s) == 0, "stream");
    for (int round = 0; round < ROUNDS; round++) {
        float *in[CALLS], *out[CALLS];
        for (int c = 0; c < CALLS; c++) {
            in[c] = dev_filled(o, count, me + c, s);
            out[c] = dev_filled(o, count, 0, s);
        }
        for (int c = 0; c < CALLS; c++)
            CHECK_RC(coll_all_reduce(in[c], out[c], count, COLL_FLOAT32, COLL_SUM, comm, s),
                     COLL_SUCCESS, coll_get_last_error(), "rank %d: round %d, call %d", me, round,
                     c);
        CHECK(o->stream_sync(s) == 0, "rank %d: round %d: sync", me, round);
        long bad = 0;
        for (int c = 0; c < CALLS; c++) {
            float *h = dev_read(o, out[c], count);
            for (size_t i = 0; i < count; i++) {
                float sum = 0;
                for (int r = 0; r < n; r++)
                    sum += val(i, r + c);
                bad += h[i] != sum;
            }
            free(h);
            o->dev_free(in[c]);
            o->dev_free(out[c]);
        }
        CHECK(bad == 0, "rank %d: round %d: %ld wrong elements", me, round, bad);
    }
    coll_result_t ae = COLL_ERR_INTERNAL;
    CHECK(coll_comm_get_async_error(comm, &ae) == COLL_SUCCESS && ae == COLL_SUCCESS,
          "rank %d: no async error", me);
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    o->stream_destroy(s);
}

/* ---- driver ---- */

static void run(const char *name, int nranks, void (*body)(dh_ctx_t *))
{
    dh_job_t *j = start_wait(name, nranks, body, 90);
    if (j == NULL)
        return;
    if (strcmp(name, "errors") == 0) {
        for (int r = 0; r < nranks; r++) {
            const dh_out_t *out = &dh_shared(j)->out[r];
            dh_log("rank %d: %s: %s", r, dh_rc_name(out->rc), out->msg);
            CHECK(out->rc == (r == 1 ? COLL_ERR_CUDA : COLL_ERR_REMOTE), "rank %d: async error %s",
                  r, dh_rc_name(out->rc));
            CHECK_HAS(out->msg,
                      via_ipc() ? "copying between the ranks' device buffers (CUDA IPC) failed: "
                                  "injected failure"
                                : "copying the inputs to host staging failed: injected failure",
                      "rank %d: names the failed copy", r);
            CHECK(dh_names_rank(out->msg, 1), "rank %d: names rank 1", r);
        }
    }
    dh_free(j);
}

int main(int argc, char **argv)
{
    dh_init();
    if (argc != 2) {
        fprintf(stderr,
                "usage: test_device order|p2p|errors|mismatch|usage|stall|evict|teardown\n");
        return 2;
    }
    require_plugin();
    const char *c = argv[1];
    if (strcmp(c, "order") == 0) {
        run("order", 2, order_body);
    } else if (strcmp(c, "p2p") == 0) {
        run("p2p", 3, p2p_body);
    } else if (strcmp(c, "errors") == 0) {
        run("errors", 3, errors_body);
    } else if (strcmp(c, "mismatch") == 0) {
        run("mismatch op", 2, mismatch_op_small);
        run("mismatch op, CUDA IPC", 2, mismatch_op_large);
        run("mismatch memory", 2, mismatch_kind_body);
        run("CUDA IPC off on one rank", 2, ipc_one_off_body);
        if (strstr(getenv("COLL_CUDA_PLUGIN"), "fake") != NULL && via_ipc())
            run("corrupt IPC descriptor", 2, corrupt_desc_body);
    } else if (strcmp(c, "usage") == 0) {
        run("usage", 2, usage_body);
        init_fails("plugin missing", "COLL_CUDA_PLUGIN", "/nonexistent/libcoll_cuda.so.0",
                   COLL_ERR_UNSUPPORTED, "COLL_CUDA_PLUGIN=/nonexistent/libcoll_cuda.so.0 cannot");
        init_fails("not a plugin", "COLL_CUDA_PLUGIN", "libm.so.6", COLL_ERR_UNSUPPORTED,
                   "not a kcoll GPU plugin");
        if (strstr(getenv("COLL_CUDA_PLUGIN"), "fake") != NULL) {
            init_fails("no GPU", "FAKE_GPU_NO_DEVICE", "1", COLL_ERR_CUDA, "no GPU");
            dh_setenv("FAKE_GPU_NO_KERNELS", "1");
            run("no kernel for this GPU", 2, no_kernels_body);
            dh_setenv("FAKE_GPU_NO_KERNELS", NULL);
        }
    } else if (strcmp(c, "stall") == 0) {
        run("stall", 2, stall_body);
    } else if (strcmp(c, "evict") == 0) {
        run("evict", 2, evict_body);
    } else if (strcmp(c, "teardown") == 0) {
        run("teardown", 2, teardown_body);
        run("abort", 2, abort_body);
    } else {
        fprintf(stderr, "unknown case %s\n", c);
        return 2;
    }
    return dh_finish();
}
