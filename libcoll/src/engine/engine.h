/* The engine: runs a built op (plan/op.h) over the communicator's transports with deadlines.
 * May include base, plan and transport; algorithms and the API call it. */
#ifndef COLLI_ENGINE_H
#define COLLI_ENGINE_H

#include "plan/op.h"

/* Run until every lane completed, a peer failed, or no progress for COLL_TIMEOUT. */
coll_result_t colli_op_run(colli_op_t *op);

/* The error of an op that made no progress for idle seconds: names the silent ranks (they sent
 * no stuck report of their own) or the peers its unfinished lanes wait on, and blames one. */
coll_result_t colli_engine_stall_error(colli_op_t *op, double idle);

#endif
