/*
 * The two OCP 8-bit floating-point formats (OCP 8-bit Floating Point Specification, v1.0), as
 * integer-only conversions shared by the CPU kernels, the CUDA kernels and the tools:
 *
 *   E4M3 (COLL_FLOAT8_E4M3, NCCL's ncclFloat8e4m3): bias 7, no infinities, S.1111.111 is NaN,
 *        largest finite 448, smallest subnormal 2^-9.
 *   E5M2 (COLL_FLOAT8_E5M2, ncclFloat8e5m2): bias 15, IEEE-like (the upper byte of a binary16):
 *        S.11111.00 is infinity, S.11111.{01,10,11} NaN, largest finite 57344, smallest
 *        subnormal 2^-16.
 *
 * Arithmetic on them is done in float32 (every value of both formats is exact there, and so is
 * the sum or product of two) and rounded once to nearest even. Conversion to FP8 saturates, as
 * the specification's saturation mode and CUDA's __NV_SATFINITE do: a finite result beyond the
 * largest finite value, and an infinity, become the largest finite value of that sign; NaN stays
 * NaN (E4M3: S.1111.111; E5M2: the quiet S.11111.10).
 */
#ifndef COLL_KERNELS_FP8_H
#define COLL_KERNELS_FP8_H

#include <stdint.h>

#if defined(__CUDACC__)
#define COLLI_FP8_FN static __host__ __device__ __forceinline__
#else
#define COLLI_FP8_FN static inline
#endif

COLLI_FP8_FN float colli_fp8_bits_to_float(uint32_t u)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.u = u;
    return c.f;
}

COLLI_FP8_FN uint32_t colli_fp8_float_to_bits(float f)
{
    union {
        uint32_t u;
        float f;
    } c;
    c.f = f;
    return c.u;
}

/* FP8 with `bias`, `mbits` stored mantissa bits -> binary32, exact. nan_min: the smallest
 * magnitude that is NaN; inf: the magnitude of infinity (0 when there is none). */
COLLI_FP8_FN float colli_fp8_decode(uint8_t b, uint32_t bias, uint32_t mbits, uint32_t nan_min,
                                    uint32_t inf)
{
    uint32_t sign = (uint32_t)(b & 0x80u) << 24;
    uint32_t mag = b & 0x7fu;
    uint32_t normal = (mag << (23u - mbits)) + ((127u - bias) << 23);
    /* subnormal: mag * 2^(1 - bias - mbits), an exact normal float32 (or zero) */
    uint32_t sub =
        colli_fp8_float_to_bits((float)mag) - (mag != 0u ? (bias + mbits - 1u) << 23 : 0u);
    uint32_t r = mag >= nan_min              ? 0x7fc00000u
                 : (inf != 0u && mag == inf) ? 0x7f800000u
                 : mag < (1u << mbits)       ? sub
                                             : normal;
    return colli_fp8_bits_to_float(sign | r);
}

/* binary32 -> FP8, round to nearest even, saturating (see above). maxcode: the magnitude of the
 * largest finite value; nan: the magnitude of the NaN produced. */
COLLI_FP8_FN uint8_t colli_fp8_encode(float f, uint32_t bias, uint32_t mbits, uint32_t maxcode,
                                      uint32_t nan)
{
    uint32_t w = colli_fp8_float_to_bits(f);
    uint32_t sign = (w >> 24) & 0x80u;
    uint32_t a = w & 0x7fffffffu;
    uint32_t drop = 23u - mbits;
    /* normal result: rebias the exponent, round the dropped bits to nearest even; a carry moves
     * into the exponent, as it should */
    uint32_t minnormal = (127u - bias + 1u) << 23;
    uint32_t normal =
        a >= minnormal
            ? (a - ((127u - bias) << 23) + ((1u << (drop - 1u)) - 1u) + ((a >> drop) & 1u)) >> drop
            : 0u;
    /* subnormal result: the significand (hidden bit set) shifted right by
     * s = 151 - bias - mbits - exponent >= drop + 1, rounded to nearest even */
    uint32_t e = a >> 23;
    uint32_t s = 151u - bias - mbits - e; /* wraps for large exponents; only used below min */
    s = s > 31u ? 31u : (s < drop + 1u ? drop + 1u : s);
    uint32_t m = (a & 0x007fffffu) | 0x00800000u;
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1u);
    uint32_t halfway = 1u << (s - 1u);
    uint32_t sub = q + (uint32_t)((rem > halfway) | ((rem == halfway) & (q & 1u)));
    uint32_t r = a >= minnormal ? normal : sub;
    r = r > maxcode ? maxcode : r; /* saturate, infinity included */
    r = a > 0x7f800000u ? nan : r;
    return (uint8_t)(sign | r);
}

COLLI_FP8_FN float colli_e4m3_to_float(uint8_t b)
{
    return colli_fp8_decode(b, 7u, 3u, 0x7fu, 0u);
}

COLLI_FP8_FN uint8_t colli_float_to_e4m3(float f)
{
    return colli_fp8_encode(f, 7u, 3u, 0x7eu, 0x7fu);
}

COLLI_FP8_FN float colli_e5m2_to_float(uint8_t b)
{
    return colli_fp8_decode(b, 15u, 2u, 0x7du, 0x7cu);
}

COLLI_FP8_FN uint8_t colli_float_to_e5m2(float f)
{
    return colli_fp8_encode(f, 15u, 2u, 0x7bu, 0x7eu);
}

/* a < b on the values (min/max): sign-magnitude keys, -0 == +0, a NaN compares false. nan_min:
 * the smallest NaN magnitude of the format. The result of min/max is one input, bit for bit. */
COLLI_FP8_FN int colli_fp8_less(uint8_t p, uint8_t q, uint32_t nan_min)
{
    int32_t mp = p & 0x7f, mq = q & 0x7f;
    int32_t kp = (p & 0x80) ? -mp : mp, kq = (q & 0x80) ? -mq : mq;
    return (kp < kq) & ((uint32_t)mp < nan_min) & ((uint32_t)mq < nan_min);
}

#endif
