/* coll-agent webhook mode: a mutating admission webhook that injects the kcoll agent sidecar.
 *
 * The HTTPS server (webhook.c), its command line (webhook_opts.c), the certificate loader with
 * reload-on-change (webhook_tls.c) and the AdmissionReview -> JSONPatch logic (webhook_mutate.c)
 * share this header. Only
 * agent_webhook_main() is meant for callers outside this folder; the rest is exposed so that the
 * mutation logic can be tested without a TLS server. */
#ifndef AGENT_WEBHOOK_H
#define AGENT_WEBHOOK_H

#include <gnutls/abstract.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "agent_log.h" /* k8s-agent/: agent_info("AGENT-WEBHOOK-...", ...) */

/* Entry point of `coll-agent webhook ...`. Flags: --listen ADDR:PORT, --cert FILE, --key FILE,
 * --agent-image IMAGE, --lib-version V (and optional tuning flags, see --help). Runs until
 * SIGTERM or SIGINT; returns the process exit status (0 on a clean shutdown, 2 on bad usage,
 * 1 when the server cannot start). */
int agent_webhook_main(int argc, char **argv);

/* Names shared by the webhook, the chart and the documentation. */
#define AGENT_WEBHOOK_INJECT_LABEL      "kcoll.io/inject"
#define AGENT_WEBHOOK_INJECTED_ANNOT    "kcoll.io/injected"
#define AGENT_WEBHOOK_LIB_VERSION_ANNOT "kcoll.io/lib-version"
#define AGENT_WEBHOOK_SIDECAR_NAME      "kcoll-agent"
#define AGENT_WEBHOOK_VOLUME_NAME       "kcoll-run"
#define AGENT_WEBHOOK_RUN_DIR           "/var/run/kcoll"
#define AGENT_WEBHOOK_LIB_DIR           AGENT_WEBHOOK_RUN_DIR "/lib"
#define AGENT_WEBHOOK_SOCKET            AGENT_WEBHOOK_RUN_DIR "/agent.sock"
/* the projected API token of the agent's ServiceAccount, mounted into the sidecar only */
#define AGENT_WEBHOOK_TOKEN_VOLUME     "kcoll-agent-token"
#define AGENT_WEBHOOK_DEFAULT_AGENT_SA "kcoll-agent"
#define AGENT_WEBHOOK_DEFAULT_MAX_BODY ((size_t)4 << 20)
/* kcoll as NCCL (CollectiveTopology spec.nccl: kcoll): the annotation that records it and the
 * library every container preloads (the sidecar copies it there, off LD_LIBRARY_PATH) */
#define AGENT_WEBHOOK_NCCL_ANNOT "kcoll.io/nccl"
#define AGENT_WEBHOOK_NCCL_LIB   AGENT_WEBHOOK_RUN_DIR "/nccl/libnccl.so.2"
/* ... with libnccl-alias.so after it, which answers dlopen("libnccl.so") with the same library
 * (TensorRT-LLM opens NCCL by that name; without it NVIDIA's would load beside kcoll's) */
#define AGENT_WEBHOOK_NCCL_PRELOAD                                                                 \
    AGENT_WEBHOOK_NCCL_LIB ":" AGENT_WEBHOOK_RUN_DIR "/nccl/libnccl-alias.so"
/* NVIDIA NCCL guarded by kcoll (spec.nccl: native, docs/nccl-env.md): the environment plugin
 * every container's NCCL loads, the conf file the sidecar writes for NCCL without env plugins,
 * and the annotation naming container settings that contradict the pins (the agent turns it
 * into an Event) */
#define AGENT_WEBHOOK_NCCL_ENV_PLUGIN AGENT_WEBHOOK_RUN_DIR "/nccl-env/libnccl-env.so"
#define AGENT_WEBHOOK_NCCL_CONF       AGENT_WEBHOOK_RUN_DIR "/nccl.conf"
#define AGENT_WEBHOOK_NCCL_CONFLICT   "kcoll.io/nccl-env-conflict" /* annotations.h's too */

enum { AGENT_WEBHOOK_NCCL_NVIDIA = 0, AGENT_WEBHOOK_NCCL_KCOLL = 1, AGENT_WEBHOOK_NCCL_NATIVE = 2 };

/* What the selecting topology pins that the webhook can check in a pod spec. */
struct agent_webhook_nccl_pins {
    char ifname[16];    /* spec.network.interface ("" when an attachment is pinned) */
    char transport[16]; /* spec.transport (default PreferIB) */
    int pass_through;   /* spec.ncclAgentUnreachable: PassThrough (default Fail) */
    int exit_on_end;    /* spec.ncclOnRankEnd: Exit (default Wait) */
};

/* Reads one API object for the webhook: GET path (".../jobs/NAME"), answering before deadline_ms
 * (CLOCK_MONOTONIC milliseconds). Returns the HTTP status, 0 when no answer came; on 200 *obj is
 * the parsed body (the caller frees it), otherwise err says why. Safe to call from several
 * threads at once. */
typedef long (*agent_webhook_api_get_fn)(void *arg, const char *path, int64_t deadline_ms,
                                         json_t **obj, char *err, size_t errlen);

/* What the sidecar looks like; filled from the command line, read-only while serving. */
struct agent_webhook_config {
    const char *agent_image;       /* image of the sidecar (pins the library version) */
    const char *lib_version;       /* library version that image carries */
    const char *image_pull_policy; /* Always, IfNotPresent or Never */
    const char *cpu_request;       /* resource quantities of the sidecar; "" leaves one out */
    const char *memory_request;
    const char *cpu_limit;
    const char *memory_limit;
    size_t max_body; /* larger request bodies are refused with HTTP 413 */
    /* the agent role's ServiceAccount ("" = pods keep their own; webhook_identity.c) */
    const char *agent_service_account;
    /* Reads of the owner Job, JobSet and Namespace (webhook_facts.c); api_get NULL = no API
     * credentials (the facts become *-error annotations). api_timeout_ms bounds all reads of one
     * review together, well inside the MutatingWebhookConfiguration's timeoutSeconds. */
    agent_webhook_api_get_fn api_get;
    void *api_arg;
    int api_timeout_ms;
};

/* The command line of `coll-agent webhook` (webhook_opts.c). */
struct agent_webhook_opts {
    struct agent_webhook_config cfg;     /* the sidecar; api_get is filled when serving */
    const char *listen_spec;             /* --listen as given (for messages) */
    struct sockaddr_storage listen_addr; /* its address, unless listen_any */
    int listen_any;                      /* ADDR empty: every address */
    unsigned int port;                   /* 0 = pick one */
    const char *cert, *key;
    const char *kubeconfig, *sa_dir; /* NULL = the defaults of agent_webhook_api_open */
    unsigned int threads;
};

/* agent_webhook_opts_parse: go on and serve; any other value is the exit status. */
#define AGENT_WEBHOOK_SERVE (-1)
/* Fills o from the command line (defaults for what it leaves out) and checks it: returns
 * AGENT_WEBHOOK_SERVE, or 0 after --help, or 2 after printing what is wrong. */
int agent_webhook_opts_parse(int argc, char **argv, struct agent_webhook_opts *o);

/* Which webhook entry of the MutatingWebhookConfiguration sent the review. */
enum agent_webhook_scope {
    /* The pod itself must carry kcoll.io/inject=true (checked here). */
    AGENT_WEBHOOK_SCOPE_POD,
    /* The namespace carries kcoll.io/inject=true (the API server's namespaceSelector checked
     * it); the pod is injected unless it says kcoll.io/inject=false. */
    AGENT_WEBHOOK_SCOPE_NAMESPACE,
};

/* One HTTP answer: status code, content type and a malloc'd body the caller frees. */
struct agent_webhook_reply {
    unsigned int http_status;
    const char *content_type;
    char *body;
    size_t body_len;
};

/* Answers one AdmissionReview request body. Never fails for malformed input: the reply is then
 * HTTP 400 with a Status object, or (when request.uid is known) an AdmissionReview with
 * allowed=false and a status message. Returns 0, or -1 only when memory runs out. */
int agent_webhook_review(const struct agent_webhook_config *cfg, enum agent_webhook_scope scope,
                         const char *body, size_t len, struct agent_webhook_reply *reply);

/* The annotations of k8s-agent/annotations.h the webhook owns (NULL-terminated): it removes any
 * of them that the pod's creator set, then writes the ones it read. */
extern const char *const agent_webhook_fact_keys[];

/* Reads the facts for a pod being created in namespace ns (owner Job, JobSet, Namespace) into
 * annots (annotation key -> string); failed reads become *-error annotations and entries of
 * warnings. Returns 0, or -1 only when memory runs out. */
int agent_webhook_pod_facts(const struct agent_webhook_config *cfg, const char *ns,
                            const json_t *pod, json_t *annots, json_t *warnings);

/* Kubernetes API access for the facts (webhook_api.c): in-cluster credentials when
 * KUBERNETES_SERVICE_HOST is set (token and CA from sa_dir), else the kubeconfig file when given.
 * Fills cfg->api_get/api_arg; returns 0, 1 when no credentials are configured (no API), -1 when
 * they cannot be loaded (logged). */
int agent_webhook_api_open(const char *kubeconfig, const char *sa_dir,
                           struct agent_webhook_config *cfg);
void agent_webhook_api_close(struct agent_webhook_config *cfg);

/* The one review version the webhook speaks (admissionReviewVersions: [v1]) */
#define AGENT_WEBHOOK_REVIEW_API_VERSION "admission.k8s.io/v1"
#define AGENT_WEBHOOK_REVIEW_KIND        "AdmissionReview"

/* An AdmissionReview whose response has uid and allowed, and: when not allowed, a status of
 * code with message; patch (a JSONPatch array) and warnings, either may be NULL, both stolen.
 * 0, or -1 out of memory. */
int agent_webhook_review_reply(const char *uid, int allowed, int code, const char *message,
                               json_t *patch, json_t *warnings, struct agent_webhook_reply *reply);

/* Builds a Status reply (HTTP error with a message) without an AdmissionReview. */
int agent_webhook_error_reply(unsigned int http_status, const char *message,
                              struct agent_webhook_reply *reply);

/* JSON-pointer escaping of one reference token (RFC 6901: "~" -> "~0", "/" -> "~1").
 * Returns a malloc'd string or NULL when memory runs out. */
char *agent_webhook_pointer_escape(const char *token);

/* Standard base64 (RFC 4648, with padding, no line breaks). Returns a malloc'd string. */
char *agent_webhook_base64(const unsigned char *data, size_t len);

/* Returns nonzero when s is a Kubernetes resource quantity such as 50m, 64Mi or 1.5. */
int agent_webhook_quantity_valid(const char *s);

/* Certificate and key served by the HTTPS server, reloaded when the files change. */
struct agent_tls;

/* Loads the pair once; fails (returns NULL, error logged) when a file is missing, unreadable,
 * not PEM, or when the key does not belong to the certificate. */
struct agent_tls *agent_tls_open(const char *cert_path, const char *key_path);
/* Makes this pair the one served by the gnutls certificate callback (one per process). */
void agent_tls_activate(struct agent_tls *tls);
void agent_tls_close(struct agent_tls *tls);
/* The certificate callback handed to libmicrohttpd (MHD_OPTION_HTTPS_CERT_CALLBACK). */
gnutls_certificate_retrieve_function2 *agent_tls_callback(void);

/* What does the one CollectiveTopology that selects pod (its podSelector over the pod's labels,
 * its namespaceSelector over nslabels, the Namespace's labels; NULL: only
 * kubernetes.io/metadata.name) say in spec.nccl? AGENT_WEBHOOK_NCCL_KCOLL or _NATIVE (then
 * *pins is filled when pins is non-NULL); _NVIDIA (0) also when none or several select it or the
 * list cannot be read (then a warning says so). Without API reads: 0. */
int agent_webhook_topology_nccl(const struct agent_webhook_config *cfg, const char *ns,
                                const json_t *pod, const json_t *nslabels, json_t *warnings,
                                struct agent_webhook_nccl_pins *pins);

/* The pod's identity (webhook_identity.c): puts a pod that names no ServiceAccount (or
 * "default") on cfg->agent_service_account with automountServiceAccountToken false, removes the
 * ServiceAccount token volumes from its containers, and adds a projected token volume; appends
 * the sidecar's token mount and COLL_AGENT_IPC_ALLOW_UIDS (the uids the pod's containers run as)
 * to sidecar. Its JSONPatch operations go to ops before the sidecar's (they use the pod's
 * original indices). A pod that cannot be handled safely gets deny set; -1 = out of memory. */
int agent_webhook_identity(const struct agent_webhook_config *cfg, const json_t *pod, json_t *ops,
                           json_t *warnings, json_t *sidecar, char *deny, size_t denylen);

/* spec.nccl: native (webhook_nccl.c): the pins of a topology's spec. */
void agent_webhook_nccl_pins_read(const json_t *spec, struct agent_webhook_nccl_pins *pins);
/* The containers' env settings that contradict pins (NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME
 * naming another interface than the pinned one, NCCL_NET against the transport policy), one
 * "container C sets NAME=VALUE, ..." clause each, joined into out; returns their number. */
int agent_webhook_nccl_conflicts(const json_t *containers,
                                 const struct agent_webhook_nccl_pins *pins, char *out,
                                 size_t outlen);

#endif
