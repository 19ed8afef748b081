/*
 * Internals of the CPU reduction kernels: the per-ISA dispatch table and the software
 * float16/bfloat16 conversions. The conversions are branch-free (selects only) so that the
 * compiler can vectorise loops that use them, and integer-only so that the result does not depend
 * on the MXCSR rounding mode or on flush-to-zero / denormals-are-zero.
 */
#ifndef COLL_REDUCE_CPU_INTERNAL_H
#define COLL_REDUCE_CPU_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "coll.h"

typedef void (*colli_binop_fn)(void *dst, const void *a, const void *b, size_t count);
typedef void (*colli_binop_div_fn)(void *dst, const void *a, const void *b, size_t count,
                                   uint32_t divisor);
typedef void (*colli_div_fn)(void *dst, const void *src, size_t count, uint32_t divisor);

/* Indexed by coll_datatype_t and by coll_op_t (COLL_SUM..COLL_MAX; COLL_AVG uses COLL_SUM). */
struct colli_kernel_table {
    const char *isa;
    colli_binop_fn reduce[COLL_NUM_DATATYPES][COLL_MAX + 1];
    colli_binop_div_fn reduce_div[COLL_NUM_DATATYPES];
    colli_div_fn div[COLL_NUM_DATATYPES];
};

/* Defined by reduce_cpu_generic.c and reduce_cpu_avx2.c (x86-64 only). */
extern const struct colli_kernel_table colli_kernels_generic;
#if defined(COLLI_KERNELS_HAVE_AVX2)
extern const struct colli_kernel_table colli_kernels_avx2;
#endif

static inline float colli_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t colli_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* binary16 -> binary32, exact. NaN keeps sign and payload and becomes quiet. */
static inline float colli_soft_half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t mag = h & 0x7fffu;
    uint32_t normal = (mag << 13) + ((127u - 15u) << 23);
    uint32_t infnan = 0x7f800000u | (mag << 13) | (mag > 0x7c00u ? 0x00400000u : 0u);
    /* subnormal (and zero): mag * 2^-24 is an exact, normal float32 */
    uint32_t sub = colli_f32_to_bits((float)(int32_t)mag * 0x1p-24f);
    uint32_t r = mag < 0x0400u ? sub : (mag >= 0x7c00u ? infnan : normal);
    return colli_f32_from_bits(sign | r);
}

/* binary32 -> binary16, round to nearest even. Overflow gives infinity; NaN keeps sign and the
 * top 10 payload bits and becomes quiet (what x86 F16C vcvtps2ph does). */
static inline uint16_t colli_soft_float_to_half(float f)
{
    uint32_t w = colli_f32_to_bits(f);
    uint32_t sign = (w >> 16) & 0x8000u;
    uint32_t a = w & 0x7fffffffu;
    /* normal result: rebias the exponent, round the 13 dropped bits to nearest even */
    uint32_t normal = (a - (112u << 23) + 0x0fffu + ((a >> 13) & 1u)) >> 13;
    /* subnormal result: shift the full significand right by s >= 14, round to nearest even */
    uint32_t s = 126u - (a >> 23); /* wraps for exponents > 126; only used when s >= 14 */
    s = s > 31u ? 31u : (s < 14u ? 14u : s);
    uint32_t m = (a & 0x007fffffu) | 0x00800000u;
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t halfway = 1u << (s - 1u);
    uint32_t sub = q + (uint32_t)((rem > halfway) | ((rem == halfway) & (q & 1u)));
    uint32_t nan = 0x7e00u | ((a >> 13) & 0x03ffu);
    uint32_t r = a > 0x7f800000u    ? nan
                 : a >= 0x477ff000u ? 0x7c00u /* >= 65520: rounds to infinity */
                 : a >= 0x38800000u ? normal  /* >= 2^-14 */
                                    : sub;
    return (uint16_t)(sign | r);
}

/* bfloat16 -> binary32, exact. NaN becomes quiet. */
static inline float colli_soft_bf16_to_float(uint16_t b)
{
    uint32_t w = (uint32_t)b << 16;
    uint32_t quiet = (b & 0x7fffu) > 0x7f80u ? 0x00400000u : 0u;
    return colli_f32_from_bits(w | quiet);
}

/* bfloat16 -> binary32 for arithmetic: a signalling NaN is left signalling, which the arithmetic
 * quiets anyway; otherwise the same as colli_soft_bf16_to_float. */
static inline float colli_bf16_expand(uint16_t b)
{
    return colli_f32_from_bits((uint32_t)b << 16);
}

/* binary32 -> bfloat16, round to nearest even. Overflow gives infinity; NaN keeps sign and the
 * top 7 payload bits and becomes quiet. Subnormals are rounded, never flushed. */
static inline uint16_t colli_soft_float_to_bf16(float f)
{
    uint32_t w = colli_f32_to_bits(f);
    uint32_t rounded = (w + 0x7fffu + ((w >> 16) & 1u)) >> 16;
    uint32_t nan = (w >> 16) | 0x0040u;
    return (uint16_t)((w & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}

#endif
