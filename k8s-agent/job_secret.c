/* The job secret lives in a Kubernetes Secret of the job's namespace, never in the Communicator:
 * rank 0's agent creates "kcoll-JOB" (owned by the job, like the Communicator, so it is
 * garbage-collected with it) before it publishes the Communicator, whose spec.secretName names
 * it; every other agent reads it once the Communicator is there. Only the agent's ServiceAccount
 * may create and get Secrets (deploy/helm: rbac.yaml), and the webhook mounts that account's
 * token into the sidecar only. The secret's bytes are never logged, put in an Event, a status or
 * an error message: messages name the Secret, not its content. */
#define _GNU_SOURCE
#include "kube.h"
#include "pod_ranks.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SECRET_PREFIX "kcoll-"
#define SECRET_KEY    "secret"
#define SECRET_TYPE   "kcoll.io/job-secret"

int agent_secret_name(const char *job, char *out, size_t len)
{
    if (agent_fmt(out, len, SECRET_PREFIX "%s", job ? job : "") < 0 || !agent_name_ok(out, 1)) {
        if (len > 0)
            out[0] = '\0';
        return -1;
    }
    return 0;
}

static void secret_path(const agent_facts_t *f, const char *name, char *buf, size_t len)
{
    if (name)
        snprintf(buf, len, "/api/v1/namespaces/%s/secrets/%s", f->ns, name);
    else
        snprintf(buf, len, "/api/v1/namespaces/%s/secrets", f->ns);
}

/* The uid of obj's first ownerReference ("" when none). */
static const char *owner_uid(const json_t *obj)
{
    const json_t *ref = json_array_get(agent_json_path(obj, "metadata.ownerReferences"), 0);
    const char *uid = json_string_value(json_object_get(ref, "uid"));
    return uid ? uid : "";
}

/* The secret of a Secret object into f->secret; 0, or -1 with cond (the content never quoted). */
static int decode(const json_t *secret, const char *name, agent_facts_t *f, agent_condition_t *cond)
{
    const char *b64 = json_string_value(agent_json_path(secret, "data." SECRET_KEY));
    unsigned char *raw = NULL;
    char hex[2 * COLLI_PROTO_SECRET_BYTES + 1];
    long n = b64 ? agent_base64_decode(b64, &raw) : -1;
    int ok = n == (long)sizeof(hex) - 1;
    if (ok) {
        memcpy(hex, raw, sizeof(hex) - 1);
        hex[sizeof(hex) - 1] = '\0';
        ok = colli_proto_hex_decode(hex, f->secret, sizeof(f->secret)) == 0;
    }
    free(raw);
    memset(hex, 0, sizeof(hex));
    if (!ok)
        return agent_fatal(
            cond, "SecretInvalid",
            "Secret %s/%s has no valid data.%s (%d hex digits, base64-encoded); delete it "
            "and restart rank 0's pod so that its agent creates a new one",
            f->ns, name, SECRET_KEY, 2 * COLLI_PROTO_SECRET_BYTES);
    return 0;
}

/* GET the Secret: 0 with r filled (200), 1 not found, -1 with cond. */
static int get_secret(agent_ctx_t *ctx, const char *path, int64_t deadline, agent_kube_resp_t *r,
                      agent_condition_t *cond)
{
    if (agent_kube_request(ctx->kube, "GET", path, NULL, NULL, deadline, r) != 0 ||
        (r->code != 200 && r->code != 404)) {
        agent_condition_from_resp(cond, "reading the job's Secret", r);
        agent_kube_resp_free(r);
        return -1;
    }
    if (r->code == 404) {
        agent_kube_resp_free(r);
        return 1;
    }
    return 0;
}

int agent_secret_create(agent_ctx_t *ctx, int64_t deadline, const agent_pod_info_t *pi,
                        agent_facts_t *f, agent_condition_t *cond)
{
    char name[254], path[700], one[1000], hex[2 * COLLI_PROTO_SECRET_BYTES + 1];
    json_t *obj;
    int rc = -1, stale = 0;

    if (agent_secret_name(f->job, name, sizeof(name)) != 0)
        return agent_fatal(cond, "JobNameInvalid",
                           "job name \"%.80s\" does not make a valid Secret name (" SECRET_PREFIX
                           "JOB must be a DNS-1123 subdomain of at most 253 characters)",
                           f->job);
    secret_path(f, NULL, path, sizeof(path));
    secret_path(f, name, one, sizeof(one));
    colli_proto_hex_encode(f->secret, sizeof(f->secret), hex);
    /* stringData: the API server stores it base64-encoded under data */
    obj = json_pack("{ss ss s{ss ss s{ss} s[{ss ss ss ss sb}]} ss s{ss}}", "apiVersion", "v1",
                    "kind", "Secret", "metadata", "name", name, "namespace", f->ns, "labels",
                    "kcoll.io/job", f->job, "ownerReferences", "apiVersion", pi->job_api_version,
                    "kind", pi->job_kind, "name", pi->owner_name, "uid", pi->job_uid, "controller",
                    0, "type", SECRET_TYPE, "stringData", SECRET_KEY, hex);
    memset(hex, 0, sizeof(hex));
    if (!obj)
        return agent_fatal(cond, "SecretInvalid", "cannot build the job's Secret (out of memory)");
    for (int tries = 0; agent_remaining_ms(deadline) > 0; tries++) {
        agent_kube_resp_t r;
        int got;
        if (agent_kube_request(ctx->kube, "POST", path, obj, NULL, deadline, &r) != 0) {
            agent_condition_from_resp(cond, "creating the job's Secret", &r);
            agent_kube_resp_free(&r);
            break;
        }
        if (r.code == 201 || r.code == 200) {
            agent_kube_resp_free(&r);
            agent_info("AGENT-SECRET-CREATED", "created Secret %s/%s (owned by %s %s)", f->ns, name,
                       pi->job_kind, pi->owner_name);
            rc = 0;
            break;
        }
        if (r.code != 409) {
            agent_condition_from_resp(cond, "creating the job's Secret", &r);
            agent_kube_resp_free(&r);
            break;
        }
        agent_kube_resp_free(&r);
        /* it exists: this job's (rank 0's agent restarted: keep its secret) or an earlier job's
         * that the garbage collector has not deleted yet (wait for that) */
        got = get_secret(ctx, one, deadline, &r, cond);
        if (got < 0)
            break;
        if (got > 0)
            continue; /* deleted meanwhile: create again */
        if (strcmp(owner_uid(r.body), pi->job_uid) == 0) {
            rc = decode(r.body, name, f, cond);
            agent_kube_resp_free(&r);
            if (rc == 0)
                agent_info("AGENT-SECRET-ADOPTED", "Secret %s/%s exists for this job; using it",
                           f->ns, name);
            break;
        }
        if (!stale++)
            agent_info("AGENT-SECRET-STALE",
                       "Secret %s/%s belongs to owner uid %s, not this job (%s); waiting for the "
                       "garbage collector to delete it",
                       f->ns, name, owner_uid(r.body)[0] ? owner_uid(r.body) : "(none)",
                       pi->job_uid);
        agent_kube_resp_free(&r);
        agent_kube_backoff(ctx->kube, tries < 5 ? tries : 5, deadline);
    }
    json_decref(obj);
    /* a request cut short by the deadline while waiting is still the stale Secret's fault */
    if (rc != 0 && (!cond->type[0] || (stale && agent_remaining_ms(deadline) <= 0)))
        agent_fatal(
            cond, "SecretStale",
            "Secret %s/%s belongs to an earlier job and was not deleted before the bootstrap "
            "deadline: delete it (kubectl delete secret -n %s %s) and restart the job",
            f->ns, name, f->ns, name);
    return rc;
}

int agent_secret_read(agent_ctx_t *ctx, int64_t deadline, const char *secret_name,
                      const char *owner, agent_facts_t *f, agent_condition_t *cond)
{
    char want[254], one[1000];
    agent_kube_resp_t r;
    int rc;

    if (agent_secret_name(f->job, want, sizeof(want)) != 0 || !secret_name ||
        strcmp(secret_name, want) != 0)
        return agent_fatal(
            cond, "CommunicatorInvalid",
            "Communicator %s/%s names Secret \"%.80s\" but this job's secret lives in "
            "Secret \"%s\"; delete the Communicator so that rank 0 recreates it",
            f->ns, f->job, secret_name ? secret_name : "(none)", want);
    secret_path(f, want, one, sizeof(one));
    for (int tries = 0;; tries++) {
        rc = get_secret(ctx, one, deadline, &r, cond);
        if (rc == 0)
            break;
        if (rc < 0 && (tries == 0 || agent_remaining_ms(deadline) > 0))
            return -1;
        if (agent_remaining_ms(deadline) <= 0) /* a 404, then the deadline */
            return agent_fatal(cond, "SecretMissing",
                               "Secret %s/%s, which the Communicator names, does not exist: was it "
                               "deleted? Restart rank 0's pod so that its agent creates it again",
                               f->ns, want);
        agent_kube_backoff(ctx->kube, tries < 5 ? tries : 5, deadline);
    }
    if (strcmp(owner_uid(r.body), owner) != 0) {
        agent_fatal(
            cond, "SecretStale",
            "Secret %s/%s is owned by uid %s, not by this job (%s) like its Communicator: it is "
            "an earlier job's or was made by hand; delete it and restart the job",
            f->ns, want, owner_uid(r.body)[0] ? owner_uid(r.body) : "(none)", owner);
        agent_kube_resp_free(&r);
        return -1;
    }
    rc = decode(r.body, want, f, cond);
    agent_kube_resp_free(&r);
    return rc;
}
