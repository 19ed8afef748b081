/* Communicator lifecycle: create a member (from a unique id, the agent or a parent), destroy,
 * abort, queries. */
#include <pthread.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "algo/algos.h"
#include "base/netif.h"
#include "bootstrap/bootstrap.h"
#include "coll_kernels.h"
#include "core/core.h"
#include "device/cuda_driver.h"
#include "transport/transport.h"

/* comm->on_fail: tell the peers (abort notices) and the pod's agent. */
static void comm_on_fail(struct coll_comm *comm, const char *msg)
{
    colli_tp_notify_abort(comm, msg);
    colli_agent_notify_failure(comm, msg);
}

static void comm_free(struct coll_comm *comm)
{
    colli_dev_fini(comm, true); /* done already unless creation failed */
    colli_tp_fini(comm);
    colli_op_cache_free(comm);
    colli_p2p_pending_free(comm);
    if (comm->staging) {
        size_t n = (size_t)comm->nranks * (comm->members ? comm->members[0].nstreams : 1);
        for (size_t i = 0; i < n; i++)
            free(comm->staging[i]);
    }
    free(comm->staging);
    free(comm->scratch);
    colli_direct_fini(comm);
    free(comm->members);
    free(comm->ring_rank);
    free(comm->ring_posof);
    colli_dev_release(comm);
    free(comm->p2p_send_seq);
    free(comm->p2p_recv_seq);
    free(comm->stuck_reported);
    free(comm->stuck_waits);
    free(comm);
}

/* COLL_TEST_HOST_ID_SUFFIX: "a" for every rank, or "a,a,b" by rank, appended to the
 * host identity so that ranks of one machine count as different hosts (and use sockets). */
static void apply_host_id_suffix(const struct coll_comm *comm, colli_member_t *self)
{
    size_t n = 0;
    const char *p = colli_testhook_rank_entry(comm->test.host_id_suffix, comm->rank, &n);
    if (p == NULL)
        return; /* no list, or one shorter than the rank: no suffix */
    if (n > 32)
        n = 32;
    size_t base = strlen(self->host_id);
    if (base + 1 + n >= sizeof(self->host_id))
        base = sizeof(self->host_id) - 2 - n;
    snprintf(self->host_id + base, sizeof(self->host_id) - base, "+%.*s", (int)n, p);
    coll_info(INIT, "COLL_TEST_HOST_ID_SUFFIX: host identity %s", self->host_id);
}

/* COLL_TEST_BOOT_ID: "x" for every rank, or "x,y" by rank, in place of the boot id of the host
 * identity ("hostname/boot id/IPC namespace"), so that ranks of one machine count as different
 * machines. */
static void apply_boot_id(const struct coll_comm *comm, colli_member_t *self)
{
    size_t n = 0;
    const char *p = colli_testhook_rank_entry(comm->test.boot_id, comm->rank, &n);
    char *a = p != NULL ? strchr(self->host_id, '/') : NULL;
    char *b = a != NULL ? strchr(a + 1, '/') : NULL;
    if (b == NULL)
        return;
    char rest[sizeof(self->host_id)];
    snprintf(rest, sizeof(rest), "%s", b);
    const size_t at = (size_t)(a - self->host_id);
    snprintf(a, sizeof(self->host_id) - at, "/%.*s%s", (int)(n > 36 ? 36 : n), p, rest);
}

/* COLL_TEST_FAIL_READY: this rank's creation fails after the exchange (tests only). */
static coll_result_t injected_ready_failure(const struct coll_comm *comm)
{
    size_t n = 0;
    const char *p = colli_testhook_rank_entry(comm->test.fail_ready, comm->rank, &n);
    if (p == NULL || n != 1 || *p != '1')
        return COLL_SUCCESS;
    return COLLI_ERR(INIT, COLL_ERR_SYSTEM,
                     "rank %d: injected failure after the exchange (COLL_TEST_FAIL_READY)",
                     comm->rank);
}

static int count_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static coll_result_t init_rank(coll_comm_t *out, int nranks, coll_unique_id_t id, int rank,
                               double bound)
{
    if (out == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_rank: comm is NULL (pass a coll_comm_t to fill)");
    if (nranks < 1)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_rank: nranks=%d must be at least 1", nranks);
    if (rank < 0 || rank >= nranks)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_rank: rank=%d is out of range [0, %d)", rank, nranks);
    coll_result_t status = colli_config_check_bound("coll_comm_init_rank_timeout", bound);
    if (status != COLL_SUCCESS)
        return status;
    colli_create_t c = {.nranks = nranks, .rank = rank, .bound = bound};
    status = colli_uid_decode(&id, &c.root, c.secret);
    if (status != COLL_SUCCESS)
        return status;
    /* an id every process made alike from an address (NCCL_COMM_ID): rank 0 hosts its root */
    c.host_root = rank == 0 && (colli_uid_flags(&id) & COLLI_UID_ROOT_AT_INIT);
    c.root_busy = "The port of the unique id's address (NCCL_COMM_ID under libnccl.so.2) is "
                  "taken on this host: choose a free port, the same for every rank";
    /* in a pod with the kcoll sidecar: its pins, version check and status reports; the
     * rendezvous still comes from the caller's id (frameworks hand ids around themselves) */
    colli_proto_facts_t facts;
    if ((status = colli_agent_attach(&c, &facts)) != COLL_SUCCESS)
        return status;
    /* in a group: created at coll_group_end, together with the group's other communicators */
    if (colli_group_active())
        return colli_group_enqueue_init(&c, out);
    status = colli_comm_create(&c, out);
    colli_agent_created(&c, status == COLL_SUCCESS ? *out : NULL, status);
    return status;
}

coll_result_t coll_comm_init_rank(coll_comm_t *out, int nranks, coll_unique_id_t id, int rank)
{
    return colli_group_note(init_rank(out, nranks, id, rank, 0)); /* in a group: fails it */
}

coll_result_t coll_comm_init_rank_timeout(coll_comm_t *out, int nranks, coll_unique_id_t id,
                                          int rank, double seconds)
{
    return colli_group_note(init_rank(out, nranks, id, rank, seconds));
}

/* The configuration snapshot: the parent's (split), else environment > default with the
 * agent's pins on top. */
static coll_result_t load_config(struct coll_comm *comm, const colli_create_t *c)
{
    if (c->parent != NULL) {
        comm->cfg = c->parent->cfg;
        comm->test = c->parent->test;
        snprintf(comm->agent_socket, sizeof(comm->agent_socket), "%s", c->parent->agent_socket);
        snprintf(comm->agent_ns, sizeof(comm->agent_ns), "%s", c->parent->agent_ns);
        snprintf(comm->agent_job, sizeof(comm->agent_job), "%s", c->parent->agent_job);
        return COLL_SUCCESS;
    }
    colli_testhook_load(&comm->test);
    coll_result_t status = colli_config_load(&comm->cfg);
    if (status == COLL_SUCCESS && c->agent != NULL)
        status = colli_agent_apply_pins(&comm->cfg, c->agent);
    colli_config_bound_bootstrap(&comm->cfg, c->bound);
    if (c->agent_socket != NULL)
        snprintf(comm->agent_socket, sizeof(comm->agent_socket), "%s", c->agent_socket);
    if (c->agent != NULL && c->agent->topology[0] != '\0') { /* Kubernetes, not standalone */
        snprintf(comm->agent_ns, sizeof(comm->agent_ns), "%s", c->agent->ns);
        snprintf(comm->agent_job, sizeof(comm->agent_job), "%s", c->agent->job);
    }
    return status;
}

/* A name cut to the record's field (pod and node names of up to 253 characters travel in
 * 128-byte fields: the cut is deliberate, the full name is in the agent's log). */
static void copy_name(char *dst, size_t len, const char *src)
{
    size_t n = strnlen(src, len - 1);
    memcpy(dst, src, n);
    dst[n] = '\0';
}

/* This rank's member record, beyond what the transports filled (listener, capabilities). */
static void describe_self(const struct coll_comm *comm, const colli_create_t *c,
                          const colli_netif_t *nif, colli_member_t *self)
{
    self->rank = comm->rank;
    self->nranks = comm->nranks;
    self->proto = COLLI_PROTO_VERSION;
    snprintf(self->version, sizeof(self->version), "%s", COLL_VERSION_STRING_BUILD);
    snprintf(self->ifname, sizeof(self->ifname), "%s", nif->name);
    self->prefix = nif->prefix;
    self->how = nif->how;
    colli_member_fill_host(self);
    apply_boot_id(comm, self);
    apply_host_id_suffix(comm, self);
    /* the names the agent gave this rank; a split child keeps its parent's */
    const colli_member_t *pm = c->parent != NULL ? &c->parent->members[c->parent->rank] : NULL;
    const colli_proto_facts_t *f = c->agent;
    copy_name(self->pod, sizeof(self->pod), pm ? pm->pod : f ? f->pod : "");
    copy_name(self->node, sizeof(self->node), pm ? pm->node : f ? f->node : "");
    copy_name(self->group, sizeof(self->group), pm ? pm->group : f ? f->group : "");
    self->local_rank = pm ? pm->local_rank : f ? f->local_rank : 0;
    self->local_size = pm ? pm->local_size : f ? f->local_size : 0;
    self->gpu = pm ? pm->gpu : f ? colli_agent_gpu(f) : -1;
    self->nstreams = (uint32_t)comm->cfg.nstreams;
    self->chunk_size = comm->cfg.chunk_size;
    self->small_threshold = comm->cfg.small_threshold;
    self->direct_min = comm->cfg.shm_direct_min;
    self->hier_min = comm->cfg.hier_min;
    colli_cuda_versions(&comm->test, comm->rank, &self->cuda_runtime, &self->cuda_driver);
}

/* Several ranks per pod: this rank's place and whether all-reduce is hierarchical. */
static void log_pods(const struct coll_comm *comm)
{
    const colli_member_t *me = &comm->members[comm->rank];
    int per, pods;
    if (me->local_size < 2)
        return;
    if (colli_hier_layout(comm, &per, &pods))
        coll_info(INIT,
                  "%d pods x %d ranks: rank %d is local rank %d of pod %s (node %s), GPU %d; "
                  "all_reduce from %zu bytes is hierarchical (COLL_HIER_MIN; 0 = flat ring)",
                  pods, per, comm->rank, me->local_rank, me->pod, me->node[0] ? me->node : "?",
                  me->gpu, comm->cfg.hier_min);
    else
        coll_info(INIT,
                  "rank %d is local rank %d of %d of pod %s (node %s), GPU %d; the pods are not "
                  "all alike, so all_reduce runs the flat ring",
                  comm->rank, me->local_rank, me->local_size, me->pod, me->node[0] ? me->node : "?",
                  me->gpu);
}

/* Every rank runs rank 0's tuning, so that all choose the same algorithms. */
static void adopt_tuning(struct coll_comm *comm, const colli_member_t *self)
{
    const colli_member_t *m0 = &comm->members[0];
    if (m0->nstreams != self->nstreams || m0->chunk_size != self->chunk_size ||
        m0->small_threshold != self->small_threshold || m0->direct_min != self->direct_min ||
        m0->hier_min != self->hier_min)
        coll_info(CONFIG,
                  "adopting rank 0's tuning: streams %u, chunk %llu, small threshold %llu, "
                  "single-copy minimum %llu, hierarchical minimum %llu",
                  m0->nstreams, (unsigned long long)m0->chunk_size,
                  (unsigned long long)m0->small_threshold, (unsigned long long)m0->direct_min,
                  (unsigned long long)m0->hier_min);
    comm->cfg.nstreams = (int)m0->nstreams;
    comm->cfg.chunk_size = m0->chunk_size;
    comm->cfg.small_threshold = m0->small_threshold;
    comm->cfg.shm_direct_min = m0->direct_min;
    comm->cfg.hier_min = m0->hier_min;
    for (int i = 0; i < comm->nranks; i++)
        if (strcmp(comm->members[i].host_id, self->host_id) == 0)
            comm->local_ranks++;
    comm->oversubscribed = comm->local_ranks > count_cores();
}

/* The per-peer arrays every operation uses. */
static coll_result_t alloc_peer_state(struct coll_comm *comm)
{
    const size_t n = (size_t)comm->nranks;
    comm->staging = calloc(n * comm->members[0].nstreams, sizeof(void *));
    comm->p2p_send_seq = calloc(n, sizeof(uint64_t));
    comm->p2p_recv_seq = calloc(n, sizeof(uint64_t));
    comm->stuck_reported = calloc(n, 1);
    comm->stuck_waits = calloc(n, 1);
    if (comm->staging == NULL || comm->p2p_send_seq == NULL || comm->p2p_recv_seq == NULL ||
        comm->stuck_reported == NULL || comm->stuck_waits == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory for a %d-rank communicator",
                         comm->nranks);
    return COLL_SUCCESS;
}

static coll_result_t create(const colli_create_t *c, coll_comm_t *out);

coll_result_t colli_comm_create(const colli_create_t *c, coll_comm_t *out)
{
    if (!c->host_root)
        return create(c, out);
    colli_config_t cfg;
    pthread_t root;
    coll_result_t status = colli_config_load(&cfg);
    colli_config_bound_bootstrap(&cfg, c->bound);
    if (status == COLL_SUCCESS)
        status = colli_host_root(&c->root, c->secret, cfg.bootstrap_timeout, c->root_busy, &root);
    if (status != COLL_SUCCESS)
        return status;
    status = create(c, out);
    colli_root_finish(root, status);
    return status;
}

static coll_result_t create(const colli_create_t *c, coll_comm_t *out)
{
    coll_result_t status;
    bool bootstrapped = false, exchanged = false;
    struct coll_comm *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory creating a communicator");
    int saved_rank = colli_log_get_rank();
    colli_log_set_rank(c->rank);
    comm->rank = c->rank;
    comm->nranks = c->nranks;
    comm->blame_rank = -1;
    comm->on_fail = comm_on_fail;
    memcpy(comm->secret, c->secret, 16);
    comm->tag = colli_comm_tag(c->secret);
    COLL_CHECK_GOTO(load_config(comm, c), err_free);
    colli_agent_watch_peers(comm);
    COLL_CHECK_GOTO(colli_tp_probe(comm), err_free);
    colli_netif_t nif;
    COLL_CHECK_GOTO(
        colli_netif_select_toward(comm->cfg.socket_ifname, comm->cfg.socket_family, &c->root, &nif),
        err_free);
    colli_member_t self;
    memset(&self, 0, sizeof(self));
    COLL_CHECK_GOTO(colli_tp_init(comm, &nif, &self), err_free);
    describe_self(comm, c, &nif, &self);
    char la[80];
    colli_sockaddr_str(&self.addr, la, sizeof(la));
    coll_info(INIT, "rank %d of %d: %s on %s, kcoll %s, kernels %s", c->rank, c->nranks, la,
              nif.name, COLL_VERSION_STRING_BUILD, colli_kernels_isa());
    bootstrapped = true; /* from here on the root itself reports what went wrong */
    COLL_CHECK_GOTO(colli_bootstrap_exchange(comm, &c->root, &self, &nif.addr, c->shared_root),
                    err_free);
    exchanged = true; /* from here on every member's address is known */
    adopt_tuning(comm, &self);
    COLL_CHECK_GOTO(colli_comm_ring_order(comm), err_free);
    log_pods(comm);
    COLL_CHECK_GOTO(colli_dev_init(comm), err_free);
    COLL_CHECK_GOTO(alloc_peer_state(comm), err_free);
    COLL_CHECK_GOTO(injected_ready_failure(comm), err_free);
    COLL_CHECK_GOTO(colli_tp_ready(comm), err_free);
    if (c->parent == NULL) /* a split's or shrink's is its parent's, logged with it */
        colli_config_log(&comm->cfg);
    COLL_CHECK_GOTO(colli_comm_register(comm, out), err_free);
    coll_info(INIT, "communicator ready: rank %d of %d, %d on this host", c->rank, c->nranks,
              comm->local_ranks);
    colli_log_set_rank(saved_rank);
    return COLL_SUCCESS;
err_free:
    if (!bootstrapped) {
        /* A local problem (configuration, pins, interface): fail every rank now, by name. */
        char msg[1100];
        snprintf(msg, sizeof(msg), "%s", colli_last_error());
        colli_bootstrap_report_error(&c->root, c->secret, c->rank, c->nranks, msg);
        colli_set_last_error(msg);
    } else if (exchanged) {
        /* Failed after the exchange (a link, a device, descriptors): the peers are past the
         * root and wait for this rank's links or its first operation, which will never come.
         * Tell them why (abort notices), or they wait until COLL_BOOTSTRAP_TIMEOUT (1800 s
         * under libnccl.so.2) to fail without it: nccl_ports_8. */
        char msg[1100];
        snprintf(msg, sizeof(msg), "%s", colli_last_error());
        colli_tp_notify_abort(comm, msg);
        colli_set_last_error(msg);
    }
    comm_free(comm);
    colli_log_set_rank(saved_rank);
    return status;
}

coll_result_t coll_comm_destroy(coll_comm_t handle)
{
    if (colli_comm_let_go_inherited(handle, "coll_comm_destroy"))
        return COLL_SUCCESS;
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    /* calls on device buffers still queued run first (their streams given COLL_TIMEOUT) */
    colli_dev_fini(comm, false);
    if (__atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE))
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "coll_comm_destroy: an operation is still running on this communicator "
                         "in another thread");
    colli_comm_unregister(handle);
    comm_free(comm);
    return COLL_SUCCESS;
}

/* Wait (bounded) until no operation runs on comm in another thread; false when one still does. */
static bool wait_idle(const struct coll_comm *comm, double seconds)
{
    const double end = colli_now() + seconds;
    while (__atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE)) {
        if (colli_now() >= end)
            return false;
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    return true;
}

coll_result_t colli_comm_stop(struct coll_comm *comm, const char *why, bool *was_healthy)
{
    bool healthy = false;
    __atomic_store_n(&comm->abort_req, 1, __ATOMIC_RELEASE);
    /* the device progress thread stops first: its call in progress ends, queued ones fail */
    colli_dev_fini(comm, true);
    if (!wait_idle(comm, 10.0))
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "%s: an operation in another thread did not stop within 10 s", why);
    if (comm->async_error == COLL_SUCCESS) {
        healthy = true;
        snprintf(comm->async_msg, sizeof(comm->async_msg), "%s", why);
        __atomic_store_n(&comm->async_error, COLL_ERR_ABORTED, __ATOMIC_RELEASE);
    }
    if (was_healthy != NULL)
        *was_healthy = healthy;
    return COLL_SUCCESS;
}

coll_result_t coll_comm_revoke(coll_comm_t handle)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (colli_group_active())
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "coll_comm_revoke inside coll_group_start/coll_group_end; call it outside "
                         "a group");
    char why[160];
    snprintf(why, sizeof(why),
             "rank %d revoked the communicator (coll_comm_revoke / ncclCommRevoke): only split, "
             "shrink, destroy or abort remain",
             comm->rank);
    int saved = colli_log_get_rank();
    colli_log_set_rank(comm->rank);
    status = colli_comm_stop(comm, why, NULL);
    colli_log_set_rank(saved);
    return status;
}

coll_result_t coll_comm_abort(coll_comm_t handle)
{
    if (colli_comm_let_go_inherited(handle, "coll_comm_abort"))
        return COLL_SUCCESS;
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    /* no new call gets the communicator; one in progress on another thread stops at its next
     * idle pass (within about 0.1 s) and fails with COLL_ERR_ABORTED */
    colli_comm_unregister(handle);
    int saved = colli_log_get_rank();
    colli_log_set_rank(comm->rank);
    char why[128];
    snprintf(why, sizeof(why), "rank %d called coll_comm_abort", comm->rank);
    bool was_healthy = false;
    if (colli_comm_stop(comm, why, &was_healthy) != COLL_SUCCESS) {
        /* it never left: freeing would pull the memory from under it; keep it (a leak) */
        coll_warn(INIT, "rank %d: coll_comm_abort: %s; the communicator's memory is kept",
                  comm->rank, colli_last_error());
        colli_log_set_rank(saved);
        return COLL_SUCCESS;
    }
    if (was_healthy) /* the peers learn it now (a failed communicator told them already) */
        colli_tp_notify_abort(comm, why);
    comm_free(comm);
    colli_log_set_rank(saved);
    return COLL_SUCCESS;
}

coll_result_t coll_comm_get_async_error(coll_comm_t handle, coll_result_t *async_error)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (async_error == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_get_async_error: async_error is NULL");
    *async_error = comm->async_error;
    if (comm->async_error != COLL_SUCCESS)
        colli_set_last_error(comm->async_msg);
    return COLL_SUCCESS;
}

coll_result_t coll_comm_set_timeout(coll_comm_t handle, double seconds)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (!(seconds >= 0) || seconds > 86400.0 * 365)
        return COLLI_ERR(CONFIG, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_set_timeout: %g seconds: give 0 (no deadline) up to a year",
                         seconds);
    const colli_source_t src = colli_config_source(&comm->cfg, "COLL_TIMEOUT");
    if (src == COLLI_SRC_ENV || src == COLLI_SRC_AGENT) {
        coll_info(CONFIG,
                  "rank %d: the program's deadline of %g s for operations is not used: "
                  "COLL_TIMEOUT = %g s from %s wins",
                  comm->rank, seconds, comm->cfg.timeout,
                  src == COLLI_SRC_ENV ? "the environment" : "the agent's pin");
        return COLL_SUCCESS;
    }
    comm->cfg.timeout = seconds == 0 ? INFINITY : seconds;
    return COLL_SUCCESS;
}

coll_result_t coll_comm_count(const coll_comm_t handle, int *count)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (count == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT, "coll_comm_count: count is NULL");
    *count = comm->nranks;
    return COLL_SUCCESS;
}

coll_result_t coll_comm_rank_place(const coll_comm_t handle, int rank, coll_rank_place_t *place)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (place == NULL || rank < 0 || rank >= comm->nranks)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_rank_place: rank %d is not in 0..%d, or place is NULL", rank,
                         comm->nranks - 1);
    const colli_member_t *m = &comm->members[rank];
    memset(place, 0, sizeof(*place));
    snprintf(place->pod, sizeof(place->pod), "%s", m->pod);
    snprintf(place->node, sizeof(place->node), "%s", m->node);
    place->local_size = m->local_size > 0 ? m->local_size : 1;
    place->local_rank = m->local_size > 0 ? m->local_rank : 0;
    place->gpu = m->local_size > 0 ? m->gpu : -1;
    return COLL_SUCCESS;
}

coll_result_t coll_comm_user_rank(const coll_comm_t handle, int *rank)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (rank == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT, "coll_comm_user_rank: rank is NULL");
    *rank = comm->rank;
    return COLL_SUCCESS;
}
