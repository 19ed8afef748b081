/* Data frames, shared by every transport: the 48-byte header that precedes each unit (sockets)
 * or each slot-sized fragment of it (shared memory), and the check of a received header against
 * what the receiving rank expects. */
#ifndef COLLI_FRAME_H
#define COLLI_FRAME_H

#include <string.h>

#include "plan/op.h"

/* The header this rank sends for unit u of op (also: the header it expects to receive). */
void colli_frame_fill(const struct coll_comm *comm, const colli_op_t *op, const colli_unit_t *u,
                      colli_frame_t *f);

/* Does a received header carry exactly the expected fields (fragment index aside)? */
static inline bool colli_frame_matches(const colli_frame_t *got, const colli_frame_t *want)
{
    return memcmp(got, want, offsetof(colli_frame_t, reserved)) == 0;
}

/* The error for a received header f from peer that does not match unit u: a collective or
 * send/recv mismatch describing both sides, a different algorithm, or a corrupt stream. */
coll_result_t colli_frame_error(struct coll_comm *comm, const colli_op_t *op, int peer,
                                const colli_unit_t *u, const colli_frame_t *f);

#endif
