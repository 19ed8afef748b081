/* Choosing the algorithm for a collective. Every rank makes the same choice: it depends only on
 * the call's arguments and on rank 0's tuning, which the bootstrap gave every rank. */
#include <string.h>

#include "algo/algos.h"
#include "coll_kernels.h"

int colli_args_fp(colli_op_t *op, const colli_coll_args_t *a, int flag, uint64_t seq)
{
    const colli_coll_args_t *f = a->outer != NULL ? a->outer : a;
    if (a->outer != NULL)
        flag |= COLLI_COLL_DEV;
    return colli_op_add_fp(op, f->coll | flag, f->dt, f->op, f->root, f->count, seq);
}

coll_result_t colli_build_collective(colli_op_t *op, const colli_coll_args_t *a, uint64_t seq)
{
    struct coll_comm *comm = op->comm;
    const size_t e = coll_datatype_size(a->dt);
    colli_args_fp(op, a, 0, seq);
    if (comm->nranks == 1) {
        size_t bytes = a->count * e;
        if (a->coll == COLLI_COLL_REDUCE || a->coll == COLLI_COLL_ALL_REDUCE ||
            a->coll == COLLI_COLL_REDUCE_SCATTER) {
            if (a->op == COLL_AVG)
                colli_div(a->recvbuf, a->sendbuf, a->count, a->dt, 1);
            else if (a->sendbuf != a->recvbuf)
                memcpy(a->recvbuf, a->sendbuf, bytes);
        } else if (a->sendbuf != a->recvbuf) {
            memmove(a->recvbuf, a->sendbuf, bytes);
        }
        return COLL_SUCCESS;
    }
    switch (a->coll) {
    case COLLI_COLL_ALL_REDUCE: {
        int per, pods;
        if (a->count * e <= comm->members[0].small_threshold)
            return colli_rd_all_reduce(op, a);
        if (comm->cfg.hier_min > 0 && a->count * e >= comm->cfg.hier_min &&
            colli_hier_layout(comm, &per, &pods))
            return colli_hier_all_reduce(op, a, per, pods);
        return colli_ring_all_reduce(op, a);
    }
    case COLLI_COLL_ALL_GATHER:
        return colli_ring_all_gather(op, a);
    case COLLI_COLL_REDUCE_SCATTER:
        return colli_ring_reduce_scatter(op, a);
    case COLLI_COLL_BROADCAST:
        return colli_chain_broadcast(op, a);
    case COLLI_COLL_REDUCE:
        return colli_chain_reduce(op, a);
    case COLLI_COLL_ALL_TO_ALL:
        return colli_pairwise_all_to_all(op, a);
    default:
        return COLLI_ERR(COLL, COLL_ERR_INTERNAL, "unknown collective %d", a->coll);
    }
}
