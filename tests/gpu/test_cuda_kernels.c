/*
 * GPU test of the CUDA reduction and copy kernels (kernels/cuda/reduce.cu) against the CPU
 * reference (kernels/reduce_cpu.c): every datatype x op x count {1, 7, 4097, 16 Mi + 3}, two and
 * three inputs, aligned, shared-offset, mixed-offset and byte-misaligned pointers, in place
 * (dst == src[0]), COLL_AVG with several divisors, and copies. Integers, min/max and every
 * result that is not NaN must agree bit for bit; an arithmetic NaN must be a quiet NaN on both
 * sides (sign and payload unspecified, as coll_kernels.h says). Guard bytes around every output
 * must stay untouched. The list kernel (colli_cuda_reduce_list, which plans each op on the
 * device when it runs) does the same on a smaller sweep: every datatype x op, three counts, two
 * and three inputs, every layout, one input, and byte copies.
 *
 * Without a usable GPU (cudaGetDeviceCount fails or finds none) it prints "SKIPPED: <reason>" and
 * exits 77, the suite's skip code. COLL_TEST_CUDA_DEVICE picks the device (default 0).
 */
#include <cuda_runtime_api.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll_kernels.h"
#include "reduce_cuda.h"
#include "kernel_check.h"

#define SKIP_CODE 77
#define BIG_COUNT (((size_t)16 << 20) + 3u)
#define SLACK     64u  /* bytes: room for offsets before and guards after every buffer */
#define GUARD     32u  /* bytes checked after each output */
#define CANARY    0xa5 /* value of the guard bytes */
#define NIN       3    /* inputs */

/* A CUDA runtime call that must succeed; anything else ends the test. */
#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            printf("FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_));   \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char *const op_name[COLL_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};

static int same(int dt, coll_op_t op, uint64_t want, uint64_t got)
{
    return same_result(dt, op == COLL_MIN || op == COLL_MAX, want, got);
}

/* Mostly moderate values (sums and products that stay finite), some specials and random bits. */
static uint64_t gen_elem(int dt)
{
    static const uint16_t f16_special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01,
                                           0x0001, 0x8001, 0x03ff, 0x0400, 0x7bff, 0x3c00};
    static const uint16_t bf16_special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81,
                                            0x0001, 0x8001, 0x007f, 0x0080, 0x7f7f, 0x3f80};
    static const uint32_t f32_special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000,
                                           0x7fc00000, 0x7f800001, 0x00000001, 0x80000001,
                                           0x007fffff, 0x00800000, 0x7f7fffff, 0x3f800000};
    static const uint64_t f64_special[] = {
        0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
        0x7ff8000000000000ull, 0x7ff0000000000001ull, 0x0000000000000001ull, 0x800fffffffffffffull,
        0x0010000000000000ull, 0x7fefffffffffffffull, 0x3ff0000000000000ull};
#define PICK(arr) (arr)[r % (sizeof(arr) / sizeof((arr)[0]))]
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r >> 60); /* 0: special, 1-3: any bits, else moderate */
    r &= 0x0fffffffffffffffull;
    size_t sz = dt_size[dt];
    if (is_int(dt)) {
        uint64_t mask = sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1u;
        if (kind < 8)
            return rnd() & mask;
        return ((r % 2001u) - 1000u) & mask;
    }
    switch (dt) {
    case COLL_FLOAT16:
        if (kind == 0)
            return PICK(f16_special);
        if (kind < 4)
            return r & 0xffffu;
        return ((r & 1u) << 15) | ((8u + (r >> 1) % 15u) << 10) | ((r >> 8) & 0x3ffu);
    case COLL_BFLOAT16:
        if (kind == 0)
            return PICK(bf16_special);
        if (kind < 4)
            return r & 0xffffu;
        return ((r & 1u) << 15) | ((120u + (r >> 1) % 15u) << 7) | ((r >> 8) & 0x7fu);
    case COLL_FLOAT32:
        if (kind == 0)
            return PICK(f32_special);
        if (kind < 4)
            return r & 0xffffffffu;
        return ((r & 1u) << 31) | ((120u + (r >> 1) % 15u) << 23) | ((r >> 8) & 0x7fffffu);
    default:
        if (kind == 0)
            return PICK(f64_special);
        if (kind < 4)
            return rnd();
        return ((r & 1u) << 63) | ((1016ull + (r >> 1) % 15u) << 52) |
               ((r >> 5) & 0xfffffffffffffull);
    }
#undef PICK
}

/* ---- buffers: NIN inputs and one output, host copies of the inputs ---- */
static size_t buf_bytes;
static unsigned char *h_in[NIN], *h_out, *h_ref;
static unsigned char *d_in[NIN], *d_out, *d_scalar;
static cudaStream_t stream;
static int sm_count;

/* The CPU reference of colli_cuda_reduce: n - 1 chained colli_reduce calls, the last one a
 * colli_reduce_div for COLL_AVG with a divisor (colli_div for one input). */
static void cpu_reference(void *dst, const void *const *srcs, int n, size_t count, int dt,
                          coll_op_t op, uint32_t divisor)
{
    int divide = op == COLL_AVG && divisor != 0;
    if (n == 1) {
        if (divide)
            colli_div(dst, srcs[0], count, (coll_datatype_t)dt, divisor);
        else
            memcpy(dst, srcs[0], count * dt_size[dt]);
        return;
    }
    const void *acc = srcs[0];
    for (int s = 1; s < n; s++) {
        if (divide && s == n - 1)
            colli_reduce_div(dst, acc, srcs[s], count, (coll_datatype_t)dt, divisor);
        else
            colli_reduce(dst, acc, srcs[s], count, (coll_datatype_t)dt, op);
        acc = dst;
    }
}

typedef struct {
    const char *name;
    unsigned out;     /* byte offset of the output */
    unsigned in[NIN]; /* byte offsets of the inputs */
    int in_place;     /* output = input 0 */
} layout_t;

/* Offsets in elements (scaled by the element size, modulo 16) or, for "misaligned", in bytes. */
static const layout_t layouts[] = {
    {"aligned", 0, {0, 0, 0}, 0},       {"shared offset", 3, {3, 3, 3}, 0},
    {"mixed offsets", 2, {0, 1, 2}, 0}, {"misaligned", 1, {5, 3, 1}, 0},
    {"in place", 0, {0, 0, 0}, 1},      {"in place, offset", 5, {5, 5, 5}, 1},
};

static unsigned scaled(const layout_t *l, unsigned off, size_t esz)
{
    if (strcmp(l->name, "misaligned") == 0)
        return esz == 1 ? off : off | 1u; /* odd byte offsets: no element alignment */
    return (unsigned)((off * esz) % 16u);
}

/* 1: run_case and test_copies go through colli_cuda_reduce_list, one op in a list of two whose
 * second op is empty (count 0), the list in device memory as the device path keeps it */
static int via_list;
static colli_cuda_list_t *d_list;

static int reduce_or_list(void *dst, const void *const *srcs, int nsrcs, size_t count, int dt,
                          coll_op_t op, uint32_t divisor)
{
    if (!via_list)
        return colli_cuda_reduce(dst, srcs, nsrcs, count, (coll_datatype_t)dt, op, divisor,
                                 sm_count, stream);
    colli_cuda_list_t l;
    memset(&l, 0, sizeof(l));
    l.n = 2;
    l.ops[0].dst = dst;
    for (int s = 0; s < (nsrcs > 0 ? nsrcs : 1); s++)
        l.ops[0].srcs[s] = srcs[s];
    l.ops[0].count = count;
    l.ops[0].nsrcs = nsrcs;
    l.ops[0].divisor = divisor;
    l.ops[1].dst = dst; /* count 0: skipped */
    CUDA_OK(cudaMemcpyAsync(d_list, &l, sizeof(l), cudaMemcpyHostToDevice, stream));
    int rc = colli_cuda_reduce_list(d_list, (coll_datatype_t)dt, op, sm_count, stream);
    CUDA_OK(cudaStreamSynchronize(stream)); /* l is on this stack */
    return rc;
}

static void run_case(int dt, coll_op_t op, size_t count, int nsrcs, const layout_t *l,
                     uint32_t divisor)
{
    const size_t esz = dt_size[dt], bytes = count * esz;
    unsigned o_in[NIN], o_out;
    const void *d_srcs[NIN] = {0}, *h_srcs[NIN] = {0};
    for (int s = 0; s < NIN; s++)
        o_in[s] = scaled(l, l->in[s], esz);
    o_out = l->in_place ? o_in[0] : scaled(l, l->out, esz);
    for (int s = 0; s < nsrcs; s++) {
        d_srcs[s] = d_in[s] + o_in[s];
        h_srcs[s] = h_in[s] + o_in[s];
    }
    unsigned char *d_dst = l->in_place ? d_in[0] + o_out : d_out + o_out;
    unsigned char *d_base = l->in_place ? d_in[0] : d_out;
    const size_t span = o_out + bytes + GUARD;

    if (!l->in_place)
        CUDA_OK(cudaMemsetAsync(d_out, CANARY, span, stream));
    int rc = reduce_or_list(d_dst, d_srcs, nsrcs, count, dt, op, divisor);
    CUDA_OK(cudaMemcpyAsync(h_out, d_base, span, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    char what[160];
    snprintf(what, sizeof(what), "%s %s count %zu, %d inputs, %s (out %u, in %u/%u/%u)%s",
             dt_name[dt], op_name[op], count, nsrcs, l->name, o_out, o_in[0], o_in[1], o_in[2],
             op == COLL_AVG ? (divisor ? ", divided" : ", no division") : "");
    check(rc == 0, "%s: colli_cuda_reduce returned %d (%s)", what, rc, colli_cuda_error_string(rc));
    if (rc != 0)
        return;

    cpu_reference(h_ref, h_srcs, nsrcs, count, dt, op, divisor);
    size_t bad = 0;
    for (size_t i = 0; i < count; i++) {
        uint64_t want = ld_bits(h_ref, i, esz), got = ld_bits(h_out + o_out, i, esz);
        if (same(dt, op, want, got))
            continue;
        if (bad++ < 3)
            check(0,
                  "%s: element %zu is 0x%" PRIx64 ", the CPU gives 0x%" PRIx64 " (inputs 0x%" PRIx64
                  " 0x%" PRIx64 " 0x%" PRIx64 ")",
                  what, i, got, want, ld_bits(h_srcs[0], i, esz), ld_bits(h_srcs[1], i, esz),
                  nsrcs > 2 ? ld_bits(h_srcs[2], i, esz) : 0);
    }
    check(bad == 0, "%s: %zu of %zu elements differ", what, bad, count);
    if (!l->in_place) {
        int guards = 1;
        for (size_t i = 0; i < o_out; i++)
            guards &= h_out[i] == CANARY;
        for (size_t i = o_out + bytes; i < span; i++)
            guards &= h_out[i] == CANARY;
        check(guards, "%s: bytes outside the output were written", what);
    } else {
        /* put input 0 back */
        CUDA_OK(cudaMemcpyAsync(d_in[0], h_in[0], o_out + bytes, cudaMemcpyHostToDevice, stream));
    }
}

/* Every input, host and device copy, filled with fresh elements of dt. */
static void fill_inputs(int dt)
{
    const size_t esz = dt_size[dt], n = buf_bytes / esz;
    for (int s = 0; s < NIN; s++) {
        for (size_t i = 0; i < n; i++) {
            uint64_t v = gen_elem(dt);
            memcpy(h_in[s] + i * esz, &v, esz);
        }
        CUDA_OK(cudaMemcpyAsync(d_in[s], h_in[s], buf_bytes, cudaMemcpyHostToDevice, stream));
    }
}

static void test_reductions(void)
{
    static const size_t counts[] = {1, 7, 4097, BIG_COUNT};
    for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
        fill_inputs(dt);
        unsigned long long failed_before = n_failed;
        for (int op = 0; op < COLL_NUM_OPS; op++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                size_t count = counts[c];
                for (int nsrcs = 2; nsrcs <= NIN; nsrcs++) {
                    for (size_t k = 0; k < sizeof(layouts) / sizeof(layouts[0]); k++) {
                        /* the big count: aligned, mixed and in place (the grid-stride loops) */
                        if (count == BIG_COUNT && k != 0 && k != 2 && k != 4)
                            continue;
                        uint32_t divisor = op == COLL_AVG ? (uint32_t)nsrcs : 0;
                        run_case(dt, (coll_op_t)op, count, nsrcs, &layouts[k], divisor);
                        if (op == COLL_AVG && count != BIG_COUNT) {
                            run_case(dt, (coll_op_t)op, count, nsrcs, &layouts[k], 0);
                            run_case(dt, (coll_op_t)op, count, nsrcs, &layouts[k], 1000003u);
                            run_case(dt, (coll_op_t)op, count, nsrcs, &layouts[k], 64u);
                        }
                    }
                }
                /* one input: a copy, or COLL_AVG's division alone */
                run_case(dt, (coll_op_t)op, count, 1, &layouts[c % 4], op == COLL_AVG ? 5u : 0u);
            }
        }
        printf("%-8s %s\n", dt_name[dt], n_failed == failed_before ? "ok" : "FAILED");
        fflush(stdout);
    }
}

static void test_copies(void)
{
    static const size_t sizes[] = {1, 7, 4097, BIG_COUNT};
    static const unsigned offsets[][2] = {{0, 0}, {3, 3}, {6, 1}, {8, 0}, {12, 4}};
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++) {
        for (size_t k = 0; k < sizeof(offsets) / sizeof(offsets[0]); k++) {
            size_t bytes = sizes[c];
            unsigned od = offsets[k][0], os = offsets[k][1];
            size_t span = od + bytes + GUARD;
            CUDA_OK(cudaMemsetAsync(d_out, CANARY, span, stream));
            const void *src[1] = {d_in[1] + os};
            int rc = via_list ? reduce_or_list(d_out + od, src, 0, bytes, COLL_UINT8, COLL_SUM, 0)
                              : colli_cuda_copy(d_out + od, src[0], bytes, sm_count, stream);
            CUDA_OK(cudaMemcpyAsync(h_out, d_out, span, cudaMemcpyDeviceToHost, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            check(rc == 0, "copy of %zu bytes (%u <- %u): returned %d", bytes, od, os, rc);
            check(memcmp(h_out + od, h_in[1] + os, bytes) == 0,
                  "copy of %zu bytes (%u <- %u): wrong bytes", bytes, od, os);
            int guards = 1;
            for (size_t i = 0; i < od; i++)
                guards &= h_out[i] == CANARY;
            for (size_t i = od + bytes; i < span; i++)
                guards &= h_out[i] == CANARY;
            check(guards, "copy of %zu bytes (%u <- %u): guard bytes written", bytes, od, os);
        }
    }
    /* in place: nothing changes */
    int rc = colli_cuda_copy(d_in[1] + 3, d_in[1] + 3, 4097, sm_count, stream);
    CUDA_OK(cudaMemcpyAsync(h_out, d_in[1], 4097 + 3, cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    check(rc == 0 && memcmp(h_out, h_in[1], 4097 + 3) == 0, "copy in place changed the data");
}

/* CUDA IPC's fallback in its program: the list kernel copies the inputs from device memory to
 * pinned host memory and the results back (the kernel reaches pinned memory through unified
 * addressing). Both ways, aligned and not, guard bytes untouched. */
static void test_list_host_copies(void)
{
    static const size_t sizes[] = {7, 4097, BIG_COUNT};
    const unsigned long long failed_before = n_failed;
    for (size_t c = 0; c < sizeof(sizes) / sizeof(sizes[0]); c++)
        for (unsigned od = 0; od < 8; od += 5) {
            const size_t bytes = sizes[c], span = od + bytes + GUARD;
            const unsigned os = 3 - od % 4;
            /* device to pinned host memory */
            CUDA_OK(cudaStreamSynchronize(stream));
            memset(h_out, CANARY, span);
            const void *src[1] = {d_in[1] + os};
            int rc = reduce_or_list(h_out + od, src, 0, bytes, COLL_UINT8, COLL_SUM, 0);
            CUDA_OK(cudaStreamSynchronize(stream));
            int guards = 1;
            for (size_t i = 0; i < span; i++)
                guards &= i >= od && i < od + bytes ? 1 : h_out[i] == CANARY;
            check(rc == 0 && memcmp(h_out + od, h_in[1] + os, bytes) == 0 && guards,
                  "list copy of %zu bytes to pinned host memory (%u <- %u): wrong bytes or guards",
                  bytes, od, os);
            /* pinned host memory to the device */
            CUDA_OK(cudaMemsetAsync(d_out, CANARY, span, stream));
            src[0] = h_in[2] + os;
            rc = reduce_or_list(d_out + od, src, 0, bytes, COLL_UINT8, COLL_SUM, 0);
            CUDA_OK(cudaMemcpyAsync(h_out, d_out, span, cudaMemcpyDeviceToHost, stream));
            CUDA_OK(cudaStreamSynchronize(stream));
            guards = 1;
            for (size_t i = 0; i < span; i++)
                guards &= i >= od && i < od + bytes ? 1 : h_out[i] == CANARY;
            check(rc == 0 && memcmp(h_out + od, h_in[2] + os, bytes) == 0 && guards,
                  "list copy of %zu bytes from pinned host memory (%u <- %u): wrong bytes or "
                  "guards",
                  bytes, od, os);
        }
    printf("list copies to and from pinned host memory %s\n",
           n_failed == failed_before ? "ok" : "FAILED");
}

/* The list kernel (CUDA IPC's calls, planned on the device): every datatype and op, 2 and NIN
 * inputs, every layout, three counts; one input (a copy or AVG's division); byte copies. */
static void test_lists(void)
{
    static const size_t counts[] = {7, 4097, BIG_COUNT};
    via_list = 1;
    for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
        fill_inputs(dt);
        unsigned long long failed_before = n_failed;
        for (int op = 0; op < COLL_NUM_OPS; op++)
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                for (int nsrcs = 2; nsrcs <= NIN; nsrcs += NIN - 2)
                    for (size_t k = 0; k < sizeof(layouts) / sizeof(layouts[0]); k++)
                        if (counts[c] != BIG_COUNT || k == 0 || k == 2)
                            run_case(dt, (coll_op_t)op, counts[c], nsrcs, &layouts[k],
                                     op == COLL_AVG ? (uint32_t)nsrcs : 0);
                run_case(dt, (coll_op_t)op, counts[c], 1, &layouts[c % 4],
                         op == COLL_AVG ? 5u : 0u);
            }
        printf("list %-8s %s\n", dt_name[dt], n_failed == failed_before ? "ok" : "FAILED");
        fflush(stdout);
    }
    test_copies();
    test_list_host_copies();
    via_list = 0;
}

/* PreMulSum's scaling: colli_cuda_scale against colli_scale, every datatype, a few scalars
 * (specials included) from host memory and from device memory, aligned, misaligned and in
 * place. */
static void test_scales(void)
{
    static const size_t counts[] = {1, 4097, BIG_COUNT};
    for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
        const size_t esz = dt_size[dt], n = buf_bytes / esz;
        for (size_t i = 0; i < n; i++) {
            uint64_t v = gen_elem(dt);
            memcpy(h_in[0] + i * esz, &v, esz);
        }
        CUDA_OK(cudaMemcpyAsync(d_in[0], h_in[0], buf_bytes, cudaMemcpyHostToDevice, stream));
        unsigned long long failed_before = n_failed;
        for (int k = 0; k < 4; k++) {
            uint64_t scalar = gen_elem(dt);
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                const size_t count = counts[c], bytes = count * esz;
                for (int lay = 0; lay < 3; lay++) { /* aligned, misaligned, in place */
                    const unsigned od = lay == 1 ? (esz == 1 ? 3u : 1u) : 0u,
                                   os = lay == 1 ? (esz == 1 ? 5u : 3u) : 0u;
                    unsigned char *d_src = d_in[0] + os;
                    unsigned char *d_dst = lay == 2 ? d_in[1] : d_out + od;
                    if (lay == 2) /* in place on a copy of the input */
                        CUDA_OK(cudaMemcpyAsync(d_in[1], d_in[0], bytes, cudaMemcpyDeviceToDevice,
                                                stream));
                    /* the scalar from host memory, or (odd k) read by the kernel from device
                     * memory, where it was copied on the stream just before */
                    if (k % 2 == 1)
                        CUDA_OK(cudaMemcpyAsync(d_scalar, &scalar, esz, cudaMemcpyHostToDevice,
                                                stream));
                    const int rc = colli_cuda_scale(
                        d_dst, lay == 2 ? d_dst : d_src, count, (coll_datatype_t)dt,
                        k % 2 == 1 ? (const void *)d_scalar : (const void *)&scalar, k % 2,
                        sm_count, stream);
                    CUDA_OK(cudaMemcpyAsync(h_out, d_dst, bytes, cudaMemcpyDeviceToHost, stream));
                    CUDA_OK(cudaStreamSynchronize(stream));
                    check(rc == 0, "%s scale count %zu layout %d: returned %d", dt_name[dt], count,
                          lay, rc);
                    colli_scale(h_ref, h_in[0] + os, count, (coll_datatype_t)dt, &scalar);
                    size_t bad = 0;
                    for (size_t i = 0; i < count; i++)
                        bad += !same(dt, COLL_PROD, ld_bits(h_ref, i, esz), ld_bits(h_out, i, esz));
                    check(bad == 0,
                          "%s scale by 0x%" PRIx64 " count %zu layout %d: %zu of %zu differ",
                          dt_name[dt], scalar, count, lay, bad, count);
                }
            }
        }
        printf("%-8s scale %s\n", dt_name[dt], n_failed == failed_before ? "ok" : "FAILED");
        fflush(stdout);
    }
}

static void test_arguments(void)
{
    const void *srcs[COLLI_CUDA_MAX_SRCS + 1];
    for (int i = 0; i <= COLLI_CUDA_MAX_SRCS; i++)
        srcs[i] = d_in[i % NIN];
    const int inval = cudaErrorInvalidValue;
    check(colli_cuda_reduce(d_out, srcs, 0, 16, COLL_FLOAT32, COLL_SUM, 0, sm_count, stream) ==
              inval,
          "no inputs accepted");
    check(colli_cuda_reduce(d_out, srcs, COLLI_CUDA_MAX_SRCS + 1, 16, COLL_FLOAT32, COLL_SUM, 0,
                            sm_count, stream) == inval,
          "%d inputs accepted", COLLI_CUDA_MAX_SRCS + 1);
    check(colli_cuda_reduce(d_out, srcs, 2, 16, COLL_NUM_DATATYPES, COLL_SUM, 0, sm_count,
                            stream) == inval,
          "bad datatype accepted");
    check(colli_cuda_reduce(d_out, srcs, 2, 16, COLL_FLOAT32, COLL_NUM_OPS, 0, sm_count, stream) ==
              inval,
          "bad op accepted");
    check(colli_cuda_reduce(NULL, srcs, 2, 16, COLL_FLOAT32, COLL_SUM, 0, sm_count, stream) ==
              inval,
          "NULL output accepted");
    check(colli_cuda_reduce(d_out, srcs, 2, 16, COLL_FLOAT32, COLL_SUM, 0, 0, stream) == inval,
          "sm_count 0 accepted");
    const void *nulls[2] = {d_in[0], NULL};
    check(colli_cuda_reduce(d_out, nulls, 2, 16, COLL_FLOAT32, COLL_SUM, 0, sm_count, stream) ==
              inval,
          "NULL input accepted");
    check(colli_cuda_reduce(NULL, nulls, 2, 0, COLL_FLOAT32, COLL_SUM, 0, sm_count, stream) == 0,
          "count 0 refused");
    /* all max inputs at once */
    int rc = colli_cuda_reduce(d_out, srcs, COLLI_CUDA_MAX_SRCS, 4097, COLL_INT32, COLL_SUM, 0,
                               sm_count, stream);
    check(rc == 0, "%d inputs: returned %d", COLLI_CUDA_MAX_SRCS, rc);
    CUDA_OK(cudaStreamSynchronize(stream));
    CUDA_OK(cudaMemcpy(h_out, d_out, 4097 * 4, cudaMemcpyDeviceToHost));
    uint32_t bad = 0;
    for (size_t i = 0; i < 4097; i++) {
        uint32_t want = 0, v, got;
        for (int s = 0; s < COLLI_CUDA_MAX_SRCS; s++) {
            memcpy(&v, h_in[s % NIN] + i * 4, 4);
            want += v;
        }
        memcpy(&got, h_out + i * 4, 4);
        bad += got != want;
    }
    check(bad == 0, "%d inputs: %u elements differ", COLLI_CUDA_MAX_SRCS, bad);
}

/* Not a benchmark (bench/ has those): a figure in the log, to spot a kernel far off the copy. */
static void report_speed(void)
{
    const size_t count = BIG_COUNT - 3;
    cudaEvent_t t0, t1;
    float ms_copy = 0, ms_f32 = 0, ms_bf16 = 0;
    const void *srcs[2] = {d_in[0], d_in[1]};
    CUDA_OK(cudaEventCreate(&t0));
    CUDA_OK(cudaEventCreate(&t1));
    for (int rep = 0; rep < 2; rep++) { /* the first round warms up */
        CUDA_OK(cudaEventRecord(t0, stream));
        for (int i = 0; i < 10; i++)
            CUDA_OK(cudaMemcpyAsync(d_out, d_in[0], count * 4, cudaMemcpyDeviceToDevice, stream));
        CUDA_OK(cudaEventRecord(t1, stream));
        CUDA_OK(cudaEventSynchronize(t1));
        CUDA_OK(cudaEventElapsedTime(&ms_copy, t0, t1));
        CUDA_OK(cudaEventRecord(t0, stream));
        for (int i = 0; i < 10; i++)
            colli_cuda_reduce(d_out, srcs, 2, count, COLL_FLOAT32, COLL_SUM, 0, sm_count, stream);
        CUDA_OK(cudaEventRecord(t1, stream));
        CUDA_OK(cudaEventSynchronize(t1));
        CUDA_OK(cudaEventElapsedTime(&ms_f32, t0, t1));
        CUDA_OK(cudaEventRecord(t0, stream));
        for (int i = 0; i < 10; i++)
            colli_cuda_reduce(d_out, srcs, 2, count * 2, COLL_BFLOAT16, COLL_SUM, 0, sm_count,
                              stream);
        CUDA_OK(cudaEventRecord(t1, stream));
        CUDA_OK(cudaEventSynchronize(t1));
        CUDA_OK(cudaEventElapsedTime(&ms_bf16, t0, t1));
    }
    double gb = 10.0 * (double)count * 4 / 1e9;
    printf("speed (64 MiB per operand): D2D copy %.0f GB/s (read + write), float32 sum of 2 "
           "inputs %.0f GB/s, bfloat16 %.0f GB/s (reads + write)\n",
           2 * gb / (ms_copy / 1e3), 3 * gb / (ms_f32 / 1e3), 3 * gb / (ms_bf16 / 1e3));
    CUDA_OK(cudaEventDestroy(t0));
    CUDA_OK(cudaEventDestroy(t1));
}

int main(void)
{
    int ndev = 0, dev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess) {
        printf("SKIPPED: no usable CUDA device: cudaGetDeviceCount: %s (%s)\n",
               cudaGetErrorString(err), cudaGetErrorName(err));
        return SKIP_CODE;
    }
    if (ndev == 0) {
        printf("SKIPPED: no CUDA device (cudaGetDeviceCount found 0)\n");
        return SKIP_CODE;
    }
    const char *env = getenv("COLL_TEST_CUDA_DEVICE");
    if (env != NULL && *env != '\0')
        dev = atoi(env);
    CUDA_OK(cudaSetDevice(dev));
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, dev));
    int rc = colli_cuda_sm_count(dev, &sm_count);
    if (rc != 0) {
        printf("FAIL colli_cuda_sm_count: %s\n", colli_cuda_error_string(rc));
        return 1;
    }
    printf("device %d: %s, sm_%d%d, %d SMs; CPU reference kernels: %s\n", dev, prop.name,
           prop.major, prop.minor, sm_count, colli_kernels_isa());

    buf_bytes = BIG_COUNT * 8 + SLACK;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    for (int s = 0; s < NIN; s++) {
        CUDA_OK(cudaMallocHost((void **)&h_in[s], buf_bytes));
        CUDA_OK(cudaMalloc((void **)&d_in[s], buf_bytes));
    }
    CUDA_OK(cudaMallocHost((void **)&h_out, buf_bytes));
    CUDA_OK(cudaMalloc((void **)&d_out, buf_bytes));
    CUDA_OK(cudaMalloc((void **)&d_scalar, 8));
    h_ref = malloc(buf_bytes);
    if (h_ref == NULL) {
        printf("FAIL malloc of %zu bytes\n", buf_bytes);
        return 1;
    }

    CUDA_OK(cudaMalloc((void **)&d_list, sizeof(*d_list)));
    test_reductions();
    test_copies();
    test_lists();
    test_scales();
    test_arguments();
    report_speed();

    free(h_ref);
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_scalar));
    CUDA_OK(cudaFree(d_list));
    CUDA_OK(cudaFreeHost(h_out));
    for (int s = 0; s < NIN; s++) {
        CUDA_OK(cudaFree(d_in[s]));
        CUDA_OK(cudaFreeHost(h_in[s]));
    }
    CUDA_OK(cudaStreamDestroy(stream));
    printf("test_cuda_kernels: %llu checks passed, %llu failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
