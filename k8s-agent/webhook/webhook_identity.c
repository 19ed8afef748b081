/* Who the injected pod's containers are to the API server and to the agent's socket.
 *
 * A pod has one serviceAccountName, and every container that mounts a token of it acts as it.
 * kcoll's agent role (which may read the namespace's job Secrets) is bound to one ServiceAccount,
 * --agent-service-account: a pod that names none (or "default") is put on that account with
 * automountServiceAccountToken false, the token volume the ServiceAccount admission plugin
 * already added (kube-api-access-*, before any webhook runs) is taken out of the training
 * containers, and a projected token of the account is mounted into the coll-agent sidecar only.
 * So the training containers hold no API credentials at all. A pod that names its own account
 * keeps it (a warning says what that costs) and the sidecar mounts the pod's token volume.
 *
 * The agent's socket admits the uids the pod's containers run as (COLL_AGENT_IPC_ALLOW_UIDS),
 * checked with SO_PEERCRED by the agent. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SA_DIR           "/var/run/secrets/kubernetes.io/serviceaccount"
#define ADMISSION_PREFIX "kube-api-access-" /* the ServiceAccount admission plugin's volume */
#define MAX_UIDS         16

static const char *str_at(const json_t *obj, const char *key)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

/* Does volume v project a ServiceAccount token? */
static int projects_token(const json_t *v)
{
    const json_t *sources = json_object_get(json_object_get(v, "projected"), "sources");
    size_t i;
    const json_t *s;
    json_array_foreach(sources, i, s)
    {
        if (json_object_get(s, "serviceAccountToken") != NULL)
            return 1;
    }
    return 0;
}

static int add_op(json_t *ops, const char *op, const char *path, json_t *value)
{
    json_t *o = value ? json_pack("{s:s, s:s, s:o}", "op", op, "path", path, "value", value)
                      : json_pack("{s:s, s:s}", "op", op, "path", path);
    return o ? json_array_append_new(ops, o) : -1;
}

/* Removes the mounts of volume name from every container of array key ("containers"),
 * highest index first so that earlier indices stay valid. */
static int unmount(json_t *ops, const json_t *spec, const char *key, const char *name)
{
    const json_t *cs = json_object_get(spec, key);
    for (size_t c = 0; c < json_array_size(cs); c++) {
        const json_t *mounts = json_object_get(json_array_get(cs, c), "volumeMounts");
        for (size_t i = json_array_size(mounts); i-- > 0;) {
            const char *n = str_at(json_array_get(mounts, i), "name");
            char path[160];
            if (n == NULL || strcmp(n, name) != 0)
                continue;
            snprintf(path, sizeof(path), "/spec/%s/%zu/volumeMounts/%zu", key, c, i);
            if (add_op(ops, "remove", path, NULL) != 0)
                return -1;
        }
    }
    return 0;
}

static json_t *token_volume(void)
{
    return json_pack("{s:s, s:{s:[{s:{s:s, s:i}}, {s:{s:s, s:[{s:s, s:s}]}},"
                     " {s:{s:[{s:s, s:{s:s, s:s}}]}}]}}",
                     "name", AGENT_WEBHOOK_TOKEN_VOLUME, "projected", "sources",
                     "serviceAccountToken", "path", "token", "expirationSeconds", 3607, "configMap",
                     "name", "kube-root-ca.crt", "items", "key", "ca.crt", "path", "ca.crt",
                     "downwardAPI", "items", "path", "namespace", "fieldRef", "apiVersion", "v1",
                     "fieldPath", "metadata.namespace");
}

/* The uids the pod's containers declare (runAsUser of the container, else of the pod); a
 * container that declares none runs as its image's user, root unless runAsNonRoot says
 * otherwise (then a warning: its uid is not known here). */
static int allowed_uids(const json_t *spec, json_t *warnings, char *out, size_t len)
{
    long uids[MAX_UIDS];
    int n = 0;
    const json_t *pod_uid = json_object_get(json_object_get(spec, "securityContext"), "runAsUser");
    const json_t *pod_nonroot =
        json_object_get(json_object_get(spec, "securityContext"), "runAsNonRoot");
    static const char *const keys[] = {"initContainers", "containers"};
    out[0] = '\0';
    for (size_t k = 0; k < 2; k++) {
        const json_t *cs = json_object_get(spec, keys[k]);
        for (size_t c = 0; c < json_array_size(cs); c++) {
            const json_t *ct = json_array_get(cs, c);
            const json_t *sc = json_object_get(ct, "securityContext");
            const json_t *u = json_object_get(sc, "runAsUser");
            const json_t *nonroot = json_object_get(sc, "runAsNonRoot");
            long uid;
            if (!json_is_integer(u))
                u = pod_uid;
            if (!json_is_boolean(nonroot))
                nonroot = pod_nonroot;
            if (json_is_integer(u)) {
                uid = (long)json_integer_value(u);
            } else if (json_is_true(nonroot)) {
                char w[400];
                snprintf(w, sizeof(w),
                         "kcoll: container %s runs as its image's non-root user, whose uid the "
                         "webhook cannot know, so the agent's socket will refuse it: set its "
                         "securityContext.runAsUser",
                         str_at(ct, "name") ? str_at(ct, "name") : "?");
                if (json_array_append_new(warnings, json_string(w)) != 0)
                    return -1;
                continue;
            } else {
                uid = 0;
            }
            if (uid < 0 || uid > 2147483647L)
                continue;
            int seen = 0;
            for (int i = 0; i < n; i++)
                seen |= uids[i] == uid;
            if (!seen && n < MAX_UIDS)
                uids[n++] = uid;
        }
    }
    for (int i = 0; i < n; i++) {
        size_t used = strlen(out);
        snprintf(out + used, len - used, "%s%ld", i ? "," : "", uids[i]);
    }
    return 0;
}

int agent_webhook_identity(const struct agent_webhook_config *cfg, const json_t *pod, json_t *ops,
                           json_t *warnings, json_t *sidecar, char *deny, size_t denylen)
{
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *volumes = json_object_get(spec, "volumes");
    const char *sa = str_at(spec, "serviceAccountName");
    json_t *mounts = json_object_get(sidecar, "volumeMounts");
    json_t *env = json_object_get(sidecar, "env");
    char uids[MAX_UIDS * 12];
    const char *agent_sa = cfg->agent_service_account;

    if (allowed_uids(spec, warnings, uids, sizeof(uids)) != 0)
        return -1;
    if (uids[0] != '\0' &&
        json_array_append_new(
            env, json_pack("{s:s, s:s}", "name", "COLL_AGENT_IPC_ALLOW_UIDS", "value", uids)) != 0)
        return -1;
    if (sa == NULL || sa[0] == '\0')
        sa = str_at(spec, "serviceAccount");
    if (sa == NULL || sa[0] == '\0')
        sa = "default";

    if (agent_sa == NULL || agent_sa[0] == '\0' ||
        (strcmp(sa, "default") != 0 && strcmp(sa, agent_sa) != 0)) {
        /* the pod's own account: the sidecar acts as it, with the token volume it has */
        char w[700];
        size_t i;
        const json_t *v;
        int mounted = 0;
        json_array_foreach(volumes, i, v)
        {
            const char *name = str_at(v, "name");
            if (name == NULL || !projects_token(v) ||
                strncmp(name, ADMISSION_PREFIX, strlen(ADMISSION_PREFIX)) != 0)
                continue;
            if (json_array_append_new(mounts, json_pack("{s:s, s:s, s:b}", "name", name,
                                                        "mountPath", SA_DIR, "readOnly", 1)) != 0)
                return -1;
            mounted = 1;
            break;
        }
        snprintf(w, sizeof(w),
                 "kcoll: the pod runs as ServiceAccount %s, so its coll-agent sidecar does too: "
                 "%sgrant %s the kcoll agent role (chart value rbac.agentServiceAccounts); every "
                 "container running as %s, this pod's training containers included, can then "
                 "read the namespace's kcoll job Secrets. Leave serviceAccountName unset to run "
                 "the sidecar alone as %s",
                 sa,
                 mounted ? ""
                         : "it has no API token (automountServiceAccountToken: false), "
                           "so the agent will fail; ",
                 sa, sa, agent_sa && agent_sa[0] ? agent_sa : "kcoll's account");
        return json_array_append_new(warnings, json_string(w));
    }

    /* the agent's account, its token in the sidecar only */
    size_t i;
    const json_t *v;
    json_array_foreach(volumes, i, v)
    {
        const char *name = str_at(v, "name");
        if (name != NULL && strcmp(name, AGENT_WEBHOOK_TOKEN_VOLUME) == 0) {
            snprintf(deny, denylen,
                     "the pod already has a volume named " AGENT_WEBHOOK_TOKEN_VOLUME
                     ", which kcoll injects; rename it or remove the label "
                     "" AGENT_WEBHOOK_INJECT_LABEL);
            return 0;
        }
        if (name != NULL && projects_token(v) &&
            strncmp(name, ADMISSION_PREFIX, strlen(ADMISSION_PREFIX)) != 0) {
            snprintf(deny, denylen,
                     "volume %s projects a ServiceAccount token, but kcoll runs this pod as "
                     "ServiceAccount %s, whose token may reach the coll-agent sidecar only: "
                     "remove the volume, or set the pod's own serviceAccountName (the sidecar "
                     "then acts as that account, which needs the kcoll agent role)",
                     name, agent_sa);
            return 0;
        }
    }
    for (size_t k = json_array_size(volumes); k-- > 0;) {
        const json_t *vol = json_array_get(volumes, k);
        const char *name = str_at(vol, "name");
        char path[64];
        if (name == NULL || !projects_token(vol))
            continue;
        if (unmount(ops, spec, "containers", name) != 0 ||
            unmount(ops, spec, "initContainers", name) != 0)
            return -1;
        snprintf(path, sizeof(path), "/spec/volumes/%zu", k);
        if (add_op(ops, "remove", path, NULL) != 0)
            return -1;
    }
    if (add_op(ops, "add", "/spec/serviceAccountName", json_string(agent_sa)) != 0 ||
        (json_object_get(spec, "serviceAccount") != NULL &&
         add_op(ops, "add", "/spec/serviceAccount", json_string(agent_sa)) != 0) ||
        add_op(ops, "add", "/spec/automountServiceAccountToken", json_false()) != 0 ||
        add_op(ops, "add", "/spec/volumes/-", token_volume()) != 0)
        return -1;
    if (json_is_true(json_object_get(spec, "shareProcessNamespace")) &&
        json_array_append_new(
            warnings,
            json_string("kcoll: shareProcessNamespace lets the training containers see the "
                        "coll-agent sidecar's processes; one with CAP_SYS_PTRACE or the "
                        "sidecar's uid could read its API token through /proc")) != 0)
        return -1;
    return json_array_append_new(mounts,
                                 json_pack("{s:s, s:s, s:b}", "name", AGENT_WEBHOOK_TOKEN_VOLUME,
                                           "mountPath", SA_DIR, "readOnly", 1));
}
