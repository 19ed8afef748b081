/* nccl_test conformance: every collective x datatype x operator, PreMulSum, the movements. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_test.h"

/* ---- conformance ---- */

static void check_reduced(const char *what, ncclDataType_t dt, ncclRedOp_t op, const void *buf,
                          size_t count, size_t first)
{
    size_t bad = 0, at = 0;
    for (size_t i = 0; i < count; i++)
        if (!close_enough(dt, get(dt, buf, i), reduced(op, dt, nranks_, first + i)))
            at = bad++ ? at : i;
    CHECK(bad == 0, "%s %s %s count %zu: %zu wrong, first at %zu: %g, want %g", what, dt_name(dt),
          op_name(op), count, bad, at, count ? get(dt, buf, at) : 0,
          count ? reduced(op, dt, nranks_, first + at) : 0);
}

static void reductions(ncclComm_t comm, ncclDataType_t dt, ncclRedOp_t op, size_t count)
{
    const size_t e = dt_size(dt), n = (size_t)nranks_;
    char *in = buf_alloc(count * n * e + 1), *out = buf_alloc(count * n * e + 1);
    for (size_t i = 0; i < count * n; i++)
        put(dt, in, i, input_of(dt, rank_, i));
    /* all_reduce, out of place and in place */
    CHECK_OK(ncclAllReduce(in, out, count, dt, op, comm, NULL), "ncclAllReduce");
    check_reduced("ncclAllReduce", dt, op, out, count, 0);
    memcpy(out, in, count * e);
    CHECK_OK(ncclAllReduce(out, out, count, dt, op, comm, NULL), "ncclAllReduce in place");
    check_reduced("ncclAllReduce in place", dt, op, out, count, 0);
    /* reduce to the last rank */
    CHECK_OK(ncclReduce(in, out, count, dt, op, nranks_ - 1, comm, NULL), "ncclReduce");
    if (rank_ == nranks_ - 1)
        check_reduced("ncclReduce", dt, op, out, count, 0);
    /* reduce_scatter: this rank gets block `rank` of the reduced count * n elements */
    CHECK_OK(ncclReduceScatter(in, out, count, dt, op, comm, NULL), "ncclReduceScatter");
    check_reduced("ncclReduceScatter", dt, op, out, count, (size_t)rank_ * count);
    buf_free(in);
    buf_free(out);
}

/* PreMulSum: rank r multiplies its input by s_r = 1 + r % 2 (1 for float8, whose sums stay exact
 * only that small) before the sum; immediate: the scalar is copied at creation; pointer
 * (ncclScalarDevice on host memory): read at each call, so it is changed after creation. */
static double premul_scalar(ncclDataType_t dt, int r)
{
    return is_fp8(dt) ? 1 : 1 + r % 2;
}

static void check_premul(const char *what, ncclDataType_t dt, const void *buf, size_t count,
                         size_t first)
{
    size_t bad = 0, at = 0;
    double want_at = 0;
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < nranks_; r++)
            want += premul_scalar(dt, r) * input_of(dt, r, first + i);
        if (!close_enough(dt, get(dt, buf, i), want) && bad++ == 0) {
            at = i;
            want_at = want;
        }
    }
    CHECK(bad == 0, "%s %s premulsum count %zu: %zu wrong, first at %zu: %g, want %g", what,
          dt_name(dt), count, bad, at, count ? get(dt, buf, at) : 0, want_at);
}

static void premul(ncclComm_t comm, ncclDataType_t dt, size_t count, ncclScalarResidence_t res)
{
    if (graph_capturing()) /* a scalar read at each call is refused in a capture */
        res = ncclScalarHostImmediate;
    const size_t e = dt_size(dt), n = (size_t)nranks_;
    char *in = buf_alloc(count * n * e + 1), *out = buf_alloc(count * n * e + 1);
    char scalar[8] = {0};
    for (size_t i = 0; i < count * n; i++)
        put(dt, in, i, input_of(dt, rank_, i));
    /* a pointer scalar is read when the call runs: make the op with a wrong value first */
    put(dt, scalar, 0, res == ncclScalarDevice ? 3 : premul_scalar(dt, rank_));
    ncclRedOp_t op = ncclSum;
    CHECK_OK(ncclRedOpCreatePreMulSum(&op, scalar, dt, res, comm), "ncclRedOpCreatePreMulSum");
    CHECK((int)op >= (int)ncclNumOps, "PreMulSum operator %d", (int)op);
    put(dt, scalar, 0, premul_scalar(dt, rank_));
    if (res == ncclScalarHostImmediate)
        put(dt, scalar, 0, 3); /* copied at creation: changing it now has no effect */
    CHECK_OK(ncclAllReduce(in, out, count, dt, op, comm, NULL), "ncclAllReduce premulsum");
    check_premul("ncclAllReduce", dt, out, count, 0);
    memcpy(out, in, count * e);
    CHECK_OK(ncclAllReduce(out, out, count, dt, op, comm, NULL), "in place");
    check_premul("ncclAllReduce in place", dt, out, count, 0);
    CHECK_OK(ncclReduce(in, out, count, dt, op, 0, comm, NULL), "ncclReduce premulsum");
    if (rank_ == 0)
        check_premul("ncclReduce", dt, out, count, 0);
    /* in a group, with a second reduction of another operator */
    char *out2 = buf_alloc(count * n * e + 1);
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclReduceScatter(in, out, count, dt, op, comm, NULL), "ncclReduceScatter premulsum");
    CHECK_OK(ncclAllReduce(in, out2, count, dt, ncclSum, comm, NULL), "ncclAllReduce sum");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd");
    check_premul("ncclReduceScatter", dt, out, count, (size_t)rank_ * count);
    check_reduced("ncclAllReduce beside a premulsum", dt, ncclSum, out2, count, 0);
    CHECK_OK(ncclRedOpDestroy(op, comm), "ncclRedOpDestroy");
    /* destroyed right after the call, before its group ends (PyTorch's coalesced PREMUL_SUM) */
    put(dt, scalar, 0, premul_scalar(dt, rank_));
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclRedOpCreatePreMulSum(&op, scalar, dt, ncclScalarHostImmediate, comm),
             "ncclRedOpCreatePreMulSum in a group");
    CHECK_OK(ncclAllReduce(in, out, count, dt, op, comm, NULL), "ncclAllReduce premulsum");
    CHECK_OK(ncclRedOpDestroy(op, comm), "ncclRedOpDestroy before ncclGroupEnd");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd after the operator was destroyed");
    check_premul("ncclAllReduce of an operator destroyed in its group", dt, out, count, 0);
    buf_free(in);
    buf_free(out);
    buf_free(out2);
}

/* ncclScalarDevice with the scalar in GPU memory (PyTorch's _make_nccl_premul_sum of a tensor):
 * the GPU reads it when the call runs, after the copy queued before the call writes it; an
 * immediate scalar there, or a call on host buffers, is refused (fake GPU only). */
static void premul_device_scalar(ncclComm_t comm)
{
    enum { COUNT = 1000 };
    const size_t n = (size_t)nranks_;
    float *in = buf_alloc(COUNT * n * 4), *out = buf_alloc(COUNT * n * 4);
    float *scalar = buf_alloc(sizeof(float)), host_in = 1;
    static float want; /* read by the copy when it runs */
    for (size_t i = 0; i < COUNT * n; i++)
        put(ncclFloat32, in, i, input_of(ncclFloat32, rank_, i));
    *scalar = 3; /* the fake GPU's memory is the host's: a wrong value first */
    ncclRedOp_t op = ncclSum;
    expect(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarHostImmediate, comm),
           ncclInvalidUsage, "an immediate scalar in GPU memory", "ncclScalarDevice");
    CHECK_OK(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarDevice, comm),
             "ncclRedOpCreatePreMulSum of a scalar in GPU memory");
    want = (float)premul_scalar(ncclFloat32, rank_);
    CHECK(gpu->delay(NULL, 100000) == 0 && gpu->memcpy_async(scalar, &want, 4, NULL) == 0,
          "the scalar written on the stream, late");
    CHECK_OK(ncclAllReduce(in, out, COUNT, ncclFloat32, op, comm, NULL),
             "ncclAllReduce with a scalar in GPU memory");
    check_premul("ncclAllReduce, scalar in GPU memory", ncclFloat32, out, COUNT, 0);
    float host_out = 0;
    expect(ncclAllReduce(&host_in, &host_out, 1, ncclFloat32, op, comm, NULL), ncclInvalidUsage,
           "host buffers with a scalar in GPU memory", "GPU");
    CHECK_OK(ncclRedOpDestroy(op, comm), "ncclRedOpDestroy");
    buf_free(scalar);
    buf_free(in);
    buf_free(out);
}

/* ncclAvg of float16 as NCCL computes it (every input times 1/n, then the sum): inputs of
 * 40000 average to about 40000 where their sum (from 80000) is beyond float16's 65504; kcoll's
 * own average, the sum divided once, was infinite from 3 ranks on (checked: 4 ranks). */
static void avg_float16(ncclComm_t comm)
{
    enum { COUNT = 64 };
    uint16_t *buf = buf_alloc(COUNT * 2);
    for (size_t i = 0; i < COUNT; i++)
        put(ncclFloat16, buf, i, 40000);
    CHECK_OK(ncclAllReduce(buf, buf, COUNT, ncclFloat16, ncclAvg, comm, NULL),
             "ncclAllReduce ncclAvg float16");
    size_t bad = 0;
    for (size_t i = 0; i < COUNT; i++)
        bad += !close_enough(ncclFloat16, get(ncclFloat16, buf, i), 40000);
    CHECK(bad == 0, "ncclAvg of float16 40000s: %zu of %d wrong (first %g)", bad, COUNT,
          get(ncclFloat16, buf, 0));
    buf_free(buf);
}

/* The movements: broadcast, bcast, all_gather, all_to_all, gather, scatter, a send/recv ring. */
static void movements(ncclComm_t comm, ncclDataType_t dt, size_t count)
{
    const size_t e = dt_size(dt), n = (size_t)nranks_;
    char *in = buf_alloc(count * n * e + 1), *out = buf_alloc(count * n * e + 1);
    size_t bad = 0;
    for (size_t i = 0; i < count * n; i++)
        put(dt, in, i, input_of(dt, rank_, i));
    int root = nranks_ - 1;
    CHECK_OK(ncclBroadcast(in, out, count, dt, root, comm, NULL), "ncclBroadcast");
    for (size_t i = 0; i < count; i++)
        bad += get(dt, out, i) != input_of(dt, root, i);
    CHECK(bad == 0, "ncclBroadcast %s count %zu: %zu wrong", dt_name(dt), count, bad);
    memcpy(out, in, count * e);
    CHECK_OK(ncclBcast(out, count, dt, 0, comm, NULL), "ncclBcast");
    bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += get(dt, out, i) != input_of(dt, 0, i);
    CHECK(bad == 0, "ncclBcast %s count %zu: %zu wrong", dt_name(dt), count, bad);
    CHECK_OK(ncclAllGather(in, out, count, dt, comm, NULL), "ncclAllGather");
    bad = 0;
    for (size_t i = 0; i < count * n; i++)
        bad += get(dt, out, i) != input_of(dt, (int)(i / count), i % count);
    CHECK(bad == 0, "ncclAllGather %s count %zu: %zu wrong", dt_name(dt), count, bad);
    CHECK_OK(ncclAlltoAll(in, out, count, dt, comm, NULL), "ncclAlltoAll");
    bad = 0;
    for (size_t i = 0; i < count * n; i++) /* block q from rank q: its block `rank` */
        bad += get(dt, out, i) != input_of(dt, (int)(i / count), (size_t)rank_ * count + i % count);
    CHECK(bad == 0, "ncclAlltoAll %s count %zu: %zu wrong", dt_name(dt), count, bad);
    CHECK_OK(ncclGather(in, out, count, dt, root, comm, NULL), "ncclGather");
    bad = 0;
    for (size_t i = 0; rank_ == root && i < count * n; i++)
        bad += get(dt, out, i) != input_of(dt, (int)(i / count), i % count);
    CHECK(bad == 0, "ncclGather %s count %zu: %zu wrong", dt_name(dt), count, bad);
    CHECK_OK(ncclScatter(in, out, count, dt, 0, comm, NULL), "ncclScatter");
    bad = 0;
    for (size_t i = 0; i < count; i++) /* block `rank` of rank 0's input */
        bad += get(dt, out, i) != input_of(dt, 0, (size_t)rank_ * count + i);
    CHECK(bad == 0, "ncclScatter %s count %zu: %zu wrong", dt_name(dt), count, bad);
    /* a ring: send to the next rank, receive from the previous one, in one group */
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclSend(in, count, dt, (rank_ + 1) % nranks_, comm, NULL), "ncclSend");
    CHECK_OK(ncclRecv(out, count, dt, (rank_ + nranks_ - 1) % nranks_, comm, NULL), "ncclRecv");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd");
    bad = 0;
    for (size_t i = 0; i < count; i++)
        bad += get(dt, out, i) != input_of(dt, (rank_ + nranks_ - 1) % nranks_, i);
    CHECK(bad == 0, "ncclSend/ncclRecv ring %s count %zu: %zu wrong", dt_name(dt), count, bad);
    buf_free(in);
    buf_free(out);
}

/* Count 0 is a no-op, whatever the pointers and the stream, as in NCCL: an empty tensor's data
 * pointer is NULL, and an uneven all_to_all (a mixture-of-experts rank that gets no tokens)
 * has zero blocks beside full ones in one group. */
static void zero_counts(ncclComm_t comm)
{
    int dummy = 0; /* host buffers: a stream that is never touched */
    cudaStream_t s = gpu != NULL ? NULL : (cudaStream_t)&dummy;
    CHECK_OK(ncclAllReduce(NULL, NULL, 0, ncclFloat32, ncclSum, comm, s), "ncclAllReduce count 0");
    CHECK_OK(ncclBroadcast(NULL, NULL, 0, ncclFloat32, 0, comm, s), "ncclBroadcast count 0");
    CHECK_OK(ncclReduce(NULL, NULL, 0, ncclFloat32, ncclMax, 0, comm, s), "ncclReduce count 0");
    CHECK_OK(ncclAllGather(NULL, NULL, 0, ncclFloat32, comm, s), "ncclAllGather count 0");
    CHECK_OK(ncclReduceScatter(NULL, NULL, 0, ncclFloat32, ncclSum, comm, s),
             "ncclReduceScatter count 0");
    CHECK_OK(ncclAlltoAll(NULL, NULL, 0, ncclFloat32, comm, s), "ncclAlltoAll count 0");
    CHECK_OK(ncclGather(NULL, NULL, 0, ncclFloat32, 0, comm, s), "ncclGather count 0");
    CHECK_OK(ncclScatter(NULL, NULL, 0, ncclFloat32, 0, comm, s), "ncclScatter count 0");
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclSend(NULL, 0, ncclFloat32, (rank_ + 1) % nranks_, comm, s), "ncclSend count 0");
    CHECK_OK(ncclRecv(NULL, 0, ncclFloat32, (rank_ + nranks_ - 1) % nranks_, comm, s),
             "ncclRecv count 0");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of count 0");
    /* all_to_all_v: (r + q) % 3 elements from rank r to rank q, NULL where 0 */
    enum { MAXC = 3 };
    float *out[MAX_RANKS] = {0}, *in[MAX_RANKS] = {0}, host[MAXC];
    CHECK_OK(ncclGroupStart(), "ncclGroupStart all_to_all_v");
    for (int q = 0; q < nranks_; q++) {
        const size_t c = (size_t)(rank_ + q) % MAXC;
        if (c > 0) {
            for (size_t i = 0; i < c; i++)
                host[i] = (float)(rank_ * 100 + q * 10 + (int)i);
            out[q] = buf_alloc(sizeof(host));
            in[q] = buf_alloc(sizeof(host));
            CHECK(out[q] != NULL && in[q] != NULL, "buffers");
            memcpy(out[q], host, sizeof(host)); /* the fake GPU's memory is the host's */
        }
        CHECK_OK(ncclSend(out[q], c, ncclFloat32, q, comm, NULL), "ncclSend of all_to_all_v");
        CHECK_OK(ncclRecv(in[q], c, ncclFloat32, q, comm, NULL), "ncclRecv of all_to_all_v");
    }
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of all_to_all_v with zero blocks");
    for (int q = 0; q < nranks_; q++) {
        const size_t c = (size_t)(rank_ + q) % MAXC;
        if (c == 0)
            continue;
        memcpy(host, in[q], sizeof(host)); /* synchronised by CHECK_OK */
        for (size_t i = 0; i < c; i++)
            CHECK(host[i] == (float)(q * 100 + rank_ * 10 + (int)i),
                  "all_to_all_v: element %zu from rank %d: %g", i, q, (double)host[i]);
        buf_free(out[q]);
        buf_free(in[q]);
    }
}

/* NCCL matches a send with its receive by size: 5 float32 sent, 20 uint8 received, in a ring
 * (Horovod and RAFT move bytes as ncclUint8 or ncclChar; a program may send a tensor's typed data
 * and receive its bytes). */
static void p2p_bytes(ncclComm_t comm)
{
    enum { N = 5 };
    float host[N];
    for (int i = 0; i < N; i++)
        host[i] = (float)(rank_ * 10 + i) + 0.25f;
    float *in = buf_alloc(sizeof(host));
    unsigned char *out = buf_alloc(sizeof(host));
    CHECK(in != NULL && out != NULL, "buffers");
    memcpy(in, host, sizeof(host));
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclSend(in, N, ncclFloat32, (rank_ + 1) % nranks_, comm, NULL), "ncclSend float32");
    CHECK_OK(ncclRecv(out, sizeof(host), ncclUint8, (rank_ + nranks_ - 1) % nranks_, comm, NULL),
             "ncclRecv of the same bytes as uint8");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of send float32 / recv uint8");
    float got[N];
    memcpy(got, out, sizeof(got));
    const int from = (rank_ + nranks_ - 1) % nranks_;
    for (int i = 0; i < N; i++)
        CHECK(got[i] == (float)(from * 10 + i) + 0.25f,
              "float32 sent, uint8 received: element %d "
              "from rank %d is %g",
              i, from, (double)got[i]);
    buf_free(in);
    buf_free(out);
}

/* Buffers that overlap without being the in-place layout: NCCL runs such calls (Horovod's fused
 * uneven reduce_scatter packs a root's blocks so that its ncclReduce's send and receive ranges
 * overlap), and kcoll copies the input first, so every result is the inputs reduced. On a GPU
 * only the reductions can be copied (through the scale kernel): an all_gather is refused. */
static void partial_overlap(ncclComm_t comm)
{
    enum { N = 6, SHIFT = 2 };
    const int n = nranks_;
    const size_t total = (size_t)N * MAX_RANKS + SHIFT;
    float host[N * MAX_RANKS + SHIFT], got[N * MAX_RANKS];
    float *buf = buf_alloc(sizeof(host));
    CHECK(buf != NULL, "buffer");
#define INPUT(r, i) ((float)((r) + 1 + (i)))
#define FILL()                                                                                     \
    do {                                                                                           \
        for (size_t i = 0; i < total; i++)                                                         \
            host[i] = INPUT(rank_, i);                                                             \
        memcpy(buf, host, sizeof(host)); /* the fake GPU's memory is the host's */                 \
    } while (0)
    const ncclRedOp_t ops[] = {ncclSum, ncclMax};
    for (int k = 0; k < 2; k++) {
        const ncclRedOp_t op = ops[k];
        FILL();
        CHECK_OK(ncclAllReduce(buf, buf + SHIFT, N, ncclFloat32, op, comm, NULL),
                 "ncclAllReduce, recvbuf overlapping sendbuf");
        memcpy(got, buf + SHIFT, N * sizeof(float));
        for (int i = 0; i < N; i++) {
            const float want =
                op == ncclSum ? (float)(n * (i + 1) + n * (n - 1) / 2) : INPUT(n - 1, i);
            CHECK(got[i] == want, "overlapping all_reduce (op %d): element %d is %g, want %g",
                  (int)op, i, (double)got[i], (double)want);
        }
        FILL();
        CHECK_OK(ncclReduce(buf, buf + SHIFT, N, ncclFloat32, op, 0, comm, NULL),
                 "ncclReduce, the root's recvbuf overlapping its sendbuf");
        memcpy(got, buf + SHIFT, N * sizeof(float));
        for (int i = 0; rank_ == 0 && i < N; i++) {
            const float want =
                op == ncclSum ? (float)(n * (i + 1) + n * (n - 1) / 2) : INPUT(n - 1, i);
            CHECK(got[i] == want, "overlapping reduce (op %d): element %d is %g, want %g", (int)op,
                  i, (double)got[i], (double)want);
        }
        FILL();
        CHECK_OK(ncclReduceScatter(buf, buf + SHIFT, N, ncclFloat32, op, comm, NULL),
                 "ncclReduceScatter, recvbuf overlapping sendbuf off the in-place layout");
        memcpy(got, buf + SHIFT, N * sizeof(float));
        for (int i = 0; i < N; i++) {
            const int e = rank_ * N + i;
            const float want =
                op == ncclSum ? (float)(n * (e + 1) + n * (n - 1) / 2) : INPUT(n - 1, e);
            CHECK(got[i] == want, "overlapping reduce_scatter (op %d): element %d is %g, want %g",
                  (int)op, i, (double)got[i], (double)want);
        }
    }
    FILL();
    const ncclResult_t rc = ncclAllGather(buf + SHIFT, buf, N, ncclFloat32, comm, NULL);
    if (gpu != NULL) {
        expect(rc, ncclInvalidArgument, "overlapping all_gather on a GPU", "overlap");
    } else {
        CHECK_OK(rc, "ncclAllGather, sendbuf overlapping recvbuf off the in-place layout");
        memcpy(got, buf, (size_t)n * N * sizeof(float));
        for (int i = 0; i < n * N; i++)
            CHECK(got[i] == INPUT(i / N, SHIFT + i % N),
                  "overlapping all_gather: element %d is %g, want %g", i, (double)got[i],
                  (double)INPUT(i / N, SHIFT + i % N));
    }
#undef FILL
#undef INPUT
    buf_free(buf);
}

void case_conformance(void)
{
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    int count = -1, r = -1, dev = -1;
    CHECK_OK(ncclCommCount(comm, &count), "ncclCommCount");
    CHECK_OK(ncclCommUserRank(comm, &r), "ncclCommUserRank");
    CHECK_OK(ncclCommCuDevice(comm, &dev), "ncclCommCuDevice");
    CHECK(count == nranks_ && r == rank_ && dev >= 0, "count %d rank %d device %d", count, r, dev);
    const ncclDataType_t dts[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                  ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                  ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
    const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
    const size_t counts[] = {0, 1, 1000};
    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
            for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
                reductions(comm, dts[d], ops[o], counts[c]);
            premul(comm, dts[d], counts[c], c % 2 ? ncclScalarDevice : ncclScalarHostImmediate);
            movements(comm, dts[d], counts[c]);
        }
    /* beyond a pipeline chunk and the single-copy threshold (device buffers: CUDA IPC, and a
     * PreMulSum's scratch grown and the smaller one retired) */
    reductions(comm, ncclFloat32, ncclSum, 300007);
    premul(comm, ncclFloat32, 300007, ncclScalarHostImmediate);
    premul(comm, ncclBfloat16, 300007, ncclScalarDevice);
    movements(comm, ncclInt32, 300007);
    zero_counts(comm);
    p2p_bytes(comm);
    partial_overlap(comm);
    avg_float16(comm);
    if (gpu != NULL)
        premul_device_scalar(comm);
    ncclResult_t async = ncclInternalError;
    CHECK_OK(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
    CHECK(async == ncclSuccess, "async error %d", (int)async);
    CHECK_OK(ncclCommFinalize(comm), "ncclCommFinalize");
    CHECK_OK(ncclCommDestroy(comm), "ncclCommDestroy");
}
