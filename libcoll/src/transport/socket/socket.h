/* Socket transport internals. Connections are one-directional (the connector sends data, the
 * acceptor receives), opened lazily on first use, several streams per peer. */
#ifndef COLLI_SOCKET_H
#define COLLI_SOCKET_H

#include <poll.h>

#include "base/handshake.h"
#include "base/sockutil.h"
#include "transport/probe.h"
#include "transport/transport.h"

/* An outgoing connection: TCP connect, then the handshake (hello sent, challenge awaited,
 * response sent), then data frames. */
enum { SOCK_NONE = 0, SOCK_CONNECTING, SOCK_HELLO, SOCK_READY, SOCK_CLOSED };

typedef struct sock_conn {
    int fd;
    uint8_t state;
    colli_hs_t hs;   /* the handshake; hs.key authenticates the frame headers */
    uint64_t frames; /* frames sent (out) or received (in) on this connection */
    double since;    /* first connect attempt */
    double retry_at; /* next attempt after a transient refusal */
} sock_conn_t;

/* An accepted connection until it is authenticated: the hello, the challenge sent for it, the
 * response, and for a notice its length and text. */
typedef struct sock_pending {
    int fd;
    size_t got; /* bytes read: hello, response (+ notice length and text) */
    double since;
    struct sockaddr_storage from;
    colli_hello_t hello;
    colli_challenge_t chal;
    uint8_t resp[COLLI_RESPONSE_SIZE];
    uint32_t abort_len;
    char abort_msg[1024];
} sock_pending_t;

typedef struct sock_state {
    int tp; /* this transport's slot in the communicator */
    int listen_fd;
    /* a descriptor held back (on /dev/null) for the abort notices: a rank that fails because it
     * ran out of descriptors still has one to tell its peers why */
    int spare_fd;
    struct sockaddr_storage bind_addr;
    int nstreams;
    sock_conn_t *out; /* [nranks * nstreams] data we send */
    sock_conn_t *in;  /* [nranks * nstreams] data we receive */
    sock_pending_t *pend;
    int npend, pend_cap;
    int connecting;
    int pfd_listen; /* index of the listener in the current wait's poll set */
    unsigned accept_tick;
    /* strangers: connections dropped before a valid hello, and the WARNs said about them */
    unsigned long dropped, warned;
    double warn_at;
    uint8_t notice_seen[64][16]; /* nonces of the last notices accepted (replays are dropped) */
    unsigned notices;
    colli_probe_t *probe; /* [nranks]: peers a receive waits on that have not connected */
    bool aborted;         /* a peer's abort notice arrived */
    char abort_msg[1300];
} sock_state_t;

/* Unauthenticated connections a listener holds at once: at the cap it stops accepting (and is
 * not polled) until the held ones complete or time out (the rest wait in the backlog); once half
 * full, an address that is no member's may hold SOCK_MAX_PER_SOURCE of them. */
#define SOCK_MAX_PENDING    64
#define SOCK_MAX_PER_SOURCE 16

/* Accept connections and read hellos without blocking; install authenticated ones. Returns an
 * error when a peer's abort notice arrived. */
coll_result_t sock_accept_progress(struct coll_comm *comm, sock_state_t *s, bool *progressed);
/* Drive an outgoing connection towards SOCK_READY without blocking. */
coll_result_t sock_connect_progress(struct coll_comm *comm, sock_state_t *s, int peer, int stream,
                                    bool *progressed);

coll_result_t sock_progress(struct coll_comm *comm, int tp, colli_op_t *op, bool *progressed);
bool sock_wait_arm(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set);
coll_result_t sock_wait_done(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set);

/* Close an outgoing or incoming connection (state SOCK_CLOSED). */
void sock_close_conn(sock_conn_t *c);
/* Read the abort notices that arrived (one still coming gets a few milliseconds): the error of
 * one, so that a failure names the rank that really failed; else COLL_SUCCESS. */
coll_result_t sock_notice_first(struct coll_comm *comm, sock_state_t *s);
/* Out of descriptors doing `what` ("accept a connection"): how many this communicator needs. */
coll_result_t sock_fd_exhausted(struct coll_comm *comm, const char *what, int err);

/* Error for a broken connection to peer, preferring an abort notice that explains it. */
coll_result_t sock_peer_error(struct coll_comm *comm, sock_state_t *s, colli_op_t *op, int peer,
                              const char *what, int io, int err);

#endif
