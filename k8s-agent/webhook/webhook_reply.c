/* The webhook's replies: an AdmissionReview with its response, or a Status for a request that
 * is not one, each text in it made valid UTF-8 first (webhook.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include "text.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static int dump_reply(json_t *doc, unsigned int status, struct agent_webhook_reply *reply)
{
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (s == NULL)
        return -1;
    reply->http_status = status;
    reply->content_type = "application/json";
    reply->body = s;
    reply->body_len = strlen(s);
    return 0;
}

int agent_webhook_error_reply(unsigned int http_status, const char *message,
                              struct agent_webhook_reply *reply)
{
    char *text = strdup(message);
    if (text == NULL)
        return -1;
    agent_utf8_clean(text);
    const char *reason = http_status == 413   ? "RequestEntityTooLarge"
                         : http_status == 404 ? "NotFound"
                         : http_status == 405 ? "MethodNotAllowed"
                         : http_status >= 500 ? "InternalError"
                                              : "BadRequest";
    const int rc = dump_reply(json_pack("{s:s, s:s, s:s, s:s, s:s, s:i}", "kind", "Status",
                                        "apiVersion", "v1", "status", "Failure", "message", text,
                                        "reason", reason, "code", (int)http_status),
                              http_status, reply);
    free(text);
    return rc;
}

int agent_webhook_review_reply(const char *uid, int allowed, int code, const char *message,
                               json_t *patch, json_t *warnings, struct agent_webhook_reply *reply)
{
    json_t *resp = json_pack("{s:s, s:b}", "uid", uid, "allowed", allowed);
    json_t *doc = NULL;
    char *b64 = NULL;
    char *msg = message != NULL ? strdup(message) : NULL;
    if (resp == NULL || (message != NULL && msg == NULL))
        goto err;
    if (msg != NULL)
        agent_utf8_clean(msg);
    if (!allowed &&
        json_object_set_new(resp, "status",
                            json_pack("{s:i, s:s, s:s}", "code", code, "message", msg ? msg : "",
                                      "reason", code == 400 ? "BadRequest" : "Forbidden")) != 0)
        goto err;
    if (patch != NULL && json_array_size(patch) > 0) {
        char *text = json_dumps(patch, JSON_COMPACT);
        if (text == NULL)
            goto err;
        b64 = agent_webhook_base64((const unsigned char *)text, strlen(text));
        free(text);
        if (b64 == NULL || json_object_set_new(resp, "patchType", json_string("JSONPatch")) != 0 ||
            json_object_set_new(resp, "patch", json_string(b64)) != 0)
            goto err;
    }
    if (warnings != NULL && json_array_size(warnings) > 0 &&
        json_object_set(resp, "warnings", warnings) != 0)
        goto err;
    doc = json_pack("{s:s, s:s, s:o}", "apiVersion", AGENT_WEBHOOK_REVIEW_API_VERSION, "kind",
                    AGENT_WEBHOOK_REVIEW_KIND, "response", resp);
    resp = NULL;
    free(b64);
    free(msg);
    json_decref(patch);
    json_decref(warnings);
    return dump_reply(doc, 200, reply);
err:
    free(msg);
    free(b64);
    json_decref(resp);
    json_decref(patch);
    json_decref(warnings);
    return -1;
}
