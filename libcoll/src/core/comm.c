/* Communicator lifecycle: handle registry, init from a unique id, destroy, abort, queries. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bootstrap/bootstrap.h"
#include "coll_kernels.h"
#include "transport/ib/ib_probe.h"
#include "bootstrap/netif.h"
#include "transport/transport.h"

/* Handles are (generation << 32 | slot + 1): a destroyed handle is detected, never followed.
 * This table is the only process-wide state besides logging and the transport registry. */
static struct {
    pthread_mutex_t lock;
    struct coll_comm **comms;
    uint32_t *gens;
    uint32_t cap;
} registry = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0};

coll_result_t colli_comm_register(struct coll_comm *comm, coll_comm_t *handle)
{
    pthread_mutex_lock(&registry.lock);
    uint32_t slot = 0;
    while (slot < registry.cap && registry.comms[slot] != NULL)
        slot++;
    if (slot == registry.cap) {
        uint32_t cap = registry.cap ? registry.cap * 2 : 16;
        struct coll_comm **c = realloc(registry.comms, cap * sizeof(*c));
        if (c)
            registry.comms = c;
        uint32_t *g = c ? realloc(registry.gens, cap * sizeof(*g)) : NULL;
        if (c == NULL || g == NULL) {
            pthread_mutex_unlock(&registry.lock);
            return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory registering a communicator");
        }
        registry.gens = g;
        for (uint32_t i = registry.cap; i < cap; i++) {
            registry.comms[i] = NULL;
            registry.gens[i] = 1;
        }
        registry.cap = cap;
    }
    registry.comms[slot] = comm;
    uint64_t h = ((uint64_t)registry.gens[slot] << 32) | (uint64_t)(slot + 1);
    pthread_mutex_unlock(&registry.lock);
    *handle = (coll_comm_t)(uintptr_t)h;
    return COLL_SUCCESS;
}

coll_result_t colli_comm_lookup(coll_comm_t handle, struct coll_comm **comm)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;
    uint32_t slot = (uint32_t)(h & 0xffffffffu), gen = (uint32_t)(h >> 32);
    if (handle == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "comm is NULL: pass a communicator from coll_comm_init_rank");
    pthread_mutex_lock(&registry.lock);
    struct coll_comm *c = NULL;
    if (slot >= 1 && slot <= registry.cap && registry.gens[slot - 1] == gen)
        c = registry.comms[slot - 1];
    pthread_mutex_unlock(&registry.lock);
    if (c == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "comm %p is not a live communicator: it was destroyed or aborted, or "
                         "never created; create a new one with coll_comm_init_rank",
                         (void *)handle);
    *comm = c;
    return COLL_SUCCESS;
}

void colli_comm_unregister(coll_comm_t handle)
{
    uint64_t h = (uint64_t)(uintptr_t)handle;
    uint32_t slot = (uint32_t)(h & 0xffffffffu);
    pthread_mutex_lock(&registry.lock);
    if (slot >= 1 && slot <= registry.cap) {
        registry.comms[slot - 1] = NULL;
        registry.gens[slot - 1]++;
        if (registry.gens[slot - 1] == 0)
            registry.gens[slot - 1] = 1;
    }
    pthread_mutex_unlock(&registry.lock);
}

void colli_member_desc(const struct coll_comm *comm, int rank, char *buf, size_t len)
{
    if (comm->members == NULL || rank < 0 || rank >= comm->nranks) {
        snprintf(buf, len, "rank %d", rank);
        return;
    }
    const colli_member_t *m = &comm->members[rank];
    char a[80];
    colli_sockaddr_str(&m->addr, a, sizeof(a));
    if (m->pod[0])
        snprintf(buf, len, "rank %d (pod %s on node %s, pid %d, %s)", rank, m->pod,
                 m->node[0] ? m->node : "?", m->pid, a);
    else
        snprintf(buf, len, "rank %d (pid %d on %s, %s)", rank, m->pid, m->hostname, a);
}

coll_result_t colli_comm_scratch(struct coll_comm *comm, size_t bytes, void **out)
{
    if (bytes > comm->scratch_size) {
        void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (p == NULL)
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory for %zu bytes of scratch",
                             bytes);
        free(comm->scratch);
        comm->scratch = p;
        comm->scratch_size = bytes;
    }
    *out = comm->scratch;
    return COLL_SUCCESS;
}

void colli_comm_blame(struct coll_comm *comm, int rank)
{
    if (comm->blame_rank < 0 && rank >= 0 && rank < comm->nranks)
        comm->blame_rank = rank;
}

void colli_comm_fail(struct coll_comm *comm, coll_result_t code, const char *msg)
{
    if (comm->async_error != COLL_SUCCESS)
        return;
    snprintf(comm->async_msg, sizeof(comm->async_msg), "%s", msg);
    /* read by the caller's thread while the device progress thread fails the communicator */
    __atomic_store_n(&comm->async_error, code, __ATOMIC_RELEASE);
    /* One summary line a user can paste into an issue. */
    coll_warn(COLL, "communicator failed on rank %d of %d: %s", comm->rank, comm->nranks, msg);
    colli_tp_notify_abort(comm, msg);
    colli_agent_notify_failure(comm, msg);
}

static void comm_free(struct coll_comm *comm)
{
    colli_dev_fini(comm, true); /* done already unless creation failed */
    colli_tp_fini(comm);
    colli_op_cache_free(comm);
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
    colli_cuda_ptr_fini(comm);
    free(comm->p2p_send_seq);
    free(comm->p2p_recv_seq);
    free(comm->stuck_reported);
    free(comm->stuck_waits);
    free(comm);
}

coll_result_t colli_apply_transport_policy(const colli_config_t *cfg, bool *use_ib)
{
    *use_ib = false;
    if (cfg->transport == COLLI_TP_SOCKET)
        return COLL_SUCCESS;
    if (cfg->transport == COLLI_TP_AUTO) {
        /* The InfiniBand transport has not yet run on real hardware: only on request. */
        coll_info(IB, "COLL_TRANSPORT=auto: sockets between hosts (PreferIB or RequireIB use "
                      "InfiniBand)");
        return COLL_SUCCESS;
    }
    colli_ib_probe_t probe;
    colli_ib_probe(cfg->ib_lib, cfg->ib_hca, &probe);
    if (!probe.usable) {
        if (cfg->transport == COLLI_TP_REQUIRE_IB)
            return COLLI_ERR(IB, COLL_ERR_NETWORK,
                             "COLL_TRANSPORT=RequireIB, but InfiniBand is not usable here: %s",
                             probe.reason);
        coll_warn(IB, "COLL_TRANSPORT=PreferIB: using sockets because %s", probe.reason);
        return COLL_SUCCESS;
    }
    coll_info(IB, "COLL_TRANSPORT=%s: InfiniBand ports %s are active",
              cfg->transport == COLLI_TP_REQUIRE_IB ? "RequireIB" : "PreferIB", probe.devices);
    *use_ib = true;
    return COLL_SUCCESS;
}

/* COLL_HOST_ID_SUFFIX (tests only): "a" for every rank, or "a,a,b" by rank, appended to the
 * host identity so that ranks of one machine count as different hosts (and use sockets). */
static void apply_host_id_suffix(const struct coll_comm *comm, colli_member_t *self)
{
    size_t n = 0;
    const char *p = colli_rank_entry(comm->cfg.host_id_suffix, comm->rank, &n);
    if (p == NULL)
        return; /* no list, or one shorter than the rank: no suffix */
    if (n > 32)
        n = 32;
    size_t base = strlen(self->host_id);
    if (base + 1 + n >= sizeof(self->host_id))
        base = sizeof(self->host_id) - 2 - n;
    snprintf(self->host_id + base, sizeof(self->host_id) - base, "+%.*s", (int)n, p);
    coll_info(INIT, "COLL_HOST_ID_SUFFIX (tests only): host identity %s", self->host_id);
}

static int count_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

coll_result_t coll_comm_init_rank(coll_comm_t *out, int nranks, coll_unique_id_t id, int rank)
{
    coll_result_t status;
    if (out == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_rank: comm is NULL (pass a coll_comm_t to fill)");
    if (nranks < 1)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_rank: nranks=%d must be at least 1", nranks);
    if (rank < 0 || rank >= nranks)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_init_rank: rank=%d is out of range [0, %d)", rank, nranks);
    struct sockaddr_storage root;
    uint8_t secret[16];
    status = colli_uid_decode(&id, &root, secret);
    if (status != COLL_SUCCESS)
        return status;
    return colli_comm_create(out, nranks, rank, &root, secret, NULL, 0, NULL, NULL);
}

coll_result_t colli_comm_create(coll_comm_t *out, int nranks, int rank,
                                const struct sockaddr_storage *root, const uint8_t secret[16],
                                const colli_pin_t *pins, int npins, const char *agent_socket,
                                const colli_ident_t *ident)
{
    coll_result_t status;
    bool bootstrapped = false;
    struct coll_comm *comm = calloc(1, sizeof(*comm));
    if (comm == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory creating a communicator");
    int saved_rank = colli_log_get_rank();
    colli_log_set_rank(rank);
    comm->rank = rank;
    comm->nranks = nranks;
    comm->blame_rank = -1;
    memcpy(comm->secret, secret, 16);
    comm->tag = colli_comm_tag(secret);
    COLL_CHECK_GOTO(colli_config_load(&comm->cfg), err_free);
    for (int i = 0; i < npins; i++)
        COLL_CHECK_GOTO(colli_config_pin(&comm->cfg, pins[i].name, pins[i].value, COLLI_SRC_AGENT),
                        err_free);
    if (agent_socket != NULL)
        snprintf(comm->agent_socket, sizeof(comm->agent_socket), "%s", agent_socket);
    COLL_CHECK_GOTO(colli_apply_transport_policy(&comm->cfg, &comm->use_ib), err_free);
    colli_netif_t nif;
    COLL_CHECK_GOTO(colli_netif_select(comm->cfg.socket_ifname, comm->cfg.socket_family, &nif),
                    err_free);
    colli_member_t self;
    memset(&self, 0, sizeof(self));
    COLL_CHECK_GOTO(colli_tp_init(comm, &nif, &self), err_free);
    self.rank = rank;
    self.nranks = nranks;
    self.proto = COLLI_PROTO_VERSION;
    snprintf(self.version, sizeof(self.version), "%s", COLL_VERSION_STRING_BUILD);
    snprintf(self.ifname, sizeof(self.ifname), "%s", nif.name);
    colli_member_fill_host(&self);
    apply_host_id_suffix(comm, &self);
    if (ident != NULL) {
        snprintf(self.pod, sizeof(self.pod), "%s", ident->pod ? ident->pod : "");
        snprintf(self.node, sizeof(self.node), "%s", ident->node ? ident->node : "");
        snprintf(self.group, sizeof(self.group), "%s", ident->group ? ident->group : "");
    }
    self.nstreams = (uint32_t)comm->cfg.nstreams;
    self.chunk_size = comm->cfg.chunk_size;
    self.small_threshold = comm->cfg.small_threshold;
    self.direct_min = comm->cfg.shm_direct_min;
    colli_cuda_versions(&comm->cfg, rank, &self.cuda_runtime, &self.cuda_driver);
    char la[80];
    colli_sockaddr_str(&self.addr, la, sizeof(la));
    coll_info(INIT, "rank %d of %d: %s on %s, kcoll %s, kernels %s", rank, nranks, la, nif.name,
              COLL_VERSION_STRING_BUILD, colli_kernels_isa());
    bootstrapped = true; /* from here on the root itself reports what went wrong */
    COLL_CHECK_GOTO(colli_bootstrap_exchange(comm, root, &self, &nif.addr), err_free);
    /* Every rank runs rank 0's tuning, so that all choose the same algorithms. */
    const colli_member_t *m0 = &comm->members[0];
    if (m0->nstreams != self.nstreams || m0->chunk_size != self.chunk_size ||
        m0->small_threshold != self.small_threshold || m0->direct_min != self.direct_min)
        coll_info(CONFIG,
                  "adopting rank 0's tuning: streams %u, chunk %llu, small threshold %llu, "
                  "single-copy minimum %llu",
                  m0->nstreams, (unsigned long long)m0->chunk_size,
                  (unsigned long long)m0->small_threshold, (unsigned long long)m0->direct_min);
    comm->cfg.nstreams = (int)m0->nstreams;
    comm->cfg.chunk_size = m0->chunk_size;
    comm->cfg.small_threshold = m0->small_threshold;
    comm->cfg.shm_direct_min = m0->direct_min;
    for (int i = 0; i < nranks; i++)
        if (strcmp(comm->members[i].host_id, self.host_id) == 0)
            comm->local_ranks++;
    comm->oversubscribed = comm->local_ranks > count_cores();
    COLL_CHECK_GOTO(colli_comm_ring_order(comm), err_free);
    colli_cuda_ptr_init(comm);
    COLL_CHECK_GOTO(colli_dev_init(comm), err_free);
    comm->staging = calloc((size_t)nranks * m0->nstreams, sizeof(void *));
    comm->p2p_send_seq = calloc((size_t)nranks, sizeof(uint64_t));
    comm->p2p_recv_seq = calloc((size_t)nranks, sizeof(uint64_t));
    comm->stuck_reported = calloc((size_t)nranks, 1);
    comm->stuck_waits = calloc((size_t)nranks, 1);
    if (comm->staging == NULL || comm->p2p_send_seq == NULL || comm->p2p_recv_seq == NULL ||
        comm->stuck_reported == NULL || comm->stuck_waits == NULL) {
        status =
            COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory for a %d-rank communicator", nranks);
        goto err_free;
    }
    COLL_CHECK_GOTO(colli_tp_ready(comm), err_free);
    colli_config_log(&comm->cfg);
    COLL_CHECK_GOTO(colli_comm_register(comm, out), err_free);
    coll_info(INIT, "communicator ready: rank %d of %d, %d on this host", rank, nranks,
              comm->local_ranks);
    colli_log_set_rank(saved_rank);
    return COLL_SUCCESS;
err_free:
    if (!bootstrapped && status != COLL_SUCCESS) {
        /* A local problem (configuration, pins, interface): fail every rank now, by name. */
        char msg[1100];
        snprintf(msg, sizeof(msg), "%s", colli_last_error());
        colli_bootstrap_report_error(root, secret, rank, nranks, msg);
        colli_set_last_error(msg);
    }
    comm_free(comm);
    colli_log_set_rank(saved_rank);
    return status;
}

coll_result_t coll_comm_destroy(coll_comm_t handle)
{
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

coll_result_t coll_comm_abort(coll_comm_t handle)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    int saved = colli_log_get_rank();
    colli_log_set_rank(comm->rank);
    char why[128];
    snprintf(why, sizeof(why), "rank %d called coll_comm_abort", comm->rank);
    /* the device progress thread stops first: its call in progress ends, queued ones fail */
    colli_dev_fini(comm, true);
    if (comm->async_error == COLL_SUCCESS) {
        comm->async_error = COLL_ERR_ABORTED;
        snprintf(comm->async_msg, sizeof(comm->async_msg), "%s", why);
        colli_tp_notify_abort(comm, why);
    }
    colli_comm_unregister(handle);
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
