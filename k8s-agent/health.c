/* Communicator health: the library's reports become a pending status update (phase,
 * conditions, readyRanks, unhealthy members, lastError) and Events, which one writer thread sends
 * (status.c, events.c) so that the library's report is acknowledged at once. One failure is
 * written by one agent: the reporter's own when it reports itself, else the lowest pod's that is
 * not the blamed one (writer_role). */
#define _GNU_SOURCE
#include "health_state.h"
#include "pod_ranks.h" /* agent_name_ok */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* GPU ranges as the library writes them ("0-3,6"): digits, '-' and ',', at most 95. */
static int gpus_ok(const char *t)
{
    size_t n = strlen(t);
    if (n > 95)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((t[i] >= '0' && t[i] <= '9') || t[i] == '-' || t[i] == ','))
            return 0;
    return 1;
}

/* Rank 0's placement, checked entry by entry against the world size, into h->placement (under
 * h->mu): 1 when it holds entries. An entry that fails a check is left out and counted. */
static int take_placement(agent_health_t *h, const colli_proto_report_t *rep, int world)
{
    json_t *list = json_array();
    int omitted = rep->places_more, bad = 0;
    for (int k = 0; list && k < rep->nplaces; k++) {
        const colli_proto_place_t *p = &rep->places[k];
        if (!agent_name_ok(p->pod, 1) || (p->node && p->node[0] && !agent_name_ok(p->node, 1)) ||
            (p->gpus && !gpus_ok(p->gpus)) || p->count > world || p->first > world - p->count) {
            bad++;
            continue;
        }
        json_t *o =
            json_pack("{ss si si}", "pod", p->pod, "firstRank", p->first, "ranks", p->count);
        if (o && p->node && p->node[0])
            json_object_set_new(o, "node", json_string(p->node));
        if (o && p->gpus && p->gpus[0])
            json_object_set_new(o, "gpus", json_string(p->gpus));
        json_array_append_new(list, o);
    }
    if (bad)
        agent_warn("AGENT-REPORT",
                   "library report: %d placement entries are not a pod, node, GPU list and rank "
                   "range of this job; not shown",
                   bad);
    if (!list || json_array_size(list) == 0) {
        json_decref(list);
        return 0;
    }
    json_decref(h->placement);
    h->placement = json_pack("{so si}", "placement", list, "placementOmitted", omitted + bad);
    return h->placement != NULL;
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
            int64_t cause = agent_cause_next_ms(h);
            if (h->stop || h->task.active || status_due(h) || ev == 0 || cause == 0)
                break;
            if (ev > 0 && ev < wait)
                wait = ev;
            if (cause > 0 && cause < wait)
                wait = cause;
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
            agent_status_member_task(h, &task);
        if (ctx->kube)
            agent_cause_run(h); /* before the status: a cause found is written with it */
        /* Events, then the status: in an outage each costs one bounded try per pass (5 s for
         * all Events, 10 s for the status), and neither waits behind the other's retries */
        if (ctx->kube)
            agent_events_flush(h->events);
        if (due && ctx->kube)
            agent_status_write(h);
        pthread_mutex_lock(&h->mu);
        if (h->stop && !stop_by) /* the stop came during this pass */
            stop_by = agent_now_ms() + 10000;
        /* at exit, a look at a blamed pod still due within stop_by is made */
        int64_t cause = agent_cause_next_ms(h);
        int looking = cause >= 0 && agent_now_ms() + cause < stop_by;
        if (h->stop && ((!status_due(h) && agent_events_next_ms(h->events) < 0 && !looking) ||
                        agent_now_ms() >= stop_by))
            break;
        if (h->stop && !status_due(h) && (agent_events_next_ms(h->events) > 0 || looking)) {
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
    agent_status_reset(&h->pend);
    h->events = agent_events_new(ctx);
    if (!h->events) {
        free(h);
        return -1;
    }
    agent_rfc3339_now(h->since, sizeof(h->since));
    h->cause_since_s = (int64_t)time(NULL);
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
    json_decref(h->placement);
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

void agent_health_set_ready(agent_health_t *h, int ready_ranks)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    snprintf(h->pend.phase, sizeof(h->pend.phase), "Ready");
    h->pend.ready_ranks = ready_ranks;
    h->pend.dirty = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

void agent_health_recover(agent_health_t *h, int ready_ranks, const char *msg)
{
    if (!h)
        return;
    pthread_mutex_lock(&h->mu);
    update_t *u = &h->pend;
    cond_t *healthy = &u->conds[COLLI_PROTO_COND_HEALTHY];
    if (u->dirty && strcmp(u->phase, "Failed") == 0) { /* a newer failure, not yet written */
        pthread_mutex_unlock(&h->mu);
        return;
    }
    snprintf(u->phase, sizeof(u->phase), "Ready");
    u->ready_ranks = ready_ranks;
    u->recovered = 1;
    snprintf(healthy->status, sizeof(healthy->status), "True");
    snprintf(healthy->reason, sizeof(healthy->reason), "Restarted");
    snprintf(healthy->message, sizeof(healthy->message), "%s", msg);
    u->dirty = 1;
    pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
}

/* Who writes a failure blamed on blamed_pod (-1: on no rank) into the Communicator: 0 this agent
 * now, k > 0 the k-th backup (it looks later whether it was written), -1 none. A failure a
 * process or agent reports of itself is written by its own agent (self); any other failure is
 * written by the agent of the lowest pod that is not the blamed one (rank 0's, else pod 1's), so
 * that N ranks reporting one failure cost one status patch and two Events, not N. Its next
 * BACKUPS agents check after BACKUP_DELAY_MS each, in case that agent is gone with its pod. */
static int writer_role(const agent_ctx_t *ctx, int blamed_pod, int self)
{
    int mine = ctx->facts.rank;
    if (self)
        return 0;
    if (blamed_pod == mine) /* a local rank's death, reported by its neighbours */
        return -1;
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
    if (rep->phase == COLLI_PROTO_PHASE_READY) {
        h->lib_ready = 1;
        h->cause_since_s = (int64_t)time(NULL); /* every rank was alive then */
    }
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
        /* of itself: no rank named, the agent's own report (pid 0), or its own rank named */
        int self = !waited && (!rep->has_err_rank || rep->pid <= 0 ||
                               (lr >= 0 && err_rank == ctx->facts.rank * (per > 1 ? per : 1) + lr));
        role = writer_role(ctx, err_rank < 0 ? -1 : err_rank / (per > 1 ? per : 1), self);
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
        if (err_rank < 0) { /* blamed on no rank: the message says who reported it */
            snprintf(msg, sizeof(msg), "rank %d (pod %s, node %s) reports: %s",
                     ctx->facts.rank * (per > 1 ? per : 1) + (lr > 0 ? lr : 0), ctx->facts.pod,
                     ctx->facts.node, m.message);
            snprintf(m.message, sizeof(m.message), "%s", msg);
        } else if (per > 1)
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
            if (!waited && u->nmembers < AGENT_MAX_UNHEALTHY &&
                !agent_status_has_member(u, err_rank))
                u->members[u->nmembers++] = m;
            if (!healthy->status[0]) { /* Healthy: False, unless the report said otherwise */
                snprintf(healthy->status, sizeof(healthy->status), "False");
                snprintf(healthy->reason, sizeof(healthy->reason), "MemberUnhealthy");
                snprintf(healthy->message, sizeof(healthy->message), "%s", msg);
            }
            update = 1;
        }
    }
    /* the library's Bootstrapping after the agent's own (or another local rank's) is no news */
    int again = rep->phase == COLLI_PROTO_PHASE_BOOTSTRAPPING && phase &&
                (strcmp(u->phase, phase) == 0 || (!u->phase[0] && strcmp(h->written, phase) == 0));
    int failing =
        rep->phase == COLLI_PROTO_PHASE_FAILED || rep->phase == COLLI_PROTO_PHASE_DEGRADED;
    if (phase && !again && role >= 0 && (is_root || failing)) {
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
            if (rep->nplaces > 0 && take_placement(h, rep, ctx->facts.nranks * (per > 0 ? per : 1)))
                u->placement = 1;
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
            agent_status_failure_events(h, ev_reason, msg, blamed_pod,
                                        blamed_own ? ctx->pod_uid : "");
        else if (role < 0)
            agent_info("AGENT-STATUS-DEFER",
                       "the failure is written to Communicator %s by the agent of a lower pod "
                       "(rank 0's, or the next one)",
                       ctx->comm_name);
    }
}
