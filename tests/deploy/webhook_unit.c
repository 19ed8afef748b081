/* Unit checks of the webhook helpers that the HTTPS test cannot reach one by one: JSON-pointer
 * escaping, base64, resource quantities, agent_webhook_review() on hand-made bodies, and the
 * facts read at pod creation (owner Job, JobSet, Namespace) against an in-process fake API with
 * its errors (403, 404, no answer); the command line's checks and exit statuses. */
#include "webhook.h"
#include "pod_ranks.h"

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

/* ---- a fake API: path -> (status, body) ---- */
struct fake_obj {
    const char *path;
    long code;
    const char *body;
};

static const struct fake_obj fake_api[] = {
    {"/api/v1/namespaces/team-a", 200,
     "{\"metadata\":{\"name\":\"team-a\",\"labels\":{\"team\":\"ml\","
     "\"kubernetes.io/metadata.name\":\"team-a\"}}}"},
    {"/apis/batch/v1/namespaces/team-a/jobs/train", 200,
     "{\"spec\":{\"completions\":8,\"parallelism\":8,\"completionMode\":\"Indexed\"}}"},
    {"/apis/batch/v1/namespaces/team-a/jobs/plain", 200,
     "{\"spec\":{\"completions\":2,\"parallelism\":2,\"completionMode\":\"NonIndexed\"}}"},
    {"/apis/batch/v1/namespaces/team-a/jobs/narrow", 200,
     "{\"spec\":{\"completions\":4,\"parallelism\":2,\"completionMode\":\"Indexed\"}}"},
    {"/apis/batch/v1/namespaces/team-a/jobs/secret", 403,
     "jobs.batch \"secret\" is forbidden: User \"system:serviceaccount:kcoll:webhook\" cannot "
     "get resource \"jobs\""},
    {"/apis/batch/v1/namespaces/team-a/jobs/js-w-1", 200,
     "{\"spec\":{\"completions\":2,\"parallelism\":2,\"completionMode\":\"Indexed\"}}"},
    {"/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/js", 200,
     "{\"metadata\":{\"uid\":\"js-uid-1\"},\"spec\":{\"replicatedJobs\":["
     "{\"name\":\"w\",\"replicas\":3,\"template\":{\"spec\":{\"completions\":2}}}]}}"},
    {"/apis/jobset.x-k8s.io/v1alpha2/namespaces/team-a/jobsets/uneven", 200,
     "{\"metadata\":{\"uid\":\"js-uid-2\"},\"spec\":{\"replicatedJobs\":["
     "{\"name\":\"a\",\"replicas\":1,\"template\":{\"spec\":{\"completions\":2}}},"
     "{\"name\":\"b\",\"replicas\":2,\"template\":{\"spec\":{\"completions\":4}}}]}}"},
    {NULL, 0, NULL},
};

static int fake_calls;

static long fake_get(void *arg, const char *path, int64_t deadline_ms, json_t **obj, char *err,
                     size_t errlen)
{
    const int *down = arg;
    (void)deadline_ms;
    fake_calls++;
    if (down != NULL && *down) {
        snprintf(err, errlen, "connection refused");
        return 0;
    }
    for (int i = 0; fake_api[i].path != NULL; i++) {
        if (strcmp(fake_api[i].path, path) != 0)
            continue;
        if (fake_api[i].code == 200) {
            *obj = json_loads(fake_api[i].body, 0, NULL);
            return *obj != NULL ? 200 : 500;
        }
        snprintf(err, errlen, "Forbidden: %s", fake_api[i].body);
        return fake_api[i].code;
    }
    snprintf(err, errlen, "NotFound: %s not found", path);
    return 404;
}

/* A pod of Job job (NULL: no owner) with extra labels as "k=v" pairs, facts read into annots. */
static json_t *facts_for(const struct agent_webhook_config *c, const char *job, const char *labels,
                         json_t **warnings)
{
    json_t *pod = json_loads(labels ? labels : "{}", 0, NULL), *annots = json_object();
    json_t *meta = json_pack("{s:s, s:o}", "name", "p-0", "labels", pod);
    json_t *p = json_pack("{s:o}", "metadata", meta);
    *warnings = json_array();
    if (job != NULL)
        json_object_set_new(meta, "ownerReferences",
                            json_pack("[{s:s, s:s, s:s, s:s, s:b}]", "apiVersion", "batch/v1",
                                      "kind", "Job", "name", job, "uid", "u-1", "controller", 1));
    CHECK(agent_webhook_pod_facts(c, "team-a", p, annots, *warnings) == 0, "pod facts");
    json_decref(p);
    return annots;
}

static const char *ann(const json_t *annots, const char *key)
{
    const char *v = json_string_value(json_object_get(annots, key));
    return v ? v : "";
}

static void check_facts(void)
{
    struct agent_webhook_config c = cfg;
    int down = 0;
    json_t *a, *w;
    c.api_get = fake_get;
    c.api_arg = &down;
    c.api_timeout_ms = 1000;

    /* Indexed Job: world size = completions; namespace labels as sorted JSON */
    a = facts_for(&c, "train", NULL, &w);
    CHECK(strcmp(ann(a, "kcoll.io/world-size"), "8") == 0, "Indexed Job world size");
    CHECK(strcmp(ann(a, "kcoll.io/namespace-labels"),
                 "{\"kubernetes.io/metadata.name\":\"team-a\",\"team\":\"ml\"}") == 0,
          "namespace labels");
    CHECK(json_array_size(w) == 0 && json_object_get(a, "kcoll.io/world-size-error") == NULL,
          "no warnings");
    json_decref(a);
    json_decref(w);

    /* 403 on the Job: an error annotation naming the fix and a warning, no world size */
    a = facts_for(&c, "secret", NULL, &w);
    CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "Forbidden: reading Job team-a/secret",
                  36) == 0,
          ann(a, "kcoll.io/world-size-error"));
    CHECK(strstr(ann(a, "kcoll.io/world-size-error"), "webhook ClusterRole") != NULL,
          "403 names the fix");
    CHECK(json_object_get(a, "kcoll.io/world-size") == NULL, "no world size after a 403");
    CHECK(json_array_size(w) == 1 && strstr(json_string_value(json_array_get(w, 0)), "403"),
          "403 becomes an admission warning");
    json_decref(a);
    json_decref(w);

    /* the Job is gone (404), not Indexed, parallelism too low */
    a = facts_for(&c, "nosuch", NULL, &w);
    CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "NotFound: ", 10) == 0, "404");
    json_decref(a);
    json_decref(w);
    a = facts_for(&c, "plain", NULL, &w);
    CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "JobNotIndexed: ", 15) == 0,
          "NonIndexed Job");
    json_decref(a);
    json_decref(w);
    a = facts_for(&c, "narrow", NULL, &w);
    CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "JobParallelismTooLow: ", 22) == 0,
          "parallelism < completions");
    json_decref(a);
    json_decref(w);

    /* JobSet: uid and world size from its spec (3 Jobs x 2) */
    a = facts_for(&c, "js-w-1",
                  "{\"jobset.sigs.k8s.io/jobset-name\":\"js\","
                  "\"jobset.sigs.k8s.io/global-replicas\":\"3\"}",
                  &w);
    CHECK(strcmp(ann(a, "kcoll.io/world-size"), "6") == 0, "JobSet world size");
    CHECK(strcmp(ann(a, "kcoll.io/job-uid"), "js-uid-1") == 0, "JobSet uid");
    json_decref(a);
    json_decref(w);
    /* replicated Jobs with different completions: no rank formula, a named error */
    a = facts_for(&c, "js-w-1",
                  "{\"jobset.sigs.k8s.io/jobset-name\":\"uneven\","
                  "\"jobset.sigs.k8s.io/global-replicas\":\"3\"}",
                  &w);
    CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "WorldSizeUnknown: ", 18) == 0,
          "uneven JobSet");
    CHECK(strcmp(ann(a, "kcoll.io/job-uid"), "js-uid-2") == 0, "uneven JobSet uid still set");
    json_decref(a);
    json_decref(w);
    /* JobSet not readable: uid error, world size from the labels */
    a = facts_for(&c, "js-w-1",
                  "{\"jobset.sigs.k8s.io/jobset-name\":\"gone\","
                  "\"jobset.sigs.k8s.io/global-replicas\":\"3\"}",
                  &w);
    CHECK(strcmp(ann(a, "kcoll.io/world-size"), "6") == 0, "world size from labels");
    CHECK(strncmp(ann(a, "kcoll.io/job-uid-error"), "NotFound: ", 10) == 0, "JobSet 404");
    json_decref(a);
    json_decref(w);

    /* names from the pod never reach an API path unless they are DNS-1123 names (no "../",
     * "%2F", "/", upper case, overlong): an InvalidName error and not one read */
    static const char *const hostile[] = {
        "../../kube-system/jobs/x", "a%2Fb", "a/b", "..", "Train", "-x", "x-", "a..b", ""};
    for (size_t k = 0; k < sizeof(hostile) / sizeof(hostile[0]); k++) {
        fake_calls = 0;
        a = facts_for(&c, hostile[k], NULL, &w);
        printf("owner Job name \"%s\": %d read(s), %s\n", hostile[k], fake_calls,
               ann(a, "kcoll.io/world-size-error"));
        CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "InvalidName: ", 13) == 0 &&
                  fake_calls == 1 /* the Namespace only */,
              "a hostile owner Job name: InvalidName, no Job read");
        json_decref(a);
        json_decref(w);
    }
    char longname[300];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    CHECK(!agent_name_ok(longname, 1), "a 299-character name is refused");
    longname[253] = '\0';
    CHECK(agent_name_ok(longname, 1) && !agent_name_ok(longname, 0),
          "253 characters: a subdomain, not a label");
    CHECK(agent_name_ok("train-1.v2", 1) && !agent_name_ok("train-1.v2", 0),
          "dots: subdomain only");

    /* PyTorchJob / bare pods: only the Namespace is read */
    fake_calls = 0;
    a = facts_for(&c, NULL, NULL, &w);
    CHECK(fake_calls == 1 && json_object_size(a) == 1, "bare pod: one read");
    json_decref(a);
    json_decref(w);

    /* the API server does not answer: APIUnavailable */
    down = 1;
    a = facts_for(&c, "train", NULL, &w);
    CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "APIUnavailable: ", 16) == 0, "no answer");
    CHECK(strncmp(ann(a, "kcoll.io/namespace-labels-error"), "APIUnavailable: ", 16) == 0,
          "no answer (namespace)");
    json_decref(a);
    json_decref(w);

    /* no credentials at all: error annotations, the pod is still injected */
    c.api_get = NULL;
    a = facts_for(&c, "train", NULL, &w);
    CHECK(strncmp(ann(a, "kcoll.io/world-size-error"), "APIUnavailable: ", 16) == 0,
          "no credentials");
    json_decref(a);
    json_decref(w);
}

/* A pod whose creator wrote the webhook's annotations: they are replaced or removed. */
/* The JSONPatch of a review reply, as text (calloc'd; "" when none). */
static char *patch_text(const json_t *doc)
{
    const char *p64 = json_string_value(json_object_get(json_object_get(doc, "response"), "patch"));
    static const char alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t n = p64 ? strlen(p64) : 0, o = 0;
    char *text = calloc(n + 1, 1);
    unsigned long acc = 0;
    int bits = 0;
    for (size_t i = 0; text != NULL && i < n && p64[i] != '='; i++) {
        const char *at = strchr(alphabet, p64[i]);
        acc = (acc << 6) | (unsigned long)(at ? at - alphabet : 0);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            text[o++] = (char)((acc >> bits) & 0xff);
        }
    }
    return text;
}

/* The review of a pod (spec JSON) by a webhook with c: the reply document. */
static json_t *review_spec(const struct agent_webhook_config *c, const char *spec)
{
    char body[4096];
    struct agent_webhook_reply r;
    snprintf(body, sizeof(body),
             "{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\","
             "\"request\":{\"uid\":\"id\",\"operation\":\"CREATE\",\"namespace\":\"team-a\","
             "\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},"
             "\"object\":{\"metadata\":{\"name\":\"p\",\"labels\":{\"kcoll.io/inject\":\"true\"}},"
             "\"spec\":%s}}}",
             spec);
    if (agent_webhook_review(c, AGENT_WEBHOOK_SCOPE_POD, body, strlen(body), &r) != 0)
        return NULL;
    json_t *doc = json_loads(r.body, 0, NULL);
    free(r.body);
    return doc;
}

#define TOKEN_VOLUME(name)                                                                         \
    "{\"name\":\"" name "\",\"projected\":{\"sources\":[{\"serviceAccountToken\":"                 \
    "{\"path\":\"token\",\"expirationSeconds\":3607}}]}}"
#define SA_MOUNT(name)                                                                             \
    "{\"name\":\"" name "\",\"readOnly\":true,"                                                    \
    "\"mountPath\":\"/var/run/secrets/kubernetes.io/serviceaccount\"}"

/* Issue 21 finding 7: the API token reaches the sidecar only; the socket admits the pod's uids. */
static void check_identity(void)
{
    struct agent_webhook_config c = cfg;
    c.agent_service_account = "kcoll-agent";
    /* no ServiceAccount named: put on kcoll-agent, the admission plugin's token taken away */
    json_t *doc =
        review_spec(&c, "{\"volumes\":[" TOKEN_VOLUME(
                            "kube-api-access-x1") "],\"containers\":["
                                                  "{\"name\":\"c\",\"volumeMounts\":[" SA_MOUNT(
                                                      "kube-api-access-x1") "]}]}");
    char *text = doc ? patch_text(doc) : NULL;
    CHECK(text &&
              strstr(text, "{\"op\":\"remove\",\"path\":\"/spec/containers/0/volumeMounts/0\"}") &&
              strstr(text, "{\"op\":\"remove\",\"path\":\"/spec/volumes/0\"}"),
          "the admission plugin's token volume leaves the training container");
    CHECK(text && strstr(text, "\"path\":\"/spec/serviceAccountName\",\"value\":\"kcoll-agent\"") &&
              strstr(text, "\"path\":\"/spec/automountServiceAccountToken\",\"value\":false"),
          "the pod runs as kcoll-agent, nothing automounted");
    CHECK(text && strstr(text, "\"name\":\"kcoll-agent-token\",\"mountPath\":"
                               "\"/var/run/secrets/kubernetes.io/serviceaccount\""),
          "the sidecar mounts the projected token");
    CHECK(text && strstr(text, "{\"name\":\"COLL_AGENT_IPC_ALLOW_UIDS\",\"value\":\"0\"}"),
          "a container without runAsUser is taken to run as root");
    free(text);
    json_decref(doc);

    /* the pod's own ServiceAccount: kept, the sidecar uses its token, a warning says the cost */
    doc = review_spec(&c,
                      "{\"serviceAccountName\":\"trainer\",\"volumes\":[" TOKEN_VOLUME(
                          "kube-api-access-x2") "],\"securityContext\":{\"runAsUser\":1000},"
                                                "\"containers\":[{\"name\":\"c\"},{\"name\":\"d\","
                                                "\"securityContext\":{\"runAsUser\":2000}}]}");
    text = doc ? patch_text(doc) : NULL;
    char *warn = json_dumps(json_object_get(json_object_get(doc, "response"), "warnings"), 0);
    CHECK(text && !strstr(text, "serviceAccountName") && !strstr(text, "\"op\":\"remove\"") &&
              strstr(text, "\"name\":\"kube-api-access-x2\",\"mountPath\":"),
          "a pod's own ServiceAccount is kept and the sidecar mounts its token");
    CHECK(warn && strstr(warn, "runs as ServiceAccount trainer") &&
              strstr(warn, "rbac.agentServiceAccounts"),
          "with a warning that names the account and the cost");
    free(warn);
    CHECK(text && strstr(text, "{\"name\":\"COLL_AGENT_IPC_ALLOW_UIDS\",\"value\":\"1000,2000\"}"),
          "the socket admits the uids the containers run as");
    free(text);
    json_decref(doc);

    /* a token volume of the user's own would carry kcoll-agent's token: refused */
    doc = review_spec(
        &c, "{\"volumes\":[" TOKEN_VOLUME("vault-token") "],"
                                                         "\"containers\":[{\"name\":\"c\"}]}");
    CHECK(doc && json_is_false(json_object_get(json_object_get(doc, "response"), "allowed")),
          "a pod with its own projected token volume is refused");
    const char *msg = json_string_value(
        json_object_get(json_object_get(json_object_get(doc, "response"), "status"), "message"));
    CHECK(msg && strstr(msg, "volume vault-token projects a ServiceAccount token"),
          "naming the volume");
    json_decref(doc);
}

static void check_forged(void)
{
    struct agent_webhook_config c = cfg;
    struct agent_webhook_reply r;
    int down = 0;
    const char *body =
        "{\"kind\":\"AdmissionReview\",\"apiVersion\":\"admission.k8s.io/v1\","
        "\"request\":{\"uid\":\"f1\",\"operation\":\"CREATE\",\"namespace\":\"team-a\","
        "\"kind\":{\"group\":\"\",\"version\":\"v1\",\"kind\":\"Pod\"},"
        "\"object\":{\"metadata\":{\"name\":\"p\",\"labels\":{\"kcoll.io/inject\":\"true\"},"
        "\"annotations\":{\"kcoll.io/world-size\":\"999\",\"kcoll.io/job-uid\":\"forged\","
        "\"kcoll.io/namespace-labels\":\"{}\"},"
        "\"ownerReferences\":[{\"apiVersion\":\"batch/v1\",\"kind\":\"Job\","
        "\"name\":\"secret\",\"uid\":\"u\",\"controller\":true}]},"
        "\"spec\":{\"containers\":[{\"name\":\"c\"}]}}}}";
    c.api_get = fake_get;
    c.api_arg = &down;
    CHECK(agent_webhook_review(&c, AGENT_WEBHOOK_SCOPE_POD, body, strlen(body), &r) == 0,
          "forged review");
    json_t *doc = json_loads(r.body, 0, NULL);
    CHECK(json_is_true(json_object_get(json_object_get(doc, "response"), "allowed")),
          "a failed read never refuses the pod");
    char *text = patch_text(doc);
    CHECK(text != NULL &&
              strstr(text,
                     "{\"op\":\"remove\",\"path\":\"/metadata/annotations/kcoll.io~1world-size\"}"),
          "forged world size removed");
    CHECK(text != NULL && strstr(text, "\"op\":\"remove\",\"path\":\"/metadata/annotations/"
                                       "kcoll.io~1job-uid\""),
          "forged job uid removed");
    CHECK(text != NULL &&
              strstr(text, "kcoll.io~1namespace-labels\",\"value\":\"{\\\"kubernetes.io/"),
          "namespace labels replaced with the real ones");
    CHECK(text != NULL && strstr(text, "kcoll.io~1world-size-error\",\"value\":\"Forbidden: "),
          "world size error written");
    free(text);
    json_decref(doc);
    free(r.body);
}

/* The command line: defaults, checks, exit statuses (messages go to stderr). */
#define ARGC(argv) ((int)(sizeof(argv) / sizeof((argv)[0])) - 1)
static void check_opts(void)
{
    struct agent_webhook_opts o;
    /* clang-format off */
    char *good[] = {"webhook", "--cert", "c.pem", "--key", "k.pem", "--agent-image", "img:1",
                    "--lib-version", "0.1.0", "--listen", "[::1]:0", "--threads", "4", NULL};
    char *bad_threads[] = {"webhook", "--threads", "0", NULL};
    char *missing[] = {"webhook", "--cert", "c.pem", NULL};
    char *bad_pull[] = {"webhook", "--cert", "c", "--key", "k", "--agent-image", "i:1",
                        "--lib-version", "1", "--image-pull-policy", "Sometimes", NULL};
    /* clang-format on */

    CHECK(agent_webhook_opts_parse(ARGC(good), good, &o) == AGENT_WEBHOOK_SERVE,
          "good command line");
    CHECK(o.threads == 4 && o.port == 0 && !o.listen_any && o.listen_addr.ss_family == AF_INET6,
          "good command line: threads and listen address");
    CHECK(strcmp(o.cfg.image_pull_policy, "IfNotPresent") == 0 && o.cfg.api_timeout_ms == 3000 &&
              o.cfg.max_body == AGENT_WEBHOOK_DEFAULT_MAX_BODY,
          "defaults");
    CHECK(agent_webhook_opts_parse(ARGC(bad_threads), bad_threads, &o) == 2,
          "--threads 0 is bad usage");
    CHECK(agent_webhook_opts_parse(ARGC(missing), missing, &o) == 2, "required flags");
    CHECK(agent_webhook_opts_parse(ARGC(bad_pull), bad_pull, &o) == 2, "bad pull policy");
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
    /* jansson's error quotes the input up to a character cut short ("near '\"4b\\\xce'"): the
     * 400 says so, where the reply failed to build before and the server answered 500 "out of
     * memory" (found by fuzz_webhook) */
    check_review("{\"kind\":\"AdmissionReview\",\"request\":{\"uid\":\"4b\\\xce\xa6\x01", 400,
                 "invalid escape near");
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
    check_facts();
    check_forged();
    check_identity();
    check_opts();
    printf("webhook_unit: %s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
