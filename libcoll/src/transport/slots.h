/* The lane loop of the transports that move data through rings of slots (shm/, ib/). A unit
 * travels as slot-sized fragments, each carrying the unit's whole frame header (its `reserved`
 * field numbers the fragment), all checked by the receiver; a received fragment is copied, or
 * reduced straight from its slot once the send that reads the same bytes is done. The loop does
 * all of that; a transport only supplies its rings (one per peer and direction) through these
 * callbacks, which never block. */
#ifndef COLLI_SLOTS_H
#define COLLI_SLOTS_H

#include "transport/transport.h"

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
    /* Receiver: the header (copied) and payload of the next slot, for a fragment of frag bytes;
     * false when it has not arrived. */
    bool (*rx_slot)(void *st, int peer, size_t frag, colli_frame_t *hdr, const char **payload);
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

/* Move what can move now of lane l (its peer's ring of this transport); sets *progressed. */
coll_result_t colli_slots_lane(struct coll_comm *comm, void *st, const colli_slot_ops_t *ops,
                               colli_op_t *op, colli_lane_t *l, bool *progressed);

#endif
