/* Socket transport: outgoing connections (connect, handshake, the errors of a connection that
 * fails), and the errors that prefer a peer's abort notice. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "transport/socket/socket.h"

/* A peer that went away may have explained itself with an abort notice first (it sends its
 * notices before it exits): read pending notices, giving one still being read a few
 * milliseconds, so that the error names the rank that really failed. */
coll_result_t sock_notice_first(struct coll_comm *comm, sock_state_t *s)
{
    double until = colli_now() + 0.02;
    for (;;) {
        bool dummy = false;
        coll_result_t st = sock_accept_progress(comm, s, &dummy);
        if (st != COLL_SUCCESS || s->npend == 0 || colli_now() >= until)
            return st;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

/* This rank's address (without its port, meaningless here) and peer's, for a connection from
 * this rank that failed; the failure is blamed on peer. */
static void pair_of(struct coll_comm *comm, sock_state_t *s, int peer, char mine[80],
                    char theirs[80])
{
    colli_sockaddr_str(&s->bind_addr, mine, 80);
    colli_sockaddr_str(&comm->members[peer].addr, theirs, 80);
    char *colon = strrchr(mine, ':');
    if (colon)
        *colon = '\0';
    colli_comm_blame(comm, peer);
}

/* "rank A (addr) cannot reach rank B (addr)": the pair and both addresses. */
static coll_result_t unreachable(struct coll_comm *comm, sock_state_t *s, int peer, int err)
{
    coll_result_t st = sock_notice_first(comm, s);
    if (st != COLL_SUCCESS)
        return st;
    char mine[80], theirs[80];
    pair_of(comm, s, peer, mine, theirs);
    return COLLI_ERR(NET, COLL_ERR_NETWORK,
                     "rank %d (%s) cannot reach rank %d (%s): %s. The process died or destroyed "
                     "its communicator, or the two addresses are on networks that do not route to "
                     "each other (pin one network on every rank with COLL_SOCKET_IFNAME).",
                     comm->rank, mine, peer, theirs, strerror(err));
}

/* A connect that had no answer for COLLI_CONNECT_SILENT_S: the pair, both addresses, why. */
static coll_result_t silent(struct coll_comm *comm, sock_state_t *s, int peer, double waited)
{
    char mine[80], theirs[80];
    pair_of(comm, s, peer, mine, theirs);
    return COLLI_ERR(NET, COLL_ERR_NETWORK,
                     "rank %d (%s) cannot reach rank %d (%s): no answer to its connection "
                     "request for %.0f s (not accepted, not refused): " COLLI_SILENT_ADVICE,
                     comm->rank, mine, peer, theirs, waited);
}

/* Out of descriptors: say how many this communicator needs. */
coll_result_t sock_fd_exhausted(struct coll_comm *comm, const char *what, int err)
{
    char advice[512];
    colli_fd_advice(comm, err, advice, sizeof(advice));
    return COLLI_ERR(NET, COLL_ERR_SYSTEM, "rank %d cannot %s: %s; %s", comm->rank, what,
                     strerror(err), advice);
}

/* The handshake of an outgoing connection failed: the peer closed it (it died, or dropped us),
 * or it answered without the secret (another program owns that address now). */
static coll_result_t handshake_failed(struct coll_comm *comm, sock_state_t *s, sock_conn_t *c,
                                      int peer, int rc, int err)
{
    sock_close_conn(c);
    /* a peer that fails closes the connections it has not authenticated yet, then sends its
     * notices: give the notice a moment to arrive (a killed peer costs this moment) */
    coll_result_t st =
        rc == COLLI_HS_BADAUTH ? sock_notice_first(comm, s) : colli_tp_await_notice(comm, 0.5);
    if (st != COLL_SUCCESS)
        return st;
    char who[200], theirs[80];
    colli_member_desc(comm, peer, who, sizeof(who));
    colli_sockaddr_str(&comm->members[peer].addr, theirs, sizeof(theirs));
    colli_comm_blame(comm, peer);
    if (rc == COLLI_HS_BADAUTH)
        return COLLI_ERR(NET, COLL_ERR_REMOTE,
                         "the listener of %s at %s answered without this communicator's secret: "
                         "another program holds that address now (the rank died and its port "
                         "was reused?), or something on the network interferes",
                         who, theirs);
    return COLLI_ERR(NET, COLL_ERR_REMOTE, "connection to %s failed during the handshake: %s", who,
                     colli_hs_str(rc, err));
}

coll_result_t sock_connect_progress(struct coll_comm *comm, sock_state_t *s, int peer, int stream,
                                    bool *progressed)
{
    sock_conn_t *c = &s->out[(size_t)peer * (size_t)s->nstreams + (size_t)stream];
    char who[200];
    if (c->state == SOCK_NONE) {
        if (s->connecting >= comm->cfg.max_connecting || colli_now() < c->retry_at)
            return COLL_SUCCESS; /* bounded: wait for earlier connects, or back off */
        int io = colli_sock_connect_start(&comm->members[peer].addr, &s->bind_addr, &c->fd);
        if (io != COLLI_IO_OK) {
            int e = errno;
            c->fd = -1;
            if (e == EMFILE || e == ENFILE)
                return sock_fd_exhausted(comm, "connect", e);
            return unreachable(comm, s, peer, e);
        }
        if (c->state == SOCK_NONE && c->since == 0)
            c->since = colli_now();
        c->state = SOCK_CONNECTING;
        s->connecting++;
        *progressed = true;
    }
    if (c->state == SOCK_CONNECTING) {
        struct pollfd p = {.fd = c->fd, .events = POLLOUT};
        if (poll(&p, 1, 0) <= 0) {
            const double waited = colli_now() - c->since;
            if (waited < COLLI_CONNECT_SILENT_S)
                return COLL_SUCCESS;
            s->connecting--;
            sock_close_conn(c);
            return silent(comm, s, peer, waited);
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        s->connecting--;
        if (err != 0) {
            close(c->fd);
            c->fd = -1;
            /* A refused or overloaded listener gets a few retries within a short window: a
             * storm of connects can transiently overflow a peer's backlog. */
            bool transient =
                err == ECONNREFUSED || err == EAGAIN || err == ETIMEDOUT || err == EINTR;
            if (transient && colli_now() - c->since < 2.0) {
                c->state = SOCK_NONE;
                c->retry_at = colli_now() + 0.02;
                *progressed = true;
                return COLL_SUCCESS;
            }
            c->state = SOCK_CLOSED;
            return unreachable(comm, s, peer, err);
        }
        if (colli_hs_begin(&c->hs, c->fd, comm->secret, COLLI_HELLO_DATA, comm->rank, peer,
                           (uint32_t)stream, (uint32_t)comm->nranks) != COLLI_IO_OK)
            return handshake_failed(comm, s, c, peer, COLLI_IO_ERR, errno);
        c->state = SOCK_HELLO;
        *progressed = true;
    }
    if (c->state == SOCK_HELLO) {
        /* the peer answers our hello with a challenge once its progress sees the connection */
        int rc = colli_hs_step(&c->hs, c->fd, comm->secret);
        if (rc == COLLI_HS_AGAIN)
            return COLL_SUCCESS;
        if (rc != COLLI_IO_OK)
            return handshake_failed(comm, s, c, peer, rc, errno);
        c->state = SOCK_READY;
        c->frames = 0;
        *progressed = true;
    }
    if (c->state == SOCK_CLOSED) {
        colli_member_desc(comm, peer, who, sizeof(who));
        colli_comm_blame(comm, peer);
        return COLLI_ERR(NET, COLL_ERR_REMOTE, "connection to %s was closed after an error", who);
    }
    return COLL_SUCCESS;
}

coll_result_t sock_peer_error(struct coll_comm *comm, sock_state_t *s, colli_op_t *op, int peer,
                              const char *what, int io, int err)
{
    /* The peer may have explained itself with an abort notice before closing: prefer that. */
    coll_result_t st = sock_notice_first(comm, s);
    if (st != COLL_SUCCESS)
        return st;
    char who[200], d[160];
    colli_member_desc(comm, peer, who, sizeof(who));
    const char *cause = io == COLLI_IO_EOF                  ? "closed the connection"
                        : err == ECONNRESET || err == EPIPE ? "reset the connection"
                                                            : strerror(err);
    colli_comm_blame(comm, peer);
    return COLLI_ERR(NET, COLL_ERR_REMOTE,
                     "%s %s while %s %s #%llu on rank %d: the peer process died, aborted or "
                     "destroyed its communicator early (%s)",
                     who, cause, what, colli_op_desc(op, d, sizeof(d)), colli_op_seq(op),
                     comm->rank, io == COLLI_IO_EOF ? "end of stream" : strerror(err));
}
