/*
 * spec.nccl: native, a rank that ends (docs/nccl-env.md, "A rank that ends"). NVIDIA NCCL does
 * not notice that a peer's process ended: the job's other ranks wait in their next collective
 * until the framework's timeout (PyTorch's default for NCCL is 10 minutes), and nothing in the
 * cluster says why. Once a process of this pod initialised NCCL through the environment plugin
 * (an accepted nccl_init), the agent
 *  - watches its own Pod: a container that ends with a non-zero exit code (an error, a signal, an
 *    OOMKill) or the pod deleted, evicted or disrupted is written to the job's Communicator (phase
 *    Failed, the pod's ranks an unhealthy member with reason RankEnded and the cause, the Event
 *    KcollRankEnded on the Communicator and on the pod), and the Communicator is labelled
 *    kcoll.io/rank-ended=STAMP (this job's stamp). A clean exit is the job's normal end: nothing;
 *  - watches the job's Communicator selected by that label, which costs nothing until a rank
 *    ends: the ranks that ended, for this pod's NCCL processes, whose plugin asks every few
 *    seconds ("nccl_ended", proto/nccl_ipc.h) and says so on its stderr, or ends its process
 *    (COLL_NCCL_ON_RANK_END=exit).
 * The kubelet stops the sidecar once the pod's containers ended, often before the watch has seen
 * the end: at its stop the agent reads its pod once more (at most three times, a second apart).
 * A pod whose node died has no agent left to write it: each agent also watches the next pod of
 * the job (pod rank p watches p+1, a ring; its name from status.ncclPods), and writes that pod's
 * ranks gone once the node controller marks it not Ready while its containers ran (its node
 * stopped reporting, 40-50 s after it died), or when it was deleted (or disrupted) while it ran
 * and, 10 s later, the Communicator does not name it (its agent went with its node: a VM the
 * cloud removed, whose pods the pod garbage collector deletes before that mark): nccl_ring.c.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"
#include "health_state.h"
#include "nccl_ipc.h"
#include "nccl_watch.h"
#include "pod_ranks.h" /* agent_name_ok */

#define STOP_LOOKS     3    /* reads of the own pod at the agent's stop, ... */
#define STOP_LOOK_MS   1000 /* ... this far apart */
#define STOP_JOIN_S    3    /* the watches end within about a second of the stop */
#define LABEL_ENDED    "kcoll.io/rank-ended"
#define REASON_ENDED   "RankEnded"        /* the first end: told to the other ranks */
#define REASON_AFTER   "EndedAfterPeer"   /* an end after another rank's: a consequence */
#define REASON_REFUSED AGENT_NCCL_REFUSED /* refused at its init (nccl_env.c): it ends */

int agent_nccl_closed(agent_nccl_watch_t *w)
{
    pthread_mutex_lock(&w->mu);
    int c = w->closed;
    pthread_mutex_unlock(&w->mu);
    return c;
}

/* A merge patch of the job's Communicator (status: of its status), bounded: 0 when the API
 * server took it; *r has the answer either way (the caller frees it). */
static int patch_comm(agent_ctx_t *ctx, int status, json_t *patch, agent_kube_resp_t *r)
{
    char path[800];
    snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators/%s%s",
             ctx->facts.ns, ctx->comm_name, status ? "/status" : "");
    int rc = agent_kube_request(ctx->kube, "PATCH", path, patch, "application/merge-patch+json",
                                agent_now_ms() + LABEL_TIMEOUT_MS, r);
    return rc == 0 && r->code == 200 ? 0 : -1;
}

/* The Communicator's label kcoll.io/rank-ended=STAMP, for the other pods' watches: set when a
 * rank of this job ended, removed when the job runs again (their watches go quiet). */
static void label_ended(agent_nccl_watch_t *w, int on)
{
    agent_ctx_t *ctx = w->ctx;
    agent_kube_resp_t r;
    json_t *patch = on ? json_pack("{s{s{ss}}}", "metadata", "labels", LABEL_ENDED, w->stamp)
                       : json_pack("{s{s{sn}}}", "metadata", "labels", LABEL_ENDED);
    if (!patch)
        return;
    if (patch_comm(ctx, 0, patch, &r) != 0)
        agent_warn("AGENT-RANK-ENDED-LABEL", "%s Communicator %s %s=%s: HTTP %ld %s; %s",
                   on ? "labelling" : "unlabelling", ctx->comm_name, LABEL_ENDED, w->stamp, r.code,
                   r.message,
                   on ? "the other pods' NCCL processes are not told that this pod's ranks ended"
                      : "the pods' watches of it see each of its changes until the job ends");
    agent_kube_resp_free(&r);
    json_decref(patch);
}

static void mark_ended(agent_nccl_watch_t *w)
{
    label_ended(w, 1);
}

/* Is end i one that a process of this pod started at t (epoch s) waits on? When it ended at or
 * after t; or before, while this pod's ranks started for the first time (they wait for it in
 * NCCL's init) and its pod has not started again since. An end before a restart of this pod
 * (in place: a later generation) is the one that restarted it: not told again (under mu). */
static int current(const agent_nccl_watch_t *w, int i, int64_t t)
{
    const ended_t *e = &w->ended[i];
    return e->end_s + CLOCK_SLACK_S >= t || (w->ngen <= 1 && !e->back);
}

/* The first end this agent learned of the pod's current generation (its ranks' latest start),
 * -1 none (under mu). */
static int first_end(const agent_nccl_watch_t *w)
{
    for (int i = 0; i < w->nended; i++)
        if (current(w, i, w->gen_s))
            return i;
    return -1;
}

/* This pod's ranks ended (cause says how): the Communicator's status and Events, then its label.
 * Each end once (key). An end after another rank's (this agent learned of it first: its NCCL
 * processes were told, and ended or timed out) is a consequence, reason EndedAfterPeer: it keeps
 * the first end as lastError and the Healthy condition, and is not told to the other ranks (a
 * restarted rank is not sent away again by the ends its own first end caused). */
void agent_nccl_report_end(agent_nccl_watch_t *w, const whose_t *p, char *last_key, size_t keylen,
                           const char *key, const char *verb, const char *cause)
{
    agent_ctx_t *ctx = w->ctx;
    const agent_facts_t *f = &ctx->facts;
    int per = f->local_size > 1 ? f->local_size : 1;
    char who[600], after[400] = "";
    member_t m;
    memset(&m, 0, sizeof(m));
    m.rank = p->pod_rank * per;
    snprintf(m.pod, sizeof(m.pod), "%s", p->pod);
    snprintf(m.node, sizeof(m.node), "%s", p->node);
    if (per > 1)
        snprintf(who, sizeof(who), "ranks %d-%d (pod %s, node %s)", m.rank, m.rank + per - 1,
                 p->pod, p->node);
    else
        snprintf(who, sizeof(who), "rank %d (pod %s, node %s)", m.rank, p->pod, p->node);

    pthread_mutex_lock(&w->mu);
    agent_health_t *h = ctx->health;
    if (w->closed || !h || strcmp(last_key, key) == 0) {
        pthread_mutex_unlock(&w->mu);
        return;
    }
    snprintf(last_key, keylen, "%s", key);
    int first = first_end(w), consequence = first >= 0;
    if (consequence)
        snprintf(after, sizeof(after), " after rank %d (pod %s) had ended", w->ended[first].e.rank,
                 w->ended[first].e.pod);
    snprintf(m.reason, sizeof(m.reason), consequence ? REASON_AFTER : REASON_ENDED);
    snprintf(m.message, sizeof(m.message), "%s %s%s: %s", who, verb, after, cause);
    pthread_mutex_lock(&h->mu);
    update_t *u = &h->pend;
    cond_t *healthy = &u->conds[COLLI_PROTO_COND_HEALTHY];
    snprintf(u->phase, sizeof(u->phase), "Failed");
    if (!consequence) {
        snprintf(healthy->status, sizeof(healthy->status), "False");
        snprintf(healthy->reason, sizeof(healthy->reason), REASON_ENDED);
        snprintf(healthy->message, sizeof(healthy->message), "%s", m.message);
    }
    u->err = m;
    u->err_waited = 1; /* two first ends at once: the one written first stays lastError, */
    time_t gen = (time_t)(w->gen_s - CLOCK_SLACK_S); /* ... of this generation */
    struct tm tm;
    gmtime_r(&gen, &tm);
    strftime(u->err_since, sizeof(u->err_since), "%Y-%m-%dT%H:%M:%SZ", &tm);
    u->has_error = 1;
    u->check = 0;
    u->due_ms = 0;
    if (!agent_status_has_member(u, m.rank) && u->nmembers < AGENT_MAX_UNHEALTHY)
        u->members[u->nmembers++] = m;
    agent_status_add_cause(u, m.pod, cause);
    u->dirty = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    agent_warn("AGENT-RANK-ENDED", "%s", m.message);
    agent_status_failure_events(h, "KcollRankEnded", m.message, p->pod, p->uid);
    pthread_mutex_unlock(&w->mu);
    if (!consequence)
        mark_ended(w);
}

/* One state of the own pod (NULL: deleted): reported when it says the pod's ranks ended.
 * Returns 1 when it did, 2 when every container ended cleanly (the job's normal end), else 0. */
static int judge(agent_nccl_watch_t *w, const json_t *pod)
{
    char cause[MAX_CAUSE], key[160];
    const agent_ctx_t *ctx = w->ctx;
    const char *name = ctx->facts.pod;
    whose_t me = {.pod_rank = ctx->facts.rank};
    snprintf(me.pod, sizeof(me.pod), "%s", ctx->facts.pod);
    snprintf(me.node, sizeof(me.node), "%s", ctx->facts.node);
    snprintf(me.uid, sizeof(me.uid), "%s", ctx->pod_uid);
    if (!pod) {
        agent_pod_cause(name, NULL, w->since_s, 0, cause, sizeof(cause));
        agent_nccl_report_end(w, &me, w->own_key, sizeof(w->own_key), "deleted", "ended", cause);
        return 1;
    }
    if (agent_own_end(name, pod, w->since_s, cause, sizeof(cause), key, sizeof(key))) {
        agent_nccl_report_end(w, &me, w->own_key, sizeof(w->own_key), key, "ended", cause);
        return 1;
    }
    size_t i, n = 0;
    const json_t *cs;
    json_array_foreach(agent_json_path(pod, "status.containerStatuses"), i, cs) n +=
        json_is_object(agent_json_path(cs, "state.terminated"));
    return n > 0 && n == json_array_size(agent_json_path(pod, "status.containerStatuses")) ? 2 : 0;
}

static int on_own(void *arg, const char *type, json_t *obj)
{
    agent_nccl_watch_t *w = arg;
    if (agent_nccl_closed(w))
        return 1;
    judge(w, strcmp(type, "DELETED") == 0 ? NULL : obj);
    return 0;
}

/* A member of the labelled Communicator that ended (not this pod's): remembered once. */
static int on_job(void *arg, const char *type, json_t *obj)
{
    agent_nccl_watch_t *w = arg;
    size_t i;
    const json_t *it;
    if (agent_nccl_closed(w))
        return 1;
    if (strcmp(type, "DELETED") == 0)
        return 0;
    json_array_foreach(agent_json_path(obj, "status.unhealthyMembers"), i, it)
    {
        const char *reason = json_string_value(json_object_get(it, "reason"));
        const char *pod = json_string_value(json_object_get(it, "pod"));
        const char *t = json_string_value(json_object_get(it, "time"));
        const char *msg = json_string_value(json_object_get(it, "message"));
        const json_t *rank = json_object_get(it, "rank");
        ended_t e;
        char err[160];
        memset(&e, 0, sizeof(e));
        if (!reason || (strcmp(reason, REASON_ENDED) != 0 && strcmp(reason, REASON_REFUSED) != 0) ||
            !pod || !t || !msg || !json_is_integer(rank) || strcmp(pod, w->ctx->facts.pod) == 0)
            continue;
        /* the entry as the plugin gets it, checked by the plugin's own decoder */
        const char *node = json_string_value(json_object_get(it, "node"));
        json_t *one = json_pack("{s[{sO sO ss sO}]}", COLLI_PROTO_KEY_ENDED, COLLI_PROTO_KEY_RANK,
                                (json_t *)rank, COLLI_PROTO_KEY_POD, json_object_get(it, "pod"),
                                COLLI_PROTO_KEY_NODE, node ? node : "", COLLI_PROTO_KEY_WHAT,
                                json_object_get(it, "message"));
        int n = 0;
        int bad = !one || colli_proto_nccl_ended_decode(one, &e.e, 1, &n, err, sizeof(err)) != 0 ||
                  n != 1;
        json_decref(one);
        if (bad)
            continue;
        snprintf(e.time, sizeof(e.time), "%.39s", t);
        e.end_s = agent_rfc3339_s(t);
        if (e.end_s < 0)
            e.end_s = (int64_t)time(NULL);
        pthread_mutex_lock(&w->mu);
        /* an earlier generation's */
        int known = w->ngen > 1 && e.end_s + CLOCK_SLACK_S < w->gen_s;
        int per = w->ctx->facts.local_size > 1 ? w->ctx->facts.local_size : 1;
        e.pod_rank = e.e.rank / per;
        for (int k = 0; k < w->nended; k++)
            known |=
                strcmp(w->ended[k].e.pod, e.e.pod) == 0 && strcmp(w->ended[k].time, e.time) == 0;
        if (!known && w->nended < MAX_ENDED) {
            w->ended[w->nended++] = e;
            agent_info("AGENT-PEER-RANK-ENDED", "%s (this pod's NCCL processes are told)",
                       e.e.what);
        }
        pthread_mutex_unlock(&w->mu);
    }
    /* the ended pods that started NCCL again since (restarted, or replaced) */
    pthread_mutex_lock(&w->mu);
    for (int k = 0; k < w->nended; k++)
        w->ended[k].back |= agent_nccl_pods_since(obj, w->stamp, w->ended[k].pod_rank) >
                            w->ended[k].end_s + CLOCK_SLACK_S;
    pthread_mutex_unlock(&w->mu);
    return 0;
}

/* Interruptible sleep: 0 after ms, 1 when the agent stops meanwhile. */
int agent_nccl_nap(agent_nccl_watch_t *w, int64_t ms)
{
    for (int64_t until = agent_now_ms() + ms; agent_now_ms() < until; agent_sleep_ms(100))
        if (agent_nccl_closed(w) || atomic_load(&w->cancel) || w->ctx->stop)
            return 1;
    return 0;
}

/* A watch the API server refused (401 after a token refresh, 403, 404, 400: not 410 or 429, which
 * the watch handles): asked again after 1, 2, 4 ... s, then every 30 s, so that RBAC restored by
 * a chart upgrade, or an authorizer's outage ended, guards the job again without a restart. */
int agent_nccl_refused(int rc, const agent_kube_resp_t *r)
{
    return rc != 0 && r->code >= 400 && r->code < 500 && r->code != 410 && r->code != 429;
}

int agent_nccl_refusal(int rc, const agent_kube_resp_t *r, int64_t *wait, const char *id,
                       const char *what, const char *until)
{
    if (!agent_nccl_refused(rc, r)) {
        *wait = 0;
        return 0;
    }
    if (!*wait) /* once per refusal, however often it is asked again */
        agent_warn(id,
                   "watching %s: HTTP %ld %s; watched again after 1, 2, 4 ... s, then every %d s; "
                   "until then %s (the chart's RBAC grants watch on pods and communicators)",
                   what, r->code, r->message, REFUSED_MAX_MS / 1000, until);
    *wait = *wait <= 0 ? 1000 : *wait * 2 > REFUSED_MAX_MS ? REFUSED_MAX_MS : *wait * 2;
    return 1;
}

typedef struct {
    agent_nccl_watch_t *w;
    int job; /* the Communicator's watch, else the own pod's */
} watch_arg_t;

static void *watcher(void *arg)
{
    watch_arg_t a = *(watch_arg_t *)arg;
    free(arg);
    agent_nccl_watch_t *w = a.w;
    agent_ctx_t *ctx = w->ctx;
    char path[400], fsel[300], lsel[80], what[400];
    snprintf(what, sizeof(what), "%s %s", a.job ? "Communicator" : "pod",
             a.job ? ctx->comm_name : ctx->facts.pod);
    if (a.job) {
        snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators",
                 ctx->facts.ns);
        snprintf(fsel, sizeof(fsel), "metadata.name=%s", ctx->comm_name);
    } else {
        snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ctx->facts.ns);
        snprintf(fsel, sizeof(fsel), "metadata.name=%s", ctx->facts.pod);
    }
    snprintf(lsel, sizeof(lsel), "%s=%s", LABEL_ENDED, w->stamp);
    int64_t wait = 0; /* after a refusal */
    while (!agent_nccl_closed(w) && !atomic_load(&w->cancel) && !ctx->stop) {
        agent_kube_resp_t r;
        int64_t t0 = agent_now_ms();
        int rc = agent_kube_watch_labels(ctx->kube, path, fsel, a.job ? lsel : NULL, &w->cancel,
                                         t0 + SLICE_MS, a.job ? on_job : on_own, w, &r);
        /* a refusal is said once and asked again later and later; any other early end waits a
         * second before the next watch (a new watch starts from the current state: an end
         * during a refusal is seen by the first watch allowed again) */
        int no = agent_nccl_refusal(
            rc, &r, &wait, "AGENT-RANK-ENDED-WATCH", what,
            a.job ? "this pod's NCCL processes are not told when another rank ends"
                  : "an end of this pod's ranks is not reported");
        agent_kube_resp_free(&r);
        if (agent_nccl_nap(w, no ? wait : rc != 0 && agent_now_ms() - t0 < 1000 ? 1000 : 0))
            break;
    }
    return NULL;
}

void agent_nccl_watch_start(agent_ctx_t *ctx, const char stamp[17])
{
    if (!ctx->kube || !ctx->comm_name[0])
        return;
    pthread_mutex_lock(&ctx->mu);
    if (ctx->ncclw) {
        pthread_mutex_unlock(&ctx->mu);
        return;
    }
    agent_nccl_watch_t *w = calloc(1, sizeof(*w));
    if (!w) {
        pthread_mutex_unlock(&ctx->mu);
        return;
    }
    w->ctx = ctx;
    pthread_mutex_init(&w->mu, NULL);
    w->since_s = w->gen_s = (int64_t)time(NULL);
    snprintf(w->stamp, sizeof(w->stamp), "%s", stamp);
    ctx->ncclw = w;
    pthread_mutex_unlock(&ctx->mu);
    for (int job = 0; job < 2; job++) {
        watch_arg_t *a = malloc(sizeof(*a));
        if (!a)
            continue;
        *a = (watch_arg_t){.w = w, .job = job};
        if (pthread_create(&w->threads[job], NULL, watcher, a) == 0) {
            w->started[job] = 1;
        } else {
            agent_warn("AGENT-RANK-ENDED-WATCH", "cannot start a watch thread");
            free(a);
        }
    }
    if (pthread_create(&w->threads[2], NULL, agent_nccl_ring, w) == 0)
        w->started[2] = 1;
    else
        agent_warn("AGENT-RING", "cannot start the next pod's watch thread");
    agent_info("AGENT-RANK-ENDED-WATCH",
               "NVIDIA NCCL runs in this pod: an end of its ranks is written to Communicator %s, "
               "and its processes are told when another rank of the job ends",
               ctx->comm_name);
}

/* status.ncclPods.POD_RANK = {job (the stamp), pod, node, since}: this pod's NCCL processes all
 * passed their init (again, after a restart). The agent whose record completes the job writes
 * phase Ready; after a failure, once every pod started again after it, the job runs again. */
static void record_pod(agent_nccl_watch_t *w)
{
    agent_ctx_t *ctx = w->ctx;
    const agent_facts_t *f = &ctx->facts;
    char key[16], now[40];
    agent_kube_resp_t r;
    snprintf(key, sizeof(key), "%d", f->rank);
    agent_rfc3339_now(now, sizeof(now));
    json_t *patch = json_pack("{s{s{s{ss ss ss ss}}}}", "status", "ncclPods", key, "job", w->stamp,
                              "pod", f->pod, "node", f->node, "since", now);
    if (!patch)
        return;
    if (patch_comm(ctx, 1, patch, &r) != 0) {
        agent_warn("AGENT-NCCL-RECORD-FAIL",
                   "recording that pod %s's NCCL processes started in Communicator %s: HTTP %ld "
                   "%s; its phase stays as it is",
                   f->pod, ctx->comm_name, r.code, r.message);
        agent_kube_resp_free(&r);
        json_decref(patch);
        return;
    }
    int per = f->local_size > 1 ? f->local_size : 1;
    whose_t next;
    if (f->nranks > 1 && agent_nccl_ring_entry(w, r.body, (f->rank + 1) % f->nranks, &next)) {
        pthread_mutex_lock(&w->mu);
        w->ring_hint = next;
        pthread_mutex_unlock(&w->mu);
    }
    const char *phase = json_string_value(agent_json_path(r.body, "status.phase"));
    const json_t *last = agent_json_path(r.body, "status.lastError");
    const char *failed_at = json_string_value(json_object_get(last, "time"));
    int failed = phase && strcmp(phase, "Failed") == 0;
    int64_t t = failed ? agent_rfc3339_s(failed_at) : -1;
    if ((!failed || t >= 0) &&
        agent_nccl_pods_started(r.body, w->stamp, t, CLOCK_SLACK_S) >= f->nranks) {
        char msg[MAX_MSG];
        if (failed) {
            const char *lpod = json_string_value(json_object_get(last, "pod"));
            const char *why = json_string_value(json_object_get(last, "reason"));
            int all = !agent_nccl_pods_refused_only(r.body);
            snprintf(msg, sizeof(msg),
                     "%s of job %s started NVIDIA NCCL again after the failure at %s (%s of pod "
                     "%s)%s; lastError keeps it",
                     all ? "all pods" : "the refused pods", f->job, failed_at, why ? why : "?",
                     lpod ? lpod : "?", all ? "" : ", which the others waited for in NCCL's init");
        } else {
            snprintf(msg, sizeof(msg), "all %d pods of job %s started NVIDIA NCCL", f->nranks,
                     f->job);
        }
        agent_info("AGENT-NCCL-READY", "%s: Communicator %s is Ready", msg, ctx->comm_name);
        pthread_mutex_lock(&w->mu);
        if (!w->closed && ctx->health) {
            if (failed)
                agent_health_recover(ctx->health, f->nranks * per, msg);
            else
                agent_health_set_ready(ctx->health, f->nranks * per);
        }
        pthread_mutex_unlock(&w->mu);
        if (json_object_get(agent_json_path(r.body, "metadata.labels"), LABEL_ENDED))
            label_ended(w, 0);
    }
    agent_kube_resp_free(&r);
    json_decref(patch);
}

void agent_nccl_accepted(agent_ctx_t *ctx, int local_rank)
{
    pthread_mutex_lock(&ctx->mu);
    agent_nccl_watch_t *w = ctx->ncclw;
    pthread_mutex_unlock(&ctx->mu);
    int per = ctx->facts.local_size > 1 ? ctx->facts.local_size : 1;
    if (!w || local_rank >= per)
        return;
    if (local_rank < 0)
        local_rank = 0;
    pthread_mutex_lock(&w->mu);
    if (!w->accepted[local_rank]) {
        w->accepted[local_rank] = 1;
        w->naccepted++;
    }
    /* every local rank started (again: a restart in place starts them all): a generation */
    int now = w->naccepted == per;
    if (now) {
        memset(w->accepted, 0, sizeof(w->accepted));
        w->naccepted = 0;
        w->gen_s = (int64_t)time(NULL);
        if (++w->ngen > 1) { /* the ends of earlier generations are forgotten: room */
            int k = 0;
            for (int i = 0; i < w->nended; i++)
                if (w->ended[i].end_s + CLOCK_SLACK_S >= w->gen_s)
                    w->ended[k++] = w->ended[i];
            w->nended = k;
        }
    }
    pthread_mutex_unlock(&w->mu);
    if (now)
        record_pod(w);
}

static void *mark_thread(void *arg)
{
    mark_ended(arg);
    return NULL;
}

void agent_nccl_watch_refused(agent_ctx_t *ctx, const char stamp[17])
{
    agent_nccl_watch_start(ctx, stamp);
    pthread_mutex_lock(&ctx->mu);
    agent_nccl_watch_t *w = ctx->ncclw;
    pthread_mutex_unlock(&ctx->mu);
    pthread_t t;
    pthread_attr_t attr;
    if (!w || pthread_attr_init(&attr) != 0)
        return;
    /* not on the refused process's time: its reply goes out now */
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, mark_thread, w) != 0)
        mark_ended(w);
    pthread_attr_destroy(&attr);
}

void agent_nccl_watch_stop(agent_ctx_t *ctx)
{
    pthread_mutex_lock(&ctx->mu);
    agent_nccl_watch_t *w = ctx->ncclw;
    pthread_mutex_unlock(&ctx->mu);
    if (!w)
        return;
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ctx->facts.ns, ctx->facts.pod);
    for (int i = 0; i < STOP_LOOKS; i++) {
        agent_kube_resp_t r;
        int rc = agent_kube_request(ctx->kube, "GET", path, NULL, NULL,
                                    agent_now_ms() + STOP_LOOK_MS, &r);
        int done = rc == 0 && r.code == 404   ? judge(w, NULL)
                   : rc == 0 && r.code == 200 ? judge(w, r.body)
                                              : 0;
        agent_kube_resp_free(&r);
        if (done)
            break;
        if (i + 1 < STOP_LOOKS)
            agent_sleep_ms(STOP_LOOK_MS);
    }
    pthread_mutex_lock(&w->mu);
    w->closed = 1; /* from here on the threads touch nothing of the health writer's */
    pthread_mutex_unlock(&w->mu);
    atomic_store(&w->cancel, 1);
    for (int i = 0; i < THREADS; i++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += STOP_JOIN_S; /* a request under way has its own deadline */
        if (w->started[i] && pthread_timedjoin_np(w->threads[i], NULL, &ts) != 0) {
            agent_debug("AGENT-RANK-ENDED-WATCH", "a watch did not end within %d s", STOP_JOIN_S);
            pthread_detach(w->threads[i]);
        }
    }
}

json_t *agent_nccl_ended(agent_ctx_t *ctx, const json_t *req)
{
    colli_proto_nccl_ended_t out[COLLI_PROTO_NCCL_MAX_ENDED];
    int n = 0;
    long long since = colli_proto_nccl_ended_since(req);
    pthread_mutex_lock(&ctx->mu);
    agent_nccl_watch_t *w = ctx->ncclw;
    pthread_mutex_unlock(&ctx->mu);
    if (w) {
        pthread_mutex_lock(&w->mu);
        /* an end before the process's NCCL init may be the one that restarted it: not told
         * again (current) */
        for (int i = 0; i < w->nended && n < COLLI_PROTO_NCCL_MAX_ENDED; i++)
            if (current(w, i, since))
                out[n++] = w->ended[i].e;
        pthread_mutex_unlock(&w->mu);
    }
    return colli_proto_nccl_ended_reply(out, n);
}
