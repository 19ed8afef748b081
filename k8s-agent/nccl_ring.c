/*
 * spec.nccl: native, the next pod (docs/nccl-env.md, "A rank that ends"): a pod whose node died
 * has no agent left to write its end, so each agent watches the job's next pod (pod rank p
 * watches p+1, a ring; its name from the Communicator's status.ncclPods) and writes its ranks
 * gone once the node controller marks it not Ready while its containers ran (its node stopped
 * reporting, 40-50 s after it died), or when it was deleted (or disrupted) while it ran and,
 * 10 s later, the Communicator does not name it (its agent went with its node: a VM the cloud
 * removed, whose pods the pod garbage collector deletes before that mark). The rest of the
 * rank-end watch is nccl_watch.c.
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "health_state.h"
#include "nccl_watch.h"
#include "pod_ranks.h" /* agent_name_ok */

#define RING_BACKOFF_MS 30000 /* the next pod not recorded (yet): its record read this often */
#define LEFT_GRACE_MS   10000 /* the next pod left while it ran: its own agent's time to say so */

typedef struct {
    agent_nccl_watch_t *w;
    whose_t next;
    int gone;        /* it was deleted or ended: look for its successor in status.ncclPods */
    int64_t backoff; /* between reads of status.ncclPods (ms): up to 30 s while it stays gone */
    int64_t left_ms; /* when it was seen leaving while it ran (deleted, disrupted; 0: not) */
    int left_done;   /* its leaving was looked at (once per pod watched) */
    char left_cause[MAX_CAUSE];
} ring_t;

/* Pod rank q's record in the Communicator's status.ncclPods (this job's, not this pod), into
 * out: 1 found. */
int agent_nccl_ring_entry(const agent_nccl_watch_t *w, const json_t *comm, int q, whose_t *out)
{
    memset(out, 0, sizeof(*out));
    out->pod_rank = q;
    return agent_nccl_pods_entry(comm, w->stamp, q, out->pod, sizeof(out->pod), out->node,
                                 sizeof(out->node)) &&
           strcmp(out->pod, w->ctx->facts.pod) != 0;
}

/* The next pod's state: its node's loss reported once per mark. */
static int on_next(void *arg, const char *type, json_t *obj)
{
    ring_t *r = arg;
    char cause[MAX_CAUSE];
    if (agent_nccl_closed(r->w))
        return 1;
    const char *phase = json_string_value(agent_json_path(obj, "status.phase"));
    int deleted = strcmp(type, "DELETED") == 0;
    if (!r->left_done && !r->left_ms &&
        agent_pod_leaving(r->next.pod, obj, deleted, r->left_cause, sizeof(r->left_cause)))
        r->left_ms = agent_now_ms(); /* ring() gives its own agent time to write it */
    if (deleted || (phase && (strcmp(phase, "Failed") == 0 || strcmp(phase, "Succeeded") == 0))) {
        r->gone = 1; /* its own agent wrote an end; a replacement records itself anew */
        return 1;
    }
    if (r->left_ms)
        return 1;
    if (r->left_done || !agent_node_lost(r->next.pod, obj, cause, sizeof(cause)))
        return 0;
    const char *node = json_string_value(agent_json_path(obj, "spec.nodeName"));
    if (node && agent_name_ok(node, 1))
        snprintf(r->next.node, sizeof(r->next.node), "%s", node);
    /* once per mark: the words name the pod and the mark's time */
    agent_nccl_report_end(r->w, &r->next, r->w->next_key, sizeof(r->w->next_key), cause, "is gone",
                          cause);
    return 0;
}

typedef struct {
    const agent_nccl_watch_t *w;
    int q, found;
    whose_t e;
} ring_read_t;

static int on_ring_read(void *arg, const char *type, json_t *obj)
{
    ring_read_t *rr = arg;
    rr->found = strcmp(type, "DELETED") != 0 && agent_nccl_ring_entry(rr->w, obj, rr->q, &rr->e);
    return 1; /* the current state is all it asks */
}

/* One read of the job's Communicator, with the watch verb the agent has on it (its first event
 * is its state): cb gets it. 0 when read. */
static int read_comm(agent_nccl_watch_t *w, agent_watch_cb cb, void *arg, agent_kube_resp_t *resp)
{
    agent_ctx_t *ctx = w->ctx;
    char path[400], fsel[300];
    snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators",
             ctx->facts.ns);
    snprintf(fsel, sizeof(fsel), "metadata.name=%s", ctx->comm_name);
    return agent_kube_watch_labels(ctx->kube, path, fsel, NULL, &w->cancel,
                                   agent_now_ms() + LABEL_TIMEOUT_MS, cb, arg, resp);
}

typedef struct {
    const char *pod;
    int written;
} member_read_t;

static int on_member_read(void *arg, const char *type, json_t *obj)
{
    member_read_t *mr = arg;
    mr->written = strcmp(type, "DELETED") != 0 && agent_nccl_pods_member(obj, mr->pod);
    return 1;
}

/* The next pod left while it ran (deleted, being deleted, disrupted), LEFT_GRACE_MS ago. Its own
 * agent writes that, unless it went with its node: a machine the cloud removed, whose pods the
 * pod garbage collector deletes before the node controller's mark; a pod force-deleted on a dead
 * node; one stuck terminating there. So: written here when the Communicator names it nowhere. */
static void ring_left(ring_t *r)
{
    agent_nccl_watch_t *w = r->w;
    member_read_t mr = {.pod = r->next.pod};
    agent_kube_resp_t resp;
    char cause[MAX_CAUSE];
    r->left_ms = 0;
    r->left_done = 1;
    int rc = read_comm(w, on_member_read, &mr, &resp);
    agent_kube_resp_free(&resp);
    if (rc == 0 && mr.written)
        return;
    snprintf(cause, sizeof(cause), "%.600s; its agent wrote no end within %d s: node %s is down",
             r->left_cause, LEFT_GRACE_MS / 1000, r->next.node);
    agent_nccl_report_end(w, &r->next, w->next_key, sizeof(w->next_key), cause, "is gone", cause);
}

/* Learn the next pod from the Communicator (unlike the one it had, after it was gone), read with
 * the watch verb the agent has on it (its first event is its state): 0 when r->next names it,
 * -1 when the agent stops first. */
static int ring_resolve(ring_t *r, int q)
{
    agent_nccl_watch_t *w = r->w;
    agent_ctx_t *ctx = w->ctx;
    char old[254];
    int warned = 0;
    snprintf(old, sizeof(old), "%s", r->gone ? r->next.pod : "");
    for (;; r->backoff = r->backoff * 2 > RING_BACKOFF_MS ? RING_BACKOFF_MS : r->backoff * 2) {
        agent_kube_resp_t resp;
        ring_read_t rr = {.w = w, .q = q};
        if (r->gone && agent_nccl_nap(w, r->backoff)) /* gone: not read again at once */
            return -1;
        pthread_mutex_lock(&w->mu);
        if (!r->gone && w->ring_hint.pod[0]) { /* the own record's answer named it */
            rr.e = w->ring_hint;
            rr.found = 1;
        }
        pthread_mutex_unlock(&w->mu);
        if (!rr.found) {
            int rc = read_comm(w, on_ring_read, &rr, &resp);
            if (agent_nccl_refused(rc, &resp) && !warned++)
                agent_warn(
                    "AGENT-RING",
                    "reading Communicator %s for the next pod's name: HTTP %ld %s; read "
                    "again (at longest every %d s); until then a loss of its node is not written",
                    ctx->comm_name, resp.code, resp.message, RING_BACKOFF_MS / 1000);
            agent_kube_resp_free(&resp);
        }
        /* the same name again: the pod recreated under it (a PyTorchJob's), or still the ended
         * one, whose watch says so again; either way after the longest wait, which stays */
        int other = rr.found && strcmp(rr.e.pod, old) != 0;
        if (other || (rr.found && r->backoff == RING_BACKOFF_MS)) {
            if (other)
                r->backoff = 1000;
            r->next = rr.e;
            r->gone = 0;
            r->left_ms = 0;
            r->left_done = 0;
            agent_info("AGENT-RING",
                       "watching pod %s (pod rank %d, node %s): its ranks are written gone if its "
                       "node stops reporting",
                       rr.e.pod, q, rr.e.node);
            return 0;
        }
        if (!r->gone && agent_nccl_nap(w, r->backoff)) /* not recorded yet */
            return -1;
    }
}

void *agent_nccl_ring(void *arg)
{
    ring_t r = {.w = arg, .gone = 0, .backoff = 1000};
    agent_nccl_watch_t *w = r.w;
    agent_ctx_t *ctx = w->ctx;
    int pods = ctx->facts.nranks, q = (ctx->facts.rank + 1) % (pods > 0 ? pods : 1);
    int64_t wait = 0; /* after a refusal */
    char path[400], fsel[300], what[300];
    if (pods < 2 || ring_resolve(&r, q) != 0)
        return NULL;
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods", ctx->facts.ns);
    while (!agent_nccl_closed(w) && !atomic_load(&w->cancel) && !ctx->stop) {
        agent_kube_resp_t resp;
        int64_t t0 = agent_now_ms();
        snprintf(fsel, sizeof(fsel), "metadata.name=%s", r.next.pod);
        int rc = agent_kube_watch_labels(ctx->kube, path, fsel, NULL, &w->cancel, t0 + SLICE_MS,
                                         on_next, &r, &resp);
        snprintf(what, sizeof(what), "pod %s", r.next.pod);
        int no = agent_nccl_refusal(rc, &resp, &wait, "AGENT-RING", what,
                                    "a loss of its node is not written");
        agent_kube_resp_free(&resp);
        if (no) {
            if (agent_nccl_nap(w, wait))
                break;
            continue;
        }
        if (r.left_ms) {
            if (agent_nccl_nap(w, r.left_ms + LEFT_GRACE_MS - agent_now_ms()))
                break;
            ring_left(&r);
        }
        if (r.gone && ring_resolve(&r, q) != 0)
            break;
        if (rc != 0 && agent_now_ms() - t0 < 1000 && agent_nccl_nap(w, 1000))
            break;
    }
    return NULL;
}
