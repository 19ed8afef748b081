/*
 * CUDA reduction and copy kernels (kernels/cuda/reduce.cu) behind a plain C API: no CUDA header
 * is needed to call them; a stream is a cudaStream_t passed as void * (NULL: the legacy default
 * stream). Internal to kcoll (not installed); built only when CMake finds nvcc (COLL_HAVE_CUDA).
 *
 * Semantics are those of the CPU reference (coll_kernels.h) applied input by input:
 *   dst = (((src[0] OP src[1]) OP src[2]) ... OP src[n-1])
 * every step computed and rounded exactly as colli_reduce computes it (float16/bfloat16 in
 * float32, rounded to nearest even after each step), so the result equals n - 1 chained
 * colli_reduce calls bit for bit; NaNs produced by arithmetic are quiet NaNs with unspecified
 * sign and payload on both sides. COLL_AVG sums; with divisor > 0 its last step divides by
 * divisor exactly as colli_reduce_div does (colli_div for a single input), with divisor == 0 it
 * is a plain sum (the partial sums of a multi-step average). See docs/gpu.md.
 *
 * Pointers are device pointers (or managed/mapped memory) of any alignment, not even to the
 * element size (misaligned ones are slower). dst may equal an input exactly; partial overlap is
 * not allowed. Every call only enqueues work on the stream and returns; the return value is a
 * cudaError_t: 0 when the kernel was launched (or count is 0), cudaErrorInvalidValue (1) for
 * invalid arguments, else the launch error.
 */
#ifndef COLL_KERNELS_REDUCE_CUDA_H
#define COLL_KERNELS_REDUCE_CUDA_H

#include <stddef.h>
#include <stdint.h>
#include "coll.h"

#ifdef __cplusplus
extern "C" {
#endif

#define COLLI_CUDA_MAX_SRCS 8 /* inputs of one colli_cuda_reduce call */

/* Multiprocessor count of a device, for the launch grid: query once per device. Returns a
 * cudaError_t (0 on success); *sm_count is written only on success. */
int colli_cuda_sm_count(int device, int *sm_count);

/* dst[i] = src[0][i] OP ... OP src[nsrcs-1][i] for i < count, 1 <= nsrcs <= COLLI_CUDA_MAX_SRCS,
 * on stream. A single input is copied (COLL_AVG with divisor > 0: divided). sm_count comes from
 * colli_cuda_sm_count. */
int colli_cuda_reduce(void *dst, const void *const *srcs, int nsrcs, size_t count,
                      coll_datatype_t dt, coll_op_t op, uint32_t divisor, int sm_count,
                      void *stream);

/* dst[0..bytes) = src[0..bytes) on stream, by the same kernels (16-byte accesses when dst and src
 * share their offset modulo 16). dst and src must not overlap unless equal. */
int colli_cuda_copy(void *dst, const void *src, size_t bytes, int sm_count, void *stream);

/* dst[i] = src[i] * scalar for i < count on stream (PreMulSum's first step), computed as
 * colli_scale (coll_kernels.h) does, bit for bit; scalar is one element of dt in host memory,
 * read at the call, or with on_device in device memory, read by the kernel when it runs
 * (ncclScalarDevice: in stream order, after the work that writes it). dst may equal src.
 * sm_count as for colli_cuda_reduce. */
int colli_cuda_scale(void *dst, const void *src, size_t count, coll_datatype_t dt,
                     const void *scalar, int on_device, int sm_count, void *stream);

/* A list of reductions and copies read by the kernel when it runs (device memory): for work
 * whose pointers are known only after it was enqueued. The layout of the GPU plugin's
 * colli_gpu_list_t (libcoll/src/device/gpu_plugin.h). */
#define COLLI_CUDA_LIST_OPS 8
typedef struct colli_cuda_list_op {
    void *dst;
    const void *srcs[COLLI_CUDA_MAX_SRCS];
    uint64_t count;   /* elements of dt; bytes for a copy */
    int32_t nsrcs;    /* 1..COLLI_CUDA_MAX_SRCS; 0: a copy of count bytes of srcs[0] */
    uint32_t divisor; /* COLL_AVG, as for colli_cuda_reduce */
} colli_cuda_list_op_t;
typedef struct colli_cuda_list {
    uint32_t n;
    uint32_t pad;
    colli_cuda_list_op_t ops[COLLI_CUDA_LIST_OPS];
} colli_cuda_list_t;

/* Run ops [0, n) of *list on stream, in no set order, each as colli_cuda_reduce (or
 * colli_cuda_copy) would; the list is read when the kernel runs. Ops with a bad nsrcs or count
 * 0 are skipped. */
int colli_cuda_reduce_list(const colli_cuda_list_t *list, coll_datatype_t dt, coll_op_t op,
                           int sm_count, void *stream);

/* The kernels behind colli_cuda_reduce, colli_cuda_copy, colli_cuda_reduce_list and
 * colli_cuda_scale (their host-side
 * symbols, as cudaLaunchKernel takes them), at most max of them into syms; the number written. For
 * loading them before their first launch (CUDA loads kernels lazily). */
#define COLLI_CUDA_NUM_KERNELS (COLL_NUM_DATATYPES * (2 * COLL_NUM_OPS + 1))
size_t colli_cuda_kernel_symbols(const void **syms, size_t max);

/* Name ("cudaErrorInvalidValue") and description ("invalid argument") of a cudaError_t. */
const char *colli_cuda_error_name(int err);
const char *colli_cuda_error_string(int err);

#ifdef __cplusplus
}
#endif

#endif
