/* The fake Kubernetes API of the agent's fuzz targets (fake_kube.h). */
#define _GNU_SOURCE
#include "fake_kube.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>

#include "kube.h"

/* Every agent target: quiet logs (errors only) and the downward-API variables the sidecar reads
 * (POD_NAME, POD_NAMESPACE; no RANK or WORLD_SIZE, so that the pod's own conventions decide). */
__attribute__((constructor)) static void fake_kube_setup(void)
{
    agent_log_init("error", "fuzz");
    setenv("POD_NAME", "train-1", 1);
    setenv("POD_NAMESPACE", "ml", 1);
    unsetenv("RANK");
    unsetenv("WORLD_SIZE");
}

static const uint8_t *in;
static size_t in_len, in_pos;
static int served;

void fake_kube_load(const uint8_t *data, size_t size)
{
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

/* ---- watch streams: libcurl reads the answer from a socketpair ---- */

static curl_socket_t stream_fd = CURL_SOCKET_BAD;

static curl_socket_t open_stream(void *arg, curlsocktype purpose, struct curl_sockaddr *addr)
{
    (void)arg;
    (void)purpose;
    (void)addr;
    curl_socket_t fd = stream_fd;
    stream_fd = CURL_SOCKET_BAD;
    return fd;
}

static int already_connected(void *arg, curl_socket_t fd, curlsocktype purpose)
{
    (void)arg;
    (void)fd;
    (void)purpose;
    return CURL_SOCKOPT_ALREADY_CONNECTED;
}

static int write_all(int fd, const void *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            return -1;
        p = (const char *)p + w;
        n -= (size_t)w;
    }
    return 0;
}

void *agent_kube_easy(agent_kube_t *k, const char *url_path, long timeout_ms, void **headers)
{
    (void)k;
    *headers = NULL;
    long code;
    const char *b;
    size_t n;
    int sv[2];
    if (fake_kube_next(&code, &b, &n) != 0)
        return NULL;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
        return NULL;
    int big = 4 << 20;
    setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
    char head[160];
    int hl = snprintf(head, sizeof(head),
                      "HTTP/1.1 %ld Fuzz\r\nContent-Type: application/json\r\n"
                      "Connection: close\r\n\r\n",
                      code);
    if (write_all(sv[1], head, (size_t)hl) != 0 || write_all(sv[1], b, n) != 0) {
        close(sv[0]);
        close(sv[1]);
        return NULL;
    }
    close(sv[1]);
    CURL *h = curl_easy_init();
    if (h == NULL) {
        close(sv[0]);
        return NULL;
    }
    if (stream_fd != CURL_SOCKET_BAD)
        close(stream_fd);
    stream_fd = sv[0];
    char url[2100];
    snprintf(url, sizeof(url), "http://127.0.0.1:9%s", url_path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_OPENSOCKETFUNCTION, open_stream);
    curl_easy_setopt(h, CURLOPT_SOCKOPTFUNCTION, already_connected);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 && timeout_ms < 5000 ? timeout_ms : 5000L);
    return h;
}
