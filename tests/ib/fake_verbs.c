/* A fake verbs provider for running the InfiniBand transport end to end without an HCA: a
 * stand-in for libibverbs.so.1 (loaded through COLL_TEST_IB_VERBS_LIB) that offers one RoCE
 * device, fake_roce0, port 1 ACTIVE, whose GID index 1 (RoCE v2, IPv4-mapped) carries the
 * process id, and that moves RDMA writes with immediate and sends with immediate between
 * processes of this machine as unix datagrams: each process has one socket, named after its pid
 * in the abstract namespace; a queue pair's destination is the pid in its GID and its QP number.
 *
 * The receiving process applies a write when it polls its completion queue (the data and the
 * completion appear together): the destination must lie inside a memory region of that process
 * with that rkey, and a receive must be posted, or the fake aborts (a real HCA would fail the
 * sender with a remote access error or retry on receiver-not-ready: either is a transport bug
 * here). Datagrams the receiver cannot take yet are kept in order and retried; a send completes
 * (its work completion appears) only once its datagram left, as a reliable-connected send
 * completes only once the peer acknowledged it: a sender that saw its last completion may
 * destroy its QPs without losing data the peer has yet to read. Single-threaded, as the transport
 * uses it; a forked child gets its own socket. Not a model of timing or ordering across QPs.
 *
 * Errors on request: FAKE_VERBS_INJECT (read when the device is opened) makes this process's
 * HCA fail once it posted N RDMA writes:
 *   wc_error:N   the N-th write is not delivered and completes with IBV_WC_RETRY_EXC_ERR
 *                (vendor error 0x81), as when the peer's port stops answering; later requests
 *                complete with IBV_WC_WR_FLUSH_ERR (the QP is in the error state)
 *   port_down:N  after the N-th write, IBV_EVENT_PORT_ERR for port 1 on the async descriptor
 *
 * Fork safety as rdma-core reports it, FAKE_VERBS_FORK (read at each call):
 *   needed (default) ibv_is_fork_initialized says DISABLED until ibv_fork_init was called (then
 *                ENABLED), and a memory registration before that aborts: whoever registers
 *                memory must have asked for fork protection first
 *   unneeded     the kernel copies registered pages at fork (IBV_FORK_UNNEEDED)
 *   late         ibv_fork_init fails with EINVAL (as when called after the first registration)
 *
 * FAKE_VERBS_LINK_LAYER=unspecified (read at each call): port 1 reports
 * IBV_LINK_LAYER_UNSPECIFIED, as AWS EFA's ports do (NCCL's own IB transport skips them), and
 * ibv_create_qp refuses every type but UD with EOPNOTSUPP, as rdma-core's efa provider does. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define MAXQ   4096
#define MAXRWR 512
#define MAXCQE 8192

typedef struct fcq {
    struct ibv_cq cq;
    struct ibv_wc q[MAXCQE];
    int head, n;
    int armed;
} fcq_t;

typedef struct fqp {
    struct ibv_qp qp;
    uint64_t rwr[MAXRWR];
    int rhead, rn;
    uint32_t dqpn;
    uint32_t dpid;
} fqp_t;

typedef struct pkt {
    uint32_t dpid;
    uint32_t dqpn;
    uint32_t op; /* 0: RDMA write with immediate, 1: send with immediate */
    uint32_t imm;
    uint32_t rkey;
    uint32_t len;
    uint64_t raddr;
} pkt_t;

typedef struct backlog {
    struct backlog *next;
    size_t size;
    int signaled;     /* a work completion is due once it left */
    uint64_t wr_id;   /* of that completion */
    uint32_t src_qpn; /* the sending QP (looked up again: it may be gone by then) */
    pkt_t p;          /* payload follows */
} backlog_t;

static struct {
    pid_t pid; /* the process the socket belongs to */
    int sock;
    fqp_t *qps[MAXQ];
    struct ibv_mr *mrs[MAXQ];
    fcq_t *cqs[64];
    uint32_t next_qpn, next_key;
    backlog_t *bl_head, *bl_tail;
    struct ibv_context *ctx;
    int inject;        /* 0 none, 1 wc_error, 2 port_down */
    long inject_after; /* writes posted before the error */
    long writes;       /* RDMA writes posted so far */
    int failed;        /* wc_error happened: every later request is flushed */
    int port_event;    /* port_down happened and get_async_event has not returned it yet */
    int fork_init;     /* ibv_fork_init succeeded */
    char buf[sizeof(pkt_t) + (1u << 20)];
} fv = {.sock = -1};

static struct ibv_device dev;
static struct ibv_device *devlist[2] = {&dev, NULL};

static void die(const char *what)
{
    fprintf(stderr, "fake_verbs[%d]: %s\n", (int)getpid(), what);
    abort();
}

static void sock_name(uint32_t pid, struct sockaddr_un *sa, socklen_t *len)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "kcoll-fakeverbs-%u", pid);
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int ensure_sock(void)
{
    if (fv.sock >= 0 && fv.pid == getpid())
        return 0;
    if (fv.sock >= 0)
        close(fv.sock); /* inherited from the parent */
    memset(fv.qps, 0, sizeof(fv.qps));
    memset(fv.mrs, 0, sizeof(fv.mrs));
    memset(fv.cqs, 0, sizeof(fv.cqs));
    fv.bl_head = fv.bl_tail = NULL;
    fv.pid = getpid();
    fv.sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fv.sock < 0)
        return -1;
    int sz = 8 << 20;
    if (setsockopt(fv.sock, SOL_SOCKET, SO_SNDBUFFORCE, &sz, sizeof(sz)) != 0)
        (void)setsockopt(fv.sock, SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    if (setsockopt(fv.sock, SOL_SOCKET, SO_RCVBUFFORCE, &sz, sizeof(sz)) != 0)
        (void)setsockopt(fv.sock, SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
    struct sockaddr_un sa;
    socklen_t len;
    sock_name((uint32_t)fv.pid, &sa, &len);
    if (bind(fv.sock, (struct sockaddr *)&sa, len) != 0) {
        close(fv.sock);
        fv.sock = -1;
        return -1;
    }
    return 0;
}

static void cq_push(fcq_t *c, const struct ibv_wc *wc)
{
    if (c->n == MAXCQE)
        die("completion queue overrun");
    c->q[(c->head + c->n++) % MAXCQE] = *wc;
}

static fqp_t *qp_find(uint32_t qpn)
{
    for (int i = 0; i < MAXQ; i++)
        if (fv.qps[i] != NULL && fv.qps[i]->qp.qp_num == qpn)
            return fv.qps[i];
    return NULL;
}

/* Apply one datagram that arrived for this process. */
static void deliver(const pkt_t *p, const char *payload)
{
    fqp_t *q = qp_find(p->dqpn);
    if (q == NULL)
        return; /* destroyed: a real HCA would NAK; the sender has its completion already */
    if (p->op == 0) {
        struct ibv_mr *mr = NULL;
        for (int i = 0; i < MAXQ && mr == NULL; i++)
            if (fv.mrs[i] != NULL && fv.mrs[i]->rkey == p->rkey)
                mr = fv.mrs[i];
        if (mr == NULL || p->raddr < (uintptr_t)mr->addr ||
            p->raddr + p->len > (uintptr_t)mr->addr + mr->length)
            die("RDMA write outside the memory region of its rkey");
        memcpy((void *)(uintptr_t)p->raddr, payload, p->len);
    }
    if (q->rn == 0)
        die("receiver not ready: no receive posted (credit flow control broken)");
    struct ibv_wc wc = {.wr_id = q->rwr[q->rhead],
                        .status = IBV_WC_SUCCESS,
                        .opcode = p->op == 0 ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV,
                        .byte_len = p->len,
                        .imm_data = p->imm,
                        .qp_num = q->qp.qp_num,
                        .wc_flags = IBV_WC_WITH_IMM};
    q->rhead = (q->rhead + 1) % MAXRWR;
    q->rn--;
    cq_push((fcq_t *)(void *)q->qp.recv_cq, &wc);
}

static void flush_backlog(void)
{
    while (fv.bl_head != NULL) {
        backlog_t *b = fv.bl_head;
        struct sockaddr_un sa;
        socklen_t len;
        sock_name(b->p.dpid, &sa, &len);
        ssize_t w = sendto(fv.sock, &b->p, b->size, MSG_DONTWAIT, (struct sockaddr *)&sa, len);
        if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS ||
                      errno == ENOMEM || errno == EINTR))
            return; /* in order: retry later, as an HCA retransmits */
        if (w < 0 && errno != ECONNREFUSED && errno != ENOENT) {
            /* not a dead peer: dropping it would hang the transport with no error */
            char what[96];
            snprintf(what, sizeof(what), "sendto: %s", strerror(errno));
            die(what);
        }
        fv.bl_head = b->next;
        if (fv.bl_head == NULL)
            fv.bl_tail = NULL;
        /* sent, or its peer vanished (ECONNREFUSED: dropped, as a dead peer's HCA would) */
        fqp_t *q = b->signaled ? qp_find(b->src_qpn) : NULL;
        if (q != NULL) {
            struct ibv_wc wc = {.wr_id = b->wr_id,
                                .status = IBV_WC_SUCCESS,
                                .opcode = b->p.op == 0 ? IBV_WC_RDMA_WRITE : IBV_WC_SEND,
                                .qp_num = q->qp.qp_num};
            cq_push((fcq_t *)(void *)q->qp.send_cq, &wc);
        }
        free(b);
    }
}

static void drain(void)
{
    flush_backlog();
    for (;;) {
        ssize_t n = recv(fv.sock, fv.buf, sizeof(fv.buf), MSG_DONTWAIT);
        if (n < (ssize_t)sizeof(pkt_t))
            return;
        pkt_t p;
        memcpy(&p, fv.buf, sizeof(p));
        deliver(&p, fv.buf + sizeof(p));
    }
}

static int fv_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc)
{
    fcq_t *c = (fcq_t *)(void *)cq;
    drain();
    int k = 0;
    while (k < num && c->n > 0) {
        wc[k++] = c->q[c->head];
        c->head = (c->head + 1) % MAXCQE;
        c->n--;
    }
    return k;
}

static int fv_req_notify_cq(struct ibv_cq *cq, int solicited)
{
    /* Unsent datagrams complete only as this process sends them: with a backlog there is no
     * event to sleep for (nothing else would wake the caller), so arming fails and the caller
     * polls again. */
    flush_backlog();
    if (fv.bl_head != NULL)
        return EAGAIN;
    ((fcq_t *)(void *)cq)->armed = 1;
    return 0;
}

static int fv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    fqp_t *q = (fqp_t *)(void *)qp;
    for (; wr != NULL; wr = wr->next) {
        if (q->rn == MAXRWR) {
            *bad = wr;
            return ENOMEM;
        }
        q->rwr[(q->rhead + q->rn++) % MAXRWR] = wr->wr_id;
    }
    return 0;
}

static int fv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    fqp_t *q = (fqp_t *)(void *)qp;
    for (; wr != NULL; wr = wr->next) {
        size_t len = 0;
        for (int i = 0; i < wr->num_sge; i++)
            len += wr->sg_list[i].length;
        if (len > sizeof(fv.buf) - sizeof(pkt_t) ||
            (wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM && wr->opcode != IBV_WR_SEND_WITH_IMM)) {
            *bad = wr;
            return EINVAL;
        }
        if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && fv.inject != 0 && !fv.failed &&
            ++fv.writes == fv.inject_after) {
            if (fv.inject == 1) {
                fv.failed = 1;
                struct ibv_wc wc = {.wr_id = wr->wr_id,
                                    .status = IBV_WC_RETRY_EXC_ERR,
                                    .vendor_err = 0x81,
                                    .opcode = IBV_WC_RDMA_WRITE,
                                    .qp_num = qp->qp_num};
                cq_push((fcq_t *)(void *)qp->send_cq, &wc);
                continue;
            }
            fv.port_event = 1;
            uint64_t one = 1;
            if (fv.ctx != NULL && write(fv.ctx->async_fd, &one, sizeof(one)) != sizeof(one))
                die("eventfd write");
        }
        if (fv.failed) {
            struct ibv_wc wc = {
                .wr_id = wr->wr_id, .status = IBV_WC_WR_FLUSH_ERR, .qp_num = qp->qp_num};
            cq_push((fcq_t *)(void *)qp->send_cq, &wc);
            continue;
        }
        backlog_t *b = malloc(sizeof(*b) + len);
        if (b == NULL) {
            *bad = wr;
            return ENOMEM;
        }
        b->next = NULL;
        b->size = sizeof(pkt_t) + len;
        b->signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
        b->wr_id = wr->wr_id;
        b->src_qpn = qp->qp_num;
        b->p = (pkt_t){.dpid = q->dpid,
                       .dqpn = q->dqpn,
                       .op = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? 0 : 1,
                       .imm = wr->imm_data,
                       .rkey = wr->wr.rdma.rkey,
                       .len = (uint32_t)len,
                       .raddr = wr->wr.rdma.remote_addr};
        char *dst = (char *)(b + 1);
        for (int i = 0; i < wr->num_sge; i++) {
            memcpy(dst, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
            dst += wr->sg_list[i].length;
        }
        if (fv.bl_tail)
            fv.bl_tail->next = b;
        else
            fv.bl_head = b;
        fv.bl_tail = b;
    }
    flush_backlog();
    return 0;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
    *num = 1;
    return devlist;
}

EXPORT void ibv_free_device_list(struct ibv_device **l) {}

EXPORT const char *ibv_get_device_name(struct ibv_device *d)
{
    return "fake_roce0";
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d)
{
    if (ensure_sock() != 0)
        return NULL;
    struct ibv_context *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->device = d;
    c->async_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); /* signalled by port_down only */
    fv.ctx = c;
    const char *inj = getenv("FAKE_VERBS_INJECT");
    if (inj != NULL && strncmp(inj, "wc_error:", 9) == 0) {
        fv.inject = 1;
        fv.inject_after = atol(inj + 9);
    } else if (inj != NULL && strncmp(inj, "port_down:", 10) == 0) {
        fv.inject = 2;
        fv.inject_after = atol(inj + 10);
    } else if (inj != NULL && *inj != '\0') {
        die("FAKE_VERBS_INJECT: expected wc_error:N or port_down:N");
    }
    c->ops.poll_cq = fv_poll_cq;
    c->ops.req_notify_cq = fv_req_notify_cq;
    c->ops.post_send = fv_post_send;
    c->ops.post_recv = fv_post_recv;
    return c;
}

EXPORT int ibv_close_device(struct ibv_context *c)
{
    if (fv.ctx == c)
        fv.ctx = NULL;
    close(c->async_fd);
    free(c);
    return 0;
}

EXPORT int ibv_query_device(struct ibv_context *c, struct ibv_device_attr *a)
{
    memset(a, 0, sizeof(*a));
    a->phys_port_cnt = 1;
    a->max_qp_wr = 4096;
    a->max_cqe = MAXCQE;
    return 0;
}

#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *c, uint8_t port, struct _compat_ibv_port_attr *pa)
{
    struct ibv_port_attr *a = (struct ibv_port_attr *)(void *)pa;
    a->state = IBV_PORT_ACTIVE;
    a->active_mtu = IBV_MTU_4096;
    a->gid_tbl_len = 2;
    a->lid = 0;
    const char *ll = getenv("FAKE_VERBS_LINK_LAYER");
    a->link_layer = ll != NULL && strcmp(ll, "unspecified") == 0 ? IBV_LINK_LAYER_UNSPECIFIED
                                                                 : IBV_LINK_LAYER_ETHERNET;
    return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *c, uint8_t port, int index, union ibv_gid *g)
{
    memset(g, 0, sizeof(*g));
    uint32_t pid = (uint32_t)getpid();
    if (index == 0) {
        g->raw[0] = 0xfe;
        g->raw[1] = 0x80;
    } else {
        g->raw[10] = g->raw[11] = 0xff;
    }
    memcpy(g->raw + 12, &pid, 4);
    return index < 2 ? 0 : EINVAL;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *c, uint32_t port, uint32_t index,
                             struct ibv_gid_entry *e, uint32_t flags, size_t size)
{
    memset(e, 0, sizeof(*e));
    e->gid_index = index;
    e->gid_type = index == 0 ? IBV_GID_TYPE_ROCE_V1 : IBV_GID_TYPE_ROCE_V2;
    return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));
    if (pd != NULL)
        pd->context = c;
    return pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    return 0;
}

static const char *fork_mode(void)
{
    const char *m = getenv("FAKE_VERBS_FORK");
    if (m == NULL || *m == '\0')
        return "needed";
    if (strcmp(m, "needed") != 0 && strcmp(m, "unneeded") != 0 && strcmp(m, "late") != 0)
        die("FAKE_VERBS_FORK: expected needed, unneeded or late");
    return m;
}

EXPORT enum ibv_fork_status ibv_is_fork_initialized(void)
{
    if (strcmp(fork_mode(), "unneeded") == 0)
        return IBV_FORK_UNNEEDED;
    return fv.fork_init ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

EXPORT int ibv_fork_init(void)
{
    if (strcmp(fork_mode(), "late") == 0)
        return EINVAL;
    fv.fork_init = 1;
    return 0;
}

#undef ibv_reg_mr
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access)
{
    if (strcmp(fork_mode(), "needed") == 0 && !fv.fork_init)
        die("ibv_reg_mr before ibv_fork_init on a kernel that needs it (FAKE_VERBS_FORK=needed)");
    for (int i = 0; i < MAXQ; i++) {
        if (fv.mrs[i] != NULL)
            continue;
        struct ibv_mr *mr = calloc(1, sizeof(*mr));
        if (mr == NULL)
            return NULL;
        *mr = (struct ibv_mr){.context = pd->context,
                              .pd = pd,
                              .addr = addr,
                              .length = length,
                              .lkey = ++fv.next_key,
                              .rkey = fv.next_key};
        fv.mrs[i] = mr;
        return mr;
    }
    errno = ENOMEM;
    return NULL;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    for (int i = 0; i < MAXQ; i++)
        if (fv.mrs[i] == mr)
            fv.mrs[i] = NULL;
    free(mr);
    return 0;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c)
{
    struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));
    if (ch == NULL)
        return NULL;
    ch->context = c;
    ch->fd = dup(fv.sock); /* readable when datagrams wait */
    return ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
    close(ch->fd);
    free(ch);
    return 0;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *ctx,
                                    struct ibv_comp_channel *ch, int vec)
{
    if (cqe > MAXCQE)
        return NULL;
    fcq_t *q = calloc(1, sizeof(*q));
    if (q == NULL)
        return NULL;
    q->cq.context = c;
    q->cq.channel = ch;
    q->cq.cq_context = ctx;
    q->cq.cqe = cqe;
    for (int i = 0; i < 64; i++)
        if (fv.cqs[i] == NULL) {
            fv.cqs[i] = q;
            return &q->cq;
        }
    free(q);
    return NULL;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *cq)
{
    for (int i = 0; i < 64; i++)
        if (fv.cqs[i] == (fcq_t *)(void *)cq)
            fv.cqs[i] = NULL;
    free(cq);
    return 0;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **ctx)
{
    drain();
    for (int i = 0; i < 64; i++) {
        fcq_t *q = fv.cqs[i];
        if (q != NULL && q->cq.channel == ch && q->armed && q->n > 0) {
            q->armed = 0;
            *cq = &q->cq;
            *ctx = q->cq.cq_context;
            return 0;
        }
    }
    errno = EAGAIN;
    return -1;
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int n) {}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a)
{
    const char *ll = getenv("FAKE_VERBS_LINK_LAYER");
    if (ll != NULL && strcmp(ll, "unspecified") == 0 && a->qp_type != IBV_QPT_UD) {
        errno = EOPNOTSUPP; /* as rdma-core's efa provider: UD (and its own SRD) only */
        return NULL;
    }
    for (int i = 0; i < MAXQ; i++) {
        if (fv.qps[i] != NULL)
            continue;
        fqp_t *q = calloc(1, sizeof(*q));
        if (q == NULL)
            return NULL;
        q->qp.context = pd->context;
        q->qp.pd = pd;
        q->qp.send_cq = a->send_cq;
        q->qp.recv_cq = a->recv_cq;
        q->qp.qp_type = a->qp_type;
        q->qp.qp_num = ++fv.next_qpn;
        fv.qps[i] = q;
        return &q->qp;
    }
    errno = ENOMEM;
    return NULL;
}

EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
    fqp_t *q = (fqp_t *)(void *)qp;
    if (mask & IBV_QP_STATE)
        qp->state = a->qp_state;
    if (mask & IBV_QP_DEST_QPN)
        q->dqpn = a->dest_qp_num;
    if (mask & IBV_QP_AV) {
        if (!a->ah_attr.is_global)
            return EINVAL; /* RoCE needs the GRH */
        memcpy(&q->dpid, a->ah_attr.grh.dgid.raw + 12, 4);
    }
    return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *qp)
{
    for (int i = 0; i < MAXQ; i++)
        if (fv.qps[i] == (fqp_t *)(void *)qp)
            fv.qps[i] = NULL;
    free(qp);
    return 0;
}

EXPORT int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *e)
{
    if (fv.port_event) {
        uint64_t v;
        fv.port_event = 0;
        if (read(c->async_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
            die("eventfd read");
        memset(e, 0, sizeof(*e));
        e->event_type = IBV_EVENT_PORT_ERR;
        e->element.port_num = 1;
        return 0;
    }
    errno = EAGAIN;
    return -1;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *e) {}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status s)
{
    /* libibverbs' own strings for the statuses this fake produces */
    return s == IBV_WC_SUCCESS         ? "success"
           : s == IBV_WC_RETRY_EXC_ERR ? "transport retry counter exceeded"
           : s == IBV_WC_WR_FLUSH_ERR  ? "Work Request Flushed Error"
                                       : "fake error";
}

EXPORT const char *ibv_event_type_str(enum ibv_event_type t)
{
    return t == IBV_EVENT_PORT_ERR ? "port error" : "fake event";
}
