/* InfiniBand verbs transport: device and port selection at init, queue pairs, rings and the
 * exchange over the link at communicator creation, teardown (see ib.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "base/sockutil.h"
#include "transport/ib/ib.h"

#ifdef COLLI_HAVE_VERBS

static void *mr_reg(void *ctx, void *addr, size_t len, uint32_t *lkey, uint32_t *rkey)
{
    ib_state_t *st = ctx;
    struct ibv_mr *mr =
        st->v.reg_mr(st->pd, addr, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (mr != NULL) {
        *lkey = mr->lkey;
        *rkey = mr->rkey;
    }
    return mr;
}

static void mr_dereg(void *ctx, void *mr)
{
    ib_state_t *st = ctx;
    (void)st->v.dereg_mr(mr);
}

static void state_free(ib_state_t *st)
{
    if (st->cq != NULL)
        st->v.destroy_cq(st->cq);
    if (st->ch != NULL)
        st->v.destroy_comp_channel(st->ch);
    ib_mr_cache_fini(&st->mrs);
    if (st->pd != NULL)
        st->v.dealloc_pd(st->pd);
    if (st->ctx != NULL)
        st->v.close_device(st->ctx);
    colli_ib_verbs_close(&st->v);
    free(st);
}

/* InfiniBand cannot be used on this rank: RequireIB fails with the reason; otherwise (PreferIB)
 * one WARN and the peers reach this rank over sockets. */
static coll_result_t __attribute__((format(printf, 3, 4)))
init_failed(struct coll_comm *comm, ib_state_t *st, const char *fmt, ...)
{
    char why[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    if (st != NULL)
        state_free(st);
    if (comm->cfg.transport == COLLI_TP_REQUIRE_IB)
        return COLLI_ERR(IB, COLL_ERR_NETWORK,
                         "COLL_TRANSPORT=RequireIB, but InfiniBand is not usable on rank %d: %s",
                         comm->rank, why);
    if (comm->cfg.transport == COLLI_TP_AUTO)
        coll_info(IB,
                  "COLL_TRANSPORT=auto: rank %d offers no InfiniBand (sockets between hosts): %s",
                  comm->rank, why);
    else
        coll_warn(IB, "COLL_TRANSPORT=PreferIB: using sockets because %s", why);
    return COLL_SUCCESS;
}

static const char *mtu_str(int mtu)
{
    static const char *s[] = {"?", "256", "512", "1024", "2048", "4096"};
    return mtu >= 1 && mtu <= 5 ? s[mtu] : "?";
}

static bool set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    return fl >= 0 && fcntl(fd, F_SETFL, fl | O_NONBLOCK) == 0;
}

/* Open the chosen port's device and find its GID; false with the reason in why. */
static bool open_port(struct coll_comm *comm, ib_state_t *st, char *why, size_t wl)
{
    const ib_port_t *pt = &st->port;
    int n = 0;
    struct ibv_device **list = st->v.get_device_list(&n);
    for (int i = 0; list != NULL && i < n && st->ctx == NULL; i++) {
        const char *name = st->v.get_device_name(list[i]);
        if (name != NULL && strcmp(name, pt->dev) == 0)
            st->ctx = st->v.open_device(list[i]);
    }
    if (list != NULL)
        st->v.free_device_list(list);
    if (st->ctx == NULL) {
        snprintf(why, wl, "ibv_open_device(%s) failed: %s", pt->dev, strerror(errno));
        return false;
    }
    struct ibv_device_attr da;
    struct ibv_port_attr pa;
    if (st->v.query_device(st->ctx, &da) != 0 ||
        colli_ib_query_port(&st->v, st->ctx, (uint8_t)pt->port, &pa) != 0) {
        snprintf(why, wl, "querying %s port %d failed: %s", pt->dev, pt->port, strerror(errno));
        return false;
    }
    st->max_qp_wr = da.max_qp_wr;
    st->cq_size = da.max_cqe;
    if (pt->link_layer == IBV_LINK_LAYER_ETHERNET) {
        colli_ib_gid_t *tab = NULL;
        int ng = 0;
        if (!ib_gid_table(&st->v, st->ctx, pt->dev, pt->port, pa.gid_tbl_len, &tab, &ng)) {
            snprintf(why, wl, "out of memory reading the GID table of %s:%d", pt->dev, pt->port);
            return false;
        }
        char gwhy[300];
        /* auto: only a RoCE port of the interface the communicator runs on is on its network */
        int nuse = ng;
        if (comm->cfg.transport == COLLI_TP_AUTO &&
            (nuse = colli_ib_gid_on_ifname(tab, ng, st->ifname)) == 0) {
            snprintf(why, wl,
                     "RoCE port %s:%d has no GID on %s, the interface this communicator "
                     "runs on (COLL_SOCKET_IFNAME)%s%s",
                     pt->dev, pt->port, st->ifname, ng > 0 && tab[0].ndev[0] ? ": it is on " : "",
                     ng > 0 ? tab[0].ndev : "");
            free(tab);
            return false;
        }
        st->gid_index = colli_ib_gid_select(tab, nuse, comm->cfg.ib_gid_index, gwhy, sizeof(gwhy));
        for (int i = 0; i < nuse; i++)
            if (tab[i].index == st->gid_index) {
                memcpy(st->gid, tab[i].gid, 16);
                st->gid_type = tab[i].type;
            }
        free(tab);
        if (st->gid_index < 0) {
            snprintf(why, wl, "RoCE port %s:%d: %s", pt->dev, pt->port, gwhy);
            return false;
        }
    } else {
        /* InfiniBand: addressed by LID; the GID (index 0 unless set) is sent for information */
        st->gid_index = -1;
        union ibv_gid g;
        int gi = comm->cfg.ib_gid_index >= 0 ? comm->cfg.ib_gid_index : 0;
        if (st->v.query_gid(st->ctx, (uint8_t)pt->port, gi, &g) == 0)
            memcpy(st->gid, g.raw, 16);
        if (pt->lid == 0) {
            snprintf(why, wl, "InfiniBand port %s:%d has no LID (is a subnet manager running?)",
                     pt->dev, pt->port);
            return false;
        }
    }
    st->pd = st->v.alloc_pd(st->ctx);
    st->ch = st->pd ? st->v.create_comp_channel(st->ctx) : NULL;
    if (st->ch == NULL || !set_nonblock(st->ch->fd) || !set_nonblock(st->ctx->async_fd)) {
        snprintf(why, wl, "%s on %s:%d failed: %s",
                 st->pd ? "creating a completion channel" : "ibv_alloc_pd", pt->dev, pt->port,
                 strerror(errno));
        return false;
    }
    return true;
}

/* Registered memory and fork(). On a kernel that does not copy DMA-pinned pages at fork, a child
 * (a DataLoader worker, multiprocessing's fork, even a fork about to exec) shares the rings'
 * pages copy-on-write; the parent's next write moves its page away from the one the HCA reads and
 * writes: stale data sent, data received where the parent never looks. ibv_fork_init (as NCCL
 * calls it) keeps registered pages out of children; it must come before the process's first
 * verbs resource, so every communicator calls it before opening a device (after the first, a
 * no-op). The rings are whole pages of their own (peer_setup), so no other data leaves the
 * child with them. rdma-core >= 35 says when the kernel copies such pages itself (then
 * ibv_fork_init does nothing). */
#define COLLI_IBV_FORK_UNNEEDED 2 /* enum ibv_fork_status of rdma-core >= 35 */
static void fork_protect(struct coll_comm *comm, ib_state_t *st)
{
    if (st->v.is_fork_initialized != NULL &&
        st->v.is_fork_initialized() == COLLI_IBV_FORK_UNNEEDED) {
        coll_info(IB,
                  "rank %d: this kernel copies registered memory at fork; forked children "
                  "cannot disturb InfiniBand transfers",
                  comm->rank);
        return;
    }
    int rc = st->v.fork_init != NULL ? st->v.fork_init() : ENOSYS;
    if (rc == 0) {
        coll_info(IB,
                  "rank %d: ibv_fork_init: registered memory is kept out of forked children "
                  "(this kernel does not copy it at fork)",
                  comm->rank);
        return;
    }
    struct utsname u;
    if (uname(&u) != 0)
        snprintf(u.release, sizeof(u.release), "unknown");
    coll_warn(IB,
              "rank %d: ibv_fork_init failed (%s) and this kernel (%s) does not copy registered "
              "memory at fork: a fork() while this communicator lives (a DataLoader worker, "
              "multiprocessing with fork) can make its InfiniBand transfers use stale pages. Set "
              "RDMAV_FORK_SAFE=1 in the environment the process starts with, start workers with "
              "'spawn', or run a kernel >= 5.13",
              comm->rank, strerror(rc > 0 ? rc : errno), u.release);
}

static coll_result_t ib_comm_init(struct coll_comm *comm, int tp, const colli_netif_t *nif,
                                  colli_member_t *self)
{
    ib_state_t *st = calloc(1, sizeof(*st));
    if (st == NULL)
        return COLLI_ERR(IB, COLL_ERR_SYSTEM, "out of memory for the InfiniBand transport");
    char why[512];
    if (!colli_ib_verbs_open(comm->test.ib_verbs_lib, &st->v, why, sizeof(why))) {
        free(st);
        return init_failed(comm, NULL, "%s", why);
    }
    fork_protect(comm, st);
    ib_port_t ports[16];
    int ndev = 0, nmatch = 0;
    int n = ib_port_list(&st->v, comm->cfg.ib_hca, ports, 16, &ndev, &nmatch), nrc = 0;
    for (int k = 0; k < n; k++) /* only ports with RC queue pairs (not EFA's) */
        if (ports[k].rc)
            ports[nrc++] = ports[k];
    if (nrc == 0)
        return init_failed(comm, st,
                           "no active InfiniBand or RoCE port matches COLL_IB_HCA=\"%s\" (%d "
                           "devices, %d active ports of another link layer)",
                           comm->cfg.ib_hca, ndev, n);
    n = nrc;
    st->nqps = comm->cfg.ib_nqps;
    st->bind_addr = nif->addr;
    st->pfd_ch = st->pfd_async = -1;
    snprintf(st->ifname, sizeof(st->ifname), "%s", nif->name);
    /* the rank's own port first; auto takes the next one on the pinned network where it is not */
    bool opened = false;
    for (int k = 0; k < n && !opened; k++) {
        st->port = ports[(comm->rank + k) % n];
        if (st->ctx != NULL)
            st->v.close_device(st->ctx);
        st->ctx = NULL;
        opened = open_port(comm, st, why, sizeof(why));
        if (comm->cfg.transport != COLLI_TP_AUTO || st->pd != NULL)
            break;
    }
    if (!opened)
        return init_failed(comm, st, "%s", why);
    size_t qlen = 0;
    const char *qe = colli_testhook_rank_entry(comm->test.ib_qp_error, comm->rank, &qlen);
    st->qp_error_at = qe != NULL ? strtol(qe, NULL, 10) : 0;
    st->mrs = (ib_mr_cache_t){.max_idle = 16, .reg = mr_reg, .dereg = mr_dereg, .ctx = st};
    st->tp = tp;
    comm->tp[tp].state = st;
    self->caps |= COLLI_CAP_IB;
    char g[64] = "";
    colli_ib_gid_str(st->gid, g, sizeof(g));
    coll_info(IB, "rank %d: InfiniBand %s:%d (%s, MTU %s, %s %d %s), %d QPs per peer", comm->rank,
              st->port.dev, st->port.port,
              st->port.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
              mtu_str(st->port.mtu), st->gid_index >= 0 ? "GID index" : "LID",
              st->gid_index >= 0 ? st->gid_index : st->port.lid, st->gid_index >= 0 ? g : "",
              st->nqps);
    return COLL_SUCCESS;
}

static bool is_ib(const struct coll_comm *comm, const ib_state_t *st, int p)
{
    return p != comm->rank && comm->peer_tp != NULL && comm->peer_tp[p] == st->tp;
}

static coll_result_t peers_alloc(struct coll_comm *comm, ib_state_t *st)
{
    if (st->peers != NULL)
        return COLL_SUCCESS;
    st->peers = calloc((size_t)comm->nranks, sizeof(ib_peer_t));
    if (st->peers == NULL)
        return COLLI_ERR(IB, COLL_ERR_SYSTEM, "out of memory for %d InfiniBand peers",
                         comm->nranks);
    for (int p = 0; p < comm->nranks; p++) {
        st->peers[p].fd = -1;
        st->peers[p].pfd = -1;
        st->peers[p].used = is_ib(comm, st, p);
    }
    return COLL_SUCCESS;
}

static coll_result_t __attribute__((format(printf, 4, 5)))
peer_error(struct coll_comm *comm, ib_state_t *st, int p, const char *fmt, ...)
{
    char what[700], who[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    colli_member_desc(comm, p, who, sizeof(who));
    colli_comm_blame(comm, p);
    return COLLI_ERR(IB, COLL_ERR_NETWORK,
                     "rank %d cannot connect to %s over InfiniBand (%s port %d): %s", comm->rank,
                     who, st->port.dev, st->port.port, what);
}

/* Queue pairs (in INIT, receives posted) and both rings for peer p. */
static coll_result_t peer_setup(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    const size_t ring = IB_RING_BYTES;
    char why[600];
    pp->rx = aligned_alloc(4096, ring);
    pp->tx = aligned_alloc(4096, ring);
    if (pp->rx == NULL || pp->tx == NULL)
        return COLLI_ERR(IB, COLL_ERR_SYSTEM, "out of memory for InfiniBand rings (%zu bytes)",
                         2 * ring);
    memset(pp->rx, 0, ring);
    if ((pp->rx_mr = ib_mr_get(&st->mrs, pp->rx, ring, why, sizeof(why))) == NULL ||
        (pp->tx_mr = ib_mr_get(&st->mrs, pp->tx, ring, why, sizeof(why))) == NULL)
        return peer_error(comm, st, p, "%s", why);
    for (int q = 0; q < st->nqps; q++) {
        struct ibv_qp_init_attr ia = {.send_cq = st->cq,
                                      .recv_cq = st->cq,
                                      .cap = {.max_send_wr = IB_SQ_DEPTH,
                                              .max_recv_wr = IB_RQ_DEPTH,
                                              .max_send_sge = 1,
                                              .max_recv_sge = 1},
                                      .qp_type = IBV_QPT_RC};
        pp->qp[q] = st->v.create_qp(st->pd, &ia);
        if (pp->qp[q] == NULL)
            return peer_error(comm, st, p, "ibv_create_qp failed: %s", strerror(errno));
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                                .pkey_index = 0,
                                .port_num = (uint8_t)st->port.port,
                                .qp_access_flags = IBV_ACCESS_REMOTE_WRITE};
        int rc = st->v.modify_qp(
            pp->qp[q], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        if (rc != 0)
            return peer_error(comm, st, p, "ibv_modify_qp to INIT failed: %s", strerror(rc));
        for (int k = 0; k < IB_RQ_DEPTH; k++)
            if ((rc = ib_post_recv(st, p, q)) != 0)
                return peer_error(comm, st, p, "ibv_post_recv failed: %s", strerror(rc));
        uint32_t r = 0;
        if (colli_random_bytes(&r, sizeof(r)) != COLL_SUCCESS)
            return COLLI_ERR(IB, COLL_ERR_SYSTEM, "no random bytes for a PSN");
        pp->psn[q] = r & 0xffffffu;
    }
    return COLL_SUCCESS;
}

static void info_fill(const struct coll_comm *comm, const ib_state_t *st, int p, ib_info_t *in)
{
    const ib_peer_t *pp = &st->peers[p];
    memset(in, 0, sizeof(*in));
    in->magic = IB_INFO_MAGIC;
    in->nqps = (uint32_t)st->nqps;
    for (int q = 0; q < st->nqps; q++) {
        in->qpn[q] = pp->qp[q]->qp_num;
        in->psn[q] = pp->psn[q];
    }
    in->lid = st->port.lid;
    in->link_layer = (uint8_t)st->port.link_layer;
    in->mtu = (uint8_t)st->port.mtu;
    in->port = (uint8_t)st->port.port;
    in->pad[0] = (uint8_t)st->gid_type;
    in->pad[1] = (uint8_t)(st->gid_index >= 0 ? st->gid_index : 0);
    memcpy(in->gid, st->gid, 16);
    in->ring_addr = (uint64_t)(uintptr_t)pp->rx;
    in->ring_rkey = pp->rx_mr->rkey;
    in->nslots = IB_NSLOTS;
    in->slot_size = IB_SLOT_SIZE;
    snprintf(in->hca, sizeof(in->hca), "%s", st->port.dev);
    colli_siphash128(comm->secret, in, offsetof(ib_info_t, mac), in->mac);
}

/* The peer's info arrived: check it and bring our QPs to RTR and RTS. */
static coll_result_t peer_connect(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    const ib_info_t *r = &pp->remote;
    uint8_t mac[16];
    colli_siphash128(comm->secret, r, offsetof(ib_info_t, mac), mac);
    if (r->magic != IB_INFO_MAGIC || !colli_mem_equal(mac, r->mac, sizeof(mac)))
        return peer_error(comm, st, p, "its connection record failed authentication");
    if (r->nslots != IB_NSLOTS || r->slot_size != IB_SLOT_SIZE || r->nqps < 1 ||
        r->nqps > IB_MAX_QPS)
        return peer_error(comm, st, p,
                          "its rings (%u slots of %u bytes, %u QPs) differ from this build's "
                          "(%d of %u): run the same kcoll build on every rank",
                          r->nslots, r->slot_size, r->nqps, IB_NSLOTS, IB_SLOT_SIZE);
    if ((r->link_layer == IBV_LINK_LAYER_ETHERNET) !=
        (st->port.link_layer == IBV_LINK_LAYER_ETHERNET))
        return peer_error(comm, st, p, "its port %s:%u is %s, this one %s", r->hca, r->port,
                          r->link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                          st->port.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
    char gwhy[400];
    if (st->port.link_layer == IBV_LINK_LAYER_ETHERNET &&
        !colli_ib_gid_compatible(st->gid, st->gid_type, r->gid, r->pad[0], gwhy, sizeof(gwhy)))
        return peer_error(comm, st, p, "GID index %u of %s:%u against GID index %d here: %s",
                          r->pad[1], r->hca, r->port, st->gid_index, gwhy);
    pp->nqps = (int)r->nqps < st->nqps ? (int)r->nqps : st->nqps;
    pp->r_addr = r->ring_addr;
    pp->r_rkey = r->ring_rkey;
    const bool roce = st->port.link_layer == IBV_LINK_LAYER_ETHERNET;
    const int mtu = r->mtu < st->port.mtu ? r->mtu : st->port.mtu;
    for (int q = 0; q < pp->nqps; q++) {
        struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                                .path_mtu = (enum ibv_mtu)mtu,
                                .dest_qp_num = r->qpn[q],
                                .rq_psn = r->psn[q],
                                .max_dest_rd_atomic = 1,
                                .min_rnr_timer = 12};
        a.ah_attr.port_num = (uint8_t)st->port.port;
        a.ah_attr.dlid = r->lid;
        if (roce || r->lid == 0) {
            a.ah_attr.is_global = 1;
            memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
            a.ah_attr.grh.sgid_index = (uint8_t)(st->gid_index >= 0 ? st->gid_index : 0);
            a.ah_attr.grh.hop_limit = 255;
        }
        int rc =
            st->v.modify_qp(pp->qp[q], &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        if (rc != 0)
            return peer_error(comm, st, p, "ibv_modify_qp to RTR (remote %s:%u QP 0x%x) failed: %s",
                              r->hca, r->port, r->qpn[q], strerror(rc));
        struct ibv_qp_attr s = {.qp_state = IBV_QPS_RTS,
                                .timeout = (uint8_t)comm->cfg.ib_timeout,
                                .retry_cnt = 7,
                                .rnr_retry = 7,
                                .sq_psn = pp->psn[q],
                                .max_rd_atomic = 1};
        rc = st->v.modify_qp(pp->qp[q], &s,
                             IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                 IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
        if (rc != 0)
            return peer_error(comm, st, p, "ibv_modify_qp to RTS failed: %s", strerror(rc));
    }
    coll_debug(IB, "rank %d: connected to rank %d (%s:%u), %d QPs", comm->rank, p, r->hca, r->port,
               pp->nqps);
    return COLL_SUCCESS;
}

static void link_ready(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    pp->link = IBL_READY;
    coll_info(IB, "rank %d: InfiniBand connection to rank %d ready (%s port %d, %d QP%s)",
              comm->rank, p, st->port.dev, st->port.port, pp->nqps, pp->nqps == 1 ? "" : "s");
}

static coll_result_t link_start(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    if (pp->since == 0)
        pp->since = colli_now();
    if (colli_sock_connect_start(&comm->members[p].addr, &st->bind_addr, &pp->fd) != COLLI_IO_OK) {
        pp->fd = -1;
        return peer_error(comm, st, p, "its listener cannot be reached: %s", strerror(errno));
    }
    colli_sock_tune(pp->fd);
    pp->link = IBL_CONNECTING;
    return COLL_SUCCESS;
}

/* One non-blocking step of the exchange with peer p. The lower rank connects and sends a hello
 * and its record; the higher rank (acceptor) reads it, connects its QPs and answers with its
 * own; the lower rank connects its QPs and sends 'R'; the acceptor is ready once 'R' arrived,
 * so that neither side writes into a QP that is not ready to receive. */
static coll_result_t link_step(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    coll_result_t status;
    if (pp->link == IBL_NONE && !pp->acceptor && p > comm->rank && colli_now() >= pp->retry_at)
        return link_start(comm, st, p);
    if (pp->link == IBL_NONE && p < comm->rank) /* it opens the link: is it still there? */
        return colli_probe_step(comm, &pp->probe, p, &st->bind_addr);
    if (pp->link == IBL_CONNECTING) {
        struct pollfd pf = {.fd = pp->fd, .events = POLLOUT};
        if (poll(&pf, 1, 0) <= 0) {
            const double waited = colli_now() - pp->since;
            if (waited < COLLI_CONNECT_SILENT_S)
                return COLL_SUCCESS;
            close(pp->fd);
            pp->fd = -1;
            pp->link = IBL_CLOSED;
            return peer_error(comm, st, p,
                              "its listener gave no answer to the link's connection request for "
                              "%.0f s (not accepted, not refused): " COLLI_SILENT_ADVICE,
                              waited);
        }
        int err = 0;
        socklen_t len = sizeof(err);
        if (getsockopt(pp->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err != 0) {
            close(pp->fd);
            pp->fd = -1;
            pp->link = IBL_NONE;
            if ((err == ECONNREFUSED || err == EAGAIN || err == EINTR) &&
                colli_now() - pp->since < 2.0) {
                pp->retry_at = colli_now() + 0.02;
                return COLL_SUCCESS;
            }
            return peer_error(comm, st, p, "its listener cannot be reached: %s", strerror(err));
        }
        if (colli_hs_begin(&pp->hs, pp->fd, comm->secret, COLLI_HELLO_IB, comm->rank, p, 0,
                           (uint32_t)comm->nranks) != COLLI_IO_OK)
            return peer_error(comm, st, p, "sending its hello: %s", strerror(errno));
        pp->link = IBL_HANDSHAKE;
    }
    if (pp->link == IBL_HANDSHAKE) {
        int rc = colli_hs_step(&pp->hs, pp->fd, comm->secret);
        if (rc == COLLI_HS_AGAIN)
            return COLL_SUCCESS;
        if (rc != COLLI_IO_OK)
            return peer_error(comm, st, p, "the handshake failed: %s", colli_hs_str(rc, errno));
        info_fill(comm, st, p, (ib_info_t *)(void *)pp->out);
        pp->out_len = sizeof(ib_info_t);
        pp->out_off = 0;
        pp->link = IBL_SEND;
    }
    if (pp->link == IBL_SEND) {
        while (pp->out_off < pp->out_len) {
            ssize_t w = send(pp->fd, pp->out + pp->out_off, pp->out_len - pp->out_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
            if (w < 0 && (errno == EAGAIN || errno == EINTR))
                return COLL_SUCCESS;
            if (w < 0)
                return peer_error(comm, st, p, "sending its connection record: %s",
                                  strerror(errno));
            pp->out_off += (size_t)w;
        }
        pp->link = IBL_RECV;
        pp->in_off = 0;
    }
    if (pp->link == IBL_RECV || pp->link == IBL_ACK) {
        for (;;) {
            char ack;
            bool want_ack = pp->link == IBL_ACK;
            char *dst = want_ack ? &ack : (char *)&pp->remote + pp->in_off;
            size_t want = want_ack ? 1 : sizeof(ib_info_t) - pp->in_off;
            ssize_t r = recv(pp->fd, dst, want, MSG_DONTWAIT);
            if (r < 0 && (errno == EAGAIN || errno == EINTR))
                return COLL_SUCCESS;
            if (r <= 0)
                return peer_error(comm, st, p, "the link closed during the exchange (%s)",
                                  r < 0 ? strerror(errno) : "end of stream");
            if (want_ack) {
                if (ack != 'R')
                    return peer_error(comm, st, p, "unexpected byte 0x%02x on the link",
                                      (unsigned char)ack);
                link_ready(comm, st, p);
                return COLL_SUCCESS;
            }
            pp->in_off += (size_t)r;
            if (pp->in_off < sizeof(ib_info_t))
                continue;
            if ((status = peer_connect(comm, st, p)) != COLL_SUCCESS)
                return status;
            if (pp->acceptor) {
                info_fill(comm, st, p, (ib_info_t *)(void *)pp->out);
                pp->out_len = sizeof(ib_info_t);
                pp->out_off = 0;
                /* a record into an empty socket buffer: complete or failed, as the hello */
                ssize_t w = send(pp->fd, pp->out, pp->out_len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w != (ssize_t)pp->out_len)
                    return peer_error(comm, st, p, "answering its connection record: %s",
                                      w < 0 ? strerror(errno) : "short write");
                pp->link = IBL_ACK;
                continue;
            }
            char c = 'R';
            if (send(pp->fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT) != 1)
                return peer_error(comm, st, p, "confirming the connection: %s", strerror(errno));
            link_ready(comm, st, p);
            return COLL_SUCCESS;
        }
    }
    return COLL_SUCCESS;
}

static coll_result_t ib_adopt(struct coll_comm *comm, int tp, const colli_hello_t *h, int fd)
{
    ib_state_t *st = comm->tp[tp].state;
    int p = h->from_rank;
    if (st == NULL || !is_ib(comm, st, p) || p >= comm->rank ||
        peers_alloc(comm, st) != COLL_SUCCESS || st->peers[p].link != IBL_NONE) {
        coll_warn(IB, "rank %d opened an InfiniBand link that rank %d does not expect; closed", p,
                  comm->rank);
        close(fd);
        return COLL_SUCCESS;
    }
    ib_peer_t *pp = &st->peers[p];
    colli_probe_reset(&pp->probe);
    pp->fd = fd;
    pp->acceptor = true;
    pp->link = IBL_RECV;
    pp->in_off = 0;
    pp->wanted = true; /* its QPs come with the next step (the CQ may not exist yet) */
    st->links_pending = true;
    return COLL_SUCCESS;
}

/* QPs and rings of peer p, once (after ib_comm_ready made the CQ). */
static coll_result_t peer_prepare(struct coll_comm *comm, ib_state_t *st, int p)
{
    ib_peer_t *pp = &st->peers[p];
    if (pp->set_up)
        return COLL_SUCCESS;
    pp->set_up = true;
    return peer_setup(comm, st, p);
}

coll_result_t ib_peer_ensure(struct coll_comm *comm, ib_state_t *st, int p, bool *ready)
{
    ib_peer_t *pp = &st->peers[p];
    *ready = pp->link == IBL_READY;
    if (*ready)
        return COLL_SUCCESS;
    coll_result_t status = peer_prepare(comm, st, p);
    if (status != COLL_SUCCESS)
        return status;
    pp->wanted = true;
    st->links_pending = true;
    status = link_step(comm, st, p);
    *ready = pp->link == IBL_READY;
    return status;
}

coll_result_t ib_links_step(struct coll_comm *comm, ib_state_t *st)
{
    if (!st->links_pending)
        return COLL_SUCCESS;
    bool pending = false;
    for (int p = 0; p < comm->nranks; p++) {
        ib_peer_t *pp = &st->peers[p];
        if (!pp->wanted || pp->link == IBL_READY)
            continue;
        coll_result_t status = peer_prepare(comm, st, p);
        if (status == COLL_SUCCESS)
            status = link_step(comm, st, p);
        if (status != COLL_SUCCESS)
            return status;
        pending |= pp->link != IBL_READY;
    }
    st->links_pending = pending;
    return COLL_SUCCESS;
}

/* Create the completion queue, sized for every InfiniBand peer. Queue pairs, rings and the
 * exchange over a link come at the first transfer with each peer (ib_peer_ensure), so that a
 * job whose ranks talk to few peers registers and connects only those. */
static coll_result_t ib_comm_ready(struct coll_comm *comm, int tp)
{
    ib_state_t *st = comm->tp[tp].state;
    coll_result_t status = peers_alloc(comm, st);
    if (status != COLL_SUCCESS)
        return status;
    int npeers = 0;
    for (int p = 0; p < comm->nranks; p++)
        npeers += st->peers[p].used;
    long cqe = (long)npeers * st->nqps * (IB_SQ_DEPTH + IB_RQ_DEPTH);
    if (cqe > st->cq_size || st->max_qp_wr < IB_RQ_DEPTH)
        return COLLI_ERR(IB, COLL_ERR_NETWORK,
                         "rank %d: %d InfiniBand peers with %d QPs each need a completion queue "
                         "of %ld entries and %d work requests per QP; %s:%d allows %d and %d. "
                         "Lower COLL_IB_NQPS.",
                         comm->rank, npeers, st->nqps, cqe, IB_RQ_DEPTH, st->port.dev,
                         st->port.port, st->cq_size, st->max_qp_wr);
    st->cq = st->v.create_cq(st->ctx, (int)cqe, NULL, st->ch, 0);
    if (st->cq == NULL)
        return COLLI_ERR(IB, COLL_ERR_NETWORK, "rank %d: ibv_create_cq(%ld) on %s:%d failed: %s",
                         comm->rank, cqe, st->port.dev, st->port.port, strerror(errno));
    st->cq_size = (int)cqe;
    coll_info(IB,
              "rank %d: %d peers reachable over InfiniBand (%s:%d); each connects at its first "
              "transfer",
              comm->rank, npeers, st->port.dev, st->port.port);
    return COLL_SUCCESS;
}

static void ib_comm_fini(struct coll_comm *comm, int tp)
{
    ib_state_t *st = comm->tp[tp].state;
    if (st == NULL)
        return;
    const bool clean = comm->async_error == COLL_SUCCESS;
    /* after success, let the last writes reach their peers before the QPs go (bounded) */
    double deadline = colli_now() + 2.0;
    while (clean && st->peers != NULL && st->cq != NULL && colli_now() < deadline) {
        int inflight = 0;
        for (int p = 0; p < comm->nranks; p++)
            for (int q = 0; q < IB_MAX_QPS; q++)
                inflight += st->peers[p].sq_used[q];
        bool progressed = false;
        if (inflight == 0 || ib_poll(comm, st, &progressed) != COLL_SUCCESS)
            break;
        if (!progressed)
            sched_yield();
    }
    for (int p = 0; st->peers != NULL && p < comm->nranks; p++) {
        ib_peer_t *pp = &st->peers[p];
        if (clean && pp->fd >= 0 && pp->link == IBL_READY && !pp->gone) {
            char c = 'B';
            (void)send(pp->fd, &c, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        if (pp->fd >= 0)
            close(pp->fd);
        colli_probe_reset(&pp->probe);
        for (int q = 0; q < IB_MAX_QPS; q++)
            if (pp->qp[q] != NULL)
                st->v.destroy_qp(pp->qp[q]);
        ib_mr_put(&st->mrs, pp->rx_mr);
        ib_mr_put(&st->mrs, pp->tx_mr);
        if (pp->rx != NULL)
            ib_mr_invalidate(&st->mrs, pp->rx, IB_RING_BYTES);
        if (pp->tx != NULL)
            ib_mr_invalidate(&st->mrs, pp->tx, IB_RING_BYTES);
        free(pp->rx);
        free(pp->tx);
    }
    free(st->peers);
    state_free(st);
    comm->tp[tp].state = NULL;
}

const colli_transport_t colli_ib_transport = {
    .struct_size = sizeof(colli_transport_t),
    .name = "ib",
    .via = "InfiniBand",
    .cap = COLLI_CAP_IB,
    .flags = COLLI_TPF_QUIET,
    .hello_kind = COLLI_HELLO_IB,
    .probe = ib_policy_probe,
    .comm_init = ib_comm_init,
    .can_connect = ib_can_connect,
    .comm_ready = ib_comm_ready,
    .progress = ib_progress,
    .wait_arm = ib_wait_arm,
    .wait_done = ib_wait_done,
    .adopt = ib_adopt,
    .comm_fini = ib_comm_fini,
};

#else /* built without <infiniband/verbs.h> */

static coll_result_t ib_comm_init(struct coll_comm *comm, int tp, const colli_netif_t *nif,
                                  colli_member_t *self)
{
    if (comm->cfg.transport == COLLI_TP_REQUIRE_IB)
        return COLLI_ERR(IB, COLL_ERR_NETWORK,
                         "COLL_TRANSPORT=RequireIB, but this kcoll build has no InfiniBand "
                         "transport (built without the libibverbs-dev headers)");
    return COLL_SUCCESS;
}

const colli_transport_t colli_ib_transport = {
    .struct_size = sizeof(colli_transport_t),
    .name = "ib",
    .via = "InfiniBand",
    .cap = COLLI_CAP_IB,
    .flags = COLLI_TPF_QUIET,
    .probe = ib_policy_probe,
    .comm_init = ib_comm_init,
};
#endif
