/* Probing a peer that has not connected yet (probe.h). The listener on the other side takes a
 * connection closed without a byte for a port check: no WARN there. */
#include <errno.h>
#include <poll.h>
#include <unistd.h>

#include "base/sockutil.h"
#include "base/util.h"
#include "transport/probe.h"
#include "transport/transport.h"

#define PROBE_AFTER   1.0  /* seconds of waiting before the first probe */
#define PROBE_MAX     30.0 /* the longest interval between probes */
#define PROBE_AGAIN   0.1  /* a refused probe is repeated after this, to be sure */
#define PROBE_CONNECT 2.0  /* a connect that takes longer is given up (no answer: no finding) */

void colli_probe_reset(colli_probe_t *p)
{
    if (p->inflight)
        close(p->fd);
    *p = (colli_probe_t){.inflight = false};
}

static coll_result_t gone(struct coll_comm *comm, int peer, double waited)
{
    /* a rank that fails sends its abort notices before it exits: its own reason says more */
    coll_result_t st = colli_tp_await_notice(comm, 0.5);
    if (st != COLL_SUCCESS)
        return st;
    char who[200], d[160];
    const colli_op_t *op = comm->cur_op;
    colli_member_desc(comm, peer, who, sizeof(who));
    colli_comm_blame(comm, peer);
    return COLLI_ERR(NET, COLL_ERR_REMOTE,
                     "%s is gone: rank %d waited %.1f s for it to connect (%s #%llu), and its "
                     "listener now refuses connections: the peer process died, aborted or "
                     "destroyed its communicator early, before it had sent anything to rank %d",
                     who, comm->rank, waited, colli_op_desc(op, d, sizeof(d)), colli_op_seq(op),
                     comm->rank);
}

/* A probe ended with err (0: accepted, or nothing learned). */
static coll_result_t ended(struct coll_comm *comm, colli_probe_t *p, int peer, int err, double now)
{
    if (err == ECONNREFUSED) {
        if (++p->refused >= 2)
            return gone(comm, peer, now - p->since);
        p->next_at = now + PROBE_AGAIN;
        return COLL_SUCCESS;
    }
    p->refused = 0;
    p->every = p->every * 2 > PROBE_MAX ? PROBE_MAX : p->every * 2;
    p->next_at = now + p->every;
    return COLL_SUCCESS;
}

coll_result_t colli_probe_step(struct coll_comm *comm, colli_probe_t *p, int peer,
                               const struct sockaddr_storage *bind_addr)
{
    const double now = colli_now();
    if (p->since == 0) {
        const double quarter = comm->cfg.timeout / 4;
        p->every = quarter < PROBE_AFTER ? quarter > 0.05 ? quarter : 0.05 : PROBE_AFTER;
        p->since = now;
        p->next_at = now + p->every;
        return COLL_SUCCESS;
    }
    if (!p->inflight) {
        if (now < p->next_at)
            return COLL_SUCCESS;
        if (colli_sock_connect_start(&comm->members[peer].addr, bind_addr, &p->fd) !=
            COLLI_IO_OK) /* refused at once, or out of descriptors, no route: nothing learned */
            return ended(comm, p, peer, errno == ECONNREFUSED ? ECONNREFUSED : 0, now);
        p->inflight = true;
        p->started = now;
    }
    struct pollfd pf = {.fd = p->fd, .events = POLLOUT};
    if (poll(&pf, 1, 0) <= 0 && now - p->started < PROBE_CONNECT)
        return COLL_SUCCESS;
    int err = 0;
    socklen_t len = sizeof(err);
    if (pf.revents == 0 || getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = 0; /* no answer: a network cut, or a host that is down */
    close(p->fd);
    p->inflight = false;
    return ended(comm, p, peer, err, now);
}
