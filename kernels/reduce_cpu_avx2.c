/* Kernels for x86-64 with AVX2 and F16C. This file alone is compiled with -mavx2 -mf16c
 * (kernels/CMakeLists.txt); reduce_cpu.c calls it only after checking the CPU. */
#if !defined(__AVX2__) || !defined(__F16C__)
#error "reduce_cpu_avx2.c must be compiled with -mavx2 -mf16c"
#endif
#define COLLI_ISA_NAME   "avx2"
#define COLLI_TABLE_NAME colli_kernels_avx2
#define COLLI_BODY_AVX2  1
#include "reduce_cpu_body.h"
