/* The fake GPU's arithmetic and error strings (fake_gpu_math.c). */
#ifndef FAKE_GPU_MATH_H
#define FAKE_GPU_MATH_H

#include <stddef.h>
#include <stdint.h>

#include "coll_kernels.h"

/* Bytes of one element of dt, 0 for no datatype. */
size_t fake_elt_size(coll_datatype_t dt);
/* dst = srcs[0] OP ... OP srcs[nsrcs - 1] over count elements, as reduce_cuda.h computes it
 * (dt a coll_datatype_t, op a coll_op_t; COLL_AVG divides by divisor > 0 at the last step);
 * dst may equal an input. */
void fake_run_reduce(void *dst, const void *const *srcs, int nsrcs, size_t count, int dt, int op,
                     uint32_t divisor);
/* The ops of a colli_gpu_list_t (gpu_plugin.h) in dt and op, read now: as the list kernel. */
void fake_run_list(const void *list, int dt, int op);
/* "fakeErrorInvalidValue: invalid argument" for the fake's error codes (fake_gpu.c's top). */
const char *fake_error_string(int err);

#endif
