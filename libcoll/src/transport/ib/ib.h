/* InfiniBand verbs transport internals.
 *
 * One HCA port per communicator (COLL_IB_HCA; ranks spread over the matching active ports by
 * rank), one protection domain, one completion queue with a completion channel, and per remote
 * peer reached over InfiniBand:
 *
 *  - COLL_IB_NQPS reliable-connected QPs (both sides use the smaller count of the two);
 *  - a receive ring of IB_NSLOTS slots in this process, registered for remote write: a slot is a
 *    64-byte header line (the 48-byte data frame header, its `reserved` field numbering the
 *    fragment) and IB_SLOT_CAP payload bytes;
 *  - a send ring of the same geometry in this process: the sender copies a fragment (header and
 *    payload) into its slot and RDMA-writes it, with immediate data = its position, into the same
 *    slot of the peer's receive ring, on QP (position mod nqps);
 *  - credits: the receiver consumes slots in order (a reduction reads straight from the slot, as
 *    over shared memory) and returns its consumed count as a zero-byte send with immediate data;
 *    the sender never has more than IB_NSLOTS slots unconsumed, so it never overwrites a slot the
 *    receiver still reads and never overruns the receive queues (flow control by credit);
 *  - the link: the TCP connection (authenticated with an IB hello) over which the two ranks
 *    exchanged QP numbers, LID, GID, PSNs and ring addresses at communicator creation, kept open
 *    so that the death of a peer is seen at once ('B' on it: a clean goodbye).
 *
 * Completions are polled in the op engine's progress; waiting arms the completion channel, whose
 * descriptor joins the engine's poll() with the async-event descriptor (port down, QP fatal) and
 * the links. Every registration goes through a cache keyed by address range (ib_mr.c). */
#ifndef COLLI_IB_H
#define COLLI_IB_H

#include "base/handshake.h"
#include "transport/ib/ib_probe.h"
#include "transport/ib/ib_verbs.h"
#include "transport/probe.h"
#include "transport/transport.h"

/* ---- registration cache (ib_mr.c; no verbs types, so it is unit-tested with fakes) ---- */

typedef struct ib_mr_ent {
    uintptr_t start, end; /* registered range, page-aligned */
    void *mr;             /* what reg returned */
    uint32_t lkey, rkey;
    int refs; /* users holding it; only unreferenced entries are evicted */
    uint64_t used;
} ib_mr_ent_t;

typedef struct ib_mr_cache {
    ib_mr_ent_t **ents; /* each allocated alone: handed out by address, never moved */
    int n, cap;
    int max_idle; /* unreferenced entries kept for reuse */
    uint64_t tick;
    unsigned long hits, misses;
    /* register [addr, addr+len): returns the MR and its keys, or NULL with errno set */
    void *(*reg)(void *ctx, void *addr, size_t len, uint32_t *lkey, uint32_t *rkey);
    void (*dereg)(void *ctx, void *mr);
    void *ctx;
} ib_mr_cache_t;

/* An entry covering [addr, addr+len), registered (page-aligned) on a miss; holds a reference.
 * NULL with the reason in why when registration fails. */
ib_mr_ent_t *ib_mr_get(ib_mr_cache_t *c, const void *addr, size_t len, char *why, size_t whylen);
/* Drop a reference taken by ib_mr_get (the entry stays cached for reuse). */
void ib_mr_put(ib_mr_cache_t *c, ib_mr_ent_t *e);
/* Deregister every unreferenced entry overlapping [addr, addr+len) (the memory is being freed). */
void ib_mr_invalidate(ib_mr_cache_t *c, const void *addr, size_t len);
/* Deregister everything. */
void ib_mr_cache_fini(ib_mr_cache_t *c);

#ifdef COLLI_HAVE_VERBS

#define IB_MAX_QPS   8
#define IB_NSLOTS    8
#define IB_SLOT_HDR  64
#define IB_SLOT_CAP  (64u * 1024u)
#define IB_SLOT_SIZE (IB_SLOT_HDR + IB_SLOT_CAP)
/* bytes of one ring, a whole number of pages (aligned_alloc needs a multiple of the alignment) */
#define IB_RING_BYTES (((size_t)IB_NSLOTS * IB_SLOT_SIZE + 4095) & ~(size_t)4095)
#define IB_RQ_DEPTH   (2 * IB_NSLOTS + 4) /* data writes + credits in flight, per QP */
#define IB_SQ_DEPTH   (2 * IB_NSLOTS + 4)
#define IB_INFO_MAGIC 0x4349424bu /* "KBIC" */

/* One active port that matches COLL_IB_HCA. */
typedef struct ib_port {
    char dev[64];
    int port;
    int link_layer; /* IBV_LINK_LAYER_* */
    bool rc;        /* reported as InfiniBand or Ethernet (RoCE): it has reliable-connected
                     * queue pairs, which this transport and NCCL's IB transport need; AWS
                     * EFA's ports (link layer UNSPECIFIED) create UD and SRD QPs only */
    int mtu;        /* enum ibv_mtu, active */
    uint16_t lid;
} ib_port_t;

/* Active ports matching spec (at most max), in device order. *ndev: devices listed; *nmatch:
 * matching ports in any state. */
int ib_port_list(const colli_ib_verbs_t *v, const char *spec, ib_port_t *out, int max, int *ndev,
                 int *nmatch);
/* The GID table of a port with the type of each entry (n_out entries, caller frees). */
bool ib_gid_table(const colli_ib_verbs_t *v, struct ibv_context *ctx, const char *dev, int port,
                  int ntab, colli_ib_gid_t **out, int *n_out);

/* What one rank tells a peer over the link (little-endian, fixed layout). */
typedef struct ib_info {
    uint32_t magic;
    uint32_t nqps;
    uint32_t qpn[IB_MAX_QPS];
    uint32_t psn[IB_MAX_QPS];
    uint16_t lid;
    uint8_t link_layer;
    uint8_t mtu;
    uint8_t port;
    uint8_t pad[3]; /* [0]: the GID's type (COLLI_IB_GID_*), [1]: its index (for messages) */
    uint8_t gid[16];
    uint64_t ring_addr; /* my receive ring for you */
    uint32_t ring_rkey;
    uint32_t nslots;
    uint32_t slot_size;
    uint32_t pad2;
    char hca[64];
    uint8_t mac[16]; /* SipHash-128(secret, everything before it) */
} ib_info_t;

/* The exchange link: TCP connect, the handshake (connector), records each way, 'R', ready. */
enum {
    IBL_NONE = 0,
    IBL_CONNECTING,
    IBL_HANDSHAKE,
    IBL_SEND,
    IBL_RECV,
    IBL_ACK,
    IBL_READY,
    IBL_CLOSED
};

typedef struct ib_peer {
    bool used;   /* reached over InfiniBand */
    bool set_up; /* QPs and rings exist (at the first transfer with the peer, or its link) */
    bool wanted; /* a transfer needs the connection, or the peer opened its link */
    /* the link */
    int fd;
    uint8_t link;
    bool acceptor;                              /* the higher rank: it answers */
    colli_hs_t hs;                              /* the connector's handshake */
    _Alignas(8) uint8_t out[sizeof(ib_info_t)]; /* our connection record */
    size_t out_len, out_off;
    ib_info_t remote;
    size_t in_off;
    bool gone, bye;
    int gone_err;
    double since, retry_at;
    int pfd;
    colli_probe_t probe; /* a lower rank that has not opened its link to this one yet */
    /* queue pairs */
    struct ibv_qp *qp[IB_MAX_QPS];
    uint32_t psn[IB_MAX_QPS];
    int nqps;                /* in use: the smaller count of both sides */
    int sq_used[IB_MAX_QPS]; /* send work requests in flight */
    /* receive ring (the peer writes into it) */
    char *rx;
    ib_mr_ent_t *rx_mr;
    uint64_t rx_pos;              /* next slot to consume */
    uint64_t rx_ready[IB_NSLOTS]; /* position + 1 once the write landed */
    uint64_t rx_credited;         /* consumed count last returned to the peer */
    /* send ring (mirrors the peer's receive ring) */
    char *tx;
    ib_mr_ent_t *tx_mr;
    uint64_t tx_pos;  /* next slot to write */
    uint64_t tx_tail; /* slots the peer consumed (its credits) */
    uint64_t r_addr;
    uint32_t r_rkey;
} ib_peer_t;

typedef struct ib_state {
    int tp;              /* this transport's slot in the communicator */
    bool policy_checked; /* COLL_TRANSPORT checked against the member table */
    bool auto_ib;        /* COLL_TRANSPORT=auto: every rank offers InfiniBand */
    char ifname[32];     /* the interface the communicator runs on (auto: RoCE only there) */
    long qp_error_at;    /* COLL_TEST_IB_QP_ERROR: the data write that forces its QP into error */
    long writes;         /* data writes posted */
    colli_ib_verbs_t v;
    ib_port_t port;
    int gid_index; /* -1: no GRH (InfiniBand with a LID) */
    int gid_type;  /* COLLI_IB_GID_* of that entry */
    uint8_t gid[16];
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    int cq_size;
    bool armed; /* completion channel armed (ibv_req_notify_cq) */
    int pfd_ch, pfd_async;
    int max_qp_wr;
    int nqps; /* COLL_IB_NQPS of this rank */
    ib_mr_cache_t mrs;
    ib_peer_t *peers; /* [nranks] */
    struct sockaddr_storage bind_addr;
    unsigned tick;
    bool links_pending; /* some wanted peer's connection is not ready yet */
    /* the first fatal condition seen (a completion error, a port down), reported by progress */
    coll_result_t failed;
} ib_state_t;

/* The policy (ib_policy.c): may this rank reach peer over InfiniBand? */
coll_result_t ib_can_connect(struct coll_comm *comm, int tp, const colli_member_t *peer, bool *yes);

/* Data path (ib_lanes.c). */
coll_result_t ib_progress(struct coll_comm *comm, int tp, colli_op_t *op, bool *progressed);
bool ib_wait_arm(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set);
coll_result_t ib_wait_done(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set);
/* Poll the completion queue and the async events; returns an error naming the peer, HCA and
 * port when a work request failed or the port went down. */
coll_result_t ib_poll(struct coll_comm *comm, ib_state_t *st, bool *progressed);
/* Read async events without blocking: a port down or a fatal QP, CQ or device error. */
coll_result_t ib_async_events(struct coll_comm *comm, ib_state_t *st, colli_op_t *op);
/* Post a receive on qp q of peer p (re-posted after each one completes). */
int ib_post_recv(ib_state_t *st, int p, int q);
/* Read the link of peer p without blocking: goodbye, or its end. */
void ib_link_read(struct coll_comm *comm, ib_state_t *st, int p);
/* Connections are made at the first transfer with a peer (ib.c): set up its QPs and rings if
 * needed and advance the exchange over its link; *ready once data can flow. */
coll_result_t ib_peer_ensure(struct coll_comm *comm, ib_state_t *st, int p, bool *ready);
/* Advance every wanted connection that is not ready yet (links the peers opened, too). */
coll_result_t ib_links_step(struct coll_comm *comm, ib_state_t *st);
/* The error for a lane that needs a peer whose link ended (an abort notice first). */
coll_result_t ib_gone_error(struct coll_comm *comm, const ib_state_t *st, colli_op_t *op, int peer,
                            const char *what);

#endif /* COLLI_HAVE_VERBS */
#endif
