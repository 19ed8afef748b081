/* Transport interface: a const ops table per transport. The registry fills operations a
 * transport leaves NULL with stubs that return COLL_ERR_UNSUPPORTED, so callers never test for
 * NULL. None of these block longer than stated; every error message names the peer. */
#ifndef COLLI_TRANSPORT_H
#define COLLI_TRANSPORT_H

#include "algo/op.h"
#include "bootstrap/netif.h"
#include "core/colli.h"

typedef struct colli_transport {
    size_t struct_size; /* sizeof(colli_transport_t) of the build that defined it */
    const char *name;
    /* Before the bootstrap: create per-communicator state (e.g. a listener on nif) and fill
     * self->addr. Does not block. */
    coll_result_t (*comm_init)(struct coll_comm *comm, const colli_netif_t *nif,
                               colli_member_t *self);
    /* After the member table arrived. Does not block (connections open lazily). */
    coll_result_t (*comm_ready)(struct coll_comm *comm);
    /* Move bytes for the lanes of op without blocking; set *progressed when anything moved.
     * Returns an error naming the peer when one failed; the op is then abandoned. */
    coll_result_t (*progress)(struct coll_comm *comm, colli_op_t *op, bool *progressed);
    /* Block until some lane of op may progress, or timeout_ms passed. */
    coll_result_t (*wait)(struct coll_comm *comm, colli_op_t *op, int timeout_ms);
    /* Best effort, bounded (about a second): tell every other rank that this communicator
     * failed, with reason. */
    void (*notify_abort)(struct coll_comm *comm, const char *reason);
    /* Best effort, bounded: tell every other rank that this rank timed out waiting on the ranks
     * listed in waits (space-separated). Receivers record it in comm->stuck_*. */
    void (*notify_stuck)(struct coll_comm *comm, const char *waits);
    /* Close everything. Does not block. */
    void (*comm_fini)(struct coll_comm *comm);
} colli_transport_t;

/* The registered transport called name (with missing operations filled), or NULL. */
const colli_transport_t *colli_transport_get(const char *name);

extern const colli_transport_t colli_socket_transport;

#endif
