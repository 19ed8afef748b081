/* `coll-agent webhook`: the HTTPS server (libmicrohttpd + GnuTLS) in front of the mutation logic.
 *
 * Routes: POST /mutate (the pod must carry kcoll.io/inject=true), POST /mutate/namespace (the
 * namespace opted in; kcoll.io/inject=false on the pod opts out), GET /healthz and /readyz. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "webhook.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <time.h>

/* What strangers can cost (the API server is the only legitimate client; it calls with a 10 s
 * timeout by default, at most 30 s). A connection silent for CONN_IDLE_S is closed; a body must
 * arrive whole within BODY_DEADLINE_S of its headers; one address holds at most
 * CONN_PER_IP_LIMIT of the CONN_LIMIT connections; request bodies held at once are bounded by
 * a byte budget (inflight_budget), so that memory stays far under the chart's limit whatever
 * the number and size of requests: past it a request is answered 503 before its body is read.
 * The API server is one address (one per replica) and the Job controller creates pods in bursts
 * (up to 500 at once), each an admission on a connection of its own when none is idle: an
 * address gets half the table, so that such a burst is not reset (with failurePolicy Fail a
 * reset is a refused pod), and a stranger needs four addresses to fill it. */
#define CONN_IDLE_S       10
#define CONN_LIMIT        512
#define CONN_PER_IP_LIMIT 128
#define BODY_DEADLINE_S   10
#define INFLIGHT_BUDGET   ((size_t)48 << 20)
#define TLS_PRIORITIES    "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

struct server {
    struct agent_webhook_config cfg;
    struct MHD_Daemon *daemon;
    struct agent_tls *tls;
    _Atomic size_t inflight; /* body bytes reserved by requests being read */
    size_t budget;
    _Atomic long busy_warned_s; /* when the last AGENT-WEBHOOK-BUSY went out */
};

/* Per-request upload buffer (MHD's con_cls). */
struct request {
    enum agent_webhook_scope scope;
    int responded; /* an error went out before the body was read; discard the rest */
    int too_big;
    double started; /* headers complete (CLOCK_MONOTONIC seconds) */
    char *buf;
    size_t len, cap;
    size_t reserved; /* of srv->inflight */
};

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Reserve n more body bytes for rq within the budget; false when the budget is spent. */
static bool reserve(struct server *srv, struct request *rq, size_t n)
{
    size_t was = atomic_fetch_add(&srv->inflight, n);
    if (was + n > srv->budget) {
        atomic_fetch_sub(&srv->inflight, n);
        return false;
    }
    rq->reserved += n;
    return true;
}

static void release(struct server *srv, struct request *rq)
{
    atomic_fetch_sub(&srv->inflight, rq->reserved);
    rq->reserved = 0;
}

/* COLL_DEBUG=DEBUG (or TRACE) turns on the debug lines (one per skipped review). */
static const char *log_level_from_env(void)
{
    const char *v = secure_getenv("COLL_DEBUG");
    return v != NULL && (strcasecmp(v, "DEBUG") == 0 || strcasecmp(v, "TRACE") == 0) ? "debug"
                                                                                     : "info";
}

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[1024];
    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t len = strlen(msg);
    while (len > 0 && (msg[len - 1] == '\n' || msg[len - 1] == ' '))
        msg[--len] = '\0';
    agent_debug("AGENT-WEBHOOK-HTTPD", "%s", msg);
}

static enum MHD_Result send_reply(struct MHD_Connection *conn, struct agent_webhook_reply *reply)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(reply->body_len, reply->body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(reply->body);
        return MHD_NO;
    }
    reply->body = NULL;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, reply->content_type);
    enum MHD_Result rc = MHD_queue_response(conn, reply->http_status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result send_static(struct MHD_Connection *conn, unsigned int status,
                                   const char *text)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (resp == NULL)
        return MHD_NO;
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    enum MHD_Result rc = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static enum MHD_Result send_error(struct MHD_Connection *conn, unsigned int status,
                                  const char *message)
{
    struct agent_webhook_reply reply;
    if (agent_webhook_error_reply(status, message, &reply) != 0)
        return send_static(conn, 500, "out of memory\n");
    return send_reply(conn, &reply);
}

/* The request bodies in flight hold the whole budget: 503 (the API server's failurePolicy
 * decides), the body is not read. Logged at most once a second. */
static enum MHD_Result busy(struct server *srv, struct MHD_Connection *conn)
{
    char msg[200];
    snprintf(msg, sizeof(msg),
             "busy: %zu MiB of request bodies are being received (limit %zu MiB); retry",
             atomic_load(&srv->inflight) >> 20, srv->budget >> 20);
    long now = (long)mono_s();
    if (atomic_exchange(&srv->busy_warned_s, now) != now)
        agent_warn("AGENT-WEBHOOK-BUSY", "%s", msg);
    return send_error(conn, 503, msg);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    struct server *srv = cls;
    struct request *rq = *con_cls;
    char msg[256];
    (void)version;

    if (rq == NULL) {
        rq = calloc(1, sizeof(*rq));
        if (rq == NULL)
            return MHD_NO;
        *con_cls = rq;
        rq->responded = 1; /* cleared below for a review that we accept */
        if (strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0) {
            if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
                return send_error(conn, 405, "use GET");
            return send_static(conn, 200, "ok\n");
        }
        if (strcmp(url, "/mutate") == 0)
            rq->scope = AGENT_WEBHOOK_SCOPE_POD;
        else if (strcmp(url, "/mutate/namespace") == 0)
            rq->scope = AGENT_WEBHOOK_SCOPE_NAMESPACE;
        else
            return send_error(conn, 404,
                              "no such path; the webhook serves POST /mutate and "
                              "POST /mutate/namespace");
        if (strcmp(method, "POST") != 0)
            return send_error(conn, 405, "AdmissionReviews are POSTed");
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl != NULL) {
            errno = 0;
            char *end = NULL;
            unsigned long long n = strtoull(cl, &end, 10);
            if (errno != 0 || end == cl || n > srv->cfg.max_body) {
                snprintf(msg, sizeof(msg), "request body of %s bytes is over the limit of %zu", cl,
                         srv->cfg.max_body);
                agent_warn("AGENT-WEBHOOK-BODY-TOO-LARGE", "%s", msg);
                return send_error(conn, 413, msg);
            }
            /* the whole body is reserved now, and allocated once */
            if (n > 0 && !reserve(srv, rq, (size_t)n))
                return busy(srv, conn);
        }
        rq->started = mono_s();
        rq->responded = 0;
        return MHD_YES;
    }

    if (*upload_data_size != 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->responded || rq->too_big)
            return MHD_YES;
        if (mono_s() - rq->started > BODY_DEADLINE_S) {
            /* a body trickling in (slowloris): the connection is closed */
            agent_warn("AGENT-WEBHOOK-BODY-TOO-SLOW",
                       "closed a connection whose request body took more than %d s",
                       BODY_DEADLINE_S);
            return MHD_NO;
        }
        if (rq->len + n > srv->cfg.max_body) {
            /* chunked upload past the limit: drop what we have, answer when it ends */
            rq->too_big = 1;
            free(rq->buf);
            rq->buf = NULL;
            rq->len = rq->cap = 0;
            release(srv, rq);
            return MHD_YES;
        }
        if (rq->len + n > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 16384;
            while (cap < rq->len + n)
                cap *= 2;
            if (cap < rq->reserved)
                cap = rq->reserved; /* Content-Length: exactly the body */
            if (cap > srv->cfg.max_body)
                cap = srv->cfg.max_body;
            if (cap > rq->reserved && !reserve(srv, rq, cap - rq->reserved)) {
                rq->responded = 1;
                free(rq->buf);
                rq->buf = NULL;
                rq->len = rq->cap = 0;
                release(srv, rq);
                return busy(srv, conn);
            }
            char *nb = realloc(rq->buf, cap);
            if (nb == NULL)
                return MHD_NO;
            rq->buf = nb;
            rq->cap = cap;
        }
        memcpy(rq->buf + rq->len, upload_data, n);
        rq->len += n;
        return MHD_YES;
    }

    if (rq->responded)
        return MHD_YES;
    rq->responded = 1;
    if (rq->too_big) {
        snprintf(msg, sizeof(msg), "request body is over the limit of %zu bytes",
                 srv->cfg.max_body);
        agent_warn("AGENT-WEBHOOK-BODY-TOO-LARGE", "%s", msg);
        return send_error(conn, 413, msg);
    }

    struct agent_webhook_reply reply;
    if (agent_webhook_review(&srv->cfg, rq->scope, rq->buf ? rq->buf : "", rq->len, &reply) != 0)
        return send_static(conn, 500, "out of memory\n");
    return send_reply(conn, &reply);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    struct request *rq = *con_cls;
    (void)conn;
    (void)toe;
    if (rq != NULL) {
        release(cls, rq);
        free(rq->buf);
        free(rq);
        *con_cls = NULL;
    }
}

static struct MHD_Daemon *start_daemon(struct server *srv, unsigned int flags, unsigned int port,
                                       const struct sockaddr *sa, unsigned int threads)
{
    if (sa != NULL)
        return MHD_start_daemon(
            flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, sa,
            MHD_OPTION_HTTPS_CERT_CALLBACK, agent_tls_callback(), MHD_OPTION_HTTPS_PRIORITIES,
            TLS_PRIORITIES, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)CONN_IDLE_S, MHD_OPTION_CONNECTION_LIMIT,
            (unsigned int)CONN_LIMIT, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
            (unsigned int)CONN_PER_IP_LIMIT, MHD_OPTION_THREAD_POOL_SIZE, threads,
            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    return MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_HTTPS_CERT_CALLBACK,
        agent_tls_callback(), MHD_OPTION_HTTPS_PRIORITIES, TLS_PRIORITIES,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)CONN_IDLE_S, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONN_LIMIT,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned int)CONN_PER_IP_LIMIT,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_END);
}

/* The daemon on the --listen address: every address (dual stack where the pod has IPv6, else
 * IPv4 only) or the one given. NULL when it cannot listen. */
static struct MHD_Daemon *listen_https(struct server *srv, const struct agent_webhook_opts *o)
{
    unsigned int flags =
        MHD_USE_TLS | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_AUTO;
    struct MHD_Daemon *d;
    if (o->listen_any) {
        d = start_daemon(srv, flags | MHD_USE_DUAL_STACK, o->port, NULL, o->threads);
        if (d == NULL) /* no IPv6 in this pod: IPv4 only */
            d = start_daemon(srv, flags, o->port, NULL, o->threads);
        return d;
    }
    if (o->listen_addr.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    return start_daemon(srv, flags, o->port, (const struct sockaddr *)&o->listen_addr, o->threads);
}

/* Serves until SIGTERM/SIGINT: 0 after a clean shutdown, 1 when the server cannot start. */
static int serve(const struct agent_webhook_opts *o)
{
    struct server srv = {.cfg = o->cfg};
    /* room for a few largest bodies at least, however --max-body is set */
    const size_t four = o->cfg.max_body > SIZE_MAX / 4 ? SIZE_MAX : 4 * o->cfg.max_body;
    srv.budget = INFLIGHT_BUDGET > four ? INFLIGHT_BUDGET : four;
    const union MHD_DaemonInfo *info;
    sigset_t stop, old;
    int sig = 0, rc = 0;

    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
        agent_error("AGENT-WEBHOOK-NO-TLS",
                    "libmicrohttpd was built without TLS or certificate callbacks; install "
                    "a libmicrohttpd built with GnuTLS");
        return 1;
    }
    srv.tls = agent_tls_open(o->cert, o->key);
    if (srv.tls == NULL)
        return 1;
    /* without credentials the webhook still injects; the facts become *-error annotations */
    (void)agent_webhook_api_open(o->kubeconfig, o->sa_dir, &srv.cfg);
    agent_tls_activate(srv.tls);

    /* Signals are taken by sigwait() below; worker threads inherit the blocked mask. */
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    signal(SIGPIPE, SIG_IGN);

    srv.daemon = listen_https(&srv, o);
    if (srv.daemon == NULL) {
        agent_error("AGENT-WEBHOOK-LISTEN-FAIL",
                    "cannot serve HTTPS on %s (address in use or not local?)", o->listen_spec);
        rc = 1;
        goto err_close;
    }
    info = MHD_get_daemon_info(srv.daemon, MHD_DAEMON_INFO_BIND_PORT);
    agent_info("AGENT-WEBHOOK-LISTEN", "listen=%s port=%u image=%s lib=%s", o->listen_spec,
               info ? (unsigned int)info->port : o->port, srv.cfg.agent_image, srv.cfg.lib_version);
    while (sigwait(&stop, &sig) != 0)
        ;
    agent_info("AGENT-WEBHOOK-STOP", "signal %d: shutting down", sig);
    MHD_stop_daemon(srv.daemon);
err_close:
    agent_webhook_api_close(&srv.cfg);
    agent_tls_close(srv.tls);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return rc;
}

int agent_webhook_main(int argc, char **argv)
{
    struct agent_webhook_opts opts;
    int rc;

    agent_log_init(log_level_from_env(), NULL);
    rc = agent_webhook_opts_parse(argc, argv, &opts);
    if (rc != AGENT_WEBHOOK_SERVE)
        return rc;
    return serve(&opts);
}
