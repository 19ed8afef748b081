/*
 * float16 reference conversions for tests, independent of kcoll's kernels, rounding to nearest
 * even: the compiler's IEEE _Float16 (GCC 12, clang 15 and later), or on x86 with clang 14,
 * which has no _Float16 there, the CPU's F16C instructions.
 */
#ifndef KCOLL_TEST_HALF_REF_H
#define KCOLL_TEST_HALF_REF_H

#include <stdint.h>
#include <string.h>

#if defined(__clang__) && __clang_major__ < 15 && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>

__attribute__((target("f16c"))) static inline float ref_h2f(uint16_t b)
{
    return _cvtsh_ss(b);
}

__attribute__((target("f16c"))) static inline uint16_t ref_f2h(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}
#else
static inline float ref_h2f(uint16_t b)
{
    _Float16 h;
    memcpy(&h, &b, 2);
    return (float)h;
}

static inline uint16_t ref_f2h(float f)
{
    _Float16 h = (_Float16)f;
    uint16_t b;
    memcpy(&b, &h, 2);
    return b;
}
#endif

#endif /* KCOLL_TEST_HALF_REF_H */
