/* All-to-all by pairwise exchange: every pair of ranks exchanges its blocks directly; all pairs
 * progress at once (bounded connection set-up is the transport's job). */
#include <string.h>

#include "algo/algos.h"

coll_result_t colli_pairwise_all_to_all(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    const int n = comm->nranks, r = comm->rank;
    const size_t e = coll_datatype_size(a->dt), ce = colli_chunk_elems(comm, e);
    const size_t len = a->count, np = (len + ce - 1) / ce, blk = len * e;
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    if (sb == rb && n > 1) {
        /* In place: keep a copy of what we send, since receiving overwrites it. */
        void *p = NULL;
        coll_result_t status = colli_comm_scratch(comm, (size_t)n * blk, &p);
        if (status != COLL_SUCCESS)
            return status;
        memcpy(p, sb, (size_t)n * blk);
        sb = p;
    }
    if (sb + (size_t)r * blk != rb + (size_t)r * blk)
        colli_op_local_copy(op, rb + (size_t)r * blk, sb + (size_t)r * blk, blk);
    for (int i = 1; i < n; i++) {
        int to = (r + i) % n, from = (r - i + n) % n;
        for (size_t k = 0; k < np; k++) {
            size_t off = k * ce, pl = len - off < ce ? len - off : ce;
            colli_op_send(op, to, sb + (size_t)to * blk + off * e, pl * e, COLLI_NO_DEP);
            colli_op_recv(op, from, rb + (size_t)from * blk + off * e, pl * e, COLLI_NO_DEP);
        }
    }
    return COLL_SUCCESS;
}
