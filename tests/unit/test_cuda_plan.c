/*
 * Unit test of the CUDA kernels' launch planning (kernels/cuda/plan.c), which builds without
 * nvcc: awkward counts and pointer alignments (every offset 0..15 of every pointer), checking that
 * the head, body and tail cover every element exactly once (walked with the kernel's own loops),
 * that the vector width is legal for every pointer and the widest the pointers allow, and that
 * the grid and block stay within the limits.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "check.h"
#include "plan.h"

#define MAX_ADDRS 4
#define BIG_COUNT (((size_t)16 << 20) + 3u)

static const size_t counts[] = {0, 1, 7, 15, 16, 17, 4097, BIG_COUNT};
static const size_t elem_sizes[] = {1, 2, 4, 8};
static const int sm_counts[] = {1, 108, 132, 100000};

/* Device-like base addresses (cudaMalloc gives 256-byte alignment, often far more). */
static const uintptr_t bases[MAX_ADDRS] = {0x7f0000000000u, 0x7f0000200000u, 0x302000000u,
                                           0x7f4a00001000u};

static uint8_t *cover; /* times each element was visited, BIG_COUNT entries */

/* Walks the plan with the loops of reduce.cu's kernel, thread by thread, and counts the visits of
 * every element. Returns 1 when each element of [0, count) was visited exactly once. */
static int covers_once(const colli_cuda_plan_t *p, size_t count)
{
    memset(cover, 0, count);
    const size_t threads = (size_t)p->grid * p->block;
    const size_t nvec = p->vec_elems ? p->body / p->vec_elems : 0;
    const size_t nsingle = p->head + p->tail;
    for (size_t blk = 0; blk < p->grid; blk++) {
        for (size_t tid = 0; tid < p->block; tid++) {
            const size_t stride = threads * COLLI_CUDA_UNROLL;
            for (size_t base = blk * p->block * COLLI_CUDA_UNROLL + tid; base < nvec;
                 base += stride) {
                for (size_t u = 0; u < COLLI_CUDA_UNROLL; u++) {
                    size_t v = base + u * p->block;
                    if (v >= nvec)
                        continue;
                    for (size_t e = 0; e < p->vec_elems; e++)
                        cover[p->head + v * p->vec_elems + e]++;
                }
            }
            for (size_t j = blk * p->block + tid; j < nsingle; j += threads) {
                size_t i = j < p->head ? j : j + p->body;
                if (i < count)
                    cover[i]++;
                else
                    return 0;
            }
        }
    }
    for (size_t i = 0; i < count; i++)
        if (cover[i] != 1)
            return 0;
    return 1;
}

/* Widest vector (16, 8, 4, >= elem_size) that the addresses allow for count elements, or 0. */
static unsigned best_width(const uintptr_t *addrs, int n, size_t esize, size_t count)
{
    for (unsigned w = 16; w >= 4 && w >= esize; w /= 2) {
        int ok = 1;
        for (int i = 0; i < n; i++)
            ok &= addrs[i] % w == addrs[0] % w && addrs[i] % esize == 0;
        size_t head = ((w - addrs[0] % w) % w) / esize;
        if (ok && count >= head + w / esize)
            return w;
    }
    return 0;
}

static void check_plan(size_t count, size_t esize, const uintptr_t *addrs, int n, int sm, int walk)
{
    colli_cuda_plan_t p = {0};
    char what[160];
    int len = snprintf(what, sizeof(what), "count %zu esize %zu sm %d offsets", count, esize, sm);
    for (int i = 0; i < n && len > 0 && (size_t)len < sizeof(what); i++)
        len += snprintf(what + len, sizeof(what) - (size_t)len, " %u", (unsigned)(addrs[i] % 16));

    if (colli_cuda_plan(&p, count, esize, addrs, n, sm) != 0) {
        check(0, "%s: plan failed", what);
        return;
    }
    check(p.head + p.body + p.tail == count, "%s: head %zu + body %zu + tail %zu != count", what,
          p.head, p.body, p.tail);
    check(p.elem_size == esize, "%s: elem_size %u", what, p.elem_size);

    int aligned = 1;
    for (int i = 0; i < n; i++)
        aligned &= addrs[i] % esize == 0;
    check(p.elem_aligned == (unsigned)aligned, "%s: elem_aligned %u, want %d", what, p.elem_aligned,
          aligned);

    if (p.vec_bytes == 0) {
        check(p.body == 0 && p.vec_elems == 0, "%s: body %zu without a vector", what, p.body);
    } else {
        check(p.vec_bytes == 16 || p.vec_bytes == 8 || p.vec_bytes == 4, "%s: vec_bytes %u", what,
              p.vec_bytes);
        check(p.vec_bytes >= esize && p.vec_elems * esize == p.vec_bytes,
              "%s: vec_bytes %u vec_elems %u", what, p.vec_bytes, p.vec_elems);
        check(aligned, "%s: a vector body with misaligned elements", what);
        check(p.body > 0 && p.body % p.vec_elems == 0, "%s: body %zu not whole vectors of %u", what,
              p.body, p.vec_elems);
        check(p.head < p.vec_elems && p.tail < p.vec_elems, "%s: head %zu tail %zu, vector %u",
              what, p.head, p.tail, p.vec_elems);
        for (int i = 0; i < n; i++)
            check((addrs[i] + p.head * esize) % p.vec_bytes == 0,
                  "%s: pointer %d not aligned to %u after the head of %zu", what, i, p.vec_bytes,
                  p.head);
    }
    unsigned want = best_width(addrs, n, esize, count);
    check(p.vec_bytes == want, "%s: vec_bytes %u, the pointers allow %u", what, p.vec_bytes, want);

    if (count == 0) {
        check(p.grid == 0 && p.block == 0, "%s: grid %u block %u for nothing", what, p.grid,
              p.block);
        return;
    }
    size_t max_grid = (size_t)sm * COLLI_CUDA_BLOCKS_PER_SM;
    if (max_grid > COLLI_CUDA_MAX_GRID)
        max_grid = COLLI_CUDA_MAX_GRID;
    check(p.block >= 32 && p.block <= COLLI_CUDA_BLOCK && p.block % 32 == 0, "%s: block %u", what,
          p.block);
    check(p.grid >= 1 && p.grid <= max_grid, "%s: grid %u, max %zu", what, p.grid, max_grid);
    /* no block without work */
    size_t nvec = p.vec_elems ? p.body / p.vec_elems : 0;
    size_t work = (nvec + COLLI_CUDA_UNROLL - 1) / COLLI_CUDA_UNROLL;
    if (work < p.head + p.tail)
        work = p.head + p.tail;
    check((size_t)(p.grid - 1) * p.block < work, "%s: grid %u x block %u for %zu threads of work",
          what, p.grid, p.block, work);
    if (walk)
        check(covers_once(&p, count), "%s: elements not covered exactly once", what);
}

static void test_alignments(void)
{
    uintptr_t addrs[MAX_ADDRS];
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++) {
        size_t count = counts[c];
        int small = count < 5000;
        for (size_t e = 0; e < sizeof(elem_sizes) / sizeof(elem_sizes[0]); e++) {
            size_t es = elem_sizes[e];
            /* one pointer (a copy in place), two (copy), three (two inputs + output): every
             * offset of every pointer */
            for (unsigned o0 = 0; o0 < 16; o0++) {
                addrs[0] = bases[0] + o0;
                check_plan(count, es, addrs, 1, 132, small || o0 % 5 == 0);
                for (unsigned o1 = 0; o1 < 16; o1++) {
                    addrs[1] = bases[1] + o1;
                    check_plan(count, es, addrs, 2, 108, small || (o0 == o1 && o0 % 4 == 1));
                    for (unsigned o2 = 0; o2 < 16; o2++) {
                        addrs[2] = bases[2] + o2;
                        check_plan(count, es, addrs, 3, 132, small && (o2 % 3 == 0 || o0 == o1));
                    }
                }
            }
            /* four pointers (three inputs): mixed offsets */
            for (unsigned k = 0; k < 512; k++) {
                for (int i = 0; i < 4; i++)
                    addrs[i] = bases[i] + ((k * (2u * (unsigned)i + 3u) + (unsigned)i * 5u) % 16u);
                if (k % 4 == 0)
                    for (int i = 0; i < 4; i++)
                        addrs[i] = bases[i] + (k / 4) % 16; /* shared offset */
                check_plan(count, es, addrs, 4, sm_counts[k % 4], small && k % 8 == 0);
            }
        }
    }
}

/* Shared alignment gets 16 bytes; 8 or 4 only when the pointers differ modulo 16 (or 8). */
static void test_widths(void)
{
    uintptr_t addrs[3] = {bases[0], bases[1] + 8, bases[2]};
    colli_cuda_plan_t p = {0};
    int rc = colli_cuda_plan(&p, 4097, 4, addrs, 3, 132);
    check(rc == 0 && p.vec_bytes == 8 && p.head == 0,
          "offsets 0/8/0 of float32: vec_bytes %u head %zu, want 8 and 0", p.vec_bytes, p.head);
    addrs[1] = bases[1] + 4;
    rc = colli_cuda_plan(&p, 4097, 4, addrs, 3, 132);
    check(rc == 0 && p.vec_bytes == 4, "offsets 0/4/0 of float32: vec_bytes %u, want 4",
          p.vec_bytes);
    rc = colli_cuda_plan(&p, 4097, 8, addrs, 3, 132);
    check(rc == 0 && p.vec_bytes == 0 && p.elem_aligned == 0 && p.head == 4097,
          "offsets 0/4/0 of float64: vec_bytes %u elem_aligned %u head %zu, want 0, 0, all",
          p.vec_bytes, p.elem_aligned, p.head);
    addrs[0] = bases[0] + 6;
    addrs[1] = bases[1] + 6;
    addrs[2] = bases[2] + 6;
    rc = colli_cuda_plan(&p, 4097, 2, addrs, 3, 132);
    check(rc == 0 && p.vec_bytes == 16 && p.head == 5 && p.body == 4088 && p.tail == 4,
          "offsets 6/6/6 of bfloat16: vec %u head %zu body %zu tail %zu, want 16, 5, 4088, 4",
          p.vec_bytes, p.head, p.body, p.tail);
    /* a large launch fills every SM, and no more */
    addrs[0] = addrs[1] = addrs[2] = bases[0];
    rc = colli_cuda_plan(&p, BIG_COUNT, 4, addrs, 3, 132);
    check(rc == 0 && p.grid == 132 * COLLI_CUDA_BLOCKS_PER_SM && p.block == COLLI_CUDA_BLOCK,
          "16 Mi floats on 132 SMs: grid %u block %u", p.grid, p.block);
    rc = colli_cuda_plan(&p, 1, 4, addrs, 3, 132);
    check(rc == 0 && p.grid == 1 && p.block == 32, "1 float: grid %u block %u, want 1 x 32", p.grid,
          p.block);
}

static void test_invalid(void)
{
    uintptr_t addrs[2] = {bases[0], bases[1]};
    colli_cuda_plan_t p, sentinel;
    memset(&sentinel, 0x5a, sizeof(sentinel));
    static const struct {
        size_t count, esize;
        int naddrs, sm, null_addrs;
        const char *what;
    } bad[] = {
        {16, 3, 2, 132, 0, "element size 3"},
        {16, 16, 2, 132, 0, "element size 16"},
        {16, 0, 2, 132, 0, "element size 0"},
        {16, 4, 0, 132, 0, "no pointers"},
        {16, 4, 2, 0, 0, "sm_count 0"},
        {16, 4, 2, -1, 0, "sm_count -1"},
        {16, 4, 2, 132, 1, "NULL addresses"},
        {SIZE_MAX / 2, 4, 2, 132, 0, "count overflow"},
        {SIZE_MAX, 2, 2, 132, 0, "count SIZE_MAX"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        p = sentinel;
        int rc = colli_cuda_plan(&p, bad[i].count, bad[i].esize, bad[i].null_addrs ? NULL : addrs,
                                 bad[i].naddrs, bad[i].sm);
        check(rc == -1, "%s: returned %d, want -1", bad[i].what, rc);
        check(memcmp(&p, &sentinel, sizeof(p)) == 0, "%s: plan written on failure", bad[i].what);
    }
    check(colli_cuda_plan(NULL, 16, 4, addrs, 2, 132) == -1, "NULL plan accepted");
    /* the largest count that does not overflow is fine */
    int rc = colli_cuda_plan(&p, SIZE_MAX / 8, 8, addrs, 2, 132);
    check(rc == 0 && p.head + p.body + p.tail == SIZE_MAX / 8 && p.grid >= 1,
          "count SIZE_MAX / 8 of 8 bytes");
}

int main(void)
{
    cover = malloc(BIG_COUNT);
    if (cover == NULL) {
        perror("malloc");
        return 1;
    }
    test_invalid();
    test_widths();
    test_alignments();
    free(cover);
    printf("test_cuda_plan: %llu checks passed, %llu failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
