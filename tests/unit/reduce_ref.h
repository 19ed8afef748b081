/* The independent reference of test_reduce_cpu.c, written once for it (header-only, like
 * kernel_check.h, which it uses): the test's operations, raw element bits, each datatype's result
 * computed without the kernels (integers in wider types then truncated, float16 with the
 * compiler's _Float16, bfloat16 and float8 by double-based roundings on the value grid, float32
 * and float64 in the type), and the input generator (specials, any bits, moderate values). */
#ifndef KCOLL_TESTS_REDUCE_REF_H
#define KCOLL_TESTS_REDUCE_REF_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fp8_ref.h"
#include "half_ref.h"
#include "kernel_check.h"

/* ---- operations ---- */

enum { OP_SUM, OP_PROD, OP_MIN, OP_MAX, OP_AVG, OP_REDUCE_DIV, OP_DIV, NUM_TEST_OPS };
static const char *const op_name[NUM_TEST_OPS] = {"sum", "prod",       "min", "max",
                                                  "avg", "reduce_div", "div"};

static int is_signed_int(int dt)
{
    return dt == COLL_INT8 || dt == COLL_INT32 || dt == COLL_INT64;
}

static void st_bits(unsigned char *p, size_t i, size_t sz, uint64_t v)
{
    uint8_t v8 = (uint8_t)v;
    uint16_t v16 = (uint16_t)v;
    uint32_t v32 = (uint32_t)v;
    p += i * sz;
    switch (sz) {
    case 1:
        memcpy(p, &v8, 1);
        break;
    case 2:
        memcpy(p, &v16, 2);
        break;
    case 4:
        memcpy(p, &v32, 4);
        break;
    default:
        memcpy(p, &v, 8);
        break;
    }
}

static uint64_t width_mask(size_t sz)
{
    return sz == 8 ? ~0ull : (1ull << (8 * sz)) - 1u;
}

/* Two's complement value of the low 8*sz bits. */
static __int128 sext(uint64_t v, size_t sz)
{
    uint64_t m = 1ull << (8 * sz - 1);
    v &= width_mask(sz);
    return (__int128)(v ^ m) - (__int128)m;
}

static float f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static double f64_from_bits(uint64_t u)
{
    double f;
    memcpy(&f, &u, 8);
    return f;
}

static uint64_t f64_bits(double f)
{
    uint64_t u;
    memcpy(&u, &f, 8);
    return u;
}

/* bfloat16 reference: exact value from the bits, rounding done in double with rint(). */
static float ref_b2f(uint16_t b)
{
    return f32_from_bits((uint32_t)b << 16);
}

static uint16_t ref_round_bf16(double x)
{
    uint16_t sign = signbit(x) ? 0x8000u : 0u;
    double ax = fabs(x);
    uint16_t r;
    if (isnan(x))
        return sign | 0x7fc0u;
    if (ax >= 0x1.ffp127) { /* halfway between the largest finite bfloat16 and 2^128, or more */
        r = 0x7f80u;
    } else {
        int e;
        frexp(ax, &e);   /* ax in [2^(e-1), 2^e) */
        int ulp = e - 8; /* 8 significant bits */
        if (ulp < -133)  /* subnormal range: fixed spacing 2^-133 */
            ulp = -133;
        double q = rint(ldexp(ax, -ulp));
        r = (uint16_t)(f32_bits((float)ldexp(q, ulp)) >> 16);
    }
    return sign | r;
}

/* float8 references (OCP E4M3 / E5M2), from the value grid: the value of a code, and the code of
 * a double rounded to nearest even with saturation (the largest finite value, infinities too). */
static int is_fp8(int dt)
{
    return dt == COLL_FLOAT8_E4M3 || dt == COLL_FLOAT8_E5M2;
}

static double ref_fp8_value(int dt, unsigned b)
{
    return fp8_ref_value(dt == COLL_FLOAT8_E4M3, b);
}

static unsigned ref_fp8_round(int dt, double x)
{
    return fp8_ref_round(dt == COLL_FLOAT8_E4M3, x);
}

static uint64_t ref_int(int dt, int op, uint64_t xb, uint64_t yb, uint32_t d)
{
    size_t sz = dt_size[dt];
    uint64_t mask = width_mask(sz);
    if (is_signed_int(dt)) {
        __int128 x = sext(xb, sz), y = sext(yb, sz), r;
        switch (op) {
        case OP_SUM:
        case OP_AVG:
            r = x + y;
            break;
        case OP_PROD:
            r = x * y;
            break;
        case OP_MIN:
            r = x < y ? x : y;
            break;
        case OP_MAX:
            r = x > y ? x : y;
            break;
        case OP_REDUCE_DIV:
            r = sext((uint64_t)(unsigned __int128)(x + y), sz) / (__int128)d;
            break;
        default:
            r = x / (__int128)d;
            break;
        }
        return (uint64_t)(unsigned __int128)r & mask;
    } else {
        unsigned __int128 x = xb, y = yb, r;
        switch (op) {
        case OP_SUM:
        case OP_AVG:
            r = x + y;
            break;
        case OP_PROD:
            r = x * y;
            break;
        case OP_MIN:
            r = x < y ? x : y;
            break;
        case OP_MAX:
            r = x > y ? x : y;
            break;
        case OP_REDUCE_DIV:
            r = ((x + y) & mask) / d;
            break;
        default:
            r = x / d;
            break;
        }
        return (uint64_t)r & mask;
    }
}

static uint64_t ref_elem(int dt, int op, uint64_t xb, uint64_t yb, uint32_t d)
{
    if (is_int(dt))
        return ref_int(dt, op, xb, yb, d);
    if (is_fp8(dt)) {
        double x = ref_fp8_value(dt, (unsigned)xb), y = ref_fp8_value(dt, (unsigned)yb);
        switch (op) {
        case OP_SUM:
        case OP_AVG:
            return ref_fp8_round(dt, x + y); /* exact in double */
        case OP_PROD:
            return ref_fp8_round(dt, x * y);
        case OP_MIN:
            return x < y ? xb : yb;
        case OP_MAX:
            return x > y ? xb : yb;
        case OP_REDUCE_DIV: /* specified as float32 sum and quotient, one final rounding */
            return ref_fp8_round(dt, (double)((float)(x + y) / (float)d));
        default:
            return ref_fp8_round(dt, (double)((float)x / (float)d));
        }
    }
    switch (dt) {
    case COLL_FLOAT16: {
        float x = ref_h2f((uint16_t)xb), y = ref_h2f((uint16_t)yb);
        switch (op) {
        case OP_SUM:
        case OP_AVG:
            return ref_f2h(x + y);
        case OP_PROD:
            return ref_f2h(x * y);
        case OP_MIN:
            return x < y ? xb : yb;
        case OP_MAX:
            return x > y ? xb : yb;
        case OP_REDUCE_DIV:
            return ref_f2h((x + y) / (float)d);
        default:
            return ref_f2h(x / (float)d);
        }
    }
    case COLL_BFLOAT16: {
        float x = ref_b2f((uint16_t)xb), y = ref_b2f((uint16_t)yb);
        switch (op) {
        case OP_SUM:
        case OP_AVG:
            return ref_round_bf16((double)x + (double)y);
        case OP_PROD:
            return ref_round_bf16((double)x * (double)y);
        case OP_MIN:
            return x < y ? xb : yb;
        case OP_MAX:
            return x > y ? xb : yb;
        case OP_REDUCE_DIV: /* specified as float32 sum and quotient, one final rounding */
            return ref_round_bf16((double)((x + y) / (float)d));
        default:
            return ref_round_bf16((double)(x / (float)d));
        }
    }
    case COLL_FLOAT32: {
        float x = f32_from_bits((uint32_t)xb), y = f32_from_bits((uint32_t)yb);
        switch (op) {
        case OP_SUM:
        case OP_AVG:
            return f32_bits(x + y);
        case OP_PROD:
            return f32_bits(x * y);
        case OP_MIN:
            return x < y ? xb : yb;
        case OP_MAX:
            return x > y ? xb : yb;
        case OP_REDUCE_DIV:
            return f32_bits((x + y) / (float)d);
        default:
            return f32_bits(x / (float)d);
        }
    }
    default: {
        double x = f64_from_bits(xb), y = f64_from_bits(yb);
        switch (op) {
        case OP_SUM:
        case OP_AVG:
            return f64_bits(x + y);
        case OP_PROD:
            return f64_bits(x * y);
        case OP_MIN:
            return x < y ? xb : yb;
        case OP_MAX:
            return x > y ? xb : yb;
        case OP_REDUCE_DIV:
            return f64_bits((x + y) / (double)d);
        default:
            return f64_bits(x / (double)d);
        }
    }
    }
}

static int same(int dt, int op, uint64_t expected, uint64_t got)
{
    return same_result(dt, op == OP_MIN || op == OP_MAX, expected, got);
}

/* ---- input generation ---- */
static uint64_t gen_elem(int dt)
{
    static const uint64_t f16_special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0xfe00,
                                           0x7c01, 0x7d55, 0x0001, 0x8001, 0x03ff, 0x0400,
                                           0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3c01, 0x0200};
    static const uint64_t bf16_special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0xffc0,
                                            0x7f81, 0x7fa5, 0x0001, 0x8001, 0x007f, 0x0080,
                                            0x7f7f, 0xff7f, 0x3f80, 0xbf80, 0x3f81, 0x0040};
    static const uint64_t f32_special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000,
                                           0x7fc00000, 0xffc00000, 0x7f800001, 0x7fa00000,
                                           0x00000001, 0x80000001, 0x007fffff, 0x00800000,
                                           0x7f7fffff, 0xff7fffff, 0x3f800000, 0xbf800000};
    static const uint64_t f64_special[] = {
        0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
        0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff0000000000001ull, 0x0000000000000001ull,
        0x800fffffffffffffull, 0x0010000000000000ull, 0x7fefffffffffffffull, 0xffefffffffffffffull,
        0x3ff0000000000000ull, 0xbff0000000000000ull};
#define PICK(arr) (arr)[r % (sizeof(arr) / sizeof((arr)[0]))]
    uint64_t r = rnd();
    unsigned kind = (unsigned)(r >> 60); /* 0: special, 1-4: any bits, else moderate values */
    r &= 0x0fffffffffffffffull;
    size_t sz = dt_size[dt];
    if (is_int(dt)) {
        uint64_t mask = width_mask(sz), top = 1ull << (8 * sz - 1);
        const uint64_t int_special[] = {0, 1, 2, mask, top, mask ^ top, top + 1u};
        if (kind == 0)
            return PICK(int_special);
        if (kind < 8)
            return rnd() & mask;
        return ((r % 2001u) - 1000u) & mask; /* small values: sums and products that fit */
    }
    static const uint64_t e4m3_special[] = {0x00, 0x80, 0x7f, 0xff, 0x7e, 0xfe, 0x01, 0x81,
                                            0x07, 0x08, 0x38, 0xb8, 0x39, 0x77, 0x04};
    static const uint64_t e5m2_special[] = {0x00, 0x80, 0x7c, 0xfc, 0x7e, 0xfe, 0x7d, 0x7f, 0x01,
                                            0x81, 0x03, 0x04, 0x7b, 0xfb, 0x3c, 0xbc, 0x3d, 0x02};
    /* floats: specials, any bits, or sign | exponent in [ebase, ebase + erange) | random
     * significand (moderate magnitudes, so that sums and products stay finite) */
    const uint64_t *sp;
    size_t nsp;
    unsigned bits, mant, ebase, erange = 15, mshift = 8;
#define FMT(arr, b, m, e)                                                                          \
    (sp = (arr), nsp = sizeof(arr) / sizeof((arr)[0]), bits = (b), mant = (m), ebase = (e))
    switch (dt) {
    case COLL_FLOAT8_E4M3: /* exponent 4..10: 2^-3..2^3 */
        FMT(e4m3_special, 8, 3, 4), erange = 7;
        break;
    case COLL_FLOAT8_E5M2:
        FMT(e5m2_special, 8, 2, 12), erange = 7;
        break;
    case COLL_FLOAT16: /* exponent 8..22: 2^-7..2^7 */
        FMT(f16_special, 16, 10, 8);
        break;
    case COLL_BFLOAT16:
        FMT(bf16_special, 16, 7, 120);
        break;
    case COLL_FLOAT32:
        FMT(f32_special, 32, 23, 120);
        break;
    default:
        FMT(f64_special, 64, 52, 1016), mshift = 5;
        break;
    }
#undef FMT
    if (kind == 0)
        return sp[r % nsp];
    if (kind < 5)
        return bits == 64 ? rnd() : r & width_mask(bits / 8);
    return ((r & 1u) << (bits - 1)) | ((uint64_t)(ebase + (r >> 1) % erange) << mant) |
           ((r >> mshift) & ((1ull << mant) - 1));
#undef PICK
}

#endif
