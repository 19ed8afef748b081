/* Building operations (see op.h): lanes, units, fingerprints, reuse of the last op. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "coll_kernels.h"
#include "plan/op.h"

coll_result_t colli_op_init(colli_op_t *op, struct coll_comm *comm, const char *what,
                            coll_datatype_t dt, coll_op_t redop)
{
    colli_op_t *spare = comm->spare_op;
    memset(op, 0, sizeof(*op));
    const size_t n = (size_t)comm->nranks;
    if (spare != NULL && spare->send_ctr != NULL) {
        /* reuse the last op's arrays; lanes keep their unit arrays */
        op->lanes = spare->lanes;
        op->cap = spare->cap;
        op->fps = spare->fps;
        op->fpcap = spare->fpcap;
        op->send_ctr = spare->send_ctr;
        memset(spare, 0, sizeof(*spare));
        memset(op->send_ctr, 0, 2 * n * sizeof(uint32_t));
    } else {
        op->send_ctr = calloc(2 * n, sizeof(uint32_t));
        if (op->send_ctr == NULL)
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building %s", what);
    }
    op->comm = comm;
    op->what = what;
    op->dt = dt;
    op->redop = redop;
    op->cur_fp = -1;
    op->recv_ctr = op->send_ctr + n;
    return COLL_SUCCESS;
}

/* Where p, a pointer into the buffers of key o, points in the buffers of key n. */
static inline void *moved(const void *p, const colli_op_key_t *o, const colli_op_key_t *n,
                          size_t bytes)
{
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)o->sendbuf, r = (uintptr_t)o->recvbuf;
    if (a - s < bytes)
        return (char *)n->sendbuf + (a - s);
    if (a - r < bytes)
        return (char *)n->recvbuf + (a - r);
    return (void *)p;
}

colli_op_t *colli_op_reuse(struct coll_comm *comm, const colli_op_key_t *key, uint64_t seq)
{
    colli_op_t *op = comm->spare_op;
    if (op == NULL || !op->key.valid || op->key.coll != key->coll || op->key.count != key->count ||
        op->key.dt != key->dt || op->key.redop != key->redop || op->key.root != key->root ||
        (op->key.sendbuf == op->key.recvbuf) != (key->sendbuf == key->recvbuf))
        return NULL;
    const size_t bytes = key->count * coll_datatype_size(key->dt);
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        for (int k = 0; k < l->n; k++) {
            colli_unit_t *u = &l->units[k];
            u->buf = moved(u->buf, &op->key, key, bytes);
            if (u->src != NULL)
                u->src = moved(u->src, &op->key, key, bytes);
        }
        l->done = 0;
        l->hdr_off = 0;
        l->pay_off = 0;
        l->staged = false;
    }
    op->lanes_left = op->nlanes;
    op->key = *key;
    for (int i = 0; i < op->nfps; i++)
        op->fps[i].seq = seq;
    op->key.valid = false; /* valid again once it completes */
    return op;
}

static void free_arrays(colli_op_t *op)
{
    free(op->recs);
    for (int i = 0; i < op->cap; i++)
        free(op->lanes[i].units);
    free(op->lanes);
    free(op->fps);
    free(op->send_ctr);
}

void colli_op_free(colli_op_t *op)
{
    struct coll_comm *comm = op->comm;
    if (comm != NULL && op == comm->spare_op) { /* a reused op stays where it is */
        op->key.valid = op->lanes_left == 0;
        return;
    }
    if (comm != NULL && comm->spare_op == NULL)
        comm->spare_op = calloc(1, sizeof(colli_op_t));
    colli_op_t *spare = comm != NULL ? comm->spare_op : NULL;
    if (spare != NULL && spare->send_ctr == NULL && op->send_ctr != NULL) {
        *spare = *op;
        spare->key.valid = op->key.valid && op->lanes_left == 0 && !op->oom;
    } else {
        free_arrays(op);
    }
    memset(op, 0, sizeof(*op));
}

void colli_op_destroy(colli_op_t *op)
{
    free_arrays(op);
    memset(op, 0, sizeof(*op));
}

void colli_op_cache_free(struct coll_comm *comm)
{
    if (comm->spare_op != NULL)
        free_arrays(comm->spare_op);
    free(comm->spare_op);
    comm->spare_op = NULL;
}

/* arr (n used of *cap elements of elt bytes) with room for one more: arr itself, or a copy
 * twice its size (first elements when empty; *cap updated); NULL, arr unchanged, when memory is
 * short */
static void *room_for_one(void *arr, int n, int *cap, size_t elt, int first)
{
    if (n < *cap)
        return arr;
    int ncap = *cap ? *cap * 2 : first;
    void *p = realloc(arr, (size_t)ncap * elt);
    if (p != NULL)
        *cap = ncap;
    return p;
}

int colli_op_add_fp(colli_op_t *op, int coll, coll_datatype_t dt, coll_op_t redop, int root,
                    uint64_t count, uint64_t seq)
{
    colli_fp_t *fps = room_for_one(op->fps, op->nfps, &op->fpcap, sizeof(*fps), 4);
    if (fps == NULL) {
        op->oom = true;
        return op->cur_fp;
    }
    op->fps = fps;
    op->fps[op->nfps] = (colli_fp_t){.coll = (uint8_t)coll,
                                     .dtype = (uint8_t)dt,
                                     .op = (uint8_t)redop,
                                     .root = root,
                                     .count = count,
                                     .seq = seq};
    op->cur_fp = op->nfps++;
    return op->cur_fp;
}

void colli_op_reset_msg(colli_op_t *op, int peer, bool send)
{
    if (send)
        op->send_ctr[peer] = 0;
    else
        op->recv_ctr[peer] = 0;
}

static int lane_for(colli_op_t *op, int peer, int stream, bool send)
{
    for (int i = op->nlanes - 1; i >= 0; i--) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->peer == peer && l->stream == stream && l->send == send)
            return i;
    }
    const int old = op->cap;
    colli_lane_t *lanes = room_for_one(op->lanes, op->nlanes, &op->cap, sizeof(*lanes), 8);
    if (lanes == NULL)
        return -1;
    for (int i = old; i < op->cap; i++) { /* new room: no unit arrays yet */
        lanes[i].units = NULL;
        lanes[i].cap = 0;
    }
    op->lanes = lanes;
    colli_lane_t *l = &op->lanes[op->nlanes];
    colli_unit_t *units = l->units; /* kept from an earlier op */
    int ucap = l->cap;
    memset(l, 0, sizeof(*l));
    l->units = units;
    l->cap = ucap;
    l->peer = peer;
    l->stream = stream;
    l->send = send;
    l->tp = op->comm->peer_tp[peer];
    op->tp_lanes[l->tp]++;
    return op->nlanes++;
}

static colli_dep_t add_unit(colli_op_t *op, int peer, bool send, colli_unit_t u)
{
    struct coll_comm *comm = op->comm;
    uint32_t *ctr = send ? &op->send_ctr[peer] : &op->recv_ctr[peer];
    u.msg_unit = (*ctr)++;
    u.fp = op->cur_fp;
    u.req = op->cur_req;
    /* Streams spread units over several TCP connections; a shared-memory peer has one ring. */
    const uint32_t nstreams = comm->tp_streams[comm->peer_tp[peer]];
    int stream = nstreams > 1 ? (int)(u.msg_unit % nstreams) : 0;
    int li = lane_for(op, peer, stream, send);
    if (li < 0) {
        op->oom = true;
        return COLLI_NO_DEP;
    }
    colli_lane_t *l = &op->lanes[li];
    colli_unit_t *units = room_for_one(l->units, l->n, &l->cap, sizeof(*units), 8);
    if (units == NULL) {
        op->oom = true;
        return COLLI_NO_DEP;
    }
    l->units = units;
    if (l->done == l->n) /* a new lane, or one of a pending op that had finished */
        op->lanes_left++;
    if (u.req != 0)
        op->recs[u.req - 1].left++;
    l->units[l->n] = u;
    return (colli_dep_t){li, l->n++};
}

colli_dep_t colli_op_send(colli_op_t *op, int peer, const void *buf, size_t bytes, colli_dep_t dep)
{
    colli_unit_t u = {.buf = (char *)buf, .bytes = bytes, .dep = dep, .kind = COLLI_UNIT_SEND};
    return add_unit(op, peer, true, u);
}

colli_dep_t colli_op_recv(colli_op_t *op, int peer, void *dst, size_t bytes, colli_dep_t dep)
{
    colli_unit_t u = {.buf = dst, .bytes = bytes, .dep = dep, .kind = COLLI_UNIT_RECV_COPY};
    return add_unit(op, peer, false, u);
}

colli_dep_t colli_op_recv_reduce(colli_op_t *op, int peer, void *dst, const void *src, size_t bytes,
                                 colli_dep_t dep, bool final_div)
{
    colli_unit_t u = {.buf = dst,
                      .src = src,
                      .bytes = bytes,
                      .dep = dep,
                      .kind = COLLI_UNIT_RECV_REDUCE,
                      .final_div = final_div};
    return add_unit(op, peer, false, u);
}

void colli_op_unit_done(colli_op_t *op, colli_lane_t *lane)
{
    colli_unit_t *u = &lane->units[lane->done];
    if (u->kind == COLLI_UNIT_RECV_REDUCE) {
        size_t n = u->bytes / coll_datatype_size(op->dt);
        if (u->final_div)
            colli_reduce_div(u->buf, u->src, lane->staging, n, op->dt, (uint32_t)op->comm->nranks);
        else
            colli_reduce(u->buf, u->src, lane->staging, n, op->dt, op->redop);
    }
    colli_op_unit_complete(op, lane);
}

void colli_op_unit_complete(colli_op_t *op, colli_lane_t *lane)
{
    const uint32_t req = lane->units[lane->done].req;
    if (req != 0 && --op->recs[req - 1].left == 0)
        op->completions++;
    lane->staged = false;
    lane->hdr_off = 0;
    lane->pay_off = 0;
    if (++lane->done == lane->n)
        op->lanes_left--;
}

void colli_op_local_copy(colli_op_t *op, void *dst, const void *src, size_t bytes)
{
    op->lc_dst = dst;
    op->lc_src = src;
    op->lc_bytes = bytes;
    op->lc_done = 0;
}

int colli_op_req_new(colli_op_t *op)
{
    for (int i = 0; i < op->nrecs; i++)
        if (op->recs[i].left < 0) {
            op->recs[i].left = 0;
            op->recs[i].gen++;
            op->recs[i].detached = false;
            return i;
        }
    colli_req_rec_t *recs = room_for_one(op->recs, op->nrecs, &op->reccap, sizeof(*recs), 16);
    if (recs == NULL)
        return -1;
    op->recs = recs;
    op->recs[op->nrecs] = (colli_req_rec_t){.left = 0, .gen = 1, .detached = false};
    return op->nrecs++;
}

void colli_op_req_release(colli_op_t *op, int idx)
{
    op->recs[idx].left = -1;
    while (op->nrecs > 0 && op->recs[op->nrecs - 1].left < 0)
        op->nrecs--;
}

void colli_op_compact(colli_op_t *op)
{
    int lowest = op->nfps; /* the lowest fingerprint a unit still to complete refers to */
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n) {
            l->done = l->n = 0;
            continue;
        }
        /* a lane that always has a unit to go (a recv posted ahead of each one waited on) never
         * finishes: its completed units leave once they are at least half of it. No unit of a
         * pending op depends on another, so indices may move. */
        if (l->done >= 16 && l->done >= l->n - l->done) {
            memmove(l->units, l->units + l->done, (size_t)(l->n - l->done) * sizeof(*l->units));
            l->n -= l->done;
            l->done = 0;
        }
        for (int k = l->done; k < l->n && l->units[k].fp < lowest; k++)
            lowest = l->units[k].fp;
    }
    if (lowest > 0 && lowest >= op->nfps / 2) { /* each fingerprint moves O(1) times */
        memmove(op->fps, op->fps + lowest, (size_t)(op->nfps - lowest) * sizeof(*op->fps));
        op->nfps -= lowest;
        op->cur_fp -= lowest;
        for (int i = 0; i < op->nlanes; i++)
            for (int k = op->lanes[i].done; k < op->lanes[i].n; k++)
                op->lanes[i].units[k].fp -= lowest;
    }
    for (int i = op->nrecs - 1; i >= 0; i--)
        if (op->recs[i].detached && op->recs[i].left == 0)
            colli_op_req_release(op, i);
}
