/* Transport registry (built once; fills missing operations with stubs) and the communicator's
 * transports driven as one: each peer's transport chosen from the member table, one progress
 * pass over all of them, one poll() over all their descriptors. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/transport.h"

static coll_result_t stub_comm_init(struct coll_comm *c, const colli_netif_t *n, colli_member_t *s)
{
    return COLLI_ERR(NET, COLL_ERR_UNSUPPORTED, "transport has no comm_init");
}
static coll_result_t stub_comm_ready(struct coll_comm *c)
{
    return COLL_SUCCESS;
}
static coll_result_t stub_progress(struct coll_comm *c, colli_op_t *op, bool *p)
{
    return COLLI_ERR(NET, COLL_ERR_UNSUPPORTED, "transport cannot move data");
}
static bool stub_wait_arm(struct coll_comm *c, colli_op_t *op, colli_pollset_t *set)
{
    return false;
}
static coll_result_t stub_wait_done(struct coll_comm *c, colli_op_t *op, colli_pollset_t *set)
{
    return COLL_SUCCESS;
}
static coll_result_t stub_adopt(struct coll_comm *c, const colli_hello_t *h, int fd)
{
    close(fd);
    return COLL_SUCCESS;
}
static coll_result_t stub_poll_notices(struct coll_comm *c)
{
    return COLL_SUCCESS;
}
static void stub_notify(struct coll_comm *c, const char *reason) {}
static void stub_stuck(struct coll_comm *c, const char *w) {}
static void stub_fini(struct coll_comm *c) {}

/* Indexed by COLLI_TPI_*. */
static const colli_transport_t *const builtin[] = {&colli_socket_transport, &colli_shm_transport,
                                                   &colli_ib_transport};
#define NTRANSPORTS (sizeof(builtin) / sizeof(builtin[0]))
_Static_assert(NTRANSPORTS == COLLI_NTPI, "one built-in transport per COLLI_TPI_* index");

static struct {
    pthread_once_t once;
    colli_transport_t filled[NTRANSPORTS];
} registry = {PTHREAD_ONCE_INIT, {{0}}};

static void registry_init(void)
{
    for (size_t i = 0; i < NTRANSPORTS; i++) {
        colli_transport_t *t = &registry.filled[i];
        memset(t, 0, sizeof(*t));
        size_t n = builtin[i]->struct_size < sizeof(*t) ? builtin[i]->struct_size : sizeof(*t);
        memcpy(t, builtin[i], n);
        t->struct_size = sizeof(*t);
        if (!t->comm_init)
            t->comm_init = stub_comm_init;
        if (!t->comm_ready)
            t->comm_ready = stub_comm_ready;
        if (!t->progress)
            t->progress = stub_progress;
        if (!t->wait_arm)
            t->wait_arm = stub_wait_arm;
        if (!t->wait_done)
            t->wait_done = stub_wait_done;
        if (!t->adopt)
            t->adopt = stub_adopt;
        if (!t->poll_notices)
            t->poll_notices = stub_poll_notices;
        if (!t->notify_abort)
            t->notify_abort = stub_notify;
        if (!t->notify_stuck)
            t->notify_stuck = stub_stuck;
        if (!t->comm_fini)
            t->comm_fini = stub_fini;
    }
}

const colli_transport_t *colli_transport_get(const char *name)
{
    pthread_once(&registry.once, registry_init);
    for (size_t i = 0; i < NTRANSPORTS; i++)
        if (strcmp(registry.filled[i].name, name) == 0)
            return &registry.filled[i];
    return NULL;
}

int colli_pollset_add(colli_pollset_t *set, int fd, short events)
{
    if (set->n == set->cap) {
        int cap = set->cap ? set->cap * 2 : 16;
        struct pollfd *n = realloc(set->fds, (size_t)cap * sizeof(*n));
        if (n == NULL) {
            set->oom = true;
            return -1;
        }
        set->fds = n;
        set->cap = cap;
    }
    set->fds[set->n] = (struct pollfd){.fd = fd, .events = events};
    return set->n++;
}

/* ---- the communicator's transports ---- */

coll_result_t colli_tp_init(struct coll_comm *comm, const colli_netif_t *nif, colli_member_t *self)
{
    coll_result_t status;
    comm->tps[COLLI_TPI_SOCKET] = colli_transport_get("socket");
    COLL_CHECK_GOTO(comm->tps[COLLI_TPI_SOCKET]->comm_init(comm, nif, self), err);
    if (comm->cfg.shm_disable) {
        coll_info(SHM, "COLL_SHM_DISABLE=1: ranks on this host use sockets");
    } else {
        comm->tps[COLLI_TPI_SHM] = colli_transport_get("shm");
        COLL_CHECK_GOTO(comm->tps[COLLI_TPI_SHM]->comm_init(comm, nif, self), err);
        if (!(self->caps & COLLI_CAP_SHM)) {
            /* unusable here (said why at init): the peers reach this rank over sockets */
            comm->tps[COLLI_TPI_SHM]->comm_fini(comm);
            comm->tps[COLLI_TPI_SHM] = NULL;
        }
    }
    if (comm->use_ib) {
        comm->tps[COLLI_TPI_IB] = colli_transport_get("ib");
        COLL_CHECK_GOTO(comm->tps[COLLI_TPI_IB]->comm_init(comm, nif, self), err);
        if (!(self->caps & COLLI_CAP_IB)) {
            /* PreferIB and no usable port after all (said why): sockets between hosts */
            comm->tps[COLLI_TPI_IB]->comm_fini(comm);
            comm->tps[COLLI_TPI_IB] = NULL;
        }
    }
    return COLL_SUCCESS;
err:
    return status;
}

coll_result_t colli_tp_ready(struct coll_comm *comm)
{
    comm->peer_tp = calloc((size_t)comm->nranks, 1);
    if (comm->peer_tp == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory choosing transports");
    const colli_member_t *me = &comm->members[comm->rank];
    int nshm = 0, nib = 0, noib = 0;
    char noib_list[128] = "";
    for (int p = 0; p < comm->nranks; p++) {
        const colli_member_t *m = &comm->members[p];
        bool same_host = strcmp(m->host_id, me->host_id) == 0;
        bool shm = p != comm->rank && comm->tps[COLLI_TPI_SHM] != NULL &&
                   (me->caps & m->caps & COLLI_CAP_SHM) && same_host;
        /* InfiniBand between hosts when both ranks opened a port for it */
        bool ib = p != comm->rank && !same_host && comm->tps[COLLI_TPI_IB] != NULL &&
                  (me->caps & m->caps & COLLI_CAP_IB);
        if (p != comm->rank && !same_host && !ib && comm->tps[COLLI_TPI_IB] != NULL) {
            if (comm->cfg.transport == COLLI_TP_REQUIRE_IB) {
                char who[200];
                colli_member_desc(comm, p, who, sizeof(who));
                colli_comm_blame(comm, p);
                return COLLI_ERR(IB, COLL_ERR_NETWORK,
                                 "COLL_TRANSPORT=RequireIB on rank %d, but %s, on another host, "
                                 "offers no InfiniBand (its COLL_TRANSPORT is not RequireIB or "
                                 "PreferIB, or it has no usable port: see its log). Give every "
                                 "rank the same policy and an active HCA port.",
                                 comm->rank, who);
            }
            size_t u = strlen(noib_list);
            if (u < sizeof(noib_list) - 16)
                snprintf(noib_list + u, sizeof(noib_list) - u, "%s%d", u ? " " : "", p);
            noib++;
        }
        comm->peer_tp[p] = shm ? COLLI_TPI_SHM : ib ? COLLI_TPI_IB : COLLI_TPI_SOCKET;
        nshm += shm;
        nib += ib;
    }
    if (noib > 0)
        coll_warn(IB,
                  "COLL_TRANSPORT=PreferIB: rank%s %s%s on other hosts %s no usable InfiniBand; "
                  "rank %d reaches %s over sockets",
                  noib > 1 ? "s" : "", noib_list, strlen(noib_list) > 100 ? " ..." : "",
                  noib > 1 ? "have" : "has", comm->rank, noib > 1 ? "them" : "it");
    for (int i = COLLI_TPI_SHM; i <= COLLI_TPI_IB; i++) {
        if ((i == COLLI_TPI_SHM ? nshm : nib) == 0 && comm->tps[i] != NULL) {
            comm->tps[i]->comm_fini(comm);
            comm->tps[i] = NULL;
        }
    }
    if (nib > 0)
        coll_info(INIT, "rank %d: %d peers over shared memory, %d over InfiniBand, %d over sockets",
                  comm->rank, nshm, nib, comm->nranks - 1 - nshm - nib);
    else
        coll_info(INIT, "rank %d: %d peers over shared memory, %d over sockets", comm->rank, nshm,
                  comm->nranks - 1 - nshm);
    for (int i = 0; i < COLLI_NTPI; i++) {
        if (comm->tps[i] == NULL)
            continue;
        coll_result_t status = comm->tps[i]->comm_ready(comm);
        if (status != COLL_SUCCESS)
            return status;
    }
    return COLL_SUCCESS;
}

coll_result_t colli_tp_progress(struct coll_comm *comm, colli_op_t *op, bool *progressed)
{
    for (int i = COLLI_TPI_SHM; i <= COLLI_TPI_IB; i++) {
        if (op->tp_lanes[i] == 0)
            continue;
        coll_result_t status = comm->tps[i]->progress(comm, op, progressed);
        if (status != COLL_SUCCESS)
            return status;
    }
    /* Notices and new connections arrive at the socket listener: an op without socket lanes
     * reads them when it waits (every wait polls the listener). */
    if (op->tp_lanes[COLLI_TPI_SOCKET] == 0)
        return COLL_SUCCESS;
    return comm->tps[COLLI_TPI_SOCKET]->progress(comm, op, progressed);
}

coll_result_t colli_tp_wait(struct coll_comm *comm, colli_op_t *op, int timeout_ms)
{
    colli_pollset_t set = {comm->pfds, 0, comm->pfd_cap, false};
    bool ready = false;
    bool armed[COLLI_NTPI] = {false};
    for (int i = 0; i < COLLI_NTPI; i++) {
        if (comm->tps[i] == NULL || (i != COLLI_TPI_SOCKET && op != NULL && op->tp_lanes[i] == 0))
            continue;
        armed[i] = true;
        ready |= comm->tps[i]->wait_arm(comm, op, &set);
    }
    comm->pfds = set.fds;
    comm->pfd_cap = set.cap;
    coll_result_t status = COLL_SUCCESS;
    if (set.oom) {
        status = COLLI_ERR(NET, COLL_ERR_SYSTEM, "out of memory waiting");
    } else if (poll(set.fds, (nfds_t)set.n, ready ? 0 : timeout_ms) < 0 && errno != EINTR) {
        status = COLLI_ERR(NET, COLL_ERR_SYSTEM, "poll failed: %s", strerror(errno));
    }
    /* every armed transport disarms, even after an error */
    for (int i = 0; i < COLLI_NTPI; i++) {
        if (!armed[i])
            continue;
        if (status != COLL_SUCCESS)
            for (int k = 0; k < set.n; k++)
                set.fds[k].revents = 0;
        coll_result_t st = comm->tps[i]->wait_done(comm, op, &set);
        if (status == COLL_SUCCESS)
            status = st;
    }
    return status;
}

coll_result_t colli_tp_adopt(struct coll_comm *comm, const colli_hello_t *hello, int fd)
{
    int owner = hello->kind == COLLI_HELLO_LINK ? COLLI_TPI_SHM
                : hello->kind == COLLI_HELLO_IB ? COLLI_TPI_IB
                                                : -1;
    if (owner < 0 || comm->tps[owner] == NULL) {
        coll_warn(NET, "rank %d opened a connection of kind %u that rank %d does not use; closed",
                  hello->from_rank, hello->kind, comm->rank);
        close(fd);
        return COLL_SUCCESS;
    }
    return comm->tps[owner]->adopt(comm, hello, fd);
}

coll_result_t colli_tp_poll_notices(struct coll_comm *comm)
{
    return comm->tps[COLLI_TPI_SOCKET] ? comm->tps[COLLI_TPI_SOCKET]->poll_notices(comm)
                                       : COLL_SUCCESS;
}

coll_result_t colli_tp_peer_left(struct coll_comm *comm, colli_subsys_t sub,
                                 const struct colli_op *op, int peer, const char *what,
                                 const char *via, int err)
{
    coll_result_t status = colli_tp_poll_notices(comm); /* the peer's own reason first */
    if (status != COLL_SUCCESS)
        return status;
    char who[200], d[160];
    colli_member_desc(comm, peer, who, sizeof(who));
    colli_comm_blame(comm, peer);
    return colli_error(sub, COLL_ERR_REMOTE,
                       "%s left while rank %d was %s it in %s #%llu over %s: the peer process "
                       "died, aborted or destroyed its communicator early (its link %s)",
                       who, comm->rank, what, colli_op_desc(op, d, sizeof(d)), colli_op_seq(op),
                       via, err ? strerror(err) : "reached end of stream");
}

void colli_tp_notify_abort(struct coll_comm *comm, const char *reason)
{
    for (int i = 0; i < COLLI_NTPI; i++)
        if (comm->tps[i] != NULL)
            comm->tps[i]->notify_abort(comm, reason);
}

void colli_tp_notify_stuck(struct coll_comm *comm, const char *waits)
{
    for (int i = 0; i < COLLI_NTPI; i++)
        if (comm->tps[i] != NULL)
            comm->tps[i]->notify_stuck(comm, waits);
}

void colli_tp_fini(struct coll_comm *comm)
{
    for (int i = COLLI_NTPI - 1; i >= 0; i--) {
        if (comm->tps[i] != NULL)
            comm->tps[i]->comm_fini(comm);
        comm->tps[i] = NULL;
    }
    free(comm->peer_tp);
    comm->peer_tp = NULL;
    free(comm->pfds);
    comm->pfds = NULL;
    comm->pfd_cap = 0;
}

const char *colli_tp_name(const struct coll_comm *comm, int peer)
{
    if (comm->peer_tp == NULL || peer < 0 || peer >= comm->nranks || peer == comm->rank)
        return "self";
    return comm->peer_tp[peer] == COLLI_TPI_SHM  ? "shm"
           : comm->peer_tp[peer] == COLLI_TPI_IB ? "ib"
                                                 : "socket";
}
