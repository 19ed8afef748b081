/* Unit checks of the webhook helpers that the HTTPS test cannot reach one by one: JSON-pointer
 * escaping, base64, resource quantities, and agent_webhook_review() on hand-made bodies. */
#include "webhook.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, what)                                                                          \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            failures++;                                                                            \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, what);                         \
        }                                                                                          \
    } while (0)

static void check_escape(const char *in, const char *want)
{
    char *got = agent_webhook_pointer_escape(in);
    CHECK(got != NULL && strcmp(got, want) == 0, in);
    free(got);
}

static void check_b64(const char *in, const char *want)
{
    char *got = agent_webhook_base64((const unsigned char *)in, strlen(in));
    CHECK(got != NULL && strcmp(got, want) == 0, in);
    free(got);
}

static const struct agent_webhook_config cfg = {
    .agent_image = "img:1.0.0",
    .lib_version = "1.0.0",
    .image_pull_policy = "IfNotPresent",
    .cpu_request = "50m",
    .memory_request = "64Mi",
    .cpu_limit = "",
    .memory_limit = "256Mi",
    .max_body = AGENT_WEBHOOK_DEFAULT_MAX_BODY,
};

static void check_review(const char *body, unsigned int status, const char *needle)
{
    struct agent_webhook_reply r;
    int rc = agent_webhook_review(&cfg, AGENT_WEBHOOK_SCOPE_POD, body, strlen(body), &r);
    CHECK(rc == 0, body);
    CHECK(r.http_status == status, body);
    CHECK(r.body != NULL && strstr(r.body, needle) != NULL, needle);
    free(r.body);
}

int main(void)
{
    check_escape("kcoll.io/injected", "kcoll.io~1injected");
    check_escape("a~b/c", "a~0b~1c");
    check_escape("~/~/", "~0~1~0~1");
    check_escape("", "");
    check_escape("plain", "plain");

    check_b64("", "");
    check_b64("f", "Zg==");
    check_b64("fo", "Zm8=");
    check_b64("foo", "Zm9v");
    check_b64("foobar", "Zm9vYmFy");

    CHECK(agent_webhook_quantity_valid("50m"), "50m");
    CHECK(agent_webhook_quantity_valid("64Mi"), "64Mi");
    CHECK(agent_webhook_quantity_valid("1.5"), "1.5");
    CHECK(agent_webhook_quantity_valid("2Gi"), "2Gi");
    CHECK(!agent_webhook_quantity_valid(""), "empty");
    CHECK(!agent_webhook_quantity_valid("lots"), "lots");
    CHECK(!agent_webhook_quantity_valid("64 Mi"), "space");
    CHECK(!agent_webhook_quantity_valid("-1"), "negative");
    CHECK(!agent_webhook_quantity_valid("1Mb"), "Mb");

    check_review("", 400, "not valid JSON");
    check_review("null", 400, "not valid JSON");
    check_review("[1]", 400, "not a JSON object");
    check_review("{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\","
                 "\"request\":{\"uid\":\"\"}}",
                 400, "request.uid");
    check_review("{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\","
                 "\"request\":{\"uid\":\"u1\",\"operation\":\"CREATE\"}}",
                 200, "\"allowed\":false");
    /* a pod without metadata at all: the patch adds /metadata whole */
    check_review("{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\","
                 "\"request\":{\"uid\":\"u2\",\"operation\":\"CREATE\","
                 "\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},"
                 "\"object\":{\"spec\":{\"containers\":[{\"name\":\"c\"}]}}}}",
                 200, "\"allowed\":true");
    /* embedded NUL: rejected as JSON, not truncated */
    {
        static const char nul[] = "{\"kind\":\"Admission\0Review\"}";
        struct agent_webhook_reply r;
        CHECK(agent_webhook_review(&cfg, AGENT_WEBHOOK_SCOPE_POD, nul, sizeof(nul) - 1, &r) == 0,
              "nul");
        CHECK(r.http_status == 400, "nul is a bad request");
        free(r.body);
    }
    printf("webhook_unit: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
