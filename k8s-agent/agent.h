/*
 * coll-agent internals shared by its files: the agent context, the facts it resolves for its
 * pod, named conditions, logging with stable IDs, and small helpers.
 */
#ifndef AGENT_H
#define AGENT_H

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "agent_ipc.h" /* proto/: the socket protocol and the facts it serves */
#include "agent_log.h" /* logging with stable IDs */

/* The project's version (CMakeLists.txt project(VERSION)), defined by the agent_log target, so
 * that the agent, the library, the image and the chart carry one version. */
#ifndef AGENT_VERSION
#error "AGENT_VERSION is defined by CMake (target agent_log)"
#endif
#define AGENT_MAX_UNHEALTHY 16 /* members listed in Communicator status; the rest are counted */

/* ---- time and small helpers (util.c) ---- */

int64_t agent_now_ms(void); /* CLOCK_MONOTONIC */
int64_t agent_remaining_ms(int64_t deadline_ms);
void agent_sleep_ms(int64_t ms);
int agent_random_bytes(unsigned char *buf, size_t len);
/* Base64 decode (standard alphabet, padding optional); returns the decoded length or -1. */
long agent_base64_decode(const char *in, unsigned char **out);
int agent_read_file(const char *path, char **data, size_t *len, size_t max);
/* Snprintf that never overflows and reports truncation as -1. */
int agent_fmt(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Copy a JSON string member into buf ("" when absent or not a string). */
void agent_json_str(const json_t *obj, const char *key, char *buf, size_t len);
/* "a.b.c" path lookup through objects. */
json_t *agent_json_path(const json_t *root, const char *dotted);
/* The list of this process's network interfaces with their addresses, for error messages
 * ("eth0 10.0.0.5, lo 127.0.0.1"). */
void agent_list_interfaces(char *buf, size_t len);
/* Does interface ifname exist here; if address is non-empty, does it carry that address.
 * Returns 0 ok, 1 interface missing, 2 address missing. When address is empty and the interface
 * exists, its first IPv4 (else IPv6) address is written to found (if non-NULL). */
int agent_check_interface(const char *ifname, const char *address, char *found, size_t found_len);
/* Find the interface that carries address; 0 on success. */
int agent_interface_for_address(const char *address, char *ifname, size_t len);
/* Is the pinned address on the bootstrap root's network? Judged from an interface list (ifa,
 * from getifaddrs): 0 yes, or not judged (root_host is no IP address, the address is on no
 * interface); 1 no, but another interface of this host is (msg says which and what to pin);
 * 2 no, and no interface here is (the root is reached through a route; msg says so). */
struct ifaddrs;
int agent_root_network(const struct ifaddrs *ifa, const char *address, const char *root_host,
                       char *msg, size_t len);

/* ---- named conditions ---- */

typedef struct {
    char type[48];      /* e.g. "TopologyAmbiguous": stable, documented */
    char message[1024]; /* what is wrong and what to do */
    int fatal;          /* fatal conditions stop the agent from serving facts */
} agent_condition_t;

/* Fill cond with a fatal condition of type and a formatted message; returns -1. */
int agent_fatal(agent_condition_t *cond, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- the facts served to the library: exactly what a hello reply carries ---- */

typedef colli_proto_facts_t agent_facts_t;

/* ---- options (main.c) ---- */

typedef struct {
    const char *socket_path;
    const char *topology_file; /* standalone mode when set */
    int standalone_rank;       /* -1 = from COLL_RANK */
    const char *kubeconfig;
    const char *sa_dir;
    const char *health_addr;
    int health_port; /* 0 = off */
    int root_port;   /* 0 = pick a free port on the pinned address */
    int rendezvous_timeout_s;
    int request_timeout_ms;
    int backoff_base_ms;
    int backoff_cap_ms;
    int64_t min_shm_bytes;
    const char *ib_dev_dir; /* /dev/infiniband */
    const char *shm_path;   /* /dev/shm */
    const char *log_level;
    int exit_after_ready; /* for tests/bench: exit once facts are served (0 = keep running) */
    const char *lib_src;  /* libcoll.so* in the image */
    const char *lib_dir;  /* copied here (shared volume) before the socket opens; NULL = no copy */
    int local_timeout_s;  /* a pod's local ranks all say hello within this of the first (0 = 60) */
    const char *ipc_allow_uids; /* "1000,0": uids besides the agent's own that may use the socket */
} agent_options_t;

typedef enum { AGENT_STATE_STARTING = 0, AGENT_STATE_READY, AGENT_STATE_FAILED } agent_state_t;

/* The processes of this pod that said hello, one slot per local rank (local_ranks.c). */
#define AGENT_MAX_RANKS_PER_POD 256
typedef struct {
    int pid[AGENT_MAX_RANKS_PER_POD]; /* 0 = local rank not claimed in this generation */
    int restart;                      /* the launcher's restart count of this generation */
    int claimed;
    int64_t first_ms;  /* the generation's first hello (its deadline runs from here) */
    char failed[1024]; /* the generation failed (local ranks missing, a local rank claimed
                        * twice): every hello of the pod not yet answered gets this */
    char failed_code[32];
} agent_local_t;

struct agent_kube;
struct agent_health;
typedef struct agent_nccl_watch agent_nccl_watch_t;

typedef struct {
    _Atomic long ipc_requests;
    _Atomic long ipc_errors;
    _Atomic long reports;
    _Atomic long status_patches;
    _Atomic long events_emitted;
    _Atomic long events_dropped;
} agent_metrics_t;

typedef struct agent_ctx {
    agent_options_t opt;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    agent_state_t state;       /* under mu */
    agent_facts_t facts;       /* written once before state becomes READY; the pod's facts:
                                * rank/nranks count pods, local_size is ranksPerPod */
    agent_local_t local;       /* under mu */
    char ranks_source[240];    /* where facts.local_size came from (set before READY) */
    char pod_uid[64];          /* this pod's uid (kube mode): Events name it */
    agent_condition_t failure; /* valid when state == FAILED */
    int failed_known; /* FAILED, but facts holds this pod's rank, root endpoint and secret: the
                       * hellos' error replies carry them so that the process fails the job's
                       * other ranks through the bootstrap root at once */
    agent_condition_t warnings[8];
    int nwarnings;
    struct agent_kube *kube; /* NULL in standalone mode */
    struct agent_health *health;
    char comm_name[254]; /* Communicator object (kube mode) */
    char comm_uid[64];
    char nccl_version_pin[32]; /* the topology's ncclVersion ("" = none); set before READY */
    char nccl_policy[16];      /* its ncclVersionPolicy: Exact (default) or SameMinor */
    agent_nccl_watch_t *ncclw; /* NVIDIA NCCL runs in this pod (nccl_watch.c; set once, under mu) */
    agent_metrics_t metrics;
    volatile sig_atomic_t stop;
    int64_t start_ms;
} agent_ctx_t;

/* Publish the facts (state READY) or a fatal condition (state FAILED); wakes hello waiters. */
void agent_set_ready(agent_ctx_t *ctx, const agent_facts_t *facts);
void agent_set_failed(agent_ctx_t *ctx, const agent_condition_t *cond);
/* As agent_set_failed, with the facts (rank, root endpoint, secret) the pod would have had: its
 * processes tell the job's other ranks through the bootstrap root (issue 19). */
void agent_set_failed_known(agent_ctx_t *ctx, const agent_condition_t *cond,
                            const agent_facts_t *facts);
/* Wait on ctx->cv (mu held) at most 200 ms, never past deadline_ms: callers loop on their
 * condition. */
void agent_wait_step(agent_ctx_t *ctx, int64_t deadline_ms);
/* Record a non-fatal condition (logged, an Event in kube mode). */
void agent_add_warning(agent_ctx_t *ctx, const agent_condition_t *cond);

/* ---- checks inside the pod (preflight.c) ---- */

/* /dev/shm size, RLIMIT_MEMLOCK and /dev/infiniband for the pinned transport. Warnings and at
 * most one fatal condition are reported through ctx; returns 0, or -1 when a check is fatal. */
int agent_preflight(agent_ctx_t *ctx, const agent_facts_t *facts, agent_condition_t *fatal);
/* Once the root is known: a pinned address off the root's network while another interface of
 * this host is on it is a warning condition (RootOnOtherNetwork: logged, a pod Event); a routed
 * root is one INFO line. Never fatal: the bootstrap's reachability checks decide. */
void agent_check_root_network(agent_ctx_t *ctx, const agent_facts_t *facts);

/* ---- library delivery (libcopy.c) ---- */

/* Copy libcoll.so* (files and symlinks) from src_dir into dst_dir; -1 with cond on failure. */
int agent_copy_library(const char *src_dir, const char *dst_dir, agent_condition_t *cond);

/* ---- several ranks per pod (local_ranks.c) ---- */

/* The facts of local rank lr of the pod whose facts are pod (rank/nranks in pods, local_size =
 * ranksPerPod): rank = pod rank * ranksPerPod + lr, and the GPU it binds. */
void agent_rank_facts(const agent_facts_t *pod, int lr, agent_facts_t *out);
/* The hello of one process once the pod's facts are READY: its local rank (from the request)
 * claimed, then all of the pod's local ranks awaited until the generation's deadline (at most
 * deadline_ms). Returns the reply (facts, or an error naming pod, local ranks and pids). */
json_t *agent_local_hello(agent_ctx_t *ctx, const json_t *req, int64_t deadline_ms);
/* The hello of one process while the pod FAILED with its facts known (failed_known): an error
 * reply with code and message that carries the facts of the process's local rank; the lowest
 * local rank of pod 0 hosts the bootstrap root to tell the others. */
json_t *agent_local_failed(const json_t *req, const agent_facts_t *pod, const char *code,
                           const char *msg);
/* The local rank of the process with pid that said hello in this generation; -1 when none did. */
int agent_local_rank_of(agent_ctx_t *ctx, int pid);

/* ---- ipc server (ipc_server.c) ---- */

/* Wait at most wait_ms while the agent is STARTING; the state then, with the facts (READY) or
 * the fatal condition (FAILED) copied out. */
agent_state_t agent_wait_facts(agent_ctx_t *ctx, int64_t wait_ms, agent_facts_t *f,
                               agent_condition_t *fail);

/* ---- NVIDIA NCCL's environment plugin (nccl_env.c) ---- */

/* The topology's ncclVersion and ncclVersionPolicy (spec, or a standalone file's root) into
 * ctx; -1 with a TopologyInvalid cond when malformed. */
int agent_nccl_pins(agent_ctx_t *ctx, const json_t *spec, const char *where,
                    agent_condition_t *cond);
/* The webhook's kcoll.io/nccl-env-conflict annotation on pod (container env contradicting the
 * pins, spec.nccl: native) becomes a warning condition NcclEnvConflict: a log line and Event. */
void agent_nccl_conflicts(agent_ctx_t *ctx, const json_t *pod);
/* The pins as NCCL's conf file (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_NET), for NCCL without
 * environment plugins and for tools that read it: nccl.conf beside lib_dir (the shared volume,
 * where the webhook points NCCL_CONF_FILE), written atomically once the facts are READY. */
int agent_nccl_write_conf(agent_ctx_t *ctx, const char *lib_dir);
/* The reply to a "nccl_init" request (proto/nccl_ipc.h): the pins, or a refused version. */
json_t *agent_nccl_init(agent_ctx_t *ctx, const json_t *req);

/* ---- a rank that ends, under NVIDIA NCCL (nccl_watch.c) ---- */

/* After this pod's first accepted nccl_init (kube mode): watch the own Pod (an end of its ranks
 * is written to the Communicator and labels it kcoll.io/rank-ended=stamp) and the job's
 * Communicator with that label (the other pods' ends, for "nccl_ended"). Once. */
void agent_nccl_watch_start(agent_ctx_t *ctx, const char stamp[17]);
/* A process of this pod (local_rank; -1 with one rank per pod) passed its NCCL init: once all
 * did, the pod is recorded in status.ncclPods, and the record that completes the job makes the
 * Communicator Ready. After agent_nccl_watch_start. */
void agent_nccl_accepted(agent_ctx_t *ctx, int local_rank);
/* This pod's NCCL process was refused (a version mismatch): the Communicator is labelled at once
 * (the other pods' processes are told; they wait for it in NCCL's bootstrap), and its end is
 * watched. */
void agent_nccl_watch_refused(agent_ctx_t *ctx, const char stamp[17]);
/* At the agent's stop: the own Pod read once more (the kubelet stops the sidecar after the
 * training container ended), then nothing more is reported. Before agent_health_stop. */
void agent_nccl_watch_stop(agent_ctx_t *ctx);
/* The reply to "nccl_ended" (proto/nccl_ipc.h): the ranks of the job that ended, as learned
 * since the request's "since". */
json_t *agent_nccl_ended(agent_ctx_t *ctx, const json_t *req);

typedef struct agent_ipc agent_ipc_t;
int agent_ipc_start(agent_ctx_t *ctx, const char *path, agent_ipc_t **out);
void agent_ipc_stop(agent_ipc_t *ipc);

/* ---- standalone (standalone.c) ---- */

/* Resolve facts from a JSON or YAML topology file; sets READY or FAILED. */
int agent_standalone_run(agent_ctx_t *ctx);

/* ---- YAML → jansson (yaml_json.c), used by kubeconfig and standalone files ---- */

/* Parse a YAML (or JSON) document into a json_t tree (scalars become strings, except plain
 * scalars that read as integers, true/false or null). NULL on error, with err filled. */
json_t *agent_yaml_load(const char *data, size_t len, char *err, size_t errlen);

#endif /* AGENT_H */
