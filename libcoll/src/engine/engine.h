/* The engine: runs a built op (plan/op.h) over the communicator's transports with deadlines.
 * May include base, plan and transport; algorithms and the API call it. */
#ifndef COLLI_ENGINE_H
#define COLLI_ENGINE_H

#include "plan/op.h"

/* Run until every lane completed, a peer failed, or no progress for COLL_TIMEOUT. */
coll_result_t colli_op_run(colli_op_t *op);

/* The waiting state of an op driven over several calls (the pending point-to-point op of
 * coll_isend/coll_irecv): the time without progress carries from one call to the next, so that
 * COLL_TIMEOUT and the liveness lines count it whole. Zeroed: not started (the clock starts at
 * the next call; zero it again when new work is added). */
typedef struct colli_drive {
    double last;      /* colli_now() of the last progress (0: not started) */
    double next_warn; /* seconds without progress of the next liveness line */
    double grace_end; /* after the stuck notice went out: when the stall error comes (0: none) */
    double next_ask;  /* seconds without progress of the next comm->on_idle question */
} colli_drive_t;

/* What else ends a drive, with COLL_IN_PROGRESS (the op not complete): */
typedef struct colli_until {
    double deadline; /* colli_now() past which it returns, after at least one pass (0: none) */
    int wake_fd;     /* a descriptor that became readable (-1: none); it is not read */
    bool (*stop)(const colli_op_t *op, const void *ctx); /* true after a pass (NULL: none) */
    const void *ctx;
} colli_until_t;

/* Drive op as colli_op_run does, with the waiting state d, until it completes (COLL_SUCCESS),
 * until says so (COLL_IN_PROGRESS), or it fails. No deferred local copy is finished here. */
coll_result_t colli_op_drive(colli_op_t *op, colli_drive_t *d, const colli_until_t *until);

/* The error of an op that made no progress for idle seconds: names the silent ranks (they sent
 * no stuck report of their own) or the peers its unfinished lanes wait on, and blames one. */
coll_result_t colli_engine_stall_error(colli_op_t *op, double idle);

#endif
