/*
 * CPU reduction kernels: the reference semantics that the CUDA kernels match.
 * Internal to kcoll (not installed). Every function accepts count == 0 and dst aliasing a or b
 * exactly (element for element); partial overlap is not allowed.
 * Pointers need not be aligned, not even to the element size. A divisor of 0 is treated as 1; an
 * invalid datatype or op does nothing (callers validate). min/max return one of the two inputs
 * bit for bit; a NaN produced by arithmetic is a quiet NaN whose sign and payload are unspecified.
 * Float arithmetic assumes the default floating-point environment (no flush-to-zero).
 */
#ifndef COLL_KERNELS_H
#define COLL_KERNELS_H

#include <stddef.h>
#include <stdint.h>
#include "coll.h"

/* dst[i] = a[i] OP b[i]. COLL_AVG reduces like COLL_SUM (partial sums); the final step divides
 * with colli_reduce_div. float16/bfloat16/float8: computed in float32, rounded to nearest even.
 * Integer sum/prod wrap around. min/max of floats: (a < b ? a : b) / (a > b ? a : b). */
void colli_reduce(void *dst, const void *a, const void *b, size_t count, coll_datatype_t dt,
                  coll_op_t op);

/* dst[i] = (a[i] + b[i]) / divisor: the last step of COLL_AVG. Integers: wrapped sum, then C
 * division (truncation). Floats: sum and quotient in the type (float32 for the half types, one
 * rounding to half at the end). */
void colli_reduce_div(void *dst, const void *a, const void *b, size_t count, coll_datatype_t dt,
                      uint32_t divisor);

/* dst[i] = src[i] / divisor (COLL_AVG on a single rank). dst may equal src. */
void colli_div(void *dst, const void *src, size_t count, coll_datatype_t dt, uint32_t divisor);

/* dst[i] = scalar * src[i], scalar one element of dt (the first step of a PreMulSum): integers
 * wrap, float16/bfloat16/float8 multiply in float32 and round once to nearest even, float32 and
 * float64 in the type. dst may equal src. */
void colli_scale(void *dst, const void *src, size_t count, coll_datatype_t dt, const void *scalar);

/* Conversions with IEEE round-to-nearest-even; NaN stays NaN, overflow goes to infinity. */
float colli_half_to_float(uint16_t h);
uint16_t colli_float_to_half(float f);
float colli_bf16_to_float(uint16_t b);
uint16_t colli_float_to_bf16(float f);
/* The OCP float8 formats (fp8.h): exact to float32; from float32 to nearest even, saturating at
 * the largest finite value (infinities too), NaN kept. */
float colli_fp8_e4m3_to_float(uint8_t b);
uint8_t colli_float_to_fp8_e4m3(float f);
float colli_fp8_e5m2_to_float(uint8_t b);
uint8_t colli_float_to_fp8_e5m2(float f);

/* Name of the instruction set the dispatcher chose ("avx2", "sse2", ...), for logs. */
const char *colli_kernels_isa(void);

/* Use the kernels of one instruction set: "generic" (the baseline build, named "sse2" on x86-64),
 * "avx2" (AVX2 + F16C), or NULL / "auto" for the best the CPU supports (the default). Returns 0,
 * or -1 when that set is not built in or the CPU lacks it. For tests and benchmarks: switch only
 * while no kernel runs. */
int colli_kernels_select_isa(const char *name);

#endif
