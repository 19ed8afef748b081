/*
 * kcoll's libnccl.so.2 through NVIDIA's real nccl.h, as a framework uses it: nccl_test CASE N
 * forks N ranks (the parent makes the unique id, which starts the bootstrap root, and hands it
 * over in shared memory), each runs CASE, and the parent sums the checks and kills any rank that
 * hangs past NCCL_TEST_DEADLINE seconds (default 90).
 *   conformance  every collective x datatype x operator on host buffers (out of place and in
 *                place), broadcast/bcast, gather, scatter, all-to-all, a send/recv ring, checked
 *                against a reference computed here
 *   split        ncclCommSplit by parity with reversed keys, NCCL_SPLIT_NOCOLOR, collectives in
 *                both halves and on the parent afterwards, two communicators in one group
 *   nonblocking  ncclCommInitRankConfig with blocking = 0: ncclInProgress, polled to success by a
 *                watchdog thread while the main thread's first call waits for the creation
 *   errors       the codes a framework expects: ncclInvalidArgument, ncclInvalidUsage (device
 *                API, shrink, PreMulSum, simulate), with messages; ncclRemoteError when a peer dies
 *   abort        rank 1 stops; rank 0's all_reduce is aborted from a second thread (no hang)
 *   initall      one process: ncclCommInitAll of N ranks, a grouped all_reduce over all of them
 * NCCL_TEST_MEM=fakegpu: the conformance buffers are device memory of the fake GPU plugin that
 * COLL_CUDA_PLUGIN names (tests/device/fake_gpu.c), so every call takes kcoll's device path on the
 * default stream, which the test synchronises before it reads a result.
 */
#define _GNU_SOURCE
#include <nccl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_plugin.h"

#define MAX_RANKS 8

typedef struct {
    ncclUniqueId id;
    volatile int id_ready;
    long passed[MAX_RANKS], failed[MAX_RANKS];
    volatile int stage[MAX_RANKS]; /* abort case: where each rank is */
} shared_t;

static shared_t *sh;
static int rank_ = -1, nranks_ = 0;
static long passed, failed;

static void check(int ok, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void check(int ok, int line, const char *fmt, ...)
{
    if (ok) { /* atomic: the abort and nonblocking cases check from a second thread too */
        __atomic_add_fetch(&passed, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
    va_list ap;
    va_start(ap, fmt);
    printf("[rank %d] FAIL line %d: ", rank_, line);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}
#define CHECK(cond, ...) check(!!(cond), __LINE__, __VA_ARGS__)
static void sync_dev(void);

/* the call is made once; its result checked */
static void check_ok(ncclResult_t rc, int line, const char *what)
{
    sync_dev();
    check(rc == ncclSuccess, line, "%s: %s (%d): %s", what, ncclGetErrorString(rc), (int)rc,
          ncclGetLastError(NULL));
}
#define CHECK_OK(call, what) check_ok((call), __LINE__, what)

/* ---- buffers: host memory, or the fake GPU's device memory ---- */

static const colli_gpu_ops_t *gpu;

static void gpu_open(void)
{
    const char *mem = getenv("NCCL_TEST_MEM"), *lib = getenv("COLL_CUDA_PLUGIN"), *why = "";
    if (mem == NULL || strcmp(mem, "fakegpu") != 0)
        return;
    gpu = lib != NULL ? colli_gpu_plugin_open(lib, &why) : NULL;
    char err[128] = "";
    if (gpu == NULL || gpu->init(err, sizeof(err)) != 0) {
        fprintf(stderr, "NCCL_TEST_MEM=fakegpu needs COLL_CUDA_PLUGIN naming the fake GPU (%s%s)\n",
                why, err);
        exit(2);
    }
}

static void *buf_alloc(size_t bytes)
{
    void *p = NULL;
    if (gpu == NULL)
        return malloc(bytes);
    return gpu->dev_alloc(&p, bytes) == 0 ? p : NULL;
}

static void buf_free(void *p)
{
    if (gpu == NULL)
        free(p);
    else if (p != NULL)
        (void)gpu->dev_free(p);
}

/* Device calls are ordered on the default stream: wait for them before reading results. */
static void sync_dev(void)
{
    if (gpu != NULL && gpu->stream_sync(NULL) != 0)
        printf("[rank %d] FAIL: stream_sync of the default stream\n", rank_);
}

/* Counts into shared memory (a rank that exits on purpose publishes first). */
static void publish(void)
{
    sh->passed[rank_] = passed;
    sh->failed[rank_] = failed;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- values: small integers, exact in every datatype and under every operator ---- */

static int is_fp8(ncclDataType_t dt)
{
    return dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
}

/* float8: 1 and 2 only, so that every partial sum (up to 8) and product (up to 16) of 4 ranks is
 * exact in E5M2's two mantissa bits */
static double input_of(ncclDataType_t dt, int r, size_t i)
{
    return (double)(1 + (r + i) % (is_fp8(dt) ? 2 : 3));
}

static size_t dt_size(ncclDataType_t dt)
{
    static const size_t sz[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return (int)dt < 12 ? sz[dt] : 0;
}

/* OCP float8 bits of a value that the format holds exactly (E4M3: 3 mantissa bits, bias 7;
 * E5M2: 2, bias 15), and back */
static uint8_t fp8_bits(ncclDataType_t dt, double v)
{
    int mbits = dt == ncclFloat8e4m3 ? 3 : 2, bias = dt == ncclFloat8e4m3 ? 7 : 15;
    uint8_t sign = v < 0 ? 0x80 : 0;
    double a = v < 0 ? -v : v;
    if (a == 0)
        return sign;
    int e;
    double f = frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    return sign | (uint8_t)(((e - 1 + bias) << mbits) | (int)ldexp(f * 2 - 1, mbits));
}

static double fp8_value(ncclDataType_t dt, uint8_t b)
{
    int mbits = dt == ncclFloat8e4m3 ? 3 : 2, bias = dt == ncclFloat8e4m3 ? 7 : 15;
    int e = (b & 0x7f) >> mbits, m = b & ((1 << mbits) - 1);
    double v = e == 0 ? ldexp(m, 1 - bias - mbits) : ldexp((1 << mbits) + m, e - bias - mbits);
    return (b & 0x80) ? -v : v;
}

static void put(ncclDataType_t dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case ncclInt8:
        ((int8_t *)buf)[i] = (int8_t)v;
        break;
    case ncclUint8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case ncclInt32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case ncclUint32:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    case ncclInt64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case ncclUint64:
        ((uint64_t *)buf)[i] = (uint64_t)v;
        break;
    case ncclFloat16:
        ((_Float16 *)buf)[i] = (_Float16)v;
        break;
    case ncclFloat32:
        ((float *)buf)[i] = (float)v;
        break;
    case ncclFloat64:
        ((double *)buf)[i] = v;
        break;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        ((uint8_t *)buf)[i] = fp8_bits(dt, v);
        break;
    case ncclBfloat16: {
        float f = (float)v; /* small integers: the upper half of a float is exact */
        uint32_t b;
        memcpy(&b, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(b >> 16);
        break;
    }
    default:
        break;
    }
}

static double get(ncclDataType_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case ncclInt8:
        return ((const int8_t *)buf)[i];
    case ncclUint8:
        return ((const uint8_t *)buf)[i];
    case ncclInt32:
        return ((const int32_t *)buf)[i];
    case ncclUint32:
        return ((const uint32_t *)buf)[i];
    case ncclInt64:
        return (double)((const int64_t *)buf)[i];
    case ncclUint64:
        return (double)((const uint64_t *)buf)[i];
    case ncclFloat16:
        return (double)((const _Float16 *)buf)[i];
    case ncclFloat32:
        return ((const float *)buf)[i];
    case ncclFloat64:
        return ((const double *)buf)[i];
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return fp8_value(dt, ((const uint8_t *)buf)[i]);
    case ncclBfloat16: {
        uint32_t b = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    default:
        return -1;
    }
}

static int is_float(ncclDataType_t dt)
{
    return dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16 ||
           is_fp8(dt);
}

/* the reduction of element i over ranks [0, n) */
static double reduced(ncclRedOp_t op, ncclDataType_t dt, int n, size_t i)
{
    double acc = input_of(dt, 0, i);
    for (int r = 1; r < n; r++) {
        double v = input_of(dt, r, i);
        acc = op == ncclProd  ? acc * v
              : op == ncclMax ? (v > acc ? v : acc)
              : op == ncclMin ? (v < acc ? v : acc)
                              : acc + v;
    }
    if (op == ncclAvg)
        acc = is_float(dt) ? acc / n : (double)((long long)acc / n);
    return acc;
}

static int close_enough(ncclDataType_t dt, double got, double want)
{
    /* float8: an average is rounded to 3 (E4M3) or 2 (E5M2) mantissa bits: half a unit in the
     * last place is 2^-4 or 2^-3 of the value */
    double tol = is_fp8(dt)                                ? 0.125
                 : dt == ncclFloat16 || dt == ncclBfloat16 ? 1e-2
                 : is_float(dt)                            ? 1e-6
                                                           : 0;
    double d = got - want;
    return (d < 0 ? -d : d) <= tol * (want < 0 ? -want : want);
}

static const char *dt_name(ncclDataType_t dt)
{
    static const char *n[] = {"int8",    "uint8",    "int32",      "uint32",
                              "int64",   "uint64",   "float16",    "float32",
                              "float64", "bfloat16", "float8e4m3", "float8e5m2"};
    return (int)dt < 12 ? n[dt] : "?";
}

static const char *op_name(ncclRedOp_t op)
{
    static const char *n[] = {"sum", "prod", "max", "min", "avg"};
    return (int)op < 5 ? n[op] : "?";
}

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

static void expect(ncclResult_t rc, ncclResult_t want, const char *what, const char *says)
{
    CHECK(rc == want, "%s: %d (%s), want %d", what, (int)rc, ncclGetErrorString(rc), (int)want);
    CHECK(strstr(ncclGetLastError(NULL), says) != NULL, "%s: message \"%s\" lacks \"%s\"", what,
          ncclGetLastError(NULL), says);
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
    buf_free(in);
    buf_free(out);
    buf_free(out2);
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

static ncclComm_t init_comm(void)
{
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRank(&comm, nranks_, sh->id, rank_);
    CHECK_OK(rc, "ncclCommInitRank");
    return rc == ncclSuccess ? comm : NULL;
}

static void case_conformance(void)
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
    /* beyond a pipeline chunk and the single-copy threshold */
    reductions(comm, ncclFloat32, ncclSum, 300007);
    movements(comm, ncclInt32, 300007);
    ncclResult_t async = ncclInternalError;
    CHECK_OK(ncclCommGetAsyncError(comm, &async), "ncclCommGetAsyncError");
    CHECK(async == ncclSuccess, "async error %d", (int)async);
    CHECK_OK(ncclCommFinalize(comm), "ncclCommFinalize");
    CHECK_OK(ncclCommDestroy(comm), "ncclCommDestroy");
}

/* ---- split ---- */

static void case_split(void)
{
    ncclComm_t comm = init_comm(), half = NULL, none = NULL;
    if (comm == NULL)
        return;
    CHECK_OK(ncclCommSplit(comm, rank_ % 2, -rank_, &half, NULL), "ncclCommSplit");
    int size = 0, r = -1;
    if (half != NULL) {
        CHECK_OK(ncclCommCount(half, &size), "ncclCommCount");
        CHECK_OK(ncclCommUserRank(half, &r), "ncclCommUserRank");
        int want = 0, before = 0;
        for (int q = 0; q < nranks_; q++)
            if (q % 2 == rank_ % 2) {
                want++;
                before += q > rank_;
            }
        CHECK(size == want && r == before, "half: rank %d of %d, want %d of %d", r, size, before,
              want);
        /* two communicators in one group: the parent's and the half's all_reduce at once */
        int64_t one = rank_ + 1, a = 0, b = 0, all = 0, mine = 0;
        for (int q = 0; q < nranks_; q++) {
            all += q + 1;
            mine += q % 2 == rank_ % 2 ? q + 1 : 0;
        }
        CHECK_OK(ncclGroupStart(), "ncclGroupStart");
        CHECK_OK(ncclAllReduce(&one, &a, 1, ncclInt64, ncclSum, comm, NULL), "parent");
        CHECK_OK(ncclAllReduce(&one, &b, 1, ncclInt64, ncclSum, half, NULL), "half");
        CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of two communicators");
        CHECK(a == all && b == mine, "parent %lld (want %lld), half %lld (want %lld)", (long long)a,
              (long long)all, (long long)b, (long long)mine);
        CHECK_OK(ncclCommDestroy(half), "destroy half");
    } else {
        CHECK(0, "ncclCommSplit gave no communicator");
    }
    CHECK_OK(ncclCommSplit(comm, rank_ == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &none, NULL),
             "ncclCommSplit with NCCL_SPLIT_NOCOLOR");
    CHECK((rank_ == 0) == (none == NULL), "rank %d: NOCOLOR gives NULL only to rank 0", rank_);
    if (none != NULL)
        CHECK_OK(ncclCommDestroy(none), "destroy");
    CHECK_OK(ncclCommDestroy(comm), "destroy parent");
}

/* ---- non-blocking creation ---- */

typedef struct {
    ncclComm_t comm;
    ncclResult_t state;
} watchdog_t;

/* Polls the creation's state, as PyTorch's watchdog thread does while the main thread calls. */
static void *watchdog(void *arg)
{
    watchdog_t *w = arg;
    double end = now() + 60;
    w->state = ncclInProgress;
    while (w->state == ncclInProgress && now() < end) {
        CHECK_OK(ncclCommGetAsyncError(w->comm, &w->state), "ncclCommGetAsyncError");
        usleep(200);
    }
    return NULL;
}

static void case_nonblocking(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, nranks_, sh->id, rank_, &config);
    CHECK(rc == ncclInProgress || rc == ncclSuccess, "non-blocking init returns %d", (int)rc);
    if (comm == NULL)
        return;
    /* the watchdog polls while this thread's first call waits for the creation: both see it end
     * (one of them joins the creating thread) */
    watchdog_t w = {comm, ncclInProgress};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, watchdog, &w) == 0, "start the watchdog thread");
    int count = 0;
    CHECK_OK(ncclCommCount(comm, &count), "ncclCommCount during the creation");
    CHECK(count == nranks_, "count %d", count);
    pthread_join(t, NULL);
    CHECK(w.state == ncclSuccess, "polled to %d", (int)w.state);
    float one = 1, sum = 0;
    CHECK_OK(ncclAllReduce(&one, &sum, 1, ncclFloat32, ncclSum, comm, NULL), "ncclAllReduce");
    CHECK(sum == nranks_, "sum %g", sum);
    CHECK_OK(ncclCommDestroy(comm), "ncclCommDestroy");
    /* a config that was never initialized is refused */
    ncclConfig_t junk;
    memset(&junk, 0, sizeof(junk));
    comm = NULL;
    CHECK(ncclCommInitRankConfig(&comm, nranks_, sh->id, rank_, &junk) == ncclInvalidArgument,
          "an uninitialized config is ncclInvalidArgument");
    CHECK(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER") != NULL, "message: %s",
          ncclGetLastError(NULL));
}

/* ---- errors ---- */

static void case_errors(void)
{
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    float x = 1, y = 0;
    expect(ncclAllReduce(&x, &y, 1, (ncclDataType_t)42, ncclSum, comm, NULL), ncclInvalidArgument,
           "bad datatype", "datatype 42");
    expect(ncclAllReduce(&x, &y, 1, ncclFloat32, (ncclRedOp_t)77, comm, NULL), ncclInvalidArgument,
           "bad operator", "operator 77");
    expect(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument,
           "NULL comm", "comm is NULL");
    expect(ncclAllReduce(NULL, &y, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument,
           "NULL sendbuff", "sendbuf is NULL");
    expect(ncclBroadcast(&x, &y, 1, ncclFloat32, nranks_, comm, NULL), ncclInvalidArgument,
           "root out of range", "root");
    expect(ncclSend(&x, 1, ncclFloat32, rank_, comm, NULL), ncclInvalidUsage, "send to self",
           "itself");
    /* PreMulSum operators: one datatype, one communicator, a limited number, destroyed once */
    ncclRedOp_t op = ncclSum, ops[64];
    CHECK_OK(ncclRedOpCreatePreMulSum(&op, &x, ncclFloat32, ncclScalarHostImmediate, comm),
             "ncclRedOpCreatePreMulSum");
    int64_t xi = 1, yi = 0;
    expect(ncclAllReduce(&xi, &yi, 1, ncclInt64, op, comm, NULL), ncclInvalidArgument,
           "PreMulSum of float32 used on int64", "was made for float32");
    expect(ncclBroadcast(&x, &y, 1, ncclFloat32, 0, comm, (cudaStream_t)(uintptr_t)1),
           ncclInvalidUsage, "a stream with host buffers", "stream");
    expect(ncclRedOpCreatePreMulSum(&op, &x, ncclFloat32, (ncclScalarResidence_t)7, comm),
           ncclInvalidArgument, "bad residence", "residence 7");
    int made = 1;
    ops[0] = op;
    while (made < 64 && ncclRedOpCreatePreMulSum(&ops[made], &x, ncclFloat32,
                                                 ncclScalarHostImmediate, comm) == ncclSuccess)
        made++;
    CHECK(made == 64, "made %d PreMulSum operators, want 64", made);
    expect(ncclRedOpCreatePreMulSum(&op, &x, ncclFloat32, ncclScalarHostImmediate, comm),
           ncclInvalidUsage, "the 65th PreMulSum operator", "destroy one");
    for (int k = 0; k < made; k++)
        CHECK_OK(ncclRedOpDestroy(ops[k], comm), "ncclRedOpDestroy");
    expect(ncclRedOpDestroy(ops[0], comm), ncclInvalidArgument, "destroyed twice",
           "destroyed already");
    expect(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "destroy ncclSum", "built in");
    expect(ncclAllReduce(&x, &y, 1, ncclFloat32, ops[0], comm, NULL), ncclInvalidArgument,
           "a destroyed PreMulSum operator", "PreMulSum operator");
    expect(ncclGroupSimulateEnd(NULL), ncclInvalidUsage, "simulate", "ncclGroupSimulateEnd");
    expect(ncclGroupEnd(), ncclInvalidUsage, "group end without start", "without a matching");
    int version = 0;
    CHECK_OK(ncclGetVersion(&version), "ncclGetVersion");
    CHECK(version == NCCL_VERSION_CODE, "version %d, want %d", version, NCCL_VERSION_CODE);
    /* the communicator still works after refused calls */
    CHECK_OK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL), "all_reduce after");
    CHECK(y == nranks_, "sum %g", y);
    /* a peer that dies: ncclRemoteError naming it */
    if (rank_ == nranks_ - 1) {
        publish();
        _exit(0);
    }
    ncclResult_t rc = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL);
    CHECK(rc == ncclRemoteError, "a dead peer: %d (%s)", (int)rc, ncclGetErrorString(rc));
    char who[32];
    snprintf(who, sizeof(who), "rank %d", nranks_ - 1);
    CHECK(strstr(ncclGetLastError(NULL), who) != NULL, "names %s: %s", who, ncclGetLastError(NULL));
    (void)ncclCommAbort(comm);
}

/* ---- abort from another thread ---- */

static void *abort_later(void *arg)
{
    sleep(1);
    ncclResult_t *rc = malloc(sizeof(*rc));
    *rc = ncclCommAbort((ncclComm_t)arg);
    return rc;
}

static void case_abort(void)
{
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    if (rank_ != 0) {
        /* never calls the all_reduce: rank 0 waits on it until it aborts */
        sh->stage[rank_] = 1;
        while (sh->stage[0] != 2)
            usleep(1000);
        (void)ncclCommAbort(comm);
        return;
    }
    pthread_t t;
    pthread_create(&t, NULL, abort_later, comm);
    float x = 1, y = 0;
    double t0 = now();
    ncclResult_t rc = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL);
    double took = now() - t0;
    void *ret = NULL;
    pthread_join(t, &ret);
    CHECK(rc != ncclSuccess, "the aborted all_reduce fails (%d)", (int)rc);
    CHECK(took < 15, "it returns %.1f s after the start (abort after 1 s)", took);
    CHECK(ret != NULL && *(ncclResult_t *)ret == ncclSuccess, "ncclCommAbort from a thread");
    free(ret);
    sh->stage[0] = 2;
}

/* ---- one process, every rank ---- */

static void case_initall(int n)
{
    ncclComm_t comms[MAX_RANKS] = {0};
    CHECK_OK(ncclCommInitAll(comms, n, NULL), "ncclCommInitAll");
    double in[MAX_RANKS], out[MAX_RANKS];
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n; r++) {
        in[r] = r + 1;
        out[r] = 0;
        CHECK_OK(ncclAllReduce(&in[r], &out[r], 1, ncclFloat64, ncclSum, comms[r], NULL), "queue");
    }
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd over every rank");
    for (int r = 0; r < n; r++) {
        int dev = -1;
        CHECK_OK(ncclCommCuDevice(comms[r], &dev), "ncclCommCuDevice");
        CHECK(out[r] == n * (n + 1) / 2.0 && dev == r, "rank %d: sum %g device %d", r, out[r], dev);
        CHECK_OK(ncclCommDestroy(comms[r]), "destroy");
    }
}

/* ---- shrink: the way on without the last rank, healthy and after it died ---- */

/* the sum of (rank + 1) over the n ranks of comm, all-reduced and checked */
static void sum_check(ncclComm_t comm, int n, int myrank, const char *what)
{
    int64_t mine = myrank + 1, sum = 0;
    CHECK_OK(ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, comm, NULL), what);
    CHECK(sum == (int64_t)n * (n + 1) / 2, "%s: sum %lld, want %d", what, (long long)sum,
          n * (n + 1) / 2);
}

static void case_shrink(void)
{
    ncclComm_t comm = init_comm(), child = NULL;
    if (comm == NULL)
        return;
    const int last = nranks_ - 1, m = nranks_ - 1;
    int excl = last, cnt = 0, r = -1;
    sum_check(comm, nranks_, rank_, "parent");
    /* 1. healthy (NCCL_SHRINK_DEFAULT): the last rank is alive but left out; the parent still
     * works afterwards */
    if (rank_ != last) {
        CHECK_OK(ncclCommShrink(comm, &excl, 1, &child, NULL, NCCL_SHRINK_DEFAULT),
                 "ncclCommShrink");
        if (child != NULL) {
            CHECK_OK(ncclCommCount(child, &cnt), "ncclCommCount");
            CHECK_OK(ncclCommUserRank(child, &r), "ncclCommUserRank");
            CHECK(cnt == m && r == rank_, "shrunk: rank %d of %d, want %d of %d", r, cnt, rank_, m);
            sum_check(child, m, rank_, "shrunk communicator");
            CHECK_OK(ncclCommDestroy(child), "destroy the shrunk communicator");
        }
        __atomic_add_fetch(&sh->stage[0], 1, __ATOMIC_ACQ_REL);
    } else {
        double end = now() + 60;
        while (__atomic_load_n(&sh->stage[0], __ATOMIC_ACQUIRE) < m && now() < end)
            usleep(1000);
    }
    sum_check(comm, nranks_, rank_, "parent after a shrink");
    /* the last rank dies only once every rank has its result (not while one still drains) */
    __atomic_add_fetch(&sh->stage[1], 1, __ATOMIC_ACQ_REL);
    /* wrong lists */
    if (rank_ == 0) {
        int self = 0, dup[2] = {last, last}, out = nranks_;
        expect(ncclCommShrink(comm, &self, 1, &child, NULL, 0), ncclInvalidUsage, "exclude self",
               "only the ranks that remain");
        expect(ncclCommShrink(comm, dup, 2, &child, NULL, 0), ncclInvalidArgument, "twice",
               "listed twice");
        expect(ncclCommShrink(comm, &out, 1, &child, NULL, 0), ncclInvalidArgument, "out of range",
               "out of range");
        expect(ncclCommShrink(comm, &excl, 1, &child, NULL, 4), ncclInvalidArgument, "flags",
               "shrinkFlags");
    }
    /* 2. the last rank dies: the others see the error, revoke, and shrink it away
     * (NCCL_SHRINK_ABORT) */
    if (rank_ == last) {
        double end = now() + 60;
        while (__atomic_load_n(&sh->stage[1], __ATOMIC_ACQUIRE) < nranks_ && now() < end)
            usleep(1000);
        publish();
        _exit(0);
    }
    int64_t one = 1, got = 0;
    ncclResult_t rc = ncclAllReduce(&one, &got, 1, ncclInt64, ncclSum, comm, NULL);
    CHECK(rc != ncclSuccess, "all_reduce with a dead rank returned %d", (int)rc);
    CHECK_OK(ncclCommRevoke(comm, 0), "ncclCommRevoke");
    rc = ncclAllReduce(&one, &got, 1, ncclInt64, ncclSum, comm, NULL);
    CHECK(rc != ncclSuccess, "all_reduce on a revoked communicator returned %d", (int)rc);
    child = NULL;
    double t0 = now();
    CHECK_OK(ncclCommShrink(comm, &excl, 1, &child, NULL, NCCL_SHRINK_ABORT),
             "ncclCommShrink after a death");
    if (child != NULL) {
        sum_check(child, m, rank_, "shrunk after a death");
        CHECK(now() - t0 < 10, "the shrink took %.1f s", now() - t0);
        /* and once more: a second shrink of the new one, leaving out its last rank */
        ncclComm_t grand = NULL;
        int excl2 = m - 1;
        if (rank_ != m - 1) {
            CHECK_OK(ncclCommShrink(child, &excl2, 1, &grand, NULL, 0), "second shrink");
            if (grand != NULL) {
                sum_check(grand, m - 1, rank_, "shrunk twice");
                CHECK_OK(ncclCommDestroy(grand), "destroy");
            }
        }
        CHECK_OK(ncclCommDestroy(child), "destroy the shrunk communicator");
    }
    CHECK_OK(ncclCommDestroy(comm), "destroy the revoked parent");
}

/* ---- driver ---- */

static void run_case(const char *name)
{
    if (strcmp(name, "conformance") == 0)
        case_conformance();
    else if (strcmp(name, "split") == 0)
        case_split();
    else if (strcmp(name, "nonblocking") == 0)
        case_nonblocking();
    else if (strcmp(name, "errors") == 0)
        case_errors();
    else if (strcmp(name, "abort") == 0)
        case_abort();
    else if (strcmp(name, "shrink") == 0)
        case_shrink();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3 || (nranks_ = atoi(argv[2])) < 1 || nranks_ > MAX_RANKS) {
        fprintf(stderr,
                "usage: nccl_test conformance|split|nonblocking|errors|abort|shrink|initall N\n");
        return 2;
    }
    if (strcmp(argv[1], "initall") == 0) {
        rank_ = 0;
        case_initall(nranks_);
        printf("%ld passed, %ld failed\n", passed, failed);
        return failed ? 1 : 0;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 2;
    memset(sh, 0, sizeof(*sh));
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < nranks_; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            rank_ = r;
            gpu_open();
            double end = now() + 30;
            while (!sh->id_ready && now() < end)
                usleep(1000);
            if (sh->id_ready) {
                /* every check is counted as it happens, so that a rank that exits on purpose
                 * (errors) keeps its counts */
                run_case(argv[1]);
            } else {
                failed++;
            }
            publish();
            _exit(failed ? 1 : 0);
        }
    }
    if (ncclGetUniqueId(&sh->id) != ncclSuccess) {
        fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    __atomic_store_n(&sh->id_ready, 1, __ATOMIC_RELEASE);
    const char *dl = getenv("NCCL_TEST_DEADLINE");
    double end = now() + (dl ? atof(dl) : 90);
    int left = nranks_;
    while (left > 0 && now() < end) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            usleep(10000);
            continue;
        }
        left--;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("[parent] FAIL: pid %d ended with %s %d\n", (int)pid,
                   WIFSIGNALED(status) ? "signal" : "status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            failed++;
        }
    }
    for (int r = 0; r < nranks_ && left > 0; r++)
        if (kill(pids[r], SIGKILL) == 0)
            printf("[parent] FAIL: rank %d still running at the deadline: killed\n", r);
    while (waitpid(-1, NULL, 0) > 0)
        ;
    for (int r = 0; r < nranks_; r++) {
        passed += sh->passed[r];
        failed += sh->failed[r];
    }
    failed += left > 0;
    printf("%s: %ld passed, %ld failed\n", argv[1], passed, failed);
    return failed ? 1 : 0;
}
