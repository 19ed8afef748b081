/* Ring algorithms, pipelined in chunk-size pieces: a piece is forwarded as soon as it arrived
 * (and was reduced), so the reduction of one piece overlaps the transfer of the next.
 * all_reduce = reduce-scatter + all-gather around the ring (bandwidth-optimal). */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"

typedef struct {
    size_t count, n, base, rem;
} segs_t;

static size_t seg_off(const segs_t *s, size_t i)
{
    return i * s->base + (i < s->rem ? i : s->rem);
}
static size_t seg_len(const segs_t *s, size_t i)
{
    return s->base + (i < s->rem ? 1 : 0);
}

static size_t npieces(size_t len, size_t ce)
{
    return (len + ce - 1) / ce;
}

static colli_dep_t *dep_array(size_t n)
{
    colli_dep_t *d = malloc((n ? n : 1) * sizeof(*d));
    if (d)
        for (size_t i = 0; i < n; i++)
            d[i] = COLLI_NO_DEP;
    return d;
}

#define MOD(x, n) ((size_t)((((long long)(x)) % (long long)(n) + (long long)(n)) % (long long)(n)))

coll_result_t colli_ring_all_reduce(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    /* r is this rank's position in the (topology-ordered) ring */
    const size_t n = (size_t)comm->nranks, r = (size_t)colli_ring_pos(comm, comm->rank);
    const size_t e = coll_datatype_size(a->dt), ce = colli_chunk_elems(comm, e);
    const int next = colli_ring_rank(comm, (int)MOD(r + 1, n)),
              prev = colli_ring_rank(comm, (int)MOD(r + n - 1, n));
    segs_t s = {a->count, n, a->count / n, a->count % n};
    size_t maxp = npieces(seg_len(&s, 0), ce);
    colli_dep_t *deps = dep_array(maxp), *nd = dep_array(maxp);
    if (deps == NULL || nd == NULL) {
        free(deps);
        free(nd);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building all_reduce");
    }
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    const bool avg = a->op == COLL_AVG;
    /* reduce-scatter: step st sends segment r-st, receives and reduces segment r-st-1 */
    for (size_t st = 0; st + 1 < n; st++) {
        size_t ss = MOD(r - st, n), rs = MOD(r - st - 1, n);
        size_t off = seg_off(&s, ss), len = seg_len(&s, ss);
        for (size_t k = 0; k < npieces(len, ce); k++) {
            size_t po = off + k * ce, pl = len - k * ce < ce ? len - k * ce : ce;
            colli_op_send(op, next, (st == 0 ? sb : rb) + po * e, pl * e,
                          st == 0 ? COLLI_NO_DEP : deps[k]);
        }
        off = seg_off(&s, rs);
        len = seg_len(&s, rs);
        for (size_t k = 0; k < npieces(len, ce); k++) {
            size_t po = off + k * ce, pl = len - k * ce < ce ? len - k * ce : ce;
            nd[k] = colli_op_recv_reduce(op, prev, rb + po * e, sb + po * e, pl * e, COLLI_NO_DEP,
                                         avg && st + 2 == n);
        }
        colli_dep_t *t = deps;
        deps = nd;
        nd = t;
    }
    /* all-gather: step st sends segment r+1-st (complete), receives segment r-st in place */
    for (size_t st = 0; st + 1 < n; st++) {
        size_t ss = MOD(r + 1 - st, n), rs = MOD(r - st, n);
        size_t off = seg_off(&s, ss), len = seg_len(&s, ss);
        for (size_t k = 0; k < npieces(len, ce); k++) {
            size_t po = off + k * ce, pl = len - k * ce < ce ? len - k * ce : ce;
            colli_op_send(op, next, rb + po * e, pl * e, deps[k]);
        }
        off = seg_off(&s, rs);
        len = seg_len(&s, rs);
        for (size_t k = 0; k < npieces(len, ce); k++) {
            size_t po = off + k * ce, pl = len - k * ce < ce ? len - k * ce : ce;
            nd[k] = colli_op_recv(op, prev, rb + po * e, pl * e, COLLI_NO_DEP);
        }
        colli_dep_t *t = deps;
        deps = nd;
        nd = t;
    }
    free(deps);
    free(nd);
    return COLL_SUCCESS;
}

coll_result_t colli_ring_all_gather(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    /* r is this rank's position in the (topology-ordered) ring */
    const size_t n = (size_t)comm->nranks, r = (size_t)colli_ring_pos(comm, comm->rank);
    const size_t e = coll_datatype_size(a->dt), ce = colli_chunk_elems(comm, e);
    const int next = colli_ring_rank(comm, (int)MOD(r + 1, n)),
              prev = colli_ring_rank(comm, (int)MOD(r + n - 1, n));
    const size_t len = a->count, np = npieces(len, ce);
    char *rb = a->recvbuf;
    const size_t me = (size_t)comm->rank; /* block of position q: rank colli_ring_rank(q) */
    /* our own block: copied while the ring is busy; step 0 sends from sendbuf */
    if ((const char *)a->sendbuf != rb + me * len * e)
        colli_op_local_copy(op, rb + me * len * e, a->sendbuf, len * e);
    colli_dep_t *deps = dep_array(np), *nd = dep_array(np);
    if (deps == NULL || nd == NULL) {
        free(deps);
        free(nd);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building all_gather");
    }
    for (size_t st = 0; st + 1 < n; st++) {
        size_t ss = (size_t)colli_ring_rank(comm, (int)MOD(r - st, n)),
               rs = (size_t)colli_ring_rank(comm, (int)MOD(r - st - 1, n));
        for (size_t k = 0; k < np; k++) {
            size_t po = k * ce, pl = len - po < ce ? len - po : ce;
            const char *src =
                st == 0 ? (const char *)a->sendbuf + po * e : rb + (ss * len + po) * e;
            colli_op_send(op, next, src, pl * e, st == 0 ? COLLI_NO_DEP : deps[k]);
        }
        for (size_t k = 0; k < np; k++) {
            size_t po = k * ce, pl = len - po < ce ? len - po : ce;
            nd[k] = colli_op_recv(op, prev, rb + (rs * len + po) * e, pl * e, COLLI_NO_DEP);
        }
        colli_dep_t *t = deps;
        deps = nd;
        nd = t;
    }
    free(deps);
    free(nd);
    return COLL_SUCCESS;
}

coll_result_t colli_ring_reduce_scatter(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    /* r is this rank's position in the (topology-ordered) ring */
    const size_t n = (size_t)comm->nranks, r = (size_t)colli_ring_pos(comm, comm->rank);
    const size_t e = coll_datatype_size(a->dt), ce = colli_chunk_elems(comm, e);
    const int next = colli_ring_rank(comm, (int)MOD(r + 1, n)),
              prev = colli_ring_rank(comm, (int)MOD(r + n - 1, n));
    const size_t len = a->count, np = npieces(len, ce);
    const char *sb = a->sendbuf;
    char *scratch = NULL;
    if (n > 2) {
        void *p = NULL;
        coll_result_t status = colli_comm_scratch(comm, n * len * e, &p);
        if (status != COLL_SUCCESS)
            return status;
        scratch = p;
    }
    colli_dep_t *deps = dep_array(np), *nd = dep_array(np);
    if (deps == NULL || nd == NULL) {
        free(deps);
        free(nd);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building reduce_scatter");
    }
    const bool avg = a->op == COLL_AVG;
    /* step st sends segment r-st-1 and reduces segment r-st-2; the last step yields segment r */
    for (size_t st = 0; st + 1 < n; st++) {
        /* segments by the rank at the position; the last one is this rank's own */
        size_t ss = (size_t)colli_ring_rank(comm, (int)MOD(r - st - 1, n)),
               rs = (size_t)colli_ring_rank(comm, (int)MOD(r - st - 2, n));
        bool last = st + 2 == n;
        for (size_t k = 0; k < np; k++) {
            size_t po = k * ce, pl = len - po < ce ? len - po : ce;
            const char *src = st == 0 ? sb + (ss * len + po) * e : scratch + (ss * len + po) * e;
            colli_op_send(op, next, src, pl * e, st == 0 ? COLLI_NO_DEP : deps[k]);
        }
        for (size_t k = 0; k < np; k++) {
            size_t po = k * ce, pl = len - po < ce ? len - po : ce;
            char *dst = last ? (char *)a->recvbuf + po * e : scratch + (rs * len + po) * e;
            nd[k] = colli_op_recv_reduce(op, prev, dst, sb + (rs * len + po) * e, pl * e,
                                         COLLI_NO_DEP, avg && last);
        }
        colli_dep_t *t = deps;
        deps = nd;
        nd = t;
    }
    free(deps);
    free(nd);
    return COLL_SUCCESS;
}
