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
#include <sys/socket.h>

#define DEFAULT_LISTEN ":8443"
#define CONN_TIMEOUT_S 30
#define CONN_LIMIT     256
#define TLS_PRIORITIES "NORMAL:-VERS-ALL:+VERS-TLS1.3:+VERS-TLS1.2"

struct server {
    struct agent_webhook_config cfg;
    struct MHD_Daemon *daemon;
    struct agent_tls *tls;
};

/* Per-request upload buffer (MHD's con_cls). */
struct request {
    enum agent_webhook_scope scope;
    int responded; /* an error went out before the body was read; discard the rest */
    int too_big;
    char *buf;
    size_t len, cap;
};

/* COLL_DEBUG=DEBUG (or TRACE) turns on the debug lines (one per skipped review). */
static const char *log_level_from_env(void)
{
    const char *v = secure_getenv("COLL_DEBUG");
    return v != NULL && (strcasecmp(v, "DEBUG") == 0 || strcasecmp(v, "TRACE") == 0) ? "debug"
                                                                                     : "info";
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
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
        }
        rq->responded = 0;
        return MHD_YES;
    }

    if (*upload_data_size != 0) {
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (rq->responded || rq->too_big)
            return MHD_YES;
        if (rq->len + n > srv->cfg.max_body) {
            /* chunked upload past the limit: drop what we have, answer when it ends */
            rq->too_big = 1;
            free(rq->buf);
            rq->buf = NULL;
            rq->len = rq->cap = 0;
            return MHD_YES;
        }
        if (rq->len + n > rq->cap) {
            size_t cap = rq->cap ? rq->cap : 16384;
            while (cap < rq->len + n)
                cap *= 2;
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
    (void)cls;
    (void)conn;
    (void)toe;
    if (rq != NULL) {
        free(rq->buf);
        free(rq);
        *con_cls = NULL;
    }
}

static void usage(FILE *out)
{
    fprintf(
        out,
        "usage: coll-agent webhook --cert FILE --key FILE --agent-image IMAGE --lib-version V\n"
        "                          [--listen ADDR:PORT] [options]\n"
        "Mutating admission webhook that injects the kcoll agent sidecar into pods that opt\n"
        "in with the label " AGENT_WEBHOOK_INJECT_LABEL "=true (on the pod or its namespace).\n"
        "\n"
        "  --listen ADDR:PORT            address to serve HTTPS on (default " DEFAULT_LISTEN
        "; ADDR may be\n"
        "                                empty, an IPv4 address or [IPv6]; port 0 picks one)\n"
        "  --cert FILE, --key FILE       PEM serving certificate (chain) and key; reloaded "
        "when they change\n"
        "  --agent-image IMAGE           sidecar image (its tag pins the library version)\n"
        "  --lib-version V               library version that image carries\n"
        "  --image-pull-policy P         Always, IfNotPresent (default) or Never\n"
        "  --sidecar-cpu-request Q       default 50m    (\"\" leaves it out)\n"
        "  --sidecar-memory-request Q    default 64Mi\n"
        "  --sidecar-cpu-limit Q         default none\n"
        "  --sidecar-memory-limit Q      default 256Mi\n"
        "  --max-body BYTES              largest AdmissionReview accepted (default %zu)\n"
        "  --threads N                   worker threads (default 2)\n"
        "  --kubeconfig FILE             API credentials when not in a cluster (in a cluster:\n"
        "                                the ServiceAccount token, see --sa-dir)\n"
        "  --sa-dir DIR                  in-cluster token and ca.crt (default\n"
        "                                /var/run/secrets/kubernetes.io/serviceaccount)\n"
        "  --api-timeout-ms N            budget of the owner Job/JobSet/Namespace reads of one\n"
        "                                review (default 3000; keep it under the webhook\n"
        "                                timeoutSeconds)\n",
        AGENT_WEBHOOK_DEFAULT_MAX_BODY);
}

/* "host:port", "[v6]:port" or ":port" into a socket address; host "" means every address. */
static int parse_listen(const char *spec, struct sockaddr_storage *ss, int *any_host,
                        unsigned int *port)
{
    char host[256];
    const char *colon, *p;
    if (spec[0] == '[') {
        const char *close = strchr(spec, ']');
        if (close == NULL || close[1] != ':')
            return -1;
        snprintf(host, sizeof(host), "%.*s", (int)(close - spec - 1), spec + 1);
        colon = close + 1;
    } else {
        colon = strrchr(spec, ':');
        if (colon == NULL || (size_t)(colon - spec) >= sizeof(host))
            return -1;
        snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
        if (strchr(host, ':') != NULL)
            return -1; /* bare IPv6 needs brackets */
    }
    if (colon[1] == '\0')
        return -1;
    unsigned long v = 0;
    for (p = colon + 1; *p; p++) {
        if (!isdigit((unsigned char)*p))
            return -1;
        v = v * 10 + (unsigned long)(*p - '0');
        if (v > 65535)
            return -1;
    }
    *port = (unsigned int)v;
    *any_host = host[0] == '\0';
    memset(ss, 0, sizeof(*ss));
    if (*any_host)
        return 0;
    struct addrinfo hints = {.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV,
                             .ai_socktype = SOCK_STREAM};
    struct addrinfo *res = NULL;
    char portstr[8];
    snprintf(portstr, sizeof(portstr), "%u", *port);
    if (getaddrinfo(host, portstr, &hints, &res) != 0 || res == NULL)
        return -1;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return 0;
}

static int valid_token(const char *s, const char *extra)
{
    if (s == NULL || s[0] == '\0' || strlen(s) > 512)
        return 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && strchr(extra, *p) == NULL)
            return 0;
    return 1;
}

static struct MHD_Daemon *start_daemon(struct server *srv, unsigned int flags, unsigned int port,
                                       const struct sockaddr *sa, unsigned int threads)
{
    if (sa != NULL)
        return MHD_start_daemon(
            flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_SOCK_ADDR, sa,
            MHD_OPTION_HTTPS_CERT_CALLBACK, agent_tls_callback(), MHD_OPTION_HTTPS_PRIORITIES,
            TLS_PRIORITIES, MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)CONN_TIMEOUT_S,
            MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONN_LIMIT, MHD_OPTION_THREAD_POOL_SIZE,
            threads, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_END);
    return MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, srv, MHD_OPTION_HTTPS_CERT_CALLBACK,
        agent_tls_callback(), MHD_OPTION_HTTPS_PRIORITIES, TLS_PRIORITIES,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned int)CONN_TIMEOUT_S, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)CONN_LIMIT,
        MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
        MHD_OPTION_END);
}

int agent_webhook_main(int argc, char **argv)
{
    enum {
        OPT_LISTEN = 256,
        OPT_CERT,
        OPT_KEY,
        OPT_IMAGE,
        OPT_LIBV,
        OPT_PULL,
        OPT_CPU_REQ,
        OPT_MEM_REQ,
        OPT_CPU_LIM,
        OPT_MEM_LIM,
        OPT_MAX_BODY,
        OPT_THREADS,
        OPT_KUBECONFIG,
        OPT_SA_DIR,
        OPT_API_TIMEOUT,
    };
    static const struct option opts[] = {
        {"listen", required_argument, NULL, OPT_LISTEN},
        {"cert", required_argument, NULL, OPT_CERT},
        {"key", required_argument, NULL, OPT_KEY},
        {"agent-image", required_argument, NULL, OPT_IMAGE},
        {"lib-version", required_argument, NULL, OPT_LIBV},
        {"image-pull-policy", required_argument, NULL, OPT_PULL},
        {"sidecar-cpu-request", required_argument, NULL, OPT_CPU_REQ},
        {"sidecar-memory-request", required_argument, NULL, OPT_MEM_REQ},
        {"sidecar-cpu-limit", required_argument, NULL, OPT_CPU_LIM},
        {"sidecar-memory-limit", required_argument, NULL, OPT_MEM_LIM},
        {"max-body", required_argument, NULL, OPT_MAX_BODY},
        {"threads", required_argument, NULL, OPT_THREADS},
        {"kubeconfig", required_argument, NULL, OPT_KUBECONFIG},
        {"sa-dir", required_argument, NULL, OPT_SA_DIR},
        {"api-timeout-ms", required_argument, NULL, OPT_API_TIMEOUT},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct server srv = {
        .cfg =
            {
                .image_pull_policy = "IfNotPresent",
                .cpu_request = "50m",
                .memory_request = "64Mi",
                .cpu_limit = "",
                .memory_limit = "256Mi",
                .max_body = AGENT_WEBHOOK_DEFAULT_MAX_BODY,
                .api_timeout_ms = 3000,
            },
    };
    const char *listen_spec = DEFAULT_LISTEN, *cert = NULL, *key = NULL;
    const char *kubeconfig = NULL, *sa_dir = NULL;
    unsigned long api_timeout;
    unsigned long threads = 2;
    int c;
    char *end;

    agent_log_init(log_level_from_env(), NULL);
    optind = 0; /* may run after the caller's own getopt */
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_LISTEN:
            listen_spec = optarg;
            break;
        case OPT_CERT:
            cert = optarg;
            break;
        case OPT_KEY:
            key = optarg;
            break;
        case OPT_IMAGE:
            srv.cfg.agent_image = optarg;
            break;
        case OPT_LIBV:
            srv.cfg.lib_version = optarg;
            break;
        case OPT_PULL:
            srv.cfg.image_pull_policy = optarg;
            break;
        case OPT_CPU_REQ:
            srv.cfg.cpu_request = optarg;
            break;
        case OPT_MEM_REQ:
            srv.cfg.memory_request = optarg;
            break;
        case OPT_CPU_LIM:
            srv.cfg.cpu_limit = optarg;
            break;
        case OPT_MEM_LIM:
            srv.cfg.memory_limit = optarg;
            break;
        case OPT_MAX_BODY:
            errno = 0;
            srv.cfg.max_body = strtoul(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || srv.cfg.max_body < 1024) {
                fprintf(stderr, "coll-agent webhook: --max-body needs a byte count >= 1024\n");
                return 2;
            }
            break;
        case OPT_THREADS:
            errno = 0;
            threads = strtoul(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || threads < 1 || threads > 64) {
                fprintf(stderr, "coll-agent webhook: --threads needs 1..64\n");
                return 2;
            }
            break;
        case OPT_KUBECONFIG:
            kubeconfig = optarg;
            break;
        case OPT_SA_DIR:
            sa_dir = optarg;
            break;
        case OPT_API_TIMEOUT:
            errno = 0;
            api_timeout = strtoul(optarg, &end, 10);
            if (errno != 0 || *end != '\0' || api_timeout < 100 || api_timeout > 30000) {
                fprintf(stderr, "coll-agent webhook: --api-timeout-ms needs 100..30000\n");
                return 2;
            }
            srv.cfg.api_timeout_ms = (int)api_timeout;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            usage(stderr);
            return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "coll-agent webhook: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    if (cert == NULL || key == NULL || srv.cfg.agent_image == NULL || srv.cfg.lib_version == NULL) {
        fprintf(stderr, "coll-agent webhook: --cert, --key, --agent-image and --lib-version are "
                        "required\n");
        usage(stderr);
        return 2;
    }
    if (!valid_token(srv.cfg.agent_image, "./:@_-")) {
        fprintf(stderr, "coll-agent webhook: --agent-image '%s' is not an image reference\n",
                srv.cfg.agent_image);
        return 2;
    }
    if (!valid_token(srv.cfg.lib_version, ".+-_")) {
        fprintf(stderr, "coll-agent webhook: --lib-version '%s' is not a version\n",
                srv.cfg.lib_version);
        return 2;
    }
    if (strcmp(srv.cfg.image_pull_policy, "Always") != 0 &&
        strcmp(srv.cfg.image_pull_policy, "IfNotPresent") != 0 &&
        strcmp(srv.cfg.image_pull_policy, "Never") != 0) {
        fprintf(stderr, "coll-agent webhook: --image-pull-policy must be Always, IfNotPresent "
                        "or Never\n");
        return 2;
    }
    const char *quantities[] = {srv.cfg.cpu_request, srv.cfg.memory_request, srv.cfg.cpu_limit,
                                srv.cfg.memory_limit};
    for (size_t i = 0; i < sizeof(quantities) / sizeof(quantities[0]); i++) {
        if (quantities[i][0] != '\0' && !agent_webhook_quantity_valid(quantities[i])) {
            fprintf(stderr,
                    "coll-agent webhook: '%s' is not a resource quantity (e.g. 50m, "
                    "64Mi)\n",
                    quantities[i]);
            return 2;
        }
    }
    struct sockaddr_storage ss;
    int any_host;
    unsigned int port;
    if (parse_listen(listen_spec, &ss, &any_host, &port) != 0) {
        fprintf(stderr,
                "coll-agent webhook: --listen '%s' is not ADDR:PORT (e.g. :8443, "
                "127.0.0.1:8443, [::1]:8443)\n",
                listen_spec);
        return 2;
    }
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES ||
        MHD_is_feature_supported(MHD_FEATURE_HTTPS_CERT_CALLBACK) != MHD_YES) {
        agent_error("AGENT-WEBHOOK-NO-TLS",
                    "libmicrohttpd was built without TLS or certificate callbacks; install "
                    "a libmicrohttpd built with GnuTLS");
        return 1;
    }

    srv.tls = agent_tls_open(cert, key);
    if (srv.tls == NULL)
        return 1;
    /* without credentials the webhook still injects; the facts become *-error annotations */
    (void)agent_webhook_api_open(kubeconfig, sa_dir, &srv.cfg);
    agent_tls_activate(srv.tls);

    /* Signals are taken by sigwait() below; worker threads inherit the blocked mask. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &old);
    signal(SIGPIPE, SIG_IGN);

    unsigned int flags =
        MHD_USE_TLS | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_AUTO;
    if (any_host) {
        srv.daemon = start_daemon(&srv, flags | MHD_USE_DUAL_STACK, port, NULL, threads);
        if (srv.daemon == NULL) /* no IPv6 in this pod: IPv4 only */
            srv.daemon = start_daemon(&srv, flags, port, NULL, threads);
    } else {
        if (ss.ss_family == AF_INET6)
            flags |= MHD_USE_IPv6;
        srv.daemon = start_daemon(&srv, flags, port, (const struct sockaddr *)&ss, threads);
    }
    if (srv.daemon == NULL) {
        agent_error("AGENT-WEBHOOK-LISTEN-FAIL",
                    "cannot serve HTTPS on %s (address in use or not local?)", listen_spec);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        agent_webhook_api_close(&srv.cfg);
        agent_tls_close(srv.tls);
        return 1;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(srv.daemon, MHD_DAEMON_INFO_BIND_PORT);
    agent_info("AGENT-WEBHOOK-LISTEN", "listen=%s port=%u image=%s lib=%s", listen_spec,
               info ? (unsigned int)info->port : port, srv.cfg.agent_image, srv.cfg.lib_version);

    int sig = 0;
    while (sigwait(&stop, &sig) != 0)
        ;
    agent_info("AGENT-WEBHOOK-STOP", "signal %d: shutting down", sig);
    MHD_stop_daemon(srv.daemon);
    agent_webhook_api_close(&srv.cfg);
    agent_tls_close(srv.tls);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return 0;
}
