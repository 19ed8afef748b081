/* The fuzz targets never reduce data: these stand in for every function of coll_kernels.h so that
 * the fuzz build does not depend on the kernels' ISA-specific compilation (the header keeps the
 * signatures honest; a new kernel function needs a stub here). Reaching one is a bug in a
 * target. */
#include <stdlib.h>

#include "coll_kernels.h"

void colli_reduce(void *dst, const void *a, const void *b, size_t count, coll_datatype_t dt,
                  coll_op_t op)
{
    abort();
}

void colli_reduce_div(void *dst, const void *a, const void *b, size_t count, coll_datatype_t dt,
                      uint32_t divisor)
{
    abort();
}

void colli_div(void *dst, const void *src, size_t count, coll_datatype_t dt, uint32_t divisor)
{
    abort();
}

float colli_half_to_float(uint16_t h)
{
    abort();
}

uint16_t colli_float_to_half(float f)
{
    abort();
}

float colli_bf16_to_float(uint16_t b)
{
    abort();
}

uint16_t colli_float_to_bf16(float f)
{
    abort();
}

const char *colli_kernels_isa(void)
{
    return "fuzz-stub";
}

int colli_kernels_select_isa(const char *name)
{
    return -1;
}
