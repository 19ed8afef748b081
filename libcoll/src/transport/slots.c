/* The lane loop of slot-ring transports (see slots.h). */
#include <string.h>

#include "coll_kernels.h"
#include "plan/frame.h"
#include "transport/slots.h"

static coll_result_t send_lane(struct coll_comm *comm, void *st, const colli_slot_ops_t *ops,
                               colli_op_t *op, colli_lane_t *l, bool *progressed)
{
    coll_result_t status = COLL_SUCCESS;
    bool moved = false;
    while (l->done < l->n) {
        colli_unit_t *u = &l->units[l->done];
        if (!colli_dep_done(op, u->dep))
            break;
        if ((status = ops->tx_ready(comm, st, op, l->peer)) != COLL_SUCCESS)
            break;
        const size_t cap = ops->cap(st, l->peer, true); /* the ring exists now */
        if (l->hdr_off == 0) {
            colli_frame_fill(comm, op, u, &l->hdr);
            l->hdr_off = 1;
        }
        do { /* one fragment per slot; a zero-byte unit still sends its header */
            const size_t frag = u->bytes - l->pay_off < cap ? u->bytes - l->pay_off : cap;
            colli_frame_t *hdr;
            char *payload;
            if (!ops->tx_slot(st, l->peer, frag, &hdr, &payload))
                goto out; /* full */
            if (frag > 0)
                memcpy(payload, u->buf + l->pay_off, frag);
            l->hdr.reserved = (uint32_t)(l->pay_off / cap);
            memcpy(hdr, &l->hdr, sizeof(*hdr));
            if ((status = ops->tx_publish(comm, st, l->peer, frag)) != COLL_SUCCESS)
                goto out;
            l->pay_off += frag;
            moved = true;
            *progressed = true;
        } while (l->pay_off < u->bytes);
        colli_op_unit_complete(op, l);
    }
out:
    return ops->end(comm, st, l, moved, status);
}

static coll_result_t fragment_error(struct coll_comm *comm, const colli_slot_ops_t *ops,
                                    const colli_op_t *op, const colli_lane_t *l,
                                    const colli_unit_t *u, const colli_frame_t *f, uint32_t want)
{
    if (!colli_frame_matches(f, &l->hdr))
        return colli_frame_error(comm, op, l->peer, u, f);
    char who[200];
    colli_member_desc(comm, l->peer, who, sizeof(who));
    return colli_error(ops->sub, COLL_ERR_REMOTE,
                       "corrupt %s ring from %s: fragment %u of unit %u where fragment %u was "
                       "expected; the ring is out of step; this is a bug or memory corruption, "
                       "please report it",
                       ops->what, who, f->reserved, u->msg_unit, want);
}

/* Copy or reduce one received fragment into the unit's destination. */
static void apply(const struct coll_comm *comm, const colli_op_t *op, const colli_lane_t *l,
                  const colli_unit_t *u, const char *src, size_t frag)
{
    char *dst = u->buf + l->pay_off;
    if (u->kind == COLLI_UNIT_RECV_COPY) {
        if (frag > 0)
            memcpy(dst, src, frag);
        return;
    }
    const size_t n = frag / coll_datatype_size(op->dt);
    if (u->final_div)
        colli_reduce_div(dst, u->src + l->pay_off, src, n, op->dt, (uint32_t)comm->nranks);
    else
        colli_reduce(dst, u->src + l->pay_off, src, n, op->dt, op->redop);
}

static coll_result_t recv_lane(struct coll_comm *comm, void *st, const colli_slot_ops_t *ops,
                               colli_op_t *op, colli_lane_t *l, bool *progressed)
{
    bool ready = false;
    coll_result_t status = ops->rx_ready(comm, st, op, l->peer, &ready);
    if (status != COLL_SUCCESS || !ready)
        return status;
    const size_t cap = ops->cap(st, l->peer, false);
    bool moved = false;
    while (l->done < l->n) {
        colli_unit_t *u = &l->units[l->done];
        if (u->kind == COLLI_UNIT_RECV_COPY && !colli_dep_done(op, u->dep))
            break;
        if (l->hdr_off == 0) {
            colli_frame_fill(comm, op, u, &l->hdr); /* what we expect */
            l->hdr_off = 1;
        }
        for (;;) {
            const size_t frag = u->bytes - l->pay_off < cap ? u->bytes - l->pay_off : cap;
            colli_frame_t got;
            const char *src;
            if (!ops->rx_slot(st, l->peer, frag, &got, &src)) {
                status = ops->gone(comm, st, op, l->peer, "receiving from");
                goto out;
            }
            const uint32_t frag_idx = (uint32_t)(l->pay_off / cap);
            if (!colli_frame_matches(&got, &l->hdr) || got.reserved != frag_idx) {
                status = fragment_error(comm, ops, op, l, u, &got, frag_idx);
                goto out;
            }
            /* a reduction waits in the ring until the send that reads the same bytes is done */
            if (u->kind == COLLI_UNIT_RECV_REDUCE && !colli_dep_done(op, u->dep))
                goto out;
            apply(comm, op, l, u, src, frag);
            ops->rx_release(st, l->peer);
            l->pay_off += frag;
            moved = true;
            *progressed = true;
            if (l->pay_off >= u->bytes)
                break;
        }
        colli_op_unit_complete(op, l);
    }
out:
    return ops->end(comm, st, l, moved, status);
}

coll_result_t colli_slots_lane(struct coll_comm *comm, void *st, const colli_slot_ops_t *ops,
                               colli_op_t *op, colli_lane_t *l, bool *progressed)
{
    return l->send ? send_lane(comm, st, ops, op, l, progressed)
                   : recv_lane(comm, st, ops, op, l, progressed);
}
