/* Streamed WATCH: newline-delimited events, bookmarks, resume from the last resourceVersion,
 * re-watch from the current state on 410 Gone, every connection bounded by the caller's deadline.
 * Only the watch verb is used: a watch without resourceVersion starts with synthetic ADDED events
 * for the objects that exist, so no LIST (or GET) is needed before it. */
#define _GNU_SOURCE
#include "kube.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#define MAX_LINE_BYTES (16u << 20)
#define WATCH_MAX_S    60 /* recycle a silent stream at least this often */

typedef struct {
    CURL *h;
    char *buf;
    size_t len, cap;
    agent_watch_cb cb;
    void *arg;
    char rv[64];
    int stopped;
    int gone;
    long http_code;
    long err_code;
    char err_msg[512];
    int events;
    const atomic_int *cancel; /* NULL: none */
} wstate_t;

/* libcurl calls it about once a second while a stream is idle: a cancelled watch ends. */
static int watch_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
    const wstate_t *w = arg;
    (void)dt, (void)dn, (void)ut, (void)un;
    return w->cancel && atomic_load(w->cancel) ? 1 : 0;
}

static void set_rv(wstate_t *w, const json_t *obj)
{
    const char *rv = json_string_value(agent_json_path(obj, "metadata.resourceVersion"));
    if (rv && rv[0])
        snprintf(w->rv, sizeof(w->rv), "%s", rv);
}

/* Returns 0 to continue, -1 to abort the transfer. */
static int handle_line(wstate_t *w, const char *line, size_t len)
{
    json_error_t jerr;
    json_t *ev = json_loadb(line, len, 0, &jerr), *obj;
    const char *type;
    int rc = 0;
    if (!ev) {
        agent_warn("AGENT-KUBE-WATCH-FAIL", "undecodable watch event: %s", jerr.text);
        return 0;
    }
    type = json_string_value(json_object_get(ev, "type"));
    obj = json_object_get(ev, "object");
    if (!type || !json_is_object(obj)) {
        json_decref(ev);
        return 0;
    }
    w->events++;
    if (strcmp(type, "BOOKMARK") == 0) {
        set_rv(w, obj);
    } else if (strcmp(type, "ERROR") == 0) {
        json_t *code = json_object_get(obj, "code");
        w->err_code = json_is_integer(code) ? (long)json_integer_value(code) : 500;
        agent_json_str(obj, "message", w->err_msg, sizeof(w->err_msg));
        if (w->err_code == 410)
            w->gone = 1;
        rc = -1;
    } else {
        set_rv(w, obj);
        if (w->cb(w->arg, type, obj) != 0) {
            w->stopped = 1;
            rc = -1;
        }
    }
    json_decref(ev);
    return rc;
}

static size_t watch_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
    wstate_t *w = arg;
    size_t n = size * nmemb, start = 0;
    if (!w->http_code)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->http_code);
    if (w->len + n + 1 > w->cap) {
        size_t cap = w->cap ? w->cap : 8192;
        char *nb;
        while (cap < w->len + n + 1)
            cap *= 2;
        if (cap > MAX_LINE_BYTES)
            return 0;
        nb = realloc(w->buf, cap);
        if (!nb)
            return 0;
        w->buf = nb;
        w->cap = cap;
    }
    memcpy(w->buf + w->len, ptr, n);
    w->len += n;
    w->buf[w->len] = '\0';
    if (w->http_code != 200)
        return n; /* an error Status: parsed when the transfer ends */
    for (size_t i = 0; i < w->len; i++) {
        if (w->buf[i] != '\n')
            continue;
        if (i > start && handle_line(w, w->buf + start, i - start) != 0) {
            w->len = 0;
            return 0;
        }
        start = i + 1;
    }
    memmove(w->buf, w->buf + start, w->len - start);
    w->len -= start;
    return n;
}

int agent_kube_watch(agent_kube_t *k, const char *path, const char *field_selector,
                     int64_t deadline_ms, agent_watch_cb cb, void *arg, agent_kube_resp_t *resp_out)
{
    return agent_kube_watch_labels(k, path, field_selector, NULL, NULL, deadline_ms, cb, arg,
                                   resp_out);
}

int agent_kube_watch_labels(agent_kube_t *k, const char *path, const char *field_selector,
                            const char *label_selector, const atomic_int *cancel,
                            int64_t deadline_ms, agent_watch_cb cb, void *arg,
                            agent_kube_resp_t *resp_out)
{
    wstate_t w = {0};
    int attempt = 0, rc = -1;
    char esc[1024] = "", lesc[1024] = "";
    memset(resp_out, 0, sizeof(*resp_out));
    w.cb = cb;
    w.arg = arg;
    w.cancel = cancel;
    if (field_selector)
        agent_kube_escape(field_selector, esc, sizeof(esc));
    if (label_selector)
        agent_kube_escape(label_selector, lesc, sizeof(lesc));

    while (agent_remaining_ms(deadline_ms) > 0 && !(cancel && atomic_load(cancel))) {
        int64_t left = agent_remaining_ms(deadline_ms);
        long tsec = (long)(left / 1000) + 1, timeout_ms;
        char url[3072];
        void *hv = NULL;
        CURLcode cc;
        if (tsec > WATCH_MAX_S)
            tsec = WATCH_MAX_S;
        timeout_ms = left < tsec * 1000 + 2000 ? (long)left : tsec * 1000 + 2000;
        snprintf(url, sizeof(url),
                 "%s?watch=1&allowWatchBookmarks=true&timeoutSeconds=%ld%s%s%s%s%s%s", path, tsec,
                 esc[0] ? "&fieldSelector=" : "", esc, lesc[0] ? "&labelSelector=" : "", lesc,
                 w.rv[0] ? "&resourceVersion=" : "", w.rv);
        w.h = agent_kube_easy(k, url, timeout_ms, &hv);
        if (!w.h) {
            snprintf(resp_out->message, sizeof(resp_out->message), "curl_easy_init failed");
            break;
        }
        curl_easy_setopt(w.h, CURLOPT_WRITEFUNCTION, watch_write);
        curl_easy_setopt(w.h, CURLOPT_WRITEDATA, &w);
        if (cancel) {
            curl_easy_setopt(w.h, CURLOPT_NOPROGRESS, 0L);
            curl_easy_setopt(w.h, CURLOPT_XFERINFOFUNCTION, watch_progress);
            curl_easy_setopt(w.h, CURLOPT_XFERINFODATA, &w);
        }
        agent_kube_count_watch(k);
        w.http_code = 0;
        w.gone = 0;
        w.err_code = 0;
        w.len = 0;
        w.events = 0;
        cc = curl_easy_perform(w.h);
        if (!w.http_code)
            curl_easy_getinfo(w.h, CURLINFO_RESPONSE_CODE, &w.http_code);
        curl_easy_cleanup(w.h);
        curl_slist_free_all(hv);
        w.h = NULL;
        if (w.stopped) {
            rc = 0;
            break;
        }
        if (cancel && atomic_load(cancel))
            break;
        if (w.http_code && w.http_code != 200) {
            json_t *st = json_loadb(w.buf ? w.buf : "", w.len, 0, NULL);
            resp_out->code = w.http_code;
            agent_json_str(st, "reason", resp_out->reason, sizeof(resp_out->reason));
            agent_json_str(st, "message", resp_out->message, sizeof(resp_out->message));
            json_decref(st);
            if (w.http_code == 410) {
                w.gone = 1;
            } else if (w.http_code == 401 && agent_kube_refresh_token(k) == 1) {
                continue;
            } else if (w.http_code == 401 || w.http_code == 403 || w.http_code == 404 ||
                       w.http_code == 400) {
                agent_warn("AGENT-KUBE-WATCH-FAIL", "watch %s: HTTP %ld %s", path, w.http_code,
                           resp_out->message);
                break;
            } else {
                agent_warn("AGENT-KUBE-WATCH-FAIL", "watch %s: HTTP %ld %s; retrying", path,
                           w.http_code, resp_out->message);
                agent_kube_backoff(k, attempt++, deadline_ms);
                continue;
            }
        }
        if (w.gone) {
            /* 410: the version is compacted; watch again from the current state (synthetic
             * ADDED events), which needs no list permission */
            agent_info("AGENT-KUBE-WATCH-EXPIRED",
                       "watch %s from resourceVersion %s: 410 Gone; watching again from the "
                       "current state",
                       path, w.rv[0] ? w.rv : "(none)");
            if (!w.rv[0]) /* a server that answers 410 without a version: do not spin */
                agent_kube_backoff(k, attempt++, deadline_ms);
            else
                attempt = 0;
            w.rv[0] = '\0';
            continue;
        }
        if (w.err_code) {
            agent_warn("AGENT-KUBE-WATCH-FAIL", "watch %s: ERROR event %ld %s; resuming", path,
                       w.err_code, w.err_msg);
            agent_kube_backoff(k, attempt++, deadline_ms);
            continue;
        }
        if (cc != CURLE_OK && cc != CURLE_OPERATION_TIMEDOUT) {
            agent_warn("AGENT-KUBE-WATCH-FAIL", "watch %s: %s; resuming from resourceVersion %s",
                       path, curl_easy_strerror(cc), w.rv[0] ? w.rv : "(none)");
            snprintf(resp_out->message, sizeof(resp_out->message), "watch %s: %s", path,
                     curl_easy_strerror(cc));
            agent_kube_backoff(k, attempt++, deadline_ms);
            continue;
        }
        if (w.events > 0)
            attempt = 0;
        agent_debug("AGENT-KUBE-WATCH-RESUME", "watch %s ended; resuming from %s", path, w.rv);
    }
    free(w.buf);
    if (rc != 0 && !resp_out->message[0])
        snprintf(resp_out->message, sizeof(resp_out->message),
                 "watch %s: deadline expired before the object appeared", path);
    return rc;
}
