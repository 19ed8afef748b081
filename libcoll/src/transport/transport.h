/* Transport interface: a const ops table per transport. The registry fills operations a
 * transport leaves NULL with stubs, so callers never test for NULL. None of these block longer
 * than stated; every error message names the peer.
 *
 * A communicator uses several transports at once: every peer is reached through exactly one of
 * them (comm->peer_tp[peer]: shared memory for a peer on this host, InfiniBand for a peer on
 * another host when the policy asks for it and both have a port, sockets otherwise), every
 * lane of an op carries its peer's transport (lane->tp), and each transport moves only its own
 * lanes. The colli_tp_* functions below drive all of a communicator's transports as one: one
 * progress pass, and one poll() that covers every descriptor any of them waits on. */
#ifndef COLLI_TRANSPORT_H
#define COLLI_TRANSPORT_H

#include <poll.h>

#include "algo/op.h"
#include "bootstrap/netif.h"
#include "core/colli.h"

/* Descriptors collected from every transport for one poll(). */
typedef struct colli_pollset {
    struct pollfd *fds;
    int n, cap;
    bool oom;
} colli_pollset_t;

/* Append fd with events; returns its index, or -1 (and set->oom) when out of memory. */
int colli_pollset_add(colli_pollset_t *set, int fd, short events);

typedef struct colli_transport {
    size_t struct_size; /* sizeof(colli_transport_t) of the build that defined it */
    const char *name;
    /* Before the bootstrap: create per-communicator state (comm->tp_state[index]) and fill this
     * rank's part of self (listener address, capability bit in self->caps). A transport that
     * cannot work here leaves its capability bit clear and returns COLL_SUCCESS; peers then
     * reach this rank through another transport. Does not block. */
    coll_result_t (*comm_init)(struct coll_comm *comm, const colli_netif_t *nif,
                               colli_member_t *self);
    /* After the member table arrived and comm->peer_tp is set. May block up to
     * COLL_BOOTSTRAP_TIMEOUT to set up what every later operation needs (shm: the liveness
     * links to local peers); the socket transport opens its connections lazily instead. */
    coll_result_t (*comm_ready)(struct coll_comm *comm);
    /* Move bytes for the lanes of op whose lane->tp is this transport, without blocking; set
     * *progressed when anything moved. Returns an error naming the peer when one failed; the op
     * is then abandoned. */
    coll_result_t (*progress)(struct coll_comm *comm, colli_op_t *op, bool *progressed);
    /* First half of a wait: add the descriptors this transport's lanes of op wait on to set (op
     * may be NULL: only what every wait watches, such as a listener) and arm wake-ups. Returns
     * true when some lane may already progress, so that the caller must not sleep. No block. */
    bool (*wait_arm)(struct coll_comm *comm, colli_op_t *op, colli_pollset_t *set);
    /* Second half: handle what poll() reported for the descriptors wait_arm added, and disarm.
     * Returns an error naming the peer (or carrying a peer's abort notice). No block. */
    coll_result_t (*wait_done)(struct coll_comm *comm, colli_op_t *op, colli_pollset_t *set);
    /* An authenticated connection whose hello kind belongs to this transport arrived at the
     * socket listener: take ownership of fd (close it on refusal). No block. */
    coll_result_t (*adopt)(struct coll_comm *comm, const colli_hello_t *hello, int fd);
    /* Called before a peer is reported gone: read the notices other ranks sent, giving one
     * still being read a few milliseconds; returns the error an abort notice carries
     * (COLL_ERR_REMOTE naming its sender), else COLL_SUCCESS. */
    coll_result_t (*poll_notices)(struct coll_comm *comm);
    /* Best effort, bounded (about a second): tell every other rank that this communicator
     * failed, with reason. */
    void (*notify_abort)(struct coll_comm *comm, const char *reason);
    /* Best effort, bounded: tell every other rank that this rank timed out waiting on the ranks
     * listed in waits (space-separated). Receivers record it in comm->stuck_*. */
    void (*notify_stuck)(struct coll_comm *comm, const char *waits);
    /* Close and release everything (shared-memory names included). Does not block. */
    void (*comm_fini)(struct coll_comm *comm);
} colli_transport_t;

/* The registered transport called name (with missing operations filled), or NULL. */
const colli_transport_t *colli_transport_get(const char *name);

extern const colli_transport_t colli_socket_transport;
extern const colli_transport_t colli_shm_transport;
extern const colli_transport_t colli_ib_transport;

/* ---- a communicator's transports as one (transport.c) ---- */

/* Start every transport this communicator may use: sockets always (listener, notices), shared
 * memory unless COLL_SHM_DISABLE=1 or it does not work here, InfiniBand when comm->use_ib. */
coll_result_t colli_tp_init(struct coll_comm *comm, const colli_netif_t *nif, colli_member_t *self);
/* Choose each peer's transport from the member table (shared memory when both ranks offer it
 * and share a host identity; InfiniBand when both offer it and the hosts differ; RequireIB fails
 * naming a peer on another host that does not), then make every transport ready. */
coll_result_t colli_tp_ready(struct coll_comm *comm);
coll_result_t colli_tp_progress(struct coll_comm *comm, colli_op_t *op, bool *progressed);
/* Block until a lane of op (NULL: any notice) may progress, or timeout_ms passed: one poll()
 * over every transport's descriptors. */
coll_result_t colli_tp_wait(struct coll_comm *comm, colli_op_t *op, int timeout_ms);
/* Hand a connection the socket listener accepted to the transport that owns its hello kind. */
coll_result_t colli_tp_adopt(struct coll_comm *comm, const colli_hello_t *hello, int fd);
coll_result_t colli_tp_poll_notices(struct coll_comm *comm);
/* A local-link transport's peer left (its link ended; err is the link's errno, 0 for end of
 * stream) while this rank was `what` ("receiving from") it in op: the peer's own abort notice
 * when one arrived, else COLL_ERR_REMOTE naming the peer, the op and `via` (the transport), with
 * the failure blamed on the peer. */
coll_result_t colli_tp_peer_left(struct coll_comm *comm, colli_subsys_t sub,
                                 const struct colli_op *op, int peer, const char *what,
                                 const char *via, int err);
void colli_tp_notify_abort(struct coll_comm *comm, const char *reason);
void colli_tp_notify_stuck(struct coll_comm *comm, const char *waits);
void colli_tp_fini(struct coll_comm *comm);
/* "shm", "ib" or "socket": the transport that reaches peer. */
const char *colli_tp_name(const struct coll_comm *comm, int peer);

#endif
