/* The fake Kubernetes API of the agent's fuzz targets (fake_kube.h). */
#define _GNU_SOURCE
#include "fake_kube.h"

#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <curl/curl.h>

#include "fuzz.h"
#include "kube.h"

/* Every agent target: no logs (a rejected input would print a line), and the downward-API
 * variables the sidecar reads (POD_NAME, POD_NAMESPACE; no RANK or WORLD_SIZE, so that the pod's
 * own conventions decide). */
__attribute__((constructor)) static void fake_kube_setup(void)
{
    agent_log_init("off", "fuzz");
    setenv("POD_NAME", "train-1", 1);
    setenv("POD_NAMESPACE", "ml", 1);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
}

static const uint8_t *in;
static size_t in_len, in_pos;
static int served;

static void serve_join(void);

void fake_kube_load(const uint8_t *data, size_t size)
{
    serve_join();
    in = data;
    in_len = size;
    in_pos = 0;
    served = 0;
}

int fake_kube_served(void)
{
    return served;
}

int fake_kube_next(long *code, const char **body, size_t *len)
{
    if (in == NULL || in_pos >= in_len)
        return -1;
    const uint8_t *s = in + in_pos, *nul = memchr(s, 0, in_len - in_pos);
    size_t n = nul ? (size_t)(nul - s) : in_len - in_pos;
    in_pos += n + (nul ? 1 : 0);
    *code = 200;
    if (n >= 4 && s[0] >= '1' && s[0] <= '5' && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' &&
        s[2] <= '9' && s[3] == ' ') {
        *code = (s[0] - '0') * 100 + (s[1] - '0') * 10 + (s[2] - '0');
        s += 4;
        n -= 4;
    }
    *body = (const char *)s;
    *len = n;
    served++;
    return 0;
}

int agent_kube_open(agent_kube_creds_t *creds, const agent_kube_config_t *cfg, agent_kube_t **out)
{
    (void)creds;
    (void)cfg;
    *out = NULL;
    return 0;
}

void agent_kube_close(agent_kube_t *k)
{
    (void)k;
}

const agent_kube_creds_t *agent_kube_creds(const agent_kube_t *k)
{
    (void)k;
    return NULL;
}

long agent_kube_request_count(const agent_kube_t *k)
{
    (void)k;
    return 0;
}

long agent_kube_retry_count(const agent_kube_t *k)
{
    (void)k;
    return 0;
}

long agent_kube_watch_count(const agent_kube_t *k)
{
    (void)k;
    return 0;
}

void agent_kube_count_watch(agent_kube_t *k)
{
    (void)k;
}

int agent_kube_refresh_token(agent_kube_t *k)
{
    (void)k;
    return 0;
}

void agent_kube_backoff(agent_kube_t *k, int attempt, int64_t deadline_ms)
{
    (void)k;
    (void)attempt;
    (void)deadline_ms;
}

int agent_kube_request(agent_kube_t *k, const char *method, const char *path, const json_t *body,
                       const char *content_type, int64_t deadline_ms, agent_kube_resp_t *resp)
{
    (void)k;
    (void)content_type;
    (void)deadline_ms;
    memset(resp, 0, sizeof(*resp));
    if (body != NULL) { /* what the agent sends must encode, as the real client needs */
        char *payload = json_dumps(body, JSON_COMPACT);
        if (payload == NULL) {
            fprintf(stderr, "fuzz: %s %s: the request body does not encode\n", method, path);
            abort();
        }
        free(payload);
    }
    const char *b;
    size_t n;
    if (fake_kube_next(&resp->code, &b, &n) != 0) {
        resp->code = 0;
        snprintf(resp->message, sizeof(resp->message), "%s %s: no answer (fuzz input ended)",
                 method, path);
        return -1;
    }
    resp->attempts = 1;
    if (n > 0)
        resp->body = json_loadb(b, n, 0, NULL);
    const char *kind = json_string_value(json_object_get(resp->body, "kind"));
    if (kind && strcmp(kind, "Status") == 0) {
        agent_json_str(resp->body, "reason", resp->reason, sizeof(resp->reason));
        agent_json_str(resp->body, "message", resp->message, sizeof(resp->message));
    }
    return 0;
}

int agent_kube_read_by_patch(agent_kube_t *k, const char *path, int64_t deadline_ms,
                             agent_kube_resp_t *resp)
{
    json_t *empty = json_object();
    int rc = agent_kube_request(k, "PATCH", path, empty, "application/merge-patch+json",
                                deadline_ms, resp);
    json_decref(empty);
    return rc;
}

void agent_kube_resp_free(agent_kube_resp_t *r)
{
    json_decref(r->body);
    r->body = NULL;
}

void agent_kube_escape(const char *in_, char *buf, size_t len)
{
    snprintf(buf, len, "%s", in_); /* only used to build URLs, which go nowhere here */
}

void agent_condition_from_resp(agent_condition_t *cond, const char *what,
                               const agent_kube_resp_t *r)
{
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "APIError");
    snprintf(cond->message, sizeof(cond->message), "%s: HTTP %ld %s", what, r->code, r->message);
}

/* ---- watch streams: libcurl reads the answer from a fake server ----
 * A thread accepts one connection on an abstract Unix socket, reads the request's headers and
 * answers with the status line and the body, then closes: libcurl reads it as plain HTTP. (An
 * already-connected socket handed to libcurl through CURLOPT_OPENSOCKETFUNCTION does not work
 * with libcurl 7.88, which connects it anyway.) */

static int srv_fd = -1;
static char srv_name[64];
static pthread_t srv_thread;
static int srv_running;

typedef struct {
    char *resp;
    size_t len;
} serve_t;

static void *serve_one(void *arg)
{
    serve_t *sv = arg;
    struct pollfd p = {.fd = srv_fd, .events = POLLIN};
    if (fuzz_poll(&p, 1, 5000) == 1) {
        int fd = accept4(srv_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            char req[8192];
            size_t got = 0;
            while (got < sizeof(req) - 1) { /* the request's headers, up to the blank line */
                ssize_t n = read(fd, req + got, sizeof(req) - 1 - got);
                if (n <= 0)
                    break;
                got += (size_t)n;
                req[got] = '\0';
                if (strstr(req, "\r\n\r\n"))
                    break;
            }
            for (size_t off = 0; off < sv->len;) {
                ssize_t w = send(fd, sv->resp + off, sv->len - off, MSG_NOSIGNAL);
                if (w <= 0)
                    break;
                off += (size_t)w;
            }
            close(fd);
        }
    }
    free(sv->resp);
    free(sv);
    return NULL;
}

static void serve_join(void)
{
    if (srv_running) {
        pthread_join(srv_thread, NULL);
        srv_running = 0;
    }
}

void *agent_kube_easy(agent_kube_t *k, const char *url_path, long timeout_ms, void **headers)
{
    (void)k;
    *headers = NULL;
    long code;
    const char *b;
    size_t n;
    serve_join();
    if (fake_kube_next(&code, &b, &n) != 0)
        return NULL;
    if (srv_fd < 0) {
        struct sockaddr_un a = {.sun_family = AF_UNIX};
        snprintf(srv_name, sizeof(srv_name), "kcoll-fuzz-kube-%d", (int)getpid());
        memcpy(a.sun_path + 1, srv_name, strlen(srv_name));
        socklen_t alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(srv_name));
        srv_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (srv_fd < 0 || bind(srv_fd, (struct sockaddr *)&a, alen) != 0 ||
            listen(srv_fd, 4) != 0) {
            fprintf(stderr, "fuzz: cannot listen as the fake API server\n");
            abort();
        }
    }
    serve_t *sv = malloc(sizeof(*sv));
    char head[160];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %ld Fuzz\r\nContent-Type: application/json\r\n"
                      "Connection: close\r\n\r\n",
                      code);
    if (sv == NULL || (sv->resp = malloc((size_t)hl + n + 1)) == NULL) {
        free(sv);
        return NULL;
    }
    memcpy(sv->resp, head, (size_t)hl);
    memcpy(sv->resp + hl, b, n);
    sv->len = (size_t)hl + n;
    if (pthread_create(&srv_thread, NULL, serve_one, sv) != 0) {
        free(sv->resp);
        free(sv);
        return NULL;
    }
    srv_running = 1;
    CURL *h = curl_easy_init();
    if (h == NULL)
        return NULL;
    char url[2100];
    snprintf(url, sizeof(url), "http://fake-apiserver%s", url_path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_ABSTRACT_UNIX_SOCKET, srv_name);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (getenv("FUZZ_VERBOSE"))
        curl_easy_setopt(h, CURLOPT_VERBOSE, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS,
                     timeout_ms > 0 && timeout_ms < 5000 ? timeout_ms : 5000L);
    return h;
}
