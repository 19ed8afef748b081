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

#define MAX_EVENTS_QUEUED  16
#define MAX_MSG            512
#define MAX_TRANSPORT      129 /* status.transport: at most 128 characters */
#define NCOND              COLLI_PROTO_NCOND
#define MAX_PATCH_ATTEMPTS 32

typedef struct {
    char type[16];
    char reason[64];
    char message[MAX_MSG];
} event_t;

typedef struct {
    char status[8]; /* "" = no update */
    char reason[64];
    char message[MAX_MSG];
} cond_t;

struct agent_health {
    agent_ctx_t *ctx;
    pthread_t thread;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    /* pending update (under mu) */
    int dirty;
    char phase[16];
    int ready_ranks;               /* -1 = no update */
    char transport[MAX_TRANSPORT]; /* rank 0's transports ("" = no update) */
    cond_t conds[NCOND];
    int has_error;
    int err_rank;
    char err_pod[254], err_node[254], err_message[MAX_MSG];
    int unhealthy; /* add err_rank to the unhealthy members */
    int lib_ready; /* this pod's library reported Ready: later failures are collective ones */
    event_t events[MAX_EVENTS_QUEUED];
    int nevents;
    json_t *cached;   /* last Communicator seen (writer thread only) */
    json_t *seed;     /* the Communicator as created (under mu): saves the first GET */
    char since[40];   /* RFC 3339 start of this agent: later failures belong to its bootstrap */
    char written[16]; /* the phase of the last status patch, sent or being sent (under mu) */
};

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

/* Build the merged status from the server's current one and the pending update. */
static json_t *merged_status(agent_health_t *h, const json_t *cur_status, const char *phase,
                             int ready_ranks, const char *transport, const cond_t *conds,
                             int has_error, int err_rank, const char *err_pod, const char *err_node,
                             const char *err_msg, int unhealthy)
{
    json_t *st = json_object(), *cur_conds = json_object_get(cur_status, "conditions");
    json_t *conditions = json_array(), *members = json_array(), *cur_members;
    const char *cur_phase = json_string_value(json_object_get(cur_status, "phase"));
    char now[40];
    long count = (long)json_integer_value(json_object_get(cur_status, "unhealthyCount"));
    size_t i;
    json_t *it;
    int listed = 0;

    agent_rfc3339_now(now, sizeof(now));
    if (phase[0]) {
        /* Failed is sticky until a new bootstrap (Bootstrapping) starts. The root says
         * Bootstrapping once its rendezvous is done, when a rank of this very bootstrap may have
         * failed already (a version pin fails at once): a failure stamped after this agent
         * started is this bootstrap's, and stays. (A new job's bootstrap clears the status.) */
        const char *err_time =
            json_string_value(json_object_get(json_object_get(cur_status, "lastError"), "time"));
        if (cur_phase && strcmp(cur_phase, "Failed") == 0 &&
            (strcmp(phase, "Ready") == 0 || strcmp(phase, "Degraded") == 0 ||
             (strcmp(phase, "Bootstrapping") == 0 && err_time && strcmp(err_time, h->since) >= 0)))
            phase = "Failed";
        json_object_set_new(st, "phase", json_string(phase));
    }
    if (ready_ranks >= 0)
        json_object_set_new(st, "readyRanks", json_integer(ready_ranks));
    if (transport[0])
        json_object_set_new(st, "transport", json_string(transport));
    for (int c = 0; c < NCOND; c++) {
        json_t *old = NULL;
        json_array_foreach(cur_conds, i, it)
        {
            const char *t = json_string_value(json_object_get(it, "type"));
            if (t && strcmp(t, colli_proto_cond_name((colli_proto_cond_t)c)) == 0)
                old = it;
        }
        if (conds[c].status[0]) {
            const char *ots = json_string_value(json_object_get(old, "status"));
            const char *olt = json_string_value(json_object_get(old, "lastTransitionTime"));
            json_array_append_new(
                conditions,
                json_pack("{ss ss ss ss ss}", "type", colli_proto_cond_name((colli_proto_cond_t)c),
                          "status", conds[c].status, "reason",
                          conds[c].reason[0] ? conds[c].reason : conds[c].status, "message",
                          conds[c].message, "lastTransitionTime",
                          (ots && olt && strcmp(ots, conds[c].status) == 0) ? olt : now));
        } else if (old) {
            json_array_append(conditions, old);
        }
    }
    json_object_set_new(st, "conditions", conditions);
    cur_members = json_object_get(cur_status, "unhealthyMembers");
    json_array_foreach(cur_members, i, it)
    {
        json_t *r = json_object_get(it, "rank");
        if (unhealthy && json_is_integer(r) && json_integer_value(r) == err_rank) {
            listed = 1;
            continue; /* replaced below */
        }
        if (json_array_size(members) < AGENT_MAX_UNHEALTHY)
            json_array_append(members, it);
    }
    if (unhealthy && !listed && ready_ranks < 0) {
        /* a member newly unhealthy is no longer a ready rank */
        json_t *cr = json_object_get(cur_status, "readyRanks");
        if (json_is_integer(cr) && json_integer_value(cr) > 0)
            json_object_set_new(st, "readyRanks", json_integer(json_integer_value(cr) - 1));
    }
    if (unhealthy) {
        if (json_array_size(members) < AGENT_MAX_UNHEALTHY)
            json_array_append_new(
                members, with_local(h,
                                    json_pack("{si ss ss ss ss}", "rank", err_rank, "pod", err_pod,
                                              "node", err_node, "message", err_msg, "time", now),
                                    err_rank));
        if (!listed)
            count++;
    }
    if (count < (long)json_array_size(members))
        count = (long)json_array_size(members);
    json_object_set_new(st, "unhealthyMembers", members);
    json_object_set_new(st, "unhealthyCount", json_integer(count));
    if (has_error)
        json_object_set_new(
            st, "lastError",
            with_local(h,
                       json_pack("{si ss ss ss ss}", "rank", err_rank, "pod", err_pod, "node",
                                 err_node, "message", err_msg, "time", now),
                       err_rank));
    else if (json_object_get(cur_status, "lastError"))
        json_object_set(st, "lastError", json_object_get(cur_status, "lastError"));
    (void)h;
    return st;
}

static void write_status(agent_health_t *h)
{
    agent_ctx_t *ctx = h->ctx;
    char path[800], phase[16], transport[MAX_TRANSPORT];
    cond_t conds[NCOND];
    int ready_ranks, has_error, err_rank, unhealthy;
    char err_pod[254], err_node[254], err_msg[MAX_MSG];
    int64_t deadline = agent_now_ms() + 30000;

    pthread_mutex_lock(&h->mu);
    snprintf(phase, sizeof(phase), "%s", h->phase);
    memcpy(conds, h->conds, sizeof(conds));
    ready_ranks = h->ready_ranks;
    snprintf(transport, sizeof(transport), "%s", h->transport);
    h->transport[0] = '\0';
    has_error = h->has_error;
    err_rank = h->err_rank;
    unhealthy = h->unhealthy;
    snprintf(err_pod, sizeof(err_pod), "%s", h->err_pod);
    snprintf(err_node, sizeof(err_node), "%s", h->err_node);
    snprintf(err_msg, sizeof(err_msg), "%s", h->err_message);
    h->dirty = 0;
    if (h->phase[0])
        snprintf(h->written, sizeof(h->written), "%s", h->phase);
    h->phase[0] = '\0';
    h->ready_ranks = -1;
    memset(h->conds, 0, sizeof(h->conds));
    h->has_error = h->unhealthy = 0;
    if (h->seed && !h->cached) {
        h->cached = h->seed;
        h->seed = NULL;
    }
    pthread_mutex_unlock(&h->mu);

    snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators/%s",
             ctx->facts.ns, ctx->comm_name);
    for (int attempt = 0; attempt < MAX_PATCH_ATTEMPTS && agent_remaining_ms(deadline) > 0;
         attempt++) {
        agent_kube_resp_t r;
        json_t *patch, *st;
        const char *rv;
        char spath[820];
        if (!h->cached) {
            /* re-read after a conflict with an empty merge patch of the status subresource
             * (the agent has patch, not get, on Communicators) */
            char rpath[820];
            snprintf(rpath, sizeof(rpath), "%s/status", path);
            if (agent_kube_read_by_patch(ctx->kube, rpath, deadline, &r) != 0 || r.code != 200) {
                agent_warn("AGENT-STATUS-FAIL", "reading Communicator %s: HTTP %ld %s",
                           ctx->comm_name, r.code, r.message);
                agent_kube_resp_free(&r);
                return;
            }
            h->cached = r.body;
        }
        rv = json_string_value(agent_json_path(h->cached, "metadata.resourceVersion"));
        st = merged_status(h, json_object_get(h->cached, "status"), phase, ready_ranks, transport,
                           conds, has_error, err_rank, err_pod, err_node, err_msg, unhealthy);
        patch = json_pack("{s{ss} so}", "metadata", "resourceVersion", rv ? rv : "", "status", st);
        snprintf(spath, sizeof(spath), "%s/status", path);
        if (agent_kube_request(ctx->kube, "PATCH", spath, patch, "application/merge-patch+json",
                               deadline, &r) != 0) {
            agent_warn("AGENT-STATUS-FAIL", "patching Communicator %s status: %s", ctx->comm_name,
                       r.message);
            json_decref(patch);
            agent_kube_resp_free(&r);
            return;
        }
        json_decref(patch);
        ctx->metrics.status_patches++;
        json_decref(h->cached);
        h->cached = NULL;
        if (r.code == 200) {
            h->cached = r.body;

            agent_info("AGENT-STATUS-PATCHED", "Communicator %s status: phase=%s", ctx->comm_name,
                       phase[0] ? phase : "(unchanged)");
            return;
        }
        if (r.code != 409) {
            agent_warn("AGENT-STATUS-FAIL", "patching Communicator %s status: HTTP %ld %s",
                       ctx->comm_name, r.code, r.message);
            agent_kube_resp_free(&r);
            return;
        }
        agent_debug("AGENT-STATUS-CONFLICT", "status patch conflict; re-reading");
        agent_kube_resp_free(&r);
        agent_kube_backoff(ctx->kube, attempt < 3 ? attempt : 3, deadline);
    }
    agent_warn("AGENT-STATUS-FAIL", "Communicator %s status: still conflicting after %d attempts",
               ctx->comm_name, MAX_PATCH_ATTEMPTS);
}

static void post_event(agent_ctx_t *ctx, const event_t *e, const char *kind, const char *api,
                       const char *name, const char *uid)
{
    char path[300], ename[400], now[40], nonce[9];
    unsigned char rnd[4] = {0};
    agent_kube_resp_t r;
    json_t *ev;
    agent_rfc3339_now(now, sizeof(now));
    if (agent_random_bytes(rnd, sizeof(rnd)) != 0)
        memset(rnd, 0, sizeof(rnd));
    colli_proto_hex_encode(rnd, sizeof(rnd), nonce);
    snprintf(ename, sizeof(ename), "%.240s.%s", name, nonce);
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ctx->facts.ns);
    ev = json_pack(
        "{ss ss s{ss ss} s{ss ss ss ss ss} ss ss ss s{ss ss} ss ss si ss ss}", "apiVersion", "v1",
        "kind", "Event", "metadata", "name", ename, "namespace", ctx->facts.ns, "involvedObject",
        "kind", kind, "apiVersion", api, "name", name, "namespace", ctx->facts.ns, "uid", uid,
        "reason", e->reason, "message", e->message, "type", e->type, "source", "component",
        "coll-agent", "host", ctx->facts.node, "firstTimestamp", now, "lastTimestamp", now, "count",
        1, "reportingComponent", "kcoll.io/coll-agent", "reportingInstance", ctx->facts.pod);
    if (!ev)
        return;
    if (agent_kube_request(ctx->kube, "POST", path, ev, NULL, agent_now_ms() + 10000, &r) != 0 ||
        r.code != 201)
        agent_warn("AGENT-EVENT-FAIL", "posting Event %s on %s %s: HTTP %ld %s", e->reason, kind,
                   name, r.code, r.message);
    else
        ctx->metrics.events_emitted++;
    agent_kube_resp_free(&r);
    json_decref(ev);
}

static void *writer(void *arg)
{
    agent_health_t *h = arg;
    agent_ctx_t *ctx = h->ctx;
    pthread_mutex_lock(&h->mu);
    for (;;) {
        struct timespec ts;
        event_t ev[MAX_EVENTS_QUEUED];
        int nev, dirty;
        while (!h->stop && !h->nevents && !(h->dirty && ctx->comm_name[0])) {
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_sec += 1;
            pthread_cond_timedwait(&h->cv, &h->mu, &ts);
        }
        nev = h->nevents;
        memcpy(ev, h->events, sizeof(event_t) * (size_t)nev);
        h->nevents = 0;
        dirty = h->dirty && ctx->comm_name[0];
        pthread_mutex_unlock(&h->mu);
        for (int i = 0; i < nev && ctx->kube; i++) {
            char pod[254], uid[64];
            pthread_mutex_lock(&ctx->mu);
            snprintf(pod, sizeof(pod), "%s", ctx->facts.pod);
            snprintf(uid, sizeof(uid), "%s", ctx->pod_uid);
            pthread_mutex_unlock(&ctx->mu);
            if (pod[0] && ctx->facts.ns[0])
                post_event(ctx, &ev[i], "Pod", "v1", pod, uid);
            if (ctx->comm_uid[0] && strcmp(ev[i].type, "Warning") == 0)
                post_event(ctx, &ev[i], "Communicator", "kcoll.io/v1alpha1", ctx->comm_name,
                           ctx->comm_uid);
        }
        if (dirty && ctx->kube)
            write_status(h);
        pthread_mutex_lock(&h->mu);
        if (h->stop && !h->nevents && !(h->dirty && ctx->comm_name[0]))
            break;
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
    h->ready_ranks = -1;
    agent_rfc3339_now(h->since, sizeof(h->since));
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    if (pthread_create(&h->thread, NULL, writer, h) != 0) {
        free(h);
        return -1;
    }
    h->started = 1;
    *out = h;
    return 0;
}

/* Flushes queued Events and status (bounded by their request deadlines), then stops. */
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

void agent_health_event(agent_ctx_t *ctx, const char *type, const char *reason, const char *message)
{
    agent_health_t *h = ctx->health;
    if (!h || !ctx->kube)
        return;
    pthread_mutex_lock(&h->mu);
    if (h->nevents < MAX_EVENTS_QUEUED) {
        event_t *e = &h->events[h->nevents++];
        snprintf(e->type, sizeof(e->type), "%s", type);
        snprintf(e->reason, sizeof(e->reason), "%s", reason);
        snprintf(e->message, sizeof(e->message), "%s", message);
        pthread_cond_signal(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}

void agent_health_set_phase(agent_health_t *h, const char *phase)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    snprintf(h->phase, sizeof(h->phase), "%s", phase);
    h->dirty = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void agent_health_report(agent_health_t *h, const colli_proto_report_t *rep)
{
    agent_ctx_t *ctx = h->ctx;
    const char *phase = colli_proto_phase_name(rep->phase);
    int is_root = ctx->facts.is_root, update = 0, per = ctx->facts.local_size;
    int own = 0; /* the error is of one of this pod's ranks */
    int lr = per > 1 ? agent_local_rank_of(ctx, rep->pid) : 0; /* the reporter's, -1 unknown */
    /* several ranks per pod: rank 0's pod takes Bootstrapping/Ready from rank 0's process only
     * (its other local ranks report the same bootstrap) */
    if (per > 1 && lr > 0)
        is_root = 0;
    char msg[MAX_MSG] = "";

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
    /* the library's Bootstrapping after the agent's own (or another local rank's) is no news */
    int again = rep->phase == COLLI_PROTO_PHASE_BOOTSTRAPPING && phase &&
                (strcmp(h->phase, phase) == 0 || (!h->phase[0] && strcmp(h->written, phase) == 0));
    if (phase && !again &&
        (is_root || rep->phase == COLLI_PROTO_PHASE_FAILED ||
         rep->phase == COLLI_PROTO_PHASE_DEGRADED)) {
        snprintf(h->phase, sizeof(h->phase), "%s", phase);
        update = 1;
        if (is_root && rep->phase == COLLI_PROTO_PHASE_READY) {
            h->ready_ranks =
                rep->has_ready_ranks ? rep->ready_ranks : ctx->facts.nranks * (per > 0 ? per : 1);
            /* the transports rank 0 uses: printable ASCII within the CRD's 128 characters */
            if (rep->transport != NULL && !transport_ok(rep->transport))
                agent_warn("AGENT-REPORT",
                           "library report: transport is not printable ASCII of "
                           "at most %d characters; not shown",
                           MAX_TRANSPORT - 1);
            else if (rep->transport != NULL)
                snprintf(h->transport, sizeof(h->transport), "%s", rep->transport);
            for (int k = 0; k < NCOND; k++) {
                snprintf(h->conds[k].status, sizeof(h->conds[k].status), "True");
                snprintf(h->conds[k].reason, sizeof(h->conds[k].reason), "BootstrapComplete");
                snprintf(h->conds[k].message, sizeof(h->conds[k].message),
                         "checked by rank 0 at bootstrap");
            }
        }
    }
    if (is_root && rep->has_ready_ranks) {
        h->ready_ranks = rep->ready_ranks;
        update = 1;
    }
    for (int k = 0; k < NCOND; k++) {
        const colli_proto_condition_t *c = &rep->conds[k];
        if (!c->type)
            continue;
        snprintf(h->conds[k].status, sizeof(h->conds[k].status), "%s", c->status);
        take_string(h->conds[k].reason, sizeof(h->conds[k].reason), c->reason);
        take_string(h->conds[k].message, sizeof(h->conds[k].message), c->message);
        update = 1;
    }
    if (rep->has_error) {
        cond_t *healthy = &h->conds[COLLI_PROTO_COND_HEALTHY];
        h->has_error = 1;
        h->unhealthy = 1;
        /* ranks count pods x ranksPerPod; a report without a rank is of this pod's first */
        h->err_rank = rep->has_err_rank ? rep->err_rank
                                        : ctx->facts.rank * (per > 1 ? per : 1) + (lr > 0 ? lr : 0);
        own = per > 1 ? h->err_rank / per == ctx->facts.rank : h->err_rank == ctx->facts.rank;
        take_string(h->err_pod, sizeof(h->err_pod), rep->err_pod);
        take_string(h->err_node, sizeof(h->err_node), rep->err_node);
        take_string(h->err_message, sizeof(h->err_message), rep->err_message);
        if (!h->err_message[0]) /* the CRD requires a non-empty message */
            snprintf(h->err_message, sizeof(h->err_message), "(the library gave no message)");
        if (!h->err_pod[0] && own)
            snprintf(h->err_pod, sizeof(h->err_pod), "%s", ctx->facts.pod);
        if (!h->err_node[0] && own)
            snprintf(h->err_node, sizeof(h->err_node), "%s", ctx->facts.node);
        if (per > 1)
            snprintf(msg, sizeof(msg), "rank %d (local rank %d of pod %s, node %s): %s",
                     h->err_rank, h->err_rank % per, h->err_pod, h->err_node, h->err_message);
        else
            snprintf(msg, sizeof(msg), "rank %d (pod %s, node %s): %s", h->err_rank, h->err_pod,
                     h->err_node, h->err_message);
        if (!healthy->status[0]) { /* Healthy: False, unless the report said otherwise */
            snprintf(healthy->status, sizeof(healthy->status), "False");
            snprintf(healthy->reason, sizeof(healthy->reason), "MemberUnhealthy");
            snprintf(healthy->message, sizeof(healthy->message), "%s", msg);
        }
        update = 1;
    }
    if (update) {
        h->dirty = 1;
        pthread_cond_signal(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
    if (msg[0]) {
        agent_warn("AGENT-LIBRARY-ERROR", "%s", msg);
        agent_health_event(ctx, "Warning", boot ? "KcollBootstrapFailed" : "KcollCollectiveFailed",
                           msg);
    }
}
