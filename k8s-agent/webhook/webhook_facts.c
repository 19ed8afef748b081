/* The facts the sidecar's least-privilege role may not read itself, read once at pod creation:
 * the owner Job's completions (world size of an Indexed Job), the JobSet's uid and world size,
 * and the Namespace's labels. They become pod annotations (k8s-agent/annotations.h). A read that
 * fails never blocks the pod: it becomes a *-error annotation ("Type: message") that the sidecar
 * turns into a named condition, and an admission warning. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include "text.h"

#include "annotations.h"
#include "pod_ranks.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define JS_NAME         "jobset.sigs.k8s.io/jobset-name"
#define JS_GLOBAL_REPL  "jobset.sigs.k8s.io/global-replicas"
#define JOBSET_API_PATH "/apis/jobset.x-k8s.io/v1alpha2/namespaces"

const char *const agent_webhook_fact_keys[] = {
    AGENT_ANN_WORLD_SIZE,
    AGENT_ANN_WORLD_SIZE_ERROR,
    AGENT_ANN_JOB_UID,
    AGENT_ANN_JOB_UID_ERROR,
    AGENT_ANN_NAMESPACE_LABELS,
    AGENT_ANN_NAMESPACE_LABELS_ERROR,
    NULL,
};

static const char *str_at(const json_t *obj, const char *key)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Label first, then the annotation of the same key (JobSet sets both in recent versions). */
static const char *meta_value(const json_t *meta, const char *key)
{
    const char *v = str_at(json_object_get(meta, "labels"), key);
    return v ? v : str_at(json_object_get(meta, "annotations"), key);
}

static int parse_count(const char *s)
{
    char *end = NULL;
    long v;
    if (s == NULL || s[0] < '0' || s[0] > '9')
        return -1;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || *end != '\0' || v > INT_MAX / 2)
        return -1;
    return (int)v;
}

static int int_at(const json_t *obj, const char *key, int dflt)
{
    const json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        return dflt;
    if (json_integer_value(v) < 0 || json_integer_value(v) > INT_MAX / 2)
        return -1;
    return (int)json_integer_value(v);
}

static int set_str(json_t *annots, const char *key, const char *value)
{
    return json_object_set_new(annots, key, json_string(value));
}

static int set_int(json_t *annots, const char *key, int value)
{
    char buf[24];
    snprintf(buf, sizeof(buf), "%d", value);
    return set_str(annots, key, buf);
}

/* "Type: message" into annots[key], and the same as an admission warning. */
static int set_error(json_t *annots, json_t *warnings, const char *key, const char *type,
                     const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static int set_error(json_t *annots, json_t *warnings, const char *key, const char *type,
                     const char *fmt, ...)
{
    char msg[900], full[1000], warn[1100];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(full, sizeof(full), "%s: %s", type, msg);
    snprintf(warn, sizeof(warn), "kcoll: %s (annotation %s)", full, key);
    /* an API error quotes its answer's bytes, and each snprintf may cut a character */
    agent_utf8_clean(full);
    agent_utf8_clean(warn);
    agent_warn("AGENT-WEBHOOK-FACTS-FAIL", "%s", full);
    if (set_str(annots, key, full) != 0)
        return -1;
    return json_array_append_new(warnings, json_string(warn));
}

/* A Kubernetes object name that may enter an API path: DNS-1123 (lowercase letters, digits, '-',
 * and with subdomain '.' too; starts and ends with a letter or digit; at most 63 characters for a
 * label, 253 for a subdomain). Nothing else reaches a path: no '/', '%', "..", no escapes. */
/* The condition type the sidecar reports for an API answer. */
static const char *api_error_type(long code)
{
    return code == 0     ? "APIUnavailable"
           : code == 401 ? "Unauthorized"
           : code == 403 ? "Forbidden"
           : code == 404 ? "NotFound"
                         : "APIError";
}

static const char *api_error_hint(long code)
{
    if (code == 403)
        return "; grant the webhook's ServiceAccount the chart's webhook ClusterRole";
    if (code == 0)
        return "; is the API server reachable from the webhook?";
    return "";
}

static int64_t deadline_after(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + (ms > 0 ? ms : 3000);
}

/* One GET through the configured reader; the body on 200, else NULL with *code set. */
static json_t *api_get(const struct agent_webhook_config *cfg, int64_t deadline, const char *path,
                       long *code, char *err, size_t errlen)
{
    json_t *obj = NULL;
    err[0] = '\0';
    *code = cfg->api_get(cfg->api_arg, path, deadline, &obj, err, errlen);
    if (*code == 200 && json_is_object(obj))
        return obj;
    json_decref(obj);
    if (*code == 200) {
        *code = 500;
        snprintf(err, errlen, "the answer is not a JSON object");
    }
    return NULL;
}

static int namespace_labels(const struct agent_webhook_config *cfg, int64_t deadline,
                            const char *ns, json_t *annots, json_t *warnings)
{
    char path[300], err[600];
    long code;
    json_t *obj;
    const json_t *labels;
    char *text;
    int rc;
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s", ns);
    obj = api_get(cfg, deadline, path, &code, err, sizeof(err));
    if (obj == NULL)
        return set_error(annots, warnings, AGENT_ANN_NAMESPACE_LABELS_ERROR, api_error_type(code),
                         "reading Namespace %s for its labels: HTTP %ld %s%s", ns, code, err,
                         api_error_hint(code));
    labels = json_object_get(json_object_get(obj, "metadata"), "labels");
    text =
        json_is_object(labels) ? json_dumps(labels, JSON_COMPACT | JSON_SORT_KEYS) : strdup("{}");
    json_decref(obj);
    if (text == NULL)
        return -1;
    rc = set_str(annots, AGENT_ANN_NAMESPACE_LABELS, text);
    free(text);
    return rc;
}

/* World size and uid of the JobSet from its spec: the sum over replicatedJobs of replicas x
 * completions, which must equal global-replicas x this Job's completions (the sidecar's rank
 * formula assumes every Job has the same completions). */
static int jobset_facts(const struct agent_webhook_config *cfg, int64_t deadline, const char *ns,
                        const char *name, const json_t *meta, int completions, json_t *annots,
                        json_t *warnings)
{
    char path[700], err[600];
    long code;
    const json_t *rjobs, *rj;
    const char *uid;
    size_t i;
    long world = 0;
    int jobs = parse_count(meta_value(meta, JS_GLOBAL_REPL));
    json_t *obj;
    int rc = 0;

    snprintf(path, sizeof(path), "%s/%s/jobsets/%s", JOBSET_API_PATH, ns, name);
    obj = api_get(cfg, deadline, path, &code, err, sizeof(err));
    if (obj == NULL) {
        if (set_error(annots, warnings, AGENT_ANN_JOB_UID_ERROR, api_error_type(code),
                      "reading JobSet %s/%s for its uid: HTTP %ld %s%s", ns, name, code, err,
                      api_error_hint(code)) != 0)
            return -1;
        /* the world size still follows from the pod's labels */
        if (jobs > 0)
            return set_int(annots, AGENT_ANN_WORLD_SIZE, jobs * completions);
        return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "WorldSizeUnknown",
                         "JobSet pod without a valid %s label", JS_GLOBAL_REPL);
    }
    uid = str_at(json_object_get(obj, "metadata"), "uid");
    if (uid != NULL && uid[0] != '\0')
        rc = set_str(annots, AGENT_ANN_JOB_UID, uid);
    rjobs = json_object_get(json_object_get(obj, "spec"), "replicatedJobs");
    json_array_foreach(rjobs, i, rj)
    {
        int replicas = int_at(rj, "replicas", 1);
        int c = int_at(json_object_get(json_object_get(rj, "template"), "spec"), "completions", 1);
        if (replicas < 0 || c < 0) {
            world = -1;
            break;
        }
        world += (long)replicas * c;
    }
    json_decref(obj);
    if (rc != 0)
        return -1;
    if (world <= 0 || world > INT_MAX / 2)
        return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "WorldSizeUnknown",
                         "JobSet %s/%s has no replicatedJobs with replicas and completions", ns,
                         name);
    if (jobs <= 0 || (long)jobs * completions != world)
        return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "WorldSizeUnknown",
                         "JobSet %s/%s runs %ld pods but %s is %d and this Job has %d "
                         "completions: kcoll needs the same completions in every replicated Job",
                         ns, name, world, JS_GLOBAL_REPL, jobs, completions);
    return set_int(annots, AGENT_ANN_WORLD_SIZE, (int)world);
}

int agent_webhook_pod_facts(const struct agent_webhook_config *cfg, const char *ns,
                            const json_t *pod, json_t *annots, json_t *warnings)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *refs = json_object_get(meta, "ownerReferences"), *ref;
    const char *job = NULL, *jobset = meta_value(meta, JS_NAME);
    char path[700], err[600];
    const json_t *spec;
    const char *mode;
    int completions, parallelism;
    int64_t deadline = deadline_after(cfg->api_timeout_ms);
    long code;
    json_t *obj;
    size_t i;

    if (cfg->api_get == NULL) {
        const char *why = "the webhook runs without Kubernetes API credentials";
        if (set_error(annots, warnings, AGENT_ANN_NAMESPACE_LABELS_ERROR, "APIUnavailable", "%s",
                      why) != 0)
            return -1;
        json_array_foreach(refs, i, ref)
        {
            if (json_is_true(json_object_get(ref, "controller")) &&
                strcmp(str_at(ref, "kind") ? str_at(ref, "kind") : "", "Job") == 0)
                return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "APIUnavailable",
                                 "%s", why);
        }
        return 0;
    }
    if (ns == NULL || ns[0] == '\0') {
        ns = str_at(meta, "namespace");
    }
    if (ns == NULL || ns[0] == '\0')
        return set_error(annots, warnings, AGENT_ANN_NAMESPACE_LABELS_ERROR, "APIError",
                         "the AdmissionReview names no namespace");
    if (!agent_name_ok(ns, 0))
        return set_error(annots, warnings, AGENT_ANN_NAMESPACE_LABELS_ERROR, "InvalidName",
                         "the namespace \"%.80s\" is not a DNS-1123 label; nothing was read", ns);
    if (namespace_labels(cfg, deadline, ns, annots, warnings) != 0)
        return -1;

    json_array_foreach(refs, i, ref)
    {
        const char *api = str_at(ref, "apiVersion");
        if (json_is_true(json_object_get(ref, "controller")) && api != NULL &&
            strcmp(api, "batch/v1") == 0 && str_at(ref, "kind") != NULL &&
            strcmp(str_at(ref, "kind"), "Job") == 0)
            job = str_at(ref, "name");
    }
    if (job == NULL)
        return 0; /* PyTorchJob (RANK/WORLD_SIZE env), kcoll.io labels, or a bare pod */
    if (!agent_name_ok(job, 1))
        return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "InvalidName",
                         "the pod's owner Job name \"%.80s\" is not a DNS-1123 subdomain; the "
                         "Job was not read",
                         job);
    if (jobset != NULL && jobset[0] != '\0' && !agent_name_ok(jobset, 1))
        return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "InvalidName",
                         "the pod's JobSet name \"%.80s\" is not a DNS-1123 subdomain; the "
                         "JobSet was not read",
                         jobset);

    snprintf(path, sizeof(path), "/apis/batch/v1/namespaces/%s/jobs/%s", ns, job);
    obj = api_get(cfg, deadline, path, &code, err, sizeof(err));
    if (obj == NULL)
        return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, api_error_type(code),
                         "reading Job %s/%s for its completions: HTTP %ld %s%s", ns, job, code, err,
                         api_error_hint(code));
    spec = json_object_get(obj, "spec");
    mode = str_at(spec, "completionMode");
    completions = int_at(spec, "completions", 0);
    parallelism = int_at(spec, "parallelism", 1);
    if (mode == NULL || strcmp(mode, "Indexed") != 0 || completions <= 0) {
        int rc = set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "JobNotIndexed",
                           "Job %s/%s has completionMode %s and completions %d: use "
                           "completionMode: Indexed with completions = the number of ranks",
                           ns, job, mode ? mode : "NonIndexed", completions);
        json_decref(obj);
        return rc;
    }
    json_decref(obj);
    if (parallelism < completions)
        return set_error(annots, warnings, AGENT_ANN_WORLD_SIZE_ERROR, "JobParallelismTooLow",
                         "Job %s/%s runs %d of %d ranks at once: every rank must run together; "
                         "set parallelism: %d",
                         ns, job, parallelism, completions, completions);
    if (jobset != NULL && jobset[0] != '\0')
        return jobset_facts(cfg, deadline, ns, jobset, meta, completions, annots, warnings);
    return set_int(annots, AGENT_ANN_WORLD_SIZE, completions);
}
