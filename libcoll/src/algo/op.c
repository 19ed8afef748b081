/* Building and running operations (see op.h). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/op.h"
#include "coll_kernels.h"
#include "transport/transport.h"

coll_result_t colli_op_init(colli_op_t *op, struct coll_comm *comm, const char *what,
                            coll_datatype_t dt, coll_op_t redop)
{
    colli_op_t *spare = comm->spare_op;
    memset(op, 0, sizeof(*op));
    const size_t n = (size_t)comm->nranks;
    if (spare != NULL && spare->send_ctr != NULL) {
        /* reuse the last op's arrays; lanes keep their unit arrays */
        op->lanes = spare->lanes;
        op->cap = spare->cap;
        op->fps = spare->fps;
        op->fpcap = spare->fpcap;
        op->send_ctr = spare->send_ctr;
        memset(spare, 0, sizeof(*spare));
        memset(op->send_ctr, 0, 2 * n * sizeof(uint32_t));
    } else {
        op->send_ctr = calloc(2 * n, sizeof(uint32_t));
        if (op->send_ctr == NULL)
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building %s", what);
    }
    op->comm = comm;
    op->what = what;
    op->dt = dt;
    op->redop = redop;
    op->cur_fp = -1;
    op->recv_ctr = op->send_ctr + n;
    return COLL_SUCCESS;
}

/* Where p, a pointer into the buffers of key o, points in the buffers of key n. */
static inline void *moved(const void *p, const colli_op_key_t *o, const colli_op_key_t *n,
                          size_t bytes)
{
    uintptr_t a = (uintptr_t)p, s = (uintptr_t)o->sendbuf, r = (uintptr_t)o->recvbuf;
    if (a - s < bytes)
        return (char *)n->sendbuf + (a - s);
    if (a - r < bytes)
        return (char *)n->recvbuf + (a - r);
    return (void *)p;
}

colli_op_t *colli_op_reuse(struct coll_comm *comm, const colli_op_key_t *key, uint64_t seq)
{
    colli_op_t *op = comm->spare_op;
    if (op == NULL || !op->key.valid || op->key.coll != key->coll || op->key.count != key->count ||
        op->key.dt != key->dt || op->key.redop != key->redop || op->key.root != key->root ||
        (op->key.sendbuf == op->key.recvbuf) != (key->sendbuf == key->recvbuf))
        return NULL;
    const size_t bytes = key->count * coll_datatype_size(key->dt);
    for (int i = 0; i < op->nlanes; i++) {
        colli_lane_t *l = &op->lanes[i];
        for (int k = 0; k < l->n; k++) {
            colli_unit_t *u = &l->units[k];
            u->buf = moved(u->buf, &op->key, key, bytes);
            if (u->src != NULL)
                u->src = moved(u->src, &op->key, key, bytes);
        }
        l->done = 0;
        l->hdr_off = 0;
        l->pay_off = 0;
        l->staged = false;
    }
    op->lanes_left = op->nlanes;
    op->key = *key;
    for (int i = 0; i < op->nfps; i++)
        op->fps[i].seq = seq;
    op->key.valid = false; /* valid again once it completes */
    return op;
}

static void free_arrays(colli_op_t *op)
{
    for (int i = 0; i < op->cap; i++)
        free(op->lanes[i].units);
    free(op->lanes);
    free(op->fps);
    free(op->send_ctr);
}

void colli_op_free(colli_op_t *op)
{
    struct coll_comm *comm = op->comm;
    if (comm != NULL && op == comm->spare_op) { /* a reused op stays where it is */
        op->key.valid = op->lanes_left == 0;
        return;
    }
    if (comm != NULL && comm->spare_op == NULL)
        comm->spare_op = calloc(1, sizeof(colli_op_t));
    colli_op_t *spare = comm != NULL ? comm->spare_op : NULL;
    if (spare != NULL && spare->send_ctr == NULL && op->send_ctr != NULL) {
        *spare = *op;
        spare->key.valid = op->key.valid && op->lanes_left == 0 && !op->oom;
    } else {
        free_arrays(op);
    }
    memset(op, 0, sizeof(*op));
}

void colli_op_cache_free(struct coll_comm *comm)
{
    if (comm->spare_op != NULL)
        free_arrays(comm->spare_op);
    free(comm->spare_op);
    comm->spare_op = NULL;
}

int colli_op_add_fp(colli_op_t *op, int coll, coll_datatype_t dt, coll_op_t redop, int root,
                    uint64_t count, uint64_t seq)
{
    if (op->nfps == op->fpcap) {
        int cap = op->fpcap ? op->fpcap * 2 : 4;
        colli_fp_t *n = realloc(op->fps, (size_t)cap * sizeof(*n));
        if (n == NULL) {
            op->oom = true;
            return op->cur_fp;
        }
        op->fps = n;
        op->fpcap = cap;
    }
    op->fps[op->nfps] = (colli_fp_t){.coll = (uint8_t)coll,
                                     .dtype = (uint8_t)dt,
                                     .op = (uint8_t)redop,
                                     .root = root,
                                     .count = count,
                                     .seq = seq};
    op->cur_fp = op->nfps++;
    return op->cur_fp;
}

void colli_op_reset_msg(colli_op_t *op, int peer, bool send)
{
    if (send)
        op->send_ctr[peer] = 0;
    else
        op->recv_ctr[peer] = 0;
}

static int lane_for(colli_op_t *op, int peer, int stream, bool send)
{
    for (int i = op->nlanes - 1; i >= 0; i--) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->peer == peer && l->stream == stream && l->send == send)
            return i;
    }
    if (op->nlanes == op->cap) {
        int cap = op->cap ? op->cap * 2 : 8;
        colli_lane_t *n = realloc(op->lanes, (size_t)cap * sizeof(*n));
        if (n == NULL)
            return -1;
        for (int i = op->cap; i < cap; i++) {
            n[i].units = NULL;
            n[i].cap = 0;
        }
        op->lanes = n;
        op->cap = cap;
    }
    colli_lane_t *l = &op->lanes[op->nlanes];
    colli_unit_t *units = l->units; /* kept from an earlier op */
    int ucap = l->cap;
    memset(l, 0, sizeof(*l));
    l->units = units;
    l->cap = ucap;
    l->peer = peer;
    l->stream = stream;
    l->send = send;
    l->tp = op->comm->peer_tp[peer];
    op->tp_lanes[l->tp]++;
    op->lanes_left++;
    return op->nlanes++;
}

static colli_dep_t add_unit(colli_op_t *op, int peer, bool send, colli_unit_t u)
{
    struct coll_comm *comm = op->comm;
    uint32_t *ctr = send ? &op->send_ctr[peer] : &op->recv_ctr[peer];
    u.msg_unit = (*ctr)++;
    u.fp = op->cur_fp;
    /* Streams spread units over several TCP connections; a shared-memory peer has one ring. */
    int stream = comm->peer_tp[peer] == COLLI_TPI_SOCKET
                     ? (int)(u.msg_unit % (uint32_t)comm->members[0].nstreams)
                     : 0;
    int li = lane_for(op, peer, stream, send);
    if (li < 0) {
        op->oom = true;
        return COLLI_NO_DEP;
    }
    colli_lane_t *l = &op->lanes[li];
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 8;
        colli_unit_t *n = realloc(l->units, (size_t)cap * sizeof(*n));
        if (n == NULL) {
            op->oom = true;
            return COLLI_NO_DEP;
        }
        l->units = n;
        l->cap = cap;
    }
    l->units[l->n] = u;
    return (colli_dep_t){li, l->n++};
}

colli_dep_t colli_op_send(colli_op_t *op, int peer, const void *buf, size_t bytes, colli_dep_t dep)
{
    colli_unit_t u = {.buf = (char *)buf, .bytes = bytes, .dep = dep, .kind = COLLI_UNIT_SEND};
    return add_unit(op, peer, true, u);
}

colli_dep_t colli_op_recv(colli_op_t *op, int peer, void *dst, size_t bytes, colli_dep_t dep)
{
    colli_unit_t u = {.buf = dst, .bytes = bytes, .dep = dep, .kind = COLLI_UNIT_RECV_COPY};
    return add_unit(op, peer, false, u);
}

colli_dep_t colli_op_recv_reduce(colli_op_t *op, int peer, void *dst, const void *src, size_t bytes,
                                 colli_dep_t dep, bool final_div)
{
    colli_unit_t u = {.buf = dst,
                      .src = src,
                      .bytes = bytes,
                      .dep = dep,
                      .kind = COLLI_UNIT_RECV_REDUCE,
                      .final_div = final_div};
    return add_unit(op, peer, false, u);
}

void colli_op_unit_done(colli_op_t *op, colli_lane_t *lane)
{
    colli_unit_t *u = &lane->units[lane->done];
    if (u->kind == COLLI_UNIT_RECV_REDUCE) {
        size_t n = u->bytes / coll_datatype_size(op->dt);
        if (u->final_div)
            colli_reduce_div(u->buf, u->src, lane->staging, n, op->dt, (uint32_t)op->comm->nranks);
        else
            colli_reduce(u->buf, u->src, lane->staging, n, op->dt, op->redop);
    }
    colli_op_unit_complete(op, lane);
}

void colli_op_unit_complete(colli_op_t *op, colli_lane_t *lane)
{
    lane->staged = false;
    lane->hdr_off = 0;
    lane->pay_off = 0;
    if (++lane->done == lane->n)
        op->lanes_left--;
}

void colli_fp_desc(const colli_fp_t *fp, char *buf, size_t len)
{
    const int coll = fp->coll & ~(COLLI_COLL_DIRECT | COLLI_COLL_DEV);
    const char *name = colli_coll_name(coll);
    const bool direct = (fp->coll & COLLI_COLL_DIRECT) != 0, dev = (fp->coll & COLLI_COLL_DEV) != 0;
    const char *path = direct && dev ? " (device buffers, single-copy path)"
                       : direct      ? " (single-copy path)"
                       : dev         ? " (device buffers)"
                                     : "";
    switch (coll) {
    case COLLI_COLL_ALL_REDUCE:
    case COLLI_COLL_REDUCE_SCATTER:
        snprintf(buf, len, "%s(count %llu, %s, %s)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), coll_op_name(fp->op), path);
        break;
    case COLLI_COLL_REDUCE:
        snprintf(buf, len, "%s(count %llu, %s, %s, root %d)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), coll_op_name(fp->op), fp->root, path);
        break;
    case COLLI_COLL_BROADCAST:
        snprintf(buf, len, "%s(count %llu, %s, root %d)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), fp->root, path);
        break;
    default:
        snprintf(buf, len, "%s(count %llu, %s)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), path);
        break;
    }
}

const char *colli_op_desc(const colli_op_t *op, char *buf, size_t len)
{
    if (op == NULL)
        return "an operation";
    if (op->nfps == 0)
        return op->what;
    colli_fp_desc(&op->fps[0], buf, len);
    return buf;
}

unsigned long long colli_op_seq(const colli_op_t *op)
{
    return op != NULL && op->nfps > 0 ? (unsigned long long)op->fps[0].seq : 0ULL;
}

/* Ranks this rank's unfinished lanes wait on, as a bitmap and as "1 3 ...". */
void colli_op_waits(const colli_op_t *op, uint8_t *mask, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < op->nlanes; i++) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || mask[l->peer])
            continue;
        mask[l->peer] = 1;
        int n = snprintf(buf + used, len - used, "%s%d", used ? " " : "", l->peer);
        if (n > 0 && (size_t)n < len - used)
            used += (size_t)n;
    }
}

static coll_result_t stall_error(colli_op_t *op, double idle)
{
    struct coll_comm *comm = op->comm;
    char d[160];
    const char *what = colli_op_desc(op, d, sizeof(d));
    unsigned long long seq = colli_op_seq(op);
    /* Ranks somebody waits on that sent no stuck report of their own are the silent ones: a
     * stopped, hung or cut-off process cannot report. */
    uint8_t *mine = calloc((size_t)comm->nranks, 1);
    char waits[512];
    if (mine != NULL)
        colli_op_waits(op, mine, waits, sizeof(waits));
    char silent[700] = "";
    size_t su = 0;
    int nsilent = 0;
    for (int r = 0; mine != NULL && comm->stuck_reported != NULL && r < comm->nranks; r++) {
        if (r == comm->rank || comm->stuck_reported[r] || !(mine[r] || comm->stuck_waits[r]))
            continue;
        if (nsilent == 0)
            colli_comm_blame(comm, r); /* the first silent rank: it cannot report itself */
        if (nsilent++ < 4 && su < sizeof(silent) - 220) {
            char who[200];
            colli_member_desc(comm, r, who, sizeof(who));
            int n = snprintf(silent + su, sizeof(silent) - su, "%s%s", su ? ", " : "", who);
            su += n > 0 ? (size_t)n : 0;
        }
    }
    free(mine);
    if (nsilent > 0)
        return COLLI_ERR(COLL, COLL_ERR_TIMEOUT,
                         "%s #%llu made no progress for %.0f s (COLL_TIMEOUT): %s%s sent no data "
                         "and no status while other ranks waited on %s; %s stopped, hung or cut "
                         "off from the network (this is rank %d, waiting on ranks %s)",
                         what, seq, idle, silent, nsilent > 4 ? " and more" : "",
                         nsilent > 1 ? "them" : "it", nsilent > 1 ? "they are" : "it is",
                         comm->rank, waits);
    char msg[1024];
    size_t used = 0;
    int listed = 0;
    for (int i = 0; i < op->nlanes && used < sizeof(msg) - 200; i++) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n)
            continue;
        if (listed++ == 4)
            break;
        char who[200];
        colli_member_desc(comm, l->peer, who, sizeof(who));
        if (listed == 1)
            colli_comm_blame(comm, l->peer);
        int n = snprintf(msg + used, sizeof(msg) - used, "%s%s %s (unit %d of %d)",
                         listed > 1 ? "; " : "", l->send ? "sending to" : "receiving from", who,
                         l->done + 1, l->n);
        used += n > 0 ? (size_t)n : 0;
    }
    return COLLI_ERR(COLL, COLL_ERR_TIMEOUT,
                     "%s #%llu on rank %d made no progress for %.0f s (COLL_TIMEOUT): stuck %s. "
                     "The peer is stuck, stopped or unreachable; check its state and logs.",
                     what, seq, comm->rank, idle, msg);
}

void colli_op_local_copy(colli_op_t *op, void *dst, const void *src, size_t bytes)
{
    op->lc_dst = dst;
    op->lc_src = src;
    op->lc_bytes = bytes;
    op->lc_done = 0;
}

/* One piece of the deferred local copy; true when there was something to do. */
static bool local_copy_step(colli_op_t *op, size_t piece)
{
    if (op->lc_done >= op->lc_bytes)
        return false;
    size_t n = op->lc_bytes - op->lc_done < piece ? op->lc_bytes - op->lc_done : piece;
    memcpy(op->lc_dst + op->lc_done, op->lc_src + op->lc_done, n);
    op->lc_done += n;
    return true;
}

static coll_result_t run_loop(colli_op_t *op);

coll_result_t colli_op_run(colli_op_t *op)
{
    struct coll_comm *comm = op->comm;
    if (op->oom)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building %s", op->what);
    comm->cur_op = op;
    coll_result_t status = run_loop(op);
    comm->cur_op = NULL;
    if (status == COLL_SUCCESS)
        while (local_copy_step(op, SIZE_MAX))
            ;
    return status;
}

static coll_result_t run_loop(colli_op_t *op)
{
    struct coll_comm *comm = op->comm;
    const double spin = comm->cfg.spin_us * 1e-6;
    const double timeout = comm->cfg.timeout;
    double last = 0, grace_end = 0;
    unsigned idle_passes = 0;
    bool stamp = true; /* progress (or the start) since the clock was last read */
    while (op->lanes_left > 0) {
        bool progressed = false;
        coll_result_t status = colli_tp_progress(comm, op, &progressed);
        if (status != COLL_SUCCESS)
            return status;
        if (op->lanes_left == 0)
            break;
        if (progressed || local_copy_step(op, (size_t)comm->members[0].chunk_size)) {
            stamp = true;
            idle_passes = 0;
            continue;
        }
        /* Read the clock only every few idle passes: a pass over shared memory is much
         * shorter than a clock read. Yield now and then even with a core per rank: the peer
         * we wait for may have been placed on this core. */
        ++idle_passes;
        if (__atomic_load_n(&comm->abort_req, __ATOMIC_ACQUIRE))
            return COLLI_ERR(COLL, COLL_ERR_ABORTED,
                             "%s: coll_comm_abort was called while it was in progress", op->what);
        if (comm->oversubscribed || (idle_passes & 255) == 0)
            sched_yield();
        else if ((idle_passes & 7) != 0)
            continue;
        double now = colli_now();
        if (stamp) {
            last = now;
            stamp = false;
        }
        double idle = now - last;
        if (idle < spin)
            continue;
        if (idle >= timeout) {
            if (grace_end == 0) {
                /* Tell everyone whom we wait on, then keep going briefly to hear the others. */
                uint8_t *mask = calloc((size_t)comm->nranks, 1);
                char waits[512] = "";
                if (mask != NULL)
                    colli_op_waits(op, mask, waits, sizeof(waits));
                free(mask);
                colli_tp_notify_stuck(comm, waits);
                double grace = timeout / 4 < 0.5 ? 0.5 : timeout / 4 > 1.0 ? 1.0 : timeout / 4;
                grace_end = colli_now() + grace;
            } else if (now >= grace_end) {
                return stall_error(op, idle);
            }
        }
        double left = grace_end > 0 ? grace_end - now : timeout - idle;
        int ms = left > 1.0 ? 1000 : left <= 0 ? 1 : (int)(left * 1000.0) + 1;
        status = colli_tp_wait(comm, op, ms);
        if (status != COLL_SUCCESS)
            return status;
    }
    return COLL_SUCCESS;
}
