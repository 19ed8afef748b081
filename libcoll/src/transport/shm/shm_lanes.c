/* Shared-memory transport: its rings as the shared lane loop (transport/slots.h) moves them, and
 * waiting for them (see shm.h for the ring protocol). */
#include <errno.h>
#include <string.h>

#include "transport/shm/shm.h"
#include "transport/slots.h"

/* After publishing slots: wake the receiver if it went to sleep. The fence pairs with the one in
 * shm_wait_arm: either the receiver sees our slot, or we see its flag. */
static void wake_reader(shm_peer_t *pp, shm_seg_t *seg)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&seg->rd_sleep, memory_order_relaxed) &&
        atomic_exchange_explicit(&seg->rd_sleep, 0, memory_order_relaxed))
        shm_link_wake(pp);
}

/* After releasing slots: wake the sender if it sleeps on a full ring. */
static void wake_writer(shm_peer_t *pp, shm_seg_t *seg)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&seg->wr_sleep, memory_order_relaxed) &&
        atomic_exchange_explicit(&seg->wr_sleep, 0, memory_order_relaxed))
        shm_link_wake(pp);
}

/* ---- the rings, as the shared lane loop (transport/slots.h) sees them ---- */

COLLI_SLOT_OP size_t ring_cap(void *stp, int peer, bool send)
{
    const shm_peer_t *pp = &((shm_state_t *)stp)->peers[peer];
    return send ? pp->out.cap : pp->in.cap;
}

COLLI_SLOT_OP coll_result_t tx_ready(struct coll_comm *comm, void *stp, colli_op_t *op, int peer)
{
    shm_state_t *st = stp;
    if (st->peers[peer].gone)
        return shm_gone_error(comm, st, op, peer, "sending to");
    if (st->peers[peer].out.seg == NULL)
        return shm_ring_create(comm, st, peer);
    return COLL_SUCCESS;
}

COLLI_SLOT_OP bool tx_slot(void *stp, int peer, size_t frag, colli_frame_t **hdr, char **payload)
{
    shm_ring_t *r = &((shm_state_t *)stp)->peers[peer].out;
    if (r->pos - r->tail_seen >= r->nslots) {
        r->tail_seen = atomic_load_explicit(&r->seg->tail, memory_order_acquire);
        if (r->pos - r->tail_seen >= r->nslots)
            return false;
    }
    shm_slot_t *sl = shm_slot(r, r->pos);
    *hdr = &sl->frame;
    *payload = shm_payload(sl, frag);
    return true;
}

COLLI_SLOT_OP coll_result_t tx_publish(struct coll_comm *comm, void *stp, int peer, size_t frag)
{
    shm_ring_t *r = &((shm_state_t *)stp)->peers[peer].out;
    atomic_store_explicit(&shm_slot(r, r->pos)->ready, r->pos + 1, memory_order_release);
    r->pos++;
    return COLL_SUCCESS;
}

COLLI_SLOT_OP coll_result_t rx_ready(struct coll_comm *comm, void *stp, colli_op_t *op, int peer,
                                     bool *ready)
{
    shm_state_t *st = stp;
    shm_peer_t *pp = &st->peers[peer];
    *ready = pp->in.seg != NULL;
    if (*ready)
        return COLL_SUCCESS;
    /* the sender announces its segment over the link */
    coll_result_t status = shm_link_read(comm, st, peer);
    if (status != COLL_SUCCESS)
        return status;
    *ready = pp->in.seg != NULL;
    return *ready || !pp->gone ? COLL_SUCCESS
                               : shm_gone_error(comm, st, op, peer, "receiving from");
}

COLLI_SLOT_OP bool rx_slot(void *stp, int peer, size_t frag, const colli_frame_t **hdr,
                           const char **payload)
{
    shm_ring_t *r = &((shm_state_t *)stp)->peers[peer].in;
    shm_slot_t *sl = shm_slot(r, r->pos);
    if (atomic_load_explicit(&sl->ready, memory_order_acquire) != r->pos + 1)
        return false;
    *hdr = &sl->frame;
    *payload = shm_payload(sl, frag);
    return true;
}

COLLI_SLOT_OP void rx_release(void *stp, int peer)
{
    shm_ring_t *r = &((shm_state_t *)stp)->peers[peer].in;
    atomic_store_explicit(&r->seg->tail, r->pos + 1, memory_order_release);
    r->pos++;
}

COLLI_SLOT_OP coll_result_t gone(struct coll_comm *comm, void *stp, colli_op_t *op, int peer,
                                 const char *what)
{
    shm_state_t *st = stp;
    return st->peers[peer].gone ? shm_gone_error(comm, st, op, peer, what) : COLL_SUCCESS;
}

COLLI_SLOT_OP coll_result_t end(struct coll_comm *comm, void *stp, const colli_lane_t *l,
                                bool moved, coll_result_t status)
{
    shm_peer_t *pp = &((shm_state_t *)stp)->peers[l->peer];
    if (moved && l->send)
        wake_reader(pp, pp->out.seg);
    else if (moved)
        wake_writer(pp, pp->in.seg);
    return status;
}

static const colli_slot_ops_t shm_slots = {
    .sub = COLLI_SUB_SHM,
    .what = "shared-memory",
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

coll_result_t shm_progress(struct coll_comm *comm, int tp, colli_op_t *op, bool *progressed)
{
    shm_state_t *st = comm->tp[tp].state;
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || l->tp != tp)
            continue;
        coll_result_t status = colli_slots_lane(comm, st, &shm_slots, op, l, progressed);
        if (status != COLL_SUCCESS)
            return status;
    }
    return COLL_SUCCESS;
}

/* Set a sleep flag; the caller then looks at the ring again (the fence pairs with the one in
 * wake_reader / wake_writer). */
static void arm(shm_ring_t *r, _Atomic uint32_t *flag)
{
    atomic_store_explicit(flag, 1, memory_order_relaxed);
    r->armed = true;
    atomic_thread_fence(memory_order_seq_cst);
}

bool shm_wait_arm(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set)
{
    shm_state_t *st = comm->tp[tp].state;
    if (op == NULL) { /* communicator creation: links being connected */
        for (int p = 0; p < comm->nranks; p++)
            if (st->peers[p].link == LINK_CONNECTING || st->peers[p].link == LINK_HANDSHAKE)
                st->peers[p].pfd = colli_pollset_add(
                    set, st->peers[p].fd, st->peers[p].link == LINK_CONNECTING ? POLLOUT : POLLIN);
        return false;
    }
    bool ready = false;
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || l->tp != tp)
            continue;
        shm_peer_t *pp = &st->peers[l->peer];
        if (pp->pfd < 0 && pp->fd >= 0) /* wake-ups, announcements, the end of the peer */
            pp->pfd = colli_pollset_add(set, pp->fd, POLLIN);
        if (pp->gone) {
            ready = true; /* progress reports it */
            continue;
        }
        const colli_unit_t *u = &l->units[l->done];
        if (l->send) {
            shm_ring_t *r = &pp->out;
            if (!colli_dep_done(op, u->dep))
                continue; /* waits on another lane */
            if (r->seg == NULL) {
                ready = true;
                continue;
            }
            arm(r, &r->seg->wr_sleep);
            r->tail_seen = atomic_load_explicit(&r->seg->tail, memory_order_acquire);
            ready |= r->pos - r->tail_seen < r->nslots;
        } else {
            shm_ring_t *r = &pp->in;
            if ((u->kind == COLLI_UNIT_RECV_COPY && !colli_dep_done(op, u->dep)) || r->seg == NULL)
                continue; /* another lane, or the announcement on the link */
            shm_slot_t *sl = shm_slot(r, r->pos);
            if (atomic_load_explicit(&sl->ready, memory_order_acquire) == r->pos + 1) {
                ready |= u->kind != COLLI_UNIT_RECV_REDUCE || colli_dep_done(op, u->dep);
                continue;
            }
            arm(r, &r->seg->rd_sleep);
            ready |= atomic_load_explicit(&sl->ready, memory_order_acquire) == r->pos + 1;
        }
    }
    return ready;
}

coll_result_t shm_wait_done(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set)
{
    shm_state_t *st = comm->tp[tp].state;
    coll_result_t status = COLL_SUCCESS;
    if (op == NULL) {
        for (int p = 0; p < comm->nranks; p++) {
            shm_peer_t *pp = &st->peers[p];
            int i = pp->pfd;
            pp->pfd = -1;
            if (i < 0 || status != COLL_SUCCESS ||
                (pp->link != LINK_CONNECTING && pp->link != LINK_HANDSHAKE))
                continue;
            if (set->fds[i].revents & (POLLIN | POLLOUT | POLLERR | POLLHUP))
                status = shm_link_connected(comm, st, p);
        }
        return status;
    }
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->tp != tp)
            continue;
        shm_peer_t *pp = &st->peers[l->peer];
        shm_ring_t *r = l->send ? &pp->out : &pp->in;
        if (r->armed) {
            atomic_store_explicit(l->send ? &r->seg->wr_sleep : &r->seg->rd_sleep, 0,
                                  memory_order_relaxed);
            r->armed = false;
        }
        int k = pp->pfd;
        pp->pfd = -1;
        if (k >= 0 && (set->fds[k].revents & (POLLIN | POLLHUP | POLLERR))) {
            coll_result_t st2 = shm_link_read(comm, st, l->peer);
            if (status == COLL_SUCCESS)
                status = st2;
        }
    }
    return status;
}
