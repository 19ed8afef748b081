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
