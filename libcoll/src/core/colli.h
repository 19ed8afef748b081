/* Internal declarations shared by every part of libcoll (never installed). */
#ifndef COLLI_H
#define COLLI_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "coll.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kcoll's wire format is little-endian; big-endian hosts are not supported"
#endif

#ifndef COLL_VERSION_STRING_BUILD
#define COLL_VERSION_STRING_BUILD "0.0.0-dev"
#endif

/* Wire-protocol version: bumped whenever a wire struct changes. */
#define COLLI_PROTO_VERSION 2u

/* ---- errors ---- */

/* Evaluate expr (a coll_result_t); on failure store it in the local `status` and jump. */
#define COLL_CHECK_GOTO(expr, label)                                                               \
    do {                                                                                           \
        status = (expr);                                                                           \
        if (status != COLL_SUCCESS)                                                                \
            goto label;                                                                            \
    } while (0)

/* ---- logging ---- */

typedef enum {
    COLLI_SUB_INIT = 1u << 0,
    COLLI_SUB_BOOT = 1u << 1,
    COLLI_SUB_COLL = 1u << 2,
    COLLI_SUB_NET = 1u << 3,
    COLLI_SUB_SHM = 1u << 4,
    COLLI_SUB_IB = 1u << 5,
    COLLI_SUB_CUDA = 1u << 6,
    COLLI_SUB_AGENT = 1u << 7,
    COLLI_SUB_CONFIG = 1u << 8,
} colli_subsys_t;

typedef enum {
    COLLI_LOG_NONE = 0,
    COLLI_LOG_WARN = 1,
    COLLI_LOG_INFO = 2,
    COLLI_LOG_TRACE = 3,
} colli_log_level_t;

bool colli_log_enabled(colli_log_level_t level, colli_subsys_t sub);
void colli_log(colli_log_level_t level, colli_subsys_t sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rank shown in the prefix of this thread's log lines (-1: none). */
void colli_log_set_rank(int rank);
int colli_log_get_rank(void);

#define coll_warn(SUB, ...) colli_log(COLLI_LOG_WARN, COLLI_SUB_##SUB, __VA_ARGS__)
#define coll_info(SUB, ...)                                                                        \
    do {                                                                                           \
        if (colli_log_enabled(COLLI_LOG_INFO, COLLI_SUB_##SUB))                                    \
            colli_log(COLLI_LOG_INFO, COLLI_SUB_##SUB, __VA_ARGS__);                               \
    } while (0)
#define coll_debug(SUB, ...)                                                                       \
    do {                                                                                           \
        if (colli_log_enabled(COLLI_LOG_TRACE, COLLI_SUB_##SUB))                                   \
            colli_log(COLLI_LOG_TRACE, COLLI_SUB_##SUB, __VA_ARGS__);                              \
    } while (0)

/* The place that decides an error calls this: it formats the message, stores it as this
 * thread's last error, logs it once at WARN, and returns code. */
coll_result_t colli_error(colli_subsys_t sub, coll_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Store a message as the last error without logging (the error was logged already). */
void colli_set_last_error(const char *msg);
/* The last error message of this thread, for callers that wrap it. */
const char *colli_last_error(void);
#define COLLI_ERR(SUB, code, ...) colli_error(COLLI_SUB_##SUB, code, __VA_ARGS__)

/* ---- small utilities ---- */

double colli_now(void); /* monotonic seconds */
coll_result_t colli_random_bytes(void *buf, size_t len);
/* SipHash-2-4 keyed with a 16-byte key; 128-bit output variant writes 16 bytes. */
uint64_t colli_siphash64(const uint8_t key[16], const void *data, size_t len);
void colli_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);
/* Constant-time comparison. */
bool colli_mem_equal(const void *a, const void *b, size_t len);
/* "ip:port" of a socket address ("[v6]:port" for IPv6). */
void colli_sockaddr_str(const struct sockaddr_storage *sa, char *buf, size_t len);
/* Strictly parse a decimal integer within [min, max]. */
bool colli_parse_long(const char *s, long min, long max, long *out);
/* A test-only per-rank setting: "v" applies to every rank, "v0,v1,..." is indexed by rank.
 * Returns the rank's entry (its length in *len) or NULL when the list is empty or shorter. */
const char *colli_rank_entry(const char *list, int rank, size_t *len);
/* NCCL's list syntax (COLL_SOCKET_IFNAME, COLL_IB_HCA): an optional '^' (exclude the matches),
 * an optional '=' (exact names, else prefixes), then comma-separated entries. entry() decides
 * one entry (a writable copy; exact tells '='); the result has the exclusion applied. An empty
 * spec matches everything. */
bool colli_spec_match(const char *spec, bool (*entry)(char *tok, bool exact, void *arg), void *arg);
const char *colli_coll_name(int coll);

/* ---- configuration ---- */

typedef enum {
    COLLI_SRC_DEFAULT = 0,
    COLLI_SRC_ENV = 1,
    COLLI_SRC_AGENT = 2,
    COLLI_SRC_ROOT = 3, /* adopted from rank 0 so that every rank runs the same algorithms */
} colli_source_t;

typedef enum {
    COLLI_TP_AUTO = 0,       /* sockets between hosts (InfiniBand only when asked for, below) */
    COLLI_TP_SOCKET = 1,     /* sockets only */
    COLLI_TP_PREFER_IB = 2,  /* InfiniBand, else sockets with one WARN saying why */
    COLLI_TP_REQUIRE_IB = 3, /* InfiniBand or fail, saying why */
} colli_transport_policy_t;

typedef struct colli_config {
    char socket_ifname[256]; /* NCCL syntax: prefix list, ^exclude, =exact; "" = automatic */
    int socket_family;       /* AF_UNSPEC, AF_INET or AF_INET6 */
    int nstreams;            /* sockets per peer and direction */
    size_t chunk_size;       /* pipeline unit in bytes */
    size_t small_threshold;  /* all-reduce at or below this many bytes uses recursive doubling */
    double timeout;          /* seconds without progress before a collective fails */
    double bootstrap_timeout;
    int spin_us;                  /* busy-poll before blocking */
    int max_connecting;           /* outgoing connects in flight at once */
    int transport;                /* colli_transport_policy_t */
    char ib_hca[256];             /* COLL_IB_HCA: NCCL syntax */
    int ib_gid_index;             /* COLL_IB_GID_INDEX: RoCE GID index, -1 = automatic */
    int ib_nqps;                  /* COLL_IB_NQPS: reliable-connected QPs per peer */
    int ib_timeout;               /* COLL_IB_TIMEOUT: QP ack timeout exponent (4.096 us x 2^n) */
    char ib_lib[256];             /* COLL_TEST_IB_VERBS_LIB: tests only, the verbs library */
    char cuda_plugin[256];        /* COLL_CUDA_PLUGIN: the GPU plugin ("" = default) */
    int test_dev_fail_copy;       /* tests only: this staging copy fails (0 = none) */
    size_t dev_chunk;             /* COLL_CUDA_CHUNK_SIZE: device pipeline step in bytes */
    int dev_ipc;                  /* COLL_CUDA_IPC: 1 = device buffers of one host via IPC */
    int shm_disable;              /* COLL_SHM_DISABLE: 1 = sockets between local ranks too */
    size_t shm_slot_size;         /* bytes of one shared-memory ring slot (header line included) */
    int shm_nslots;               /* slots per ring */
    size_t shm_direct_min;        /* COLL_SHM_DIRECT_MIN: single-copy from this many bytes */
    int shm_cma;                  /* COLL_SHM_CMA: 1 = single copy on malloc buffers too */
    char host_id_suffix[256];     /* test only: appended to the host identity (list: by rank) */
    char test_cuda_versions[256]; /* test only: "RUNTIME/DRIVER" (list: by rank) */
    colli_source_t src[32];       /* source of each parameter, indexed like the table */
} colli_config_t;

/* Resolve every parameter (environment > default) into *cfg; logs each at INFO with its
 * source once per communicator. Fails on malformed values, naming the variable. */
coll_result_t colli_config_load(colli_config_t *cfg);
void colli_config_log(const colli_config_t *cfg);
/* Override one parameter (by its environment name) with a pinned value and record the source. */
coll_result_t colli_config_pin(colli_config_t *cfg, const char *name, const char *value,
                               colli_source_t src);

/* Pins applied over the environment when a communicator is created (agent mode). */
typedef struct colli_pin {
    const char *name;
    const char *value;
} colli_pin_t;

/* Create a communicator member from a root address and secret (both init paths end here). */
/* What a rank's coll-agent says about where it runs (each field may be NULL or ""). */
typedef struct colli_ident {
    const char *pod;
    const char *node;
    const char *group; /* topology group (switch/rack) of the node: ring order */
} colli_ident_t;

coll_result_t colli_comm_create(coll_comm_t *out, int nranks, int rank,
                                const struct sockaddr_storage *root, const uint8_t secret[16],
                                const colli_pin_t *pins, int npins, const char *agent_socket,
                                const colli_ident_t *ident);
/* COLL_TRANSPORT: probe InfiniBand as the policy asks; RequireIB fails naming the reason,
 * PreferIB falls back to sockets with one WARN line. *use_ib: start the InfiniBand transport. */
coll_result_t colli_apply_transport_policy(const colli_config_t *cfg, bool *use_ib);

/* ---- members and communicators ---- */

typedef struct colli_member {
    int rank;
    int nranks;
    uint32_t proto;
    char version[32];
    char hostname[64];
    char host_id[96]; /* hostname + boot id + IPC namespace: ranks sharing it share a host */
    int pid;
    struct sockaddr_storage addr; /* data listener */
    char ifname[32];
    uint32_t caps; /* COLLI_CAP_* this rank offers */
    /* rank 0's tuning is adopted by every rank */
    uint32_t nstreams;
    uint64_t chunk_size;
    uint64_t small_threshold;
    uint64_t direct_min; /* single-copy collectives from this many bytes per rank, 0 = never */
    /* From the rank's coll-agent ("" without one): names for errors and the Communicator status,
     * and the topology group (switch/rack) its node belongs to, for ring order. */
    char pod[128];
    char node[128];
    char group[64];
    /* CUDA runtime and driver versions (CUDART_VERSION form: 12040 = 12.4), 0 without CUDA */
    uint32_t cuda_runtime;
    uint32_t cuda_driver;
} colli_member_t;

/* This process's CUDA runtime (the toolkit of a CUDA build) and driver (cuDriverGetVersion
 * through dlopen of libcuda.so.1) versions, 0 where there is none; COLL_TEST_CUDA_VERSIONS
 * overrides them in tests. */
void colli_cuda_versions(const colli_config_t *cfg, int rank, uint32_t *runtime, uint32_t *driver);

/* Capabilities a rank offers in its member record. */
#define COLLI_CAP_SHM 0x1u /* shared memory works here and is not disabled */
#define COLLI_CAP_IB  0x2u /* an InfiniBand port is open here and the policy asks for it */

/* Transports of a communicator, by index (transport/transport.h). */
enum { COLLI_TPI_SOCKET = 0, COLLI_TPI_SHM = 1, COLLI_TPI_IB = 2, COLLI_NTPI = 3 };

struct colli_transport;
struct colli_op;
struct pollfd;

struct coll_comm {
    int rank;
    int nranks;
    uint8_t secret[16];
    uint64_t tag; /* secret-derived tag carried in every frame */
    colli_config_t cfg;
    colli_member_t *members; /* [nranks] */
    int local_ranks;         /* ranks sharing this host */
    bool oversubscribed;     /* more local ranks than cores: yield while spinning */
    bool use_ib;             /* the transport policy asks for InfiniBand and a port is usable */

    const struct colli_transport *tps[COLLI_NTPI]; /* NULL: transport not in use */
    void *tp_state[COLLI_NTPI];
    uint8_t *peer_tp;    /* [nranks] COLLI_TPI_* that reaches each peer */
    struct pollfd *pfds; /* one poll() set for every transport (grow-only) */
    int pfd_cap;
    /* The last finished op with its arrays: the next op reuses the arrays, and the next call of
     * the same all_reduce reuses the op itself (nothing built, nothing allocated). */
    struct colli_op *spare_op;

    uint64_t coll_seq;      /* collectives issued so far */
    uint64_t *p2p_send_seq; /* [nranks] messages sent to each peer */
    uint64_t *p2p_recv_seq; /* [nranks] messages received from each peer */

    void **staging; /* [nranks*nstreams] receive staging buffers (chunk_size) */
    void *scratch;  /* grow-only scratch for intermediate results */
    size_t scratch_size;
    struct colli_direct *direct; /* single-copy path: peers' mapped buffers (algo/direct.c) */

    coll_result_t async_error;
    char async_msg[1024];
    char agent_socket[108]; /* report failures to the pod's coll-agent ("" = none) */
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
    /* The CUDA driver, when the process had it loaded at creation: device buffers are refused
     * with a clear error (cuda_ptr.c). */
    void *cuda_lib;
    int (*cu_ptr_attr)(void *data, int attribute, unsigned long long ptr);
    /* The device-buffer path (device.c): the GPU plugin, the queue of calls on device buffers
     * and the progress thread that runs them; NULL without a plugin. */
    struct colli_dev *dev;
    int abort_req; /* coll_comm_abort: the op in progress on another thread stops (atomic) */
};

/* ---- device buffers (device.c) ---- */

/* Load the GPU plugin when the process uses CUDA (or COLL_CUDA_PLUGIN names one). An error only
 * when COLL_CUDA_PLUGIN names a plugin that cannot be used. */
coll_result_t colli_dev_init(struct coll_comm *comm);
/* Finish or fail every queued call (abort: fail them), stop the progress thread, free all. */
void colli_dev_fini(struct coll_comm *comm, bool abort);
/* Is p device memory? *device gets its ordinal. false without a plugin. */
bool colli_dev_ptr(const struct coll_comm *comm, const void *p, int *device);
/* Wait until the device calls queued so far have finished (a host-buffer call comes next). */
coll_result_t colli_dev_drain(struct coll_comm *comm, const char *fn);

/* One buffer of a device call: its device range, where it lies in the call's staging, and
 * whether it is read (copied to the host before) or written (copied back after). */
typedef struct colli_dev_region {
    const void *dev;
    size_t bytes;
    size_t off;
    bool in, out;
} colli_dev_region_t;

/* What the progress thread runs once the inputs are staged: a host-buffer call on staging. */
typedef coll_result_t (*colli_dev_run_fn)(struct coll_comm *comm, void *ctx);

/* Pinned staging of at least bytes for the next call (grow-only; valid for that call). */
coll_result_t colli_dev_staging(struct coll_comm *comm, size_t bytes, char **base);
/* Queue a call on device buffers, ordered on stream; returns without waiting for it. ctx (run's
 * argument, ctx_size bytes) is copied; regions lie in the staging from colli_dev_staging. run
 * NULL: a collective (ctx: its colli_coll_args_t) for CUDA IPC or the chunk pipeline. Every
 * device call of a communicator is on one GPU (the first one's); another is INVALID_USAGE. */
coll_result_t colli_dev_submit(struct coll_comm *comm, const char *what, int device, void *stream,
                               const colli_dev_region_t *regions, int nregions,
                               colli_dev_run_fn run, const void *ctx, size_t ctx_size);

void colli_cuda_ptr_init(struct coll_comm *comm);
void colli_cuda_ptr_fini(struct coll_comm *comm);
/* Is p CUDA device memory (not managed)? false where CUDA is not in use. */
bool colli_is_device_ptr(const struct coll_comm *comm, const void *p);
/* COLL_SUCCESS for host memory; an error naming fn and what for a device pointer. */
coll_result_t colli_check_host_buffer(const struct coll_comm *comm, const char *fn,
                                      const char *what, const void *p);

/* Is every peer reached over shared memory (the whole communicator on this host)? */
static inline bool colli_all_on_host(const struct coll_comm *comm)
{
    for (int q = 0; q < comm->nranks; q++)
        if (q != comm->rank && comm->peer_tp[q] != COLLI_TPI_SHM)
            return false;
    return true;
}

static inline int colli_ring_rank(const struct coll_comm *comm, int pos)
{
    return comm->ring_rank ? comm->ring_rank[pos] : pos;
}
static inline int colli_ring_pos(const struct coll_comm *comm, int rank)
{
    return comm->ring_posof ? comm->ring_posof[rank] : rank;
}

/* Order rings by (topology group, host, rank) so that ring neighbours share a switch and a host;
 * leaves the rank order (NULL arrays) when it already is that order. */
coll_result_t colli_comm_ring_order(struct coll_comm *comm);

/* Handle registry: handles are (slot, generation) pairs, never raw pointers, so a destroyed
 * handle is detected. Acquire returns the comm or an error naming the problem. */
coll_result_t colli_comm_register(struct coll_comm *comm, coll_comm_t *handle);
coll_result_t colli_comm_lookup(coll_comm_t handle, struct coll_comm **comm);
void colli_comm_unregister(coll_comm_t handle);

/* Record a fatal error on the communicator (first one wins) and tell the peers. */
void colli_comm_fail(struct coll_comm *comm, coll_result_t code, const char *msg);

/* Name the rank a coming failure is caused by (first one wins; out-of-range ranks ignored). */
void colli_comm_blame(struct coll_comm *comm, int rank);

/* Tell the pod's agent (if any) that this rank failed; bounded, best effort. */
void colli_agent_notify_failure(struct coll_comm *comm, const char *msg);

/* Scratch of at least bytes (grow-only, owned by comm). */
coll_result_t colli_comm_scratch(struct coll_comm *comm, size_t bytes, void **out);

/* Memory from coll_mem_alloc (core/mem.c): where [p, p + len) lies, for peers to map it. */
typedef struct colli_mem_ref {
    uint64_t id;   /* random, unique per allocation */
    uint64_t ino;  /* inode of its memfd (checked by the peer that opens it) */
    uint64_t size; /* bytes mapped */
    uint64_t off;  /* offset of p in the allocation */
    int32_t fd;    /* this process's descriptor of the memfd */
} colli_mem_ref_t;
/* true when [p, p + len) lies inside one live coll_mem_alloc allocation. */
bool colli_mem_find(const void *p, size_t len, colli_mem_ref_t *ref);

/* Single-copy path (algo/direct.c): unmap the peers' buffers of a communicator. */
void colli_direct_fini(struct coll_comm *comm);

/* "rank 3 (pid 1234 on host-a, 10.0.0.3:4711)" */
void colli_member_desc(const struct coll_comm *comm, int rank, char *buf, size_t len);

#endif
