/*
 * AdmissionReview bodies as the webhook answers them (k8s-agent/webhook: agent_webhook_review),
 * with the owner Job, JobSet, Namespace and CollectiveTopology reads answered from the input too.
 * The input is cut at NUL bytes: the request body, then one API answer per read, in order (an
 * answer that starts with three digits and a space has that HTTP status). Every reply must be
 * JSON the API server can read: a 200 AdmissionReview echoing request.uid whose patch, when
 * present, is base64 of a JSON Patch array; or an error status with a Status body.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent.h"
#include "fake_kube.h"
#include "fuzz.h"
#include "webhook.h"

static long api_get(void *arg, const char *path, int64_t deadline_ms, json_t **obj, char *err,
                    size_t errlen)
{
    (void)arg;
    (void)path;
    (void)deadline_ms;
    long code;
    const char *b;
    size_t n;
    *obj = NULL;
    if (fake_kube_next(&code, &b, &n) != 0) {
        snprintf(err, errlen, "no answer (fuzz input ended)");
        return 0;
    }
    if (code == 200) {
        json_error_t jerr;
        *obj = json_loadb(b, n, 0, &jerr);
        if (*obj == NULL) {
            snprintf(err, errlen, "undecodable body: %s", jerr.text);
            return 0;
        }
        return 200;
    }
    snprintf(err, errlen, "HTTP %ld", code);
    return code;
}

static void check_reply(const struct agent_webhook_reply *rep, const char *body, size_t len)
{
    if (rep->body == NULL || rep->content_type == NULL)
        fuzz_fail("a reply without a body or content type");
    json_error_t jerr;
    json_t *r = json_loadb(rep->body, rep->body_len, 0, &jerr);
    if (r == NULL)
        fuzz_fail("the webhook's reply is not JSON");
    if (rep->http_status == 200) {
        json_t *resp = json_object_get(r, "response");
        if (!json_is_object(resp) || !json_is_boolean(json_object_get(resp, "allowed")))
            fuzz_fail("a 200 reply without response.allowed");
        json_t *req = json_loadb(body, len, 0, NULL);
        const char *uid =
            json_string_value(json_object_get(json_object_get(req, "request"), "uid"));
        const char *ruid = json_string_value(json_object_get(resp, "uid"));
        if (uid == NULL || ruid == NULL || strcmp(uid, ruid) != 0)
            fuzz_fail("a 200 reply that does not echo request.uid");
        json_decref(req);
        const char *patch = json_string_value(json_object_get(resp, "patch"));
        if (patch != NULL) {
            unsigned char *raw = NULL;
            long n = agent_base64_decode(patch, &raw);
            if (n < 0)
                fuzz_fail("the patch is not base64");
            json_t *ops = json_loadb((const char *)raw, (size_t)n, 0, NULL);
            if (!json_is_array(ops))
                fuzz_fail("the patch is not a JSON Patch array");
            size_t i;
            json_t *op;
            json_array_foreach(ops, i, op)
            {
                const char *p = json_string_value(json_object_get(op, "path"));
                if (!json_is_string(json_object_get(op, "op")) || p == NULL || p[0] != '/')
                    fuzz_fail("a patch operation without op or an absolute path");
            }
            json_decref(ops);
            free(raw);
        }
    } else if (rep->http_status < 400 || rep->http_status > 599) {
        fuzz_fail("a reply that is neither 200 nor an error status");
    }
    json_decref(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t blen = nul ? (size_t)(nul - data) : size;
    fake_kube_load(nul ? nul + 1 : data + size, nul ? size - blen - 1 : 0);
    struct agent_webhook_config cfg = {
        .agent_image = "registry.example/kcoll-agent:0.1.0",
        .lib_version = "0.1.0",
        .image_pull_policy = "IfNotPresent",
        .cpu_request = "10m",
        .memory_request = "32Mi",
        .cpu_limit = "",
        .memory_limit = "128Mi",
        .max_body = AGENT_WEBHOOK_DEFAULT_MAX_BODY,
        .api_get = (size & 2) ? api_get : NULL,
        .api_arg = NULL,
        .api_timeout_ms = 1000,
    };
    /* the body as the HTTP server hands it over: exactly blen bytes, not terminated */
    char *body = malloc(blen ? blen : 1);
    memcpy(body, data, blen);
    struct agent_webhook_reply rep;
    memset(&rep, 0, sizeof(rep));
    enum agent_webhook_scope scope =
        (size & 1) ? AGENT_WEBHOOK_SCOPE_NAMESPACE : AGENT_WEBHOOK_SCOPE_POD;
    if (agent_webhook_review(&cfg, scope, body, blen, &rep) != 0)
        fuzz_fail("agent_webhook_review failed (only out of memory may)");
    check_reply(&rep, body, blen);
    free(rep.body);
    free(body);
    return 0;
}
