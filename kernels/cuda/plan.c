/* Launch planning for the CUDA kernels; see plan.h. */
#include "plan.h"

int colli_cuda_plan(colli_cuda_plan_t *plan, size_t count, size_t elem_size, const uintptr_t *addrs,
                    int naddrs, int sm_count)
{
    colli_cuda_plan_t p = {0};

    if (plan == NULL || addrs == NULL || naddrs < 1 || sm_count < 1)
        return -1;
    if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8)
        return -1;
    if (count > SIZE_MAX / elem_size)
        return -1;

    colli_cuda_plan_parts(&p, count, elem_size, addrs, naddrs);

    if (count > 0) {
        /* one thread per COLLI_CUDA_UNROLL vectors, and at least one per single */
        size_t vectors = p.vec_elems ? p.body / p.vec_elems : 0;
        size_t threads = (vectors + COLLI_CUDA_UNROLL - 1) / COLLI_CUDA_UNROLL;
        if (threads < p.head + p.tail)
            threads = p.head + p.tail;
        p.block =
            threads >= COLLI_CUDA_BLOCK ? COLLI_CUDA_BLOCK : (unsigned)(threads + 31) / 32 * 32;
        size_t blocks = (threads + p.block - 1) / p.block;
        size_t max_grid = (size_t)sm_count * COLLI_CUDA_BLOCKS_PER_SM;
        if (max_grid > COLLI_CUDA_MAX_GRID)
            max_grid = COLLI_CUDA_MAX_GRID;
        p.grid = (unsigned)(blocks < max_grid ? blocks : max_grid);
    }
    *plan = p;
    return 0;
}
