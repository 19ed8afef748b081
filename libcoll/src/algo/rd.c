/* Recursive doubling all-reduce for small messages: log2(n) exchange steps instead of 2(n-1)
 * ring steps. Ranks beyond the largest power of two fold their data into a partner first and
 * receive the result at the end. */
#include <stdlib.h>

#include "algo/algos.h"

coll_result_t colli_rd_all_reduce(colli_op_t *op, const colli_coll_args_t *a)
{
    struct coll_comm *comm = op->comm;
    const int n = comm->nranks, r = comm->rank;
    const size_t e = coll_datatype_size(a->dt), ce = colli_chunk_elems(comm, e);
    const size_t np = (a->count + ce - 1) / ce;
    int pof2 = 1;
    while (pof2 * 2 <= n)
        pof2 *= 2;
    const int rem = n - pof2;
    const bool avg = a->op == COLL_AVG;
    colli_dep_t *deps = malloc(np * sizeof(*deps)), *sdeps = malloc(np * sizeof(*sdeps));
    if (deps == NULL || sdeps == NULL) {
        free(deps);
        free(sdeps);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building all_reduce");
    }
    for (size_t k = 0; k < np; k++)
        deps[k] = sdeps[k] = COLLI_NO_DEP;
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    const char *cur = sb;
    int newrank;
#define PIECE(k) ((k)*ce * e), ((a->count - (k)*ce < ce ? a->count - (k)*ce : ce) * e)
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            for (size_t k = 0; k < np; k++) {
                size_t off = k * ce * e,
                       len = (a->count - k * ce < ce ? a->count - k * ce : ce) * e;
                colli_op_send(op, r + 1, sb + off, len, COLLI_NO_DEP);
            }
            newrank = -1;
        } else {
            for (size_t k = 0; k < np; k++) {
                size_t off = k * ce * e,
                       len = (a->count - k * ce < ce ? a->count - k * ce : ce) * e;
                deps[k] =
                    colli_op_recv_reduce(op, r - 1, rb + off, sb + off, len, COLLI_NO_DEP, false);
            }
            cur = rb;
            newrank = r / 2;
        }
    } else {
        newrank = r - rem;
    }
#undef PIECE
    if (newrank >= 0) {
        for (int mask = 1; mask < pof2; mask <<= 1) {
            int np2 = newrank ^ mask;
            int peer = np2 < rem ? np2 * 2 + 1 : np2 + rem;
            bool last = mask * 2 >= pof2;
            for (size_t k = 0; k < np; k++) {
                size_t off = k * ce * e,
                       len = (a->count - k * ce < ce ? a->count - k * ce : ce) * e;
                sdeps[k] = colli_op_send(op, peer, cur + off, len, deps[k]);
            }
            for (size_t k = 0; k < np; k++) {
                size_t off = k * ce * e,
                       len = (a->count - k * ce < ce ? a->count - k * ce : ce) * e;
                /* applied only once our send of the same bytes completed */
                deps[k] =
                    colli_op_recv_reduce(op, peer, rb + off, cur + off, len, sdeps[k], avg && last);
            }
            cur = rb;
        }
    }
    if (r < 2 * rem) {
        for (size_t k = 0; k < np; k++) {
            size_t off = k * ce * e, len = (a->count - k * ce < ce ? a->count - k * ce : ce) * e;
            if (r % 2 == 1)
                colli_op_send(op, r - 1, rb + off, len, deps[k]);
            else
                colli_op_recv(op, r + 1, rb + off, len, COLLI_NO_DEP);
        }
    }
    free(deps);
    free(sdeps);
    return COLL_SUCCESS;
}
