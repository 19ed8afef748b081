/* Transport registry (built once; fills missing operations with stubs) and the selection loop:
 * every transport probed and started in registry order, each peer given to the first one that
 * can reach it, one progress pass over all of them, one poll() over all their descriptors. No
 * transport is named here but in the registry: each one answers for itself. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "transport/transport.h"

static coll_result_t stub_probe(struct coll_comm *c, bool *use)
{
    *use = true;
    return COLL_SUCCESS;
}
static coll_result_t stub_comm_init(struct coll_comm *c, int tp, const colli_netif_t *n,
                                    colli_member_t *s)
{
    return COLLI_ERR(NET, COLL_ERR_UNSUPPORTED, "transport has no comm_init");
}
static coll_result_t stub_can_connect(struct coll_comm *c, int tp, const colli_member_t *p,
                                      bool *yes)
{
    *yes = false;
    return COLL_SUCCESS;
}
static coll_result_t stub_comm_ready(struct coll_comm *c, int tp)
{
    return COLL_SUCCESS;
}
static coll_result_t stub_progress(struct coll_comm *c, int tp, colli_op_t *op, bool *p)
{
    return COLLI_ERR(NET, COLL_ERR_UNSUPPORTED, "transport cannot move data");
}
static bool stub_wait_arm(struct coll_comm *c, int tp, colli_op_t *op, colli_pollset_t *set)
{
    return false;
}
static coll_result_t stub_wait_done(struct coll_comm *c, int tp, colli_op_t *op,
                                    colli_pollset_t *set)
{
    return COLL_SUCCESS;
}
static coll_result_t stub_adopt(struct coll_comm *c, int tp, const colli_hello_t *h, int fd)
{
    close(fd);
    return COLL_SUCCESS;
}
static coll_result_t stub_poll_notices(struct coll_comm *c, int tp)
{
    return COLL_SUCCESS;
}
static void stub_notify(struct coll_comm *c, int tp, const char *reason) {}
static void stub_fini(struct coll_comm *c, int tp) {}

/* The registry, in order of preference: a peer goes to the first transport that can reach it. */
static const colli_transport_t *const builtin[] = {&colli_shm_transport, &colli_ib_transport,
                                                   &colli_socket_transport};
#define NTRANSPORTS (sizeof(builtin) / sizeof(builtin[0]))
_Static_assert(NTRANSPORTS <= COLLI_MAX_TP, "a communicator has a slot for every transport");

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
        if (!t->via)
            t->via = t->name;
        if (!t->probe)
            t->probe = stub_probe;
        if (!t->comm_init)
            t->comm_init = stub_comm_init;
        if (!t->can_connect)
            t->can_connect = stub_can_connect;
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
            t->notify_stuck = stub_notify;
        if (!t->comm_fini)
            t->comm_fini = stub_fini;
    }
}

static const colli_transport_t *registered(size_t slot)
{
    pthread_once(&registry.once, registry_init);
    return &registry.filled[slot];
}

const colli_transport_t *colli_transport_get(const char *name)
{
    for (size_t i = 0; i < NTRANSPORTS; i++)
        if (strcmp(registered(i)->name, name) == 0)
            return registered(i);
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

#define FOR_EACH_TP(comm, i)                                                                       \
    for (int i = 0; i < (int)NTRANSPORTS; i++)                                                     \
        if ((comm)->tp[i].ops != NULL)

static void drop(struct coll_comm *comm, int tp)
{
    comm->tp[tp].ops->comm_fini(comm, tp);
    comm->tp[tp].ops = NULL;
    comm->tp[tp].state = NULL;
}

coll_result_t colli_tp_probe(struct coll_comm *comm)
{
    for (int i = 0; i < (int)NTRANSPORTS; i++) {
        const colli_transport_t *t = registered((size_t)i);
        bool use = false;
        coll_result_t status = t->probe(comm, &use);
        if (status != COLL_SUCCESS)
            return status;
        if (use || (t->flags & COLLI_TPF_LISTENER))
            comm->tp[i].ops = t;
    }
    return COLL_SUCCESS;
}

coll_result_t colli_tp_init(struct coll_comm *comm, const colli_netif_t *nif, colli_member_t *self)
{
    FOR_EACH_TP(comm, i)
    {
        const colli_transport_t *t = comm->tp[i].ops;
        coll_result_t status = t->comm_init(comm, i, nif, self);
        if (status != COLL_SUCCESS)
            return status;
        /* unusable here after all (it said why): peers reach this rank another way */
        if (t->cap != 0 && !(self->caps & t->cap))
            drop(comm, i);
    }
    return COLL_SUCCESS;
}

/* "rank 1: 2 peers over shared memory, 1 over sockets" */
static void log_choice(const struct coll_comm *comm, const int *npeers)
{
    char line[256];
    int used = snprintf(line, sizeof(line), "rank %d: ", comm->rank), listed = 0;
    for (int i = 0; i < (int)NTRANSPORTS && used > 0 && (size_t)used < sizeof(line); i++) {
        const colli_transport_t *t = registered((size_t)i);
        if ((t->flags & COLLI_TPF_QUIET) && npeers[i] == 0)
            continue;
        const bool first = listed++ == 0;
        used += snprintf(line + used, sizeof(line) - (size_t)used, "%s%d %sover %s",
                         first ? "" : ", ", npeers[i], first ? "peers " : "", t->via);
    }
    coll_info(INIT, "%s", line);
}

coll_result_t colli_tp_ready(struct coll_comm *comm)
{
    comm->peer_tp = calloc((size_t)comm->nranks, 1);
    if (comm->peer_tp == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory choosing transports");
    int npeers[NTRANSPORTS] = {0}, listener = -1;
    FOR_EACH_TP(comm, i)
    if (comm->tp[i].ops->flags & COLLI_TPF_LISTENER)
        listener = i;
    if (listener < 0)
        return COLLI_ERR(INIT, COLL_ERR_INTERNAL, "no transport owns a listener");
    comm->all_local = true;
    for (int p = 0; p < comm->nranks; p++) {
        comm->peer_tp[p] = (uint8_t)listener; /* this rank itself */
        if (p == comm->rank)
            continue;
        int chosen = -1;
        FOR_EACH_TP(comm, i)
        {
            bool yes = false;
            coll_result_t status = comm->tp[i].ops->can_connect(comm, i, &comm->members[p], &yes);
            if (status != COLL_SUCCESS)
                return status;
            if (yes) {
                chosen = i;
                break;
            }
        }
        if (chosen < 0) {
            char who[200];
            colli_member_desc(comm, p, who, sizeof(who));
            return COLLI_ERR(INIT, COLL_ERR_NETWORK, "rank %d has no transport that reaches %s",
                             comm->rank, who);
        }
        comm->peer_tp[p] = (uint8_t)chosen;
        npeers[chosen]++;
        comm->all_local &= (comm->tp[chosen].ops->flags & COLLI_TPF_LOCAL) != 0;
    }
    FOR_EACH_TP(comm, i)
    {
        const colli_transport_t *t = comm->tp[i].ops;
        comm->tp_streams[i] = (t->flags & COLLI_TPF_STREAMS) ? (uint8_t)comm->cfg.nstreams : 1;
        if (npeers[i] == 0 && !(t->flags & COLLI_TPF_LISTENER))
            drop(comm, i);
    }
    log_choice(comm, npeers);
    /* the listener's transport first: the others may wait for connections it accepts */
    coll_result_t status = comm->tp[listener].ops->comm_ready(comm, listener);
    FOR_EACH_TP(comm, i)
    {
        if (i != listener && status == COLL_SUCCESS)
            status = comm->tp[i].ops->comm_ready(comm, i);
    }
    return status;
}

coll_result_t colli_tp_progress(struct coll_comm *comm, colli_op_t *op, bool *progressed)
{
    /* Notices and new connections arrive at the listener: an op without lanes there reads them
     * when it waits (every wait polls the listener). */
    FOR_EACH_TP(comm, i)
    {
        if (op->tp_lanes[i] == 0)
            continue;
        coll_result_t status = comm->tp[i].ops->progress(comm, i, op, progressed);
        if (status != COLL_SUCCESS)
            return status;
    }
    return COLL_SUCCESS;
}

coll_result_t colli_tp_wait(struct coll_comm *comm, colli_op_t *op, int timeout_ms, int wake_fd,
                            bool *woken)
{
    colli_pollset_t set = {comm->pfds, 0, comm->pfd_cap, false};
    bool ready = false;
    bool armed[NTRANSPORTS] = {false};
    FOR_EACH_TP(comm, i)
    {
        if (!(comm->tp[i].ops->flags & COLLI_TPF_LISTENER) && op != NULL && op->tp_lanes[i] == 0)
            continue;
        armed[i] = true;
        ready |= comm->tp[i].ops->wait_arm(comm, i, op, &set);
    }
    const int wake = wake_fd >= 0 ? colli_pollset_add(&set, wake_fd, POLLIN) : -1;
    comm->pfds = set.fds;
    comm->pfd_cap = set.cap;
    coll_result_t status = COLL_SUCCESS;
    if (set.oom) {
        status = COLLI_ERR(NET, COLL_ERR_SYSTEM, "out of memory waiting");
    } else if (poll(set.fds, (nfds_t)set.n, ready ? 0 : timeout_ms) < 0 && errno != EINTR) {
        status = COLLI_ERR(NET, COLL_ERR_SYSTEM, "poll failed: %s", strerror(errno));
    }
    if (status == COLL_SUCCESS && wake >= 0 && (set.fds[wake].revents & (POLLIN | POLLHUP)))
        *woken = true;
    /* every armed transport disarms, even after an error */
    for (int i = 0; i < (int)NTRANSPORTS; i++) {
        if (!armed[i])
            continue;
        if (status != COLL_SUCCESS)
            for (int k = 0; k < set.n; k++)
                set.fds[k].revents = 0;
        coll_result_t st = comm->tp[i].ops->wait_done(comm, i, op, &set);
        if (status == COLL_SUCCESS)
            status = st;
    }
    return status;
}

coll_result_t colli_tp_adopt(struct coll_comm *comm, const colli_hello_t *hello, int fd)
{
    FOR_EACH_TP(comm, i)
    if (comm->tp[i].ops->hello_kind == hello->kind)
        return comm->tp[i].ops->adopt(comm, i, hello, fd);
    coll_warn(NET, "rank %d opened a connection of kind %u that rank %d does not use; closed",
              hello->from_rank, hello->kind, comm->rank);
    close(fd);
    return COLL_SUCCESS;
}

coll_result_t colli_tp_poll_notices(struct coll_comm *comm)
{
    FOR_EACH_TP(comm, i)
    {
        coll_result_t status = comm->tp[i].ops->poll_notices(comm, i);
        if (status != COLL_SUCCESS)
            return status;
    }
    return COLL_SUCCESS;
}

coll_result_t colli_tp_await_notice(struct coll_comm *comm, double seconds)
{
    for (const double until = colli_now() + seconds;;) {
        coll_result_t status = colli_tp_poll_notices(comm);
        if (status != COLL_SUCCESS || colli_now() >= until)
            return status;
        struct timespec ts = {0, 5 * 1000000};
        nanosleep(&ts, NULL);
    }
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
    FOR_EACH_TP(comm, i)
    comm->tp[i].ops->notify_abort(comm, i, reason);
}

void colli_tp_notify_stuck(struct coll_comm *comm, const char *waits)
{
    FOR_EACH_TP(comm, i)
    comm->tp[i].ops->notify_stuck(comm, i, waits);
}

void colli_tp_fini(struct coll_comm *comm)
{
    for (int i = (int)NTRANSPORTS - 1; i >= 0; i--)
        if (comm->tp[i].ops != NULL)
            drop(comm, i);
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
    const colli_transport_t *t = comm->tp[comm->peer_tp[peer]].ops;
    return t != NULL ? t->name : "?";
}

int colli_tp_listener_fd(struct coll_comm *comm)
{
    FOR_EACH_TP(comm, i)
    {
        const colli_transport_t *t = comm->tp[i].ops;
        if ((t->flags & COLLI_TPF_LISTENER) && t->listener_fd != NULL)
            return t->listener_fd(comm, i);
    }
    return -1;
}

void colli_tp_summary(const struct coll_comm *comm, char *buf, size_t len)
{
    int npeers[NTRANSPORTS] = {0};
    for (int p = 0; comm->peer_tp != NULL && p < comm->nranks; p++)
        if (p != comm->rank && comm->peer_tp[p] < NTRANSPORTS)
            npeers[comm->peer_tp[p]]++;
    size_t used = 0;
    snprintf(buf, len, "none");
    for (;;) {
        int best = -1;
        for (int i = 0; i < (int)NTRANSPORTS; i++)
            if (npeers[i] > 0 && (best < 0 || npeers[i] > npeers[best]))
                best = i;
        if (best < 0 || used >= len)
            return;
        int w = snprintf(buf + used, len - used, "%s%s (%d%s)", used ? ", " : "",
                         registered((size_t)best)->via, npeers[best],
                         used ? "" : (npeers[best] == 1 ? " peer" : " peers"));
        if (w < 0)
            return;
        used += (size_t)w;
        npeers[best] = 0;
    }
}

unsigned long colli_fd_need(const struct coll_comm *comm, int *sock, int *shm, int *ib)
{
    int n[3] = {0, 0, 0}; /* sockets, shared memory, InfiniBand */
    for (int p = 0; comm->peer_tp != NULL && p < comm->nranks; p++) {
        if (p == comm->rank || comm->tp[comm->peer_tp[p]].ops == NULL)
            continue;
        const char *name = comm->tp[comm->peer_tp[p]].ops->name;
        n[strcmp(name, "shm") == 0 ? 1 : strcmp(name, "ib") == 0 ? 2 : 0]++;
    }
    if (sock != NULL)
        *sock = n[0];
    if (shm != NULL)
        *shm = n[1];
    if (ib != NULL)
        *ib = n[2];
    unsigned long streams = comm->cfg.nstreams > 0 ? (unsigned long)comm->cfg.nstreams : 1;
    if (comm->members != NULL && comm->members[0].nstreams > 0)
        streams = comm->members[0].nstreams; /* rank 0's, adopted by all */
    return (unsigned long)n[0] * 2 * streams + 2ul * (unsigned long)n[1] + (unsigned long)n[2] + 64;
}

/* Descriptors open in this process, counted without opening one (the caller may have none
 * left); 0 where the limit is too large to probe quickly. */
static unsigned long fds_open(rlim_t limit)
{
    if (limit == RLIM_INFINITY || limit > 65536)
        return 0;
    const int saved = errno;
    unsigned long n = 0;
    for (rlim_t fd = 0; fd < limit; fd++)
        n += fcntl((int)fd, F_GETFD) != -1;
    errno = saved;
    return n;
}

void colli_fd_advice(const struct coll_comm *comm, int err, char *buf, size_t len)
{
    struct rlimit rl = {0, 0};
    (void)getrlimit(RLIMIT_NOFILE, &rl);
    int s = 0, m = 0, i = 0;
    unsigned long need = colli_fd_need(comm, &s, &m, &i);
    if (err == ENFILE) {
        /* not this process's limit: the kernel's table for every process of the host is full */
        snprintf(buf, len,
                 "the whole host is out of open files (every process together reached the "
                 "kernel's fs.file-max; this process's own limit, ulimit -n %llu, is not the "
                 "cause): close descriptors other programs on this host hold, or raise "
                 "fs.file-max (sysctl; on Kubernetes a node setting); rank %d with %d peers may "
                 "need about %lu descriptors",
                 (unsigned long long)rl.rlim_cur, comm->rank, comm->nranks - 1, need);
        return;
    }
    unsigned long held = rl.rlim_cur >= need ? fds_open(rl.rlim_cur) : 0;
    if (held > 0) {
        /* the limit covers the communicator: the program's own descriptors took the rest */
        snprintf(buf, len,
                 "the open-file limit (ulimit -n) is %llu (hard %llu) and rank %d with %d peers "
                 "(%d over sockets, %d over shared memory, %d over InfiniBand) may need about "
                 "%lu descriptors, but the process holds %lu: the program's own files and "
                 "connections use the rest: raise it (ulimit -n %llu, or the container's nofile "
                 "limit) or close descriptors the program no longer needs",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, comm->rank,
                 comm->nranks - 1, s, m, i, need, held,
                 (unsigned long long)rl.rlim_cur + (unsigned long long)need);
        return;
    }
    snprintf(buf, len,
             "the open-file limit (ulimit -n) is %llu (hard %llu), but rank %d with %d peers (%d "
             "over sockets, %d over shared memory, %d over InfiniBand) may need about %lu "
             "descriptors: raise it (ulimit -n %lu, or the container's nofile limit)",
             (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max, comm->rank,
             comm->nranks - 1, s, m, i, need, need);
}
