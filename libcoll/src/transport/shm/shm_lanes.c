/* Shared-memory transport: moving the units of an operation's lanes through the rings, and
 * waiting for them (see shm.h for the ring protocol). */
#include <errno.h>
#include <string.h>

#include "coll_kernels.h"
#include "transport/frame.h"
#include "transport/shm/shm.h"

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

static coll_result_t send_lane(struct coll_comm *comm, shm_state_t *st, colli_op_t *op,
                               colli_lane_t *l, bool *progressed)
{
    shm_peer_t *pp = &st->peers[l->peer];
    shm_ring_t *r = &pp->out;
    coll_result_t status = COLL_SUCCESS;
    bool published = false;
    while (l->done < l->n) {
        colli_unit_t *u = &l->units[l->done];
        if (!colli_dep_done(op, u->dep))
            break;
        if (pp->gone) {
            status = shm_gone_error(comm, op, l->peer, "sending to");
            break;
        }
        if (r->seg == NULL && (status = shm_ring_create(comm, st, l->peer)) != COLL_SUCCESS)
            break;
        if (l->hdr_off == 0) {
            colli_frame_fill(comm, op, u, &l->hdr);
            l->hdr_off = 1;
        }
        do { /* one fragment per slot; a zero-byte unit still sends its header */
            if (r->pos - r->tail_seen >= r->nslots) {
                r->tail_seen = atomic_load_explicit(&r->seg->tail, memory_order_acquire);
                if (r->pos - r->tail_seen >= r->nslots)
                    goto out; /* full */
            }
            shm_slot_t *sl = shm_slot(r, r->pos);
            size_t frag = u->bytes - l->pay_off < r->cap ? u->bytes - l->pay_off : r->cap;
            if (frag > 0)
                memcpy(shm_payload(sl, frag), u->buf + l->pay_off, frag);
            l->hdr.reserved = (uint32_t)(l->pay_off / r->cap);
            sl->frame = l->hdr;
            atomic_store_explicit(&sl->ready, r->pos + 1, memory_order_release);
            r->pos++;
            l->pay_off += frag;
            published = true;
            *progressed = true;
        } while (l->pay_off < u->bytes);
        colli_op_unit_complete(op, l);
    }
out:
    if (published)
        wake_reader(pp, r->seg);
    return status;
}

static coll_result_t fragment_error(struct coll_comm *comm, const colli_op_t *op,
                                    const colli_lane_t *l, const colli_unit_t *u,
                                    const shm_slot_t *sl, uint32_t want)
{
    colli_frame_t f;
    memcpy(&f, &sl->frame, sizeof(f));
    if (!colli_frame_matches(&f, &l->hdr))
        return colli_frame_error(comm, op, l->peer, u, &f);
    char who[200];
    colli_member_desc(comm, l->peer, who, sizeof(who));
    return COLLI_ERR(SHM, COLL_ERR_REMOTE,
                     "corrupt shared-memory ring from %s: fragment %u of unit %u where fragment "
                     "%u was expected; the ring is out of step; this is a bug or memory "
                     "corruption, please report it",
                     who, f.reserved, u->msg_unit, want);
}

static coll_result_t recv_lane(struct coll_comm *comm, shm_state_t *st, colli_op_t *op,
                               colli_lane_t *l, bool *progressed)
{
    shm_peer_t *pp = &st->peers[l->peer];
    shm_ring_t *r = &pp->in;
    coll_result_t status = COLL_SUCCESS;
    bool released = false;
    if (r->seg == NULL) {
        /* the sender announces its segment over the link */
        if ((status = shm_link_read(comm, st, l->peer)) != COLL_SUCCESS)
            return status;
        if (r->seg == NULL)
            return pp->gone ? shm_gone_error(comm, op, l->peer, "receiving from") : COLL_SUCCESS;
    }
    const size_t esize = coll_datatype_size(op->dt);
    while (l->done < l->n) {
        colli_unit_t *u = &l->units[l->done];
        if (u->kind == COLLI_UNIT_RECV_COPY && !colli_dep_done(op, u->dep))
            break;
        if (l->hdr_off == 0) {
            colli_frame_fill(comm, op, u, &l->hdr); /* what we expect */
            l->hdr_off = 1;
        }
        for (;;) {
            shm_slot_t *sl = shm_slot(r, r->pos);
            if (atomic_load_explicit(&sl->ready, memory_order_acquire) != r->pos + 1) {
                if (pp->gone)
                    status = shm_gone_error(comm, op, l->peer, "receiving from");
                goto out;
            }
            uint32_t frag_idx = (uint32_t)(l->pay_off / r->cap);
            if (!colli_frame_matches(&sl->frame, &l->hdr) || sl->frame.reserved != frag_idx) {
                status = fragment_error(comm, op, l, u, sl, frag_idx);
                goto out;
            }
            /* a reduction waits in the ring until the send that reads the same bytes is done */
            if (u->kind == COLLI_UNIT_RECV_REDUCE && !colli_dep_done(op, u->dep))
                goto out;
            size_t frag = u->bytes - l->pay_off < r->cap ? u->bytes - l->pay_off : r->cap;
            const char *src = shm_payload(sl, frag);
            char *dst = u->buf + l->pay_off;
            if (u->kind == COLLI_UNIT_RECV_COPY) {
                if (frag > 0)
                    memcpy(dst, src, frag);
            } else if (u->final_div) {
                colli_reduce_div(dst, u->src + l->pay_off, src, frag / esize, op->dt,
                                 (uint32_t)comm->nranks);
            } else {
                colli_reduce(dst, u->src + l->pay_off, src, frag / esize, op->dt, op->redop);
            }
            atomic_store_explicit(&r->seg->tail, r->pos + 1, memory_order_release);
            r->pos++;
            l->pay_off += frag;
            released = true;
            *progressed = true;
            if (l->pay_off >= u->bytes)
                break;
        }
        colli_op_unit_complete(op, l);
    }
out:
    if (released)
        wake_writer(pp, r->seg);
    return status;
}

coll_result_t shm_progress(struct coll_comm *comm, colli_op_t *op, bool *progressed)
{
    shm_state_t *st = comm->tp_state[COLLI_TPI_SHM];
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || l->tp != COLLI_TPI_SHM)
            continue;
        coll_result_t status = l->send ? send_lane(comm, st, op, l, progressed)
                                       : recv_lane(comm, st, op, l, progressed);
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

bool shm_wait_arm(struct coll_comm *comm, colli_op_t *op, colli_pollset_t *set)
{
    shm_state_t *st = comm->tp_state[COLLI_TPI_SHM];
    if (op == NULL) { /* communicator creation: links being connected */
        for (int p = 0; p < comm->nranks; p++)
            if (st->peers[p].link == LINK_CONNECTING)
                st->peers[p].pfd = colli_pollset_add(set, st->peers[p].fd, POLLOUT);
        return false;
    }
    bool ready = false;
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || l->tp != COLLI_TPI_SHM)
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

coll_result_t shm_wait_done(struct coll_comm *comm, colli_op_t *op, colli_pollset_t *set)
{
    shm_state_t *st = comm->tp_state[COLLI_TPI_SHM];
    coll_result_t status = COLL_SUCCESS;
    if (op == NULL) {
        for (int p = 0; p < comm->nranks; p++) {
            shm_peer_t *pp = &st->peers[p];
            int i = pp->pfd;
            pp->pfd = -1;
            if (i < 0 || status != COLL_SUCCESS || pp->link != LINK_CONNECTING)
                continue;
            if (set->fds[i].revents & (POLLOUT | POLLERR | POLLHUP))
                status = shm_link_connected(comm, st, p);
        }
        return status;
    }
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        if (l->tp != COLLI_TPI_SHM)
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
