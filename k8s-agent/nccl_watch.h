/*
 * spec.nccl: native, a rank that ends: what the agent's rank-end watches share (nccl_watch.c:
 * the own pod's and the Communicator's; nccl_ring.c: the next pod's). Internal to the agent.
 */
#ifndef KCOLL_AGENT_NCCL_WATCH_H
#define KCOLL_AGENT_NCCL_WATCH_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "agent.h"
#include "health_state.h"
#include "nccl_ipc.h"

#define SLICE_MS         600000 /* one watch call (resumed from its resourceVersion) */
#define LABEL_TIMEOUT_MS 5000
#define MAX_ENDED        8     /* ended pods remembered (the first ones: the cause comes first) */
#define REFUSED_MAX_MS   30000 /* a watch the API server refuses: asked again at most this late */
#define THREADS          3     /* the own pod's watch, the Communicator's, the next pod's */
#define CLOCK_SLACK_S    2     /* an end this close before an init may be that init's peer's */

typedef struct {
    colli_proto_nccl_ended_t e;
    char time[40]; /* the member's time (with the pod: one end) */
    int64_t end_s; /* epoch s of the end (the member's time; else when this agent learned it) */
    int pod_rank;  /* the ended pod's */
    int back;      /* that pod rank started NCCL again after the end (status.ncclPods) */
} ended_t;

/* A pod whose ranks ended, as the Communicator and its Events name it. */
typedef struct {
    int pod_rank;
    char pod[254], node[254];
    char uid[64]; /* its uid for its Event ("" for another pod's: found by name) */
} whose_t;

struct agent_nccl_watch {
    agent_ctx_t *ctx;
    pthread_mutex_t mu;
    int closed;        /* the agent stops: the threads report nothing more (under mu) */
    int64_t since_s;   /* the pod's first NCCL init (epoch s): an earlier end is not this job's */
    int64_t gen_s;     /* its latest: all of its ranks (re)started NCCL (epoch s; under mu) */
    int ngen;          /* how often they did (under mu) */
    char stamp[17];    /* this job's (its secret, hashed) */
    char own_key[160]; /* the own end last reported ("" none; under mu) */
    ended_t ended[MAX_ENDED];
    int nended;
    atomic_int cancel;                               /* the agent stops: the watches end */
    unsigned char accepted[AGENT_MAX_RANKS_PER_POD]; /* local ranks whose NCCL init passed */
    int naccepted;                                   /* since the last record (under mu) */
    char next_key[MAX_CAUSE]; /* the next pod's loss last reported: its words (under mu) */
    whose_t ring_hint;        /* the next pod, as the own record's answer named it (under mu) */
    pthread_t threads[THREADS];
    int started[THREADS];
};

/* The agent stops: the threads report nothing more. */
int agent_nccl_closed(agent_nccl_watch_t *w);
/* Interruptible sleep: 0 after ms, 1 when the agent stops meanwhile. */
int agent_nccl_nap(agent_nccl_watch_t *w, int64_t ms);
/* A watch the API server refused (not 410 or 429, which the watch handles). */
int agent_nccl_refused(int rc, const agent_kube_resp_t *r);
/* After a watch call: 1 when the API server refused it, said once per refusal (log id: "watching
 * WHAT: HTTP ...; watched again after 1, 2, 4 ... s, then every 30 s; until then UNTIL") with
 * the wait before asking again in *wait (ms, grown each time); else 0, *wait reset. */
int agent_nccl_refusal(int rc, const agent_kube_resp_t *r, int64_t *wait, const char *id,
                       const char *what, const char *until);
/* p's ranks ended (cause says how): the Communicator's status, Events and label, each end once
 * (key, kept in last_key); an end after another rank's is a consequence (nccl_watch.c). */
void agent_nccl_report_end(agent_nccl_watch_t *w, const whose_t *p, char *last_key, size_t keylen,
                           const char *key, const char *verb, const char *cause);
/* Pod rank q's record in the Communicator's status.ncclPods (this job's, not this pod), into
 * out: 1 found (nccl_ring.c). */
int agent_nccl_ring_entry(const agent_nccl_watch_t *w, const json_t *comm, int q, whose_t *out);
/* The next pod's watch (a thread; arg: the agent_nccl_watch_t), nccl_ring.c. */
void *agent_nccl_ring(void *arg);

#endif
