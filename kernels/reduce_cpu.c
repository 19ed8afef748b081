/*
 * CPU reduction kernels: entry points and the instruction-set dispatcher. The kernels themselves
 * are in reduce_cpu_body.h, compiled once per instruction set (reduce_cpu_generic.c,
 * reduce_cpu_avx2.c); the best table the CPU supports is chosen on first use.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "coll_kernels.h"
#include "fp8.h"
#include "reduce_cpu_internal.h"
#if defined(COLLI_KERNELS_HAVE_AVX2)
#include <cpuid.h>
#endif

/* The dispatch table in use: a process-wide, read-only choice made once (like an ifunc), replaced
 * only by colli_kernels_select_isa. */
static _Atomic(const struct colli_kernel_table *) active_table;

#if defined(COLLI_KERNELS_HAVE_AVX2)
/* AVX2 (which __builtin_cpu_supports checks with the OS's saving of the AVX registers) and F16C
 * (CPUID leaf 1, ECX bit 29: read directly, clang before 16 has no "f16c" for the builtin) */
static bool have_avx2_f16c(void)
{
    unsigned a = 0, b = 0, c = 0, d = 0;
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static const struct colli_kernel_table *best_table(void)
{
#if defined(COLLI_KERNELS_HAVE_AVX2)
    if (have_avx2_f16c())
        return &colli_kernels_avx2;
#endif
    return &colli_kernels_generic;
}

static const struct colli_kernel_table *kernels(void)
{
    const struct colli_kernel_table *t = atomic_load_explicit(&active_table, memory_order_acquire);
    if (t == NULL) {
        const struct colli_kernel_table *expected = NULL;
        t = best_table();
        /* a concurrent colli_kernels_select_isa wins over this default */
        if (!atomic_compare_exchange_strong(&active_table, &expected, t))
            t = expected;
    }
    return t;
}

int colli_kernels_select_isa(const char *name)
{
    const struct colli_kernel_table *t = NULL;

    if (name == NULL || strcmp(name, "auto") == 0) {
        t = best_table();
    } else if (strcmp(name, "generic") == 0 || strcmp(name, colli_kernels_generic.isa) == 0) {
        t = &colli_kernels_generic;
    }
#if defined(COLLI_KERNELS_HAVE_AVX2)
    else if (strcmp(name, colli_kernels_avx2.isa) == 0) {
        if (have_avx2_f16c())
            t = &colli_kernels_avx2;
    }
#endif
    if (t == NULL)
        return -1;
    atomic_store_explicit(&active_table, t, memory_order_release);
    return 0;
}

const char *colli_kernels_isa(void)
{
    return kernels()->isa;
}

static int valid_datatype(coll_datatype_t dt)
{
    return (unsigned)dt < (unsigned)COLL_NUM_DATATYPES;
}

void colli_reduce(void *dst, const void *a, const void *b, size_t count, coll_datatype_t dt,
                  coll_op_t op)
{
    if (count == 0 || !valid_datatype(dt) || (unsigned)op >= (unsigned)COLL_NUM_OPS)
        return;
    if (op == COLL_AVG)
        op = COLL_SUM;
    kernels()->reduce[dt][op](dst, a, b, count);
}

void colli_reduce_div(void *dst, const void *a, const void *b, size_t count, coll_datatype_t dt,
                      uint32_t divisor)
{
    if (count == 0 || !valid_datatype(dt))
        return;
    kernels()->reduce_div[dt](dst, a, b, count, divisor == 0 ? 1u : divisor);
}

void colli_div(void *dst, const void *src, size_t count, coll_datatype_t dt, uint32_t divisor)
{
    if (count == 0 || !valid_datatype(dt))
        return;
    kernels()->div[dt](dst, src, count, divisor == 0 ? 1u : divisor);
}

/* ---- dst[i] = scalar * src[i] (PreMulSum's first step) ---- */

#define SCALE_INT(T, U)                                                                            \
    do {                                                                                           \
        T k;                                                                                       \
        memcpy(&k, scalar, sizeof k);                                                              \
        for (size_t i = 0; i < count; i++) {                                                       \
            T x;                                                                                   \
            memcpy(&x, (const char *)src + i * sizeof x, sizeof x);                                \
            x = (T)((U)x * (U)k);                                                                  \
            memcpy((char *)dst + i * sizeof x, &x, sizeof x);                                      \
        }                                                                                          \
    } while (0)

/* T elements, computed in C (float for the half and float8 types, the type itself otherwise) */
#define SCALE_IN(T, C, TO, FROM)                                                                   \
    do {                                                                                           \
        T kb;                                                                                      \
        memcpy(&kb, scalar, sizeof kb);                                                            \
        const C k = TO(kb);                                                                        \
        for (size_t i = 0; i < count; i++) {                                                       \
            T x;                                                                                   \
            memcpy(&x, (const char *)src + i * sizeof x, sizeof x);                                \
            x = FROM(TO(x) * k);                                                                   \
            memcpy((char *)dst + i * sizeof x, &x, sizeof x);                                      \
        }                                                                                          \
    } while (0)
#define SAME(x) (x)

void colli_scale(void *dst, const void *src, size_t count, coll_datatype_t dt, const void *scalar)
{
    if (count == 0 || !valid_datatype(dt) || scalar == NULL)
        return;
    switch (dt) {
    case COLL_INT8:
        SCALE_INT(int8_t, unsigned);
        break;
    case COLL_UINT8:
        SCALE_INT(uint8_t, unsigned);
        break;
    case COLL_INT32:
        SCALE_INT(int32_t, uint32_t);
        break;
    case COLL_UINT32:
        SCALE_INT(uint32_t, uint32_t);
        break;
    case COLL_INT64:
        SCALE_INT(int64_t, uint64_t);
        break;
    case COLL_UINT64:
        SCALE_INT(uint64_t, uint64_t);
        break;
    case COLL_FLOAT16:
        SCALE_IN(uint16_t, float, colli_soft_half_to_float, colli_soft_float_to_half);
        break;
    case COLL_BFLOAT16:
        SCALE_IN(uint16_t, float, colli_bf16_expand, colli_soft_float_to_bf16);
        break;
    case COLL_FLOAT32:
        SCALE_IN(float, float, SAME, SAME);
        break;
    case COLL_FLOAT64:
        SCALE_IN(double, double, SAME, SAME);
        break;
    case COLL_FLOAT8_E4M3:
        SCALE_IN(uint8_t, float, colli_e4m3_to_float, colli_float_to_e4m3);
        break;
    case COLL_FLOAT8_E5M2:
        SCALE_IN(uint8_t, float, colli_e5m2_to_float, colli_float_to_e5m2);
        break;
    default:
        break;
    }
}

float colli_half_to_float(uint16_t h)
{
    return colli_soft_half_to_float(h);
}

uint16_t colli_float_to_half(float f)
{
    return colli_soft_float_to_half(f);
}

float colli_bf16_to_float(uint16_t b)
{
    return colli_soft_bf16_to_float(b);
}

uint16_t colli_float_to_bf16(float f)
{
    return colli_soft_float_to_bf16(f);
}

float colli_fp8_e4m3_to_float(uint8_t b)
{
    return colli_e4m3_to_float(b);
}

uint8_t colli_float_to_fp8_e4m3(float f)
{
    return colli_float_to_e4m3(f);
}

float colli_fp8_e5m2_to_float(uint8_t b)
{
    return colli_e5m2_to_float(b);
}

uint8_t colli_float_to_fp8_e5m2(float f)
{
    return colli_float_to_e5m2(f);
}
