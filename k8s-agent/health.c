/* Communicator health: the library's reports become a bounded status (phase, conditions,
 * readyRanks, unhealthy members, lastError) written with merge PATCH of the status subresource
 * (resourceVersion precondition, 409 → re-read and retry), and pod Events for failures. A writer
 * thread does all API calls so that the library's report is acknowledged at once. */
#define _GNU_SOURCE
#include "kube.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_MSG            512
#define MAX_TRANSPORT      129 /* status.transport: at most 128 characters */
#define NCOND              COLLI_PROTO_NCOND
#define MAX_PATCH_ATTEMPTS 12
#define LINGER_MS          200   /* reports of one failure from a pod's ranks: one status patch */
#define BACKUPS            2     /* agents after the designated writer that check it wrote */
#define BACKUP_DELAY_MS    3000  /* ... each this much later than the one before it */
#define MEMBER_WATCH_MS    10000 /* a failed agent waits for the Communicator in slices */

typedef struct {
    char status[8]; /* "" = no update */
    char reason[64];
    char message[MAX_MSG];
} cond_t;

typedef struct {
    int rank;
    char pod[254], node[254], reason[64], message[MAX_MSG];
} member_t;

/* What the writer is to merge into the status (under mu until it is taken). */
typedef struct {
    int dirty;
    char phase[16];
    int ready_ranks;               /* -1 = no update */
    char transport[MAX_TRANSPORT]; /* rank 0's transports ("" = no update) */
    cond_t conds[NCOND];
    int has_error;
    member_t err;   /* lastError; err.rank -1: blamed on no rank */
    int err_waited; /* the error of a rank that waited on others (a bootstrap timeout, another
                     * rank's failure relayed): it does not replace a lastError naming a cause */
    member_t members[AGENT_MAX_UNHEALTHY]; /* newly unhealthy members */
    int nmembers;
    int64_t due_ms; /* not before (0 = now) */
    int check;      /* a backup writer: write only if the designated one did not */
    int check_rank; /* ... the failure it looks for (-1: any error of this bootstrap) */
    /* Events a backup raises only if it writes */
    int has_ev;
    char ev_reason[64], ev_msg[MAX_MSG], ev_pod[254], ev_pod_uid[64];
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
};

static void pend_reset(update_t *u)
{
    memset(u, 0, sizeof(*u));
    u->ready_ranks = -1;
    u->check_rank = -1;
}

static int transport_ok(const char *t)
{
    size_t n = strlen(t);
    if (n == 0 || n >= MAX_TRANSPORT)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (t[i] < 0x20 || t[i] > 0x7e)
            return 0;
    return 1;
}

static void take_string(char *dst, size_t len, const char *v)
{
    snprintf(dst, len, "%s", v ? v : "");
}

/* Several ranks per pod: a member's entry names its local rank (rank = pod rank x ranksPerPod +
 * local rank). */
static json_t *with_local(agent_health_t *h, json_t *o, int rank)
{
    int per = h->ctx->facts.local_size;
    if (o && per > 1 && rank >= 0)
        json_object_set_new(o, "localRank", json_integer(rank % per));
    return o;
}

static json_t *member_json(agent_health_t *h, const member_t *m, const char *now)
{
    json_t *o = json_pack("{si ss ss}", "rank", m->rank, "message", m->message, "time", now);
    if (o && m->pod[0])
        json_object_set_new(o, "pod", json_string(m->pod));
    if (o && m->node[0])
        json_object_set_new(o, "node", json_string(m->node));
    if (o && m->reason[0])
        json_object_set_new(o, "reason", json_string(m->reason));
    return with_local(h, o, m->rank);
}

static int pending_member(const update_t *u, json_int_t rank)
{
    for (int i = 0; i < u->nmembers; i++)
        if (u->members[i].rank == rank)
            return 1;
    return 0;
}

/* Build the merged status from the server's current one and the pending update. */
static json_t *merged_status(agent_health_t *h, const json_t *cur_status, const update_t *u)
{
    json_t *st = json_object(), *cur_conds = json_object_get(cur_status, "conditions");
    json_t *conditions = json_array(), *members = json_array(), *cur_members;
    json_t *cur_last = json_object_get(cur_status, "lastError");
    const char *cur_phase = json_string_value(json_object_get(cur_status, "phase"));
    const char *phase = u->phase;
    char now[40];
    long count = (long)json_integer_value(json_object_get(cur_status, "unhealthyCount"));
    int added = 0;
    size_t i;
    json_t *it;

    agent_rfc3339_now(now, sizeof(now));
    if (phase[0]) {
        /* Failed is sticky until a new bootstrap (Bootstrapping) starts. The root says
         * Bootstrapping once its rendezvous is done, when a rank of this very bootstrap may have
         * failed already (a version pin fails at once): a failure stamped after this agent
         * started is this bootstrap's, and stays. (A new job's bootstrap clears the status.) */
        const char *err_time = json_string_value(json_object_get(cur_last, "time"));
        if (cur_phase && strcmp(cur_phase, "Failed") == 0 &&
            (strcmp(phase, "Ready") == 0 || strcmp(phase, "Degraded") == 0 ||
             (strcmp(phase, "Bootstrapping") == 0 && err_time && strcmp(err_time, h->since) >= 0)))
            phase = "Failed";
        json_object_set_new(st, "phase", json_string(phase));
    }
    if (u->ready_ranks >= 0)
        json_object_set_new(st, "readyRanks", json_integer(u->ready_ranks));
    if (u->transport[0])
        json_object_set_new(st, "transport", json_string(u->transport));
    for (int c = 0; c < NCOND; c++) {
        json_t *old = NULL;
        json_array_foreach(cur_conds, i, it)
        {
            const char *t = json_string_value(json_object_get(it, "type"));
            if (t && strcmp(t, colli_proto_cond_name((colli_proto_cond_t)c)) == 0)
                old = it;
        }
        const cond_t *nc = &u->conds[c];
        if (nc->status[0]) {
            const char *ots = json_string_value(json_object_get(old, "status"));
            const char *olt = json_string_value(json_object_get(old, "lastTransitionTime"));
            json_array_append_new(
                conditions,
                json_pack("{ss ss ss ss ss}", "type", colli_proto_cond_name((colli_proto_cond_t)c),
                          "status", nc->status, "reason", nc->reason[0] ? nc->reason : nc->status,
                          "message", nc->message, "lastTransitionTime",
                          (ots && olt && strcmp(ots, nc->status) == 0) ? olt : now));
        } else if (old) {
            json_array_append(conditions, old);
        }
    }
    json_object_set_new(st, "conditions", conditions);
    cur_members = json_object_get(cur_status, "unhealthyMembers");
    json_array_foreach(cur_members, i, it)
    {
        json_t *r = json_object_get(it, "rank");
        if (json_is_integer(r) && pending_member(u, json_integer_value(r)))
            continue; /* replaced below, with its newest facts */
        if (json_array_size(members) < AGENT_MAX_UNHEALTHY)
            json_array_append(members, it);
    }
    for (int m = 0; m < u->nmembers; m++) {
        int listed = 0;
        json_array_foreach(cur_members, i, it)
        {
            json_t *r = json_object_get(it, "rank");
            if (json_is_integer(r) && json_integer_value(r) == u->members[m].rank)
                listed = 1;
        }
        if (json_array_size(members) < AGENT_MAX_UNHEALTHY)
            json_array_append_new(members, member_json(h, &u->members[m], now));
        if (!listed) {
            count++;
            added++;
        }
    }
    if (added && u->ready_ranks < 0) {
        /* a member newly unhealthy is no longer a ready rank */
        json_t *cr = json_object_get(cur_status, "readyRanks");
        if (json_is_integer(cr) && json_integer_value(cr) > 0)
            json_object_set_new(
                st, "readyRanks",
                json_integer(json_integer_value(cr) > added ? json_integer_value(cr) - added : 0));
    }
    if (count < (long)json_array_size(members))
        count = (long)json_array_size(members);
    json_object_set_new(st, "unhealthyMembers", members);
    json_object_set_new(st, "unhealthyCount", json_integer(count));
    /* A rank that only waited on others (its bootstrap timed out, another rank's failure was
     * relayed to it) does not hide the cause a member of this bootstrap already wrote. */
    const char *last_time = json_string_value(json_object_get(cur_last, "time"));
    json_t *last_rank = json_object_get(cur_last, "rank");
    int keep_cause = u->err_waited && json_is_integer(last_rank) &&
                     json_integer_value(last_rank) >= 0 && last_time &&
                     strcmp(last_time, h->since) >= 0;
    if (u->has_error && !keep_cause)
        json_object_set_new(st, "lastError", member_json(h, &u->err, now));
    else if (cur_last)
        json_object_set(st, "lastError", cur_last);
    return st;
}

/* A backup writer's question: did the designated writer record this failure already? */
static int recorded(agent_health_t *h, const json_t *cur_status, int rank)
{
    const json_t *last = json_object_get(cur_status, "lastError");
    const char *t = json_string_value(json_object_get(last, "time"));
    size_t i;
    json_t *it;
    if (rank < 0)
        return t && strcmp(t, h->since) >= 0;
    json_array_foreach(json_object_get(cur_status, "unhealthyMembers"), i, it)
    {
        const char *mt = json_string_value(json_object_get(it, "time"));
        json_t *r = json_object_get(it, "rank");
        if (json_is_integer(r) && json_integer_value(r) == rank && mt && strcmp(mt, h->since) >= 0)
            return 1;
    }
    return 0;
}

/* The Events of a failure, raised by the agent that writes it: one on the Communicator and one
 * on the blamed pod (uid "" for another pod's: events.c reads it). */
static void failure_events(agent_health_t *h, const char *reason, const char *msg, const char *pod,
                           const char *pod_uid)
{
    agent_ctx_t *ctx = h->ctx;
    if (ctx->comm_uid[0])
        agent_events_add(h->events, "Warning", reason, msg, "Communicator", "kcoll.io/v1alpha1",
                         ctx->comm_name, ctx->comm_uid);
    if (pod && pod[0])
        agent_events_add(h->events, "Warning", reason, msg, "Pod", "v1", pod, pod_uid);
}

static void write_status(agent_health_t *h)
{
    agent_ctx_t *ctx = h->ctx;
    char path[800], spath[820];
    update_t *u = malloc(sizeof(*u));
    int64_t deadline = agent_now_ms() + 30000;

    if (!u)
        return;
    pthread_mutex_lock(&h->mu);
    *u = h->pend;
    pend_reset(&h->pend);
    if (u->phase[0])
        snprintf(h->written, sizeof(h->written), "%s", u->phase);
    if (h->seed && !h->cached) {
        h->cached = h->seed;
        h->seed = NULL;
    }
    pthread_mutex_unlock(&h->mu);

    snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators/%s",
             ctx->facts.ns, ctx->comm_name);
    snprintf(spath, sizeof(spath), "%s/status", path);
    if (u->check) { /* look at the object as it is now, not as this agent last wrote it */
        json_decref(h->cached);
        h->cached = NULL;
    }
    for (int attempt = 0; attempt < MAX_PATCH_ATTEMPTS && agent_remaining_ms(deadline) > 0;
         attempt++) {
        agent_kube_resp_t r;
        json_t *patch, *st;
        const char *rv;
        if (!h->cached) {
            /* re-read after a conflict with an empty merge patch of the status subresource
             * (the agent has patch, not get, on Communicators) */
            if (agent_kube_read_by_patch(ctx->kube, spath, deadline, &r) != 0 || r.code != 200) {
                agent_warn("AGENT-STATUS-FAIL", "reading Communicator %s: HTTP %ld %s",
                           ctx->comm_name, r.code, r.message);
                agent_kube_resp_free(&r);
                break;
            }
            h->cached = r.body;
        }
        if (u->check) {
            u->check = 0;
            if (recorded(h, json_object_get(h->cached, "status"), u->check_rank)) {
                agent_info("AGENT-STATUS-WRITTEN",
                           "Communicator %s already records the failure of %s%d: not written "
                           "again",
                           ctx->comm_name, u->check_rank < 0 ? "this bootstrap, rank " : "rank ",
                           u->check_rank);
                free(u);
                return;
            }
            agent_info("AGENT-STATUS-BACKUP",
                       "Communicator %s does not record the failure yet: this agent writes it",
                       ctx->comm_name);
            if (u->has_ev)
                failure_events(h, u->ev_reason, u->ev_msg, u->ev_pod, u->ev_pod_uid);
        }
        rv = json_string_value(agent_json_path(h->cached, "metadata.resourceVersion"));
        st = merged_status(h, json_object_get(h->cached, "status"), u);
        patch = json_pack("{s{ss} so}", "metadata", "resourceVersion", rv ? rv : "", "status", st);
        if (agent_kube_request(ctx->kube, "PATCH", spath, patch, "application/merge-patch+json",
                               deadline, &r) != 0) {
            agent_warn("AGENT-STATUS-FAIL", "patching Communicator %s status: %s", ctx->comm_name,
                       r.message);
            json_decref(patch);
            agent_kube_resp_free(&r);
            break;
        }
        json_decref(patch);
        ctx->metrics.status_patches++;
        json_decref(h->cached);
        h->cached = NULL;
        if (r.code == 200) {
            h->cached = r.body;
            agent_info("AGENT-STATUS-PATCHED", "Communicator %s status: phase=%s", ctx->comm_name,
                       u->phase[0] ? u->phase : "(unchanged)");
            free(u);
            return;
        }
        if (r.code != 409) {
            agent_warn("AGENT-STATUS-FAIL", "patching Communicator %s status: HTTP %ld %s",
                       ctx->comm_name, r.code, r.message);
            agent_kube_resp_free(&r);
            break;
        }
        /* another writer got there first: read the object again, merge again, after a
         * jittered back-off (bounded: MAX_PATCH_ATTEMPTS within 30 s) */
        agent_debug("AGENT-STATUS-CONFLICT", "status patch conflict; re-reading");
        agent_kube_resp_free(&r);
        agent_kube_backoff(ctx->kube, attempt < 4 ? attempt : 4, deadline);
        if (attempt == MAX_PATCH_ATTEMPTS - 1)
            agent_warn("AGENT-STATUS-FAIL",
                       "Communicator %s status: still conflicting after %d attempts",
                       ctx->comm_name, MAX_PATCH_ATTEMPTS);
    }
    free(u);
}

/* ---- a member that failed before its facts were ready (agent_health_member_failed) ---- */

typedef struct {
    const char *job_uid;
    char uid[64];
    json_t *obj;
} member_watch_t;

static int on_member_comm(void *arg, const char *type, json_t *obj)
{
    member_watch_t *w = arg;
    const char *ouid = json_string_value(json_object_get(
        json_array_get(agent_json_path(obj, "metadata.ownerReferences"), 0), "uid"));
    if (strcmp(type, "DELETED") == 0 || !ouid || strcmp(ouid, w->job_uid) != 0)
        return 0; /* an earlier job's: rank 0 takes it over, then it is this job's */
    agent_json_str(json_object_get(obj, "metadata"), "uid", w->uid, sizeof(w->uid));
    json_decref(w->obj);
    w->obj = json_incref(obj);
    return 1;
}

/* Wait for the job's Communicator (rank 0 creates it), then queue the status and Event. */
static void member_task(agent_health_t *h, member_task_t *t)
{
    agent_ctx_t *ctx = h->ctx;
    char path[400], fsel[300];
    member_watch_t w = {.job_uid = t->job_uid};
    int found = 0;

    snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators",
             ctx->facts.ns);
    snprintf(fsel, sizeof(fsel), "metadata.name=%s", t->job);
    while (!found && agent_remaining_ms(t->deadline) > 0) {
        agent_kube_resp_t r;
        int64_t slice = agent_now_ms() + MEMBER_WATCH_MS;
        pthread_mutex_lock(&h->mu);
        int stop = h->stop;
        pthread_mutex_unlock(&h->mu);
        if (stop)
            break;
        found = agent_kube_watch(ctx->kube, path, fsel, slice < t->deadline ? slice : t->deadline,
                                 on_member_comm, &w, &r) == 0;
        int fatal = !found && (r.code == 401 || r.code == 403 || r.code == 404);
        if (fatal)
            agent_warn("AGENT-STATUS-FAIL", "watching Communicator %s: HTTP %ld %s", t->job, r.code,
                       r.message);
        agent_kube_resp_free(&r);
        if (fatal)
            break;
    }
    if (!found) {
        agent_info("AGENT-STATUS-FAIL",
                   "Communicator %s of this job did not appear: this pod's failure is in its "
                   "log and Events only",
                   t->job);
        json_decref(w.obj);
        return;
    }
    snprintf(ctx->comm_name, sizeof(ctx->comm_name), "%s", t->job);
    snprintf(ctx->comm_uid, sizeof(ctx->comm_uid), "%s", w.uid);
    json_decref(h->cached);
    h->cached = w.obj;
    pthread_mutex_lock(&h->mu);
    update_t *u = &h->pend;
    snprintf(u->phase, sizeof(u->phase), "Failed");
    snprintf(u->conds[t->cond].status, sizeof(u->conds[t->cond].status), "False");
    snprintf(u->conds[t->cond].reason, sizeof(u->conds[t->cond].reason), "%s", t->m.reason);
    snprintf(u->conds[t->cond].message, sizeof(u->conds[t->cond].message), "%s", t->m.message);
    u->has_error = 1;
    u->err = t->m;
    u->members[0] = t->m;
    u->nmembers = 1;
    u->dirty = 1;
    pthread_mutex_unlock(&h->mu);
    char reason[80];
    snprintf(reason, sizeof(reason), "Kcoll%s", t->m.reason);
    agent_events_add(h->events, "Warning", reason, t->m.message, "Communicator",
                     "kcoll.io/v1alpha1", ctx->comm_name, ctx->comm_uid);
}

void agent_health_member_failed(agent_ctx_t *ctx, const agent_facts_t *f, const char *job_uid,
                                const agent_condition_t *cond, int64_t deadline_ms)
{
    agent_health_t *h = ctx->health;
    static const char *const network[] = {
        COLLI_PROTO_CODE_NETWORK_NOT_ATTACHED, COLLI_PROTO_CODE_NETWORK_STATUS_MISSING,
        COLLI_PROTO_CODE_NETWORK_STATUS_INCOMPLETE, COLLI_PROTO_CODE_INTERFACE_MISSING,
        COLLI_PROTO_CODE_ADDRESS_MISSING};
    int per = f->local_size > 1 ? f->local_size : 1;
    if (!h || !ctx->kube || !f->job[0] || !job_uid || !job_uid[0] || f->rank <= 0)
        return;
    pthread_mutex_lock(&h->mu);
    member_task_t *t = &h->task;
    memset(t, 0, sizeof(*t));
    t->active = 1;
    snprintf(t->job, sizeof(t->job), "%s", f->job);
    snprintf(t->job_uid, sizeof(t->job_uid), "%s", job_uid);
    t->deadline = deadline_ms;
    t->cond = COLLI_PROTO_COND_HEALTHY;
    for (size_t i = 0; i < sizeof(network) / sizeof(network[0]); i++)
        if (strcmp(cond->type, network[i]) == 0)
            t->cond = COLLI_PROTO_COND_NETWORK;
    t->m.rank = f->rank * per;
    snprintf(t->m.pod, sizeof(t->m.pod), "%s", f->pod);
    snprintf(t->m.node, sizeof(t->m.node), "%s", f->node);
    snprintf(t->m.reason, sizeof(t->m.reason), "%s", cond->type);
    if (per > 1)
        snprintf(t->m.message, sizeof(t->m.message), "ranks %d-%d (pod %s, node %s): %s: %s",
                 t->m.rank, t->m.rank + per - 1, f->pod, f->node, cond->type, cond->message);
    else
        snprintf(t->m.message, sizeof(t->m.message), "rank %d (pod %s, node %s): %s: %s", t->m.rank,
                 f->pod, f->node, cond->type, cond->message);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* ---- the writer thread ---- */

/* The pending status is to be written now (under mu). */
static int status_due(agent_health_t *h)
{
    return h->pend.dirty && h->ctx->comm_name[0] && (h->stop || h->pend.due_ms <= agent_now_ms());
}

static void *writer(void *arg)
{
    agent_health_t *h = arg;
    agent_ctx_t *ctx = h->ctx;
    int64_t stop_by = 0;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        member_task_t task = {0};
        int due;
        for (;;) {
            int64_t wait = 1000, ev = agent_events_next_ms(h->events);
            if (h->stop || h->task.active || status_due(h) || ev == 0)
                break;
            if (ev > 0 && ev < wait)
                wait = ev;
            if (h->pend.dirty && h->pend.due_ms - agent_now_ms() < wait)
                wait = h->pend.due_ms - agent_now_ms();
            if (wait < 1)
                wait = 1;
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += (long)(wait % 1000) * 1000000L;
            ts.tv_sec += wait / 1000 + ts.tv_nsec / 1000000000L;
            ts.tv_nsec %= 1000000000L;
            pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        }
        if (h->stop && !stop_by)
            stop_by = agent_now_ms() + 10000; /* what is still queued gets 10 s at exit */
        if (h->task.active) {
            task = h->task;
            h->task.active = 0;
        }
        due = status_due(h);
        pthread_mutex_unlock(&h->mu);
        if (task.active && ctx->kube)
            member_task(h, &task);
        if (ctx->kube)
            agent_events_flush(h->events);
        if (due && ctx->kube)
            write_status(h);
        pthread_mutex_lock(&h->mu);
        if (h->stop &&
            ((!status_due(h) && agent_events_next_ms(h->events) < 0) || agent_now_ms() >= stop_by))
            break;
        if (h->stop && !status_due(h) && agent_events_next_ms(h->events) > 0) {
            pthread_mutex_unlock(&h->mu); /* a retry is due later: wait for it, up to stop_by */
            agent_sleep_ms(200);
            pthread_mutex_lock(&h->mu);
        }
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

int agent_health_start(agent_ctx_t *ctx, agent_health_t **out)
{
    agent_health_t *h = calloc(1, sizeof(*h));
    if (!h)
        return -1;
    h->ctx = ctx;
    pend_reset(&h->pend);
    h->events = agent_events_new(ctx);
    if (!h->events) {
        free(h);
        return -1;
    }
    agent_rfc3339_now(h->since, sizeof(h->since));
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->thread, NULL, writer, h) != 0) {
        agent_events_free(h->events);
        free(h);
        return -1;
    }
    h->started = 1;
    *out = h;
    return 0;
}

/* Flushes queued Events and status (at most 10 s more), then stops. */
void agent_health_stop(agent_health_t *h)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    h->stop = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    if (h->started)
        pthread_join(h->thread, NULL);
    json_decref(h->cached);
    json_decref(h->seed);
    agent_events_free(h->events);
    free(h);
}

void agent_health_set_object(agent_health_t *h, const json_t *comm)
{
    if (!h || !comm)
        return;
    pthread_mutex_lock(&h->mu);
    json_decref(h->seed);
    h->seed = json_deep_copy(comm);
    pthread_mutex_unlock(&h->mu);
}

/* A condition of this pod (a warning, the agent's own failure): an Event on the pod, and on the
 * Communicator when it is known and the Event is a Warning. */
void agent_health_event(agent_ctx_t *ctx, const char *type, const char *reason, const char *message)
{
    agent_health_t *h = ctx->health;
    char pod[254], uid[64];
    if (!h || !ctx->kube)
        return;
    pthread_mutex_lock(&ctx->mu);
    snprintf(pod, sizeof(pod), "%s", ctx->facts.pod);
    snprintf(uid, sizeof(uid), "%s", ctx->pod_uid);
    pthread_mutex_unlock(&ctx->mu);
    if (pod[0] && ctx->facts.ns[0])
        agent_events_add(h->events, type, reason, message, "Pod", "v1", pod, uid);
    if (ctx->comm_uid[0] && strcmp(type, "Warning") == 0)
        agent_events_add(h->events, type, reason, message, "Communicator", "kcoll.io/v1alpha1",
                         ctx->comm_name, ctx->comm_uid);
    pthread_mutex_lock(&h->mu);
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void agent_health_set_phase(agent_health_t *h, const char *phase)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    snprintf(h->pend.phase, sizeof(h->pend.phase), "%s", phase);
    h->pend.dirty = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Who writes a failure blamed on blamed_pod (-1: on no rank) into the Communicator: 0 this agent
 * now, k > 0 the k-th backup (it looks later whether it was written), -1 none. The blamed pod's
 * own agent writes its own failures; any other failure is written by the agent of the lowest
 * pod that is not the blamed one (rank 0's, else pod 1's), so that N ranks reporting one
 * failure cost one status patch and two Events, not N. Its next BACKUPS agents check after
 * BACKUP_DELAY_MS each, in case that agent is gone with its pod. */
static int writer_role(const agent_ctx_t *ctx, int blamed_pod)
{
    int mine = ctx->facts.rank;
    if (blamed_pod == mine)
        return 0;
    int pos = blamed_pod >= 0 && blamed_pod < mine ? mine - 1 : mine;
    return pos <= BACKUPS ? pos : -1;
}

/* The failure's reason as the library classified it (the first condition it set False). */
static const char *report_reason(const colli_proto_report_t *rep)
{
    for (int k = 0; k < NCOND; k++)
        if (rep->conds[k].type && rep->conds[k].status && rep->conds[k].reason &&
            strcmp(rep->conds[k].status, COLLI_PROTO_STATUS_FALSE) == 0)
            return rep->conds[k].reason;
    return NULL;
}

void agent_health_report(agent_health_t *h, const colli_proto_report_t *rep)
{
    agent_ctx_t *ctx = h->ctx;
    const char *phase = colli_proto_phase_name(rep->phase);
    int is_root = ctx->facts.is_root, update = 0, per = ctx->facts.local_size;
    int lr = per > 1 ? agent_local_rank_of(ctx, rep->pid) : 0; /* the reporter's, -1 unknown */
    /* several ranks per pod: rank 0's pod takes Bootstrapping/Ready from rank 0's process only
     * (its other local ranks report the same bootstrap) */
    if (per > 1 && lr > 0)
        is_root = 0;
    char msg[MAX_MSG] = "";
    update_t *u = &h->pend;
    int role = 0;
    member_t m;
    memset(&m, 0, sizeof(m));
    m.rank = -1;

    ctx->metrics.reports++;
    agent_info("AGENT-REPORT", "library report: phase=%s%s%s%s", phase ? phase : "-",
               rep->progress ? " progress=" : "", rep->progress ? rep->progress : "",
               rep->has_error ? " (error)" : "");
    pthread_mutex_lock(&h->mu);
    if (rep->phase == COLLI_PROTO_PHASE_READY)
        h->lib_ready = 1;
    /* A failure before this library was ever Ready happened during bootstrap (a version pin, a
     * missing interface, a rank that never arrived), whatever phase the report carries. */
    int boot = !h->lib_ready;
    if (rep->has_error) {
        /* A rank that only waited on others (its bootstrap timed out, another rank's failure
         * was relayed to it) and names no rank is not the culprit: it is not listed unhealthy,
         * and the failure is the designated writer's to record. */
        const char *why = report_reason(rep);
        int waited = !rep->has_err_rank && why &&
                     (strcmp(why, "BootstrapTimeout") == 0 || strcmp(why, "PeerFailed") == 0);
        int err_rank = rep->has_err_rank ? rep->err_rank
                       : waited          ? -1
                                : ctx->facts.rank * (per > 1 ? per : 1) + (lr > 0 ? lr : 0);
        role = writer_role(ctx, err_rank < 0 ? -1 : err_rank / (per > 1 ? per : 1));
        int own = err_rank >= 0 && err_rank / (per > 1 ? per : 1) == ctx->facts.rank;
        m.rank = err_rank;
        take_string(m.pod, sizeof(m.pod), rep->has_err_rank ? rep->err_pod : NULL);
        take_string(m.node, sizeof(m.node), rep->has_err_rank ? rep->err_node : NULL);
        take_string(m.message, sizeof(m.message), rep->err_message);
        take_string(m.reason, sizeof(m.reason), why);
        if (!m.message[0]) /* the CRD requires a non-empty message */
            snprintf(m.message, sizeof(m.message), "(the library gave no message)");
        if (!m.pod[0] && own)
            snprintf(m.pod, sizeof(m.pod), "%s", ctx->facts.pod);
        if (!m.node[0] && own)
            snprintf(m.node, sizeof(m.node), "%s", ctx->facts.node);
        if (err_rank < 0)
            snprintf(msg, sizeof(msg), "rank %d (pod %s, node %s) reports: %s",
                     ctx->facts.rank * (per > 1 ? per : 1) + (lr > 0 ? lr : 0), ctx->facts.pod,
                     ctx->facts.node, m.message);
        else if (per > 1)
            snprintf(msg, sizeof(msg), "rank %d (local rank %d of pod %s, node %s): %s", err_rank,
                     err_rank % per, m.pod, m.node, m.message);
        else
            snprintf(msg, sizeof(msg), "rank %d (pod %s, node %s): %s", err_rank, m.pod, m.node,
                     m.message);
        if (role >= 0) {
            cond_t *healthy = &u->conds[COLLI_PROTO_COND_HEALTHY];
            int64_t due = agent_now_ms() + (role > 0 ? role * BACKUP_DELAY_MS : LINGER_MS);
            if (!u->has_error || due < u->due_ms)
                u->due_ms = due; /* the first report of a burst sets the time */
            if (role == 0) {
                u->check = 0;
            } else if (!u->has_error || u->check) {
                u->check = 1;
                u->check_rank = err_rank;
            }
            if (!u->has_error || !waited || u->err_waited) {
                u->err = m;
                u->err_waited = waited;
            }
            u->has_error = 1;
            if (!waited && u->nmembers < AGENT_MAX_UNHEALTHY && !pending_member(u, err_rank))
                u->members[u->nmembers++] = m;
            if (!healthy->status[0]) { /* Healthy: False, unless the report said otherwise */
                snprintf(healthy->status, sizeof(healthy->status), "False");
                snprintf(healthy->reason, sizeof(healthy->reason), "MemberUnhealthy");
                snprintf(healthy->message, sizeof(healthy->message), "%s", msg);
            }
            snprintf(u->err.message, sizeof(u->err.message), "%s", msg);
            for (int i = 0; i < u->nmembers; i++)
                if (u->members[i].rank == err_rank)
                    snprintf(u->members[i].message, sizeof(u->members[i].message), "%s", msg);
            update = 1;
        }
    }
    /* the library's Bootstrapping after the agent's own (or another local rank's) is no news */
    int again = rep->phase == COLLI_PROTO_PHASE_BOOTSTRAPPING && phase &&
                (strcmp(u->phase, phase) == 0 || (!u->phase[0] && strcmp(h->written, phase) == 0));
    int failing =
        rep->phase == COLLI_PROTO_PHASE_FAILED || rep->phase == COLLI_PROTO_PHASE_DEGRADED;
    if (phase && !again && (is_root || (failing && role >= 0))) {
        snprintf(u->phase, sizeof(u->phase), "%s", phase);
        update = 1;
        if (is_root && rep->phase == COLLI_PROTO_PHASE_READY) {
            u->ready_ranks =
                rep->has_ready_ranks ? rep->ready_ranks : ctx->facts.nranks * (per > 0 ? per : 1);
            /* the transports rank 0 uses: printable ASCII within the CRD's 128 characters */
            if (rep->transport != NULL && !transport_ok(rep->transport))
                agent_warn("AGENT-REPORT",
                           "library report: transport is not printable ASCII of "
                           "at most %d characters; not shown",
                           MAX_TRANSPORT - 1);
            else if (rep->transport != NULL)
                snprintf(u->transport, sizeof(u->transport), "%s", rep->transport);
            for (int k = 0; k < NCOND; k++) {
                snprintf(u->conds[k].status, sizeof(u->conds[k].status), "True");
                snprintf(u->conds[k].reason, sizeof(u->conds[k].reason), "BootstrapComplete");
                snprintf(u->conds[k].message, sizeof(u->conds[k].message),
                         "checked by rank 0 at bootstrap");
            }
        }
    }
    if (is_root && rep->has_ready_ranks) {
        u->ready_ranks = rep->ready_ranks;
        update = 1;
    }
    for (int k = 0; k < NCOND && (!rep->has_error || role >= 0); k++) {
        const colli_proto_condition_t *c = &rep->conds[k];
        if (!c->type)
            continue;
        snprintf(u->conds[k].status, sizeof(u->conds[k].status), "%s", c->status);
        take_string(u->conds[k].reason, sizeof(u->conds[k].reason), c->reason);
        take_string(u->conds[k].message, sizeof(u->conds[k].message), c->message);
        update = 1;
    }
    if (update) {
        u->dirty = 1;
        pthread_cond_signal(&h->cv);
    }
    const char *ev_reason = boot ? "KcollBootstrapFailed" : "KcollCollectiveFailed";
    const char *blamed_pod = m.rank >= 0 ? m.pod : NULL;
    int blamed_own = m.rank >= 0 && m.rank / (per > 1 ? per : 1) == ctx->facts.rank;
    if (msg[0] && role > 0) { /* a backup raises them only if it writes */
        u->has_ev = 1;
        snprintf(u->ev_reason, sizeof(u->ev_reason), "%s", ev_reason);
        snprintf(u->ev_msg, sizeof(u->ev_msg), "%s", msg);
        snprintf(u->ev_pod, sizeof(u->ev_pod), "%s", blamed_pod ? blamed_pod : "");
        snprintf(u->ev_pod_uid, sizeof(u->ev_pod_uid), "%s", blamed_own ? ctx->pod_uid : "");
    }
    pthread_mutex_unlock(&h->mu);
    if (msg[0]) {
        agent_warn("AGENT-LIBRARY-ERROR", "%s", msg);
        if (role == 0)
            failure_events(h, ev_reason, msg, blamed_pod, blamed_own ? ctx->pod_uid : "");
        else if (role < 0)
            agent_info("AGENT-STATUS-DEFER",
                       "the failure is written to Communicator %s by the agent of a lower pod "
                       "(rank 0's, or the next one)",
                       ctx->comm_name);
    }
}
