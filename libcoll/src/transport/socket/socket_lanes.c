/* Socket transport: moving the units of an operation's lanes, and waiting. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "plan/frame.h"
#include "transport/socket/socket.h"

static sock_conn_t *conn_of(sock_state_t *s, const colli_lane_t *l)
{
    sock_conn_t *base = l->send ? s->out : s->in;
    return &base[(size_t)l->peer * (size_t)s->nstreams + (size_t)l->stream];
}

static coll_result_t send_lane(struct coll_comm *comm, sock_state_t *s, colli_op_t *op,
                               colli_lane_t *l, bool *progressed)
{
    sock_conn_t *c = conn_of(s, l);
    if (c->state != SOCK_READY) {
        coll_result_t st = sock_connect_progress(comm, s, l->peer, l->stream, progressed);
        if (st != COLL_SUCCESS || c->state != SOCK_READY)
            return st;
    }
    while (l->done < l->n) {
        colli_unit_t *u = &l->units[l->done];
        if (!colli_dep_done(op, u->dep))
            return COLL_SUCCESS;
        if (l->hdr_off == 0 && l->pay_off == 0) {
            colli_frame_fill(comm, op, u, &l->hdr);
            uint64_t at = c->frames++;
            if (comm->test.frame_replay >= 2 && at + 1 == (uint64_t)comm->test.frame_replay)
                at--; /* test seam: as a replay of the frame before would arrive */
            l->hdr.tag = colli_frame_mac(c->hs.key, &l->hdr, at);
        }
        struct iovec iov[2];
        int n = 0;
        if (l->hdr_off < sizeof(l->hdr))
            iov[n++] = (struct iovec){(char *)&l->hdr + l->hdr_off, sizeof(l->hdr) - l->hdr_off};
        if (l->pay_off < u->bytes)
            iov[n++] = (struct iovec){u->buf + l->pay_off, u->bytes - l->pay_off};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t w = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return COLL_SUCCESS;
            return sock_peer_error(comm, s, op, l->peer, "sending", COLLI_IO_ERR, errno);
        }
        *progressed = true;
        size_t wrote = (size_t)w;
        size_t h = sizeof(l->hdr) - l->hdr_off;
        if (wrote < h) {
            l->hdr_off += wrote;
            return COLL_SUCCESS;
        }
        l->hdr_off = sizeof(l->hdr);
        l->pay_off += wrote - h;
        if (l->pay_off < u->bytes)
            return COLL_SUCCESS;
        colli_op_unit_done(op, l);
    }
    return COLL_SUCCESS;
}

/* A header whose MAC does not verify: bytes injected into the connection, or frames replayed or
 * reordered on it. Nothing of it is used. */
static coll_result_t frame_forged(struct coll_comm *comm, const colli_op_t *op, int peer,
                                  uint64_t frame)
{
    char who[200], d[160];
    colli_member_desc(comm, peer, who, sizeof(who));
    colli_comm_blame(comm, peer);
    return COLLI_ERR(NET, COLL_ERR_NETWORK,
                     "frame %llu on the connection from %s failed authentication in %s #%llu on "
                     "rank %d: bytes were injected, replayed or reordered on the network between "
                     "the two ranks (an attacker, or a faulty middlebox); nothing of it was used, "
                     "and this communicator cannot continue",
                     (unsigned long long)frame, who, colli_op_desc(op, d, sizeof(d)),
                     colli_op_seq(op), comm->rank);
}

static coll_result_t recv_lane(struct coll_comm *comm, sock_state_t *s, colli_op_t *op,
                               colli_lane_t *l, bool *progressed, bool *need_accept)
{
    sock_conn_t *c = conn_of(s, l);
    if (c->fd < 0) { /* the peer has not connected yet: is it still there? */
        *need_accept = true;
        return colli_probe_step(comm, &s->probe[l->peer], l->peer, &s->bind_addr);
    }
    while (l->done < l->n) {
        colli_unit_t *u = &l->units[l->done];
        if (l->staged) {
            if (!colli_dep_done(op, u->dep))
                return COLL_SUCCESS;
            colli_op_unit_done(op, l);
            *progressed = true;
            continue;
        }
        if (u->kind == COLLI_UNIT_RECV_COPY && !colli_dep_done(op, u->dep))
            return COLL_SUCCESS;
        char *dst = u->buf;
        if (u->kind == COLLI_UNIT_RECV_REDUCE) {
            size_t slot = (size_t)l->peer * (size_t)s->nstreams + (size_t)l->stream;
            if (comm->staging[slot] == NULL) {
                comm->staging[slot] = aligned_alloc(64, comm->members[0].chunk_size);
                if (comm->staging[slot] == NULL)
                    return COLLI_ERR(NET, COLL_ERR_SYSTEM, "out of memory for staging");
            }
            l->staging = comm->staging[slot];
            dst = l->staging;
        }
        struct iovec iov[2];
        int n = 0;
        if (l->hdr_off < sizeof(l->hdr))
            iov[n++] = (struct iovec){(char *)&l->hdr + l->hdr_off, sizeof(l->hdr) - l->hdr_off};
        if (l->pay_off < u->bytes)
            iov[n++] = (struct iovec){dst + l->pay_off, u->bytes - l->pay_off};
        struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        ssize_t r = recvmsg(c->fd, &mh, MSG_DONTWAIT);
        if (r == 0)
            return sock_peer_error(comm, s, op, l->peer, "receiving", COLLI_IO_EOF, 0);
        if (r < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return COLL_SUCCESS;
            return sock_peer_error(comm, s, op, l->peer, "receiving", COLLI_IO_ERR, errno);
        }
        *progressed = true;
        size_t got = (size_t)r;
        size_t h = sizeof(l->hdr) - l->hdr_off;
        if (got < h) {
            l->hdr_off += got;
            return COLL_SUCCESS;
        }
        if (l->hdr_off < sizeof(l->hdr)) {
            l->hdr_off = sizeof(l->hdr);
            if (l->hdr.tag != colli_frame_mac(c->hs.key, &l->hdr, c->frames))
                return frame_forged(comm, op, l->peer, c->frames);
            c->frames++;
            l->hdr.tag = comm->tag; /* authentic: compared as any transport's header now */
            colli_frame_t want;
            colli_frame_fill(comm, op, u, &want);
            if (!colli_frame_matches(&l->hdr, &want))
                return colli_frame_error(comm, op, l->peer, u, &l->hdr);
        }
        l->pay_off += got - h;
        if (l->pay_off < u->bytes)
            return COLL_SUCCESS;
        if (u->kind == COLLI_UNIT_RECV_REDUCE && !colli_dep_done(op, u->dep)) {
            l->staged = true;
            return COLL_SUCCESS;
        }
        colli_op_unit_done(op, l);
    }
    return COLL_SUCCESS;
}

coll_result_t sock_progress(struct coll_comm *comm, int tp, colli_op_t *op, bool *progressed)
{
    sock_state_t *s = comm->tp[tp].state;
    bool need_accept = false;
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || l->tp != tp)
            continue;
        coll_result_t st = l->send ? send_lane(comm, s, op, l, progressed)
                                   : recv_lane(comm, s, op, l, progressed, &need_accept);
        if (st != COLL_SUCCESS)
            return st;
    }
    /* New connections and abort notices: when a lane waits for one, and now and then. */
    if (need_accept || s->npend > 0 || (++s->accept_tick & 255) == 0)
        return sock_accept_progress(comm, s, progressed);
    return COLL_SUCCESS;
}

static bool lane_can_read(const colli_op_t *op, const colli_lane_t *l)
{
    if (l->done == l->n)
        return false;
    const colli_unit_t *u = &l->units[l->done];
    if (l->staged)
        return false;
    return u->kind != COLLI_UNIT_RECV_COPY || colli_dep_done(op, u->dep);
}

bool sock_wait_arm(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set)
{
    sock_state_t *s = comm->tp[tp].state;
    /* at the cap the listener is not watched: its backlog would wake every poll at once */
    s->pfd_listen = s->npend < SOCK_MAX_PENDING ? colli_pollset_add(set, s->listen_fd, POLLIN) : -1;
    for (int i = 0; i < s->npend; i++)
        colli_pollset_add(set, s->pend[i].fd, POLLIN);
    for (int i = 0; op != NULL && i < op->nlanes; i++) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || l->tp != tp)
            continue;
        const sock_conn_t *c = conn_of(s, l);
        if (c->fd < 0)
            continue;
        short ev = 0;
        if (l->send) {
            if (c->state != SOCK_READY || colli_dep_done(op, l->units[l->done].dep))
                ev = POLLOUT;
        } else if (lane_can_read(op, l)) {
            ev = POLLIN;
        }
        if (ev)
            colli_pollset_add(set, c->fd, ev);
    }
    return false;
}

coll_result_t sock_wait_done(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set)
{
    sock_state_t *s = comm->tp[tp].state;
    int i = s->pfd_listen;
    s->pfd_listen = -1;
    if (s->npend > 0 || (i >= 0 && i < set->n && (set->fds[i].revents & POLLIN))) {
        bool dummy = false;
        return sock_accept_progress(comm, s, &dummy);
    }
    return COLL_SUCCESS;
}
