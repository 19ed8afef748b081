/* AdmissionReview (admission.k8s.io/v1) in, JSONPatch (RFC 6902) out.
 *
 * The patch is computed against the pod exactly as the API server sent it: arrays that are absent
 * are added whole ("add /spec/volumes [...]"), arrays that exist are appended to ("/-"), so the
 * patch applies cleanly to a pod with or without initContainers, volumes or env. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include "text.h"

#include "annotations.h"
#include "pod_ranks.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Per-review state while the patch is built. */
struct mutation {
    const struct agent_webhook_config *cfg;
    const char *ns;   /* request.namespace */
    json_t *ops;      /* the JSONPatch array */
    json_t *warnings; /* AdmissionResponse.warnings */
    int nccl;         /* the pod's CollectiveTopology's spec.nccl: AGENT_WEBHOOK_NCCL_* */
    struct agent_webhook_nccl_pins pins; /* its pins, with spec.nccl: native */
    char deny[512];                      /* set when the pod cannot be injected safely */
};

static const char *str_at(const json_t *obj, const char *key)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    return json_is_string(v) ? json_string_value(v) : NULL;
}

static int streq(const char *a, const char *b)
{
    return a != NULL && b != NULL && strcmp(a, b) == 0;
}

char *agent_webhook_pointer_escape(const char *token)
{
    size_t extra = 0;
    for (const char *p = token; *p; p++)
        extra += (*p == '~' || *p == '/');
    char *out = malloc(strlen(token) + extra + 1);
    if (out == NULL)
        return NULL;
    char *o = out;
    for (const char *p = token; *p; p++) {
        if (*p == '~') {
            *o++ = '~';
            *o++ = '0';
        } else if (*p == '/') {
            *o++ = '~';
            *o++ = '1';
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

char *agent_webhook_base64(const unsigned char *data, size_t len)
{
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = malloc(4 * ((len + 2) / 3) + 1);
    if (out == NULL)
        return NULL;
    char *o = out;
    size_t i = 0;
    for (; i + 2 < len; i += 3) {
        unsigned long v =
            ((unsigned long)data[i] << 16) | ((unsigned long)data[i + 1] << 8) | data[i + 2];
        *o++ = alphabet[(v >> 18) & 63];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = alphabet[v & 63];
    }
    if (i < len) {
        unsigned long v = (unsigned long)data[i] << 16;
        if (i + 1 < len)
            v |= (unsigned long)data[i + 1] << 8;
        *o++ = alphabet[(v >> 18) & 63];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = (i + 1 < len) ? alphabet[(v >> 6) & 63] : '=';
        *o++ = '=';
    }
    *o = '\0';
    return out;
}

int agent_webhook_quantity_valid(const char *s)
{
    /* The subset of resource.Quantity the chart may hand us: decimal number + optional suffix. */
    static const char *const suffixes[] = {"",   "m",  "k",  "M",  "G",  "T",  "P", "E",
                                           "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", NULL};
    const char *p = s;
    int digits = 0;
    if (s == NULL)
        return 0;
    while (*p >= '0' && *p <= '9') {
        p++;
        digits++;
    }
    if (*p == '.') {
        p++;
        while (*p >= '0' && *p <= '9') {
            p++;
            digits++;
        }
    }
    if (digits == 0 || digits > 30)
        return 0;
    for (int i = 0; suffixes[i] != NULL; i++)
        if (strcmp(p, suffixes[i]) == 0)
            return 1;
    return 0;
}

/* A JSON string of text (a local buffer made by snprintf), cleaned first. */
static json_t *text_json(char *text)
{
    agent_utf8_clean(text);
    return json_string(text);
}

static void set_deny(struct mutation *m, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void set_deny(struct mutation *m, const char *fmt, ...)
{
    va_list ap;
    if (m->deny[0] != '\0')
        return; /* the first reason is the one the user sees */
    va_start(ap, fmt);
    vsnprintf(m->deny, sizeof(m->deny), fmt, ap);
    va_end(ap);
    agent_utf8_clean(m->deny);
}

/* Appends {"op": op, "path": path, "value": value}; steals value. */
static int patch_op(struct mutation *m, const char *op, const char *path, json_t *value)
{
    if (value == NULL)
        return -1;
    json_t *o = json_pack("{s:s, s:s, s:o}", "op", op, "path", path, "value", value);
    if (o == NULL)
        return -1;
    return json_array_append_new(m->ops, o);
}

static int patch_opf(struct mutation *m, json_t *value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int patch_opf(struct mutation *m, json_t *value, const char *fmt, ...)
{
    char path[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(path, sizeof(path), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(path)) {
        json_decref(value);
        return -1;
    }
    return patch_op(m, "add", path, value);
}

/* Adds one element to the array at base (".../env"): the whole array when absent, else "/-". */
static int add_to_array(struct mutation *m, const char *base, const json_t *existing, json_t *elem)
{
    char path[512];
    if (elem == NULL)
        return -1;
    if (json_is_array(existing)) {
        snprintf(path, sizeof(path), "%s/-", base);
        return patch_op(m, "add", path, elem);
    }
    json_t *arr = json_array();
    if (arr == NULL || json_array_append_new(arr, elem) != 0) {
        json_decref(arr);
        return -1;
    }
    return patch_op(m, "add", base, arr);
}

/* env entry with a value from the downward API */
static json_t *env_field(const char *name, const char *field_path)
{
    return json_pack("{s:s, s:{s:{s:s, s:s}}}", "name", name, "valueFrom", "fieldRef", "apiVersion",
                     "v1", "fieldPath", field_path);
}

static json_t *env_value(const char *name, const char *value)
{
    return json_pack("{s:s, s:s}", "name", name, "value", value);
}

/* The env every injected container gets, in order. */
static json_t *common_env(void)
{
    json_t *env = json_array();
    if (env == NULL)
        return NULL;
    if (json_array_append_new(env, env_field("POD_NAME", "metadata.name")) != 0 ||
        json_array_append_new(env, env_field("POD_NAMESPACE", "metadata.namespace")) != 0 ||
        json_array_append_new(env, env_field("NODE_NAME", "spec.nodeName")) != 0 ||
        json_array_append_new(env, env_value("COLL_AGENT_SOCKET", AGENT_WEBHOOK_SOCKET)) != 0) {
        json_decref(env);
        return NULL;
    }
    return env;
}

static int add_quantity(json_t *obj, const char *key, const char *q)
{
    if (q == NULL || q[0] == '\0')
        return 0;
    return json_object_set_new(obj, key, json_string(q));
}

static json_t *sidecar_container(const struct agent_webhook_config *cfg)
{
    json_t *env = common_env();
    if (env == NULL)
        return NULL;
    if (json_array_append_new(env, env_value("COLL_AGENT_LIB_DIR", AGENT_WEBHOOK_LIB_DIR)) != 0 ||
        json_array_append_new(env, env_field("POD_IP", "status.podIP")) != 0 ||
        json_array_append_new(env, env_value("COLL_LIB_VERSION", cfg->lib_version)) != 0) {
        json_decref(env);
        return NULL;
    }
    json_t *requests = json_object(), *limits = json_object();
    json_t *resources = json_object();
    if (requests == NULL || limits == NULL || resources == NULL ||
        add_quantity(requests, "cpu", cfg->cpu_request) != 0 ||
        add_quantity(requests, "memory", cfg->memory_request) != 0 ||
        add_quantity(limits, "cpu", cfg->cpu_limit) != 0 ||
        add_quantity(limits, "memory", cfg->memory_limit) != 0) {
        json_decref(env);
        json_decref(requests);
        json_decref(limits);
        json_decref(resources);
        return NULL;
    }
    if (json_object_size(requests) > 0)
        json_object_set_new(resources, "requests", requests);
    else
        json_decref(requests);
    if (json_object_size(limits) > 0)
        json_object_set_new(resources, "limits", limits);
    else
        json_decref(limits);

    /* coll-agent without a mode argument is the sidecar; it reads POD_NAME, POD_NAMESPACE and
     * COLL_AGENT_SOCKET from this env. It copies its library into the shared volume before it
     * opens its socket, so a started sidecar (socket present) means the training containers
     * find the library. */
    return json_pack("{s:s, s:s, s:s, s:[s], s:s, s:o, s:o, s:[{s:s, s:s}],"
                     " s:{s:{s:[s,s,s]}, s:i, s:i},"
                     " s:{s:b, s:b, s:b, s:{s:[s]}}}",
                     "name", AGENT_WEBHOOK_SIDECAR_NAME, "image", cfg->agent_image,
                     "imagePullPolicy", cfg->image_pull_policy, "command", "coll-agent",
                     "restartPolicy", "Always", "env", env, "resources", resources, "volumeMounts",
                     "name", AGENT_WEBHOOK_VOLUME_NAME, "mountPath", AGENT_WEBHOOK_RUN_DIR,
                     "startupProbe", "exec", "command", "test", "-S", AGENT_WEBHOOK_SOCKET,
                     "periodSeconds", 1, "failureThreshold", 300, "securityContext",
                     "allowPrivilegeEscalation", 0, "readOnlyRootFilesystem", 1, "runAsNonRoot", 1,
                     "capabilities", "drop", "ALL");
}

/* Index of the entry named name in an array of {"name": ...} objects, or -1. */
static long find_named(const json_t *arr, const char *name)
{
    size_t i;
    const json_t *e;
    if (!json_is_array(arr))
        return -1;
    json_array_foreach(arr, i, e)
    {
        if (streq(str_at(e, "name"), name))
            return (long)i;
    }
    return -1;
}

/* name=value first in a container's colon-separated list variable (LD_LIBRARY_PATH, LD_PRELOAD):
 * added when absent (to env at base, or to fresh when the container had no env), prepended to
 * the user's value, left alone when already first; a valueFrom gets a warning instead. */
static int prepend_env(struct mutation *m, const char *cname, const char *base, const json_t *env,
                       json_t *fresh, const char *name, const char *value)
{
    long at = find_named(env, name);
    if (at < 0) {
        json_t *v = env_value(name, value);
        return json_is_array(env) ? add_to_array(m, base, env, v) : json_array_append_new(fresh, v);
    }
    const json_t *entry = json_array_get(env, (size_t)at);
    const char *old = str_at(entry, "value");
    const size_t n = strlen(value);
    if (json_object_get(entry, "valueFrom") != NULL) {
        char w[320];
        snprintf(w, sizeof(w),
                 "kcoll: container %s takes %s from valueFrom; prepend %s to it yourself", cname,
                 name, value);
        return json_array_append_new(m->warnings, text_json(w));
    }
    if (old == NULL || old[0] == '\0')
        return patch_opf(m, json_string(value), "%s/%ld/value", base, at);
    if (strncmp(old, value, n) == 0 && (old[n] == ':' || old[n] == '\0'))
        return 0;
    char *joined = NULL;
    if (asprintf(&joined, "%s:%s", value, old) < 0)
        return -1;
    int rc = patch_opf(m, json_string(joined), "%s/%ld/value", base, at);
    free(joined);
    return rc;
}

/* name=value unless the container sets name itself (its own value wins; one it gives for
 * NCCL_ENV_PLUGIN is kcoll's plugin not loading, so it gets a warning). */
static int env_if_absent(struct mutation *m, const char *cname, const char *base, const json_t *env,
                         json_t *fresh, const char *name, const char *value)
{
    long at = find_named(env, name);
    if (at >= 0) {
        const char *old = str_at(json_array_get(env, (size_t)at), "value");
        if (strcmp(name, "NCCL_ENV_PLUGIN") != 0 || streq(old, value))
            return 0;
        char w[400];
        snprintf(w, sizeof(w),
                 "kcoll: container %s sets NCCL_ENV_PLUGIN=%.64s, so NCCL does not load kcoll's "
                 "plugin (%s) and nothing pins its network or checks its version; remove it",
                 cname, old ? old : "(valueFrom)", value);
        return json_array_append_new(m->warnings, text_json(w));
    }
    json_t *v = env_value(name, value);
    return json_is_array(env) ? add_to_array(m, base, env, v) : json_array_append_new(fresh, v);
}

static int mutate_container(struct mutation *m, size_t idx, const json_t *c)
{
    char base[128];
    const char *cname = str_at(c, "name");
    const json_t *env = json_object_get(c, "env");
    const json_t *mounts = json_object_get(c, "volumeMounts");
    size_t i;
    const json_t *e;

    if (cname == NULL) {
        set_deny(m, "spec.containers[%zu] has no name", idx);
        return 0;
    }
    if ((env != NULL && !json_is_array(env)) || (mounts != NULL && !json_is_array(mounts))) {
        set_deny(m, "container %s: env and volumeMounts must be arrays", cname);
        return 0;
    }
    json_array_foreach(mounts, i, e)
    {
        if (streq(str_at(e, "mountPath"), AGENT_WEBHOOK_RUN_DIR) ||
            streq(str_at(e, "mountPath"), AGENT_WEBHOOK_RUN_DIR "/")) {
            set_deny(m,
                     "container %s already mounts %s, which kcoll needs for its agent socket and "
                     "library; move that mount or remove the label " AGENT_WEBHOOK_INJECT_LABEL,
                     cname, AGENT_WEBHOOK_RUN_DIR);
            return 0;
        }
    }

    /* Env arrays appended one entry at a time: once added whole, later entries use "/-". */
    snprintf(base, sizeof(base), "/spec/containers/%zu/env", idx);
    json_t *ours = common_env();
    if (ours == NULL)
        return -1;
    int have_env = json_is_array(env);
    json_t *fresh = have_env ? NULL : json_array();
    json_array_foreach(ours, i, e)
    {
        const char *name = str_at(e, "name");
        if (find_named(env, name) >= 0)
            continue; /* the user's own definition wins */
        json_incref((json_t *)e);
        if (have_env ? add_to_array(m, base, env, (json_t *)e) != 0
                     : json_array_append_new(fresh, (json_t *)e) != 0) {
            json_decref(ours);
            json_decref(fresh);
            return -1;
        }
    }
    json_decref(ours);

    if (prepend_env(m, cname, base, env, fresh, "LD_LIBRARY_PATH", AGENT_WEBHOOK_LIB_DIR) != 0 ||
        (m->nccl == AGENT_WEBHOOK_NCCL_KCOLL &&
         prepend_env(m, cname, base, env, fresh, "LD_PRELOAD", AGENT_WEBHOOK_NCCL_PRELOAD) != 0) ||
        (m->nccl == AGENT_WEBHOOK_NCCL_NATIVE &&
         (env_if_absent(m, cname, base, env, fresh, "NCCL_ENV_PLUGIN",
                        AGENT_WEBHOOK_NCCL_ENV_PLUGIN) != 0 ||
          env_if_absent(m, cname, base, env, fresh, "NCCL_CONF_FILE", AGENT_WEBHOOK_NCCL_CONF) !=
              0 ||
          (m->pins.ifname[0] &&
           env_if_absent(m, cname, base, env, fresh, "GLOO_SOCKET_IFNAME", m->pins.ifname) != 0) ||
          (m->pins.pass_through &&
           env_if_absent(m, cname, base, env, fresh, "COLL_NCCL_ENV_ON_NO_AGENT", "passthrough") !=
               0) ||
          (m->pins.exit_on_end &&
           env_if_absent(m, cname, base, env, fresh, "COLL_NCCL_ON_RANK_END", "exit") != 0)))) {
        json_decref(fresh);
        return -1;
    }
    if (!have_env && patch_op(m, "add", base, fresh) != 0)
        return -1;

    snprintf(base, sizeof(base), "/spec/containers/%zu/volumeMounts", idx);
    return add_to_array(m, base, mounts,
                        json_pack("{s:s, s:s, s:b}", "name", AGENT_WEBHOOK_VOLUME_NAME, "mountPath",
                                  AGENT_WEBHOOK_RUN_DIR, "readOnly", 1));
}

/* spec.nccl: native: settings of the pod that contradict the pins become a warning and the
 * annotation the agent turns into an Event; GLOO_SOCKET_IFNAME cannot be set when the pinned
 * network is an attachment (its interface name is only known per pod). */
static int native_checks(struct mutation *m, const json_t *containers, json_t *annots)
{
    char conflicts[1024], w[1100];
    if (agent_webhook_nccl_conflicts(containers, &m->pins, conflicts, sizeof(conflicts)) > 0) {
        snprintf(w, sizeof(w),
                 "kcoll: %s; kcoll's NCCL plugin overrides NCCL_* but not Gloo or "
                 "an NCCL without the plugin: remove these settings",
                 conflicts);
        if (json_array_append_new(m->warnings, text_json(w)) != 0 ||
            json_object_set_new(annots, AGENT_WEBHOOK_NCCL_CONFLICT, json_string(conflicts)) != 0)
            return -1;
    }
    if (!m->pins.ifname[0])
        return json_array_append_new(
            m->warnings,
            json_string(
                "kcoll: the topology pins a network attachment, whose interface name may "
                "differ between pods, so GLOO_SOCKET_IFNAME is not set: name the "
                "interface in the pod's k8s.v1.cni.cncf.io/networks request (ns/net@ifname) "
                "and set GLOO_SOCKET_IFNAME to it, or pin spec.network.interface"));
    return 0;
}

/* Builds m->ops for a pod that opted in, or sets m->deny. */
static int mutate_pod(struct mutation *m, const json_t *pod)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *containers = json_object_get(spec, "containers");
    const json_t *inits = json_object_get(spec, "initContainers");
    const json_t *volumes = json_object_get(spec, "volumes");
    size_t i;
    const json_t *c;

    if (!json_is_object(spec) || !json_is_array(containers) || json_array_size(containers) == 0) {
        set_deny(m, "request.object is not a pod with spec.containers");
        return 0;
    }
    if ((inits != NULL && !json_is_array(inits)) || (volumes != NULL && !json_is_array(volumes))) {
        set_deny(m, "spec.initContainers and spec.volumes must be arrays");
        return 0;
    }
    if (find_named(volumes, AGENT_WEBHOOK_VOLUME_NAME) >= 0) {
        set_deny(
            m, "the pod already has a volume named " AGENT_WEBHOOK_VOLUME_NAME
               ", which kcoll injects; rename it or remove the label " AGENT_WEBHOOK_INJECT_LABEL);
        return 0;
    }
    if (find_named(inits, AGENT_WEBHOOK_SIDECAR_NAME) >= 0 ||
        find_named(containers, AGENT_WEBHOOK_SIDECAR_NAME) >= 0) {
        set_deny(m, "the pod already has a container named " AGENT_WEBHOOK_SIDECAR_NAME
                    " but no " AGENT_WEBHOOK_INJECTED_ANNOT " annotation; remove that container or "
                    "the label " AGENT_WEBHOOK_INJECT_LABEL);
        return 0;
    }

    /* metadata: the annotation that makes a second pass a no-op, and the facts the sidecar may
     * not read itself (whatever the pod's creator wrote under those keys is replaced) */
    json_t *annots = json_pack("{s:s, s:s}", AGENT_WEBHOOK_INJECTED_ANNOT, "true",
                               AGENT_WEBHOOK_LIB_VERSION_ANNOT, m->cfg->lib_version);
    if (annots == NULL || agent_webhook_pod_facts(m->cfg, m->ns, pod, annots, m->warnings) != 0) {
        json_decref(annots);
        return -1;
    }
    /* several ranks per pod: no more ranks than GPUs, torchrun's --nnodes = the job's pods */
    char why[700];
    const char *ws = str_at(annots, AGENT_ANN_WORLD_SIZE);
    if (agent_pod_ranks_admit(pod, ws != NULL ? atoi(ws) : 0, why, sizeof(why)) != 0) {
        set_deny(m, "kcoll: %s", why);
        json_decref(annots);
        return 0;
    }
    /* kcoll as NCCL: when the pod's CollectiveTopology says spec.nccl: kcoll, every container
     * preloads the sidecar's libnccl.so.2 (it wins over the NCCL a framework loads by path) */
    const char *nsl = str_at(annots, AGENT_ANN_NAMESPACE_LABELS);
    json_t *nslabels = nsl != NULL ? json_loads(nsl, 0, NULL) : NULL;
    m->nccl = agent_webhook_topology_nccl(m->cfg, m->ns, pod, nslabels, m->warnings, &m->pins);
    json_decref(nslabels);
    if (m->nccl &&
        json_object_set_new(
            annots, AGENT_WEBHOOK_NCCL_ANNOT,
            json_string(m->nccl == AGENT_WEBHOOK_NCCL_KCOLL ? "kcoll" : "native")) != 0) {
        json_decref(annots);
        return -1;
    }
    if (m->nccl == AGENT_WEBHOOK_NCCL_NATIVE && native_checks(m, containers, annots) != 0) {
        json_decref(annots);
        return -1;
    }
    const json_t *have = json_object_get(meta, "annotations");
    if (!json_is_object(meta)) {
        if (patch_op(m, "add", "/metadata", json_pack("{s:o}", "annotations", annots)) != 0)
            return -1;
    } else if (!json_is_object(have)) {
        if (patch_op(m, "add", "/metadata/annotations", annots) != 0)
            return -1;
    } else {
        const char *k;
        json_t *v;
        for (size_t f = 0; agent_webhook_fact_keys[f] != NULL; f++) {
            const char *key = agent_webhook_fact_keys[f];
            if (json_object_get(have, key) == NULL || json_object_get(annots, key) != NULL)
                continue;
            char *esc = agent_webhook_pointer_escape(key);
            json_t *op = NULL;
            char path[512];
            if (esc != NULL) {
                snprintf(path, sizeof(path), "/metadata/annotations/%s", esc);
                op = json_pack("{s:s, s:s}", "op", "remove", "path", path);
            }
            free(esc);
            if (op == NULL || json_array_append_new(m->ops, op) != 0) {
                json_decref(annots);
                return -1;
            }
        }
        json_object_foreach(annots, k, v)
        {
            char *esc = agent_webhook_pointer_escape(k);
            int rc = esc ? patch_opf(m, json_incref(v), "/metadata/annotations/%s", esc) : -1;
            free(esc);
            if (rc != 0) {
                json_decref(annots);
                return -1;
            }
        }
        json_decref(annots);
    }

    if (add_to_array(m, "/spec/volumes", volumes,
                     json_pack("{s:s, s:{}}", "name", AGENT_WEBHOOK_VOLUME_NAME, "emptyDir")) != 0)
        return -1;

    /* The sidecar goes first, so that it is running before any other init container. */
    json_t *sidecar = sidecar_container(m->cfg);
    if (sidecar == NULL || agent_webhook_identity(m->cfg, pod, m->ops, m->warnings, sidecar,
                                                  m->deny, sizeof(m->deny)) != 0) {
        json_decref(sidecar);
        return -1;
    }
    if (m->deny[0] != '\0') {
        json_decref(sidecar);
        return 0;
    }
    if (json_is_array(inits) && json_array_size(inits) > 0) {
        if (patch_op(m, "add", "/spec/initContainers/0", sidecar) != 0)
            return -1;
    } else if (patch_op(m, "add", "/spec/initContainers", json_pack("[o]", sidecar)) != 0) {
        return -1;
    }

    json_array_foreach(containers, i, c)
    {
        if (!json_is_object(c)) {
            set_deny(m, "spec.containers[%zu] is not an object", i);
            return 0;
        }
        if (mutate_container(m, i, c) != 0)
            return -1;
    }
    return 0;
}

static void pod_label(const json_t *pod, const char *ns, char *buf, size_t len)
{
    const json_t *meta = json_object_get(pod, "metadata");
    const char *name = str_at(meta, "name");
    const char *gen = str_at(meta, "generateName");
    if (name != NULL && name[0] != '\0')
        snprintf(buf, len, "%s/%s", ns ? ns : "", name);
    else
        snprintf(buf, len, "%s/%s*", ns ? ns : "", gen ? gen : "");
}

int agent_webhook_review(const struct agent_webhook_config *cfg, enum agent_webhook_scope scope,
                         const char *body, size_t len, struct agent_webhook_reply *reply)
{
    json_error_t jerr;
    char msg[512];
    json_t *root = json_loadb(body, len, 0, &jerr);

    memset(reply, 0, sizeof(*reply));
    if (!json_is_object(root)) {
        if (root == NULL)
            snprintf(msg, sizeof(msg),
                     "request body is not valid JSON (line %d, column %d: %s); send an "
                     "AdmissionReview " AGENT_WEBHOOK_REVIEW_API_VERSION,
                     jerr.line, jerr.column, jerr.text);
        else
            snprintf(msg, sizeof(msg),
                     "request body is not a JSON object; send an "
                     "AdmissionReview " AGENT_WEBHOOK_REVIEW_API_VERSION);
        json_decref(root);
        agent_warn("AGENT-WEBHOOK-BAD-REVIEW", "%s", msg);
        return agent_webhook_error_reply(400, msg, reply);
    }
    const json_t *req = json_object_get(root, "request");
    const char *uid = str_at(req, "uid");
    const char *api = str_at(root, "apiVersion");
    const char *kind = str_at(root, "kind");
    int rc;

    if (!streq(api, AGENT_WEBHOOK_REVIEW_API_VERSION) || !streq(kind, AGENT_WEBHOOK_REVIEW_KIND)) {
        snprintf(msg, sizeof(msg),
                 "unsupported review apiVersion=%s kind=%s; this webhook "
                 "speaks " AGENT_WEBHOOK_REVIEW_KIND " " AGENT_WEBHOOK_REVIEW_API_VERSION
                 " (admissionReviewVersions: [v1])",
                 api ? api : "(none)", kind ? kind : "(none)");
        goto malformed;
    }
    if (!json_is_object(req)) {
        snprintf(msg, sizeof(msg), "AdmissionReview has no request object");
        goto malformed;
    }
    if (uid == NULL || uid[0] == '\0') {
        snprintf(msg, sizeof(msg), "AdmissionReview request.uid is missing or empty");
        goto malformed;
    }

    /* Not a pod creation: not ours to change. */
    const json_t *rkind = json_object_get(req, "kind");
    const char *op = str_at(req, "operation");
    const char *sub = str_at(req, "subResource");
    const char *ns = str_at(req, "namespace");
    if (!json_is_object(rkind) || op == NULL) {
        snprintf(msg, sizeof(msg), "AdmissionReview request.kind or request.operation is missing");
        goto malformed;
    }
    if (!streq(str_at(rkind, "kind"), "Pod") || !streq(str_at(rkind, "version"), "v1") ||
        !streq(str_at(rkind, "group"), "") || !streq(op, "CREATE") ||
        (sub != NULL && sub[0] != '\0')) {
        agent_debug("AGENT-WEBHOOK-SKIP",
                    "uid=%s kind=%s operation=%s: not a pod "
                    "creation",
                    uid, str_at(rkind, "kind") ? str_at(rkind, "kind") : "?", op);
        rc = agent_webhook_review_reply(uid, 1, 0, NULL, NULL, NULL, reply);
        json_decref(root);
        return rc;
    }
    const json_t *pod = json_object_get(req, "object");
    if (!json_is_object(pod)) {
        snprintf(msg, sizeof(msg), "AdmissionReview request.object is missing or not an object");
        goto malformed;
    }

    char who[300];
    pod_label(pod, ns ? ns : str_at(json_object_get(pod, "metadata"), "namespace"), who,
              sizeof(who));
    const json_t *meta = json_object_get(pod, "metadata");
    const char *label = str_at(json_object_get(meta, "labels"), AGENT_WEBHOOK_INJECT_LABEL);
    if (json_object_get(json_object_get(meta, "annotations"), AGENT_WEBHOOK_INJECTED_ANNOT)) {
        agent_info("AGENT-WEBHOOK-ALREADY-INJECTED", "uid=%s pod=%s", uid, who);
        rc = agent_webhook_review_reply(uid, 1, 0, NULL, NULL, NULL, reply);
        json_decref(root);
        return rc;
    }
    int opted_in = scope == AGENT_WEBHOOK_SCOPE_POD ? streq(label, "true") : !streq(label, "false");
    if (!opted_in) {
        agent_debug("AGENT-WEBHOOK-NOT-OPTED-IN", "uid=%s pod=%s label=%s", uid, who,
                    label ? label : "(none)");
        rc = agent_webhook_review_reply(uid, 1, 0, NULL, NULL, NULL, reply);
        json_decref(root);
        return rc;
    }

    struct mutation m = {.cfg = cfg,
                         .ns = ns ? ns : str_at(meta, "namespace"),
                         .ops = json_array(),
                         .warnings = json_array()};
    if (m.ops == NULL || m.warnings == NULL || mutate_pod(&m, pod) != 0) {
        json_decref(m.ops);
        json_decref(m.warnings);
        json_decref(root);
        agent_error("AGENT-WEBHOOK-OOM", "uid=%s pod=%s: out of memory", uid, who);
        return -1;
    }
    if (m.deny[0] != '\0') {
        agent_warn("AGENT-WEBHOOK-DENY", "uid=%s pod=%s: %s", uid, who, m.deny);
        json_decref(m.ops);
        rc = agent_webhook_review_reply(uid, 0, 403, m.deny, NULL, m.warnings, reply);
    } else {
        agent_info("AGENT-WEBHOOK-INJECT", "uid=%s pod=%s image=%s lib=%s ops=%zu", uid, who,
                   cfg->agent_image, cfg->lib_version, json_array_size(m.ops));
        rc = agent_webhook_review_reply(uid, 1, 0, NULL, m.ops, m.warnings, reply);
    }
    json_decref(root);
    return rc;

malformed:
    agent_warn("AGENT-WEBHOOK-BAD-REVIEW", "uid=%s: %s", uid ? uid : "(none)", msg);
    if (uid != NULL && uid[0] != '\0') {
        char *uidcopy = strdup(uid); /* uid points into root */
        json_decref(root);
        if (uidcopy == NULL)
            return -1;
        rc = agent_webhook_review_reply(uidcopy, 0, 400, msg, NULL, NULL, reply);
        free(uidcopy);
        return rc;
    }
    json_decref(root);
    return agent_webhook_error_reply(400, msg, reply);
}
