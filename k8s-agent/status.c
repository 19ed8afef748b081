/* The Communicator status as the agents write it: the pending update merged into the object's
 * current status (bounded members, sticky Failed, a cause kept over the ranks that only waited
 * for it), written with a resourceVersion precondition (409: re-read, merge again, bounded),
 * kept and retried when the API server does not answer; and the status of a member whose agent
 * failed before its facts were ready. */
#define _GNU_SOURCE
#include "health_state.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PATCH_ATTEMPTS 12
#define STATUS_TRY_MS      10000  /* one write, its conflicts and retries on errors included */
#define STATUS_KEEP_MS     300000 /* a write the API server does not take is retried this long */
/* a failed agent waits for the Communicator in watches of 10 s, 20 s, then 30 s: few requests
 * when it never comes (rank 0 failed too), and a stop within 30 s */
#define MEMBER_WATCH_MS  10000
#define MEMBER_WATCH_MAX 30000

void agent_status_reset(update_t *u)
{
    memset(u, 0, sizeof(*u));
    u->ready_ranks = -1;
    u->check_rank = -1;
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
    char msg[sizeof m->message];
    snprintf(msg, sizeof(msg), "%s", m->message);
    agent_utf8_clean(msg); /* the library's text, cut to the buffer */
    json_t *o = json_pack("{si ss ss}", "rank", m->rank, "message", msg, "time", now);
    if (o && m->pod[0])
        json_object_set_new(o, "pod", json_string(m->pod));
    if (o && m->node[0])
        json_object_set_new(o, "node", json_string(m->node));
    if (o && m->reason[0])
        json_object_set_new(o, "reason", json_string(m->reason));
    return with_local(h, o, m->rank);
}

void agent_status_add_cause(update_t *u, const char *pod, const char *text)
{
    int k = 0;
    while (k < u->ncauses && strcmp(u->causes[k].pod, pod) != 0)
        k++;
    if (k >= CAUSE_TASKS)
        return;
    snprintf(u->causes[k].pod, sizeof(u->causes[k].pod), "%s", pod);
    snprintf(u->causes[k].text, sizeof(u->causes[k].text), "%s", text);
    if (k == u->ncauses)
        u->ncauses++;
    u->dirty = 1;
}

int agent_status_has_member(const update_t *u, json_int_t rank)
{
    for (int i = 0; i < u->nmembers; i++)
        if (u->members[i].rank == rank)
            return 1;
    return 0;
}

/* o with the cause of its pod, if the update has one: a copy (o may be the server's) */
static json_t *with_cause(const update_t *u, json_t *o)
{
    const char *pod = json_string_value(json_object_get(o, "pod"));
    for (int k = 0; pod && k < u->ncauses; k++) {
        if (strcmp(u->causes[k].pod, pod) != 0)
            continue;
        char text[sizeof u->causes[k].text];
        snprintf(text, sizeof(text), "%s", u->causes[k].text);
        agent_utf8_clean(text);
        json_t *c = json_deep_copy(o);
        json_decref(o);
        if (c)
            json_object_set_new(c, "cause", json_string(text));
        return c;
    }
    return o;
}

static int old_false(const json_t *cond)
{
    const char *st = json_string_value(json_object_get(cond, "status"));
    return st && strcmp(st, "False") == 0;
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
        if (cur_phase && strcmp(cur_phase, "Failed") == 0 && !u->recovered &&
            (strcmp(phase, "Ready") == 0 || strcmp(phase, "Degraded") == 0 ||
             (strcmp(phase, "Bootstrapping") == 0 && err_time && strcmp(err_time, h->since) >= 0)))
            phase = "Failed";
        json_object_set_new(st, "phase", json_string(phase));
    }
    if (u->ready_ranks >= 0)
        json_object_set_new(st, "readyRanks", json_integer(u->ready_ranks));
    if (u->transport[0])
        json_object_set_new(st, "transport", json_string(u->transport));
    if (u->placement) {
        const char *key;
        json_t *v;
        pthread_mutex_lock(&h->mu);
        json_object_foreach(h->placement, key, v) json_object_set(st, key, v);
        pthread_mutex_unlock(&h->mu);
    }
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
            char msg[sizeof nc->message]; /* cut to the buffer, or quoting a parser */
            snprintf(msg, sizeof(msg), "%s", nc->message);
            agent_utf8_clean(msg);
            const char *ots = json_string_value(json_object_get(old, "status"));
            const char *olt = json_string_value(json_object_get(old, "lastTransitionTime"));
            json_array_append_new(
                conditions,
                json_pack("{ss ss ss ss ss}", "type", colli_proto_cond_name((colli_proto_cond_t)c),
                          "status", nc->status, "reason", nc->reason[0] ? nc->reason : nc->status,
                          "message", msg, "lastTransitionTime",
                          (ots && olt && strcmp(ots, nc->status) == 0) ? olt : now));
        } else if (old && u->recovered && c == COLLI_PROTO_COND_VERSIONS && old_false(old)) {
            /* every pod started again, each NCCL passing the version check: consistent now */
            json_array_append_new(
                conditions,
                json_pack("{ss ss ss ss ss}", "type",
                          colli_proto_cond_name(COLLI_PROTO_COND_VERSIONS), "status", "True",
                          "reason", "Restarted", "message",
                          "every pod's NCCL passed the version check when it started again",
                          "lastTransitionTime", now));
        } else if (old) {
            json_array_append(conditions, old);
        }
    }
    json_object_set_new(st, "conditions", conditions);
    cur_members = u->recovered ? NULL : json_object_get(cur_status, "unhealthyMembers");
    json_array_foreach(cur_members, i, it)
    {
        json_t *r = json_object_get(it, "rank");
        if (json_is_integer(r) && agent_status_has_member(u, json_integer_value(r)))
            continue; /* replaced below, with its newest facts */
        if (json_array_size(members) < AGENT_MAX_UNHEALTHY)
            json_array_append_new(members, with_cause(u, json_incref(it)));
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
            json_array_append_new(members, with_cause(u, member_json(h, &u->members[m], now)));
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
                     strcmp(last_time, u->err_since[0] ? u->err_since : h->since) >= 0;
    if (u->has_error && !keep_cause)
        json_object_set_new(st, "lastError", with_cause(u, member_json(h, &u->err, now)));
    else if (cur_last)
        json_object_set_new(st, "lastError", with_cause(u, json_incref(cur_last)));
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
void agent_status_failure_events(agent_health_t *h, const char *reason, const char *msg,
                                 const char *pod, const char *pod_uid)
{
    agent_ctx_t *ctx = h->ctx;
    if (ctx->comm_uid[0])
        agent_events_add(h->events, "Warning", reason, msg, "Communicator", "kcoll.io/v1alpha1",
                         ctx->comm_name, ctx->comm_uid);
    if (pod && pod[0])
        agent_events_add(h->events, "Warning", reason, msg, "Pod", "v1", pod, pod_uid);
}

/* The API server did not answer a write (an outage, 5xx, 429): keep it, under any newer
 * update, and try again after a back-off; given up STATUS_KEEP_MS after the first try. */
static void requeue(agent_health_t *h, update_t *u, const char *why)
{
    int64_t now = agent_now_ms(), d;
    if (!u->first_ms)
        u->first_ms = now;
    if (now - u->first_ms >= STATUS_KEEP_MS) {
        agent_warn("AGENT-STATUS-FAIL",
                   "Communicator %s status not written: the API server did not take it within "
                   "%d s; dropped",
                   h->ctx->comm_name, STATUS_KEEP_MS / 1000);
        return;
    }
    d = 1000LL << (u->tries < 4 ? u->tries : 4);
    u->tries++;
    pthread_mutex_lock(&h->mu);
    update_t *p = &h->pend;
    if (!p->dirty) {
        *p = *u;
    } else { /* p is newer: what it does not set comes from u */
        if (!p->phase[0])
            snprintf(p->phase, sizeof(p->phase), "%s", u->phase);
        if (p->ready_ranks < 0)
            p->ready_ranks = u->ready_ranks;
        if (!p->transport[0])
            snprintf(p->transport, sizeof(p->transport), "%s", u->transport);
        p->placement |= u->placement;
        for (int k = 0; k < NCOND; k++)
            if (!p->conds[k].status[0])
                p->conds[k] = u->conds[k];
        if (!p->has_error && u->has_error) {
            p->has_error = 1;
            p->err = u->err;
            p->err_waited = u->err_waited;
        }
        for (int i = 0; i < u->nmembers && p->nmembers < AGENT_MAX_UNHEALTHY; i++)
            if (!agent_status_has_member(p, u->members[i].rank))
                p->members[p->nmembers++] = u->members[i];
        for (int i = 0; i < u->ncauses && p->ncauses < CAUSE_TASKS; i++) {
            int known = 0;
            for (int k = 0; k < p->ncauses; k++)
                known |= strcmp(p->causes[k].pod, u->causes[i].pod) == 0;
            if (!known)
                p->causes[p->ncauses++] = u->causes[i];
        }
        p->check = p->check && u->check;
        if (!p->has_ev && u->has_ev) {
            p->has_ev = 1;
            snprintf(p->ev_reason, sizeof(p->ev_reason), "%s", u->ev_reason);
            snprintf(p->ev_msg, sizeof(p->ev_msg), "%s", u->ev_msg);
            snprintf(p->ev_pod, sizeof(p->ev_pod), "%s", u->ev_pod);
            snprintf(p->ev_pod_uid, sizeof(p->ev_pod_uid), "%s", u->ev_pod_uid);
        }
        p->first_ms = u->first_ms;
        p->tries = u->tries;
    }
    p->dirty = 1;
    p->due_ms = now + d;
    pthread_mutex_unlock(&h->mu);
    if (u->tries == 1)
        agent_info("AGENT-STATUS-RETRY",
                   "Communicator %s status not written (%s); kept and retried with back-off for "
                   "up to %d s",
                   h->ctx->comm_name, why, STATUS_KEEP_MS / 1000);
}

void agent_status_write(agent_health_t *h)
{
    agent_ctx_t *ctx = h->ctx;
    char path[800], spath[820];
    update_t *u = malloc(sizeof(*u));
    int64_t deadline = agent_now_ms() + STATUS_TRY_MS;

    if (!u)
        return;
    pthread_mutex_lock(&h->mu);
    *u = h->pend;
    agent_status_reset(&h->pend);
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
    int conflicted = 0;
    for (int attempt = 0; attempt < MAX_PATCH_ATTEMPTS && agent_remaining_ms(deadline) > 0;
         attempt++) {
        conflicted = 0;
        agent_kube_resp_t r;
        json_t *patch, *st;
        const char *rv;
        if (!h->cached) {
            /* re-read after a conflict with an empty merge patch of the status subresource
             * (the agent has patch, not get, on Communicators) */
            int rc = agent_kube_read_by_patch(ctx->kube, spath, deadline, &r);
            if (agent_kube_unanswered(rc, &r)) {
                agent_kube_resp_free(&r);
                requeue(h, u, "the API server did not answer");
                break;
            }
            if (r.code != 200) {
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
                agent_status_failure_events(h, u->ev_reason, u->ev_msg, u->ev_pod, u->ev_pod_uid);
        }
        rv = json_string_value(agent_json_path(h->cached, "metadata.resourceVersion"));
        st = merged_status(h, json_object_get(h->cached, "status"), u);
        patch = json_pack("{s{ss} so}", "metadata", "resourceVersion", rv ? rv : "", "status", st);
        int rc = agent_kube_request(ctx->kube, "PATCH", spath, patch,
                                    "application/merge-patch+json", deadline, &r);
        json_decref(patch);
        if (agent_kube_unanswered(rc, &r)) {
            agent_kube_resp_free(&r);
            requeue(h, u, "the API server did not answer");
            break;
        }
        ctx->metrics.status_patches++;
        json_decref(h->cached);
        h->cached = NULL;
        if (r.code == 200) {
            h->cached = r.body;
            agent_info("AGENT-STATUS-PATCHED", "Communicator %s status: phase=%s", ctx->comm_name,
                       u->phase[0] ? u->phase : "(unchanged)");
            for (int i = 0; i < u->nmembers; i++) /* why did it end? (cause.c) */
                agent_cause_queue(h, &u->members[i]);
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
         * jittered back-off (bounded: MAX_PATCH_ATTEMPTS within STATUS_TRY_MS) */
        agent_debug("AGENT-STATUS-CONFLICT", "status patch conflict; re-reading");
        agent_kube_resp_free(&r);
        conflicted = 1; /* if the try ends here, the update is kept for a later one */
        agent_kube_backoff(ctx->kube, attempt < 4 ? attempt : 4, deadline);
    }
    if (conflicted)
        requeue(h, u, "still conflicting with other writers at the end of a try");
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
void agent_status_member_task(agent_health_t *h, member_task_t *t)
{
    agent_ctx_t *ctx = h->ctx;
    char path[400], fsel[300];
    member_watch_t w = {.job_uid = t->job_uid};
    int found = 0;
    int64_t slice_ms = MEMBER_WATCH_MS;

    snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators",
             ctx->facts.ns);
    snprintf(fsel, sizeof(fsel), "metadata.name=%s", t->job);
    /* the rendezvous found it already (an agent that joined it only to fail the others) */
    found = ctx->comm_uid[0] && strcmp(ctx->comm_name, t->job) == 0;
    while (!found && agent_remaining_ms(t->deadline) > 0) {
        agent_kube_resp_t r;
        int64_t slice = agent_now_ms() + slice_ms;
        slice_ms = slice_ms * 2 < MEMBER_WATCH_MAX ? slice_ms * 2 : MEMBER_WATCH_MAX;
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
    if (w.obj) { /* else the first write reads the object (an empty merge patch) */
        snprintf(ctx->comm_name, sizeof(ctx->comm_name), "%s", t->job);
        snprintf(ctx->comm_uid, sizeof(ctx->comm_uid), "%s", w.uid);
        json_decref(h->cached);
        h->cached = w.obj;
    }
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
    /* no Communicator to write to: it never appeared, or the API is out of this agent's reach */
    static const char *const unwritable[] = {COLLI_PROTO_CODE_RENDEZVOUS_TIMEOUT,
                                             COLLI_PROTO_CODE_API_UNAVAILABLE, "Unauthorized",
                                             "Forbidden", "NotFound"};
    int per = f->local_size > 1 ? f->local_size : 1;
    /* rank 0 writes only where it created the Communicator to fail the others (its pod IP stood
     * in for the missing network: rendezvous_to_fail); else there is none */
    if (!h || !ctx->kube || !f->job[0] || !job_uid || !job_uid[0] || f->rank < 0 ||
        (f->rank == 0 && !ctx->comm_uid[0]))
        return;
    for (size_t i = 0; i < sizeof(unwritable) / sizeof(unwritable[0]); i++)
        if (strcmp(cond->type, unwritable[i]) == 0)
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
