/* The agent's own Pod: identity, node, owner job, Multus network status, and rank / world size
 * from the Indexed Job, JobSet, PyTorchJob or explicit kcoll.io conventions. */
#define _GNU_SOURCE
#include "annotations.h"
#include "kube.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ANN_INDEX        "batch.kubernetes.io/job-completion-index"
#define LBL_RANK         "kcoll.io/rank"
#define LBL_WORLD        "kcoll.io/world-size"
#define LBL_JOB          "kcoll.io/job"
#define JS_NAME          "jobset.sigs.k8s.io/jobset-name"
#define JS_UID           "jobset.sigs.k8s.io/jobset-uid"
#define JS_GLOBAL_INDEX  "jobset.sigs.k8s.io/job-global-index"
#define JS_GLOBAL_REPL   "jobset.sigs.k8s.io/global-replicas"
#define MULTUS_STATUS    "k8s.v1.cni.cncf.io/network-status"
#define MULTUS_STATUS_V0 "k8s.v1.cni.cncf.io/networks-status"

/* Parse a non-negative decimal int; -1 if malformed. */
static int parse_index(const char *s)
{
    char *end = NULL;
    long v;
    if (!s || !s[0] || s[0] == '-' || s[0] == '+' || s[0] == ' ')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < 0 || v > INT_MAX / 2)
        return -1;
    return (int)v;
}

/* Annotation first, then the label of the same key. */
static const char *meta_value(const json_t *pod, const char *key)
{
    const char *v =
        json_string_value(json_object_get(agent_json_path(pod, "metadata.annotations"), key));
    if (!v)
        v = json_string_value(json_object_get(agent_json_path(pod, "metadata.labels"), key));
    return v;
}

static int malformed(agent_condition_t *cond, const char *key, const char *value, const char *what)
{
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "RankAnnotationMalformed");
    snprintf(cond->message, sizeof(cond->message),
             "%s is \"%s\": %s; it must be a non-negative integer (the job controller sets it: "
             "was the pod created by hand or edited?)",
             key, value, what);
    return -1;
}

static void read_owner(agent_pod_info_t *pi)
{
    json_t *refs = agent_json_path(pi->pod, "metadata.ownerReferences"), *r;
    size_t i;
    json_array_foreach(refs, i, r)
    {
        const char *kind = json_string_value(json_object_get(r, "kind"));
        if (!json_is_true(json_object_get(r, "controller")) || !kind)
            continue;
        if (strcmp(kind, "Job") == 0 || strcmp(kind, "PyTorchJob") == 0) {
            snprintf(pi->job_kind, sizeof(pi->job_kind), "%s", kind);
            agent_json_str(r, "apiVersion", pi->job_api_version, sizeof(pi->job_api_version));
            agent_json_str(r, "name", pi->job_name, sizeof(pi->job_name));
            snprintf(pi->owner_name, sizeof(pi->owner_name), "%s", pi->job_name);
            agent_json_str(r, "uid", pi->job_uid, sizeof(pi->job_uid));
            if (strcmp(kind, "Job") == 0)
                snprintf(pi->owner_job_name, sizeof(pi->owner_job_name), "%s", pi->job_name);
        }
    }
}

static int parse_network_status(agent_pod_info_t *pi)
{
    const char *keys[] = {MULTUS_STATUS, MULTUS_STATUS_V0};
    json_t *ann = agent_json_path(pi->pod, "metadata.annotations");
    for (int i = 0; i < 2; i++) {
        const char *v = json_string_value(json_object_get(ann, keys[i]));
        json_error_t jerr;
        if (!v)
            continue;
        pi->network_status = json_loads(v, 0, &jerr);
        if (!json_is_array(pi->network_status)) {
            agent_warn("AGENT-POD-NETSTATUS-BAD", "annotation %s is not a JSON array: %s", keys[i],
                       jerr.text);
            json_decref(pi->network_status);
            pi->network_status = NULL;
            continue;
        }
        if (i == 1)
            agent_info("AGENT-POD-NETSTATUS-DEPRECATED",
                       "using deprecated annotation %s (Multus older than 3.x?)", keys[i]);
        return 0;
    }
    return 0;
}

/* Rank and (when known) world size from the pod's conventions. */
static int derive_rank(agent_pod_info_t *pi, agent_facts_t *f, agent_condition_t *cond)
{
    const json_t *labels = agent_json_path(pi->pod, "metadata.labels");
    const char *rank = json_string_value(json_object_get(labels, LBL_RANK));
    const char *world = json_string_value(json_object_get(labels, LBL_WORLD));
    const char *idx = meta_value(pi->pod, ANN_INDEX);
    const char *gidx = meta_value(pi->pod, JS_GLOBAL_INDEX);
    const char *env_rank = secure_getenv("RANK");
    const char *env_world = secure_getenv("WORLD_SIZE");

    pi->completion_index = -1;
    pi->jobset_global_index = -1;
    if (rank || world) {
        int r = parse_index(rank), w = parse_index(world);
        if (!rank || !world) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "RankLabelsIncomplete");
            snprintf(cond->message, sizeof(cond->message),
                     "the pod has only one of the labels %s and %s; set both", LBL_RANK, LBL_WORLD);
            return -1;
        }
        if (r < 0)
            return malformed(cond, LBL_RANK, rank, "not a number");
        if (w <= 0)
            return malformed(cond, LBL_WORLD, world, "not a positive number");
        if (r >= w)
            return malformed(cond, LBL_RANK, rank, "not below kcoll.io/world-size");
        f->rank = r;
        pi->nranks = w;
        pi->rank_known = 1;
        return 0;
    }
    if (idx) {
        pi->completion_index = parse_index(idx);
        if (pi->completion_index < 0)
            return malformed(cond, ANN_INDEX, idx, "not a number");
    }
    if (gidx) {
        const char *repl = meta_value(pi->pod, JS_GLOBAL_REPL);
        pi->jobset_global_index = parse_index(gidx);
        if (pi->jobset_global_index < 0)
            return malformed(cond, JS_GLOBAL_INDEX, gidx, "not a number");
        if (repl && parse_index(repl) <= 0)
            return malformed(cond, JS_GLOBAL_REPL, repl, "not a positive number");
        if (pi->completion_index < 0)
            pi->completion_index = 0; /* one pod per Job */
        if (pi->jobset_global_index == 0) {
            f->rank = pi->completion_index;
            pi->rank_known = 1;
        }
        return 0; /* rank of later Jobs and world size need the Job's completions */
    }
    if (pi->completion_index >= 0) {
        const char *ws = json_string_value(json_object_get(
            agent_json_path(pi->pod, "metadata.annotations"), AGENT_ANN_WORLD_SIZE));
        f->rank = pi->completion_index;
        pi->rank_known = 1;
        if (parse_index(ws) > 0) /* else rank 0 names the problem; others learn it from rank 0 */
            pi->nranks = parse_index(ws);
        if (pi->nranks > 0 && f->rank >= pi->nranks) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "RankOutOfRange");
            snprintf(cond->message, sizeof(cond->message),
                     "completion index %d is not below the world size %d (annotation %s): was "
                     "the pod created by hand, or the annotation edited?",
                     f->rank, pi->nranks, AGENT_ANN_WORLD_SIZE);
            return -1;
        }
        return 0;
    }
    if (env_rank || env_world) {
        int r = parse_index(env_rank), w = parse_index(env_world);
        if (r < 0 || w <= 0 || r >= w) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "RankEnvMalformed");
            snprintf(cond->message, sizeof(cond->message),
                     "RANK=\"%s\" WORLD_SIZE=\"%s\" in the agent's environment are not a valid "
                     "rank and world size (PyTorchJob sets both; 0 <= RANK < WORLD_SIZE)",
                     env_rank ? env_rank : "", env_world ? env_world : "");
            return -1;
        }
        f->rank = r;
        pi->nranks = w;
        pi->rank_known = 1;
        return 0;
    }
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "RankUnknown");
    snprintf(cond->message, sizeof(cond->message),
             "cannot tell this pod's rank: no %s annotation (Indexed Job: set completionMode: "
             "Indexed), no JobSet labels (%s), no RANK/WORLD_SIZE env (PyTorchJob), no %s/%s "
             "labels",
             ANN_INDEX, JS_GLOBAL_INDEX, LBL_RANK, LBL_WORLD);
    return -1;
}

int agent_pod_read(agent_ctx_t *ctx, int64_t deadline, agent_pod_info_t *pi, agent_facts_t *f,
                   agent_condition_t *cond)
{
    const char *name = secure_getenv("POD_NAME"), *ns = secure_getenv("POD_NAMESPACE");
    const json_t *labels;
    const char *v;
    char path[700];
    agent_kube_resp_t r;

    memset(pi, 0, sizeof(*pi));
    if (!name || !name[0] || !ns || !ns[0]) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "DownwardAPIMissing");
        snprintf(cond->message, sizeof(cond->message),
                 "POD_NAME and POD_NAMESPACE must be set from the downward API (fieldRef "
                 "metadata.name / metadata.namespace); the kcoll webhook injects them");
        return -1;
    }
    snprintf(f->pod, sizeof(f->pod), "%s", name);
    snprintf(f->ns, sizeof(f->ns), "%s", ns);
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", ns, name);
    if (agent_kube_request(ctx->kube, "GET", path, NULL, NULL, deadline, &r) != 0 ||
        r.code != 200) {
        agent_condition_from_resp(cond, "reading own Pod", &r);
        if (r.code == 404) {
            snprintf(cond->type, sizeof(cond->type), "PodNotFound");
            snprintf(cond->message, sizeof(cond->message),
                     "pod %s/%s not found: POD_NAME/POD_NAMESPACE do not name this pod", ns, name);
        }
        agent_kube_resp_free(&r);
        return -1;
    }
    pi->pod = r.body;
    r.body = NULL;
    agent_json_str(agent_json_path(pi->pod, "metadata"), "uid", pi->pod_uid, sizeof(pi->pod_uid));
    agent_json_str(agent_json_path(pi->pod, "spec"), "nodeName", f->node, sizeof(f->node));
    read_owner(pi);
    labels = agent_json_path(pi->pod, "metadata.labels");
    if ((v = meta_value(pi->pod, JS_NAME))) {
        snprintf(pi->job_kind, sizeof(pi->job_kind), "JobSet");
        snprintf(pi->job_api_version, sizeof(pi->job_api_version), "jobset.x-k8s.io/v1alpha2");
        snprintf(pi->job_name, sizeof(pi->job_name), "%s", v);
        snprintf(pi->owner_name, sizeof(pi->owner_name), "%s", v);
        pi->job_uid[0] = '\0';
        if ((v = json_string_value(json_object_get(agent_json_path(pi->pod, "metadata.annotations"),
                                                   AGENT_ANN_JOB_UID))) ||
            (v = meta_value(pi->pod, JS_UID)))
            snprintf(pi->job_uid, sizeof(pi->job_uid), "%s", v);
    }
    if ((v = json_string_value(json_object_get(labels, LBL_JOB))))
        snprintf(pi->job_name, sizeof(pi->job_name), "%s", v);
    if (!pi->job_name[0]) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "JobUnknown");
        snprintf(cond->message, sizeof(cond->message),
                 "pod %s/%s belongs to no Job, JobSet or PyTorchJob and has no %s label: the "
                 "agent cannot tell which pods form one communicator",
                 ns, name, LBL_JOB);
        return -1;
    }
    snprintf(f->job, sizeof(f->job), "%s", pi->job_name);
    parse_network_status(pi);
    if (derive_rank(pi, f, cond) != 0)
        return -1;
    agent_info("AGENT-POD-READ", "pod %s/%s node=%s job=%s/%s%s%s index=%d", ns, name, f->node,
               pi->job_kind[0] ? pi->job_kind : "label", pi->job_name,
               pi->rank_known ? " rank=" : "", pi->rank_known ? "known" : "", pi->completion_index);
    return 0;
}

/* A fact the webhook could not read: its *-error annotation holds "Type: message". */
static int webhook_error(const char *value, const char *fallback_type, agent_condition_t *cond)
{
    size_t n = strspn(value, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
    cond->fatal = 1;
    if (n > 0 && n < sizeof(cond->type) && value[n] == ':' && value[n + 1] == ' ') {
        snprintf(cond->type, sizeof(cond->type), "%.*s", (int)n, value);
        value += n + 2;
    } else {
        snprintf(cond->type, sizeof(cond->type), "%s", fallback_type);
    }
    snprintf(cond->message, sizeof(cond->message), "%s (the kcoll webhook, at pod creation)",
             value);
    return -1;
}

int agent_pod_world_size(agent_pod_info_t *pi, agent_facts_t *f, agent_condition_t *cond)
{
    const json_t *ann = agent_json_path(pi->pod, "metadata.annotations");
    const char *ws = json_string_value(json_object_get(ann, AGENT_ANN_WORLD_SIZE));
    const char *err = json_string_value(json_object_get(ann, AGENT_ANN_WORLD_SIZE_ERROR));
    int world;

    if (pi->nranks > 0 && pi->rank_known)
        return 0;
    if (err && err[0])
        return webhook_error(err, "WorldSizeUnknown", cond);
    if (!ws) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "WorldSizeUnknown");
        snprintf(cond->message, sizeof(cond->message),
                 "cannot tell the world size: the pod has no %s annotation, which the kcoll "
                 "webhook writes from the owner Job (spec.completions) when it injects the agent; "
                 "was the pod created while the webhook was down (failurePolicy Ignore) or by an "
                 "older webhook? Recreate the pod, or set the labels %s and %s",
                 AGENT_ANN_WORLD_SIZE, LBL_RANK, LBL_WORLD);
        return -1;
    }
    world = parse_index(ws);
    if (world <= 0)
        return malformed(cond, AGENT_ANN_WORLD_SIZE, ws, "not a positive number");
    if (pi->jobset_global_index >= 0) {
        /* every Job of the JobSet has the same completions (the webhook checked) */
        const char *repl = meta_value(pi->pod, JS_GLOBAL_REPL);
        int jobs = parse_index(repl), completions;
        if (jobs <= 0 || world % jobs != 0) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "WorldSizeUnknown");
            snprintf(cond->message, sizeof(cond->message),
                     "JobSet pod with %s \"%s\" and world size %d: the world size must be the "
                     "number of Jobs times their completions",
                     JS_GLOBAL_REPL, repl ? repl : "", world);
            return -1;
        }
        completions = world / jobs;
        if (pi->completion_index >= completions) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "RankOutOfRange");
            snprintf(cond->message, sizeof(cond->message),
                     "completion index %d is not below the %d completions of each JobSet Job",
                     pi->completion_index, completions);
            return -1;
        }
        f->rank = pi->jobset_global_index * completions + pi->completion_index;
    }
    pi->nranks = world;
    pi->rank_known = 1;
    if (f->rank >= pi->nranks) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "RankOutOfRange");
        snprintf(cond->message, sizeof(cond->message), "rank %d is not below the world size %d",
                 f->rank, pi->nranks);
        return -1;
    }
    return 0;
}

void agent_pod_info_free(agent_pod_info_t *pi)
{
    json_decref(pi->pod);
    json_decref(pi->network_status);
    pi->pod = pi->network_status = NULL;
}
