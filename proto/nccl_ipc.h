/*
 * The "nccl_init" exchange of the agent socket (docs/nccl-env.md): NVIDIA NCCL's environment
 * plugin (libnccl-env.so) tells the pod's agent which NCCL version its process loaded, and the
 * agent answers with this pod's pins (interface, RDMA device, transport policy) or refuses the
 * version (code VersionMismatch). A message kind of its own beside hello and report
 * (agent_ipc.h), on the same frames and header; fields a side does not know are ignored.
 *
 * Pure functions over jansson values (nccl_ipc.c, in coll_proto when jansson was found), so that
 * the agent, the plugin and the fuzz harness share one parser of each direction.
 */
#ifndef COLLI_PROTO_NCCL_IPC_H
#define COLLI_PROTO_NCCL_IPC_H

#include <stddef.h>

#include "agent_ipc.h"

struct json_t;

#define COLLI_PROTO_TYPE_NCCL_INIT "nccl_init" /* request and reply */

/* request */
#define COLLI_PROTO_KEY_NCCL_VERSION "nccl_version" /* "2.28.9" */
#define COLLI_PROTO_KEY_NCCL_SUFFIX  "nccl_suffix"  /* NCCL's version suffix, may be "" */
#define COLLI_PROTO_KEY_HOST         "host"
#define COLLI_PROTO_KEY_CUDA_DRIVER  "cuda_driver" /* cuDriverGetVersion, 0 = unknown */
#define COLLI_PROTO_KEY_GPU          "gpu"         /* the GPUs the process sees, "" = unknown */
/* and COLLI_PROTO_KEY_LOCAL_RANK of agent_ipc.h: the launcher's LOCAL_RANK, -1 = unknown */
/* reply (beside rank, nranks, interface, address, ib_device, transport, pod, node, topology of
 * agent_ipc.h) */
#define COLLI_PROTO_KEY_NCCL_PIN       "nccl_version_pin"    /* "" = not pinned */
#define COLLI_PROTO_KEY_NCCL_POLICY    "nccl_version_policy" /* Exact | SameMinor */
#define COLLI_PROTO_KEY_NCCL_REFERENCE "nccl_reference"      /* what it was compared with */

/* The code of the error reply that refuses a version (a VersionsConsistent condition). */
#define COLLI_PROTO_CODE_VERSION_MISMATCH "VersionMismatch"

#define COLLI_PROTO_NCCL_POLICY_EXACT      "Exact"
#define COLLI_PROTO_NCCL_POLICY_SAME_MINOR "SameMinor"

/* Interface names NCCL keeps (its MAX_IF_NAME_SIZE and the kernel's IFNAMSIZ are 16). */
#define COLLI_PROTO_NCCL_IFNAME_MAX 16

typedef struct {
    char version[32]; /* MAJOR.MINOR.PATCH, checked by colli_proto_nccl_version_parse */
    char suffix[64];
    char host[254];
    char gpu[128]; /* CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES as the process has it */
    int pid;
    int cuda_driver; /* 0 = unknown */
    int local_rank;  /* -1 = unknown */
} colli_proto_nccl_init_t;

typedef struct {
    int rank;
    int nranks;
    char ifname[COLLI_PROTO_NCCL_IFNAME_MAX]; /* this pod's pinned interface */
    char address[64];
    char ib_device[64]; /* "" = none pinned */
    char transport[16]; /* COLLI_PROTO_TRANSPORT_* */
    char pod[254];
    char node[254];
    char topology[254];
    char version_pin[32]; /* "" = not pinned */
    char policy[16];      /* COLLI_PROTO_NCCL_POLICY_* */
    char reference[320];  /* "2.28.9 (rank 0, pod p-0)", "" when nothing to compare with yet */
} colli_proto_nccl_facts_t;

/* 0 with v[0..2] when s is MAJOR.MINOR.PATCH (each 0..65535, digits only), else -1. */
int colli_proto_nccl_version_parse(const char *s, int v[3]);
/* Nonzero when policy is one of the two. */
int colli_proto_nccl_policy_valid(const char *policy);
/* Do versions a and b agree under policy (SameMinor: major and minor equal; anything else:
 * exact)? Unparsable versions never agree. */
int colli_proto_nccl_versions_agree(const char *a, const char *b, const char *policy);

/* {"v", "type": "nccl_init", "timeout_ms", "nccl_version", "nccl_suffix", "host", "pid",
 * "cuda_driver", "gpu", "local_rank"}. */
struct json_t *colli_proto_nccl_init_request(const colli_proto_nccl_init_t *r, int timeout_ms);
/* Reads a request (type already checked); -1 with err (required) naming the bad field. */
int colli_proto_nccl_init_parse(const struct json_t *msg, colli_proto_nccl_init_t *out, char *err,
                                size_t errlen);
/* The ok reply carrying f. */
struct json_t *colli_proto_nccl_init_reply(const colli_proto_nccl_facts_t *f);
/* Reads and checks an ok reply (type already checked): strings within their buffers, an
 * interface name NCCL can hold made of [A-Za-z0-9_.-], a device name of [A-Za-z0-9_.:-], a known
 * transport and policy, rank within nranks. 0 with *out, else -1 with err (required; *out
 * untouched). */
int colli_proto_nccl_init_decode(const struct json_t *reply, colli_proto_nccl_facts_t *out,
                                 char *err, size_t errlen);

/* ---- "nccl_ended": has a rank of this job ended? (docs/nccl-env.md, "A rank that ends") ----
 * NVIDIA NCCL does not notice that a peer's process ended: the other ranks wait in their next
 * collective until the framework's timeout. The plugin asks its pod's agent every few seconds
 * (a request that says since when); the agent answers at once from what the job's Communicator
 * says: the ranks whose pod's agent saw their training container end (exit code, signal, OOMKilled)
 * or their pod deleted or evicted. */
#define COLLI_PROTO_TYPE_NCCL_ENDED "nccl_ended" /* request and reply */
#define COLLI_PROTO_KEY_ENDED       "ended"      /* reply: [{rank, pod, node, what}] */
#define COLLI_PROTO_KEY_WHAT        "what"
#define COLLI_PROTO_KEY_SINCE       "since" /* request: epoch s of the process's NCCL init */
#define COLLI_PROTO_NCCL_MAX_ENDED  4       /* ranks one reply names, at most */

typedef struct {
    int rank;        /* the first rank of the pod that ended */
    char pod[254];   /* a DNS-1123 name */
    char node[254];  /* "" = unknown */
    char what[1024]; /* which ranks ended and why, one line */
} colli_proto_nccl_ended_t;

/* {"v", "type": "nccl_ended", "since"}: since, the epoch second of the asking process's NCCL
 * init: what the agent learned before it (an earlier generation's end) is not answered. */
struct json_t *colli_proto_nccl_ended_request(long long since);
/* The request's "since" (0 when absent or not a non-negative integer). */
long long colli_proto_nccl_ended_since(const struct json_t *req);
/* {"v", "type": "nccl_ended", "ok": true, "ended": [...]} of the first n (at most
 * COLLI_PROTO_NCCL_MAX_ENDED) of e. */
struct json_t *colli_proto_nccl_ended_reply(const colli_proto_nccl_ended_t *e, int n);
/* Reads an ok reply (type already checked) into out[0..*n), at most max entries; -1 with err
 * (required) when "ended" is not an array of {rank >= 0, pod, node, what} with printable strings
 * within their buffers and a non-empty pod and what. */
int colli_proto_nccl_ended_decode(const struct json_t *reply, colli_proto_nccl_ended_t *out,
                                  int max, int *n, char *err, size_t errlen);

#endif /* COLLI_PROTO_NCCL_IPC_H */
