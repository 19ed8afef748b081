/* The lane loop of the transports that move data through rings of slots (shm/, ib/). A unit
 * travels as slot-sized fragments, each carrying the unit's whole frame header (its `reserved`
 * field numbers the fragment), all checked by the receiver; a received fragment is copied, or
 * reduced straight from its slot once the send that reads the same bytes is done. The loop does
 * all of that; a transport only supplies its rings (one per peer and direction) through these
 * callbacks, which never block. */
#ifndef COLLI_SLOTS_H
#define COLLI_SLOTS_H

#include <string.h>

#include "coll_kernels.h"
#include "plan/frame.h"
#include "transport/transport.h"

/* A transport's ring operations are defined with this, so that the inline loop below inlines
 * them instead of calling them. */
#define COLLI_SLOT_OP static inline __attribute__((always_inline))

typedef struct colli_slot_ops {
    colli_subsys_t sub; /* the transport's log subsystem */
    const char *what;   /* "shared-memory", "InfiniBand": the ring in error messages */
    /* Payload bytes of one slot of the ring to (send) or from peer, once tx_ready or rx_ready
     * said the ring is there. */
    size_t (*cap)(void *st, int peer, bool send);
    /* Sender, before a unit's first fragment: COLL_SUCCESS when the peer can take data (the
     * ring may be created here), else the error (the peer left). */
    coll_result_t (*tx_ready)(struct coll_comm *comm, void *st, colli_op_t *op, int peer);
    /* Sender: where the header and the frag payload bytes of the next fragment go; false when
     * no slot is free now. */
    bool (*tx_slot)(void *st, int peer, size_t frag, colli_frame_t **hdr, char **payload);
    /* Sender: hand the filled slot to the peer (an error names it). */
    coll_result_t (*tx_publish)(struct coll_comm *comm, void *st, int peer, size_t frag);
    /* Receiver, before a pass: COLL_SUCCESS with *ready false when nothing can arrive yet (the
     * ring is not there yet), or the error (the peer left before it was). */
    coll_result_t (*rx_ready)(struct coll_comm *comm, void *st, colli_op_t *op, int peer,
                              bool *ready);
    /* Receiver: the header and payload of the next slot, for a fragment of frag bytes; false
     * when it has not arrived. */
    bool (*rx_slot)(void *st, int peer, size_t frag, const colli_frame_t **hdr,
                    const char **payload);
    /* Receiver: give the slot back to the sender. */
    void (*rx_release)(void *st, int peer);
    /* The error when nothing arrives or nothing fits because the peer left (what: "sending to"),
     * else COLL_SUCCESS. */
    coll_result_t (*gone)(struct coll_comm *comm, void *st, colli_op_t *op, int peer,
                          const char *what);
    /* After a pass over a lane (moved: a slot was published or released; status: the pass's
     * result): wake the peer, return credits; returns the lane's result. */
    coll_result_t (*end)(struct coll_comm *comm, void *st, const colli_lane_t *l, bool moved,
                         coll_result_t status);
} colli_slot_ops_t;

/* The error for a received fragment whose header is not the one expected (slots.c). */
coll_result_t colli_slots_fragment_error(struct coll_comm *comm, const colli_slot_ops_t *ops,
                                         const colli_op_t *op, const colli_lane_t *l,
                                         const colli_unit_t *u, const colli_frame_t *f,
                                         uint32_t want);

/* The loop itself is inline: each transport passes its own const ops table, so the compiler
 * turns every callback into a direct (mostly inlined) call, and the shared-memory fast path
 * costs what its hand-written loop did. colli_slots_lane moves what can move now of lane l
 * (its peer's ring of this transport) and sets *progressed. */

static inline __attribute__((always_inline)) coll_result_t
colli_slots_send(struct coll_comm *comm, void *st, const colli_slot_ops_t *ops, colli_op_t *op,
                 colli_lane_t *l, bool *progressed)
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

/* Copy or reduce one received fragment into the unit's destination. */
static inline __attribute__((always_inline)) void
colli_slots_apply(const struct coll_comm *comm, const colli_op_t *op, const colli_lane_t *l,
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

static inline __attribute__((always_inline)) coll_result_t
colli_slots_recv(struct coll_comm *comm, void *st, const colli_slot_ops_t *ops, colli_op_t *op,
                 colli_lane_t *l, bool *progressed)
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
            const colli_frame_t *got;
            const char *src;
            if (!ops->rx_slot(st, l->peer, frag, &got, &src)) {
                status = ops->gone(comm, st, op, l->peer, "receiving from");
                goto out;
            }
            const uint32_t frag_idx = (uint32_t)(l->pay_off / cap);
            if (!colli_frame_matches(got, &l->hdr) || got->reserved != frag_idx) {
                status = colli_slots_fragment_error(comm, ops, op, l, u, got, frag_idx);
                goto out;
            }
            /* a reduction waits in the ring until the send that reads the same bytes is done */
            if (u->kind == COLLI_UNIT_RECV_REDUCE && !colli_dep_done(op, u->dep))
                goto out;
            colli_slots_apply(comm, op, l, u, src, frag);
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

static inline __attribute__((always_inline)) coll_result_t
colli_slots_lane(struct coll_comm *comm, void *st, const colli_slot_ops_t *ops, colli_op_t *op,
                 colli_lane_t *l, bool *progressed)
{
    return l->send ? colli_slots_send(comm, st, ops, op, l, progressed)
                   : colli_slots_recv(comm, st, ops, op, l, progressed);
}

#endif
