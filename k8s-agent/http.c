/* /healthz, /readyz and Prometheus /metrics on a plain HTTP port (libmicrohttpd). */
#define _GNU_SOURCE
#include "kube.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#if MHD_VERSION < 0x00097002
typedef int mhd_result_t;
#else
typedef enum MHD_Result mhd_result_t;
#endif

struct agent_http {
    struct MHD_Daemon *d;
};

typedef struct {
    char *buf;
    size_t len, cap;
} sbuf_t;

static void sb_printf(sbuf_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf_t *b, const char *fmt, ...)
{
    va_list ap;
    int n;
    if (!b->buf)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->buf + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0)
            return;
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        char *nb = realloc(b->buf, b->cap * 2 + (size_t)n);
        if (!nb)
            return;
        b->buf = nb;
        b->cap = b->cap * 2 + (size_t)n;
    }
}

static void metric(sbuf_t *b, const char *name, const char *type, const char *help, double v)
{
    sb_printf(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

char *agent_health_metrics(agent_ctx_t *ctx)
{
    sbuf_t b = {malloc(4096), 0, 4096};
    agent_state_t st;
    agent_facts_t f;
    agent_condition_t fail, warns[8];
    int nw;
    pthread_mutex_lock(&ctx->mu);
    st = ctx->state;
    f = ctx->facts;
    fail = ctx->failure;
    nw = ctx->nwarnings;
    memcpy(warns, ctx->warnings, sizeof(warns));
    pthread_mutex_unlock(&ctx->mu);
    metric(&b, "kcoll_agent_ready", "gauge", "1 when the agent serves this pod's facts",
           st == AGENT_STATE_READY);
    metric(&b, "kcoll_agent_failed", "gauge", "1 when a fatal condition stops the agent",
           st == AGENT_STATE_FAILED);
    if (st == AGENT_STATE_READY) {
        int per = f.local_size > 0 ? f.local_size : 1;
        metric(&b, "kcoll_agent_rank", "gauge", "this pod's rank (of its first local rank)",
               f.rank * per);
        metric(&b, "kcoll_agent_nranks", "gauge", "the job's number of ranks", f.nranks * per);
        metric(&b, "kcoll_agent_ranks_per_pod", "gauge", "ranks (processes) this pod runs", per);
    }
    sb_printf(&b, "# HELP kcoll_agent_condition named conditions of this agent (1 = present)\n"
                  "# TYPE kcoll_agent_condition gauge\n");
    if (st == AGENT_STATE_FAILED)
        sb_printf(&b, "kcoll_agent_condition{type=\"%s\",fatal=\"true\"} 1\n", fail.type);
    for (int i = 0; i < nw; i++)
        sb_printf(&b, "kcoll_agent_condition{type=\"%s\",fatal=\"false\"} 1\n", warns[i].type);
    if (ctx->kube) {
        metric(&b, "kcoll_agent_kube_requests_total", "counter",
               "Kubernetes API requests (attempts, watches excluded)",
               (double)agent_kube_request_count(ctx->kube));
        metric(&b, "kcoll_agent_kube_retries_total", "counter",
               "Kubernetes API attempts retried after 429/5xx/transport errors",
               (double)agent_kube_retry_count(ctx->kube));
        metric(&b, "kcoll_agent_kube_watches_total", "counter", "watch connections opened",
               (double)agent_kube_watch_count(ctx->kube));
    }
    metric(&b, "kcoll_agent_ipc_requests_total", "counter", "messages from the library",
           (double)ctx->metrics.ipc_requests);
    metric(&b, "kcoll_agent_ipc_errors_total", "counter", "messages answered with an error",
           (double)ctx->metrics.ipc_errors);
    metric(&b, "kcoll_agent_reports_total", "counter", "report messages from the library",
           (double)ctx->metrics.reports);
    metric(&b, "kcoll_agent_status_patches_total", "counter", "Communicator status patches",
           (double)ctx->metrics.status_patches);
    metric(&b, "kcoll_agent_events_total", "counter", "Events emitted",
           (double)ctx->metrics.events_emitted);
    metric(&b, "kcoll_agent_events_dropped_total", "counter",
           "Event occurrences dropped (queue full, 5 minutes undelivered, refused)",
           (double)ctx->metrics.events_dropped);
    metric(&b, "kcoll_agent_uptime_seconds", "gauge", "seconds since the agent started",
           (double)(agent_now_ms() - ctx->start_ms) / 1000.0);
    return b.buf;
}

static mhd_result_t reply(struct MHD_Connection *c, unsigned code, char *body, const char *ctype)
{
    struct MHD_Response *r;
    mhd_result_t ret;
    if (!body)
        return MHD_NO;
    r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    ret = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ret;
}

static mhd_result_t handler(void *cls, struct MHD_Connection *c, const char *url,
                            const char *method, const char *version, const char *upload,
                            size_t *upload_size, void **con_cls)
{
    agent_ctx_t *ctx = cls;
    agent_state_t st;
    char msg[1200];
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)con_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return reply(c, 405, strdup("method not allowed\n"), "text/plain");
    pthread_mutex_lock(&ctx->mu);
    st = ctx->state;
    snprintf(msg, sizeof(msg), "%s: %s\n", ctx->failure.type, ctx->failure.message);
    pthread_mutex_unlock(&ctx->mu);
    if (strcmp(url, "/healthz") == 0)
        return reply(c, 200, strdup("ok\n"), "text/plain");
    if (strcmp(url, "/readyz") == 0) {
        if (st == AGENT_STATE_READY)
            return reply(c, 200, strdup("ready\n"), "text/plain");
        if (st == AGENT_STATE_FAILED)
            return reply(c, 503, strdup(msg), "text/plain");
        return reply(c, 503, strdup("starting: resolving rank and root endpoint\n"), "text/plain");
    }
    if (strcmp(url, "/metrics") == 0)
        return reply(c, 200, agent_health_metrics(ctx), "text/plain; version=0.0.4");
    return reply(c, 404, strdup("not found (try /healthz, /readyz, /metrics)\n"), "text/plain");
}

int agent_http_start(agent_ctx_t *ctx, agent_http_t **out)
{
    agent_http_t *h;
    struct sockaddr_storage ss;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    const char *addr = ctx->opt.health_addr ? ctx->opt.health_addr : "127.0.0.1";
    unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG;
    if (ctx->opt.health_port <= 0)
        return 0;
    h = calloc(1, sizeof(*h));
    if (!h)
        return -1;
    memset(&ss, 0, sizeof(ss));
    if (inet_pton(AF_INET, addr, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)ctx->opt.health_port);
    } else if (inet_pton(AF_INET6, addr, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)ctx->opt.health_port);
        flags |= MHD_USE_IPv6;
    } else {
        agent_error("AGENT-HTTP-FAIL",
                    "--health-addr (or POD_IP) %s is not an IPv4 or IPv6 address; the webhook "
                    "sets POD_IP from status.podIP",
                    addr);
        free(h);
        return -1;
    }
    if (strcmp(addr, "0.0.0.0") == 0 || strcmp(addr, "::") == 0)
        agent_warn("AGENT-HTTP-LISTEN",
                   "health port on every address (%s): plain HTTP, reachable from wherever the "
                   "pod is; the default is the pod's IP",
                   addr);
    h->d = MHD_start_daemon(flags, (uint16_t)ctx->opt.health_port, NULL, NULL, handler, ctx,
                            MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)10,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)32, MHD_OPTION_END);
    if (!h->d) {
        agent_error("AGENT-HTTP-FAIL", "cannot serve health on %s port %d", addr,
                    ctx->opt.health_port);
        free(h);
        return -1;
    }
    agent_info("AGENT-HTTP-LISTEN", "health on %s port %d (/healthz /readyz /metrics)", addr,
               ctx->opt.health_port);
    *out = h;
    return 0;
}

void agent_http_stop(agent_http_t *h)
{
    if (!h)
        return;
    MHD_stop_daemon(h->d);
    free(h);
}
