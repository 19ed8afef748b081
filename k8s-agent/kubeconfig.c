/* Credentials: in-cluster service account, or the current context of a kubeconfig file. */
#define _GNU_SOURCE
#include "kube.h"

#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_CONFIG_BYTES (4 << 20)

static char *trimmed_copy(const char *data, size_t len)
{
    while (len > 0 && (data[len - 1] == '\n' || data[len - 1] == '\r' || data[len - 1] == ' '))
        len--;
    return strndup(data, len);
}

int agent_creds_refresh_token(agent_kube_creds_t *c)
{
    char *data = NULL, *tok;
    size_t len = 0;
    if (!c->token_file[0])
        return 0;
    if (agent_read_file(c->token_file, &data, &len, 1 << 20) != 0)
        return -1;
    tok = trimmed_copy(data, len);
    free(data);
    if (!tok)
        return -1;
    if (c->token && strcmp(c->token, tok) == 0) {
        free(tok);
        return 0;
    }
    free(c->token);
    c->token = tok;
    return 1;
}

int agent_creds_in_cluster(const char *sa_dir, agent_kube_creds_t *out, char *err, size_t errlen)
{
    const char *host = secure_getenv("KUBERNETES_SERVICE_HOST");
    const char *port = secure_getenv("KUBERNETES_SERVICE_PORT");
    char path[1100];
    char *ns = NULL;
    size_t nslen = 0;

    memset(out, 0, sizeof(*out));
    if (!host || !host[0] || !port || !port[0]) {
        snprintf(err, errlen, "KUBERNETES_SERVICE_HOST/PORT are not set (not running in a pod?)");
        return -1;
    }
    if (!sa_dir)
        sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount";
    if (strchr(host, ':'))
        snprintf(out->server, sizeof(out->server), "https://[%s]:%s", host, port);
    else
        snprintf(out->server, sizeof(out->server), "https://%s:%s", host, port);
    snprintf(out->ca_file, sizeof(out->ca_file), "%s/ca.crt", sa_dir);
    snprintf(out->token_file, sizeof(out->token_file), "%s/token", sa_dir);
    if (access(out->ca_file, R_OK) != 0) {
        snprintf(err, errlen, "cannot read the service-account CA bundle %s: %s", out->ca_file,
                 strerror(errno));
        return -1;
    }
    if (agent_creds_refresh_token(out) < 0) {
        snprintf(err, errlen,
                 "cannot read the service-account token %s: %s (is automountServiceAccountToken "
                 "false?)",
                 out->token_file, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof(path), "%s/namespace", sa_dir);
    if (agent_read_file(path, &ns, &nslen, 4096) == 0) {
        char *t = trimmed_copy(ns, nslen);
        if (t)
            snprintf(out->namespace_, sizeof(out->namespace_), "%s", t);
        free(t);
        free(ns);
    }
    out->in_cluster = 1;
    return 0;
}

/* Find the entry named `name` in a kubeconfig list (clusters, users, contexts). */
static json_t *named(json_t *root, const char *list, const char *name, const char *inner)
{
    json_t *arr = json_object_get(root, list), *it;
    size_t i;
    json_array_foreach(arr, i, it)
    {
        const char *n = json_string_value(json_object_get(it, "name"));
        if (n && strcmp(n, name) == 0)
            return json_object_get(it, inner);
    }
    return NULL;
}

/* Relative paths in a kubeconfig are relative to the file's directory. */
static void resolve_path(const char *cfg_path, const char *p, char *out, size_t len)
{
    char *copy, *dir;
    if (p[0] == '/') {
        snprintf(out, len, "%s", p);
        return;
    }
    copy = strdup(cfg_path);
    if (!copy) {
        snprintf(out, len, "%s", p);
        return;
    }
    dir = dirname(copy);
    snprintf(out, len, "%s/%s", dir, p);
    free(copy);
}

static int decode_data(json_t *obj, const char *key, char **out, size_t *len, char *err,
                       size_t errlen)
{
    const char *v = json_string_value(json_object_get(obj, key));
    unsigned char *buf = NULL;
    long n;
    if (!v)
        return 0;
    n = agent_base64_decode(v, &buf);
    if (n < 0) {
        snprintf(err, errlen, "kubeconfig %s is not valid base64", key);
        return -1;
    }
    *out = (char *)buf;
    *len = (size_t)n;
    return 0;
}

int agent_creds_kubeconfig(const char *path, agent_kube_creds_t *out, char *err, size_t errlen)
{
    char *data = NULL, perr[256];
    size_t len = 0;
    json_t *root = NULL, *ctx, *cluster, *user;
    const char *current, *cname, *uname, *s;
    int rc = -1;

    memset(out, 0, sizeof(*out));
    if (agent_read_file(path, &data, &len, MAX_CONFIG_BYTES) != 0) {
        snprintf(err, errlen, "cannot read kubeconfig %s: %s", path, strerror(errno));
        return -1;
    }
    root = agent_yaml_load(data, len, perr, sizeof(perr));
    free(data);
    if (!root) {
        snprintf(err, errlen, "kubeconfig %s: %s", path, perr);
        return -1;
    }
    current = json_string_value(json_object_get(root, "current-context"));
    if (!current || !current[0]) {
        snprintf(err, errlen, "kubeconfig %s has no current-context", path);
        goto done;
    }
    ctx = named(root, "contexts", current, "context");
    if (!ctx) {
        snprintf(err, errlen, "kubeconfig %s: context \"%s\" not found", path, current);
        goto done;
    }
    cname = json_string_value(json_object_get(ctx, "cluster"));
    uname = json_string_value(json_object_get(ctx, "user"));
    cluster = cname ? named(root, "clusters", cname, "cluster") : NULL;
    if (!cluster) {
        snprintf(err, errlen, "kubeconfig %s: cluster of context \"%s\" not found", path, current);
        goto done;
    }
    user = uname ? named(root, "users", uname, "user") : NULL;
    agent_json_str(ctx, "namespace", out->namespace_, sizeof(out->namespace_));
    s = json_string_value(json_object_get(cluster, "server"));
    if (!s || strncmp(s, "https://", 8) != 0) {
        snprintf(err, errlen,
                 "kubeconfig %s: cluster \"%s\" server must be an https:// URL (got \"%s\"); "
                 "the agent never sends credentials in clear text",
                 path, cname, s ? s : "");
        goto done;
    }
    snprintf(out->server, sizeof(out->server), "%s", s);
    len = strlen(out->server);
    while (len > 0 && out->server[len - 1] == '/')
        out->server[--len] = '\0';
    if (len <= 8) {
        snprintf(err, errlen, "kubeconfig %s: cluster \"%s\" server \"%s\" names no host", path,
                 cname, s);
        goto done;
    }
    if (json_is_true(json_object_get(cluster, "insecure-skip-tls-verify"))) {
        snprintf(err, errlen,
                 "kubeconfig %s: insecure-skip-tls-verify is set; the agent always verifies TLS: "
                 "give certificate-authority or certificate-authority-data",
                 path);
        goto done;
    }
    if ((s = json_string_value(json_object_get(cluster, "certificate-authority"))))
        resolve_path(path, s, out->ca_file, sizeof(out->ca_file));
    if (decode_data(cluster, "certificate-authority-data", &out->ca_data, &out->ca_len, err,
                    errlen) != 0)
        goto done;
    if (user) {
        if (json_object_get(user, "exec") || json_object_get(user, "auth-provider")) {
            snprintf(err, errlen,
                     "kubeconfig %s: user \"%s\" uses exec/auth-provider credentials, which the "
                     "agent does not run; use a token, tokenFile or client certificate",
                     path, uname);
            goto done;
        }
        if ((s = json_string_value(json_object_get(user, "token")))) {
            out->token = strdup(s);
            if (!out->token)
                goto done;
        }
        if ((s = json_string_value(json_object_get(user, "tokenFile")))) {
            resolve_path(path, s, out->token_file, sizeof(out->token_file));
            if (agent_creds_refresh_token(out) < 0) {
                snprintf(err, errlen, "kubeconfig %s: cannot read tokenFile %s: %s", path,
                         out->token_file, strerror(errno));
                goto done;
            }
        }
        if ((s = json_string_value(json_object_get(user, "client-certificate"))))
            resolve_path(path, s, out->cert_file, sizeof(out->cert_file));
        if ((s = json_string_value(json_object_get(user, "client-key"))))
            resolve_path(path, s, out->key_file, sizeof(out->key_file));
        if (decode_data(user, "client-certificate-data", &out->cert_data, &out->cert_len, err,
                        errlen) != 0 ||
            decode_data(user, "client-key-data", &out->key_data, &out->key_len, err, errlen) != 0)
            goto done;
    }
    rc = 0;
done:
    json_decref(root);
    if (rc != 0)
        agent_creds_free(out);
    return rc;
}

void agent_creds_free(agent_kube_creds_t *c)
{
    free(c->ca_data);
    free(c->token);
    free(c->cert_data);
    free(c->key_data);
    c->ca_data = c->token = c->cert_data = c->key_data = NULL;
}
