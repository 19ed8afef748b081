/*
 * Every CPU reduction kernel, written once and instantiated per instruction set: the including
 * file is compiled with that ISA's flags, defines COLLI_TABLE_NAME and COLLI_ISA_NAME, and, where
 * AVX2 and F16C may be used, COLLI_BODY_AVX2. No include guard: each including file gets its own
 * copy.
 *
 * Loops are plain C that GCC vectorises at -O3. Pointers may have any alignment (the *_u types
 * below have alignment 1, so no access is undefined) and dst may equal a or b: GCC's runtime
 * alias check accepts exact aliasing and takes the vector path. Integer arithmetic is done in
 * the unsigned type so that it wraps without undefined behaviour; converting back to the signed
 * type is modulo 2^N in GCC.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "coll.h"
#include "fp8.h"
#include "reduce_cpu_internal.h"

#if !defined(COLLI_TABLE_NAME) || !defined(COLLI_ISA_NAME)
#error "define COLLI_TABLE_NAME and COLLI_ISA_NAME before including reduce_cpu_body.h"
#endif

typedef int8_t i8_u;
typedef uint8_t u8_u;
typedef int32_t i32_u __attribute__((aligned(1)));
typedef uint32_t u32_u __attribute__((aligned(1)));
typedef int64_t i64_u __attribute__((aligned(1)));
typedef uint64_t u64_u __attribute__((aligned(1)));
typedef uint16_t f16_u __attribute__((aligned(1)));
typedef uint16_t bf16_u __attribute__((aligned(1)));
typedef float f32_u __attribute__((aligned(1)));
typedef double f64_u __attribute__((aligned(1)));
typedef uint8_t e4m3_u;
typedef uint8_t e5m2_u;

/* ---- integers: T element type, U unsigned type for wrapping arithmetic ---- */
#define INT_BINOPS(tn, T, U)                                                                       \
    static void sum_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = (T)((U)x[i] + (U)y[i]);                                                         \
    }                                                                                              \
    static void prod_##tn(void *dst, const void *a, const void *b, size_t n)                       \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = (T)((U)x[i] * (U)y[i]);                                                         \
    }                                                                                              \
    static void min_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++) {                                                           \
            T p = x[i], q = y[i];                                                                  \
            d[i] = p < q ? p : q;                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void max_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++) {                                                           \
            T p = x[i], q = y[i];                                                                  \
            d[i] = p > q ? p : q;                                                                  \
        }                                                                                          \
    }

/* Division by a power of two is a shift (rounded toward zero for negative values: add d-1 first);
 * anything else is a C division in the 64-bit type W, exact for every divisor <= UINT32_MAX. */
#define SIGNED_POW2(s)   (((s) + (((s) >> 63) & bias)) >> k)
#define UNSIGNED_POW2(s) ((s) >> k)

#define INT_DIVS(tn, T, U, W, POW2)                                                                \
    static void reduce_div_##tn(void *dst, const void *a, const void *b, size_t n,                 \
                                uint32_t divisor)                                                  \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        const W wd = (W)divisor, bias = (W)(divisor - 1u);                                         \
        const unsigned k = (unsigned)__builtin_ctz(divisor);                                       \
        (void)bias;                                                                                \
        if ((divisor & (divisor - 1u)) == 0) {                                                     \
            for (size_t i = 0; i < n; i++) {                                                       \
                W s = (W)(T)((U)x[i] + (U)y[i]);                                                   \
                d[i] = (T)POW2(s);                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            for (size_t i = 0; i < n; i++) {                                                       \
                W s = (W)(T)((U)x[i] + (U)y[i]);                                                   \
                d[i] = (T)(s / wd);                                                                \
            }                                                                                      \
        }                                                                                          \
    }                                                                                              \
    static void div_##tn(void *dst, const void *src, size_t n, uint32_t divisor)                   \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = src;                                                                     \
        const W wd = (W)divisor, bias = (W)(divisor - 1u);                                         \
        const unsigned k = (unsigned)__builtin_ctz(divisor);                                       \
        (void)bias;                                                                                \
        if ((divisor & (divisor - 1u)) == 0) {                                                     \
            for (size_t i = 0; i < n; i++) {                                                       \
                W s = (W)x[i];                                                                     \
                d[i] = (T)POW2(s);                                                                 \
            }                                                                                      \
        } else {                                                                                   \
            for (size_t i = 0; i < n; i++) {                                                       \
                W s = (W)x[i];                                                                     \
                d[i] = (T)(s / wd);                                                                \
            }                                                                                      \
        }                                                                                          \
    }

INT_BINOPS(i8, int8_t, unsigned)
INT_BINOPS(u8, uint8_t, unsigned)
INT_BINOPS(i32, int32_t, uint32_t)
INT_BINOPS(u32, uint32_t, uint32_t)
INT_BINOPS(i64, int64_t, uint64_t)
INT_BINOPS(u64, uint64_t, uint64_t)
INT_DIVS(i8, int8_t, unsigned, int64_t, SIGNED_POW2)
INT_DIVS(u8, uint8_t, unsigned, uint64_t, UNSIGNED_POW2)
INT_DIVS(i32, int32_t, uint32_t, int64_t, SIGNED_POW2)
INT_DIVS(u32, uint32_t, uint32_t, uint64_t, UNSIGNED_POW2)
INT_DIVS(i64, int64_t, uint64_t, int64_t, SIGNED_POW2)
INT_DIVS(u64, uint64_t, uint64_t, uint64_t, UNSIGNED_POW2)

/* ---- float32 / float64: IEEE arithmetic in the type ---- */
#define FLOAT_KERNELS(tn, T)                                                                       \
    static void sum_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = x[i] + y[i];                                                                    \
    }                                                                                              \
    static void prod_##tn(void *dst, const void *a, const void *b, size_t n)                       \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = x[i] * y[i];                                                                    \
    }                                                                                              \
    static void min_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++) {                                                           \
            T p = x[i], q = y[i];                                                                  \
            d[i] = p < q ? p : q;                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void max_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++) {                                                           \
            T p = x[i], q = y[i];                                                                  \
            d[i] = p > q ? p : q;                                                                  \
        }                                                                                          \
    }                                                                                              \
    static void reduce_div_##tn(void *dst, const void *a, const void *b, size_t n,                 \
                                uint32_t divisor)                                                  \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        const T td = (T)divisor;                                                                   \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = (x[i] + y[i]) / td;                                                             \
    }                                                                                              \
    static void div_##tn(void *dst, const void *src, size_t n, uint32_t divisor)                   \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = src;                                                                     \
        const T td = (T)divisor;                                                                   \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = x[i] / td;                                                                      \
    }

FLOAT_KERNELS(f32, float)
FLOAT_KERNELS(f64, double)

/* ---- float16 / bfloat16 ----
 * min/max never convert: the comparison a < b of the float values is done on sign-magnitude keys
 * (-0 and +0 share key 0, a NaN compares false), and the result is one input, bit for bit. */
#define HALF_MINMAX(tn, INF)                                                                       \
    static void min_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++) {                                                           \
            uint16_t p = x[i], q = y[i];                                                           \
            int32_t mp = p & 0x7fff, mq = q & 0x7fff;                                              \
            int32_t kp = (p & 0x8000) ? -mp : mp, kq = (q & 0x8000) ? -mq : mq;                    \
            int lt = (kp < kq) & (mp <= (INF)) & (mq <= (INF));                                    \
            d[i] = lt ? p : q;                                                                     \
        }                                                                                          \
    }                                                                                              \
    static void max_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++) {                                                           \
            uint16_t p = x[i], q = y[i];                                                           \
            int32_t mp = p & 0x7fff, mq = q & 0x7fff;                                              \
            int32_t kp = (p & 0x8000) ? -mp : mp, kq = (q & 0x8000) ? -mq : mq;                    \
            int gt = (kp > kq) & (mp <= (INF)) & (mq <= (INF));                                    \
            d[i] = gt ? p : q;                                                                     \
        }                                                                                          \
    }

/* Arithmetic: convert to float32, compute, round to nearest even once. */
#define HALF_ARITH(tn, TO_F, FROM_F)                                                               \
    static void sum_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = FROM_F(TO_F(x[i]) + TO_F(y[i]));                                                \
    }                                                                                              \
    static void prod_##tn(void *dst, const void *a, const void *b, size_t n)                       \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = FROM_F(TO_F(x[i]) * TO_F(y[i]));                                                \
    }                                                                                              \
    static void reduce_div_##tn(void *dst, const void *a, const void *b, size_t n,                 \
                                uint32_t divisor)                                                  \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        const float fd = (float)divisor;                                                           \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = FROM_F((TO_F(x[i]) + TO_F(y[i])) / fd);                                         \
    }                                                                                              \
    static void div_##tn(void *dst, const void *src, size_t n, uint32_t divisor)                   \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = src;                                                                     \
        const float fd = (float)divisor;                                                           \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = FROM_F(TO_F(x[i]) / fd);                                                        \
    }

HALF_MINMAX(f16, 0x7c00)
HALF_MINMAX(bf16, 0x7f80)

#if defined(COLLI_BODY_AVX2)
/* float16 arithmetic with the F16C conversion instructions, 8 elements at a time. vcvtph2ps and
 * vcvtps2ph (immediate round-to-nearest-even) give exactly the results of the software
 * conversions, NaNs included, independently of MXCSR; the unit test checks both paths. */
#include <immintrin.h>

#define F16C_LOAD(p) _mm256_cvtph_ps(_mm_loadu_si128((const void *)(p)))
#define F16C_STORE(p, v)                                                                           \
    _mm_storeu_si128((void *)(p), _mm256_cvtps_ph((v), _MM_FROUND_TO_NEAREST_INT))

static inline float f16c_load1(const f16_u *p)
{
    return _cvtsh_ss(*p);
}

static inline void f16c_store1(f16_u *p, float f)
{
    *p = (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

/* VEXPR combines __m256 va (and vb); SEXPR combines float fa (and fb). Two vectors per iteration
 * keep two conversions in flight; every load of an iteration comes before its stores, so dst may
 * equal a or b. */
#define F16C_LOOP2(VEXPR, SEXPR)                                                                   \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16) {                                                                 \
        __m256 va = F16C_LOAD(x + i), vb = F16C_LOAD(y + i);                                       \
        __m256 r0 = VEXPR;                                                                         \
        va = F16C_LOAD(x + i + 8);                                                                 \
        vb = F16C_LOAD(y + i + 8);                                                                 \
        __m256 r1 = VEXPR;                                                                         \
        F16C_STORE(d + i, r0);                                                                     \
        F16C_STORE(d + i + 8, r1);                                                                 \
    }                                                                                              \
    for (; i + 8 <= n; i += 8) {                                                                   \
        __m256 va = F16C_LOAD(x + i), vb = F16C_LOAD(y + i);                                       \
        F16C_STORE(d + i, VEXPR);                                                                  \
    }                                                                                              \
    for (; i < n; i++) {                                                                           \
        float fa = f16c_load1(x + i), fb = f16c_load1(y + i);                                      \
        f16c_store1(d + i, SEXPR);                                                                 \
    }

static void sum_f16(void *dst, const void *a, const void *b, size_t n)
{
    f16_u *d = dst;
    const f16_u *x = a, *y = b;
    F16C_LOOP2(_mm256_add_ps(va, vb), fa + fb)
}

static void prod_f16(void *dst, const void *a, const void *b, size_t n)
{
    f16_u *d = dst;
    const f16_u *x = a, *y = b;
    F16C_LOOP2(_mm256_mul_ps(va, vb), fa * fb)
}

static void reduce_div_f16(void *dst, const void *a, const void *b, size_t n, uint32_t divisor)
{
    f16_u *d = dst;
    const f16_u *x = a, *y = b;
    const float fd = (float)divisor;
    const __m256 vd = _mm256_set1_ps(fd);
    F16C_LOOP2(_mm256_div_ps(_mm256_add_ps(va, vb), vd), (fa + fb) / fd)
}

static void div_f16(void *dst, const void *src, size_t n, uint32_t divisor)
{
    f16_u *d = dst;
    const f16_u *x = src;
    const float fd = (float)divisor;
    const __m256 vd = _mm256_set1_ps(fd);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256 r0 = _mm256_div_ps(F16C_LOAD(x + i), vd);
        __m256 r1 = _mm256_div_ps(F16C_LOAD(x + i + 8), vd);
        F16C_STORE(d + i, r0);
        F16C_STORE(d + i + 8, r1);
    }
    for (; i + 8 <= n; i += 8)
        F16C_STORE(d + i, _mm256_div_ps(F16C_LOAD(x + i), vd));
    for (; i < n; i++)
        f16c_store1(d + i, f16c_load1(x + i) / fd);
}

/* bfloat16 arithmetic with AVX2, 16 elements at a time. Unpacking with zero puts each value in
 * the top half of a 32-bit lane (the float32 it stands for); unpack and pack both work within
 * 128-bit lanes, so packing the low and high results restores the element order. Rounding is the
 * integer formula of colli_soft_float_to_bf16; the scalar tail uses that function itself. */
static inline __m256i bf16_round8(__m256 f)
{
    const __m256i w = _mm256_castps_si256(f);
    const __m256i hi = _mm256_srli_epi32(w, 16);
    const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(w, _mm256_set1_epi32(0x7fff)), lsb);
    r = _mm256_srli_epi32(r, 16);
    const __m256i nan = _mm256_or_si256(hi, _mm256_set1_epi32(0x40));
    const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(w, _mm256_set1_epi32(0x7fffffff)),
                                              _mm256_set1_epi32(0x7f800000));
    return _mm256_blendv_epi8(r, nan, is_nan);
}

#define BF16_LO(v) _mm256_castsi256_ps(_mm256_unpacklo_epi16(_mm256_setzero_si256(), (v)))
#define BF16_HI(v) _mm256_castsi256_ps(_mm256_unpackhi_epi16(_mm256_setzero_si256(), (v)))

/* VEXPR combines __m256 va (and vb), SEXPR float fa (and fb), like F16C_LOOP2. */
#define BF16_LOOP2(VEXPR, SEXPR)                                                                   \
    size_t i = 0;                                                                                  \
    for (; i + 16 <= n; i += 16) {                                                                 \
        const __m256i x16 = _mm256_loadu_si256((const void *)(x + i));                             \
        const __m256i y16 = _mm256_loadu_si256((const void *)(y + i));                             \
        __m256 va = BF16_LO(x16), vb = BF16_LO(y16);                                               \
        const __m256i r0 = bf16_round8(VEXPR);                                                     \
        va = BF16_HI(x16);                                                                         \
        vb = BF16_HI(y16);                                                                         \
        const __m256i r1 = bf16_round8(VEXPR);                                                     \
        _mm256_storeu_si256((void *)(d + i), _mm256_packus_epi32(r0, r1));                         \
    }                                                                                              \
    for (; i < n; i++) {                                                                           \
        float fa = colli_bf16_expand(x[i]), fb = colli_bf16_expand(y[i]);                          \
        d[i] = colli_soft_float_to_bf16(SEXPR);                                                    \
    }

static void sum_bf16(void *dst, const void *a, const void *b, size_t n)
{
    bf16_u *d = dst;
    const bf16_u *x = a, *y = b;
    BF16_LOOP2(_mm256_add_ps(va, vb), fa + fb)
}

static void prod_bf16(void *dst, const void *a, const void *b, size_t n)
{
    bf16_u *d = dst;
    const bf16_u *x = a, *y = b;
    BF16_LOOP2(_mm256_mul_ps(va, vb), fa * fb)
}

static void reduce_div_bf16(void *dst, const void *a, const void *b, size_t n, uint32_t divisor)
{
    bf16_u *d = dst;
    const bf16_u *x = a, *y = b;
    const float fd = (float)divisor;
    const __m256 vd = _mm256_set1_ps(fd);
    BF16_LOOP2(_mm256_div_ps(_mm256_add_ps(va, vb), vd), (fa + fb) / fd)
}

static void div_bf16(void *dst, const void *src, size_t n, uint32_t divisor)
{
    bf16_u *d = dst;
    const bf16_u *x = src;
    const float fd = (float)divisor;
    const __m256 vd = _mm256_set1_ps(fd);
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256i x16 = _mm256_loadu_si256((const void *)(x + i));
        const __m256i r0 = bf16_round8(_mm256_div_ps(BF16_LO(x16), vd));
        const __m256i r1 = bf16_round8(_mm256_div_ps(BF16_HI(x16), vd));
        _mm256_storeu_si256((void *)(d + i), _mm256_packus_epi32(r0, r1));
    }
    for (; i < n; i++)
        d[i] = colli_soft_float_to_bf16(colli_bf16_expand(x[i]) / fd);
}
#else
HALF_ARITH(f16, colli_soft_half_to_float, colli_soft_float_to_half)
HALF_ARITH(bf16, colli_bf16_expand, colli_soft_float_to_bf16)
#endif

/* ---- float8 (OCP E4M3 and E5M2, kernels/fp8.h) ----
 * Arithmetic as for the half types (HALF_ARITH: float32, exact for one operation on two FP8
 * values, one rounding to nearest even, with saturation); min/max on sign-magnitude keys, the
 * result one input bit for bit. */
#define FP8_MINMAX(tn, NAN_MIN)                                                                    \
    static void min_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = colli_fp8_less(x[i], y[i], NAN_MIN) ? x[i] : y[i];                              \
    }                                                                                              \
    static void max_##tn(void *dst, const void *a, const void *b, size_t n)                        \
    {                                                                                              \
        tn##_u *d = dst;                                                                           \
        const tn##_u *x = a, *y = b;                                                               \
        for (size_t i = 0; i < n; i++)                                                             \
            d[i] = colli_fp8_less(y[i], x[i], NAN_MIN) ? x[i] : y[i];                              \
    }

FP8_MINMAX(e4m3, 0x7fu)
FP8_MINMAX(e5m2, 0x7du)
HALF_ARITH(e4m3, colli_e4m3_to_float, colli_float_to_e4m3)
HALF_ARITH(e5m2, colli_e5m2_to_float, colli_float_to_e5m2)

#define KERNEL_ROW(tn)                                                                             \
    {                                                                                              \
        sum_##tn, prod_##tn, min_##tn, max_##tn                                                    \
    }

const struct colli_kernel_table COLLI_TABLE_NAME = {
    .isa = COLLI_ISA_NAME,
    .reduce =
        {
            [COLL_INT8] = KERNEL_ROW(i8),
            [COLL_UINT8] = KERNEL_ROW(u8),
            [COLL_INT32] = KERNEL_ROW(i32),
            [COLL_UINT32] = KERNEL_ROW(u32),
            [COLL_INT64] = KERNEL_ROW(i64),
            [COLL_UINT64] = KERNEL_ROW(u64),
            [COLL_FLOAT16] = KERNEL_ROW(f16),
            [COLL_BFLOAT16] = KERNEL_ROW(bf16),
            [COLL_FLOAT32] = KERNEL_ROW(f32),
            [COLL_FLOAT64] = KERNEL_ROW(f64),
            [COLL_FLOAT8_E4M3] = KERNEL_ROW(e4m3),
            [COLL_FLOAT8_E5M2] = KERNEL_ROW(e5m2),
        },
    .reduce_div =
        {
            [COLL_INT8] = reduce_div_i8,
            [COLL_UINT8] = reduce_div_u8,
            [COLL_INT32] = reduce_div_i32,
            [COLL_UINT32] = reduce_div_u32,
            [COLL_INT64] = reduce_div_i64,
            [COLL_UINT64] = reduce_div_u64,
            [COLL_FLOAT16] = reduce_div_f16,
            [COLL_BFLOAT16] = reduce_div_bf16,
            [COLL_FLOAT32] = reduce_div_f32,
            [COLL_FLOAT64] = reduce_div_f64,
            [COLL_FLOAT8_E4M3] = reduce_div_e4m3,
            [COLL_FLOAT8_E5M2] = reduce_div_e5m2,
        },
    .div =
        {
            [COLL_INT8] = div_i8,
            [COLL_UINT8] = div_u8,
            [COLL_INT32] = div_i32,
            [COLL_UINT32] = div_u32,
            [COLL_INT64] = div_i64,
            [COLL_UINT64] = div_u64,
            [COLL_FLOAT16] = div_f16,
            [COLL_BFLOAT16] = div_bf16,
            [COLL_FLOAT32] = div_f32,
            [COLL_FLOAT64] = div_f64,
            [COLL_FLOAT8_E4M3] = div_e4m3,
            [COLL_FLOAT8_E5M2] = div_e5m2,
        },
};
