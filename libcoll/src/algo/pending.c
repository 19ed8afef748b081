/* The pending point-to-point op of a communicator: coll_isend and coll_irecv add a message each
 * to one op that lives across calls, as a request whose units carry its slot (plan/op.h). The
 * calls that test, wait on or progress requests drive that op; each returns as soon as what it
 * waits for is complete, so a recv posted early never holds back a send posted later, as a
 * blocking call would. Messages keep their order per peer and direction (the numbering of
 * colli_p2p_add), whichever call added them. */
#include <math.h>
#include <stdlib.h>

#include "algo/algos.h"
#include "base/util.h"
#include "engine/engine.h"

struct colli_pending {
    colli_op_t op;
    colli_drive_t drive;
};

int colli_p2p_outstanding(const struct coll_comm *comm, bool held)
{
    const struct colli_pending *p = comm->pending;
    int n = 0;
    for (int i = 0; p != NULL && i < p->op.nrecs; i++)
        n += p->op.recs[i].left > 0 && !(held && p->op.recs[i].detached);
    return n;
}

static struct colli_pending *pending_of(struct coll_comm *comm)
{
    if (comm->pending != NULL)
        return comm->pending;
    struct colli_pending *p = calloc(1, sizeof(*p));
    if (p == NULL ||
        colli_op_init(&p->op, comm, "send/recv", COLL_INT8, COLL_SUM) != COLL_SUCCESS) {
        free(p);
        return NULL;
    }
    comm->pending = p;
    return p;
}

void colli_p2p_pending_free(struct coll_comm *comm)
{
    if (comm->pending == NULL)
        return;
    colli_op_destroy(&comm->pending->op);
    free(comm->pending);
    comm->pending = NULL;
}

/* Add msgs as the request of a new slot (*idx); nothing added on an error. */
static coll_result_t add_request(struct coll_comm *comm, const colli_p2p_t *msgs, int n, int *idx)
{
    struct colli_pending *p = pending_of(comm);
    *idx = p != NULL ? colli_op_req_new(&p->op) : -1;
    if (*idx < 0)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "rank %d: out of memory for a send/recv request",
                         comm->rank);
    p->op.cur_req = (uint32_t)*idx + 1;
    coll_result_t status = colli_p2p_add(comm, &p->op, msgs, n);
    p->op.cur_req = 0;
    if (status == COLL_SUCCESS && p->op.oom)
        status = COLLI_ERR(COLL, COLL_ERR_SYSTEM, "rank %d: out of memory adding a send/recv",
                           comm->rank);
    if (status != COLL_SUCCESS) {
        colli_op_req_release(&p->op, *idx);
        return status;
    }
    p->drive = (colli_drive_t){0}; /* new work: the wait without progress starts again */
    return COLL_SUCCESS;
}

enum { STOP_ANY = -1, STOP_NEVER = -2 };

typedef struct {
    int idx;       /* stop once this slot's request completed (or STOP_ANY, STOP_NEVER) */
    uint64_t from; /* op->completions when the drive began */
} stop_at_t;

static bool stop_when(const colli_op_t *op, const void *ctx)
{
    const stop_at_t *s = ctx;
    if (s->idx == STOP_NEVER)
        return false;
    return s->idx >= 0 ? op->recs[s->idx].left == 0 : op->completions != s->from;
}

/* Drive the pending op until stop (or for at most seconds, when finite); then compact it.
 * COLL_SUCCESS when it stopped for either reason, or completed. */
static coll_result_t drive(struct coll_comm *comm, stop_at_t stop, double seconds, int wake_fd)
{
    struct colli_pending *p = comm->pending;
    if (p->op.lanes_left == 0)
        return COLL_SUCCESS;
    stop.from = p->op.completions;
    const colli_until_t until = {.deadline = isinf(seconds) ? 0 : colli_now() + seconds,
                                 .wake_fd = wake_fd,
                                 .stop = stop_when,
                                 .ctx = &stop};
    coll_result_t status = colli_op_drive(&p->op, &p->drive, &until);
    colli_op_compact(&p->op);
    return status == COLL_IN_PROGRESS ? COLL_SUCCESS : status;
}

coll_result_t colli_p2p_post(struct coll_comm *comm, const colli_p2p_t *m, colli_req_ref_t *ref)
{
    coll_result_t status = colli_call_begin(comm);
    if (status != COLL_SUCCESS)
        return status;
    int idx = -1;
    status = add_request(comm, m, 1, &idx);
    if (status == COLL_SUCCESS) {
        *ref = (colli_req_ref_t){idx, comm->pending->op.recs[idx].gen};
        /* one pass now: a send starts moving without waiting for the next call */
        status = drive(comm, (stop_at_t){.idx = idx}, 0, -1);
    }
    return colli_call_end(comm, status);
}

coll_result_t colli_p2p_progress(struct coll_comm *comm, int timeout_ms, int wake_fd)
{
    coll_result_t status = colli_call_begin(comm);
    if (status != COLL_SUCCESS || comm->pending == NULL)
        return colli_call_end(comm, status);
    return colli_call_end(comm,
                          drive(comm, (stop_at_t){.idx = STOP_ANY}, timeout_ms / 1000.0, wake_fd));
}

/* The slot of ref, or NULL with an error when ref is not a live request of comm. */
static colli_req_rec_t *rec_of(struct coll_comm *comm, colli_req_ref_t ref, const char *fn)
{
    struct colli_pending *p = comm->pending;
    if (p == NULL || ref.idx < 0 || ref.idx >= p->op.nrecs || p->op.recs[ref.idx].gen != ref.gen ||
        p->op.recs[ref.idx].left < 0) {
        (void)COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                        "%s: the request is not one of rank %d's outstanding requests (completed "
                        "and read already, or freed)",
                        fn, comm->rank);
        return NULL;
    }
    return &p->op.recs[ref.idx];
}

coll_result_t colli_p2p_test(struct coll_comm *comm, colli_req_ref_t ref, bool wait, bool *done)
{
    *done = false;
    colli_req_rec_t *rec = rec_of(comm, ref, wait ? "coll_wait" : "coll_test");
    if (rec == NULL)
        return COLL_ERR_INVALID_ARGUMENT;
    coll_result_t status = COLL_SUCCESS;
    if (rec->left > 0) {
        status = colli_call_begin(comm); /* a failed communicator: its error */
        if (status != COLL_SUCCESS)
            return status;
        status =
            colli_call_end(comm, drive(comm, (stop_at_t){.idx = ref.idx}, wait ? INFINITY : 0, -1));
        rec = &comm->pending->op.recs[ref.idx];
    }
    if (status == COLL_SUCCESS && rec->left == 0) {
        *done = true;
        colli_op_req_release(&comm->pending->op, ref.idx);
    }
    return status;
}

void colli_p2p_detach(struct coll_comm *comm, colli_req_ref_t ref)
{
    colli_req_rec_t *rec = rec_of(comm, ref, "coll_request_free");
    if (rec == NULL)
        return;
    if (rec->left == 0 || comm->async_error != COLL_SUCCESS)
        colli_op_req_release(&comm->pending->op, ref.idx);
    else
        rec->detached = true;
}

coll_result_t colli_p2p_finish_freed(struct coll_comm *comm)
{
    if (colli_p2p_outstanding(comm, false) == 0 || colli_p2p_outstanding(comm, true) > 0)
        return COLL_SUCCESS;
    return drive(comm, (stop_at_t){.idx = STOP_NEVER}, INFINITY, -1);
}

coll_result_t colli_p2p_run_pending(struct coll_comm *comm, const colli_p2p_t *msgs, int n)
{
    int idx = -1;
    coll_result_t status = add_request(comm, msgs, n, &idx);
    if (status != COLL_SUCCESS)
        return status;
    status = drive(comm, (stop_at_t){.idx = idx}, INFINITY, -1);
    struct colli_pending *p = comm->pending;
    if (status == COLL_SUCCESS && p->op.recs[idx].left > 0) /* cannot be: it stops when done */
        status = COLLI_ERR(COLL, COLL_ERR_INTERNAL, "rank %d: a send/recv stopped before it ended",
                           comm->rank);
    colli_op_req_release(&p->op, idx);
    return status;
}

void colli_p2p_footprint(const struct coll_comm *comm, int *units, int *fps, int *slots)
{
    const struct colli_pending *p = comm->pending;
    *units = *fps = *slots = 0;
    for (int i = 0; p != NULL && i < p->op.nlanes; i++)
        *units += p->op.lanes[i].n;
    if (p != NULL) {
        *fps = p->op.nfps;
        *slots = p->op.nrecs;
    }
}
