/* Kernels for the baseline instruction set of the target (SSE2 on x86-64). */
#if defined(__x86_64__) || defined(__i386__)
#define COLLI_ISA_NAME "sse2"
#else
#define COLLI_ISA_NAME "generic"
#endif
#define COLLI_TABLE_NAME colli_kernels_generic
#include "reduce_cpu_body.h"
