/*
 * Launch planning for the CUDA reduction and copy kernels (kernels/cuda/reduce.cu). Plain C with
 * no CUDA headers, so that it builds and is unit-tested everywhere (tests/unit/test_cuda_plan.c).
 *
 * A launch covers count elements in three parts: a head of single elements until every pointer
 * is aligned to the vector width, a body of whole vectors, and a tail of single elements. The
 * vector width is the widest of 16, 8 and 4 bytes (never less than an element) to which every
 * pointer can be brought by skipping the same number of elements, so that all of them share the
 * same offset modulo the width. When none fits (pointers misaligned against each other), every
 * element is a single: with element-sized accesses when every pointer is aligned to the element
 * size, byte by byte otherwise.
 */
#ifndef COLL_KERNELS_CUDA_PLAN_H
#define COLL_KERNELS_CUDA_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLLI_CUDA_BLOCK         256   /* threads per block of a large launch */
#define COLLI_CUDA_BLOCKS_PER_SM 4     /* resident blocks per SM (kernels' __launch_bounds__) */
#define COLLI_CUDA_UNROLL        2     /* vectors per thread per loop iteration */
#define COLLI_CUDA_MAX_GRID      65535 /* blocks; far above any SM count x BLOCKS_PER_SM */
#define COLLI_CUDA_MAX_VEC       16    /* bytes of the widest load and store */

typedef struct colli_cuda_plan {
    size_t head;        /* elements [0, head): singles */
    size_t body;        /* elements [head, head + body): whole vectors; a multiple of vec_elems */
    size_t tail;        /* elements [head + body, count): singles */
    unsigned elem_size; /* bytes per element: 1, 2, 4 or 8 */
    unsigned vec_bytes; /* 16, 8 or 4; 0 when there is no body */
    unsigned vec_elems; /* vec_bytes / elem_size; 0 when there is no body */
    unsigned elem_aligned; /* 1: singles are element-sized accesses; 0: bytes (misaligned) */
    unsigned block;        /* threads per block: a multiple of 32, at most COLLI_CUDA_BLOCK */
    unsigned grid;         /* blocks, at most sm_count * BLOCKS_PER_SM; 0 only when count is 0 */
} colli_cuda_plan_t;

#ifdef __CUDACC__
#define COLLI_PLAN_FN static inline __host__ __device__
#else
#define COLLI_PLAN_FN static inline
#endif

/* The head that aligns every address to vec bytes, or -1 when no common head exists: the
 * addresses differ modulo vec, or share an offset that is not a whole number of elements. */
COLLI_PLAN_FN long long colli_cuda_head_for(const uintptr_t *addrs, int naddrs, size_t elem_size,
                                            unsigned vec)
{
    uintptr_t off = addrs[0] % vec;
    for (int i = 1; i < naddrs; i++)
        if (addrs[i] % vec != off)
            return -1;
    if (off % elem_size != 0)
        return -1;
    return (long long)(((vec - off) % vec) / elem_size);
}

/* The parts of a plan (head, body, tail, elem_size, vec_bytes, vec_elems, elem_aligned; not
 * block and grid) for count elements of elem_size (1, 2, 4 or 8) bytes at addrs: on the host for
 * a launch (colli_cuda_plan), on the device where the addresses are known only when the kernel
 * runs (a list kernel, reduce.cu). */
COLLI_PLAN_FN void colli_cuda_plan_parts(colli_cuda_plan_t *p, size_t count, size_t elem_size,
                                         const uintptr_t *addrs, int naddrs)
{
    p->elem_size = (unsigned)elem_size;
    p->elem_aligned = 1;
    p->vec_bytes = p->vec_elems = 0;
    p->body = 0;
    for (int i = 0; i < naddrs; i++)
        if (addrs[i] % elem_size != 0)
            p->elem_aligned = 0;
    p->head = count;
    for (unsigned vec = 16; vec >= 4 && p->elem_aligned && vec >= elem_size; vec /= 2) {
        long long head = colli_cuda_head_for(addrs, naddrs, elem_size, vec);
        if (head < 0 || (size_t)head >= count)
            continue;
        size_t vec_elems = vec / elem_size;
        size_t body = (count - (size_t)head) / vec_elems * vec_elems;
        if (body == 0)
            continue;
        p->vec_bytes = vec;
        p->vec_elems = (unsigned)vec_elems;
        p->head = (size_t)head;
        p->body = body;
        break;
    }
    p->tail = count - p->head - p->body;
}

/* Plans the launch for count elements of elem_size bytes at the naddrs device addresses addrs
 * (every input and the output) on a device with sm_count multiprocessors. Returns 0, or -1 when
 * elem_size is not 1, 2, 4 or 8, naddrs < 1, addrs is NULL, sm_count < 1, or count * elem_size
 * overflows; *plan is written only on success. count == 0 gives grid == block == 0 (no launch). */
int colli_cuda_plan(colli_cuda_plan_t *plan, size_t count, size_t elem_size, const uintptr_t *addrs,
                    int naddrs, int sm_count);

#ifdef __cplusplus
}
#endif

#endif
