/* Internal to core/ (the API entry layer): a checked call waiting to run, and the functions that
 * run it now (dispatch.c) or queue it in the caller's group (group.c). */
#ifndef COLLI_CORE_H
#define COLLI_CORE_H

#include <pthread.h>
#include <sys/socket.h>

#include "agent_ipc.h" /* proto/ */
#include "algo/algos.h"
#include "device/device.h"

enum { COLLI_ITEM_COLL = 0, COLLI_ITEM_SEND = 1, COLLI_ITEM_RECV = 2 };

/* One checked collective, send or receive (send/recv: the buffer in a.sendbuf or a.recvbuf). */
typedef struct colli_item {
    int kind;
    coll_comm_t handle;
    colli_coll_args_t a;
    int peer;
    int tag;      /* send/recv: the caller's tag (coll_send_tagged; 0 for coll_send) */
    int device;   /* the GPU of its buffers, -1 for host buffers */
    void *stream; /* device buffers: the caller's stream */
    /* pm.used: the call pre-multiplies. A PreMulSum operator (a.op >= COLL_NUM_OPS) as it was
     * at the call (NCCL lets a program destroy the operator right after the call, before its
     * group ends: PyTorch does), or the 1/nranks of a float16 COLL_AVG (colli_premul_avg) */
    struct colli_premul pm;
} colli_item_t;

/* request.c: a checked coll_isend/coll_irecv (outside a group, host buffers, not to self) as a
 * new request in *out. */
coll_result_t colli_request_start(struct coll_comm *comm, const colli_item_t *it,
                                  coll_request_t *out);

/* What creating a communicator member takes (every init path ends in colli_comm_create). */
typedef struct colli_create {
    int nranks;
    int rank;
    struct sockaddr_storage root; /* the bootstrap root */
    uint8_t secret[16];
    /* From a parent (coll_comm_split): its configuration snapshot, test seams, agent socket and
     * the names its agent gave this rank; everything below is then ignored. */
    const struct coll_comm *parent;
    /* Agent mode: the facts of the pod's coll-agent, whose pins apply over the environment,
     * and its socket, where failures are reported (NULL: no agent). */
    const colli_proto_facts_t *agent;
    const char *agent_socket;
    /* coll_comm_shrink: the root shares the parent's listener (bootstrap retries a dropped
     * connection). */
    bool shared_root;
    /* Rank 0 of an id made from an address (MASTER_ADDR, NCCL_COMM_ID): it hosts the root on
     * root while it creates its member; root_busy: what to do when that port is taken. */
    bool host_root;
    const char *root_busy;
    /* > 0: the caller's bound on the creation (coll_comm_init_rank_timeout), where shorter than
     * COLL_BOOTSTRAP_TIMEOUT */
    double bound;
} colli_create_t;

/* env_init.c: start the root that rank 0 hosts on *root (every address of the host when root's
 * is not one of its own); root_busy completes the error when the port is taken. */
coll_result_t colli_host_root(const struct sockaddr_storage *root, const uint8_t secret[16],
                              double timeout, const char *root_busy, pthread_t *thread);

/* group.c: status, the result of a call made inside a group (collective, send/recv, creation);
 * a failure is remembered, and fails the group at its end (nothing in it runs). */
coll_result_t colli_group_note(coll_result_t status);
/* group.c: is the calling thread inside coll_group_start/coll_group_end? */
bool colli_group_active(void);
/* Queue a checked call until the group ends. */
coll_result_t colli_group_enqueue(const colli_item_t *it);
/* Queue a communicator creation: at coll_group_end every queued creation runs at once (one
 * thread each), so that one thread can create several ranks of one communicator; *out is
 * written then. */
coll_result_t colli_group_enqueue_init(const colli_create_t *c, coll_comm_t *out);
/* A split or shrink of parent made inside a group: checked by the caller, queued, and run at
 * coll_group_end with the group's other creations (the exclude list is copied). */
typedef struct {
    coll_comm_t parent;
    bool shrink;
    int color, key;     /* split */
    const int *exclude; /* shrink */
    int nexclude, flags;
} colli_group_child_t;
coll_result_t colli_group_enqueue_child(const colli_group_child_t *c, coll_comm_t *out);

/* Bytes a staged buffer of `bytes` takes in the pinned staging of a device call (each buffer
 * starts on a 64-byte boundary). */
static inline size_t colli_stage_span(size_t bytes)
{
    return (bytes + 63u) & ~(size_t)63u;
}

/* dispatch.c: run a collective now (device buffers: queued for the communicator's progress
 * thread; host buffers: after the device calls queued before it). */
coll_result_t colli_dispatch_collective(struct coll_comm *comm, const colli_item_t *it);
/* Run the sends and receives of handle among items[0..n) as one operation. */
coll_result_t colli_dispatch_p2p(coll_comm_t handle, const colli_item_t *items, int n);

/* premul.c: a call's PreMulSum operator (a->op >= COLL_NUM_OPS) is one of comm's, made for the
 * call's datatype; *pm: a copy of it. */
coll_result_t colli_premul_check(struct coll_comm *comm, const char *fn, const colli_coll_args_t *a,
                                 struct colli_premul *pm);
/* premul.c: a float16 COLL_AVG is a PreMulSum by 1/nranks, as NVIDIA NCCL makes it (a sum
 * beyond 65504 is inf where the average is finite): true and *pm its scalar for such a call. */
bool colli_premul_avg(const struct coll_comm *comm, const colli_coll_args_t *a,
                      struct colli_premul *pm);
/* premul.c: *pm for a call whose sendbuf partly overlaps recvbuf: its input is copied first
 * (host: memcpy into a temporary; GPU: the scale kernel by 1 into scratch), its op kept. */
void colli_premul_copy(const colli_coll_args_t *a, struct colli_premul *pm);
/* premul.c: run a checked call with a PreMulSum operator, or a copied input (host buffers). */
coll_result_t colli_premul_run(struct coll_comm *comm, const colli_item_t *it);
/* premul.c: queue one on device buffers (staged through pinned host memory, stream-ordered). */
coll_result_t colli_premul_dev(struct coll_comm *comm, const colli_item_t *it);

/* comm.c: stop comm (coll_comm_revoke, coll_comm_shrink with COLL_SHRINK_ABORT): the operation
 * running in another thread ends (COLL_ERR_ABORTED), the device queue stops, and every later
 * operation fails with why; bounded (10 s). *was_healthy (may be NULL): comm had not failed
 * before, so this set its error (the peers were not told). */
coll_result_t colli_comm_stop(struct coll_comm *comm, const char *why, bool *was_healthy);

/* comm.c: create this process's member; *out is written only on success. */
coll_result_t colli_comm_create(const colli_create_t *c, coll_comm_t *out);

/* agent_init.c: a unique-id creation in a pod with the kcoll agent (COLL_AGENT_SOCKET set): the
 * agent's facts into *f, c->agent and c->agent_socket pointing at them (its pins then apply over
 * the environment), the version it pins checked, Bootstrapping reported. Nothing without the
 * variable; an error when the agent does not answer or pins another version. */
coll_result_t colli_agent_attach(colli_create_t *c, colli_proto_facts_t *f);
/* agent_init.c: after such a creation, Ready (with the transports comm uses) or the failure
 * reported to the agent. */
void colli_agent_created(const colli_create_t *c, coll_comm_t comm, coll_result_t status);
/* agent_init.c: tell the pod's agent (if any) that this rank failed; bounded, best effort. */
void colli_agent_notify_failure(struct coll_comm *comm, const char *msg);
/* Under a Kubernetes agent: install comm->on_idle, which asks it whether ranks waited on
 * ended (a standalone agent has no Kubernetes to ask). */
void colli_agent_watch_peers(struct coll_comm *comm);
/* The GPU ordinal (among this process's visible GPUs) a rank of several per pod binds: local
 * rank r uses GPU r of the pod's GPUs, unless CUDA_VISIBLE_DEVICES leaves the process one GPU (it
 * was pinned: ordinal 0) or none (-1). -1 when the pod has no GPUs. */
int colli_agent_gpu(const colli_proto_facts_t *f);
/* agent_init.c: the operator's pins from the agent's facts over cfg (source "agent pin"): the
 * network's interface (exact name), transport policy, RDMA device, timeouts. Each value goes
 * through the same parser as the environment's, so a bad pin is named like a bad variable. */
coll_result_t colli_agent_apply_pins(colli_config_t *cfg, const colli_proto_facts_t *f);

#endif
