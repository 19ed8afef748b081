/* coll-agent internals shared by health.c (the library's reports, the writer thread) and
 * status.c (what is merged into the Communicator status and how it is written). */
#ifndef AGENT_HEALTH_STATE_H
#define AGENT_HEALTH_STATE_H

#include "kube.h"

#define MAX_MSG         512
#define MAX_TRANSPORT   129 /* status.transport: at most 128 characters */
#define NCOND           COLLI_PROTO_NCOND
#define LINGER_MS       500  /* reports of one failure from a pod's ranks: one status patch */
#define BACKUPS         2    /* agents after the designated writer that check it wrote */
#define BACKUP_DELAY_MS 3000 /* ... each this much later than the one before it */

typedef struct {
    char status[8]; /* "" = no update */
    char reason[64];
    char message[MAX_MSG];
} cond_t;

typedef struct {
    int rank;
    char pod[254], node[254], reason[64], message[MAX_MSG];
} member_t;

#define CAUSE_TASKS 4   /* blamed pods whose end the agent looks into at once */
#define MAX_CAUSE   768 /* a cause's text (the CRD allows 1024) */

/* Why a blamed pod's rank ended, as its Pod or Node says (cause.c): for members and lastError */
typedef struct {
    char pod[254];
    char text[MAX_CAUSE];
} cause_t;

/* A pod a rank of this pod waits on without progress: does Kubernetes say its rank ended?
 * (the "peer" question, cause.c; under mu) */
#define PEER_WATCH     8     /* pods watched at once (the least recently asked goes first) */
#define PEER_FRESH_MS  5000  /* an answer older than this is read again when asked */
#define PEER_FORGET_MS 60000 /* a pod not asked about for this long is forgotten */
typedef struct {
    int used, looking; /* looking: a read is due (due_ms) or under way */
    int rank, node_denied, ended;
    char pod[254], node[254];
    char cause[MAX_CAUSE]; /* when ended */
    int64_t asked_ms, looked_ms, due_ms;
} peer_watch_t;

/* A blamed pod to read (writer thread; under mu) */
typedef struct {
    int active, done; /* looking; looked (found or given up) */
    int silent;       /* a peer question's read (agent_pod_cause's silent) */
    int rank, step, node_denied;
    char pod[254], node[254];
    int64_t since_s;  /* a container end before this (epoch s) belongs to an earlier failure */
    int64_t first_ms; /* when the failure was written */
    int64_t due_ms;   /* the next look */
} cause_task_t;

/* What the writer is to merge into the status (under mu until it is taken). */
typedef struct {
    int dirty;
    char phase[16];
    int ready_ranks;               /* -1 = no update */
    char transport[MAX_TRANSPORT]; /* rank 0's transports ("" = no update) */
    int placement;                 /* write agent_health.placement */
    cond_t conds[NCOND];
    int has_error;
    member_t err;       /* lastError; err.rank -1: blamed on no rank */
    int err_waited;     /* the error of a rank that waited on others (a bootstrap timeout, another
                         * rank's failure relayed): it does not replace a lastError naming a cause */
    char err_since[40]; /* ... written since then (RFC 3339; "" = since this agent started) */
    member_t members[AGENT_MAX_UNHEALTHY]; /* newly unhealthy members */
    int nmembers;
    int recovered;  /* every rank started again after the failure (spec.nccl: native): phase
                     * Ready over a Failed one, the earlier unhealthy members dropped */
    int64_t due_ms; /* not before (0 = now) */
    int check;      /* a backup writer: write only if the designated one did not */
    int check_rank; /* ... the failure it looks for (-1: any error of this bootstrap) */
    /* Events a backup raises only if it writes */
    int has_ev;
    char ev_reason[64], ev_msg[MAX_MSG], ev_pod[254], ev_pod_uid[64];
    cause_t causes[CAUSE_TASKS]; /* why blamed members ended (merged into them by pod) */
    int ncauses;
    int64_t first_ms; /* a write that got no answer: when it was first tried, and how often */
    int tries;
} update_t;

typedef struct {
    int active;
    char job[254], job_uid[64];
    int64_t deadline;
    member_t m;
    int cond; /* COLLI_PROTO_COND_* set False with m.reason */
} member_task_t;

struct agent_health {
    agent_ctx_t *ctx;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    update_t pend;
    int lib_ready; /* this pod's library reported Ready: later failures are collective ones */
    member_task_t task;
    agent_events_t *events;
    json_t *cached;   /* last Communicator seen (writer thread only) */
    json_t *seed;     /* the Communicator as created (under mu): saves the first GET */
    char since[40];   /* RFC 3339 start of this agent: later failures belong to its bootstrap */
    char written[16]; /* the phase of the last status patch, sent or being sent (under mu) */
    /* {placement: [...], placementOmitted: n}: where the ranks run, from rank 0's Ready report
     * (under mu; NULL = none) */
    json_t *placement;
    cause_task_t causes[CAUSE_TASKS]; /* blamed pods to read (under mu) */
    peer_watch_t peers[PEER_WATCH];   /* pods the local ranks wait on (under mu) */
    int64_t cause_since_s;            /* epoch s of this library's last Ready (else the start) */
};

/* ---- status.c ---- */

/* Empty an update (no phase, ready ranks or error). */
void agent_status_reset(update_t *u);
/* Why pod's rank ended, merged into its member and lastError by the next write (one per pod, at
 * most CAUSE_TASKS pods; marks the update dirty). */
void agent_status_add_cause(update_t *u, const char *pod, const char *text);
/* Is rank among the update's newly unhealthy members? */
int agent_status_has_member(const update_t *u, json_int_t rank);
/* Write the pending update (the writer thread): merged into the Communicator's current status,
 * resourceVersion-preconditioned, a conflict re-read and merged again; kept for a retry when the
 * API server does not answer. */
void agent_status_write(agent_health_t *h);
/* The Events of a failure, raised by the agent that writes it: one on the Communicator, one on
 * the blamed pod (pod_uid "" for another pod's). */
void agent_status_failure_events(agent_health_t *h, const char *reason, const char *msg,
                                 const char *pod, const char *pod_uid);
/* The writer's part of agent_health_member_failed: wait for the Communicator, queue the update. */
void agent_status_member_task(agent_health_t *h, member_task_t *t);

/* ---- cause.c ---- */

/* What a Pod says of why its rank ended (pod NULL: it does not exist). since_s: a container's
 * earlier end belongs to an earlier failure. silent: the rank went silent, it was not seen to
 * close its connections; a container's end then proves nothing (a process that exits closes
 * them: the one that ended is another, a helper that completed), only the pod's own end does.
 * 1 the cause is in out (its node's loss included: agent_node_lost), 2 the pod runs but is not
 * Ready (out says so): its Node may say more, 0 nothing yet. */
int agent_pod_cause(const char *pod_name, const json_t *pod, int64_t since_s, int silent, char *out,
                    size_t len);
/* Did this agent's own pod end under its ranks (spec.nccl: native, nccl_watch.c)? 1 when one of
 * its containers ended after since_s with a non-zero exit code (a signal, an OOMKill, an error;
 * exit 0 everywhere is the job's normal end; where some containers ask for nvidia.com/gpu, only
 * theirs: a failing helper is not the training) or the pod is being deleted, evicted or disrupted:
 * out says what and why, key (for telling one end from the next) which end it is. Else 0. */
int agent_own_end(const char *pod_name, const json_t *pod, int64_t since_s, char *out, size_t len,
                  char *key, size_t keylen);
/* Did pod's node stop reporting? 1 when the node controller marked the pod not Ready while its
 * containers ran (Ready=False, ContainersReady=True: the kubelet never writes that pair, but for
 * a readiness gate): out says so, with the mark's time. Else 0. agent_pod_cause says it too. */
int agent_node_lost(const char *pod_name, const json_t *pod, char *out, size_t len);
/* Did another pod of the job leave while it ran (spec.nccl: native, the ring of nccl_ring.c)?
 * 1 when it was deleted (deleted: the watch's DELETED, pod its last state), or is being deleted
 * or disrupted (a DisruptionTarget condition: the pod garbage collector's, an eviction's), and
 * had not ended (phase neither Failed nor Succeeded): out says how. Else 0. */
int agent_pod_leaving(const char *pod_name, const json_t *pod, int deleted, char *out, size_t len);
/* ---- nccl_pods.c: status.ncclPods of a Communicator (spec.nccl: native) ---- */

#define AGENT_NCCL_REFUSED "NcclVersionMismatch" /* a member refused at its NCCL init */

/* Pod rank q's record of this job (stamp): 1 with its pod's name (a DNS-1123 name) and node ("?"
 * when none or not a name), else 0. */
int agent_nccl_pods_entry(const json_t *comm, const char *stamp, int q, char *pod, size_t podlen,
                          char *node, size_t nodelen);
/* When pod rank q's NCCL processes of this job last all passed their init (epoch s), -1 none. */
int64_t agent_nccl_pods_since(const json_t *comm, const char *stamp, int q);
/* Is pod an unhealthy member of the Communicator (written ended, refused, or failed)? */
int agent_nccl_pods_member(const json_t *comm, const char *pod);
/* Is every unhealthy member (at least one) a pod refused at its init for its NCCL version? Then
 * only those pods must start again for the job to run: the others wait for them in NCCL's init. */
int agent_nccl_pods_refused_only(const json_t *comm);
/* How many pods of this job recorded a start at or after t (epoch s, slack_s for the clocks of two
 * nodes; t -1: any start), or need not start again (agent_nccl_pods_refused_only, not refused). */
int agent_nccl_pods_started(const json_t *comm, const char *stamp, int64_t t, int slack_s);

/* What a Node says: 1 when it is not Ready (out says since when and why), else 0. */
int agent_node_cause(const char *node_name, const json_t *node, char *out, size_t len);
/* After a failure blamed on m was written: read its pod over the next minute (another pod's,
 * a failure of a kind that may mean it ended). */
void agent_cause_queue(agent_health_t *h, const member_t *m);
/* ms until the next look is due (0 now), -1 none (under mu). */
int64_t agent_cause_next_ms(agent_health_t *h);
/* The looks that are due (writer thread, mu not held): a cause found is queued for the status
 * and raised as the Event KcollFailureCause on the Communicator. */
void agent_cause_run(agent_health_t *h);

#endif /* AGENT_HEALTH_STATE_H */
