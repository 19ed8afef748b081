/* Pipelined chains for rooted collectives: broadcast flows root -> root+1 -> ... and reduce
 * flows root+1 -> ... -> root-1 -> root (positions in the topology-ordered ring), each piece
 * forwarded as soon as it arrived. */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"

coll_result_t colli_chain_broadcast(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    const int n = comm->nranks, r = comm->rank;
    const size_t e = coll_datatype_size(a->dt), ce = colli_chunk_elems(comm, e);
    const size_t np = (a->count + ce - 1) / ce;
    /* positions in the (topology-ordered) ring, counted from the root's */
    const int rp = colli_ring_pos(comm, r), pos = (rp - colli_ring_pos(comm, a->root) + n) % n;
    const int next = colli_ring_rank(comm, (rp + 1) % n),
              prev = colli_ring_rank(comm, (rp - 1 + n) % n);
    char *rb = a->recvbuf;
    if (pos == 0) {
        if (a->sendbuf != a->recvbuf)
            colli_op_local_copy(op, rb, a->sendbuf, a->count * e);
        for (size_t k = 0; k < np; k++) {
            size_t off = k * ce, len = a->count - off < ce ? a->count - off : ce;
            colli_op_send(op, next, (const char *)a->sendbuf + off * e, len * e, COLLI_NO_DEP);
        }
        return COLL_SUCCESS;
    }
    for (size_t k = 0; k < np; k++) {
        size_t off = k * ce, len = a->count - off < ce ? a->count - off : ce;
        colli_dep_t d = colli_op_recv(op, prev, rb + off * e, len * e, COLLI_NO_DEP);
        if (pos < n - 1)
            colli_op_send(op, next, rb + off * e, len * e, d);
    }
    return COLL_SUCCESS;
}

coll_result_t colli_chain_reduce(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    const int n = comm->nranks, r = comm->rank;
    const size_t e = coll_datatype_size(a->dt), ce = colli_chunk_elems(comm, e);
    const size_t np = (a->count + ce - 1) / ce;
    const int rp = colli_ring_pos(comm, r), pos = (rp - colli_ring_pos(comm, a->root) + n) % n;
    /* toward and away from the root */
    const int up = colli_ring_rank(comm, (rp - 1 + n) % n),
              down = colli_ring_rank(comm, (rp + 1) % n);
    const char *sb = a->sendbuf;
    const bool avg = a->op == COLL_AVG;
    char *mid = NULL;
    if (pos != 0 && pos != n - 1) {
        void *p = NULL;
        coll_result_t status = colli_comm_scratch(comm, a->count * e, &p);
        if (status != COLL_SUCCESS)
            return status;
        mid = p;
    }
    for (size_t k = 0; k < np; k++) {
        size_t off = k * ce, len = a->count - off < ce ? a->count - off : ce;
        if (pos == n - 1) {
            colli_op_send(op, up, sb + off * e, len * e, COLLI_NO_DEP);
        } else if (pos == 0) {
            colli_op_recv_reduce(op, down, (char *)a->recvbuf + off * e, sb + off * e, len * e,
                                 COLLI_NO_DEP, avg);
        } else {
            colli_dep_t d = colli_op_recv_reduce(op, down, mid + off * e, sb + off * e, len * e,
                                                 COLLI_NO_DEP, false);
            colli_op_send(op, up, mid + off * e, len * e, d);
        }
    }
    return COLL_SUCCESS;
}
