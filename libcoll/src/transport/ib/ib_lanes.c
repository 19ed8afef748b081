/* InfiniBand transport: its rings (RDMA writes with immediate data, credits) as the shared lane
 * loop (transport/slots.h) moves them, completion polling and waiting (see ib.h). */
#include <arpa/inet.h>
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "transport/ib/ib.h"
#include "transport/slots.h"

#ifdef COLLI_HAVE_VERBS

enum { WR_DATA = 1, WR_CREDIT = 2, WR_RECV = 3 };
#define IMM_CREDIT 0x80000000u
#define IMM_MASK   0x7fffffffu

static uint64_t wr_id(int p, int q, int kind)
{
    return ((uint64_t)(uint32_t)p << 16) | ((uint64_t)q << 8) | (uint64_t)kind;
}

int ib_post_recv(ib_state_t *st, int p, int q)
{
    struct ibv_recv_wr wr = {.wr_id = wr_id(p, q, WR_RECV), .num_sge = 0}, *bad = NULL;
    struct ibv_qp *qp = st->peers[p].qp[q];
    return qp->context->ops.post_recv(qp, &wr, &bad);
}

void ib_link_read(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    while (pp->fd >= 0 && !pp->gone && pp->link == IBL_READY) { /* not during the exchange */
        char buf[16];
        ssize_t n = recv(pp->fd, buf, sizeof(buf), MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
            return;
        if (n <= 0) {
            pp->gone = true;
            pp->gone_err = n < 0 ? errno : 0;
            coll_debug(IB, "rank %d: the InfiniBand link to rank %d ended (%s%s)", comm->rank, p,
                       n < 0 ? strerror(errno) : "end of stream", pp->bye ? ", after goodbye" : "");
            return;
        }
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] == 'B')
                pp->bye = true;
    }
}

coll_result_t ib_gone_error(struct coll_comm *comm, const ib_state_t *st, colli_op_t *op, int peer,
                            const char *what)
{
    char via[96];
    snprintf(via, sizeof(via), "InfiniBand (%s port %d)", st->port.dev, st->port.port);
    return colli_tp_peer_left(comm, COLLI_SUB_IB, op, peer, what, via, st->peers[peer].gone_err);
}

/* A work completion with an error status: name the verb's status, the HCA, the port and the
 * peer, and blame the peer (a departed peer is reported as such). */
static coll_result_t wc_error(struct coll_comm *comm, ib_state_t *st, colli_op_t *op,
                              const struct ibv_wc *wc, int p, int q, int kind)
{
    if (p >= 0 && p < comm->nranks && st->peers[p].used) {
        ib_link_read(comm, st, p);
        if (st->peers[p].gone && !st->peers[p].bye)
            return ib_gone_error(comm, st, op, p,
                                 kind == WR_RECV ? "receiving from" : "sending to");
    }
    char who[200], d[160];
    colli_member_desc(comm, p, who, sizeof(who));
    colli_comm_blame(comm, p);
    const char *what = kind == WR_DATA     ? "an RDMA write to"
                       : kind == WR_CREDIT ? "a credit message to"
                                           : "a receive from";
    const bool flushed = wc->status == IBV_WC_WR_FLUSH_ERR;
    return COLLI_ERR(IB, COLL_ERR_NETWORK,
                     "InfiniBand work completion error on rank %d: %s (status %d, vendor error "
                     "0x%x) for %s %s on %s port %d (QP %d of %d, qp_num 0x%x) in %s #%llu%s. "
                     "Check the link of both hosts (ibstat, the switch), COLL_IB_HCA and "
                     "COLL_IB_GID_INDEX; a retry-exceeded error also follows a peer that hung.",
                     comm->rank, st->v.wc_status_str(wc->status), (int)wc->status,
                     (unsigned)wc->vendor_err, what, who, st->port.dev, st->port.port, q,
                     st->peers[p].nqps, wc->qp_num, colli_op_desc(op, d, sizeof(d)),
                     colli_op_seq(op),
                     flushed ? ": the queue pair is in the error state (an earlier error on it, "
                               "or the HCA moved it there), so every request on it is flushed"
                             : "");
}

static coll_result_t proto_error(struct coll_comm *comm, ib_state_t *st, int p, const char *what,
                                 uint32_t imm)
{
    char who[200];
    colli_member_desc(comm, p, who, sizeof(who));
    colli_comm_blame(comm, p);
    return COLLI_ERR(IB, COLL_ERR_REMOTE,
                     "InfiniBand stream from %s out of step on rank %d (%s port %d): %s (immediate "
                     "0x%08x); this is a bug, please report it",
                     who, comm->rank, st->port.dev, st->port.port, what, imm);
}

/* Read async events: a port going down or a fatal QP/CQ/device error fails the communicator. */
coll_result_t ib_async_events(struct coll_comm *comm, ib_state_t *st, colli_op_t *op)
{
    struct ibv_async_event ev;
    while (st->v.get_async_event(st->ctx, &ev) == 0) {
        enum ibv_event_type t = ev.event_type;
        int peer = -1, port = st->port.port;
        if (t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR || t == IBV_EVENT_QP_ACCESS_ERR)
            for (int p = 0; p < comm->nranks && peer < 0; p++)
                for (int q = 0; st->peers[p].used && q < IB_MAX_QPS; q++)
                    if (st->peers[p].qp[q] == ev.element.qp)
                        peer = p;
        if (t == IBV_EVENT_PORT_ERR || t == IBV_EVENT_PORT_ACTIVE)
            port = ev.element.port_num;
        st->v.ack_async_event(&ev);
        bool fatal = (t == IBV_EVENT_PORT_ERR && port == st->port.port) ||
                     t == IBV_EVENT_DEVICE_FATAL || t == IBV_EVENT_CQ_ERR ||
                     t == IBV_EVENT_QP_FATAL || t == IBV_EVENT_QP_REQ_ERR ||
                     t == IBV_EVENT_QP_ACCESS_ERR;
        if (!fatal) {
            coll_debug(IB, "rank %d: async event %s on %s", comm->rank, st->v.event_type_str(t),
                       st->port.dev);
            continue;
        }
        char who[200] = "", d[160];
        if (peer >= 0) {
            char w[180];
            colli_member_desc(comm, peer, w, sizeof(w));
            snprintf(who, sizeof(who), " on the QP to %s", w);
            colli_comm_blame(comm, peer);
        }
        return COLLI_ERR(
            IB, COLL_ERR_NETWORK, "InfiniBand %s on rank %d: %s port %d%s (%s) during %s. %s",
            t == IBV_EVENT_PORT_ERR ? "port went down" : "fatal error", comm->rank, st->port.dev,
            st->port.port, who, st->v.event_type_str(t), colli_op_desc(op, d, sizeof(d)),
            t == IBV_EVENT_PORT_ERR
                ? "Check the cable, the switch port and the subnet manager (ibstat)."
                : "Check dmesg and the HCA's firmware.");
    }
    return COLL_SUCCESS;
}

/* A flushed request only says that its QP is in the error state: the completion that put it
 * there (a retry-exceeded write, a remote access error) may come later in the CQ, after the
 * flushes of the other queue. Look for it among the completions already polled (rest), then in
 * the CQ for at most 200 ms, and report it; the flush itself when none comes. */
static coll_result_t flushed_error(struct coll_comm *comm, ib_state_t *st, colli_op_t *op,
                                   const struct ibv_wc *flush, const struct ibv_wc *rest, int nrest)
{
    struct ibv_wc wc[32];
    double deadline = colli_now() + 0.2;
    for (;;) {
        for (int i = 0; i < nrest; i++) {
            int p = (int)(rest[i].wr_id >> 16), q = (int)((rest[i].wr_id >> 8) & 0xff);
            if (rest[i].status != IBV_WC_SUCCESS && rest[i].status != IBV_WC_WR_FLUSH_ERR &&
                p >= 0 && p < comm->nranks && st->peers[p].used && q < IB_MAX_QPS)
                return wc_error(comm, st, op, &rest[i], p, q, (int)(rest[i].wr_id & 0xff));
        }
        if (colli_now() >= deadline)
            break;
        nrest = st->cq->context->ops.poll_cq(st->cq, 32, wc);
        if (nrest < 0)
            break;
        rest = wc;
        if (nrest == 0)
            sched_yield();
    }
    int p = (int)(flush->wr_id >> 16), q = (int)((flush->wr_id >> 8) & 0xff);
    return wc_error(comm, st, op, flush, p, q, (int)(flush->wr_id & 0xff));
}

coll_result_t ib_poll(struct coll_comm *comm, ib_state_t *st, bool *progressed)
{
    colli_op_t *op = comm->cur_op;
    struct ibv_wc wc[32];
    for (;;) {
        int n = st->cq->context->ops.poll_cq(st->cq, 32, wc);
        if (n < 0)
            return COLLI_ERR(IB, COLL_ERR_NETWORK,
                             "rank %d: polling the completion queue of %s port %d failed (%d)",
                             comm->rank, st->port.dev, st->port.port, n);
        for (int i = 0; i < n; i++) {
            int p = (int)(wc[i].wr_id >> 16), q = (int)((wc[i].wr_id >> 8) & 0xff);
            int kind = (int)(wc[i].wr_id & 0xff);
            if (p < 0 || p >= comm->nranks || !st->peers[p].used || q >= IB_MAX_QPS)
                return COLLI_ERR(IB, COLL_ERR_INTERNAL,
                                 "rank %d: completion for unknown work "
                                 "request 0x%llx",
                                 comm->rank, (unsigned long long)wc[i].wr_id);
            ib_peer_t *pp = &st->peers[p];
            if (wc[i].status != IBV_WC_SUCCESS) {
                /* a credit (or a flushed request) to a peer that has left needs no answer */
                ib_link_read(comm, st, p);
                if (pp->gone && (kind == WR_CREDIT || wc[i].status == IBV_WC_WR_FLUSH_ERR)) {
                    if (kind != WR_RECV)
                        pp->sq_used[q]--;
                    continue;
                }
                if (wc[i].status == IBV_WC_WR_FLUSH_ERR)
                    return flushed_error(comm, st, op, &wc[i], wc + i + 1, n - i - 1);
                return wc_error(comm, st, op, &wc[i], p, q, kind);
            }
            *progressed = true;
            if (kind != WR_RECV) {
                pp->sq_used[q]--;
                continue;
            }
            if (!(wc[i].wc_flags & IBV_WC_WITH_IMM))
                return proto_error(comm, st, p, "a message without immediate data", 0);
            uint32_t imm = ntohl(wc[i].imm_data);
            if (wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM && !(imm & IMM_CREDIT)) {
                uint64_t off = (imm - (uint32_t)pp->rx_pos) & IMM_MASK;
                if (off >= IB_NSLOTS)
                    return proto_error(comm, st, p, "a write beyond the credit window", imm);
                uint64_t pos = pp->rx_pos + off;
                pp->rx_ready[pos % IB_NSLOTS] = pos + 1;
            } else if (wc[i].opcode == IBV_WC_RECV && (imm & IMM_CREDIT)) {
                uint64_t tail = pp->tx_tail + ((imm - (uint32_t)pp->tx_tail) & IMM_MASK);
                if (tail > pp->tx_pos)
                    return proto_error(comm, st, p, "credits for slots never written", imm);
                pp->tx_tail = tail;
            } else {
                return proto_error(comm, st, p, "an unexpected message", imm);
            }
            int rc = ib_post_recv(st, p, q);
            if (rc != 0)
                return COLLI_ERR(IB, COLL_ERR_NETWORK,
                                 "rank %d: ibv_post_recv on %s port %d failed: %s", comm->rank,
                                 st->port.dev, st->port.port, strerror(rc));
        }
        if (n < 32)
            return COLL_SUCCESS;
    }
}

/* Return consumed slots to the peer as credits (a zero-byte send with immediate data). */
static coll_result_t send_credit(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    if (pp->rx_credited == pp->rx_pos || pp->sq_used[0] >= IB_SQ_DEPTH || pp->gone)
        return COLL_SUCCESS; /* nothing new, or retried after the next completion */
    struct ibv_send_wr wr = {.wr_id = wr_id(p, 0, WR_CREDIT),
                             .num_sge = 0,
                             .opcode = IBV_WR_SEND_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl(IMM_CREDIT | ((uint32_t)pp->rx_pos & IMM_MASK))},
                       *bad = NULL;
    int rc = pp->qp[0]->context->ops.post_send(pp->qp[0], &wr, &bad);
    if (rc != 0) {
        char who[200];
        colli_member_desc(comm, p, who, sizeof(who));
        colli_comm_blame(comm, p);
        return COLLI_ERR(IB, COLL_ERR_NETWORK,
                         "rank %d: posting a credit message to %s on %s port %d failed: %s",
                         comm->rank, who, st->port.dev, st->port.port, strerror(rc));
    }
    pp->sq_used[0]++;
    pp->rx_credited = pp->rx_pos;
    return COLL_SUCCESS;
}

/* ---- the rings, as the shared lane loop (transport/slots.h) sees them ---- */

COLLI_SLOT_OP size_t ring_cap(void *stp, int peer, bool send)
{
    return IB_SLOT_CAP;
}

COLLI_SLOT_OP coll_result_t tx_ready(struct coll_comm *comm, void *stp, colli_op_t *op, int peer)
{
    ib_state_t *st = stp;
    return st->peers[peer].gone ? ib_gone_error(comm, st, op, peer, "sending to") : COLL_SUCCESS;
}

COLLI_SLOT_OP bool tx_slot(void *stp, int peer, size_t frag, colli_frame_t **hdr, char **payload)
{
    ib_peer_t *pp = &((ib_state_t *)stp)->peers[peer];
    if (pp->tx_pos - pp->tx_tail >= IB_NSLOTS)
        return false; /* no credit */
    int q = (int)(pp->tx_pos % (uint64_t)pp->nqps);
    /* keep one send slot of QP 0 for credits */
    if (pp->sq_used[q] >= IB_SQ_DEPTH - (q == 0))
        return false;
    char *slot = pp->tx + (size_t)(pp->tx_pos % IB_NSLOTS) * IB_SLOT_SIZE;
    *hdr = (colli_frame_t *)slot;
    *payload = slot + IB_SLOT_HDR;
    return true;
}

COLLI_SLOT_OP coll_result_t tx_publish(struct coll_comm *comm, void *stp, int peer, size_t frag)
{
    ib_state_t *st = stp;
    ib_peer_t *pp = &st->peers[peer];
    int q = (int)(pp->tx_pos % (uint64_t)pp->nqps);
    size_t slot = (size_t)(pp->tx_pos % IB_NSLOTS) * IB_SLOT_SIZE;
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)(pp->tx + slot),
                          .length = (uint32_t)(IB_SLOT_HDR + frag),
                          .lkey = pp->tx_mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id(peer, q, WR_DATA),
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
                             .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl((uint32_t)pp->tx_pos & IMM_MASK)},
                       *bad = NULL;
    wr.wr.rdma.remote_addr = pp->r_addr + slot;
    wr.wr.rdma.rkey = pp->r_rkey;
    if (++st->writes == st->qp_error_at) { /* COLL_TEST_IB_QP_ERROR */
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
        int mrc = st->v.modify_qp(pp->qp[q], &a, IBV_QP_STATE);
        coll_warn(IB, "rank %d: test hook: QP %d to rank %d forced into the error state (%s)",
                  comm->rank, q, peer, mrc == 0 ? "done" : strerror(mrc));
    }
    int rc = pp->qp[q]->context->ops.post_send(pp->qp[q], &wr, &bad);
    if (rc != 0) {
        char who[200];
        colli_member_desc(comm, peer, who, sizeof(who));
        colli_comm_blame(comm, peer);
        return COLLI_ERR(IB, COLL_ERR_NETWORK,
                         "rank %d: posting an RDMA write to %s on %s port %d failed: %s",
                         comm->rank, who, st->port.dev, st->port.port, strerror(rc));
    }
    pp->sq_used[q]++;
    pp->tx_pos++;
    return COLL_SUCCESS;
}

COLLI_SLOT_OP coll_result_t rx_ready(struct coll_comm *comm, void *stp, colli_op_t *op, int peer,
                                     bool *ready)
{
    *ready = true;
    return COLL_SUCCESS;
}

COLLI_SLOT_OP bool rx_slot(void *stp, int peer, size_t frag, const colli_frame_t **hdr,
                           const char **payload)
{
    ib_peer_t *pp = &((ib_state_t *)stp)->peers[peer];
    size_t idx = (size_t)(pp->rx_pos % IB_NSLOTS);
    if (pp->rx_ready[idx] != pp->rx_pos + 1)
        return false;
    const char *slot = pp->rx + idx * IB_SLOT_SIZE;
    *hdr = (const colli_frame_t *)slot;
    *payload = slot + IB_SLOT_HDR;
    return true;
}

COLLI_SLOT_OP void rx_release(void *stp, int peer)
{
    ib_peer_t *pp = &((ib_state_t *)stp)->peers[peer];
    pp->rx_ready[pp->rx_pos % IB_NSLOTS] = 0;
    pp->rx_pos++;
}

COLLI_SLOT_OP coll_result_t gone(struct coll_comm *comm, void *stp, colli_op_t *op, int peer,
                                 const char *what)
{
    ib_state_t *st = stp;
    return st->peers[peer].gone ? ib_gone_error(comm, st, op, peer, what) : COLL_SUCCESS;
}

/* A receiving lane returns the slots it consumed as credits. */
COLLI_SLOT_OP coll_result_t end(struct coll_comm *comm, void *stp, const colli_lane_t *l,
                                bool moved, coll_result_t status)
{
    if (l->send || status != COLL_SUCCESS)
        return status;
    return send_credit(comm, stp, l->peer);
}

static const colli_slot_ops_t ib_slots = {
    .sub = COLLI_SUB_IB,
    .what = "InfiniBand",
    .cap = ring_cap,
    .tx_ready = tx_ready,
    .tx_slot = tx_slot,
    .tx_publish = tx_publish,
    .rx_ready = rx_ready,
    .rx_slot = rx_slot,
    .rx_release = rx_release,
    .gone = gone,
    .end = end,
};

coll_result_t ib_progress(struct coll_comm *comm, int tp, colli_op_t *op, bool *progressed)
{
    ib_state_t *st = comm->tp[tp].state;
    coll_result_t status;
    if (st->failed != COLL_SUCCESS)
        return st->failed;
    if ((status = ib_poll(comm, st, progressed)) != COLL_SUCCESS)
        return status;
    /* a busy engine never sleeps on the async descriptor: look at it now and then */
    if ((++st->tick & 1023) == 0 && (status = ib_async_events(comm, st, op)) != COLL_SUCCESS)
        return status;
    if ((status = ib_links_step(comm, st)) != COLL_SUCCESS)
        return status;
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->tp != tp)
            continue;
        bool ready = false;
        if (l->done < l->n && (status = ib_peer_ensure(comm, st, l->peer, &ready)) != COLL_SUCCESS)
            return status;
        if (l->done < l->n && !ready)
            continue; /* its connection is being made */
        if (l->done == l->n) {
            /* credits held back by a full send queue go out once it drained */
            if (!l->send && (status = send_credit(comm, st, l->peer)) != COLL_SUCCESS)
                return status;
            continue;
        }
        status = colli_slots_lane(comm, st, &ib_slots, op, l, progressed);
        if (status != COLL_SUCCESS)
            return status;
    }
    return COLL_SUCCESS;
}

bool ib_wait_arm(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set)
{
    ib_state_t *st = comm->tp[tp].state;
    if (st == NULL || st->peers == NULL)
        return false;
    if (op == NULL) /* communicator creation: nothing of ours to wait for (links come later) */
        return false;
    bool progressed = false;
    coll_result_t status = ib_poll(comm, st, &progressed);
    if (status == COLL_SUCCESS && !progressed && !st->armed) {
        if (st->cq->context->ops.req_notify_cq(st->cq, 0) == 0)
            st->armed = true;
        status = ib_poll(comm, st, &progressed); /* what completed before arming */
    }
    if (status != COLL_SUCCESS) {
        st->failed = status;
        return true;
    }
    st->pfd_ch = colli_pollset_add(set, st->ch->fd, POLLIN);
    st->pfd_async = colli_pollset_add(set, st->ctx->async_fd, POLLIN);
    bool ready = progressed || !st->armed;
    /* connections being made: their links, or a retry that is due */
    for (int p = 0; st->links_pending && p < comm->nranks; p++) {
        ib_peer_t *pp = &st->peers[p];
        if (!pp->wanted || pp->link == IBL_READY)
            continue;
        if (pp->fd < 0) {
            ready |= pp->link == IBL_NONE && !pp->acceptor && p > comm->rank &&
                     colli_now() >= pp->retry_at;
            continue;
        }
        short ev = pp->link == IBL_CONNECTING || pp->link == IBL_SEND ? POLLOUT : POLLIN;
        pp->pfd = colli_pollset_add(set, pp->fd, ev);
    }
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || l->tp != tp)
            continue;
        ib_peer_t *pp = &st->peers[l->peer];
        if (pp->gone)
            ready = true; /* progress reports it */
        else if (pp->pfd < 0 && pp->fd >= 0)
            pp->pfd = colli_pollset_add(set, pp->fd, POLLIN);
    }
    return ready;
}

coll_result_t ib_wait_done(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set)
{
    ib_state_t *st = comm->tp[tp].state;
    if (st == NULL || st->peers == NULL)
        return COLL_SUCCESS;
    coll_result_t status = COLL_SUCCESS;
    for (int p = 0; p < comm->nranks; p++) {
        ib_peer_t *pp = &st->peers[p];
        int k = pp->pfd;
        pp->pfd = -1;
        if (op != NULL && k >= 0 && k < set->n &&
            (set->fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
            ib_link_read(comm, st, p);
    }
    if (op == NULL)
        return COLL_SUCCESS;
    int kc = st->pfd_ch, ka = st->pfd_async;
    st->pfd_ch = st->pfd_async = -1;
    if (kc >= 0 && kc < set->n && (set->fds[kc].revents & POLLIN)) {
        struct ibv_cq *cq;
        void *cq_ctx;
        unsigned nev = 0;
        while (st->v.get_cq_event(st->ch, &cq, &cq_ctx) == 0)
            nev++;
        if (nev > 0) {
            st->v.ack_cq_events(st->cq, nev);
            st->armed = false;
        }
    }
    if (ka >= 0 && ka < set->n && (set->fds[ka].revents & POLLIN))
        status = ib_async_events(comm, st, op);
    if (status != COLL_SUCCESS && st->failed == COLL_SUCCESS)
        st->failed = status;
    return status;
}

#endif /* COLLI_HAVE_VERBS */
