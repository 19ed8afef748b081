/*
 * Unit test of the CPU reduction kernels (kernels/reduce_cpu.c) against the references of
 * reduce_ref.h, computed independently of the kernels: integers in wider types then truncated,
 * float16 with half_ref.h (the compiler's _Float16, or F16C), bfloat16 and the float8 types with
 * double-based roundings, float32 and float64 in the type. Every instruction set built in and
 * supported by this CPU is tested.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "coll_kernels.h"
#include "kernel_check.h"
#include "reduce_ref.h"

/* The large count: far beyond any vector loop's width and unroll (the kernels have no other size
 * threshold), odd so that every loop ends in a tail. 2^20 + 3 took 86 s of CI's 2 cores (98 s
 * under ASan) for nothing more. */
#define MAX_COUNT (((size_t)1 << 16) + 3u)
#define GUARD     32u  /* canary bytes kept before and after every destination */
#define CANARY    0xa5 /* value of those bytes */

/* ---- one kernel call checked element by element ---- */
static unsigned char *pool_x, *pool_y; /* inputs, MAX_COUNT elements of the current datatype */
static unsigned char *buf_a, *buf_b, *buf_d;
static const size_t buf_len = MAX_COUNT * 8 + 2 * GUARD + 16;

enum { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B };
static const char *const alias_name[] = {"dst separate", "dst==a", "dst==b"};

static void run_case(int dt, int op, size_t count, size_t start, unsigned oa, unsigned ob,
                     unsigned od, int alias, uint32_t divisor)
{
    size_t sz = dt_size[dt];
    size_t nbytes = count * sz;
    const unsigned char *x = pool_x + start * sz, *y = pool_y + start * sz;
    unsigned char *pa = buf_a + GUARD + oa, *pb = buf_b + GUARD + ob, *pd = buf_d + GUARD + od;
    unsigned char *base_d = buf_d;
    size_t dst_off = GUARD + od;

    memset(buf_a, CANARY, nbytes + 2 * GUARD + 16);
    memset(buf_b, CANARY, nbytes + 2 * GUARD + 16);
    memset(buf_d, CANARY, nbytes + 2 * GUARD + 16);
    memcpy(pa, x, nbytes);
    memcpy(pb, y, nbytes);
    if (alias == ALIAS_DST_A) {
        pd = pa;
        base_d = buf_a;
        dst_off = GUARD + oa;
    } else if (alias == ALIAS_DST_B) {
        pd = pb;
        base_d = buf_b;
        dst_off = GUARD + ob;
    }

    switch (op) {
    case OP_REDUCE_DIV:
        colli_reduce_div(pd, pa, pb, count, (coll_datatype_t)dt, divisor);
        break;
    case OP_DIV:
        colli_div(pd, pa, count, (coll_datatype_t)dt, divisor);
        break;
    default:
        colli_reduce(pd, pa, pb, count, (coll_datatype_t)dt, (coll_op_t)op);
        break;
    }

    int ok = 1;
    for (size_t i = 0; i < count; i++) {
        uint64_t xb = ld_bits(x, i, sz), yb = ld_bits(y, i, sz);
        uint64_t expected = ref_elem(dt, op, xb, yb, divisor);
        uint64_t got = ld_bits(pd, i, sz);
        if (!same(dt, op, expected, got)) {
            check(0,
                  "%s %s count=%zu offsets a+%u b+%u dst+%u %s divisor=%" PRIu32
                  " index %zu (x=0x%" PRIx64 " y=0x%" PRIx64 "): expected 0x%" PRIx64
                  " got 0x%" PRIx64,
                  dt_name[dt], op_name[op], count, oa, ob, od, alias_name[alias], divisor, i, xb,
                  yb, expected, got);
            ok = 0;
            break;
        }
    }
    if (ok) {
        /* nothing written outside dst[0..count) */
        for (size_t i = 0; i < dst_off; i++)
            ok &= base_d[i] == CANARY;
        for (size_t i = dst_off + nbytes; i < dst_off + nbytes + GUARD; i++)
            ok &= base_d[i] == CANARY;
        check(ok, "%s %s count=%zu offsets a+%u b+%u dst+%u %s: wrote outside the destination",
              dt_name[dt], op_name[op], count, oa, ob, od, alias_name[alias]);
    }
}

static const uint32_t divisors[] = {
    3, 1, 2, 7, 8, 10, 255, 256, 1000, 65536, 2147483648u, 3000000001u, 4294967295u, 4, 5, 16};

static void test_kernels(void)
{
    static const size_t counts[] = {0, 1, 7, 15, 16, 17, 1023, MAX_COUNT};
    for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
        size_t sz = dt_size[dt];
        for (size_t i = 0; i < MAX_COUNT; i++) {
            st_bits(pool_x, i, sz, gen_elem(dt));
            st_bits(pool_y, i, sz, gen_elem(dt));
        }
        for (int op = 0; op < NUM_TEST_OPS; op++) {
            for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
                size_t count = counts[c];
                int large = count > 4096;
                /* the large count runs once, with every pointer misaligned */
                for (unsigned k = large ? 1u : 0u; k < (large ? 2u : 16u); k++) {
                    /* byte offsets 0..15 of each pointer, in varying combinations */
                    unsigned oa = (k * 5u + 1u) % 16u, ob = (k * 7u + 3u) % 16u, od = k;
                    size_t start = large ? 0 : (k * 97u) % 1000u;
                    uint32_t d = divisors[(k + c) % (sizeof(divisors) / sizeof(divisors[0]))];
                    int nalias = op == OP_DIV ? 2 : 3;
                    for (int alias = 0; alias < nalias; alias++)
                        run_case(dt, op, count, start, oa, ob, od, alias, d);
                }
            }
        }
    }
}

/* colli_scale (PreMulSum's first step) is the product with one scalar: as prod, element by
 * element, for every datatype, including specials, in place and not */
static void test_scale(void)
{
    const size_t n = 4099;
    for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
        size_t sz = dt_size[dt];
        for (int k = 0; k < 8; k++) {
            uint64_t scalar = gen_elem(dt);
            for (size_t i = 0; i < n; i++)
                st_bits(pool_x, i, sz, gen_elem(dt));
            int in_place = k % 2;
            unsigned char *out = in_place ? buf_a : buf_d;
            memcpy(buf_a, pool_x, n * sz);
            colli_scale(out, buf_a, n, (coll_datatype_t)dt, &scalar);
            unsigned bad = 0;
            for (size_t i = 0; i < n; i++) {
                uint64_t x = ld_bits(pool_x, i, sz);
                uint64_t want = ref_elem(dt, OP_PROD, x, scalar & width_mask(sz), 1);
                uint64_t got = ld_bits(out, i, sz);
                if (!same(dt, OP_PROD, want, got) && bad++ < 3)
                    check(0,
                          "%s scale%s: 0x%" PRIx64 " * 0x%" PRIx64 ": expected 0x%" PRIx64
                          " got 0x%" PRIx64,
                          dt_name[dt], in_place ? " in place" : "", x, scalar, want, got);
            }
            check(bad == 0, "%s scale by 0x%" PRIx64 ": %u wrong", dt_name[dt], scalar, bad);
        }
    }
}

/* ---- conversions ---- */
static void test_scalar_conversions(void)
{
    unsigned bad = 0;
    /* every float16 -> float32 -> float16 */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = colli_half_to_float((uint16_t)h);
        uint32_t got = f32_bits(f);
        int nan = (h & 0x7fffu) > 0x7c00u;
        uint32_t expected = nan ? ((h & 0x8000u) << 16) | 0x7fc00000u | ((h & 0x3ffu) << 13)
                                : f32_bits(ref_h2f((uint16_t)h));
        uint16_t back = colli_float_to_half(f);
        uint16_t expected_back = (uint16_t)(nan ? h | 0x0200u : h);
        if (got != expected || back != expected_back) {
            if (bad++ < 5)
                check(0,
                      "float16 conversion 0x%04x: to float expected 0x%08x got 0x%08x, back "
                      "expected 0x%04x got 0x%04x",
                      h, expected, got, expected_back, back);
        }
    }
    check(bad == 0, "float16 round trips: %u of 65536 wrong", bad);

    bad = 0;
    for (uint32_t b = 0; b < 65536; b++) {
        float f = colli_bf16_to_float((uint16_t)b);
        uint32_t got = f32_bits(f);
        int nan = (b & 0x7fffu) > 0x7f80u;
        uint32_t expected = (b << 16) | (nan ? 0x00400000u : 0u);
        uint16_t back = colli_float_to_bf16(f);
        uint16_t expected_back = (uint16_t)(nan ? b | 0x0040u : b);
        if (got != expected || back != expected_back) {
            if (bad++ < 5)
                check(0,
                      "bfloat16 conversion 0x%04x: to float expected 0x%08x got 0x%08x, back "
                      "expected 0x%04x got 0x%04x",
                      b, expected, got, expected_back, back);
        }
    }
    check(bad == 0, "bfloat16 round trips: %u of 65536 wrong", bad);

    /* float32 -> float16 / bfloat16 on edge values, with the expected results spelled out */
    static const struct {
        uint32_t f;
        uint16_t half, bf16;
    } edges[] = {
        {0x00000000, 0x0000, 0x0000}, /* +0 */
        {0x80000000, 0x8000, 0x8000}, /* -0 */
        {0x3f800000, 0x3c00, 0x3f80}, /* 1 */
        {0x3f801000, 0x3c00, 0x3f80}, /* 1 + 2^-11: half tie, to even */
        {0x3f803000, 0x3c02, 0x3f80}, /* 1 + 3*2^-11: half tie, to even (up) */
        {0x3f801001, 0x3c01, 0x3f80}, /* just above the half tie */
        {0x3f808000, 0x3c04, 0x3f80}, /* 1 + 2^-8: bf16 tie, to even */
        {0x3f818000, 0x3c0c, 0x3f82}, /* 1 + 3*2^-8: bf16 tie, to even (up) */
        {0x3f808001, 0x3c04, 0x3f81}, /* just above the bf16 tie */
        {0x3f7fffff, 0x3c00, 0x3f80}, /* just below 1 */
        {0x3fffffff, 0x4000, 0x4000}, /* rounding carries into the exponent */
        {0x477fe000, 0x7bff, 0x4780}, /* 65504: largest half */
        {0x477fefff, 0x7bff, 0x4780}, /* just below the half overflow threshold */
        {0x477ff000, 0x7c00, 0x4780}, /* 65520: tie between 65504 and 2^16, to even: inf */
        {0x47800000, 0x7c00, 0x4780}, /* 65536 */
        {0xc77ff000, 0xfc00, 0xc780}, /* -65520 */
        {0x7f7f7fff, 0x7c00, 0x7f7f}, /* below the bf16 overflow threshold */
        {0x7f7f8000, 0x7c00, 0x7f80}, /* bf16 tie at the top: to even is inf */
        {0x7f7fffff, 0x7c00, 0x7f80}, /* FLT_MAX */
        {0xff7fffff, 0xfc00, 0xff80}, /* -FLT_MAX */
        {0x7f800000, 0x7c00, 0x7f80}, /* inf */
        {0xff800000, 0xfc00, 0xff80}, /* -inf */
        {0x7fc00000, 0x7e00, 0x7fc0}, /* quiet NaN */
        {0xffc00000, 0xfe00, 0xffc0}, /* negative quiet NaN */
        {0x7f800001, 0x7e00, 0x7fc0}, /* signalling NaN, low payload: becomes quiet */
        {0xff800001, 0xfe00, 0xffc0}, /* negative signalling NaN */
        {0x7fa00000, 0x7f00, 0x7fe0}, /* signalling NaN, high payload kept */
        {0x7fffffff, 0x7fff, 0x7fff}, /* NaN, all payload bits */
        {0x38800000, 0x0400, 0x3880}, /* 2^-14: smallest normal half */
        {0x387fc000, 0x03ff, 0x3880}, /* 2^-14 - 2^-24: largest subnormal half */
        {0x387fe000, 0x0400, 0x3880}, /* 2^-14 - 2^-25: tie, to even: smallest normal */
        {0x33800000, 0x0001, 0x3380}, /* 2^-24: smallest subnormal half */
        {0x33000000, 0x0000, 0x3300}, /* 2^-25: tie between 0 and 2^-24, to even: 0 */
        {0x33000001, 0x0001, 0x3300}, /* just above it */
        {0xb3000001, 0x8001, 0xb300}, /* negative */
        {0x33c00000, 0x0002, 0x33c0}, /* 3*2^-25: tie, to even: 2 */
        {0x33400000, 0x0001, 0x3340}, /* 0.75*2^-24 */
        {0x32ffffff, 0x0000, 0x3300}, /* just below 2^-25 */
        {0x00800000, 0x0000, 0x0080}, /* FLT_MIN */
        {0x007fffff, 0x0000, 0x0080}, /* largest float subnormal: bf16 rounds up to normal */
        {0x00008000, 0x0000, 0x0000}, /* bf16 subnormal tie, to even: 0 */
        {0x00018000, 0x0000, 0x0002}, /* bf16 subnormal tie, to even: 2 */
        {0x00008001, 0x0000, 0x0001}, /* just above the tie */
        {0x80008001, 0x8000, 0x8001}, /* negative */
        {0x00000001, 0x0000, 0x0000}, /* smallest float subnormal */
        {0x80000001, 0x8000, 0x8000},
    };
    for (size_t i = 0; i < sizeof(edges) / sizeof(edges[0]); i++) {
        float f = f32_from_bits(edges[i].f);
        uint16_t h = colli_float_to_half(f), b = colli_float_to_bf16(f);
        check(h == edges[i].half, "float32 0x%08x -> float16: expected 0x%04x got 0x%04x",
              edges[i].f, edges[i].half, h);
        check(b == edges[i].bf16, "float32 0x%08x -> bfloat16: expected 0x%04x got 0x%04x",
              edges[i].f, edges[i].bf16, b);
        if (!isnan(f)) { /* the references agree with the table */
            check(ref_f2h(f) == edges[i].half, "test table: float16 of 0x%08x is 0x%04x",
                  edges[i].f, ref_f2h(f));
            check(ref_round_bf16(f) == edges[i].bf16, "test table: bfloat16 of 0x%08x is 0x%04x",
                  edges[i].f, ref_round_bf16(f));
        }
    }

    /* every float8 value -> float32 -> float8, and float32 edges of each format */
    for (int dt = COLL_FLOAT8_E4M3; dt <= COLL_FLOAT8_E5M2; dt++) {
        int e4 = dt == COLL_FLOAT8_E4M3;
        bad = 0;
        for (unsigned b = 0; b < 256; b++) {
            float f =
                e4 ? colli_fp8_e4m3_to_float((uint8_t)b) : colli_fp8_e5m2_to_float((uint8_t)b);
            double v = ref_fp8_value(dt, b);
            unsigned back = e4 ? colli_float_to_fp8_e4m3(f) : colli_float_to_fp8_e5m2(f);
            int nan = isnan(v);
            unsigned expected_back = nan        ? (b & 0x80u) | (e4 ? 0x7fu : 0x7eu)
                                     : isinf(v) ? (b & 0x80u) | 0x7bu /* saturates */
                                                : b;
            int ok = (nan ? isnan(f) : (double)f == v && !signbit(f) == !signbit(v)) &&
                     back == expected_back;
            if (!ok && bad++ < 5)
                check(0, "%s conversion 0x%02x: value %g, got %g, back 0x%02x (expected 0x%02x)",
                      dt_name[dt], b, v, (double)f, back, expected_back);
        }
        check(bad == 0, "%s round trips: %u of 256 wrong", dt_name[dt], bad);
    }
    static const struct {
        float f;
        uint8_t e4m3, e5m2;
    } fp8_edges[] = {
        {1.0f, 0x38, 0x3c},       {448.0f, 0x7e, 0x5f}, /* largest E4M3 */
        {464.0f, 0x7e, 0x5f}, /* E4M3 tie between 448 and 480 (NaN code): to even, 448 */
        {465.0f, 0x7e, 0x5f}, /* rounds beyond 448: saturates */
        {1e9f, 0x7e, 0x7b},       {57344.0f, 0x7e, 0x7b}, /* largest E5M2 */
        {61440.0f, 0x7e, 0x7b}, /* E5M2 tie between 57344 and 65536: saturates */
        {-INFINITY, 0xfe, 0xfb},  {INFINITY, 0x7e, 0x7b},
        {0x1p-9f, 0x01, 0x18},    /* smallest E4M3 subnormal (a normal E5M2) */
        {0x1p-10f, 0x00, 0x14},   /* E4M3 tie between 0 and 2^-9: to even, 0 */
        {0x3p-10f, 0x02, 0x1a},   /* E4M3 tie between 2^-9 and 2^-8: to even, 2^-8 */
        {0x1p-16f, 0x00, 0x01},   /* smallest E5M2 subnormal */
        {0x1p-17f, 0x00, 0x00},   /* E5M2 tie between 0 and 2^-16: to even, 0 */
        {0x1.1p-17f, 0x00, 0x01}, /* just above it */
        {-0.0f, 0x80, 0x80},      {0x1.1p0f, 0x38, 0x3c}, /* 1 + 2^-4: E4M3 tie, to even */
        {0x1.3p0f, 0x3a, 0x3d},                           /* 1 + 3*2^-4: E4M3 tie, to even (up) */
        {0x1.fp0f, 0x40, 0x40},                           /* carries into the exponent */
    };
    for (size_t i = 0; i < sizeof(fp8_edges) / sizeof(fp8_edges[0]); i++) {
        float f = fp8_edges[i].f;
        unsigned a = colli_float_to_fp8_e4m3(f), b = colli_float_to_fp8_e5m2(f);
        check(a == fp8_edges[i].e4m3, "float32 %a -> float8_e4m3: expected 0x%02x got 0x%02x",
              (double)f, fp8_edges[i].e4m3, a);
        check(b == fp8_edges[i].e5m2, "float32 %a -> float8_e5m2: expected 0x%02x got 0x%02x",
              (double)f, fp8_edges[i].e5m2, b);
        check(ref_fp8_round(COLL_FLOAT8_E4M3, f) == fp8_edges[i].e4m3 &&
                  ref_fp8_round(COLL_FLOAT8_E5M2, f) == fp8_edges[i].e5m2,
              "test table: float8 of %a is 0x%02x / 0x%02x", (double)f,
              ref_fp8_round(COLL_FLOAT8_E4M3, f), ref_fp8_round(COLL_FLOAT8_E5M2, f));
    }

    /* random float32 bit patterns */
    unsigned bad_h = 0, bad_b = 0, bad_8 = 0;
    for (unsigned i = 0; i < (1u << 22); i++) {
        uint32_t w = (uint32_t)rnd();
        float f = f32_from_bits(w);
        uint16_t h = colli_float_to_half(f), b = colli_float_to_bf16(f);
        uint16_t eh, eb;
        if (isnan(f)) {
            eh = (uint16_t)(((w >> 16) & 0x8000u) | 0x7e00u | ((w >> 13) & 0x3ffu));
            eb = (uint16_t)((w >> 16) | 0x40u);
        } else {
            eh = ref_f2h(f);
            eb = ref_round_bf16(f);
        }
        if (h != eh && bad_h++ < 5)
            check(0, "float32 0x%08x -> float16: expected 0x%04x got 0x%04x", w, eh, h);
        if (b != eb && bad_b++ < 5)
            check(0, "float32 0x%08x -> bfloat16: expected 0x%04x got 0x%04x", w, eb, b);
        unsigned a8 = colli_float_to_fp8_e4m3(f), b8 = colli_float_to_fp8_e5m2(f);
        unsigned ea8 = ref_fp8_round(COLL_FLOAT8_E4M3, f), eb8 = ref_fp8_round(COLL_FLOAT8_E5M2, f);
        if ((a8 != ea8 || b8 != eb8) && bad_8++ < 5)
            check(0, "float32 0x%08x -> float8: expected 0x%02x / 0x%02x got 0x%02x / 0x%02x", w,
                  ea8, eb8, a8, b8);
    }
    check(bad_8 == 0, "random float32 -> float8: %u wrong", bad_8);
    check(bad_h == 0, "random float32 -> float16: %u wrong", bad_h);
    check(bad_b == 0, "random float32 -> bfloat16: %u wrong", bad_b);
}

/* The array kernels convert with their own code (F16C on AVX2): all 65536 values of each half
 * type through sum with -0 (an identity), div by 1, min with itself, and sum / prod against a
 * set of fixed second operands. */
static void test_array_conversions(void)
{
    static const uint16_t f16_ops[] = {0x3c00, 0x3c01, 0xbc00, 0x3800, 0x4200, 0x1400,
                                       0x0001, 0x8400, 0x7bff, 0x3555, 0x0400, 0x03ff};
    static const uint16_t bf16_ops[] = {0x3f80, 0x3f81, 0xbf80, 0x3f00, 0x4040, 0x3c00,
                                        0x0001, 0x8080, 0x7f7f, 0x3eab, 0x0080, 0x007f};
    const size_t n = 65536;
    unsigned char *x = pool_x, *y = pool_y, *out = buf_d;
    for (int dt = COLL_FLOAT16; dt <= COLL_BFLOAT16; dt++) {
        const uint16_t *ops = dt == COLL_FLOAT16 ? f16_ops : bf16_ops;
        for (size_t i = 0; i < n; i++) {
            st_bits(x, i, 2, i);
            st_bits(y, i, 2, 0x8000u); /* -0 */
        }
        colli_reduce(out, x, y, n, (coll_datatype_t)dt, COLL_SUM);
        unsigned bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t got = ld_bits(out, i, 2);
            int ok =
                is_nan_bits(dt, i) ? is_nan_bits(dt, got) && is_quiet_nan_bits(dt, got) : got == i;
            if (!ok && bad++ < 5)
                check(0, "%s x + -0 for x=0x%04zx: got 0x%04" PRIx64, dt_name[dt], i, got);
        }
        check(bad == 0, "%s all x + -0: %u wrong", dt_name[dt], bad);

        colli_div(out, x, n, (coll_datatype_t)dt, 1);
        bad = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t got = ld_bits(out, i, 2);
            int ok =
                is_nan_bits(dt, i) ? is_nan_bits(dt, got) && is_quiet_nan_bits(dt, got) : got == i;
            if (!ok && bad++ < 5)
                check(0, "%s x / 1 for x=0x%04zx: got 0x%04" PRIx64, dt_name[dt], i, got);
        }
        check(bad == 0, "%s all x / 1: %u wrong", dt_name[dt], bad);

        colli_reduce(out, x, x, n, (coll_datatype_t)dt, COLL_MIN);
        check(memcmp(out, x, n * 2) == 0, "%s all min(x, x) == x", dt_name[dt]);

        for (size_t k = 0; k < 12; k++) {
            for (size_t i = 0; i < n; i++)
                st_bits(y, i, 2, ops[k]);
            for (int op = OP_SUM; op <= OP_PROD; op++) {
                colli_reduce(out, x, y, n, (coll_datatype_t)dt, (coll_op_t)op);
                bad = 0;
                for (size_t i = 0; i < n; i++) {
                    uint64_t expected = ref_elem(dt, op, i, ops[k], 1);
                    uint64_t got = ld_bits(out, i, 2);
                    if (!same(dt, op, expected, got) && bad++ < 5)
                        check(0,
                              "%s %s count=65536 index %zu (x=0x%04zx y=0x%04x): expected "
                              "0x%04" PRIx64 " got 0x%04" PRIx64,
                              dt_name[dt], op_name[op], i, i, ops[k], expected, got);
                }
                check(bad == 0, "%s all x %s 0x%04x: %u wrong", dt_name[dt], op_name[op], ops[k],
                      bad);
            }
        }
    }
}

static void test_api_edges(void)
{
    /* count 0 never touches the pointers; invalid datatype / op do nothing */
    colli_reduce(NULL, NULL, NULL, 0, COLL_FLOAT32, COLL_SUM);
    colli_reduce_div(NULL, NULL, NULL, 0, COLL_INT8, 3);
    colli_div(NULL, NULL, 0, COLL_FLOAT16, 3);
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40}, d[4] = {7, 7, 7, 7};
    colli_reduce(d, a, b, 4, COLL_NUM_DATATYPES, COLL_SUM);
    colli_reduce(d, a, b, 4, COLL_INT32, COLL_NUM_OPS);
    check(d[0] == 7 && d[3] == 7, "invalid datatype or op must not write");
    /* divisor 0 behaves as 1 */
    colli_reduce_div(d, a, b, 4, COLL_INT32, 0);
    check(d[0] == 11 && d[3] == 44, "reduce_div by 0 acts as by 1: got %d %d", d[0], d[3]);
    colli_div(d, a, 4, COLL_INT32, 0);
    check(d[0] == 1 && d[3] == 4, "div by 0 acts as by 1: got %d %d", d[0], d[3]);
    /* avg reduces like sum */
    colli_reduce(d, a, b, 4, COLL_INT32, COLL_AVG);
    check(d[0] == 11 && d[3] == 44, "avg reduces like sum: got %d %d", d[0], d[3]);
}

int main(void)
{
    static const char *const isas[] = {"generic", "avx2"};

    pool_x = malloc(MAX_COUNT * 8);
    pool_y = malloc(MAX_COUNT * 8);
    buf_a = malloc(buf_len);
    buf_b = malloc(buf_len);
    buf_d = malloc(buf_len);
    if (!pool_x || !pool_y || !buf_a || !buf_b || !buf_d) {
        printf("out of memory\n");
        return 1;
    }
    printf("default kernels: %s\n", colli_kernels_isa());

    static char tag[48];
    check_tag = "[scalar] ";
    test_scalar_conversions();
    test_scale();

    for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
        if (colli_kernels_select_isa(isas[i]) != 0) {
            printf("kernels %s: not built in or not supported by this CPU, not tested\n", isas[i]);
            continue;
        }
        const char *cur_isa = colli_kernels_isa();
        snprintf(tag, sizeof(tag), "[%s] ", cur_isa);
        check_tag = tag;
        unsigned long long before = n_failed;
        test_api_edges();
        test_array_conversions();
        test_kernels();
        printf("kernels %s: %s\n", cur_isa, n_failed == before ? "ok" : "FAILED");
    }
    colli_kernels_select_isa(NULL);

    free(pool_x);
    free(pool_y);
    free(buf_a);
    free(buf_b);
    free(buf_d);
    printf("%llu passed, %llu failed\n", n_passed, n_failed);
    return n_failed == 0 ? 0 : 1;
}
