/*
 * Kubernetes API client of coll-agent: credentials (in-cluster or kubeconfig), requests with
 * deadlines and retries, watches, and the pod-level pipeline (facts, topology, rendezvous,
 * health) built on it.
 */
#ifndef AGENT_KUBE_H
#define AGENT_KUBE_H

#include "agent.h"

#include <stdatomic.h>

/* ---- credentials (kubeconfig.c) ---- */

typedef struct {
    char server[512];   /* https://host:port, no trailing slash */
    char ca_file[1024]; /* a file, or empty when ca_data is used */
    char *ca_data;      /* PEM bytes (certificate-authority-data), malloc'd */
    size_t ca_len;
    char token_file[1024]; /* re-read when it changes (service-account token rotation) */
    char *token;           /* current bearer token, malloc'd; NULL = none */
    char cert_file[1024];
    char key_file[1024];
    char *cert_data; /* client-certificate-data */
    size_t cert_len;
    char *key_data; /* client-key-data */
    size_t key_len;
    char namespace_[64]; /* from the service-account dir or the context; may be empty */
    int in_cluster;
} agent_kube_creds_t;

/* In-cluster: KUBERNETES_SERVICE_HOST/PORT and sa_dir (token, ca.crt, namespace). */
int agent_creds_in_cluster(const char *sa_dir, agent_kube_creds_t *out, char *err, size_t errlen);
/* Out of cluster: the current context of a kubeconfig file. */
int agent_creds_kubeconfig(const char *path, agent_kube_creds_t *out, char *err, size_t errlen);
void agent_creds_free(agent_kube_creds_t *c);
/* Re-read the token file if it changed; returns 1 when the token changed, 0 if not, -1 error. */
int agent_creds_refresh_token(agent_kube_creds_t *c);

/* ---- requests (kube_client.c) ---- */

typedef struct agent_kube agent_kube_t;

typedef struct {
    int request_timeout_ms; /* per attempt */
    int backoff_base_ms;
    int backoff_cap_ms;
    const char *user_agent;
} agent_kube_config_t;

typedef struct {
    long code;         /* HTTP status; 0 when no response arrived before the deadline */
    json_t *body;      /* parsed JSON body (may be NULL) */
    char reason[64];   /* Status.reason for errors ("Forbidden", "Conflict", ...) */
    char message[768]; /* Status.message, or the transport error */
    int attempts;
} agent_kube_resp_t;

int agent_kube_open(agent_kube_creds_t *creds, const agent_kube_config_t *cfg, agent_kube_t **out);
void agent_kube_close(agent_kube_t *k);
const agent_kube_creds_t *agent_kube_creds(const agent_kube_t *k);

/*
 * One API call, retried on 429 (honouring Retry-After), 5xx and transport errors with capped
 * exponential back-off and full jitter until deadline_ms; a 401 re-reads the token once.
 * body may be NULL; content_type defaults to application/json. Returns 0 when a final HTTP
 * response arrived (check resp->code), -1 when none did before the deadline.
 * The caller frees resp with agent_kube_resp_free.
 */
int agent_kube_request(agent_kube_t *k, const char *method, const char *path, const json_t *body,
                       const char *content_type, int64_t deadline_ms, agent_kube_resp_t *resp);
void agent_kube_resp_free(agent_kube_resp_t *r);
/*
 * Read one object with the patch verb only: an empty JSON merge patch changes nothing (the API
 * server writes nothing and keeps the resourceVersion) and answers with the object as it is. The
 * agent's role has no get on Communicators; this is how it learns the current state after a 409.
 * path may name the status subresource ("communicators/status: patch" is granted).
 */
int agent_kube_read_by_patch(agent_kube_t *k, const char *path, int64_t deadline_ms,
                             agent_kube_resp_t *resp);
/* URL-escape a query value into buf. */
void agent_kube_escape(const char *in, char *buf, size_t len);
/* Request counters (metrics). */
long agent_kube_request_count(const agent_kube_t *k);
long agent_kube_retry_count(const agent_kube_t *k);
long agent_kube_watch_count(const agent_kube_t *k);
/* For watch.c: a configured curl easy handle (TLS verification, credentials, deadline) for
 * GET url_path; *headers must be freed with curl_slist_free_all after the transfer. */
void *agent_kube_easy(agent_kube_t *k, const char *url_path, long timeout_ms, void **headers);
void agent_kube_count_watch(agent_kube_t *k);
/* Re-read a rotated token now (after a 401 on a watch); 1 if it changed. */
int agent_kube_refresh_token(agent_kube_t *k);
/* Sleep for the capped, jittered back-off of attempt n, never past deadline_ms. */
void agent_kube_backoff(agent_kube_t *k, int attempt, int64_t deadline_ms);

/* ---- watch (watch.c) ---- */

/* Called for every ADDED / MODIFIED / DELETED object (synthetic ADDED for the objects that exist
 * when a watch starts without a resourceVersion). Return 0 to continue, 1 to stop watching. */
typedef int (*agent_watch_cb)(void *arg, const char *type, json_t *object);

/*
 * Watch the objects of collection path (".../communicators") selected by field_selector
 * (may be NULL) with the watch verb only (no list, no get): the first watch has no
 * resourceVersion, so the server starts with synthetic ADDED events for the current state; a
 * disconnect resumes from the last resourceVersion seen (objects or bookmarks); 410 Gone watches
 * again without one. Returns 0 when cb stopped it, -1 on a fatal API error (401/403/404;
 * resp_out's code and message say which) or at deadline_ms.
 */
int agent_kube_watch(agent_kube_t *k, const char *path, const char *field_selector,
                     int64_t deadline_ms, agent_watch_cb cb, void *arg,
                     agent_kube_resp_t *resp_out);
/* As agent_kube_watch, the objects also selected by label_selector (may be NULL): one that
 * comes to match it arrives as ADDED. A non-zero *cancel (cancel may be NULL) ends the watch
 * within about a second (-1), also while its stream is idle. */
int agent_kube_watch_labels(agent_kube_t *k, const char *path, const char *field_selector,
                            const char *label_selector, const atomic_int *cancel,
                            int64_t deadline_ms, agent_watch_cb cb, void *arg,
                            agent_kube_resp_t *resp_out);

/* ---- pod pipeline (pod_facts.c, topology.c, rendezvous.c, health.c) ---- */

typedef struct {
    json_t *pod; /* own Pod object */
    char pod_uid[64];
    char job_kind[64]; /* Job | JobSet | PyTorchJob | "" */
    char job_api_version[64];
    char job_name[254];
    char job_uid[64];
    char owner_name[254];     /* the name of the owner job_uid belongs to (the kcoll.io/job
                               * label may rename the job, never its owner) */
    char owner_job_name[254]; /* the batch/v1 Job owning the pod (JobSet child), if any */
    int rank_known;
    int nranks;              /* 0 = learn it from the Communicator */
    int completion_index;    /* Indexed Job index or -1 */
    int jobset_global_index; /* or -1 */
    json_t *network_status;  /* parsed Multus annotation (array) or NULL */
    char topology_key[320];  /* the selecting topology's spec.topologyKey node label ("" = none) */
    char ranks_source[240];  /* where ranksPerPod came from (f->local_size), for messages */
} agent_pod_info_t;

/* Read the pod, its owner and rank hints (1 GET). */
int agent_pod_read(agent_ctx_t *ctx, int64_t deadline, agent_pod_info_t *pi, agent_facts_t *f,
                   agent_condition_t *cond);
void agent_pod_info_free(agent_pod_info_t *pi);
/* World size (and a JobSet member's rank) from the webhook's annotations on the pod
 * (annotations.h); no API request. */
int agent_pod_world_size(agent_pod_info_t *pi, agent_facts_t *f, agent_condition_t *cond);

/* Find the one CollectiveTopology selecting the pod and apply its pins to f; resolve the pinned
 * network to an interface and address in this pod. */
int agent_topology_resolve(agent_ctx_t *ctx, int64_t deadline, agent_pod_info_t *pi,
                           agent_facts_t *f, agent_condition_t *cond);
/* Label selector ({matchLabels, matchExpressions}) against a labels object; -1 if invalid. */
int agent_selector_matches(const json_t *selector, const json_t *labels, char *err, size_t errlen);

/* Rank 0 creates the Communicator, others watch it; fills root endpoint and secret. */
int agent_rendezvous(agent_ctx_t *ctx, int64_t deadline, agent_pod_info_t *pi, agent_facts_t *f,
                     agent_condition_t *cond);

/* The job secret's Secret (job_secret.c): "kcoll-JOB", checked as a DNS-1123 name (-1 when the
 * job's name does not make one). Rank 0 creates it owned by the job with f->secret (an existing
 * one of this job is adopted: f->secret becomes its secret; one of an earlier job is waited out
 * until the garbage collector deletes it); the other ranks read the one the Communicator names,
 * which must be owned by owner_uid (the Communicator's owner). The secret is never logged. */
int agent_secret_name(const char *job, char *out, size_t len);
int agent_secret_create(agent_ctx_t *ctx, int64_t deadline, const agent_pod_info_t *pi,
                        agent_facts_t *f, agent_condition_t *cond);
int agent_secret_read(agent_ctx_t *ctx, int64_t deadline, const char *secret_name,
                      const char *owner_uid, agent_facts_t *f, agent_condition_t *cond);

/* The topology group of the pod's node (its topology_key label; one GET of the Node) into
 * f->group; never fatal: problems become warning conditions (node_group.c). */
void agent_node_group(agent_ctx_t *ctx, int64_t deadline, const char *topology_key,
                      agent_facts_t *f);

/* Map an API failure to a named condition (Unauthorized, Forbidden, APIUnavailable, ...). */
void agent_condition_from_resp(agent_condition_t *cond, const char *what,
                               const agent_kube_resp_t *r);

/* The whole kube-mode pipeline; sets READY or FAILED. */
int agent_kube_run(agent_ctx_t *ctx);

/* ---- Events (events.c) ---- */

/* Events keyed by object and reason: a repeat (from this agent or another) bumps count and
 * lastTimestamp of one Event. Queued; sent by the health writer thread; what the API server
 * does not take is retried with back-off within a bound (64 queued, 5 minutes each), the rest
 * dropped (counted, logged once). */
typedef struct agent_events agent_events_t;
agent_events_t *agent_events_new(agent_ctx_t *ctx);
void agent_events_free(agent_events_t *q);
/* Queue one occurrence (any thread; never blocks on the API). uid may be "" for a Pod: it is
 * read before the Event is sent. */
void agent_events_add(agent_events_t *q, const char *type, const char *reason, const char *message,
                      const char *kind, const char *api, const char *name, const char *uid);
/* No final answer to a request (rc of agent_kube_request, then r): none before the deadline,
 * 5xx or 429 past it. Worth another try later, unlike 4xx. */
int agent_kube_unanswered(int rc, const agent_kube_resp_t *r);
/* Milliseconds until a queued Event is due (0: now), -1 when none is queued. */
int64_t agent_events_next_ms(agent_events_t *q);
/* Send every Event that is due (the writer thread). */
void agent_events_flush(agent_events_t *q);

/* ---- health (health.c) ---- */

typedef struct agent_health agent_health_t;
int agent_health_start(agent_ctx_t *ctx, agent_health_t **out);
void agent_health_stop(agent_health_t *h);
/* A report from the library (a parsed "report" message; its strings live during the call). */
void agent_health_report(agent_health_t *h, const colli_proto_report_t *report);
/* The "peer" question of a local rank (proto/peer_ipc.h: does Kubernetes say the ranks it waits
 * on ended?), answered at once from what was last read; pods not read within a few seconds are
 * read again by the writer thread (cause.c). NULL when the question is malformed. */
json_t *agent_peer_question(agent_health_t *h, const json_t *req);
/* Emit a pod Event (Warning or Normal) with reason and message; best effort, bounded. */
void agent_health_event(agent_ctx_t *ctx, const char *type, const char *reason,
                        const char *message);
/* The Communicator as the API returned it on create (saves a GET before the first patch). */
void agent_health_set_object(agent_health_t *h, const json_t *comm);
/* Set the Communicator status phase from the agent itself (e.g. Bootstrapping). */
void agent_health_set_phase(agent_health_t *h, const char *phase);
/* Phase Ready with ready_ranks (NVIDIA NCCL's processes all started; a Failed phase stays). */
void agent_health_set_ready(agent_health_t *h, int ready_ranks);
/* spec.nccl: native: every pod's NCCL processes started again after the job's failure (restarted
 * in place, or replaced): phase Ready over the Failed one, Healthy True with reason Restarted and
 * msg, the earlier unhealthy members dropped (lastError, unhealthyCount and the Events stay). */
void agent_health_recover(agent_health_t *h, int ready_ranks, const char *msg);
/* This pod's agent failed before its facts were ready (cond: a network attachment missing, a
 * topology it cannot use, ...): once rank 0 has published the job's Communicator (owned by
 * job_uid), its status names this pod's rank, pod, node and the cause (NetworkConsistent or
 * Healthy False with the condition's type as reason), with one Event on it. In the background,
 * bounded by deadline_ms. */
void agent_health_member_failed(agent_ctx_t *ctx, const agent_facts_t *f, const char *job_uid,
                                const agent_condition_t *cond, int64_t deadline_ms);
/* Prometheus text for /metrics into a malloc'd buffer. */
char *agent_health_metrics(agent_ctx_t *ctx);

/* HTTP endpoints (http.c): /healthz, /readyz, /metrics. */
typedef struct agent_http agent_http_t;
int agent_http_start(agent_ctx_t *ctx, agent_http_t **out);
void agent_http_stop(agent_http_t *h);

#endif /* AGENT_KUBE_H */
