/* The run loop: drives an op's lanes over the communicator's transports until every lane is
 * done, a peer fails, or nothing moved for COLL_TIMEOUT; deferred local copies fill idle time. */
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/netif.h"
#include "base/util.h"
#include "engine/engine.h"
#include "transport/transport.h"

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

static coll_result_t run_loop(colli_op_t *op, colli_drive_t *d, const colli_until_t *until);

coll_result_t colli_op_drive(colli_op_t *op, colli_drive_t *d, const colli_until_t *until)
{
    struct coll_comm *comm = op->comm;
    if (op->oom)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building %s", op->what);
    comm->cur_op = op;
    coll_result_t status = run_loop(op, d, until);
    comm->cur_op = NULL;
    return status;
}

coll_result_t colli_op_run(colli_op_t *op)
{
    colli_drive_t d = {0};
    const colli_until_t forever = {.wake_fd = -1};
    coll_result_t status = colli_op_drive(op, &d, &forever);
    if (status == COLL_SUCCESS)
        while (local_copy_step(op, SIZE_MAX))
            ;
    return status;
}

/* Waiting without progress: one WARN per interval names whom it waits on, and says when this
 * rank's own link is down (then the peers are not at fault). */
static void liveness_warn(colli_op_t *op, double idle, double timeout)
{
    struct coll_comm *comm = op->comm;
    char waits[512], d[160];
    colli_op_waits(op, NULL, waits, sizeof(waits));
    char until[160];
    if (isinf(timeout)) /* COLL_TIMEOUT 0, libnccl.so.2's default */
        snprintf(until, sizeof(until),
                 "it waits for them without a deadline (COLL_TIMEOUT is 0, as in NCCL: the "
                 "program's own timeout aborts it), or until one goes away");
    else
        snprintf(until, sizeof(until), "it fails at COLL_TIMEOUT (%.0f s) naming them", timeout);
    const char *ifname = comm->members[comm->rank].ifname;
    if (colli_netif_link_down(ifname) == 1)
        coll_warn(COLL,
                  "rank %d: %s #%llu has made no progress for %.0f s: this rank's link %s is "
                  "down (not up, or no carrier); the ranks it waits on (%s) are not at fault. "
                  "%s",
                  comm->rank, colli_op_desc(op, d, sizeof(d)), (unsigned long long)colli_op_seq(op),
                  idle, ifname, waits, until);
    else
        coll_warn(COLL,
                  "rank %d: %s #%llu has made no progress for %.0f s, waiting on ranks %s; %s",
                  comm->rank, colli_op_desc(op, d, sizeof(d)), (unsigned long long)colli_op_seq(op),
                  idle, waits, until);
}

/* Stopped by coll_comm_abort (a program's own deadline, such as a torch Work's wait(timeout),
 * aborts): the error names the ranks the op still waited on, as COLL_TIMEOUT's does. Waited on,
 * not blamed: in a ring the rank waited on may itself wait for a later one. */
static coll_result_t aborted_error(colli_op_t *op)
{
    int first = -1; /* the peer of the first unfinished lane: the first rank in waits */
    for (int i = 0; i < op->nlanes && first < 0; i++)
        if (op->lanes[i].done != op->lanes[i].n)
            first = op->lanes[i].peer;
    if (first < 0)
        return COLLI_ERR(COLL, COLL_ERR_ABORTED,
                         "%s: coll_comm_abort was called while it was in progress", op->what);
    char waits[512], who[200];
    colli_op_waits(op, NULL, waits, sizeof(waits));
    colli_member_desc(op->comm, first, who, sizeof(who));
    const char *rest = strchr(waits, ' '); /* the ranks after the first */
    return COLLI_ERR(COLL, COLL_ERR_ABORTED,
                     "%s: coll_comm_abort was called while it was in progress, waiting on %s%s%s",
                     op->what, who, rest != NULL ? " and on ranks" : "", rest != NULL ? rest : "");
}

/* Waiting without progress under the kcoll agent: ask it whether Kubernetes says one of the
 * ranks waited on ended (a node that died keeps its connections open: nothing else would tell
 * before COLL_TIMEOUT). After 10 s, then every 10 s up to 2 minutes, then every 30 s; 2 s after
 * an answer that is still coming. */
#define ASK_FIRST_S 10.0
#define ASK_SOON_S  2.0
static coll_result_t ask_idle(colli_op_t *op, colli_drive_t *d, double idle)
{
    struct coll_comm *comm = op->comm;
    int ranks[8], n = 0;
    for (int i = 0; i < op->nlanes && n < 8; i++) {
        const colli_lane_t *l = &op->lanes[i];
        bool seen = false;
        for (int k = 0; k < n; k++)
            seen |= ranks[k] == l->peer;
        if (l->done != l->n && !seen && l->peer != comm->rank && l->peer >= 0)
            ranks[n++] = l->peer;
    }
    bool soon = false;
    char what[200];
    coll_result_t status =
        n > 0 ? comm->on_idle(comm, ranks, n, colli_op_desc(op, what, sizeof(what)), idle, &soon)
              : COLL_SUCCESS;
    d->next_ask = soon ? idle + ASK_SOON_S : d->next_ask + (d->next_ask < 120.0 ? 10.0 : 30.0);
    if (d->next_ask <= idle)
        d->next_ask = idle + ASK_SOON_S;
    return status;
}

static coll_result_t run_loop(colli_op_t *op, colli_drive_t *d, const colli_until_t *until)
{
    struct coll_comm *comm = op->comm;
    const double spin = comm->cfg.spin_us * 1e-6;
    const double timeout = comm->cfg.timeout;
    /* a line every 30 s of waiting (every third of a short COLL_TIMEOUT), never at 0 */
    const double every = timeout / 3 < 1.0 ? 1.0 : (timeout / 3 > 30.0 ? 30.0 : timeout / 3);
    /* progress (or the start) since the clock was last read: a fresh drive reads it only when
     * it first waits, as a blocking call that never waits need not */
    bool stamp = d->last == 0;
    if (stamp) {
        d->next_warn = every;
        d->grace_end = 0;
        d->next_ask = ASK_FIRST_S;
    }
    unsigned idle_passes = 0;
    coll_result_t status = COLL_SUCCESS;
    while (op->lanes_left > 0) {
        bool progressed = false;
        status = colli_tp_progress(comm, op, &progressed);
        if (status != COLL_SUCCESS || op->lanes_left == 0)
            break;
        if (until->stop != NULL && until->stop(op, until->ctx)) {
            status = COLL_IN_PROGRESS;
            break;
        }
        if (until->deadline > 0 && colli_now() >= until->deadline) {
            /* an abort that came while it slept is this call's to report: the next call would
             * find the communicator gone, without the ranks it waited on */
            status = __atomic_load_n(&comm->abort_req, __ATOMIC_ACQUIRE) ? aborted_error(op)
                                                                         : COLL_IN_PROGRESS;
            break;
        }
        if (progressed || local_copy_step(op, (size_t)comm->members[0].chunk_size)) {
            stamp = true;
            idle_passes = 0;
            d->next_warn = every;
            d->grace_end = 0;
            d->next_ask = ASK_FIRST_S;
            continue;
        }
        /* Read the clock only every few idle passes: a pass over shared memory is much
         * shorter than a clock read. Yield now and then even with a core per rank: the peer
         * we wait for may have been placed on this core. */
        ++idle_passes;
        if (__atomic_load_n(&comm->abort_req, __ATOMIC_ACQUIRE)) {
            status = aborted_error(op);
            break;
        }
        if (comm->oversubscribed || (idle_passes & 255) == 0)
            sched_yield();
        else if ((idle_passes & 7) != 0)
            continue;
        double now = colli_now();
        if (stamp) {
            d->last = now;
            stamp = false;
        }
        double idle = now - d->last;
        if (idle < spin)
            continue;
        if (idle >= d->next_warn && idle < timeout) {
            liveness_warn(op, idle, timeout);
            /* without a deadline, waits of many minutes are expected (a peer saving a
             * checkpoint): the interval doubles, up to 10 minutes */
            d->next_warn += isinf(timeout) ? d->next_warn < 600.0 ? d->next_warn : 600.0 : every;
        }
        if (idle >= d->next_ask && idle < timeout && comm->on_idle != NULL && !comm->idle_ask_off &&
            d->grace_end == 0) {
            status = ask_idle(op, d, idle);
            if (status != COLL_SUCCESS)
                break;
        }
        if (idle >= timeout) {
            if (d->grace_end == 0) {
                /* Tell everyone whom we wait on, then keep going briefly to hear the others. */
                char waits[512];
                colli_op_waits(op, NULL, waits, sizeof(waits));
                colli_tp_notify_stuck(comm, waits);
                double grace = timeout / 4 < 0.5 ? 0.5 : timeout / 4 > 1.0 ? 1.0 : timeout / 4;
                d->grace_end = colli_now() + grace;
            } else if (now >= d->grace_end) {
                status = colli_engine_stall_error(op, idle);
                break;
            }
        }
        /* at most 0.1 s asleep: coll_comm_abort from another thread (a program's own deadline)
         * is seen within that, not a second later */
        double left = d->grace_end > 0 ? d->grace_end - now : timeout - idle;
        if (until->deadline > 0 && until->deadline - now < left)
            left = until->deadline - now;
        int ms = left > 0.1 ? 100 : left <= 0 ? 1 : (int)(left * 1000.0) + 1;
        bool woken = false;
        status = colli_tp_wait(comm, op, ms, until->wake_fd, &woken);
        if (status == COLL_SUCCESS && woken)
            status = COLL_IN_PROGRESS;
        if (status != COLL_SUCCESS)
            break;
    }
    if (stamp && status == COLL_IN_PROGRESS) /* driven again later: keep when it last moved */
        d->last = colli_now();
    return status;
}
