/* Running one call on host buffers: take the communicator, choose the path (nothing to do, the
 * single-copy path, the op of the last identical all_reduce, or a freshly built op), run it, and
 * turn a failure into the communicator's async error. Collectives and point-to-point messages
 * (algo/algos.h) both end here. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "engine/engine.h"

/* Take the communicator for one operation: rejects a failed or busy communicator. */
coll_result_t colli_call_begin(struct coll_comm *comm)
{
    if (comm->async_error != COLL_SUCCESS)
        return COLLI_ERR(COLL, comm->async_error,
                         "the communicator failed earlier and cannot be used (destroy or abort "
                         "it and create a new one): %s",
                         comm->async_msg);
    int expected = 0;
    if (!__atomic_compare_exchange_n(&comm->busy, &expected, 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "another thread is running an operation on this communicator; use one "
                         "thread per communicator at a time");
    colli_log_set_rank(comm->rank);
    return COLL_SUCCESS;
}

coll_result_t colli_call_end(struct coll_comm *comm, coll_result_t status)
{
    if (status != COLL_SUCCESS && status != COLL_ERR_INVALID_ARGUMENT &&
        status != COLL_ERR_INVALID_USAGE && status != COLL_IN_PROGRESS)
        colli_comm_fail(comm, status, colli_last_error());
    __atomic_store_n(&comm->busy, 0, __ATOMIC_RELEASE);
    colli_log_set_rank(-1);
    return status;
}

static coll_result_t op_end(struct coll_comm *comm, colli_op_t *op, coll_result_t status)
{
    if (status == COLL_SUCCESS && op != NULL)
        status = colli_op_run(op);
    if (op != NULL)
        colli_op_free(op);
    return colli_call_end(comm, status);
}

coll_result_t colli_run_collective(struct coll_comm *comm, const colli_coll_args_t *a)
{
    coll_result_t status = colli_call_begin(comm);
    if (status != COLL_SUCCESS)
        return status;
    status = colli_p2p_finish_freed(comm);
    if (status != COLL_SUCCESS)
        return colli_call_end(comm, status);
    if (colli_p2p_outstanding(comm, false) > 0)
        return colli_call_end(
            comm,
            COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                      "rank %d: %s on a communicator with %d coll_isend/coll_irecv requests "
                      "not complete: their messages and the collective's would cross on "
                      "the same connections. Complete them first (coll_wait), or make the "
                      "point-to-point calls on a communicator of their own (coll_comm_split "
                      "with every rank)",
                      comm->rank, colli_coll_name(a->coll), colli_p2p_outstanding(comm, false)));
    uint64_t seq = ++comm->coll_seq;
    if (a->count == 0)
        return op_end(comm, NULL, COLL_SUCCESS);
    bool direct = false;
    status = colli_direct_try(comm, a, seq, &direct);
    if (status != COLL_SUCCESS || direct)
        return op_end(comm, NULL, status);
    colli_op_t op;
    /* An all_reduce builds nothing while building (no local copies, no scratch): the op of the
     * last identical call runs again on the new buffers. */
    const colli_op_key_t key = {.valid = a->coll == COLLI_COLL_ALL_REDUCE && comm->nranks > 1,
                                .coll = a->coll,
                                .count = a->count,
                                .dt = a->dt,
                                .redop = a->op,
                                .root = a->root,
                                .sendbuf = a->sendbuf,
                                .recvbuf = a->recvbuf};
    colli_op_t *again = key.valid ? colli_op_reuse(comm, &key, seq) : NULL;
    if (again != NULL)
        return op_end(comm, again, COLL_SUCCESS);
    status = colli_op_init(&op, comm, colli_coll_name(a->coll), a->dt, a->op);
    if (status != COLL_SUCCESS)
        return op_end(comm, NULL, status);
    status = colli_build_collective(&op, a, seq);
    op.key = key;
    return op_end(comm, &op, status);
}

/* The j-th send to self pairs with the j-th receive from self: copy it now. */
static coll_result_t self_copy(const struct coll_comm *comm, const colli_p2p_t *msgs, int n,
                               const colli_p2p_t *send, int j)
{
    int seen = 0;
    for (int k = 0; k < n; k++) {
        const colli_p2p_t *recv = &msgs[k];
        if (recv->send || recv->peer != comm->rank || seen++ != j)
            continue;
        if (recv->count != send->count || recv->dt != send->dt || recv->tag != send->tag)
            return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                             "send to self of %zu x %s (tag %d) does not match the recv from "
                             "self of %zu x %s (tag %d)",
                             send->count, coll_datatype_name(send->dt), send->tag, recv->count,
                             coll_datatype_name(recv->dt), recv->tag);
        if (send->count > 0) /* an empty message may come with NULL buffers */
            memmove(recv->buf, send->buf, send->count * coll_datatype_size(send->dt));
    }
    return COLL_SUCCESS;
}

coll_result_t colli_p2p_add(struct coll_comm *comm, colli_op_t *op, const colli_p2p_t *msgs, int n)
{
    int self_sends = 0, self_recvs = 0;
    for (int i = 0; i < n; i++)
        if (msgs[i].peer == comm->rank && msgs[i].send)
            self_sends++;
        else if (msgs[i].peer == comm->rank)
            self_recvs++;
    if (self_sends != self_recvs)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "rank %d: %d sends to itself but %d receives from itself in one group; "
                         "each send to self needs a matching recv in the same group",
                         comm->rank, self_sends, self_recvs);
    self_sends = 0;
    for (int i = 0; i < n; i++) { /* checked before anything is added or numbered */
        if (msgs[i].peer != comm->rank || !msgs[i].send)
            continue;
        coll_result_t status = self_copy(comm, msgs, n, &msgs[i], self_sends++);
        if (status != COLL_SUCCESS)
            return status;
    }
    for (int i = 0; i < n; i++) {
        const colli_p2p_t *m = &msgs[i];
        if (m->peer == comm->rank)
            continue;
        const size_t esize = coll_datatype_size(m->dt), chunk = colli_chunk_elems(comm, esize);
        uint64_t seq = m->send ? comm->p2p_send_seq[m->peer]++ : comm->p2p_recv_seq[m->peer]++;
        colli_op_add_fp(op, COLLI_COLL_SEND_RECV, m->dt, COLL_SUM, m->tag, m->count, seq);
        colli_op_reset_msg(op, m->peer, m->send);
        size_t off = 0;
        do { /* a zero-length message still sends its header, so mismatches are caught */
            size_t len = m->count - off < chunk ? m->count - off : chunk;
            if (m->send)
                colli_op_send(op, m->peer, (const char *)m->buf + off * esize, len * esize,
                              COLLI_NO_DEP);
            else
                colli_op_recv(op, m->peer, (char *)m->buf + off * esize, len * esize, COLLI_NO_DEP);
            off += len;
        } while (off < m->count);
    }
    return COLL_SUCCESS;
}

coll_result_t colli_run_p2p(struct coll_comm *comm, const colli_p2p_t *msgs, int n)
{
    coll_result_t status = colli_call_begin(comm);
    if (status != COLL_SUCCESS)
        return status;
    if (colli_p2p_outstanding(comm, false) > 0) /* joins the requests' op, and waits for its own */
        return colli_call_end(comm, colli_p2p_run_pending(comm, msgs, n));
    colli_op_t op;
    status = colli_op_init(&op, comm, "send/recv", COLL_INT8, COLL_SUM);
    if (status != COLL_SUCCESS)
        return op_end(comm, NULL, status);
    status = colli_p2p_add(comm, &op, msgs, n);
    if (status != COLL_SUCCESS) {
        colli_op_free(&op);
        return op_end(comm, NULL, status);
    }
    return op_end(comm, &op, status);
}
