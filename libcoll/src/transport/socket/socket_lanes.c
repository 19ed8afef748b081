/* Socket transport: moving the units of an operation's lanes, and waiting. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "transport/socket/socket.h"

static sock_conn_t *conn_of(sock_state_t *s, const colli_lane_t *l)
{
    sock_conn_t *base = l->send ? s->out : s->in;
    return &base[(size_t)l->peer * (size_t)s->nstreams + (size_t)l->stream];
}

static void fill_frame(struct coll_comm *comm, colli_op_t *op, const colli_unit_t *u,
                       colli_frame_t *f)
{
    const colli_fp_t *fp = &op->fps[u->fp];
    memset(f, 0, sizeof(*f));
    f->magic = COLLI_FRAME_MAGIC;
    f->type = COLLI_FRAME_DATA;
    f->coll = fp->coll;
    f->dtype = fp->dtype;
    f->op = fp->op;
    f->root = fp->root;
    f->unit = u->msg_unit;
    f->seq = fp->seq;
    f->count = fp->count;
    f->tag = comm->tag;
    f->len = (uint32_t)u->bytes;
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
        if (l->hdr_off == 0 && l->pay_off == 0)
            fill_frame(comm, op, u, &l->hdr);
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

static coll_result_t frame_error(struct coll_comm *comm, colli_op_t *op, const colli_lane_t *l,
                                 const colli_unit_t *u)
{
    const colli_frame_t *f = &l->hdr;
    const colli_fp_t *mine = &op->fps[u->fp];
    char who[200], md[160], td[160];
    colli_member_desc(comm, l->peer, who, sizeof(who));
    if (f->magic != COLLI_FRAME_MAGIC || f->tag != comm->tag || f->type != COLLI_FRAME_DATA)
        return COLLI_ERR(NET, COLL_ERR_REMOTE,
                         "corrupt frame from %s (magic 0x%08x, tag %s): the stream is out of "
                         "step; this is a bug or memory corruption, please report it",
                         who, f->magic, f->tag == comm->tag ? "ok" : "wrong");
    colli_fp_t theirs = {.coll = f->coll,
                         .dtype = f->dtype,
                         .op = f->op,
                         .root = f->root,
                         .count = f->count,
                         .seq = f->seq};
    colli_fp_desc(mine, md, sizeof(md));
    colli_fp_desc(&theirs, td, sizeof(td));
    bool p2p = mine->coll == COLLI_COLL_SEND_RECV;
    if (f->coll != mine->coll || f->dtype != mine->dtype || f->count != mine->count ||
        (!p2p && (f->op != mine->op || f->root != mine->root)) || f->seq != mine->seq ||
        (f->coll == COLLI_COLL_BROADCAST && f->root != mine->root)) {
        if (p2p)
            return COLLI_ERR(COLL, COLL_ERR_MISMATCH,
                             "send/recv mismatch: rank %d posted recv #%llu as %s but %s sent "
                             "message #%llu as %s. Count and datatype of each send must match "
                             "the matching recv.",
                             comm->rank, (unsigned long long)mine->seq, md, who,
                             (unsigned long long)f->seq, td);
        return COLLI_ERR(COLL, COLL_ERR_MISMATCH,
                         "collective mismatch: rank %d called %s as collective #%llu but %s "
                         "called %s as collective #%llu. Every rank must call the same "
                         "collectives in the same order with the same count, datatype, op and "
                         "root.",
                         comm->rank, md, (unsigned long long)mine->seq, who, td,
                         (unsigned long long)f->seq);
    }
    return COLLI_ERR(COLL, COLL_ERR_MISMATCH,
                     "%s #%llu: %s sent unit %u of %u bytes where rank %d expected unit %u of "
                     "%zu bytes: the ranks run different algorithms; give every rank the same "
                     "COLL_* settings",
                     md, (unsigned long long)mine->seq, who, f->unit, f->len, comm->rank,
                     u->msg_unit, u->bytes);
}

static coll_result_t recv_lane(struct coll_comm *comm, sock_state_t *s, colli_op_t *op,
                               colli_lane_t *l, bool *progressed, bool *need_accept)
{
    sock_conn_t *c = conn_of(s, l);
    if (c->fd < 0) {
        *need_accept = true;
        return COLL_SUCCESS;
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
            const colli_fp_t *fp = &op->fps[u->fp];
            const colli_frame_t *f = &l->hdr;
            if (f->magic != COLLI_FRAME_MAGIC || f->tag != comm->tag ||
                f->type != COLLI_FRAME_DATA || f->coll != fp->coll || f->dtype != fp->dtype ||
                f->op != fp->op || f->root != fp->root || f->count != fp->count ||
                f->seq != fp->seq || f->unit != u->msg_unit || f->len != u->bytes)
                return frame_error(comm, op, l, u);
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

coll_result_t sock_progress(struct coll_comm *comm, colli_op_t *op, bool *progressed)
{
    sock_state_t *s = comm->tp_state;
    bool need_accept = false;
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n)
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

coll_result_t sock_wait(struct coll_comm *comm, colli_op_t *op, int timeout_ms)
{
    sock_state_t *s = comm->tp_state;
    int need = 1 + s->npend + op->nlanes;
    if (need > s->pfd_cap) {
        struct pollfd *n = realloc(s->pfds, sizeof(*n) * (size_t)need);
        if (n == NULL)
            return COLLI_ERR(NET, COLL_ERR_SYSTEM, "out of memory waiting");
        s->pfds = n;
        s->pfd_cap = need;
    }
    int k = 0;
    s->pfds[k++] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
    for (int i = 0; i < s->npend; i++)
        s->pfds[k++] = (struct pollfd){.fd = s->pend[i].fd, .events = POLLIN};
    for (int i = 0; i < op->nlanes; i++) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n)
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
            s->pfds[k++] = (struct pollfd){.fd = c->fd, .events = ev};
    }
    int r = poll(s->pfds, (nfds_t)k, timeout_ms);
    if (r < 0 && errno != EINTR)
        return COLLI_ERR(NET, COLL_ERR_SYSTEM, "poll failed: %s", strerror(errno));
    if (r > 0 && (s->pfds[0].revents & POLLIN)) {
        bool dummy = false;
        return sock_accept_progress(comm, s, &dummy);
    }
    return COLL_SUCCESS;
}
