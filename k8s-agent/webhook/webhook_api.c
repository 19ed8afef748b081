/* The webhook's Kubernetes API reads go through the agent's client (k8s-agent/kube_client.c):
 * in-cluster service-account credentials (token re-read on rotation), TLS always verified,
 * 429/5xx retried with back-off until the review's deadline. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include "kube.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct webhook_api {
    agent_kube_creds_t creds;
    agent_kube_t *kube;
};

static long api_get(void *arg, const char *path, int64_t deadline_ms, json_t **obj, char *err,
                    size_t errlen)
{
    struct webhook_api *a = arg;
    agent_kube_resp_t r;
    long code;
    if (agent_kube_request(a->kube, "GET", path, NULL, NULL, deadline_ms, &r) != 0) {
        snprintf(err, errlen, "%s", r.message[0] ? r.message : "no answer before the deadline");
        agent_kube_resp_free(&r);
        return 0;
    }
    code = r.code;
    if (code == 200) {
        *obj = r.body;
        r.body = NULL;
    } else {
        snprintf(err, errlen, "%s%s%s", r.reason, r.reason[0] ? ": " : "",
                 r.message[0] ? r.message : "(no message)");
    }
    agent_kube_resp_free(&r);
    return code;
}

int agent_webhook_api_open(const char *kubeconfig, const char *sa_dir,
                           struct agent_webhook_config *cfg)
{
    struct webhook_api *a;
    agent_kube_config_t kc = {
        .request_timeout_ms = cfg->api_timeout_ms > 0 ? cfg->api_timeout_ms : 3000,
        .backoff_base_ms = 100,
        .backoff_cap_ms = 1000,
        .user_agent = "coll-agent-webhook/" AGENT_VERSION,
    };
    char err[512] = "";
    const char *host = secure_getenv("KUBERNETES_SERVICE_HOST");
    int rc;

    cfg->api_get = NULL;
    cfg->api_arg = NULL;
    if ((kubeconfig == NULL || kubeconfig[0] == '\0') && (host == NULL || host[0] == '\0')) {
        agent_warn("AGENT-WEBHOOK-NO-API",
                   "no KUBERNETES_SERVICE_HOST and no --kubeconfig: injected pods get "
                   "*-error annotations instead of their Job's world size and their "
                   "Namespace's labels");
        return 1;
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL)
        return -1;
    if (kubeconfig != NULL && kubeconfig[0] != '\0')
        rc = agent_creds_kubeconfig(kubeconfig, &a->creds, err, sizeof(err));
    else
        rc = agent_creds_in_cluster(sa_dir ? sa_dir : DEFAULT_SA_DIR, &a->creds, err, sizeof(err));
    if (rc != 0) {
        agent_error("AGENT-WEBHOOK-API-FAIL",
                    "cannot load Kubernetes API credentials: %s; injected pods get *-error "
                    "annotations (is automountServiceAccountToken off?)",
                    err);
        agent_creds_free(&a->creds);
        free(a);
        return -1;
    }
    if (agent_kube_open(&a->creds, &kc, &a->kube) != 0) {
        agent_error("AGENT-WEBHOOK-API-FAIL", "cannot start the API client");
        agent_creds_free(&a->creds);
        free(a);
        return -1;
    }
    agent_info("AGENT-WEBHOOK-API", "server=%s credentials=%s read budget=%d ms", a->creds.server,
               a->creds.in_cluster ? "in-cluster" : kubeconfig, kc.request_timeout_ms);
    cfg->api_get = api_get;
    cfg->api_arg = a;
    return 0;
}

void agent_webhook_api_close(struct agent_webhook_config *cfg)
{
    struct webhook_api *a = cfg->api_arg;
    if (a == NULL)
        return;
    agent_kube_close(a->kube);
    agent_creds_free(&a->creds);
    free(a);
    cfg->api_get = NULL;
    cfg->api_arg = NULL;
}

/* ---- kcoll as NCCL: the opt-in of the pod's CollectiveTopology ---- */

#define TOPOLOGIES_PATH "/apis/kcoll.io/v1alpha1/collectivetopologies"

static void warn(json_t *warnings, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(json_t *warnings, const char *fmt, ...)
{
    char w[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w, sizeof(w), fmt, ap);
    va_end(ap);
    json_array_append_new(warnings, json_string(w));
}

/* Does topology item select the pod? 1, 0, or -1 with err (a malformed selector). */
static int selects(const json_t *item, const json_t *podlabels, const json_t *nslabels, char *err,
                   size_t errlen)
{
    const json_t *spec = json_object_get(item, "spec");
    int m =
        agent_selector_matches(json_object_get(spec, "namespaceSelector"), nslabels, err, errlen);
    if (m != 1)
        return m;
    return agent_selector_matches(json_object_get(spec, "podSelector"), podlabels, err, errlen);
}

int agent_webhook_topology_nccl(const struct agent_webhook_config *cfg, const char *ns,
                                const json_t *pod, const json_t *nslabels, json_t *warnings,
                                struct agent_webhook_nccl_pins *pins)
{
    if (cfg->api_get == NULL || ns == NULL)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const int64_t deadline = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000 +
                             (cfg->api_timeout_ms > 0 ? cfg->api_timeout_ms : 3000);
    json_t *list = NULL, *own = NULL;
    char err[512] = "";
    long code = cfg->api_get(cfg->api_arg, TOPOLOGIES_PATH, deadline, &list, err, sizeof(err));
    if (code != 200 || !json_is_object(list)) {
        warn(warnings,
             "kcoll: cannot list CollectiveTopologies (HTTP %ld: %s), so spec.nccl is not known: "
             "the pod keeps the NCCL it loads itself",
             code, err[0] ? err : "not a JSON object");
        json_decref(list);
        return 0;
    }
    if (nslabels == NULL)
        nslabels = own = json_pack("{s:s}", "kubernetes.io/metadata.name", ns);
    const json_t *podlabels = json_object_get(json_object_get(pod, "metadata"), "labels");
    const json_t *item, *match = NULL;
    size_t i;
    int nmatch = 0;
    json_array_foreach(json_object_get(list, "items"), i, item)
    {
        int m = selects(item, podlabels, nslabels, err, sizeof(err));
        if (m == 1) {
            nmatch++;
            match = item;
        }
    }
    const char *name =
        json_string_value(json_object_get(json_object_get(match, "metadata"), "name"));
    const char *nccl = json_string_value(json_object_get(json_object_get(match, "spec"), "nccl"));
    int rc = nmatch != 1 || nccl == NULL   ? AGENT_WEBHOOK_NCCL_NVIDIA
             : strcmp(nccl, "kcoll") == 0  ? AGENT_WEBHOOK_NCCL_KCOLL
             : strcmp(nccl, "native") == 0 ? AGENT_WEBHOOK_NCCL_NATIVE
                                           : AGENT_WEBHOOK_NCCL_NVIDIA;
    if (rc == AGENT_WEBHOOK_NCCL_NATIVE && pins != NULL)
        agent_webhook_nccl_pins_read(json_object_get(match, "spec"), pins);
    if (nmatch > 1)
        warn(warnings,
             "kcoll: %d CollectiveTopologies select this pod; spec.nccl is not applied (the "
             "sidecar names them)",
             nmatch);
    else if (rc == AGENT_WEBHOOK_NCCL_NATIVE)
        agent_info("AGENT-WEBHOOK-NCCL",
                   "CollectiveTopology %s says nccl: native: containers load NVIDIA NCCL's "
                   "environment plugin " AGENT_WEBHOOK_NCCL_ENV_PLUGIN,
                   name ? name : "?");
    else if (rc)
        agent_info("AGENT-WEBHOOK-NCCL",
                   "CollectiveTopology %s says nccl: kcoll: containers "
                   "preload " AGENT_WEBHOOK_NCCL_PRELOAD,
                   name ? name : "?");
    json_decref(own);
    json_decref(list);
    return rc;
}
