/* Algorithm builders: each turns one collective into an op (see op.h). Local copies that need no
 * network (own block of an all-gather, the root's copy of a broadcast) happen while building. */
#ifndef COLLI_ALGOS_H
#define COLLI_ALGOS_H

#include "base/error.h"
#include "plan/op.h"

typedef struct colli_coll_args {
    int coll; /* enum colli_coll_kind */
    const void *sendbuf;
    void *recvbuf;
    size_t count; /* as passed by the user (per-rank for all_gather/reduce_scatter/a2a) */
    coll_datatype_t dt;
    coll_op_t op;
    int root;
    /* A step of a call on device buffers (core/device_pipe.c): its messages carry that call's
     * fingerprint (marked "device buffers"), so ranks that called different collectives fail
     * with a mismatch naming what they called. NULL otherwise. */
    const struct colli_coll_args *outer;
} colli_coll_args_t;

/* Bytes of rank q's send (len[0]) and receive (len[1]) buffers that a collective of nranks
 * ranks uses: 0 for a buffer it does not touch (a non-root's input of broadcast, output of
 * reduce). */
static inline void colli_buffer_sizes(const colli_coll_args_t *a, int nranks, int q, size_t len[2])
{
    const size_t n = (size_t)nranks, b = a->count * coll_datatype_size(a->dt);
    len[0] = a->coll == COLLI_COLL_BROADCAST && q != a->root ? 0 : b;
    len[1] = a->coll == COLLI_COLL_REDUCE && q != a->root ? 0 : b;
    if (a->coll == COLLI_COLL_REDUCE_SCATTER || a->coll == COLLI_COLL_ALL_TO_ALL)
        len[0] *= n;
    if (a->coll == COLLI_COLL_ALL_GATHER || a->coll == COLLI_COLL_ALL_TO_ALL)
        len[1] *= n;
}

/* First of the count elements (or bytes) that rank r works on when n ranks split them. */
static inline size_t colli_slice_lo(size_t count, int n, int r)
{
    size_t q = count / (size_t)n, rem = count % (size_t)n;
    return q * (size_t)r + ((size_t)r < rem ? (size_t)r : rem);
}

/* One send or receive of a point-to-point call or group. */
typedef struct colli_p2p {
    bool send;
    int peer;
    void *buf;
    size_t count;
    coll_datatype_t dt;
    int tag; /* carried in the message's fingerprint (its root field), checked, not matched on */
} colli_p2p_t;

/* Run a collective on host buffers (algo/run.c): the whole call, as the public entry points do
 * once the arguments are checked; a failure fails the communicator. */
coll_result_t colli_run_collective(struct coll_comm *comm, const colli_coll_args_t *a);
/* Run the sends and receives of one communicator (in issue order) as one op, so that they
 * progress concurrently; sends to self are matched in order with receives from self. With
 * coll_isend/coll_irecv requests outstanding, they join those (algo/pending.c). */
coll_result_t colli_run_p2p(struct coll_comm *comm, const colli_p2p_t *msgs, int n);
/* Add the messages to op, numbered in issue order per peer and direction; sends to self are
 * copied now. Checked first: on an error nothing was added or numbered. */
coll_result_t colli_p2p_add(struct coll_comm *comm, colli_op_t *op, const colli_p2p_t *msgs, int n);

/* Take comm for one call (a failed or busy one is refused), and give it back: an error other
 * than a caller's mistake (or COLL_IN_PROGRESS) fails the communicator. Returns status. */
coll_result_t colli_call_begin(struct coll_comm *comm);
coll_result_t colli_call_end(struct coll_comm *comm, coll_result_t status);

/* ---- the pending point-to-point op (algo/pending.c): coll_isend / coll_irecv ---- */

/* A request: its slot in the pending op, and the slot's generation when it was taken. */
typedef struct colli_req_ref {
    int idx;
    uint32_t gen;
} colli_req_ref_t;

/* Requests of comm not complete yet (0 without a pending op); held: only those whose handle
 * was not freed. */
int colli_p2p_outstanding(const struct coll_comm *comm, bool held);
/* When every request not complete had its handle freed, drive them until they complete (a
 * collective needs the connections); nothing when one is still held. Takes the communicator. */
coll_result_t colli_p2p_finish_freed(struct coll_comm *comm);
/* Add one message (not to self) as a new request and move it as far as it goes at once. Takes
 * the communicator itself. */
coll_result_t colli_p2p_post(struct coll_comm *comm, const colli_p2p_t *m, colli_req_ref_t *ref);
/* Move every request forward, for at most timeout_ms (0: one pass), until one completes or
 * wake_fd (>= 0) is readable. COLL_SUCCESS unless the communicator failed. */
coll_result_t colli_p2p_progress(struct coll_comm *comm, int timeout_ms, int wake_fd);
/* Is the request complete (*done), after one pass when it is not (wait: after driving every
 * request until it is)? A complete request's slot is given back. Its error, when the
 * communicator failed before it completed. */
coll_result_t colli_p2p_test(struct coll_comm *comm, colli_req_ref_t ref, bool wait, bool *done);
/* The request's handle was freed: its slot goes once it completes (at once when it has). */
void colli_p2p_detach(struct coll_comm *comm, colli_req_ref_t ref);
/* msgs as colli_run_p2p runs them, joined to the pending op: returns once they completed (the
 * communicator taken by the caller). */
coll_result_t colli_p2p_run_pending(struct coll_comm *comm, const colli_p2p_t *msgs, int n);
/* What comm's pending op holds (tests: it must not grow while requests keep coming): units
 * (done or not) in its lanes, fingerprints, request slots in use or free. */
void colli_p2p_footprint(const struct coll_comm *comm, int *units, int *fps, int *slots);
/* Free comm's pending op (communicator teardown). */
void colli_p2p_pending_free(struct coll_comm *comm);

/* Add a's fingerprint (its outer call's, for a step of a device call) to op, with flag
 * (COLLI_COLL_DIRECT or 0) on its code; returns its index. */
int colli_args_fp(colli_op_t *op, const colli_coll_args_t *a, int flag, uint64_t seq);

/* Build the op for a collective (fingerprint added inside). */
coll_result_t colli_build_collective(colli_op_t *op, const colli_coll_args_t *a, uint64_t seq);

/* Pieces of at most the chunk size covering [0, count) elements of size elt. */
static inline size_t colli_chunk_elems(const struct coll_comm *comm, size_t elt)
{
    size_t c = (size_t)comm->members[0].chunk_size / elt;
    return c ? c : 1;
}

/* The single-copy path on one host (algo/direct.c): runs the call there when every rank can
 * (*done = true), else leaves it to the ring algorithms (*done = false). */
coll_result_t colli_direct_try(struct coll_comm *comm, const colli_coll_args_t *a, uint64_t seq,
                               bool *done);
/* Unmap the peers' buffers the single-copy path mapped (communicator teardown). */
void colli_direct_fini(struct coll_comm *comm);

coll_result_t colli_ring_all_reduce(colli_op_t *op, const colli_coll_args_t *a);
/* Pods of several ranks each (hier.c): true with the ranks per pod and the pods when every pod
 * has the same number of local ranks, rank = pod x per + local rank, at least 2 of each. */
bool colli_hier_layout(const struct coll_comm *comm, int *per, int *pods);
/* All-reduce as reduce-scatter in each pod, all-reduce between the pods, all-gather in each pod. */
coll_result_t colli_hier_all_reduce(colli_op_t *op, const colli_coll_args_t *a, int per, int pods);
coll_result_t colli_rd_all_reduce(colli_op_t *op, const colli_coll_args_t *a);
coll_result_t colli_ring_all_gather(colli_op_t *op, const colli_coll_args_t *a);
coll_result_t colli_ring_reduce_scatter(colli_op_t *op, const colli_coll_args_t *a);
coll_result_t colli_chain_broadcast(colli_op_t *op, const colli_coll_args_t *a);
coll_result_t colli_chain_reduce(colli_op_t *op, const colli_coll_args_t *a);
coll_result_t colli_pairwise_all_to_all(colli_op_t *op, const colli_coll_args_t *a);

#endif
