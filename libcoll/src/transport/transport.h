/* Transports: a const ops table per transport (socket/, shm/, ib/), and the selection loop that
 * drives a communicator's transports as one (transport.c). May include base and plan; the engine
 * and everything above it call the colli_tp_* functions below, never a transport directly.
 *
 * A communicator uses several transports at once. Each registered transport has a fixed slot
 * (its index in the registry, which is also the order of preference): comm->tp[slot] holds its
 * ops and state while it is in use. At creation every transport is asked whether this rank
 * offers it (probe), starts (comm_init, which sets its capability bit in this rank's member
 * record when it works here), and after the bootstrap each peer is given to the first transport
 * whose can_connect says yes (comm->peer_tp[peer] is that slot). Every lane of an op carries its
 * peer's slot (lane->tp), and each transport moves only its own lanes. One progress pass and one
 * poll() cover every transport in use. Every op receives its slot (tp); none blocks longer than
 * stated; every error message names the peer. Missing operations are filled with stubs. */
#ifndef COLLI_TRANSPORT_H
#define COLLI_TRANSPORT_H

#include <poll.h>

#include "base/comm.h"
#include "base/error.h"
#include "base/member.h"
#include "base/netif.h"
#include "base/util.h"
#include "base/wire.h"
#include "plan/op.h"

/* Capability bits a rank offers in its member record (stable on the wire). */
#define COLLI_CAP_SHM 0x1u /* shared memory works here and is not disabled */
#define COLLI_CAP_IB  0x2u /* an InfiniBand port is open here and the policy asks for it */

/* Transport flags. */
#define COLLI_TPF_LISTENER                                                                         \
    0x1u                       /* owns the listener every wait polls (notices, new connections);   \
                                * always in use */
#define COLLI_TPF_LOCAL   0x2u /* reaches only ranks of this host */
#define COLLI_TPF_STREAMS 0x4u /* spreads a peer's units over COLL_SOCKET_NSTREAMS connections */
#define COLLI_TPF_QUIET   0x8u /* left out of the "peers over ..." INFO line when it has none */

/* A TCP connect to a peer's listener that has had no answer at all for this long (neither
 * accepted nor refused: its SYNs are dropped) fails, with COLLI_SILENT_ADVICE; the kernel would
 * retry for about two minutes. Retransmissions after a lost SYN come at 1, 3 and 7 s. */
#define COLLI_CONNECT_SILENT_S 10.0
#define COLLI_SILENT_ADVICE                                                                        \
    "the packets are dropped on the way: a firewall, or a Kubernetes NetworkPolicy that admits "   \
    "only some ports (each rank listens on an ephemeral port, so TCP between the job's pods "      \
    "must be allowed on every port), or the host is down"

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
    const char *name;   /* "shm", "ib", "socket": logs, errors, colli_tp_name */
    const char *via;    /* "shared memory", "InfiniBand", "sockets": the INFO line of peers */
    uint32_t cap;       /* COLLI_CAP_* it sets in self->caps when it works here (0: none) */
    uint32_t flags;     /* COLLI_TPF_* */
    uint8_t hello_kind; /* connections of this hello kind the listener hands to adopt (0: none) */
    /* Before anything is created: does this rank offer the transport (policy, configuration,
     * hardware)? *use false: not started (the transport says why once, if the user asked for
     * it). An error when the policy requires the transport and it cannot work here. No block. */
    coll_result_t (*probe)(struct coll_comm *comm, bool *use);
    /* Create per-communicator state (comm->tp[tp].state) and fill this rank's part of self
     * (listener address, capability bit). A transport that cannot work here leaves its bit clear
     * and returns COLL_SUCCESS; peers then reach this rank another way. Does not block. */
    coll_result_t (*comm_init)(struct coll_comm *comm, int tp, const colli_netif_t *nif,
                               colli_member_t *self);
    /* Can this rank reach peer through this transport? Both member records are final; a pure
     * decision, no I/O. An error (naming the peer, blaming it) when the policy requires this
     * transport for that peer and it cannot reach it; the communicator then fails. */
    coll_result_t (*can_connect)(struct coll_comm *comm, int tp, const colli_member_t *peer,
                                 bool *yes);
    /* After every peer has its transport (comm->peer_tp). May block up to
     * COLL_BOOTSTRAP_TIMEOUT to set up what every later operation needs (shm: the liveness
     * links to local peers); the socket transport opens its connections lazily instead. */
    coll_result_t (*comm_ready)(struct coll_comm *comm, int tp);
    /* Move bytes for the lanes of op whose lane->tp is tp, without blocking; set *progressed
     * when anything moved. Returns an error naming the peer when one failed; the op is then
     * abandoned. */
    coll_result_t (*progress)(struct coll_comm *comm, int tp, colli_op_t *op, bool *progressed);
    /* First half of a wait: add the descriptors this transport's lanes of op wait on to set (op
     * may be NULL: only what every wait watches, such as a listener) and arm wake-ups. Returns
     * true when some lane may already progress, so that the caller must not sleep. No block. */
    bool (*wait_arm)(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set);
    /* Second half: handle what poll() reported for the descriptors wait_arm added, and disarm.
     * Returns an error naming the peer (or carrying a peer's abort notice). No block. */
    coll_result_t (*wait_done)(struct coll_comm *comm, int tp, colli_op_t *op,
                               colli_pollset_t *set);
    /* An authenticated connection of hello_kind arrived at the listener: take ownership of fd
     * (close it on refusal). No block. */
    coll_result_t (*adopt)(struct coll_comm *comm, int tp, const colli_hello_t *hello, int fd);
    /* Called before a peer is reported gone: read the notices other ranks sent, giving one
     * still being read a few milliseconds; returns the error an abort notice carries
     * (COLL_ERR_REMOTE naming its sender), else COLL_SUCCESS. */
    coll_result_t (*poll_notices)(struct coll_comm *comm, int tp);
    /* Best effort, bounded (about a second): tell every other rank that this communicator
     * failed, with reason. */
    void (*notify_abort)(struct coll_comm *comm, int tp, const char *reason);
    /* Best effort, bounded: tell every other rank that this rank timed out waiting on the ranks
     * listed in waits (space-separated). Receivers record it in comm->stuck_*. */
    void (*notify_stuck)(struct coll_comm *comm, int tp, const char *waits);
    /* Close and release everything (shared-memory names included). Does not block. */
    void (*comm_fini)(struct coll_comm *comm, int tp);
    /* The listening socket at this rank's member address (COLLI_TPF_LISTENER transports), for
     * a bootstrap root that the surviving ranks of coll_comm_shrink find there; -1: none. The
     * transport keeps owning it. May be NULL. */
    int (*listener_fd)(struct coll_comm *comm, int tp);
} colli_transport_t;

/* The registered transport called name (with missing operations filled), or NULL. */
const colli_transport_t *colli_transport_get(const char *name);

extern const colli_transport_t colli_socket_transport;
extern const colli_transport_t colli_shm_transport;
extern const colli_transport_t colli_ib_transport;

/* ---- a communicator's transports as one (transport.c) ---- */

/* Ask every registered transport whether this rank offers it (the policy's errors come first,
 * before anything is created), then start the ones it offers, in registry order. */
coll_result_t colli_tp_probe(struct coll_comm *comm);
coll_result_t colli_tp_init(struct coll_comm *comm, const colli_netif_t *nif, colli_member_t *self);
/* Give each peer the first transport (in order of preference) whose can_connect says yes, drop
 * the transports nobody uses, then make the others ready. */
coll_result_t colli_tp_ready(struct coll_comm *comm);
coll_result_t colli_tp_progress(struct coll_comm *comm, colli_op_t *op, bool *progressed);
/* Block until a lane of op (NULL: any notice) may progress, wake_fd (>= 0) is readable (then
 * *woken is set; the descriptor is not read), or timeout_ms passed: one poll() over every
 * transport's descriptors. */
coll_result_t colli_tp_wait(struct coll_comm *comm, colli_op_t *op, int timeout_ms, int wake_fd,
                            bool *woken);
/* The listening socket at comm->members[comm->rank].addr, or -1 (transport.h: listener_fd). */
int colli_tp_listener_fd(struct coll_comm *comm);
/* Hand a connection the listener accepted to the transport that owns its hello kind. */
coll_result_t colli_tp_adopt(struct coll_comm *comm, const colli_hello_t *hello, int fd);
coll_result_t colli_tp_poll_notices(struct coll_comm *comm);
/* A peer just went away (its connection broke, its shared memory is gone): wait up to `seconds`
 * for an abort notice that says why (a failing rank sends them before it exits, one at a time
 * when it is short of descriptors). Returns the notice's error, or COLL_SUCCESS when none came. */
coll_result_t colli_tp_await_notice(struct coll_comm *comm, double seconds);
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
/* The transports this rank uses, most peers first: "InfiniBand (3 peers), shared memory (1)";
 * "none" for a communicator of one rank. */
void colli_tp_summary(const struct coll_comm *comm, char *buf, size_t len);
/* The name of the transport that reaches peer ("self" for this rank). */
const char *colli_tp_name(const struct coll_comm *comm, int peer);

/* Descriptors this rank may need at most: every socket peer a connection each way per stream
 * (an all-to-all), every shared-memory peer its link and its segment, every InfiniBand peer its
 * link, plus a reserve of 64. The one estimate the start-up check and every "out of
 * descriptors" error give; sock, shm and ib get the peers over each (NULL: not wanted). */
unsigned long colli_fd_need(const struct coll_comm *comm, int *sock, int *shm, int *ib);
/* What to do about err (EMFILE, the process's limit, or ENFILE, the host's table): "the
 * open-file limit (ulimit -n) is L (hard H), but rank R with P peers (S over sockets, M over
 * shared memory, I over InfiniBand) may need about N descriptors: raise it (ulimit -n N, or the
 * container's nofile limit)"; for ENFILE, that the whole host is out of files (fs.file-max). */
void colli_fd_advice(const struct coll_comm *comm, int err, char *buf, size_t len);

#endif
