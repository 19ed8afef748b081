/* The error path of the slot-ring lane loop (see slots.h; the loop itself is inline there). */
#include "transport/slots.h"

coll_result_t colli_slots_fragment_error(struct coll_comm *comm, const colli_slot_ops_t *ops,
                                         const colli_op_t *op, const colli_lane_t *l,
                                         const colli_unit_t *u, const colli_frame_t *f,
                                         uint32_t want)
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
