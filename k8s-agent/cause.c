/*
 * Why a rank ended, as Kubernetes saw it. When a failure is blamed on a rank that died, stopped
 * or cannot be reached, the agent that wrote it reads that rank's Pod (and, when the pod is not
 * Ready though its containers run, its Node) a few times over the next minute, until the objects
 * say why: a container OOMKilled, crashed or ended, the pod evicted, preempted or deleted, the
 * node NotReady. The answer goes into the member's and lastError's `cause` and one Event
 * (KcollFailureCause) on the Communicator: `kubectl describe communicator` then says both what
 * the survivors saw and why it happened. Nothing is written when the objects say nothing.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent.h"
#include "health_state.h"
#include "peer_ipc.h"
#include "pod_ranks.h" /* agent_name_ok */
#include "text.h"

/* When the pod is read after the failure was written (ms): the kubelet reports a container's end
 * within about a second; a node is NotReady after its grace period (40-50 s). */
static const int64_t cause_after_ms[] = {1000, 3000, 8000, 20000, 60000};
#define CAUSE_STEPS  ((int)(sizeof(cause_after_ms) / sizeof(cause_after_ms[0])))
#define CAUSE_TRY_MS 5000 /* one read, its retries included */
#define LAST_WORDS   200  /* characters kept of a container's termination message (its tail) */

static const char *str_at(const json_t *o, const char *dotted)
{
    return json_string_value(agent_json_path(o, dotted));
}

/* Append to out (always terminated, cut at len). */
static void add(char *out, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(char *out, size_t len, const char *fmt, ...)
{
    size_t n = strlen(out);
    if (n + 1 >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(out + n, len - n, fmt, ap);
    va_end(ap);
}

/* The pod's condition of this type (NULL: none); its status is the caller's to read. */
static const json_t *condition(const json_t *pod, const char *type)
{
    size_t i;
    const json_t *c;
    json_array_foreach(agent_json_path(pod, "status.conditions"), i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        if (t && strcmp(t, type) == 0)
            return c;
    }
    return NULL;
}

/* The memory limit of the pod's container of that name ("" if none). */
static const char *memory_limit(const json_t *pod, const char *name)
{
    size_t i;
    const json_t *c;
    json_array_foreach(agent_json_path(pod, "spec.containers"), i, c)
    {
        const char *n = json_string_value(json_object_get(c, "name"));
        const char *lim = str_at(c, "resources.limits.memory");
        if (n && name && strcmp(n, name) == 0 && lim)
            return lim;
    }
    return "";
}

/* The tail of a termination message (terminationMessagePath, or the log's tail with
 * FallbackToLogsOnError), on one line. */
static void last_words(const char *msg, char *out, size_t len)
{
    char buf[LAST_WORDS * 4];
    size_t n = 0, m = msg ? strlen(msg) : 0;
    while (m > 0 && (msg[m - 1] == '\n' || msg[m - 1] == ' ' || msg[m - 1] == '\r'))
        m--;
    size_t from = m > LAST_WORDS ? m - LAST_WORDS : 0;
    for (size_t i = from; i < m && n + 4 < sizeof(buf); i++) {
        char c = msg[i];
        if (c == '\n') {
            memcpy(buf + n, " | ", 3);
            n += 3;
        } else {
            buf[n++] = (c == '\t' || c == '\r') ? ' ' : c;
        }
    }
    buf[n] = '\0';
    agent_utf8_clean(buf);
    snprintf(out, len, "%s%s", from > 0 ? "..." : "", buf);
}

/* One container's end: how and when, in words. */
static void describe_end(const json_t *pod, const char *name, const json_t *term, int restarts,
                         char *out, size_t len)
{
    json_int_t code = json_integer_value(json_object_get(term, "exitCode"));
    const char *reason = json_string_value(json_object_get(term, "reason"));
    const char *at = json_string_value(json_object_get(term, "finishedAt"));
    if (agent_rfc3339_s(at) < 0)
        at = NULL; /* not a time: not repeated */
    const char *msg = json_string_value(json_object_get(term, "message"));
    int sig = code > 128 && code < 128 + 65 ? (int)(code - 128) : 0;

    if (reason && strcmp(reason, "OOMKilled") == 0) {
        const char *lim = memory_limit(pod, name);
        add(out, len, "container %s was OOMKilled (exit code %lld)%s%s: ", name, (long long)code,
            at ? " at " : "", at ? at : "");
        if (lim[0])
            add(out, len,
                "it reached its memory limit of %s; raise resources.limits.memory or use "
                "less memory per rank",
                lim);
        else
            add(out, len,
                "its node ran out of memory (it has no memory limit); give it a "
                "memory request and limit, or use less memory per rank");
    } else if (sig) {
        const char *abbrev = sigabbrev_np(sig);
        add(out, len, "container %s was killed by signal %d (SIG%s, exit code %lld)%s%s", name, sig,
            abbrev ? abbrev : "?", (long long)code, at ? " at " : "", at ? at : "");
        if (sig == SIGSEGV || sig == SIGBUS || sig == SIGABRT || sig == SIGILL || sig == SIGFPE)
            add(out, len, ": a crash in the program or a native library it loads");
        else if (sig == SIGKILL)
            add(out, len,
                ": not the kernel's OOM killer as far as the kubelet knows; "
                "another process, or a deadline that ended it");
    } else if (code == 0) {
        add(out, len,
            "container %s exited with code 0%s%s: the program ended while its peers "
            "still expected it in a collective (do all ranks make the same calls?)",
            name, at ? " at " : "", at ? at : "");
    } else {
        add(out, len, "container %s exited with code %lld", name, (long long)code);
        if (reason)
            add(out, len, " (%s)", reason);
        if (at)
            add(out, len, " at %s", at);
    }
    if (msg && msg[0]) {
        char words[LAST_WORDS * 4 + 4];
        last_words(msg, words, sizeof(words));
        add(out, len, "; its last words: \"%s\"", words);
    }
    if (restarts > 0)
        add(out, len, "; it restarted (%d restart%s so far)", restarts, restarts == 1 ? "" : "s");
}

/* The container end that explains this failure: one in effect now, or the last one of a
 * container that restarted, if it came after since_s (an earlier end belongs to an earlier
 * failure). A non-zero exit first. */
static int container_end(const json_t *pod, int64_t since_s, char *out, size_t len)
{
    const json_t *best = NULL, *best_cs = NULL;
    size_t i;
    const json_t *cs;
    json_array_foreach(agent_json_path(pod, "status.containerStatuses"), i, cs)
    {
        const json_t *t = agent_json_path(cs, "state.terminated");
        int64_t fin = agent_rfc3339_s(json_string_value(json_object_get(t, "finishedAt")));
        if (json_is_object(t) && fin >= 0 && fin + 1 < since_s)
            continue; /* it ended before the rank was Ready: a helper that completed, not it */
        if (!json_is_object(t)) {
            t = agent_json_path(cs, "lastState.terminated");
            fin = agent_rfc3339_s(json_string_value(json_object_get(t, "finishedAt")));
            if (!json_is_object(t) || fin < 0 || fin + 1 < since_s)
                continue;
        }
        if (!json_is_integer(json_object_get(t, "exitCode")))
            continue; /* the API server always sets it: this is no container end */
        int nonzero = json_integer_value(json_object_get(t, "exitCode")) != 0;
        if (!best || (nonzero && json_integer_value(json_object_get(best, "exitCode")) == 0)) {
            best = t;
            best_cs = cs;
        }
    }
    if (!best)
        return 0;
    /* a restarted container: how often (its end above is the last one) */
    int restarts = json_is_object(agent_json_path(best_cs, "state.terminated"))
                       ? 0
                       : (int)json_integer_value(json_object_get(best_cs, "restartCount"));
    describe_end(pod, str_at(best_cs, "name") ? str_at(best_cs, "name") : "?", best, restarts, out,
                 len);
    return 1;
}

/* The node controller's mark of a node that stopped reporting (40-50 s without its kubelet): it
 * sets the Ready condition of the node's pods False and nothing else. The kubelet never writes
 * that pair (a container not ready makes ContainersReady False too), except for a readiness gate
 * that is not met (reason ReadinessGatesNotReady). A phase Unknown (a lost node, to some
 * clusters) counts as Running. */
static int node_marked(const json_t *pod)
{
    const json_t *ready = condition(pod, "Ready"), *cr = condition(pod, "ContainersReady");
    const char *rs = json_string_value(json_object_get(ready, "status"));
    const char *crs = json_string_value(json_object_get(cr, "status"));
    const char *reason = json_string_value(json_object_get(ready, "reason"));
    const char *phase = str_at(pod, "status.phase");
    return rs && strcmp(rs, "False") == 0 && crs && strcmp(crs, "True") == 0 && phase &&
           (strcmp(phase, "Running") == 0 || strcmp(phase, "Unknown") == 0) &&
           !(reason && strcmp(reason, "ReadinessGatesNotReady") == 0);
}

int agent_node_lost(const char *pod_name, const json_t *pod, char *out, size_t len)
{
    out[0] = '\0';
    if (!node_marked(pod))
        return 0;
    const char *at =
        json_string_value(json_object_get(condition(pod, "Ready"), "lastTransitionTime"));
    const char *node = str_at(pod, "spec.nodeName");
    if (agent_rfc3339_s(at) < 0)
        at = NULL;
    add(out, len,
        "node %s stopped reporting: the node controller marked pod %s not Ready%s%s while its "
        "containers ran (Ready=False, ContainersReady=True): the machine is down or cut off from "
        "the control plane; its pods are evicted when their toleration of it ends (300 s by "
        "default)",
        node && agent_name_ok(node, 1) ? node : "?", pod_name, at ? " at " : "", at ? at : "");
    return 1;
}

int agent_pod_leaving(const char *pod_name, const json_t *pod, int deleted, char *out, size_t len)
{
    out[0] = '\0';
    const char *phase = str_at(pod, "status.phase");
    if (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0))
        return 0; /* it ended before: the kubelet, alive, said so, and so did its agent */
    const char *dts =
        json_string_value(json_object_get(condition(pod, "DisruptionTarget"), "status"));
    if (!deleted && !str_at(pod, "metadata.deletionTimestamp") &&
        !(dts && strcmp(dts, "True") == 0))
        return 0;
    /* how it leaves, not an earlier container end (its agent said that); a last state that says
     * nothing of its deletion: that it no longer exists */
    if (agent_pod_cause(pod_name, pod, INT64_MAX, 1, out, len) != 1)
        agent_pod_cause(pod_name, NULL, INT64_MAX, 1, out, len);
    return 1;
}

int agent_pod_cause(const char *pod_name, const json_t *pod, int64_t since_s, int silent, char *out,
                    size_t len)
{
    out[0] = '\0';
    if (!pod) {
        add(out, len,
            "pod %s no longer exists: it was deleted (kubectl delete, its job's "
            "controller, a drain or an eviction); kubectl get events --field-selector "
            "involvedObject.name=%s says by whom",
            pod_name, pod_name);
        return 1;
    }
    const char *deleting = str_at(pod, "metadata.deletionTimestamp");
    const char *reason = str_at(pod, "status.reason"), *message = str_at(pod, "status.message");
    const json_t *dt = condition(pod, "DisruptionTarget");
    const char *dts = json_string_value(json_object_get(dt, "status"));
    int disrupted = dts && strcmp(dts, "True") == 0;
    char ended[700] = "";
    int has_end = container_end(pod, since_s, ended, sizeof(ended));

    if (deleting || disrupted || reason) {
        if (deleting)
            add(out, len, "pod %s is being deleted (due by %s)", pod_name, deleting);
        else
            add(out, len, "pod %s", pod_name);
        if (disrupted) {
            const char *r = json_string_value(json_object_get(dt, "reason"));
            const char *m = json_string_value(json_object_get(dt, "message"));
            add(out, len, "%s %s%s%s", deleting ? ":" : " is disrupted:", r ? r : "?",
                m ? ": " : "", m ? m : "");
        } else if (reason) {
            add(out, len, "%s %s%s%s", deleting ? ":" : " failed:", reason, message ? ": " : "",
                message ? message : "");
        }
        if (has_end)
            add(out, len, "; %s", ended);
        return 1;
    }
    if (has_end && !silent) {
        add(out, len, "%s", ended);
        return 1;
    }
    /* Running, nothing ended, yet not Ready: the node controller marks a NotReady node's pods so */
    const json_t *ready = condition(pod, "Ready");
    const char *rs = json_string_value(json_object_get(ready, "status"));
    const char *phase = str_at(pod, "status.phase");
    if (agent_node_lost(pod_name, pod, out, len))
        return 1;
    if (rs && strcmp(rs, "True") != 0 && phase && strcmp(phase, "Running") == 0) {
        const char *at = json_string_value(json_object_get(ready, "lastTransitionTime"));
        add(out, len, "pod %s is not Ready%s%s though none of its containers ended", pod_name,
            at ? " since " : "", at ? at : "");
        return 2;
    }
    return 0;
}

int agent_node_cause(const char *node_name, const json_t *node, char *out, size_t len)
{
    out[0] = '\0';
    size_t i;
    const json_t *c;
    json_array_foreach(agent_json_path(node, "status.conditions"), i, c)
    {
        const char *t = json_string_value(json_object_get(c, "type"));
        const char *s = json_string_value(json_object_get(c, "status"));
        if (!t || strcmp(t, "Ready") != 0 || !s || strcmp(s, "True") == 0)
            continue;
        const char *r = json_string_value(json_object_get(c, "reason"));
        const char *m = json_string_value(json_object_get(c, "message"));
        const char *at = json_string_value(json_object_get(c, "lastTransitionTime"));
        add(out, len,
            "node %s is NotReady (Ready=%s%s%s%s%s)%s%s: the machine is down or cut off "
            "from the control plane; its pods are evicted when their toleration of it ends "
            "(300 s by default)",
            node_name, s, r ? ", " : "", r ? r : "", m ? ": " : "", m ? m : "", at ? " since " : "",
            at ? at : "");
        return 1;
    }
    return 0;
}

/* Does the pod's container of that name ask for GPUs (nvidia.com/gpu limits or requests)? */
static int gpu_container(const json_t *pod, const char *name)
{
    size_t i;
    const json_t *c;
    json_array_foreach(agent_json_path(pod, "spec.containers"), i, c)
    {
        const char *n = json_string_value(json_object_get(c, "name"));
        if (!n || (name && strcmp(n, name) != 0))
            continue;
        if (agent_json_path(c, "resources.limits") &&
            json_object_get(agent_json_path(c, "resources.limits"), "nvidia.com/gpu"))
            return 1;
        if (agent_json_path(c, "resources.requests") &&
            json_object_get(agent_json_path(c, "resources.requests"), "nvidia.com/gpu"))
            return 1;
    }
    return 0;
}

/* The pod with only the statuses of its GPU containers, where it has any (a copy; NULL: none, use
 * the pod): a helper container (a log shipper) that fails is not the training's end. */
static json_t *training_only(const json_t *pod)
{
    if (!gpu_container(pod, NULL))
        return NULL;
    json_t *copy = json_deep_copy(pod);
    json_t *list = agent_json_path(copy, "status.containerStatuses");
    for (size_t i = json_array_size(list); i-- > 0;)
        if (!gpu_container(pod,
                           json_string_value(json_object_get(json_array_get(list, i), "name"))))
            json_array_remove(list, i);
    return copy;
}

int agent_own_end(const char *pod_name, const json_t *whole, int64_t since_s, char *out, size_t len,
                  char *key, size_t keylen)
{
    json_t *gpus = training_only(whole);
    const json_t *pod = gpus ? gpus : whole;
    int r = 0;
    const char *deleting = str_at(pod, "metadata.deletionTimestamp");
    const char *reason = str_at(pod, "status.reason");
    const json_t *dt = condition(pod, "DisruptionTarget");
    const char *dts = json_string_value(json_object_get(dt, "status"));
    const char *bad = NULL;
    size_t i;
    const json_t *cs;
    out[0] = key[0] = '\0';
    if (deleting || reason || (dts && strcmp(dts, "True") == 0)) {
        snprintf(key, keylen, "pod %s", deleting ? deleting : reason ? reason : "disrupted");
        r = agent_pod_cause(pod_name, pod, since_s, 0, out, len) == 1;
        json_decref(gpus);
        return r;
    }
    /* the pod's containers (its sidecars are init containers): the last end of each */
    json_array_foreach(agent_json_path(pod, "status.containerStatuses"), i, cs)
    {
        const json_t *t = agent_json_path(cs, "state.terminated");
        if (!json_is_object(t))
            t = agent_json_path(cs, "lastState.terminated");
        const char *fin = json_string_value(json_object_get(t, "finishedAt"));
        int64_t fin_s = agent_rfc3339_s(fin);
        const char *name = str_at(cs, "name");
        if (!json_is_object(t) || fin_s < 0 || fin_s + 1 < since_s || !name ||
            !json_is_integer(json_object_get(t, "exitCode")) ||
            json_integer_value(json_object_get(t, "exitCode")) == 0)
            continue; /* running, an earlier end, or a clean exit (the job's normal end) */
        if (!bad || strcmp(fin, bad) > 0) {
            bad = fin;
            snprintf(key, keylen, "%.100s %s", name, fin);
        }
    }
    if (bad)
        r = agent_pod_cause(pod_name, pod, since_s, 0, out, len) == 1;
    json_decref(gpus);
    return r;
}

/* ---- the lookups (the writer thread) ---- */

/* Failures whose blamed rank may have ended: worth asking Kubernetes why. A mismatch, a version
 * or a usage error names a rank that is alive. */
static int may_have_ended(const char *reason)
{
    static const char *const ended[] = {"PeerFailed", "PeerUnreachable", "CollectiveTimeout",
                                        "BootstrapTimeout"};
    for (size_t i = 0; i < sizeof(ended) / sizeof(ended[0]); i++)
        if (reason && strcmp(reason, ended[i]) == 0)
            return 1;
    return 0;
}

/* May pod be read for a rank's end? A DNS-1123 name, not this agent's own pod, and shorter than
 * 127 characters: the library's 128-byte member field may have cut a longer one, and the 404 of
 * a cut name would say that a live pod was deleted. */
static int lookable(const agent_health_t *h, const char *pod)
{
    return agent_name_ok(pod, 1) && strlen(pod) < 127 && strcmp(pod, h->ctx->facts.pod) != 0;
}

void agent_cause_queue(agent_health_t *h, const member_t *m)
{
    if (m->rank < 0 || !may_have_ended(m->reason) || !lookable(h, m->pod) ||
        (m->node[0] && !agent_name_ok(m->node, 1)))
        return;
    pthread_mutex_lock(&h->mu);
    cause_task_t *free_slot = NULL;
    for (int i = 0; i < CAUSE_TASKS; i++) {
        cause_task_t *t = &h->causes[i];
        if ((t->active || t->done) && strcmp(t->pod, m->pod) == 0 &&
            t->since_s == h->cause_since_s) {
            pthread_mutex_unlock(&h->mu);
            return; /* asked already */
        }
        if (!t->active && !free_slot)
            free_slot = t;
    }
    if (free_slot) {
        memset(free_slot, 0, sizeof(*free_slot));
        free_slot->active = 1;
        free_slot->rank = m->rank;
        snprintf(free_slot->pod, sizeof(free_slot->pod), "%s", m->pod);
        snprintf(free_slot->node, sizeof(free_slot->node), "%s", m->node);
        free_slot->since_s = h->cause_since_s;
        free_slot->first_ms = agent_now_ms();
        free_slot->due_ms = free_slot->first_ms + cause_after_ms[0];
        pthread_cond_signal(&h->cv);
    }
    pthread_mutex_unlock(&h->mu);
}

int64_t agent_cause_next_ms(agent_health_t *h)
{
    int64_t next = -1, now = agent_now_ms();
    for (int i = 0; i < CAUSE_TASKS + PEER_WATCH; i++) {
        /* a stopping agent makes the looks for a failure's cause, not for a question */
        int active =
            i < CAUSE_TASKS ? h->causes[i].active : !h->stop && h->peers[i - CAUSE_TASKS].looking;
        if (!active)
            continue;
        int64_t due = i < CAUSE_TASKS ? h->causes[i].due_ms : h->peers[i - CAUSE_TASKS].due_ms;
        int64_t d = due > now ? due - now : 0;
        if (next < 0 || d < next)
            next = d;
    }
    return next;
}

/* Read one object: 1 found (*body), 0 not found (404), -1 no answer or another code (why). */
static int read_object(agent_ctx_t *ctx, const char *path, json_t **body, long *code)
{
    agent_kube_resp_t r;
    int rc =
        agent_kube_request(ctx->kube, "GET", path, NULL, NULL, agent_now_ms() + CAUSE_TRY_MS, &r);
    *code = rc == 0 ? r.code : 0;
    *body = NULL;
    if (rc == 0 && r.code == 200) {
        *body = r.body;
        r.body = NULL;
    }
    agent_kube_resp_free(&r);
    return *body ? 1 : (rc == 0 && r.code == 404) ? 0 : -1;
}

/* One look at a task's pod (and node): 1 when they say it ended (out says why), 2 when out says
 * what is known but not that (the pod runs not Ready, its node unknown), 0 nothing yet. */
static int look(agent_health_t *h, cause_task_t *t, int last, char *out, size_t len)
{
    agent_ctx_t *ctx = h->ctx;
    char path[600];
    json_t *obj;
    long code;
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ctx->facts.ns, t->pod);
    int got = read_object(ctx, path, &obj, &code);
    if (got < 0) {
        agent_debug("AGENT-CAUSE", "reading pod %s: HTTP %ld", t->pod, code);
        return 0;
    }
    int found = agent_pod_cause(t->pod, obj, t->since_s, t->silent, out, len);
    const char *node = str_at(obj, "spec.nodeName");
    char node_name[254];
    snprintf(node_name, sizeof(node_name), "%s", node && agent_name_ok(node, 1) ? node : t->node);
    json_decref(obj);
    if (found != 2)
        return found;
    if (!t->node_denied && node_name[0]) {
        char nmsg[MAX_MSG];
        snprintf(path, sizeof(path), "/api/v1/nodes/%s", node_name);
        got = read_object(ctx, path, &obj, &code);
        if (got > 0 && agent_node_cause(node_name, obj, nmsg, sizeof(nmsg))) {
            json_decref(obj);
            snprintf(out, len, "%s", nmsg);
            return 1;
        }
        json_decref(obj);
        if (code == 401 || code == 403)
            t->node_denied = 1;
    }
    if (t->node_denied) { /* all there is to know: say it now (not that it ended) */
        add(out, len,
            ": is its node %s down? (the agent may not read Nodes to tell: the Helm "
            "value rbac.readNodes=true lets it)",
            node_name);
        return 2;
    }
    return last ? 2 : 0; /* the last look: the pod still runs, not Ready (a readiness probe?) */
}

/* The reads the "peer" questions asked for (writer thread). */
static void peers_run(agent_health_t *h)
{
    for (int i = 0; i < PEER_WATCH; i++) {
        pthread_mutex_lock(&h->mu);
        peer_watch_t *w = &h->peers[i];
        int due = w->used && w->looking && w->due_ms <= agent_now_ms() && !h->stop;
        cause_task_t t = {.rank = w->rank,
                          .node_denied = w->node_denied,
                          .since_s = h->cause_since_s,
                          .silent = 1};
        snprintf(t.pod, sizeof(t.pod), "%s", w->pod);
        snprintf(t.node, sizeof(t.node), "%s", w->node);
        pthread_mutex_unlock(&h->mu);
        if (!due)
            continue;
        char cause[MAX_CAUSE];
        int found = look(h, &t, 0, cause, sizeof(cause));
        pthread_mutex_lock(&h->mu);
        int news = 0;
        if (w->used && strcmp(w->pod, t.pod) == 0) { /* not forgotten meanwhile */
            w->looking = 0;
            w->looked_ms = agent_now_ms();
            w->node_denied = t.node_denied;
            news = found == 1 && !w->ended;
            w->ended = found == 1;
            if (w->ended)
                snprintf(w->cause, sizeof(w->cause), "%s", cause);
        }
        pthread_mutex_unlock(&h->mu);
        if (news)
            agent_info("AGENT-PEER-ENDED",
                       "rank %d (pod %s), which a rank of this pod waits on, ended: %s", t.rank,
                       t.pod, cause);
    }
}

/* The watch of pod (a new one, replacing the least recently asked, if none; under mu). */
static peer_watch_t *peer_watch(agent_health_t *h, const colli_proto_peer_t *q, int64_t now)
{
    peer_watch_t *w = NULL;
    for (int i = 0; i < PEER_WATCH; i++) {
        peer_watch_t *c = &h->peers[i];
        if (c->used && now - c->asked_ms >= PEER_FORGET_MS && !c->looking)
            c->used = 0;
        if (c->used && strcmp(c->pod, q->pod) == 0)
            return c;
        if (!w || (w->used && (!c->used || c->asked_ms < w->asked_ms)))
            w = c;
    }
    /* every watch is being read, or was asked about within PEER_FRESH_MS: asked again, it is
     * answered. So a process that names ever new pods costs at most PEER_WATCH reads every
     * PEER_FRESH_MS, whatever it sends. */
    if (w->used && (w->looking || now - w->asked_ms < PEER_FRESH_MS))
        return NULL;
    memset(w, 0, sizeof(*w));
    w->used = 1;
    w->rank = q->rank;
    snprintf(w->pod, sizeof(w->pod), "%s", q->pod);
    snprintf(w->node, sizeof(w->node), "%s", q->node && agent_name_ok(q->node, 1) ? q->node : "");
    return w;
}

json_t *agent_peer_question(agent_health_t *h, const json_t *req)
{
    colli_proto_peer_msg_t q, a;
    char err[256], causes[COLLI_PROTO_MAX_PEERS][MAX_CAUSE];
    memset(&a, 0, sizeof(a));
    if (colli_proto_peer_request_parse(req, &q, err, sizeof(err)) != 0)
        return NULL;
    if (!h || !h->ctx->kube) /* nobody to ask (standalone): nothing is known */
        return colli_proto_peer_reply(&a);
    int64_t now = agent_now_ms();
    pthread_mutex_lock(&h->mu);
    for (int i = 0; i < q.npeers; i++) {
        if (!lookable(h, q.peers[i].pod))
            continue;
        peer_watch_t *w = peer_watch(h, &q.peers[i], now);
        if (!w) {
            a.pending = 1;
            continue;
        }
        w->asked_ms = now;
        int fresh = w->looked_ms > 0 && now - w->looked_ms < PEER_FRESH_MS;
        if (w->ended && fresh && !w->looking) { /* (a pod of that name may come again) */
            snprintf(causes[a.npeers], sizeof(causes[0]), "%s", w->cause);
            a.peers[a.npeers].rank = q.peers[i].rank;
            a.peers[a.npeers].cause = causes[a.npeers];
            a.npeers++;
        } else if (w->looking || !fresh) {
            if (!w->looking) {
                w->looking = 1;
                w->due_ms = now;
            }
            a.pending = 1;
        }
    }
    if (a.pending)
        pthread_cond_signal(&h->cv);
    pthread_mutex_unlock(&h->mu);
    return colli_proto_peer_reply(&a);
}

void agent_cause_run(agent_health_t *h)
{
    agent_ctx_t *ctx = h->ctx;
    peers_run(h);
    for (int i = 0; i < CAUSE_TASKS; i++) {
        pthread_mutex_lock(&h->mu);
        cause_task_t t = h->causes[i];
        int due = t.active && t.due_ms <= agent_now_ms();
        pthread_mutex_unlock(&h->mu);
        if (!due)
            continue;
        char cause[MAX_CAUSE];
        int last = t.step + 1 >= CAUSE_STEPS;
        int found = look(h, &t, last, cause, sizeof(cause));
        pthread_mutex_lock(&h->mu);
        cause_task_t *s = &h->causes[i];
        s->node_denied = t.node_denied;
        s->step = t.step + 1;
        if (found || last) {
            s->active = 0;
            s->done = 1;
        } else {
            s->due_ms = s->first_ms + cause_after_ms[s->step];
        }
        if (found)
            agent_status_add_cause(&h->pend, t.pod, cause);
        pthread_mutex_unlock(&h->mu);
        if (!found) {
            if (last)
                agent_info("AGENT-CAUSE", "pod %s (rank %d) says nothing of why it failed", t.pod,
                           t.rank);
            continue;
        }
        char msg[MAX_MSG];
        snprintf(msg, sizeof(msg), "rank %d (pod %s, node %s): %s", t.rank, t.pod, t.node, cause);
        agent_info("AGENT-CAUSE", "%s", msg);
        if (ctx->comm_uid[0])
            agent_events_add(h->events, "Warning", "KcollFailureCause", msg, "Communicator",
                             "kcoll.io/v1alpha1", ctx->comm_name, ctx->comm_uid);
    }
}
