/* Ring algorithms, pipelined in chunk-size pieces: a piece is forwarded as soon as it arrived
 * (and was reduced), so the reduction of one piece overlaps the transfer of the next.
 * all_reduce = reduce-scatter + all-gather around the ring (bandwidth-optimal). Positions are
 * places in the (topology-ordered) ring; a position's block belongs to the rank there. */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"

/* This rank's place in the ring and what every step needs. */
typedef struct {
    size_t nranks;
    size_t pos;   /* this rank's position */
    size_t esize; /* bytes per element */
    size_t chunk; /* elements per piece */
    int next, prev;
} ring_t;

static ring_t ring_of(const struct coll_comm *comm, coll_datatype_t dt)
{
    ring_t ring = {.nranks = (size_t)comm->nranks,
                   .pos = (size_t)colli_ring_pos(comm, comm->rank),
                   .esize = coll_datatype_size(dt)};
    ring.chunk = colli_chunk_elems(comm, ring.esize);
    ring.next = colli_ring_rank(comm, (int)((ring.pos + 1) % ring.nranks));
    ring.prev = colli_ring_rank(comm, (int)((ring.pos + ring.nranks - 1) % ring.nranks));
    return ring;
}

/* The position `back` places before this rank's (back may exceed the ring: it wraps). */
static size_t behind(const ring_t *ring, size_t back)
{
    return (ring->pos + ring->nranks - back % ring->nranks) % ring->nranks;
}

/* The count elements split into nranks segments, the first count % nranks one longer. */
typedef struct {
    size_t base, rem;
} segs_t;

static size_t seg_off(const segs_t *segs, size_t i)
{
    return i * segs->base + (i < segs->rem ? i : segs->rem);
}
static size_t seg_len(const segs_t *segs, size_t i)
{
    return segs->base + (i < segs->rem ? 1 : 0);
}

static size_t npieces(size_t len, size_t chunk)
{
    return (len + chunk - 1) / chunk;
}

/* Elements of piece k of a run of len elements. */
static size_t piece_len(size_t len, size_t chunk, size_t k)
{
    return len - k * chunk < chunk ? len - k * chunk : chunk;
}

/* Dependencies of the pieces of one step on the previous step (double-buffered). */
typedef struct {
    colli_dep_t *cur, *next;
} deps_t;

static coll_result_t deps_alloc(deps_t *deps, size_t n, const char *what)
{
    deps->cur = malloc((n ? n : 1) * sizeof(colli_dep_t));
    deps->next = malloc((n ? n : 1) * sizeof(colli_dep_t));
    if (deps->cur == NULL || deps->next == NULL) {
        free(deps->cur);
        free(deps->next);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building %s", what);
    }
    for (size_t i = 0; i < n; i++)
        deps->cur[i] = deps->next[i] = COLLI_NO_DEP;
    return COLL_SUCCESS;
}

static void deps_swap(deps_t *deps)
{
    colli_dep_t *t = deps->cur;
    deps->cur = deps->next;
    deps->next = t;
}

static void deps_free(deps_t *deps)
{
    free(deps->cur);
    free(deps->next);
}

coll_result_t colli_ring_all_reduce(colli_op_t *op, const colli_coll_args_t *a)
{
    const ring_t ring = ring_of(op->comm, a->dt);
    const size_t n = ring.nranks, esize = ring.esize, chunk = ring.chunk;
    const segs_t segs = {a->count / n, a->count % n};
    deps_t deps;
    coll_result_t status = deps_alloc(&deps, npieces(seg_len(&segs, 0), chunk), "all_reduce");
    if (status != COLL_SUCCESS)
        return status;
    const char *in = a->sendbuf;
    char *out = a->recvbuf;
    const bool avg = a->op == COLL_AVG;
    /* reduce-scatter: step `step` sends segment pos-step, receives and reduces pos-step-1 */
    for (size_t step = 0; step + 1 < n; step++) {
        size_t seg = behind(&ring, step), off = seg_off(&segs, seg), len = seg_len(&segs, seg);
        for (size_t k = 0; k < npieces(len, chunk); k++) {
            const size_t at = off + k * chunk, plen = piece_len(len, chunk, k);
            colli_op_send(op, ring.next, (step == 0 ? in : out) + at * esize, plen * esize,
                          step == 0 ? COLLI_NO_DEP : deps.cur[k]);
        }
        seg = behind(&ring, step + 1);
        off = seg_off(&segs, seg);
        len = seg_len(&segs, seg);
        for (size_t k = 0; k < npieces(len, chunk); k++) {
            const size_t at = off + k * chunk, plen = piece_len(len, chunk, k);
            deps.next[k] = colli_op_recv_reduce(op, ring.prev, out + at * esize, in + at * esize,
                                                plen * esize, COLLI_NO_DEP, avg && step + 2 == n);
        }
        deps_swap(&deps);
    }
    /* all-gather: step `step` sends segment pos+1-step (complete), receives pos-step in place */
    for (size_t step = 0; step + 1 < n; step++) {
        size_t seg = (ring.pos + 1 + n - step) % n;
        size_t off = seg_off(&segs, seg), len = seg_len(&segs, seg);
        for (size_t k = 0; k < npieces(len, chunk); k++) {
            const size_t at = off + k * chunk, plen = piece_len(len, chunk, k);
            colli_op_send(op, ring.next, out + at * esize, plen * esize, deps.cur[k]);
        }
        seg = behind(&ring, step);
        off = seg_off(&segs, seg);
        len = seg_len(&segs, seg);
        for (size_t k = 0; k < npieces(len, chunk); k++) {
            const size_t at = off + k * chunk, plen = piece_len(len, chunk, k);
            deps.next[k] =
                colli_op_recv(op, ring.prev, out + at * esize, plen * esize, COLLI_NO_DEP);
        }
        deps_swap(&deps);
    }
    deps_free(&deps);
    return COLL_SUCCESS;
}

coll_result_t colli_ring_all_gather(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    const ring_t ring = ring_of(comm, a->dt);
    const size_t n = ring.nranks, esize = ring.esize, chunk = ring.chunk;
    const size_t len = a->count, pieces = npieces(len, chunk), block = len * esize;
    char *out = a->recvbuf;
    /* this rank's own block: copied while the ring is busy; step 0 sends from sendbuf */
    char *own = out + (size_t)comm->rank * block;
    if ((const char *)a->sendbuf != own)
        colli_op_local_copy(op, own, a->sendbuf, block);
    deps_t deps;
    coll_result_t status = deps_alloc(&deps, pieces, "all_gather");
    if (status != COLL_SUCCESS)
        return status;
    for (size_t step = 0; step + 1 < n; step++) {
        /* the blocks of the ranks at positions pos-step (sent) and pos-step-1 (received) */
        const size_t sent = (size_t)colli_ring_rank(comm, (int)behind(&ring, step));
        const size_t got = (size_t)colli_ring_rank(comm, (int)behind(&ring, step + 1));
        for (size_t k = 0; k < pieces; k++) {
            const size_t at = k * chunk, plen = piece_len(len, chunk, k);
            const char *src =
                step == 0 ? (const char *)a->sendbuf + at * esize : out + sent * block + at * esize;
            colli_op_send(op, ring.next, src, plen * esize, step == 0 ? COLLI_NO_DEP : deps.cur[k]);
        }
        for (size_t k = 0; k < pieces; k++) {
            const size_t at = k * chunk, plen = piece_len(len, chunk, k);
            deps.next[k] = colli_op_recv(op, ring.prev, out + got * block + at * esize,
                                         plen * esize, COLLI_NO_DEP);
        }
        deps_swap(&deps);
    }
    deps_free(&deps);
    return COLL_SUCCESS;
}

coll_result_t colli_ring_reduce_scatter(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    const ring_t ring = ring_of(comm, a->dt);
    const size_t n = ring.nranks, esize = ring.esize, chunk = ring.chunk;
    const size_t len = a->count, pieces = npieces(len, chunk), block = len * esize;
    const char *in = a->sendbuf;
    char *scratch = NULL;
    if (n > 2) {
        void *p = NULL;
        coll_result_t status = colli_comm_scratch(comm, n * block, &p);
        if (status != COLL_SUCCESS)
            return status;
        scratch = p;
    }
    deps_t deps;
    coll_result_t status = deps_alloc(&deps, pieces, "reduce_scatter");
    if (status != COLL_SUCCESS)
        return status;
    const bool avg = a->op == COLL_AVG;
    /* step `step` sends the block of position pos-step-1 and reduces that of pos-step-2; the
     * last step yields this rank's own block */
    for (size_t step = 0; step + 1 < n; step++) {
        const size_t sent = (size_t)colli_ring_rank(comm, (int)behind(&ring, step + 1));
        const size_t got = (size_t)colli_ring_rank(comm, (int)behind(&ring, step + 2));
        const bool last = step + 2 == n;
        for (size_t k = 0; k < pieces; k++) {
            const size_t at = sent * block + k * chunk * esize, plen = piece_len(len, chunk, k);
            colli_op_send(op, ring.next, (step == 0 ? in : scratch) + at, plen * esize,
                          step == 0 ? COLLI_NO_DEP : deps.cur[k]);
        }
        for (size_t k = 0; k < pieces; k++) {
            const size_t at = got * block + k * chunk * esize, plen = piece_len(len, chunk, k);
            char *dst = last ? (char *)a->recvbuf + k * chunk * esize : scratch + at;
            deps.next[k] = colli_op_recv_reduce(op, ring.prev, dst, in + at, plen * esize,
                                                COLLI_NO_DEP, avg && last);
        }
        deps_swap(&deps);
    }
    deps_free(&deps);
    return COLL_SUCCESS;
}
