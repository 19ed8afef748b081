/* The fake GPU's arithmetic (fake_gpu.c): element sizes, the reduce and list kernels' semantics
 * over the CPU reference kernels, and the error strings. */
#include <stdbool.h>
#include <string.h>

#include "fake_gpu_math.h"
#include "gpu_plugin.h"

/* Bytes of one element (the plugin is loaded into programs that do not export coll_*, such as
 * kcoll's libnccl.so.2). */
size_t fake_elt_size(coll_datatype_t dt)
{
    static const size_t sz[COLL_NUM_DATATYPES] = {
        [COLL_INT8] = 1,    [COLL_UINT8] = 1,   [COLL_INT32] = 4,       [COLL_UINT32] = 4,
        [COLL_INT64] = 8,   [COLL_UINT64] = 8,  [COLL_FLOAT16] = 2,     [COLL_BFLOAT16] = 2,
        [COLL_FLOAT32] = 4, [COLL_FLOAT64] = 8, [COLL_FLOAT8_E4M3] = 1, [COLL_FLOAT8_E5M2] = 1};
    return (int)dt >= 0 && dt < COLL_NUM_DATATYPES ? sz[dt] : 0;
}

/* What the CUDA kernels compute (reduce_cuda.h), with the CPU reference: input by input, the
 * division of COLL_AVG at the last step, block by block through a buffer of its own so that dst
 * may equal an input. */
void fake_run_reduce(void *dst, const void *const *srcs, int nsrcs, size_t count, int dt_, int op_,
                     uint32_t divisor)
{
    enum { BLOCK = 4096 };
    uint64_t tmp[BLOCK]; /* BLOCK elements of at most 8 bytes */
    const coll_datatype_t dt = (coll_datatype_t)dt_;
    const coll_op_t op = (coll_op_t)op_;
    const size_t e = fake_elt_size(dt);
    const bool div = op == COLL_AVG && divisor > 0;
    for (size_t b = 0; b < count; b += BLOCK) {
        const size_t m = count - b < BLOCK ? count - b : BLOCK;
        const char *s0 = (const char *)srcs[0] + b * e;
        if (nsrcs == 1 && div)
            colli_div(tmp, s0, m, dt, divisor);
        else if (nsrcs == 1)
            memcpy(tmp, s0, m * e);
        for (int i = 1; i < nsrcs; i++) {
            const void *a = i == 1 ? (const void *)s0 : (const void *)tmp;
            const char *x = (const char *)srcs[i] + b * e;
            if (div && i == nsrcs - 1)
                colli_reduce_div(tmp, a, x, m, dt, divisor);
            else
                colli_reduce(tmp, a, x, m, dt, op);
        }
        memcpy((char *)dst + b * e, tmp, m * e);
    }
}

const char *fake_error_string(int err)
{
    switch (err) {
    case 0:
        return "fakeSuccess: no error";
    case 1:
        return "fakeErrorInvalidValue: invalid argument";
    case 2:
        return "fakeErrorMemoryAllocation: out of memory";
    case 3:
        return "fakeErrorNoDevice: no GPU";
    case 209:
        return "fakeErrorNoKernelImageForDevice: no kernel image is available for execution on "
               "the device";
    case 801:
        return "fakeErrorNotSupported: operation not supported";
    case 700:
        return "fakeErrorIllegalAddress: an illegal memory access was encountered";
    case 900:
        return "fakeErrorStreamCaptureUnsupported: operation not permitted when stream is "
               "capturing";
    case 901:
        return "fakeErrorStreamCaptureInvalidated: operation failed due to a previous error "
               "during capture";
    default:
        return "fakeErrorUnknown: unknown error";
    }
}

void fake_run_list(const void *list, int dt, int op)
{
    const colli_gpu_list_t *l = list;
    const uint32_t n = l->n < COLLI_GPU_LIST_OPS ? l->n : COLLI_GPU_LIST_OPS;
    for (uint32_t i = 0; i < n; i++) {
        const colli_gpu_list_op_t *o = &l->ops[i];
        if (o->nsrcs < 0 || o->nsrcs > COLLI_GPU_MAX_SRCS || o->count == 0 || o->dst == NULL)
            continue;
        if (o->nsrcs == 0)
            memmove(o->dst, o->srcs[0], (size_t)o->count);
        else
            fake_run_reduce(o->dst, o->srcs, o->nsrcs, (size_t)o->count, dt, op,
                            op == COLL_AVG ? o->divisor : 0);
    }
}
