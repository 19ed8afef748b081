/* Kubernetes Events of the agent: queued, aggregated and retried.
 *
 * An Event is keyed by its object and reason: its name is derived from (kind, name, uid, reason,
 * type), so a repeat, from this agent or another one, bumps count and lastTimestamp (and takes
 * the newest message) of the one Event instead of creating a second. Occurrences that arrive
 * while one is queued are folded into it. A send that gets no answer (API outage, 5xx, 429 past
 * the request's deadline) stays queued and is retried with capped back-off until its deadline;
 * what cannot be kept (queue full, deadline passed, refused by the API server) is dropped,
 * counted in kcoll_agent_events_dropped_total and logged once per agent. */
#define _GNU_SOURCE
#include "kube.h"
#include "text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QUEUE_MAX      64     /* distinct Events waiting to be sent */
#define SENT_MAX       32     /* Events this agent knows the name, count and version of */
#define TRY_MS         5000   /* one send, its retries on transport errors included */
#define RETRY_FIRST_MS 1000   /* back-off between sends: 1 s, 2 s, 4 s, ... */
#define RETRY_CAP_MS   16000  /* ... at most 16 s */
#define KEEP_MS        300000 /* an Event not sent within 5 minutes of being raised is dropped */
#define BUMP_TRIES     4      /* a count bump that conflicts: re-read and try again */
#define LINGER_MS      500    /* occurrences within this of the first are sent as one */

typedef struct {
    char type[16];
    char reason[64];
    char message[512];
    char kind[16];
    char api[32];
    char name[254];
    char uid[64];
} ev_key_t;

typedef struct {
    ev_key_t e;
    long pending;   /* occurrences not yet counted on the server */
    char first[40]; /* RFC 3339 of the first and newest occurrence */
    char last[40];
    int64_t raised_ms; /* the first occurrence (KEEP_MS runs from here) */
    int64_t next_ms;   /* not before */
    int tries;
    int busy; /* being sent by the writer (no other copy is taken) */
} queued_t;

typedef struct {
    char ename[300]; /* the Event's name */
    long count;      /* as last written */
    char rv[64];     /* its resourceVersion then */
    int64_t used_ms;
} sent_t;

struct agent_events {
    agent_ctx_t *ctx;
    pthread_mutex_t mu;
    queued_t q[QUEUE_MAX];
    int n;
    sent_t sent[SENT_MAX]; /* writer thread only */
    char uid_pod[254];     /* the last pod whose uid was read, and its uid (writer thread) */
    char uid_val[64];
    int64_t hold_ms; /* the API server did not answer: no send before this */
    int dropped_logged;
};

int agent_kube_unanswered(int rc, const agent_kube_resp_t *r)
{
    return rc != 0 || r->code == 0 || r->code >= 500 || r->code == 429;
}

static int same_key(const ev_key_t *a, const ev_key_t *b)
{
    return strcmp(a->kind, b->kind) == 0 && strcmp(a->name, b->name) == 0 &&
           strcmp(a->reason, b->reason) == 0 && strcmp(a->type, b->type) == 0;
}

/* The Event's name: the object's name and a hash of what makes it the same Event. */
static void event_name(const ev_key_t *e, char *out, size_t len)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    const char *parts[] = {e->kind, e->name, e->uid, e->reason, e->type};
    for (size_t p = 0; p < sizeof(parts) / sizeof(parts[0]); p++) {
        for (const char *c = parts[p]; *c; c++) {
            h ^= (unsigned char)*c;
            h *= 1099511628211ULL;
        }
        h ^= 0xff; /* separator */
        h *= 1099511628211ULL;
    }
    snprintf(out, len, "%.230s.kcoll%016llx", e->name, (unsigned long long)h);
}

static void drop(agent_events_t *q, const ev_key_t *e, long n, const char *why)
{
    q->ctx->metrics.events_dropped += n;
    if (!q->dropped_logged) {
        q->dropped_logged = 1;
        agent_warn("AGENT-EVENT-DROPPED",
                   "Event %s on %s %s dropped (%s); later drops are counted in "
                   "kcoll_agent_events_dropped_total, not logged",
                   e->reason, e->kind, e->name, why);
    } else {
        agent_debug("AGENT-EVENT-DROPPED", "Event %s on %s %s dropped (%s)", e->reason, e->kind,
                    e->name, why);
    }
}

agent_events_t *agent_events_new(agent_ctx_t *ctx)
{
    agent_events_t *q = calloc(1, sizeof(*q));
    if (!q)
        return NULL;
    q->ctx = ctx;
    pthread_mutex_init(&q->mu, NULL);
    return q;
}

void agent_events_free(agent_events_t *q)
{
    if (!q)
        return;
    pthread_mutex_destroy(&q->mu);
    free(q);
}

void agent_events_add(agent_events_t *q, const char *type, const char *reason, const char *message,
                      const char *kind, const char *api, const char *name, const char *uid)
{
    ev_key_t k;
    char now[40];
    if (!q || !name || !name[0])
        return;
    memset(&k, 0, sizeof(k));
    snprintf(k.type, sizeof(k.type), "%s", type);
    snprintf(k.reason, sizeof(k.reason), "%s", reason);
    snprintf(k.message, sizeof(k.message), "%s", message);
    agent_utf8_clean(k.message); /* cut by the buffer, or quoting a parser */
    snprintf(k.kind, sizeof(k.kind), "%s", kind);
    snprintf(k.api, sizeof(k.api), "%s", api);
    snprintf(k.name, sizeof(k.name), "%s", name);
    snprintf(k.uid, sizeof(k.uid), "%s", uid ? uid : "");
    agent_rfc3339_now(now, sizeof(now));
    pthread_mutex_lock(&q->mu);
    for (int i = 0; i < q->n; i++) {
        queued_t *x = &q->q[i];
        if (!x->busy && same_key(&x->e, &k)) { /* folded into the queued one: newest message */
            x->pending++;
            snprintf(x->e.message, sizeof(x->e.message), "%s", k.message);
            snprintf(x->last, sizeof(x->last), "%s", now);
            pthread_mutex_unlock(&q->mu);
            return;
        }
    }
    if (q->n == QUEUE_MAX) {
        pthread_mutex_unlock(&q->mu);
        drop(q, &k, 1, "the queue of Events waiting for the API server is full");
        return;
    }
    queued_t *x = &q->q[q->n++];
    memset(x, 0, sizeof(*x));
    x->e = k;
    x->pending = 1;
    snprintf(x->first, sizeof(x->first), "%s", now);
    snprintf(x->last, sizeof(x->last), "%s", now);
    x->raised_ms = agent_now_ms();
    x->next_ms = x->raised_ms + LINGER_MS;
    pthread_mutex_unlock(&q->mu);
}

int64_t agent_events_next_ms(agent_events_t *q)
{
    int64_t next = -1, now = agent_now_ms();
    if (!q)
        return -1;
    pthread_mutex_lock(&q->mu);
    for (int i = 0; i < q->n; i++) {
        int64_t d = (q->q[i].next_ms > q->hold_ms ? q->q[i].next_ms : q->hold_ms) - now;
        if (d < 0)
            d = 0;
        if (next < 0 || d < next)
            next = d;
    }
    pthread_mutex_unlock(&q->mu);
    return next;
}

static sent_t *sent_find(agent_events_t *q, const char *ename, int make)
{
    sent_t *old = &q->sent[0];
    for (int i = 0; i < SENT_MAX; i++) {
        if (strcmp(q->sent[i].ename, ename) == 0)
            return &q->sent[i];
        if (q->sent[i].used_ms < old->used_ms)
            old = &q->sent[i];
    }
    if (!make)
        return NULL;
    memset(old, 0, sizeof(*old));
    snprintf(old->ename, sizeof(old->ename), "%s", ename);
    return old;
}

static void sent_update(sent_t *s, const json_t *ev)
{
    s->count = (long)json_integer_value(json_object_get(ev, "count"));
    agent_json_str(json_object_get(ev, "metadata"), "resourceVersion", s->rv, sizeof(s->rv));
    s->used_ms = agent_now_ms();
}

/* A Pod Event needs the pod's uid to show in `kubectl describe pod`: one GET when the caller
 * named another pod than its own. Without it the Event is still listed by name. */
static void resolve_uid(agent_events_t *q, ev_key_t *e, int64_t deadline)
{
    agent_kube_resp_t r;
    char path[400];
    if (e->uid[0] || strcmp(e->kind, "Pod") != 0)
        return;
    if (strcmp(q->uid_pod, e->name) == 0) {
        snprintf(e->uid, sizeof(e->uid), "%s", q->uid_val);
        return;
    }
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", q->ctx->facts.ns, e->name);
    if (agent_kube_request(q->ctx->kube, "GET", path, NULL, NULL, deadline, &r) == 0 &&
        r.code == 200)
        agent_json_str(json_object_get(r.body, "metadata"), "uid", e->uid, sizeof(e->uid));
    agent_kube_resp_free(&r);
    if (e->uid[0]) {
        snprintf(q->uid_pod, sizeof(q->uid_pod), "%s", e->name);
        snprintf(q->uid_val, sizeof(q->uid_val), "%s", e->uid);
    }
}

/* Refused (a 4xx other than a conflict): sending it again changes nothing. */
static int refused(char *why, size_t len, const char *what, const agent_kube_resp_t *r)
{
    snprintf(why, len, "refused %s: HTTP %ld %s", what, r->code, r->message);
    return -1;
}

/* Send one queued Event (n occurrences): 0 done, 1 try again later, -1 refused (why says so). */
static int send_one(agent_events_t *q, queued_t *x, long n, char *why, size_t why_len)
{
    agent_ctx_t *ctx = q->ctx;
    char path[400], one[800], ename[300];
    int64_t deadline = agent_now_ms() + TRY_MS;
    agent_kube_resp_t r;
    json_t *body;
    sent_t *s;

    resolve_uid(q, &x->e, deadline);
    event_name(&x->e, ename, sizeof(ename));
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/events", ctx->facts.ns);
    snprintf(one, sizeof(one), "%s/%s", path, ename);
    s = sent_find(q, ename, 0);
    if (!s) {
        body = json_pack("{ss ss s{ss ss} s{ss ss ss ss ss} ss ss ss s{ss ss} ss ss sI ss ss}",
                         "apiVersion", "v1", "kind", "Event", "metadata", "name", ename,
                         "namespace", ctx->facts.ns, "involvedObject", "kind", x->e.kind,
                         "apiVersion", x->e.api, "name", x->e.name, "namespace", ctx->facts.ns,
                         "uid", x->e.uid, "reason", x->e.reason, "message", x->e.message, "type",
                         x->e.type, "source", "component", "coll-agent", "host", ctx->facts.node,
                         "firstTimestamp", x->first, "lastTimestamp", x->last, "count",
                         (json_int_t)n, "reportingComponent", "kcoll.io/coll-agent",
                         "reportingInstance", ctx->facts.pod);
        if (!body)
            return -1;
        int rc = agent_kube_request(ctx->kube, "POST", path, body, NULL, deadline, &r);
        json_decref(body);
        if (rc == 0 && r.code == 201) {
            sent_update(sent_find(q, ename, 1), r.body);
            agent_kube_resp_free(&r);
            return 0;
        }
        if (agent_kube_unanswered(rc, &r)) {
            agent_debug("AGENT-EVENT-RETRY", "posting Event %s: HTTP %ld %s", x->e.reason, r.code,
                        r.message);
            agent_kube_resp_free(&r);
            return 1;
        }
        if (r.code != 409) { /* 403, 422: sending it again changes nothing */
            rc = refused(why, why_len, "creating it", &r);
            agent_kube_resp_free(&r);
            return rc;
        }
        agent_kube_resp_free(&r);
        s = sent_find(q, ename, 1); /* AlreadyExists: another agent (or run) raised it */
        s->rv[0] = '\0';
    }
    for (int t = 0; t < BUMP_TRIES; t++) {
        if (!s->rv[0]) { /* its count now: an empty merge patch reads it */
            if (agent_kube_unanswered(agent_kube_read_by_patch(ctx->kube, one, deadline, &r), &r)) {
                agent_kube_resp_free(&r);
                return 1;
            }
            if (r.code == 404) { /* expired meanwhile (Event TTL): raise it anew */
                agent_kube_resp_free(&r);
                memset(s, 0, sizeof(*s));
                return 1;
            }
            if (r.code != 200) {
                int bad = refused(why, why_len, "reading its count", &r);
                agent_kube_resp_free(&r);
                return bad;
            }
            sent_update(s, r.body);
            agent_kube_resp_free(&r);
        }
        body = json_pack("{s{ss} sI ss ss}", "metadata", "resourceVersion", s->rv, "count",
                         (json_int_t)(s->count + n), "lastTimestamp", x->last, "message",
                         x->e.message);
        if (!body)
            return -1;
        int rc = agent_kube_request(ctx->kube, "PATCH", one, body, "application/merge-patch+json",
                                    deadline, &r);
        json_decref(body);
        if (rc == 0 && r.code == 200) {
            sent_update(s, r.body);
            agent_kube_resp_free(&r);
            return 0;
        }
        if (rc == 0 && r.code == 404) {
            agent_kube_resp_free(&r);
            memset(s, 0, sizeof(*s));
            return 1;
        }
        if (agent_kube_unanswered(rc, &r)) {
            agent_kube_resp_free(&r);
            return 1;
        }
        if (r.code != 409) {
            rc = refused(why, why_len, "counting it (patch)", &r);
            agent_kube_resp_free(&r);
            return rc;
        }
        agent_kube_resp_free(&r);
        s->rv[0] = '\0'; /* another writer counted meanwhile: read and add again */
        agent_kube_backoff(ctx->kube, t, deadline);
    }
    return 1;
}

void agent_events_flush(agent_events_t *q)
{
    if (!q || !q->ctx->kube)
        return;
    for (;;) {
        queued_t *x = NULL, copy;
        char why[900] = "";
        int64_t now = agent_now_ms();
        long n;
        int rc;
        pthread_mutex_lock(&q->mu);
        for (int i = 0; i < q->n && !x && q->hold_ms <= now; i++)
            if (q->q[i].next_ms <= now)
                x = &q->q[i];
        if (!x) {
            pthread_mutex_unlock(&q->mu);
            return;
        }
        x->busy = 1;
        copy = *x;
        n = x->pending;
        pthread_mutex_unlock(&q->mu);
        rc = send_one(q, &copy, n, why, sizeof(why));
        pthread_mutex_lock(&q->mu);
        x->busy = 0;
        snprintf(x->e.uid, sizeof(x->e.uid), "%s", copy.e.uid);
        if (rc == 0) {
            q->ctx->metrics.events_emitted++;
            x->pending -= n;
        } else if (rc < 0) {
            ev_key_t k = x->e;
            long lost = x->pending;
            x->pending = 0;
            pthread_mutex_unlock(&q->mu);
            drop(q, &k, lost, why);
            pthread_mutex_lock(&q->mu);
        } else if (agent_now_ms() - x->raised_ms >= KEEP_MS) {
            ev_key_t k = x->e;
            long lost = x->pending;
            x->pending = 0;
            pthread_mutex_unlock(&q->mu);
            drop(q, &k, lost, "the API server did not take it within 5 minutes");
            pthread_mutex_lock(&q->mu);
        } else {
            int64_t d = RETRY_FIRST_MS << (x->tries < 4 ? x->tries : 4);
            x->tries++;
            x->next_ms = agent_now_ms() + (d < RETRY_CAP_MS ? d : RETRY_CAP_MS);
            /* the others would wait as long for no answer: one try per back-off for all */
            q->hold_ms = x->next_ms;
            if (x->tries == 1)
                agent_info("AGENT-EVENT-RETRY",
                           "Event %s on %s %s not delivered (the API server did not answer); "
                           "kept and retried with back-off for up to 5 minutes",
                           x->e.reason, x->e.kind, x->e.name);
        }
        if (x->pending <= 0) { /* delivered: the next occurrence is a new send */
            *x = q->q[--q->n];
        } else if (rc == 0) {
            x->tries = 0; /* more occurrences came while it was sent: count them too */
            x->next_ms = agent_now_ms();
        }
        pthread_mutex_unlock(&q->mu);
    }
}
