/* Kubernetes API requests over libcurl: TLS always verified, bearer token re-read on rotation,
 * every attempt with a deadline, 429/5xx/transport errors retried with capped jittered back-off. */
#define _GNU_SOURCE
#include "kube.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#define MAX_BODY_BYTES  (64u << 20)
#define TOKEN_REREAD_MS 60000

struct agent_kube {
    agent_kube_creds_t *creds;
    agent_kube_config_t cfg;
    char user_agent[256];
    pthread_mutex_t token_mu; /* creds->token */
    int64_t token_read_ms;
    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
    _Atomic long requests;
    _Atomic long retries;
    _Atomic long watches;
    unsigned int seed;
    pthread_mutex_t seed_mu;
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
    agent_kube_t *k = arg;
    (void)h;
    (void)access;
    pthread_mutex_lock(&k->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg)
{
    agent_kube_t *k = arg;
    (void)h;
    pthread_mutex_unlock(&k->share_mu[data]);
}

int agent_kube_open(agent_kube_creds_t *creds, const agent_kube_config_t *cfg, agent_kube_t **out)
{
    agent_kube_t *k = calloc(1, sizeof(*k));
    if (!k)
        return -1;
    pthread_once(&curl_once, curl_init_once);
    k->creds = creds;
    k->cfg = *cfg;
    if (k->cfg.request_timeout_ms <= 0)
        k->cfg.request_timeout_ms = 10000;
    if (k->cfg.backoff_base_ms <= 0)
        k->cfg.backoff_base_ms = 200;
    if (k->cfg.backoff_cap_ms <= 0)
        k->cfg.backoff_cap_ms = 5000;
    snprintf(k->user_agent, sizeof(k->user_agent), "%s",
             cfg->user_agent ? cfg->user_agent : "coll-agent/" AGENT_VERSION);
    k->cfg.user_agent = k->user_agent;
    pthread_mutex_init(&k->token_mu, NULL);
    pthread_mutex_init(&k->seed_mu, NULL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&k->share_mu[i], NULL);
    k->token_read_ms = agent_now_ms();
    if (agent_random_bytes((unsigned char *)&k->seed, sizeof(k->seed)) != 0)
        k->seed = (unsigned)agent_now_ms();
    k->share = curl_share_init();
    if (!k->share) {
        free(k);
        return -1;
    }
    curl_share_setopt(k->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(k->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(k->share, CURLSHOPT_USERDATA, k);
    curl_share_setopt(k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_CONNECT);
    curl_share_setopt(k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    curl_share_setopt(k->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    *out = k;
    return 0;
}

void agent_kube_close(agent_kube_t *k)
{
    if (!k)
        return;
    curl_share_cleanup(k->share);
    free(k);
}

const agent_kube_creds_t *agent_kube_creds(const agent_kube_t *k)
{
    return k->creds;
}

long agent_kube_request_count(const agent_kube_t *k)
{
    return k->requests;
}
long agent_kube_retry_count(const agent_kube_t *k)
{
    return k->retries;
}
long agent_kube_watch_count(const agent_kube_t *k)
{
    return k->watches;
}
void agent_kube_count_watch(agent_kube_t *k)
{
    k->watches++;
}

int agent_kube_refresh_token(agent_kube_t *k)
{
    int changed;
    pthread_mutex_lock(&k->token_mu);
    changed = agent_creds_refresh_token(k->creds);
    k->token_read_ms = agent_now_ms();
    pthread_mutex_unlock(&k->token_mu);
    if (changed == 1)
        agent_info("AGENT-KUBE-TOKEN-ROTATED", "re-read bearer token from %s",
                   k->creds->token_file);
    else if (changed < 0)
        agent_warn("AGENT-KUBE-TOKEN-READ-FAIL", "cannot re-read token file %s: %s",
                   k->creds->token_file, strerror(errno));
    return changed;
}

void agent_kube_backoff(agent_kube_t *k, int attempt, int64_t deadline_ms)
{
    int64_t d = k->cfg.backoff_base_ms;
    unsigned r;
    for (int i = 0; i < attempt && d < k->cfg.backoff_cap_ms; i++)
        d *= 2;
    if (d > k->cfg.backoff_cap_ms)
        d = k->cfg.backoff_cap_ms;
    pthread_mutex_lock(&k->seed_mu);
    r = (unsigned)rand_r(&k->seed);
    pthread_mutex_unlock(&k->seed_mu);
    d = d / 2 + (int64_t)(r % (unsigned)(d / 2 + 1)); /* equal jitter */
    if (d > agent_remaining_ms(deadline_ms))
        d = agent_remaining_ms(deadline_ms);
    agent_sleep_ms(d);
}

void *agent_kube_easy(agent_kube_t *k, const char *url_path, long timeout_ms, void **headers)
{
    CURL *h = curl_easy_init();
    struct curl_slist *hdrs = NULL;
    char url[2048], auth[8192];
    if (!h)
        return NULL;
    if (k->creds->token_file[0] && agent_now_ms() - k->token_read_ms > TOKEN_REREAD_MS)
        agent_kube_refresh_token(k);
    snprintf(url, sizeof(url), "%s%s", k->creds->server, url_path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_SHARE, k->share);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "https");
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
    if (k->creds->ca_data) {
        struct curl_blob blob = {k->creds->ca_data, k->creds->ca_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_CAINFO_BLOB, &blob);
    } else if (k->creds->ca_file[0]) {
        curl_easy_setopt(h, CURLOPT_CAINFO, k->creds->ca_file);
    }
    if (k->creds->cert_data) {
        struct curl_blob blob = {k->creds->cert_data, k->creds->cert_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLCERT_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLCERTTYPE, "PEM");
    } else if (k->creds->cert_file[0]) {
        curl_easy_setopt(h, CURLOPT_SSLCERT, k->creds->cert_file);
    }
    if (k->creds->key_data) {
        struct curl_blob blob = {k->creds->key_data, k->creds->key_len, CURL_BLOB_COPY};
        curl_easy_setopt(h, CURLOPT_SSLKEY_BLOB, &blob);
        curl_easy_setopt(h, CURLOPT_SSLKEYTYPE, "PEM");
    } else if (k->creds->key_file[0]) {
        curl_easy_setopt(h, CURLOPT_SSLKEY, k->creds->key_file);
    }
    curl_easy_setopt(h, CURLOPT_USERAGENT, k->user_agent);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms > 0 ? timeout_ms : 1L);
    hdrs = curl_slist_append(hdrs, "Accept: application/json");
    pthread_mutex_lock(&k->token_mu);
    if (k->creds->token) {
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", k->creds->token);
        hdrs = curl_slist_append(hdrs, auth);
    }
    pthread_mutex_unlock(&k->token_mu);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
    *headers = hdrs;
    return h;
}

typedef struct {
    char *data;
    size_t len, cap;
    int overflow;
    long retry_after_s;
} body_t;

static size_t body_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    body_t *b = arg;
    size_t n = size * nmemb;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        char *nd;
        while (cap < b->len + n + 1)
            cap *= 2;
        if (cap > MAX_BODY_BYTES) {
            b->overflow = 1;
            return 0;
        }
        nd = realloc(b->data, cap);
        if (!nd)
            return 0;
        b->data = nd;
        b->cap = cap;
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

static size_t header_cb(char *buf, size_t size, size_t nitems, void *arg)
{
    body_t *b = arg;
    size_t n = size * nitems;
    if (n > 12 && strncasecmp(buf, "Retry-After:", 12) == 0)
        b->retry_after_s = strtol(buf + 12, NULL, 10);
    return n;
}

static int retryable_curl(CURLcode c)
{
    switch (c) {
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return 1;
    default:
        return 0;
    }
}

static void fill_status(agent_kube_resp_t *r)
{
    const char *kind = json_string_value(json_object_get(r->body, "kind"));
    if (kind && strcmp(kind, "Status") == 0) {
        agent_json_str(r->body, "reason", r->reason, sizeof(r->reason));
        agent_json_str(r->body, "message", r->message, sizeof(r->message));
    }
}

int agent_kube_request(agent_kube_t *k, const char *method, const char *path, const json_t *body,
                       const char *content_type, int64_t deadline_ms, agent_kube_resp_t *resp)
{
    char *payload = NULL, ctype[128];
    int refreshed = 0;
    memset(resp, 0, sizeof(*resp));
    if (body) {
        payload = json_dumps(body, JSON_COMPACT);
        if (!payload) {
            snprintf(resp->message, sizeof(resp->message), "cannot encode request body");
            return -1;
        }
    }
    snprintf(ctype, sizeof(ctype), "Content-Type: %s",
             content_type ? content_type : "application/json");
    for (int attempt = 0;; attempt++) {
        int64_t left = agent_remaining_ms(deadline_ms);
        long timeout = left < k->cfg.request_timeout_ms ? (long)left : k->cfg.request_timeout_ms;
        void *hv = NULL;
        struct curl_slist *hdrs;
        body_t b = {0};
        CURL *h;
        CURLcode cc;
        long code = 0;
        int retry = 0;

        if (left <= 0) {
            if (!resp->message[0])
                snprintf(resp->message, sizeof(resp->message), "deadline expired before %s %s",
                         method, path);
            free(payload);
            return -1;
        }
        h = agent_kube_easy(k, path, timeout, &hv);
        hdrs = hv;
        if (!h) {
            snprintf(resp->message, sizeof(resp->message), "curl_easy_init failed");
            free(payload);
            return -1;
        }
        if (payload) {
            hdrs = curl_slist_append(hdrs, ctype);
            curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
            curl_easy_setopt(h, CURLOPT_POSTFIELDS, payload);
        }
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, body_write);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, header_cb);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &b);
        k->requests++;
        resp->attempts++;
        cc = curl_easy_perform(h);
        if (cc == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        curl_easy_cleanup(h);
        curl_slist_free_all(hdrs);

        json_decref(resp->body);
        resp->body = NULL;
        resp->reason[0] = resp->message[0] = '\0';
        if (cc != CURLE_OK) {
            snprintf(resp->message, sizeof(resp->message), "%s %s%s: %s", method, k->creds->server,
                     path, curl_easy_strerror(cc));
            if (!retryable_curl(cc) || b.overflow) {
                agent_warn("AGENT-KUBE-REQUEST-FAIL", "%s", resp->message);
                free(b.data);
                free(payload);
                return -1;
            }
            retry = 1;
        } else {
            resp->code = code;
            if (b.len > 0)
                resp->body = json_loadb(b.data, b.len, 0, NULL);
            fill_status(resp);
            if (code == 401 && !refreshed && k->creds->token_file[0]) {
                refreshed = 1;
                if (agent_kube_refresh_token(k) == 1) {
                    free(b.data);
                    attempt--; /* a rotated token: retry at once */
                    continue;
                }
            }
            if (code == 429 || code == 500 || code == 502 || code == 503 || code == 504)
                retry = 1;
        }
        free(b.data);
        if (!retry) {
            free(payload);
            return 0;
        }
        k->retries++;
        agent_debug("AGENT-KUBE-RETRY", "%s %s: %s (code %ld, attempt %d)", method, path,
                    resp->message[0] ? resp->message : "retryable", code, attempt + 1);
        if (code == 429 && b.retry_after_s > 0) {
            int64_t d = b.retry_after_s * 1000;
            if (d > k->cfg.backoff_cap_ms)
                d = k->cfg.backoff_cap_ms;
            if (d > agent_remaining_ms(deadline_ms))
                d = agent_remaining_ms(deadline_ms);
            agent_sleep_ms(d);
        } else {
            agent_kube_backoff(k, attempt, deadline_ms);
        }
        if (agent_remaining_ms(deadline_ms) <= 0) {
            /* keep the last answer: a 5xx/429 is a final response at the deadline */
            free(payload);
            return resp->code ? 0 : -1;
        }
    }
}

int agent_kube_read_by_patch(agent_kube_t *k, const char *path, int64_t deadline_ms,
                             agent_kube_resp_t *resp)
{
    json_t *empty = json_object();
    int rc;
    if (!empty) {
        memset(resp, 0, sizeof(*resp));
        snprintf(resp->message, sizeof(resp->message), "out of memory");
        return -1;
    }
    rc = agent_kube_request(k, "PATCH", path, empty, "application/merge-patch+json", deadline_ms,
                            resp);
    json_decref(empty);
    return rc;
}

void agent_kube_resp_free(agent_kube_resp_t *r)
{
    json_decref(r->body);
    r->body = NULL;
}

void agent_kube_escape(const char *in, char *buf, size_t len)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (; *in && o + 4 < len; in++) {
        unsigned char c = (unsigned char)*in;
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            buf[o++] = (char)c;
        } else {
            buf[o++] = '%';
            buf[o++] = hex[c >> 4];
            buf[o++] = hex[c & 15];
        }
    }
    buf[o] = '\0';
}

void agent_condition_from_resp(agent_condition_t *cond, const char *what,
                               const agent_kube_resp_t *r)
{
    cond->fatal = 1;
    if (r->code == 0) {
        snprintf(cond->type, sizeof(cond->type), "%s", COLLI_PROTO_CODE_API_UNAVAILABLE);
        snprintf(cond->message, sizeof(cond->message),
                 "%s: no answer from the Kubernetes API server (%s); check that it is reachable "
                 "from the pod and that its certificate chains to the configured CA",
                 what, r->message);
    } else if (r->code == 401) {
        snprintf(cond->type, sizeof(cond->type), "Unauthorized");
        snprintf(cond->message, sizeof(cond->message),
                 "%s: 401 Unauthorized (%s); the service-account token was rejected: check that "
                 "the token is mounted and not expired",
                 what, r->message);
    } else if (r->code == 403) {
        snprintf(cond->type, sizeof(cond->type), "Forbidden");
        snprintf(cond->message, sizeof(cond->message),
                 "%s: 403 Forbidden (%s); grant the pod's service account the kcoll-agent role "
                 "(the Helm chart's RBAC) in this namespace",
                 what, r->message);
    } else if (r->code == 404) {
        snprintf(cond->type, sizeof(cond->type), "NotFound");
        snprintf(cond->message, sizeof(cond->message),
                 "%s: 404 Not Found (%s); are the kcoll CRDs installed?", what, r->message);
    } else {
        snprintf(cond->type, sizeof(cond->type), "APIError");
        snprintf(cond->message, sizeof(cond->message), "%s: HTTP %ld %s (%s)", what, r->code,
                 r->reason, r->message);
    }
}
