/* coll_isend / coll_irecv requests (coll.h): the handle a caller holds, over the pending op's
 * slots (algo/pending.c). A handle outlives its communicator: once that is destroyed or aborted,
 * a request not complete reports so, and is never looked up there again. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

struct coll_request {
    coll_comm_t handle;
    colli_req_ref_t ref; /* its slot (ref.idx -1: none, an empty message) */
    bool done;           /* complete, or failed: status, and msg when it failed */
    coll_result_t status;
    char *msg;
};

static coll_result_t new_request(coll_comm_t handle, coll_request_t *out)
{
    coll_request_t r = calloc(1, sizeof(*r));
    if (r == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory for a send/recv request");
    r->handle = handle;
    r->ref.idx = -1;
    *out = r;
    return COLL_SUCCESS;
}

coll_result_t colli_request_start(struct coll_comm *comm, const colli_item_t *it,
                                  coll_request_t *out)
{
    const char *fn = it->kind == COLLI_ITEM_SEND ? "coll_isend" : "coll_irecv";
    if (colli_group_active())
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s inside coll_group_start/coll_group_end: a group already runs its "
                         "sends and receives concurrently; use coll_send/coll_recv there, or "
                         "call %s outside the group",
                         fn, fn);
    if (it->a.count > 0 && it->device >= 0)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: the buffer is memory of GPU %d; requests take host buffers. For "
                         "device buffers use coll_send/coll_recv inside a group, on a stream",
                         fn, it->device);
    if (it->peer == comm->rank)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s to itself (rank %d): a request moves data between two ranks; copy "
                         "the buffer, or put a send and a recv to self in a group",
                         fn, it->peer);
    coll_result_t status = new_request(it->handle, out);
    if (status != COLL_SUCCESS || it->a.count == 0) /* both sides skip an empty message */
        return status;
    const bool send = it->kind == COLLI_ITEM_SEND;
    const colli_p2p_t m = {.send = send,
                           .peer = it->peer,
                           .buf = send ? (void *)it->a.sendbuf : it->a.recvbuf,
                           .count = it->a.count,
                           .dt = it->a.dt,
                           .tag = it->tag};
    status = colli_p2p_post(comm, &m, &(*out)->ref);
    if (status != COLL_SUCCESS) {
        free(*out);
        *out = NULL;
    }
    return status;
}

/* The request ended with status (not COLL_SUCCESS): kept, and returned again by each test. */
static coll_result_t fail(coll_request_t r, coll_result_t status, const char *why)
{
    r->done = true;
    r->status = status;
    free(r->msg);
    r->msg = strdup(why);
    colli_set_last_error(why);
    return status;
}

/* coll_test, or with wait coll_wait */
static coll_result_t test(coll_request_t r, bool wait, int *done)
{
    const char *fn = wait ? "coll_wait" : "coll_test";
    if (r == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: request is NULL", fn);
    *done = 0;
    if (!r->done && r->ref.idx < 0)
        r->done = true; /* an empty message */
    if (r->done) {
        *done = 1;
        if (r->status != COLL_SUCCESS)
            colli_set_last_error(r->msg != NULL ? r->msg : "");
        return r->status;
    }
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(r->handle, &comm);
    if (status != COLL_SUCCESS) {
        char why[1200];
        snprintf(why, sizeof(why),
                 "%s: the request's communicator was destroyed or aborted before the request "
                 "completed: %s",
                 fn, colli_last_error());
        *done = 1;
        return fail(r, COLL_ERR_ABORTED, why);
    }
    bool d = false;
    status = colli_p2p_test(comm, r->ref, wait, &d);
    if (status != COLL_SUCCESS && status != COLL_ERR_INVALID_ARGUMENT &&
        status != COLL_ERR_INVALID_USAGE) {
        *done = 1; /* the communicator failed (maybe aborted, and gone): so did the request */
        char why[1200];
        snprintf(why, sizeof(why), "%s", colli_last_error());
        return fail(r, status, why);
    }
    if (status == COLL_SUCCESS && d) {
        r->done = true;
        r->ref.idx = -1;
        *done = 1;
    }
    return status;
}

coll_result_t coll_test(coll_request_t r, int *done)
{
    if (done == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "coll_test: done is NULL");
    return test(r, false, done);
}

coll_result_t coll_wait(coll_request_t r)
{
    int done = 0;
    return test(r, true, &done);
}

coll_result_t coll_comm_progress(coll_comm_t handle, int timeout_ms, int wake_fd)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (timeout_ms < 0 || timeout_ms > 600000)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_progress: timeout_ms %d is not in [0, 600000]", timeout_ms);
    if (colli_group_active())
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "coll_comm_progress inside coll_group_start/coll_group_end; call it "
                         "outside the group");
    return colli_p2p_progress(comm, timeout_ms, wake_fd);
}

void coll_request_free(coll_request_t r)
{
    if (r == NULL)
        return;
    struct coll_comm *comm = r->done || r->ref.idx < 0 ? NULL : colli_comm_find(r->handle);
    if (comm != NULL) /* a communicator destroyed or aborted since took the request along */
        colli_p2p_detach(comm, r->ref);
    free(r->msg);
    free(r);
}
