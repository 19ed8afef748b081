/*
 * kcoll public API. C11 + stdint.h; no CUDA types (a stream is an opaque pointer).
 *
 * Concepts follow NCCL: a communicator of nranks processes created from a unique id,
 * collectives over host (and later device) buffers, point-to-point send/recv, group calls.
 */
#ifndef COLL_H
#define COLL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(COLL_BUILDING_LIBRARY)
#define COLL_API __attribute__((visibility("default")))
#else
#define COLL_API
#endif

/** Version of this header, as MAJOR*10000 + MINOR*100 + PATCH. */
#define COLL_MAJOR                 0
#define COLL_MINOR                 1
#define COLL_PATCH                 0
#define COLL_VERSION_CODE(X, Y, Z) ((X)*10000 + (Y)*100 + (Z))
#define COLL_VERSION               COLL_VERSION_CODE(COLL_MAJOR, COLL_MINOR, COLL_PATCH)

/**
 * Result codes and their strings, from one table so that they never drift.
 * X(NAME, value, "description")
 */
#define COLL_RESULT_MAP(X)                                                                         \
    X(SUCCESS, 0, "no error")                                                                      \
    X(ERR_INVALID_ARGUMENT, 1, "invalid argument")                                                 \
    X(ERR_INVALID_USAGE, 2, "invalid usage")                                                       \
    X(ERR_SYSTEM, 3, "system error")                                                               \
    X(ERR_INTERNAL, 4, "internal error")                                                           \
    X(ERR_REMOTE, 5, "remote error (a peer failed or closed its connection)")                      \
    X(ERR_TIMEOUT, 6, "timeout")                                                                   \
    X(ERR_MISMATCH, 7, "collective mismatch between ranks")                                        \
    X(ERR_VERSION, 8, "version mismatch")                                                          \
    X(ERR_NETWORK, 9, "network configuration error")                                               \
    X(ERR_UNSUPPORTED, 10, "unsupported")                                                          \
    X(ERR_ABORTED, 11, "communicator aborted")                                                     \
    X(ERR_CUDA, 12, "CUDA error")                                                                  \
    X(IN_PROGRESS, 13, "operation in progress")

/** Result of every kcoll call. */
typedef enum {
#define COLL_RESULT_ENUM_(name, val, str) COLL_##name = val,
    COLL_RESULT_MAP(COLL_RESULT_ENUM_)
#undef COLL_RESULT_ENUM_
        COLL_NUM_RESULTS
} coll_result_t;

/** Element types. float16 is IEEE binary16, bfloat16 the upper half of a float32; the float8 types
 *  are the OCP 8-bit formats E4M3 (no infinities, largest finite 448) and E5M2 (largest finite
 *  57344): arithmetic in float32, one rounding to nearest even, saturating at the largest finite
 *  value (infinities included), NaN kept. */
typedef enum {
    COLL_INT8 = 0,
    COLL_UINT8 = 1,
    COLL_INT32 = 2,
    COLL_UINT32 = 3,
    COLL_INT64 = 4,
    COLL_UINT64 = 5,
    COLL_FLOAT16 = 6,
    COLL_BFLOAT16 = 7,
    COLL_FLOAT32 = 8,
    COLL_FLOAT64 = 9,
    COLL_FLOAT8_E4M3 = 10,
    COLL_FLOAT8_E5M2 = 11,
    COLL_NUM_DATATYPES = 12
} coll_datatype_t;

/**
 * Reduction operators. Integer sum and prod wrap around (two's complement). COLL_AVG is the sum
 * divided by the number of ranks at the end (integer division truncates; bfloat16/float8 are
 * computed in float32 and rounded to nearest even), except for float16: there, as in NVIDIA
 * NCCL, each input is multiplied by 1/nranks (rounded to float16) before the sum, so that a sum
 * beyond float16's 65504 cannot make an average that is finite infinite.
 */
typedef enum {
    COLL_SUM = 0,
    COLL_PROD = 1,
    COLL_MIN = 2,
    COLL_MAX = 3,
    COLL_AVG = 4,
    COLL_NUM_OPS = 5
} coll_op_t;

/** Opaque communicator handle. A destroyed handle is detected, never dereferenced. */
typedef struct coll_comm *coll_comm_t;

/** Opaque stream: a cudaStream_t for device buffers, NULL for host buffers. For device buffers,
 * make the GPU current (cudaSetDevice) before creating the communicator, as NCCL asks: its
 * kernels are then loaded at creation; else at its first device call, which then waits for the
 * work already queued on the GPU (docs/gpu.md). */
typedef void *coll_stream_t;

#define COLL_UNIQUE_ID_BYTES 128
/** Root address + random secret. Pass it to every rank (it has a printable form). */
typedef struct {
    char internal[COLL_UNIQUE_ID_BYTES];
} coll_unique_id_t;

/** Room for the printable form of a unique id, with its terminating NUL. */
#define COLL_UNIQUE_ID_STRLEN 160

/** Environment variable through which launchers (coll-run) pass the unique id string. */
#define COLL_ENV_UNIQUE_ID "COLL_UNIQUE_ID"
#define COLL_ENV_RANK      "COLL_RANK"
#define COLL_ENV_NRANKS    "COLL_NRANKS"

/* ---- errors and version ---- */

/** Short, static description of a result code ("unknown result" for out-of-range values). */
COLL_API const char *coll_get_error_string(coll_result_t result);

/**
 * The message of the last error raised by a kcoll call on this thread: what went wrong, who
 * (rank, peer, host) and what to do. Empty string when no call on this thread failed yet.
 */
COLL_API const char *coll_get_last_error(void);

/** Library version as COLL_VERSION_CODE. */
COLL_API coll_result_t coll_get_version(int *version);

/** Library version string (the one pinned and compared between ranks), e.g. "0.1.0". */
COLL_API const char *coll_get_version_string(void);

/**
 * Write one line, as given (a newline is added), where kcoll logs: stderr, or the file that
 * COLL_DEBUG_FILE (else NCCL_DEBUG_FILE) names, "%h" standing for the host and "%p" for the pid.
 * For layers over kcoll (its libnccl.so.2, the PyTorch backend), whose lines then go where
 * kcoll's own go; the caller decides whether the line is wanted (COLL_DEBUG).
 */
COLL_API void coll_log_text(const char *text);

/** Whose defaults a process takes for the settings that neither the environment nor the agent
 * sets (coll_set_defaults). */
typedef enum {
    COLL_DEFAULTS_KCOLL = 0, /**< kcoll's (COLL_TIMEOUT 300 s, COLL_BOOTSTRAP_TIMEOUT 120 s) */
    /** NVIDIA NCCL's contract: an operation waits for late peers without a deadline of its own
     * (COLL_TIMEOUT 0: a WARN names the ranks it waits on; a peer that goes away still fails
     * it, and the program's watchdog ends it with coll_comm_abort, as PyTorch's timeout does),
     * and a communicator's ranks may arrive up to 1800 s apart (COLL_BOOTSTRAP_TIMEOUT) */
    COLL_DEFAULTS_NCCL = 1,
} coll_defaults_t;

/**
 * Choose the process's defaults for unique ids and communicators made after the call (kcoll's
 * libnccl.so.2 chooses COLL_DEFAULTS_NCCL when it is loaded). COLL_* variables and the agent's
 * pins still win. Thread-safe.
 */
COLL_API coll_result_t coll_set_defaults(coll_defaults_t defaults);

/* ---- unique id ---- */

/**
 * Create a unique id for a new communicator and start its bootstrap root in this process (a
 * background thread that serves exactly one communicator and exits, within
 * COLL_BOOTSTRAP_TIMEOUT). The root listens on the interface chosen by COLL_SOCKET_IFNAME.
 */
COLL_API coll_result_t coll_get_unique_id(coll_unique_id_t *id);

/** As coll_get_unique_id, with an interface spec (COLL_SOCKET_IFNAME syntax) that overrides the
 *  environment; NULL means "use the environment". */
COLL_API coll_result_t coll_get_unique_id_ifname(coll_unique_id_t *id, const char *ifname_spec);

/**
 * coll_get_unique_id whose bootstrap root waits for the ranks for `seconds` when that is shorter
 * than COLL_BOOTSTRAP_TIMEOUT (0: COLL_BOOTSTRAP_TIMEOUT alone); then it names the missing ranks
 * to those that came. Pair it with coll_comm_init_rank_timeout.
 */
COLL_API coll_result_t coll_get_unique_id_timeout(coll_unique_id_t *id, double seconds);

/**
 * A unique id that every process makes alike, for launchers that hand out an address instead of
 * an id (NCCL_COMM_ID under kcoll's libnccl.so.2): no root is started here; rank 0 hosts it on
 * host_port ("<name or address>:<port>", IPv6 in brackets) while coll_comm_init_rank creates its
 * member, and the other ranks reach it there (retrying until COLL_BOOTSTRAP_TIMEOUT). secret_hex:
 * 32 hex digits every rank of the job shares (it authenticates the job's connections); NULL: the
 * job's secret from the pod's kcoll agent (COLL_AGENT_SOCKET; every agent of a job holds the same).
 */
COLL_API coll_result_t coll_unique_id_from_address(coll_unique_id_t *id, const char *host_port,
                                                   const char *secret_hex);

/** Printable form ("kcoll1:<host>:<port>:<secret hex>"; "kcoll1r:" for an id of
 *  coll_unique_id_from_address), NUL-terminated, at most COLL_UNIQUE_ID_STRLEN bytes including
 *  the NUL. */
COLL_API coll_result_t coll_unique_id_to_string(const coll_unique_id_t *id, char *buf, size_t len);

/** Parse the printable form; a malformed string gets COLL_ERR_INVALID_ARGUMENT. */
COLL_API coll_result_t coll_unique_id_from_string(coll_unique_id_t *id, const char *str);

/* ---- communicators ---- */

/**
 * Create this process's member of an nranks-wide communicator. Collective over all ranks: each
 * calls it with the same id and its own rank. Blocks until every rank checked in or
 * COLL_BOOTSTRAP_TIMEOUT expires (the error then names the ranks that never arrived).
 */
COLL_API coll_result_t coll_comm_init_rank(coll_comm_t *comm, int nranks, coll_unique_id_t id,
                                           int rank);

/**
 * coll_comm_init_rank whose creation gives up after `seconds` when that is shorter than
 * COLL_BOOTSTRAP_TIMEOUT (0: COLL_BOOTSTRAP_TIMEOUT alone), with COLL_ERR_TIMEOUT: a framework's
 * own timeout (PyTorch's init_process_group(timeout=...)) then bounds the creation as it bounds
 * every operation. The communicators split from this one keep the bound for their creation.
 */
COLL_API coll_result_t coll_comm_init_rank_timeout(coll_comm_t *comm, int nranks,
                                                   coll_unique_id_t id, int rank, double seconds);

/**
 * Create this pod's member of its job's communicator from the kcoll agent (COLL_AGENT_SOCKET):
 * rank, world size, root endpoint, pinned network, transport policy, timeouts and the pinned
 * library version come from the cluster operator's CollectiveTopology. Fails with
 * COLL_ERR_VERSION, naming both versions, when this library differs from the pin.
 */
COLL_API coll_result_t coll_comm_init_agent(coll_comm_t *comm);

/**
 * coll_comm_init_agent whose creation gives up after `seconds` when that is shorter than the
 * bootstrap timeout the agent pins (0: the pin alone), with COLL_ERR_TIMEOUT naming the ranks that
 * never came: a framework's own timeout (PyTorch's init_process_group(timeout=...)) then bounds
 * the creation in a pod as it does with coll_comm_init_rank_timeout.
 */
COLL_API coll_result_t coll_comm_init_agent_timeout(coll_comm_t *comm, double seconds);

/**
 * Create this process's member from its environment, whichever launcher set it, in this order:
 * the kcoll agent (COLL_AGENT_SOCKET: as coll_comm_init_agent); coll-run (COLL_UNIQUE_ID,
 * COLL_RANK, COLL_NRANKS); torchrun (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE: rank 0 hosts the
 * bootstrap root on MASTER_ADDR:MASTER_PORT, or on COLL_MASTER_PORT when set, since torchrun's
 * store already holds MASTER_PORT). Set COLL_JOB_SECRET (32 hex digits, the same on every rank)
 * with MASTER_ADDR: without it the job's connections are not authenticated (a WARN says so).
 */
COLL_API coll_result_t coll_comm_init_env(coll_comm_t *comm);

/** The color of a rank that joins no communicator in coll_comm_split. */
#define COLL_SPLIT_NOCOLOR (-1)

/**
 * Split comm into disjoint communicators, like ncclCommSplit and MPI_Comm_split. Collective over
 * comm: every rank calls it (in a group: made at coll_group_end, see there). Ranks that pass the
 * same color form one new
 * communicator, ranked by key (ties: by rank in comm); a rank passing COLL_SPLIT_NOCOLOR joins
 * none and gets NULL. The new communicators need no unique id: they bootstrap through comm, and
 * take comm's configuration (the pinned network and transport policy, tuning, timeouts) and
 * agent. Blocks until the new communicator is ready or COLL_BOOTSTRAP_TIMEOUT expires.
 */
COLL_API coll_result_t coll_comm_split(coll_comm_t comm, int color, int key, coll_comm_t *newcomm);

/** coll_comm_shrink flags. */
#define COLL_SHRINK_DEFAULT 0x0 /**< comm is healthy and idle */
#define COLL_SHRINK_ABORT   0x1 /**< stop comm's operation in progress first (after a failure) */

/**
 * The ranks of comm that are not in exclude[0..nexclude) form a new communicator, in the order of
 * their ranks in comm (ncclCommShrink): the way on after ranks died. Only the surviving ranks
 * call it, each with the same list; the excluded ranks may be dead. comm may have failed (a peer
 * died); with COLL_SHRINK_ABORT an operation still running on comm in another thread is stopped
 * first and comm can only be destroyed afterwards. The new communicator bootstraps at the lowest
 * surviving rank's listener with a secret derived from comm's, takes comm's configuration and
 * agent, and is ready when this returns (or COLL_BOOTSTRAP_TIMEOUT expires).
 */
COLL_API coll_result_t coll_comm_shrink(coll_comm_t comm, const int *exclude, int nexclude,
                                        int flags, coll_comm_t *newcomm);

/** Stop comm (ncclCommRevoke): an operation in progress in another thread ends with
 *  COLL_ERR_ABORTED and every later operation fails; comm can still be split (once every rank
 *  revoked it: the ranks make a fresh copy to split), shrunk, destroyed or aborted. Local: the
 *  other ranks see their pending operations with this rank fail. */
COLL_API coll_result_t coll_comm_revoke(coll_comm_t comm);

/** Free the communicator after its operations completed. The handle is invalid afterwards. */
COLL_API coll_result_t coll_comm_destroy(coll_comm_t comm);

/** Tell every other rank this communicator is aborted (they fail with COLL_ERR_REMOTE naming
 *  this rank), close every connection and free the communicator. */
COLL_API coll_result_t coll_comm_abort(coll_comm_t comm);

/** The communicator's asynchronous error: COLL_SUCCESS while healthy. After an error every
 *  further operation fails; destroy or abort the communicator. */
COLL_API coll_result_t coll_comm_get_async_error(coll_comm_t comm, coll_result_t *async_error);

/**
 * The deadline of comm's operations: seconds without progress before one fails naming the ranks
 * it waits on (COLL_TIMEOUT's meaning, for this communicator; 0: none, as in NVIDIA NCCL). For
 * layers whose program states its own (PyTorch's timeout= of a process group). COLL_TIMEOUT set
 * in the environment, or the agent's pin, still wins (an INFO line says so). Call it before
 * comm's first operation; communicators split or shrunk from comm later take it.
 */
COLL_API coll_result_t coll_comm_set_timeout(coll_comm_t comm, double seconds);

COLL_API coll_result_t coll_comm_count(const coll_comm_t comm, int *count);
COLL_API coll_result_t coll_comm_user_rank(const coll_comm_t comm, int *rank);

/** Where a rank runs, as its kcoll agent placed it (coll_comm_init_agent). */
typedef struct coll_rank_place {
    char pod[128];  /**< its pod ("" without an agent) */
    char node[128]; /**< its node ("" without an agent) */
    int local_rank; /**< its place in its pod: rank = pod rank x local_size + local_rank */
    int local_size; /**< ranks in its pod (the agent's ranksPerPod); 1 without an agent */
    int gpu;        /**< the GPU ordinal it binds among its visible GPUs, -1 for none */
} coll_rank_place_t;

/** Where rank `rank` of comm runs: its pod, node, local rank and GPU. */
COLL_API coll_result_t coll_comm_rank_place(const coll_comm_t comm, int rank,
                                            coll_rank_place_t *place);

/* ---- reduction operators made at run time ---- */

/** Where the scalar of a PreMulSum operator is read. */
typedef enum {
    COLL_SCALAR_IMMEDIATE = 0, /**< its value, copied when the operator is made */
    COLL_SCALAR_POINTER = 1    /**< host memory, read by each collective that uses it when called */
} coll_scalar_residence_t;

/** Most PreMulSum operators one communicator holds at once. */
#define COLL_MAX_PREMUL_OPS 64

/**
 * A PreMulSum operator of comm (ncclRedOpCreatePreMulSum): a sum where each rank first
 * multiplies its input by its own scalar, one element of datatype. *op is COLL_NUM_OPS or more;
 * it is valid for comm's all_reduce, reduce and reduce_scatter on datatype (host or device
 * buffers), until coll_op_destroy. The product is computed as colli_scale documents: integers wrap,
 * float16/bfloat16/float8 in float32 with one rounding, float32/float64 in the type. Not
 * thread-safe against collectives of comm running on other threads, like NCCL's.
 */
COLL_API coll_result_t coll_op_create_premul_sum(coll_op_t *op, const void *scalar,
                                                 coll_datatype_t datatype,
                                                 coll_scalar_residence_t residence,
                                                 coll_comm_t comm);
/** Free an operator of coll_op_create_premul_sum (after the collectives using it ran). */
COLL_API coll_result_t coll_op_destroy(coll_op_t op, coll_comm_t comm);

/* ---- collectives (stream must be NULL for host buffers) ---- */

/** recvbuf[i] = op over ranks of sendbuf[i], on every rank. In place when sendbuf == recvbuf. */
COLL_API coll_result_t coll_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_datatype_t datatype, coll_op_t op, coll_comm_t comm,
                                       coll_stream_t stream);

/** Copy root's sendbuf into every rank's recvbuf (sendbuf used on root only). */
COLL_API coll_result_t coll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                                      coll_datatype_t datatype, int root, coll_comm_t comm,
                                      coll_stream_t stream);

/** Reduce into root's recvbuf (recvbuf used on root only). */
COLL_API coll_result_t coll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                                   coll_datatype_t datatype, coll_op_t op, int root,
                                   coll_comm_t comm, coll_stream_t stream);

/** recvbuf (nranks*sendcount) holds every rank's sendbuf in rank order. In place when
 *  sendbuf == recvbuf + rank*sendcount*size. */
COLL_API coll_result_t coll_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                                       coll_datatype_t datatype, coll_comm_t comm,
                                       coll_stream_t stream);

/** Reduce sendbuf (nranks*recvcount) and leave block `rank` in recvbuf. In place when
 *  recvbuf == sendbuf + rank*recvcount*size. */
COLL_API coll_result_t coll_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                           coll_datatype_t datatype, coll_op_t op, coll_comm_t comm,
                                           coll_stream_t stream);

/** Block j of sendbuf (count elements) goes to rank j; block i of recvbuf comes from rank i. */
COLL_API coll_result_t coll_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
                                       coll_datatype_t datatype, coll_comm_t comm,
                                       coll_stream_t stream);

/* Buffers: sendbuf == recvbuf is in place (all_gather: sendbuf == recvbuf + rank*count;
 * reduce_scatter: recvbuf == sendbuf + rank*recvcount). Buffers that overlap otherwise are
 * accepted, as NCCL accepts them: the input is copied first (host buffers; on a GPU, the
 * reductions' inputs), so the result is the inputs' whatever the overlap. */

/* ---- point-to-point ---- */

/** Send count elements to peer. Matched in order with the peer's coll_recv; count and datatype
 *  must match. Outside a group it blocks until the data is handed to the network. */
COLL_API coll_result_t coll_send(const void *sendbuf, size_t count, coll_datatype_t datatype,
                                 int peer, coll_comm_t comm, coll_stream_t stream);

COLL_API coll_result_t coll_recv(void *recvbuf, size_t count, coll_datatype_t datatype, int peer,
                                 coll_comm_t comm, coll_stream_t stream);

/** coll_send and coll_recv with a tag (any int; coll_send and coll_recv are tag 0), for the
 *  frameworks whose send and recv take one (torch.distributed). Messages between two ranks are
 *  still matched in the order they are issued, as NCCL matches them: the tag does not choose the
 *  message, it checks it. A recv whose tag differs from its matching send's fails with
 *  COLL_ERR_MISMATCH naming both tags, as a count or datatype that differs does, instead of
 *  taking another message's data. */
COLL_API coll_result_t coll_send_tagged(const void *sendbuf, size_t count, coll_datatype_t datatype,
                                        int peer, int tag, coll_comm_t comm, coll_stream_t stream);

COLL_API coll_result_t coll_recv_tagged(void *recvbuf, size_t count, coll_datatype_t datatype,
                                        int peer, int tag, coll_comm_t comm, coll_stream_t stream);

/**
 * Non-blocking send and receive on host buffers: coll_isend and coll_irecv start a message and
 * return at once with a request; the buffer must stay untouched (send) or unread (recv) until the
 * request is complete. Messages are matched as coll_send_tagged's are (in issue order per peer and
 * direction, the tag checked), with the blocking calls' too, and move concurrently: a recv
 * posted early never holds back a send posted after it, so any order of posts completes (a ring
 * that posts its recv, then, much later, its send). They move while a call on their communicator
 * runs: coll_test, coll_wait, coll_comm_progress, and the next coll_isend/coll_irecv, which also
 * make one pass over every outstanding request; a blocking send or recv on the communicator joins
 * them. A collective on a communicator with requests outstanding fails with
 * COLL_ERR_INVALID_USAGE (their messages would cross): make point-to-point calls on a communicator
 * of their own (coll_comm_split with every rank). Not inside a group, not to this rank itself,
 * not on device buffers (use coll_send/coll_recv in a group, on a stream). COLL_TIMEOUT counts the
 * time without progress across calls; a request that fails fails the communicator, as a blocking
 * call does, and every test of its requests returns that error.
 */
typedef struct coll_request *coll_request_t;

COLL_API coll_result_t coll_isend(const void *sendbuf, size_t count, coll_datatype_t datatype,
                                  int peer, int tag, coll_comm_t comm, coll_request_t *request);
COLL_API coll_result_t coll_irecv(void *recvbuf, size_t count, coll_datatype_t datatype, int peer,
                                  int tag, coll_comm_t comm, coll_request_t *request);
/** One pass over the communicator's outstanding requests, unless request is complete already;
 *  *done is 1 once it is (its result read: test it no more, free it). */
COLL_API coll_result_t coll_test(coll_request_t request, int *done);
/** Until request is complete, or the communicator fails (COLL_TIMEOUT without progress, a peer
 *  gone, coll_comm_abort from another thread). */
COLL_API coll_result_t coll_wait(coll_request_t request);
/** Move every outstanding request of comm forward until one completes, wake_fd (>= 0, e.g. an
 *  eventfd another thread writes to) is readable (it is not read), or timeout_ms (0: one pass,
 *  at most 600000) passed. Returns COLL_SUCCESS unless the communicator failed. */
COLL_API coll_result_t coll_comm_progress(coll_comm_t comm, int timeout_ms, int wake_fd);
/** Free the handle (NULL: nothing). A request not complete yet still completes, as its
 *  communicator's calls move it; its buffer is in use until then. A collective or split with
 *  only freed requests outstanding first drives them until they complete. */
COLL_API void coll_request_free(coll_request_t request);

/**
 * Group calls: operations issued between coll_group_start and coll_group_end (per thread,
 * nestable) are deferred and run concurrently at the outermost coll_group_end, so any pattern of
 * sends and receives (an all-to-all-v, a ring exchange) completes without deadlock. Calls on
 * several communicators run concurrently, one thread per communicator whose calls use host
 * buffers (calls on device buffers are queued on their streams by the calling thread), so one
 * thread may drive several ranks of one job (one per GPU, as with ncclCommInitAll).
 * coll_comm_init_rank, coll_comm_split and coll_comm_shrink inside a group return at once (their
 * arguments checked): every communicator they queued is created at coll_group_end, all at the
 * same time (the splits and shrinks of one parent in issue order), and written to its coll_comm_t
 * then (which must stay valid until then; NULL for COLL_SPLIT_NOCOLOR); if one fails, none is
 * created and coll_group_end returns that error. So one thread holding several ranks (one per
 * GPU) can split all of them, as XLA does through ncclCommSplit.
 * A call that fails inside a group (its error returned at once) fails the whole group, as in
 * NCCL: coll_group_end runs none of its calls and returns that error again, so that no rank runs
 * part of a group its peers run whole.
 */
COLL_API coll_result_t coll_group_start(void);
COLL_API coll_result_t coll_group_end(void);
/**
 * For layers over kcoll (its libnccl.so.2) whose own checks refuse a call made inside a group:
 * fail the group as a failed kcoll call does (status and why are what coll_group_end returns and
 * reports). No effect outside a group; returns status.
 */
COLL_API coll_result_t coll_group_fail(coll_result_t status, const char *why);
/**
 * End a group as coll_group_end does, but drop its calls instead of running them (queued
 * creations still run): what NCCL's ncclGroupSimulateEnd leaves behind. Nested: only the
 * outermost end drops the calls of the whole group.
 */
COLL_API coll_result_t coll_group_discard(void);

/* ---- memory that peers on this host can map ---- */

/**
 * Allocate size bytes (zeroed, page aligned) of host memory that the other ranks of this host can
 * map, like ncclMemAlloc. On a communicator whose ranks all share one host, collectives of at
 * least COLL_SHM_DIRECT_MIN bytes read and write the peers' buffers directly (one copy instead of
 * two through the shared-memory rings): buffers from coll_mem_alloc are mapped, the fastest way;
 * other buffers are reached with process_vm_readv/writev where the kernel allows it
 * (COLL_SHM_CMA), else they take the rings. Any buffer works with every call. Sharing needs the
 * ranks to see each other's /proc (one PID namespace, same user). Free with coll_mem_free.
 */
COLL_API coll_result_t coll_mem_alloc(void **ptr, size_t size);
/** Free memory from coll_mem_alloc (NULL is allowed). Peers that mapped it keep their mapping
 *  until their communicator is destroyed; the memory is released after the last unmaps. */
COLL_API coll_result_t coll_mem_free(void *ptr);

/** Size in bytes of one element of datatype (0 for an invalid datatype). */
COLL_API size_t coll_datatype_size(coll_datatype_t datatype);
/** Names: "float32", "sum", "all_reduce"-style; "invalid" for out-of-range values. */
COLL_API const char *coll_datatype_name(coll_datatype_t datatype);
/** v as one element of the floating datatype dt (float16, bfloat16, float32, float64, the
 *  float8 ones), into out (coll_datatype_size(dt) bytes): float64 exactly, the others rounded
 *  to float32 and then as the reductions round (to nearest even; float8 saturating). A PreMulSum
 *  scalar of that datatype, for one. */
COLL_API coll_result_t coll_datatype_from_double(coll_datatype_t dt, double v, void *out);
COLL_API const char *coll_op_name(coll_op_t op);

#ifdef __cplusplus
}
#endif
#endif /* COLL_H */
