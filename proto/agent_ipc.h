/*
 * The coll-agent <-> libcoll contract: the unix-socket protocol of docs/agent.md ("Socket
 * protocol"), written once for both sides. A frame is a 4-byte big-endian length and one JSON
 * object with an integer "v" and a string "type"; fields a side does not know are ignored.
 *
 * The constants, the facts struct and the enums need nothing but libc; the functions
 * (agent_ipc.c) are in coll_proto only when jansson was found. This header never includes
 * <jansson.h>, so a libcoll built without jansson still sees the types. JSON objects returned are
 * new references the caller releases with json_decref; strings read out of a message are
 * borrowed and live as long as the message.
 */
#ifndef COLLI_PROTO_AGENT_IPC_H
#define COLLI_PROTO_AGENT_IPC_H

#include <stddef.h>
#include <stdint.h>

#include "hex.h"

struct json_t;

#define COLLI_PROTO_IPC_VERSION 1

/* ---- frames ---- */

#define COLLI_PROTO_FRAME_HEADER 4          /* big-endian length of the JSON that follows */
#define COLLI_PROTO_FRAME_MAX    (1u << 20) /* a length outside 1..FRAME_MAX closes the stream */

/* The length a frame header announces. */
uint32_t colli_proto_frame_length(const unsigned char hdr[COLLI_PROTO_FRAME_HEADER]);
/* One whole frame (header + compact JSON) in a malloc'd buffer of *len bytes; NULL when the
 * message cannot be encoded. */
unsigned char *colli_proto_frame_encode(const struct json_t *msg, size_t *len);

/* ---- message types and keys ---- */

#define COLLI_PROTO_TYPE_HELLO  "hello"  /* request and reply */
#define COLLI_PROTO_TYPE_REPORT "report" /* request; answered by ack */
#define COLLI_PROTO_TYPE_ACK    "ack"
#define COLLI_PROTO_TYPE_ERROR  "error"

/* every message */
#define COLLI_PROTO_KEY_V    "v"
#define COLLI_PROTO_KEY_TYPE "type"
#define COLLI_PROTO_KEY_OK   "ok" /* replies */
/* hello request */
#define COLLI_PROTO_KEY_TIMEOUT_MS      "timeout_ms"
#define COLLI_PROTO_KEY_LIBRARY_VERSION "library_version" /* the caller's; in the reply the pin */
#define COLLI_PROTO_KEY_PID             "pid"
/* hello request, optional (several ranks per pod): the process's LOCAL_RANK, its
 * LOCAL_WORLD_SIZE and TORCHELASTIC_RESTART_COUNT as its launcher set them; absent = local rank 0
 * of a one-rank pod. In the reply, local_rank and local_world_size (ranksPerPod) are the
 * agent's, and pod_rank/pods place the pod: rank = pod_rank * local_world_size + local_rank. */
#define COLLI_PROTO_KEY_LOCAL_RANK       "local_rank"
#define COLLI_PROTO_KEY_LOCAL_WORLD_SIZE "local_world_size"
#define COLLI_PROTO_KEY_RESTART_COUNT    "restart_count"
#define COLLI_PROTO_KEY_POD_RANK         "pod_rank"
#define COLLI_PROTO_KEY_PODS             "pods"
#define COLLI_PROTO_KEY_GPU              "gpu" /* reply: the GPU ordinal this rank uses, -1 none */
/* error reply to a hello, optional: the facts the process would have had (so that it can fail
 * the job's other ranks through the bootstrap root at once), whether it hosts the root for that
 * (the pod's lowest local rank that said hello, when local rank 0 of pod 0 is missing), and
 * whether the facts' rank is its own (false for a process refused as a duplicate or out of range:
 * it reports as no rank) */
#define COLLI_PROTO_KEY_FACTS     "facts"
#define COLLI_PROTO_KEY_HOST_ROOT "host_root"
#define COLLI_PROTO_KEY_OWN_RANK  "own_rank"
/* ... and the ranks of its pod that never said hello, which it reports to the root too (so that
 * the root, which waits for every rank to check in or be reported, ends at once) */
#define COLLI_PROTO_KEY_MISSING_RANKS "missing_ranks"
/* hello reply: the facts (colli_proto_facts_t) */
#define COLLI_PROTO_KEY_RANK                "rank" /* also in a report's error */
#define COLLI_PROTO_KEY_NRANKS              "nranks"
#define COLLI_PROTO_KEY_ROOT                "root" /* "host:port", "[v6]:port" */
#define COLLI_PROTO_KEY_ROOT_HOST           "root_host"
#define COLLI_PROTO_KEY_ROOT_PORT           "root_port"
#define COLLI_PROTO_KEY_SECRET              "secret"
#define COLLI_PROTO_KEY_IS_ROOT             "is_root"
#define COLLI_PROTO_KEY_INTERFACE           "interface"
#define COLLI_PROTO_KEY_ADDRESS             "address"
#define COLLI_PROTO_KEY_IB_DEVICE           "ib_device"
#define COLLI_PROTO_KEY_TRANSPORT           "transport"
#define COLLI_PROTO_KEY_BOOTSTRAP_TIMEOUT_S "bootstrap_timeout_s"
#define COLLI_PROTO_KEY_TIMEOUT_S           "timeout_s"
#define COLLI_PROTO_KEY_POD                 "pod" /* also in a report's error */
#define COLLI_PROTO_KEY_NODE                "node"
#define COLLI_PROTO_KEY_NAMESPACE           "namespace"
#define COLLI_PROTO_KEY_JOB                 "job"
#define COLLI_PROTO_KEY_TOPOLOGY            "topology"
#define COLLI_PROTO_KEY_GROUP               "group"
#define COLLI_PROTO_KEY_AGENT_VERSION       "agent_version"
/* error reply */
#define COLLI_PROTO_KEY_CODE  "code"
#define COLLI_PROTO_KEY_ERROR "error" /* the error reply's text; a report's error object */
/* report */
#define COLLI_PROTO_KEY_PHASE       "phase"
#define COLLI_PROTO_KEY_PROGRESS    "progress"
#define COLLI_PROTO_KEY_TRANSPORT   "transport" /* report: the transports a Ready rank uses */
#define COLLI_PROTO_KEY_READY_RANKS "ready_ranks"
/* report (rank 0's Ready): where the ranks run, one entry per pod {pod, node, first, count,
 * gpus}, and how many pods were left out of it */
#define COLLI_PROTO_KEY_PLACEMENT      "placement"
#define COLLI_PROTO_KEY_PLACEMENT_MORE "placement_more"
#define COLLI_PROTO_KEY_FIRST          "first"
#define COLLI_PROTO_KEY_COUNT          "count"
#define COLLI_PROTO_KEY_GPUS           "gpus"
#define COLLI_PROTO_KEY_CONDITIONS     "conditions"
#define COLLI_PROTO_KEY_MESSAGE        "message" /* of a report's error and of a condition */
#define COLLI_PROTO_KEY_STATUS         "status"  /* of a condition; its "type" is KEY_TYPE */
#define COLLI_PROTO_KEY_REASON         "reason"

/* The header every message carries: 0 with *v and *type (borrowed) when "v" is an integer and
 * "type" a string, else -1. */
int colli_proto_header(const struct json_t *msg, long long *v, const char **type);
/* The "type" of a message, NULL when it has none. */
const char *colli_proto_type(const struct json_t *msg);

/* ---- error replies: codes and what the library makes of them ---- */

/* Codes of the protocol itself; every other code is one of the agent's condition types
 * (docs/agent.md, "Conditions"). */
#define COLLI_PROTO_CODE_MALFORMED           "Malformed"
#define COLLI_PROTO_CODE_UNSUPPORTED_VERSION "UnsupportedVersion"
#define COLLI_PROTO_CODE_UNKNOWN_TYPE        "UnknownType"
#define COLLI_PROTO_CODE_NOT_READY           "NotReady" /* hello deadline before the facts */
#define COLLI_PROTO_CODE_BUSY                "Busy"
#define COLLI_PROTO_CODE_INTERNAL            "Internal"
/* Conditions the library tells apart (colli_proto_code_class). */
#define COLLI_PROTO_CODE_INTERFACE_MISSING         "InterfaceMissing"
#define COLLI_PROTO_CODE_ADDRESS_MISSING           "AddressMissing"
#define COLLI_PROTO_CODE_NETWORK_NOT_ATTACHED      "NetworkNotAttached"
#define COLLI_PROTO_CODE_NETWORK_STATUS_MISSING    "NetworkStatusMissing"
#define COLLI_PROTO_CODE_NETWORK_STATUS_INCOMPLETE "NetworkStatusIncomplete"
#define COLLI_PROTO_CODE_RENDEZVOUS_TIMEOUT        "RendezvousTimeout"
#define COLLI_PROTO_CODE_API_UNAVAILABLE           "APIUnavailable"
/* Several ranks per pod: a hello whose local rank is out of range, claimed twice, or missing
 * when ranksPerPod > 1; the pod's other local ranks that never said hello. */
#define COLLI_PROTO_CODE_LOCAL_RANK_OUT_OF_RANGE "LocalRankOutOfRange"
#define COLLI_PROTO_CODE_LOCAL_RANK_DUPLICATE    "LocalRankDuplicate"
#define COLLI_PROTO_CODE_LOCAL_RANK_UNKNOWN      "LocalRankUnknown"
#define COLLI_PROTO_CODE_LOCAL_RANKS_MISSING     "LocalRanksMissing"
#define COLLI_PROTO_CODE_LOCAL_WORLD_MISMATCH    "LocalWorldSizeMismatch"

typedef enum {
    COLLI_PROTO_CLASS_USAGE = 0, /* everything else: configuration, malformed, unknown */
    COLLI_PROTO_CLASS_NETWORK,   /* the pinned network is not usable in this pod */
    COLLI_PROTO_CLASS_TIMEOUT,   /* NotReady, RendezvousTimeout */
    COLLI_PROTO_CLASS_SYSTEM     /* the API server did not answer */
} colli_proto_code_class_t;

/* Which kind of failure an error reply's code is (NULL: USAGE). */
colli_proto_code_class_t colli_proto_code_class(const char *code);

/* {"v", "type": "error", "ok": false, "code", "error": text}. */
struct json_t *colli_proto_error_reply(const char *code, const char *text);
/* The code and text of an error reply (borrowed, NULL when absent). */
void colli_proto_error_fields(const struct json_t *reply, const char **code, const char **text);
/* {"v", "type": "ack", "ok": true}. */
struct json_t *colli_proto_ack(void);

/* ---- hello ---- */

#define COLLI_PROTO_SECRET_BYTES          16
#define COLLI_PROTO_HELLO_DEFAULT_WAIT_MS 30000 /* a hello without timeout_ms */
#define COLLI_PROTO_HELLO_MAX_WAIT_MS     (10 * 60 * 1000)

/* Transport policies a topology pins. */
#define COLLI_PROTO_TRANSPORT_REQUIRE_IB "RequireIB"
#define COLLI_PROTO_TRANSPORT_PREFER_IB  "PreferIB"
#define COLLI_PROTO_TRANSPORT_SOCKET     "Socket"
/* Nonzero when t is one of the three. */
int colli_proto_transport_valid(const char *t);

/* The facts a hello reply carries: what one rank needs before its first byte moves. */
typedef struct {
    int rank;
    int nranks;
    char root_host[64]; /* IPv4/IPv6 literal or host name, without brackets */
    int root_port;
    unsigned char secret[COLLI_PROTO_SECRET_BYTES];
    int is_root;
    char ifname[64];          /* the pinned network's interface in this pod */
    char address[64];         /* this pod's address on it */
    char ib_device[64];       /* RDMA device of the attachment or the first pinned HCA; may be "" */
    char transport[16];       /* COLLI_PROTO_TRANSPORT_* */
    char library_version[64]; /* library version the operator pins; "" = not pinned */
    int bootstrap_timeout_s;
    int timeout_s;
    char pod[254];
    char node[254];
    char ns[64];
    char job[254];      /* the job the communicator belongs to */
    char topology[254]; /* the CollectiveTopology that selected the pod ("" standalone) */
    char group[64];     /* topology group of this pod's node (its topologyKey label value), or "" */
    /* several ranks per pod: rank = pod_rank * local_size + local_rank, nranks = npods *
     * local_size (a one-rank pod: local 0 of 1, pod_rank = rank, npods = nranks) */
    int local_rank;
    int local_size; /* ranksPerPod */
    int pod_rank;
    int npods;
    int gpu; /* GPU ordinal among the process's visible GPUs, -1 = none */
} colli_proto_facts_t;

/* {"v", "type": "hello", "timeout_ms", "library_version", "pid"}. */
struct json_t *colli_proto_hello_request(int timeout_ms, const char *library_version, int pid);
/* Adds a process's local rank, LOCAL_WORLD_SIZE and restart count (each only when >= 0) to a hello
 * request; 0, or -1 when req is not an object. */
int colli_proto_hello_set_local(struct json_t *req, int local_rank, int local_world_size,
                                int restart_count);
/* Reads them back: -1 (absent) for each field the request does not carry; returns -1 with err
 * when one is present but not an integer in 0..65535. */
int colli_proto_hello_local(const struct json_t *req, int *local_rank, int *local_world_size,
                            int *restart_count, char *err, size_t errlen);
/* How long a hello request asks the agent to wait for the facts: its timeout_ms (default
 * COLLI_PROTO_HELLO_DEFAULT_WAIT_MS), within 0..COLLI_PROTO_HELLO_MAX_WAIT_MS. */
int64_t colli_proto_hello_wait_ms(const struct json_t *req);
/* The reply that serves facts f (agent_version: the agent's own). */
struct json_t *colli_proto_hello_reply(const colli_proto_facts_t *f, const char *agent_version);
/* Reads and checks a hello reply (type already checked): integers, strings within their buffers,
 * a 32-hex-digit secret and consistent rank/root. 0 with *out filled, else -1 with err saying
 * what is wrong (*out untouched). */
int colli_proto_hello_decode(const struct json_t *reply, colli_proto_facts_t *out, char *err,
                             size_t errlen);

/* An error reply to a hello that carries the facts the process would have had and whether it
 * hosts the bootstrap root to tell the others (see COLLI_PROTO_KEY_FACTS). */
#define COLLI_PROTO_MAX_MISSING 256
typedef struct {
    int host_root; /* this process hosts the bootstrap root to tell the others */
    int own_rank;  /* the facts' rank is this process's (else it reports as no rank) */
    int nmissing;
    int missing[COLLI_PROTO_MAX_MISSING]; /* ranks it reports for: they never said hello */
} colli_proto_failure_t;

struct json_t *colli_proto_hello_failure(const char *code, const char *text,
                                         const colli_proto_facts_t *f,
                                         const colli_proto_failure_t *how,
                                         const char *agent_version);
/* The facts of such an error reply: 0 with *out and *how, -1 when it carries none or they do not
 * decode. */
int colli_proto_hello_failure_facts(const struct json_t *reply, colli_proto_facts_t *out,
                                    colli_proto_failure_t *how);

/* ---- report ---- */

/* Phases a rank reports; they are the Communicator status phases. */
typedef enum {
    COLLI_PROTO_PHASE_NONE = -1, /* absent or unknown */
    COLLI_PROTO_PHASE_PENDING = 0,
    COLLI_PROTO_PHASE_BOOTSTRAPPING,
    COLLI_PROTO_PHASE_READY,
    COLLI_PROTO_PHASE_DEGRADED,
    COLLI_PROTO_PHASE_FAILED
} colli_proto_phase_t;

/* "Pending", "Bootstrapping", ...; NULL for a value outside the enum. */
const char *colli_proto_phase_name(colli_proto_phase_t p);
/* The phase of a name, case-insensitively; NONE when name is NULL or unknown. */
colli_proto_phase_t colli_proto_phase_parse(const char *name);

/* Condition types a report may set; they are the Communicator status conditions. */
typedef enum {
    COLLI_PROTO_COND_VERSIONS = 0, /* VersionsConsistent */
    COLLI_PROTO_COND_NETWORK,      /* NetworkConsistent */
    COLLI_PROTO_COND_REACHABLE,    /* Reachable */
    COLLI_PROTO_COND_HEALTHY,      /* Healthy */
    COLLI_PROTO_NCOND
} colli_proto_cond_t;

const char *colli_proto_cond_name(colli_proto_cond_t c); /* NULL outside the enum */

#define COLLI_PROTO_STATUS_TRUE    "True"
#define COLLI_PROTO_STATUS_FALSE   "False"
#define COLLI_PROTO_STATUS_UNKNOWN "Unknown"

typedef struct {
    const char *type;    /* NULL = no condition in this slot */
    const char *status;  /* COLLI_PROTO_STATUS_* */
    const char *reason;  /* NULL = absent */
    const char *message; /* NULL = absent */
} colli_proto_condition_t;

/* Pods a report places, at most (the rest are counted in places_more). */
#define COLLI_PROTO_MAX_PLACES 64

/* One pod's ranks: first .. first + count - 1, on the GPUs listed ("0-3,6"; "" for none). */
typedef struct {
    const char *pod;
    const char *node; /* NULL = absent */
    const char *gpus; /* NULL = absent */
    int first;
    int count;
} colli_proto_place_t;

/* One report. Strings are borrowed (from the caller when building, from the message when
 * parsed); NULL means absent. */
typedef struct {
    colli_proto_phase_t phase;
    const char *progress;
    const char
        *transport; /* Ready: how this rank reaches its peers ("InfiniBand, shared memory") */
    int has_ready_ranks;
    int ready_ranks;
    int has_error; /* an error of a rank: */
    int has_err_rank;
    int err_rank; /* when has_err_rank; else the reporting rank */
    const char *err_pod;
    const char *err_node;
    const char *err_message;
    /* Building: every slot with a type is sent, in order. Parsing: slot k holds the last
     * condition of type colli_proto_cond_name(k); conditions of other types are ignored. */
    colli_proto_condition_t conds[COLLI_PROTO_NCOND];
    /* the reporting process (COLLI_PROTO_KEY_PID; 0 = absent): in a pod of several ranks the
     * agent knows its local rank from its hello */
    int pid;
    /* rank 0's Ready: where the ranks run, by pod (entries without a pod, or with a rank range
     * outside int, are dropped when parsed) */
    int nplaces;
    int places_more;
    colli_proto_place_t places[COLLI_PROTO_MAX_PLACES];
} colli_proto_report_t;

/* The report message (NULL when r->phase is not a phase). An error is sent with its message
 * ("" when NULL), its rank when has_err_rank, and pod and node when non-empty. */
struct json_t *colli_proto_report_build(const colli_proto_report_t *r);
/* Reads a report message; -1 with err when "phase" is not a string or "error" not an object. */
int colli_proto_report_parse(const struct json_t *msg, colli_proto_report_t *out, char *err,
                             size_t errlen);

#endif /* COLLI_PROTO_AGENT_IPC_H */
