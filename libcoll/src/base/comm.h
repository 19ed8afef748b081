/* The communicator's state (struct coll_comm) and what every layer may do with it: look up a
 * handle, describe a member, blame a rank, fail the communicator, borrow scratch. Higher layers
 * hang their own state off it through opaque pointers; they act on a failure through the hook
 * the layer that creates communicators installs (comm->on_fail), so nothing here calls up. */
#ifndef COLLI_COMM_H
#define COLLI_COMM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "base/member.h"
#include "base/testhook.h"
#include "coll.h"

/* What a rank's coll-agent says about where it runs (each field may be NULL or ""). */
typedef struct colli_ident {
    const char *pod;
    const char *node;
    const char *group; /* topology group (switch/rack) of the node: ring order */
} colli_ident_t;

/* Transports a communicator can hold at once (slots of transport/transport.c's registry). */
#define COLLI_MAX_TP 4

/* A transport in use: its ops (transport/transport.h) and its state. */
struct colli_tp_slot {
    const struct colli_transport *ops; /* NULL: not in use */
    void *state;
};

struct colli_transport;
struct colli_op;
struct colli_direct;
struct colli_dev;
struct colli_cuda_driver;
struct pollfd;

/* A PreMulSum operator (coll_op_create_premul_sum): operator COLL_NUM_OPS + its index. */
struct colli_premul {
    bool used;
    bool by_pointer; /* read *ptr at each call, else value */
    bool on_device;  /* ptr is memory of GPU `device`, read on the GPU when the call runs */
    bool copy_only;  /* not an operator: sendbuf partly overlaps recvbuf, so the input is first
                      * copied (a multiplication by 1 on the GPU) and the call keeps its op */
    int device;
    coll_datatype_t dt;
    const void *ptr;
    unsigned char value[8];
};

struct coll_comm {
    int rank;
    int nranks;
    uint8_t secret[16];
    uint64_t tag; /* secret-derived tag carried in every frame */
    colli_config_t cfg;
    colli_testhook_t test;   /* test seams (base/testhook.h) */
    colli_member_t *members; /* [nranks] */
    int local_ranks;         /* ranks sharing this host */
    bool oversubscribed;     /* more local ranks than cores: yield while spinning */

    struct colli_tp_slot tp[COLLI_MAX_TP]; /* the transports in use, by registry slot */
    uint8_t *peer_tp;                      /* [nranks] the slot that reaches each peer */
    uint8_t tp_streams[COLLI_MAX_TP];      /* lanes a message to a peer of this slot spreads over */
    bool all_local;      /* every peer is reached over a transport of this host (one-host comm) */
    struct pollfd *pfds; /* one poll() set for every transport (grow-only) */
    int pfd_cap;
    /* The last finished op with its arrays: the next op reuses the arrays, and the next call of
     * the same all_reduce reuses the op itself (nothing built, nothing allocated). */
    struct colli_op *spare_op;
    /* The op of coll_isend/coll_irecv requests, driven by the calls that test or wait on them
     * (algo/pending.c); NULL until the first. */
    struct colli_pending *pending;

    uint64_t coll_seq;      /* collectives issued so far */
    uint64_t *p2p_send_seq; /* [nranks] messages sent to each peer */
    uint64_t *p2p_recv_seq; /* [nranks] messages received from each peer */

    void **staging; /* [nranks*nstreams] receive staging buffers (chunk_size) */
    void *scratch;  /* grow-only scratch for intermediate results */
    size_t scratch_size;
    struct colli_direct *direct; /* single-copy path: peers' mapped buffers (algo/direct.c) */

    coll_result_t async_error;
    char async_msg[1024];
    char agent_socket[108];            /* report failures to the pod's coll-agent ("" = none) */
    char agent_ns[64], agent_job[254]; /* ... which records them in this Communicator ("" =
                                        * none: no agent, or a standalone one) */
    /* Stuck reports from other ranks (timeout diagnosis): who reported, and whom they wait on. */
    uint8_t *stuck_reported; /* [nranks] */
    uint8_t *stuck_waits;    /* [nranks] */
    struct colli_op *cur_op; /* the operation in progress, for answering stuck reports */
    int busy;                /* an operation is running (atomic) */
    /* The rank a failure is blamed on (-1: none yet, or this rank): the dead, stopped or
     * unreachable peer, or the culprit an abort notice named. First one wins. */
    int blame_rank;
    /* Ring order (topology-aware): ring_rank[p] is the rank at position p of rings and chains,
     * ring_posof[r] the position of rank r; both NULL when the order is the rank order. */
    int *ring_rank;
    int *ring_posof;
    /* The CUDA driver, when the process had it loaded at creation (device/cuda_driver.h): device
     * buffers are told apart even without a GPU plugin. */
    struct colli_cuda_driver *cuda;
    /* The device-buffer path (device/): the GPU plugin, the queue of calls on device buffers
     * and the progress thread that runs them; NULL without a plugin. */
    struct colli_dev *dev;
    int abort_req; /* coll_comm_abort: the op in progress on another thread stops (atomic) */
    /* Called once by colli_comm_fail after the error is recorded: tells the peers and the
     * pod's agent (installed by the layer that creates communicators; NULL: nobody to tell). */
    void (*on_fail)(struct coll_comm *comm, const char *msg);
    /* Asked by the run loop while an op (what) has waited idle seconds without progress on
     * ranks[0..n): under the kcoll agent, whether Kubernetes says one of them ended. COLL_SUCCESS:
     * keep waiting (*soon: an answer is on its way, ask again in a few seconds); another result
     * fails the op with that error, the rank blamed. NULL: nobody to ask. */
    coll_result_t (*on_idle)(struct coll_comm *comm, const int *ranks, int n, const char *what,
                             double idle, bool *soon);
    bool idle_ask_off; /* on_idle found nobody to answer: not asked again */
    struct colli_premul premul[COLL_MAX_PREMUL_OPS]; /* operators made at run time */
    uint32_t shrink_epoch; /* coll_comm_shrink calls so far (a new secret each) */
    uint32_t forks;        /* the registry's fork count when registered (base/comm.c) */
    int pid;               /* the process that registered it */
};

/* Handle registry: handles are (slot, generation) pairs, never raw pointers, so a destroyed
 * handle is detected. Lookup returns the comm or an error naming the problem. */
coll_result_t colli_comm_register(struct coll_comm *comm, coll_comm_t *handle);
coll_result_t colli_comm_lookup(coll_comm_t handle, struct coll_comm **comm);
/* The live communicator of handle in this process, or NULL, saying nothing (for cleanup paths
 * where a handle that is gone is expected). */
struct coll_comm *colli_comm_find(coll_comm_t handle);
void colli_comm_unregister(coll_comm_t handle);
/* In a process forked after handle's communicator was made (lookup refuses it there): unregister
 * the handle without touching the communicator (its threads, locks and connections are the
 * parent's), log it, and return true. false, doing nothing, for any other handle. fn names the
 * caller in the log line. */
bool colli_comm_let_go_inherited(coll_comm_t handle, const char *fn);

/* A bootstrap root this process serves listens at listener (its socket's own address): a child
 * forked while it runs closes the root's sockets, as it closes the communicators'. Unwatch it
 * before the listener closes. */
void colli_fork_watch(const struct sockaddr_storage *listener);
void colli_fork_unwatch(const struct sockaddr_storage *listener);

/* Record a fatal error on the communicator (first one wins), log it once and call on_fail. */
void colli_comm_fail(struct coll_comm *comm, coll_result_t code, const char *msg);

/* Name the rank a coming failure is caused by (first one wins; out-of-range ranks ignored). */
void colli_comm_blame(struct coll_comm *comm, int rank);

/* Scratch of at least bytes (grow-only, owned by comm). */
coll_result_t colli_comm_scratch(struct coll_comm *comm, size_t bytes, void **out);

/* "rank 3 (pid 1234 on host-a, 10.0.0.3:4711)" */
void colli_member_desc(const struct coll_comm *comm, int rank, char *buf, size_t len);

/* Order rings by (topology group, host, rank) so that ring neighbours share a switch and a host;
 * leaves the rank order (NULL arrays) when it already is that order (ring_order.c). */
coll_result_t colli_comm_ring_order(struct coll_comm *comm);

static inline int colli_ring_rank(const struct coll_comm *comm, int pos)
{
    return comm->ring_rank ? comm->ring_rank[pos] : pos;
}
static inline int colli_ring_pos(const struct coll_comm *comm, int rank)
{
    return comm->ring_posof ? comm->ring_posof[rank] : rank;
}

#endif
