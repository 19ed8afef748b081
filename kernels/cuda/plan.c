/* Launch planning for the CUDA kernels; see plan.h. */
#include "plan.h"

/* The head that aligns every address to vec bytes, or -1 when no common head exists: the
 * addresses differ modulo vec, or share an offset that is not a whole number of elements. */
static long long head_for(const uintptr_t *addrs, int naddrs, size_t elem_size, unsigned vec)
{
    uintptr_t off = addrs[0] % vec;
    for (int i = 1; i < naddrs; i++)
        if (addrs[i] % vec != off)
            return -1;
    if (off % elem_size != 0)
        return -1;
    return (long long)(((vec - off) % vec) / elem_size);
}

int colli_cuda_plan(colli_cuda_plan_t *plan, size_t count, size_t elem_size, const uintptr_t *addrs,
                    int naddrs, int sm_count)
{
    static const unsigned widths[] = {16, 8, 4};
    colli_cuda_plan_t p = {0};

    if (plan == NULL || addrs == NULL || naddrs < 1 || sm_count < 1)
        return -1;
    if (elem_size != 1 && elem_size != 2 && elem_size != 4 && elem_size != 8)
        return -1;
    if (count > SIZE_MAX / elem_size)
        return -1;

    p.elem_size = (unsigned)elem_size;
    p.elem_aligned = 1;
    for (int i = 0; i < naddrs; i++)
        if (addrs[i] % elem_size != 0)
            p.elem_aligned = 0;

    p.head = count;
    for (size_t w = 0; w < sizeof(widths) / sizeof(widths[0]) && p.elem_aligned; w++) {
        unsigned vec = widths[w];
        if (vec < elem_size)
            break;
        long long head = head_for(addrs, naddrs, elem_size, vec);
        if (head < 0 || (size_t)head >= count)
            continue;
        size_t vec_elems = vec / elem_size;
        size_t body = (count - (size_t)head) / vec_elems * vec_elems;
        if (body == 0)
            continue;
        p.vec_bytes = vec;
        p.vec_elems = (unsigned)vec_elems;
        p.head = (size_t)head;
        p.body = body;
        break;
    }
    p.tail = count - p.head - p.body;

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
