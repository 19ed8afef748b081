/* The library's unix socket: 4-byte big-endian length + a JSON object with "v" and "type".
 * Unknown fields are ignored; malformed messages get an error reply, never a crash; every read
 * has a deadline; at most MAX_CONN connections are served at once. */
#define _GNU_SOURCE
#include "agent.h"
#include "kube.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define MAX_MSG_BYTES  (1u << 20)
#define MAX_CONN       128
#define IDLE_MS        60000
#define MAX_HELLO_WAIT (10 * 60 * 1000)

struct agent_ipc {
    agent_ctx_t *ctx;
    int fd;
    int stop_pipe[2];
    pthread_t thread;
    char path[108];
    _Atomic int nconn;
};

typedef struct {
    agent_ipc_t *ipc;
    int fd;
} conn_t;

/* Read exactly n bytes before deadline; 0 ok, 1 clean EOF at start, -1 error/timeout. */
static int read_full(int fd, void *buf, size_t n, int64_t deadline)
{
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        int64_t left = agent_remaining_ms(deadline);
        ssize_t r;
        if (left <= 0)
            return -1;
        if (poll(&p, 1, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
            return -1;
        if (!(p.revents & (POLLIN | POLLHUP | POLLERR)))
            continue;
        r = recv(fd, (char *)buf + got, n - got, 0);
        if (r == 0)
            return got == 0 ? 1 : -1;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        got += (size_t)r;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n, int64_t deadline)
{
    size_t put = 0;
    while (put < n) {
        struct pollfd p = {fd, POLLOUT, 0};
        int64_t left = agent_remaining_ms(deadline);
        ssize_t w;
        if (left <= 0)
            return -1;
        if (poll(&p, 1, (int)(left > 1000 ? 1000 : left)) < 0 && errno != EINTR)
            return -1;
        if (!(p.revents & (POLLOUT | POLLERR | POLLHUP)))
            continue;
        w = send(fd, (const char *)buf + put, n - put, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        put += (size_t)w;
    }
    return 0;
}

static int send_msg(int fd, json_t *msg)
{
    char *s = json_dumps(msg, JSON_COMPACT);
    unsigned char hdr[4];
    size_t n;
    int rc;
    json_decref(msg);
    if (!s)
        return -1;
    n = strlen(s);
    hdr[0] = (unsigned char)(n >> 24);
    hdr[1] = (unsigned char)(n >> 16);
    hdr[2] = (unsigned char)(n >> 8);
    hdr[3] = (unsigned char)n;
    rc = write_full(fd, hdr, 4, agent_now_ms() + 10000);
    if (rc == 0)
        rc = write_full(fd, s, n, agent_now_ms() + 10000);
    free(s);
    return rc;
}

static json_t *error_reply(const char *code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static json_t *error_reply(const char *code, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    return json_pack("{si ss sb ss ss}", "v", AGENT_PROTOCOL_V, "type", "error", "ok", 0, "code",
                     code, "error", msg);
}

static json_t *hello_reply(agent_ctx_t *ctx, const json_t *req)
{
    json_t *t = json_object_get(req, "timeout_ms");
    int64_t wait = json_is_integer(t) ? json_integer_value(t) : 30000;
    int64_t deadline;
    agent_facts_t f;
    agent_condition_t fail;
    agent_state_t st;
    char secret[33], root[140];
    if (wait < 0)
        wait = 0;
    if (wait > MAX_HELLO_WAIT)
        wait = MAX_HELLO_WAIT;
    deadline = agent_now_ms() + wait;
    pthread_mutex_lock(&ctx->mu);
    while (ctx->state == AGENT_STATE_STARTING && agent_remaining_ms(deadline) > 0 && !ctx->stop) {
        struct timespec ts;
        int64_t step = agent_remaining_ms(deadline);
        if (step > 200)
            step = 200;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (long)(step * 1000000);
        ts.tv_sec += ts.tv_nsec / 1000000000;
        ts.tv_nsec %= 1000000000;
        pthread_cond_timedwait(&ctx->cv, &ctx->mu, &ts);
    }
    st = ctx->state;
    f = ctx->facts;
    fail = ctx->failure;
    pthread_mutex_unlock(&ctx->mu);
    if (st == AGENT_STATE_FAILED)
        return error_reply(fail.type, "%s", fail.message);
    if (st != AGENT_STATE_READY)
        return error_reply("NotReady",
                           "the agent is still resolving this pod's rank and root endpoint after "
                           "%lld ms; retry, or read the agent's log (AGENT-* lines)",
                           (long long)wait);
    agent_hex(f.secret, sizeof(f.secret), secret);
    if (strchr(f.root_host, ':'))
        snprintf(root, sizeof(root), "[%s]:%d", f.root_host, f.root_port);
    else
        snprintf(root, sizeof(root), "%s:%d", f.root_host, f.root_port);
    return json_pack("{si ss sb si si ss ss si ss sb ss ss ss ss ss si si ss ss ss ss ss ss ss}",
                     "v", AGENT_PROTOCOL_V, "type", "hello", "ok", 1, "rank", f.rank, "nranks",
                     f.nranks, "root", root, "root_host", f.root_host, "root_port", f.root_port,
                     "secret", secret, "is_root", f.is_root, "interface", f.ifname, "address",
                     f.address, "ib_device", f.ib_device, "transport", f.transport,
                     "library_version", f.library_version, "bootstrap_timeout_s",
                     f.bootstrap_timeout_s, "timeout_s", f.timeout_s, "pod", f.pod, "node", f.node,
                     "namespace", f.ns, "job", f.job, "topology", f.topology, "group", f.group,
                     "agent_version", AGENT_VERSION);
}

static json_t *handle(agent_ctx_t *ctx, const char *buf, size_t len)
{
    json_error_t jerr;
    json_t *req = json_loadb(buf, len, 0, &jerr), *v, *reply;
    const char *type;
    if (!req)
        return error_reply("Malformed", "message is not JSON: %s (byte %d)", jerr.text,
                           jerr.position);
    if (!json_is_object(req)) {
        json_decref(req);
        return error_reply("Malformed", "message must be a JSON object");
    }
    v = json_object_get(req, "v");
    type = json_string_value(json_object_get(req, "type"));
    if (!json_is_integer(v) || !type) {
        json_decref(req);
        return error_reply("Malformed", "message needs an integer \"v\" and a string \"type\"");
    }
    if (json_integer_value(v) != AGENT_PROTOCOL_V) {
        long long got = (long long)json_integer_value(v);
        json_decref(req);
        return error_reply("UnsupportedVersion",
                           "protocol version %lld is not supported; this agent speaks v%d", got,
                           AGENT_PROTOCOL_V);
    }
    if (strcmp(type, "hello") == 0) {
        reply = hello_reply(ctx, req);
    } else if (strcmp(type, "report") == 0) {
        json_t *err = json_object_get(req, "error");
        json_t *phase = json_object_get(req, "phase");
        if ((err && !json_is_object(err) && !json_is_null(err)) ||
            (phase && !json_is_string(phase))) {
            reply = error_reply("Malformed", "report: \"phase\" must be a string and \"error\" an "
                                             "object {rank, pod, node, message}");
        } else {
            if (ctx->health)
                agent_health_report(ctx->health, req);
            reply = json_pack("{si ss sb}", "v", AGENT_PROTOCOL_V, "type", "ack", "ok", 1);
        }
    } else {
        reply = error_reply("UnknownType", "unknown message type \"%.64s\" (known: hello, report)",
                            type);
    }
    json_decref(req);
    return reply;
}

static void *serve_conn(void *arg)
{
    conn_t *c = arg;
    agent_ctx_t *ctx = c->ipc->ctx;
    for (;;) {
        unsigned char hdr[4];
        uint32_t n;
        char *buf;
        json_t *reply;
        int rc = read_full(c->fd, hdr, 4, agent_now_ms() + IDLE_MS);
        if (rc != 0)
            break;
        n = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
        ctx->metrics.ipc_requests++;
        if (n == 0 || n > MAX_MSG_BYTES) {
            ctx->metrics.ipc_errors++;
            agent_warn("AGENT-IPC-MALFORMED", "frame length %u out of range (1..%u); closing", n,
                       MAX_MSG_BYTES);
            send_msg(c->fd, error_reply("Malformed", "frame length %u out of range (1..%u)", n,
                                        MAX_MSG_BYTES));
            break;
        }
        buf = malloc(n);
        if (!buf)
            break;
        if (read_full(c->fd, buf, n, agent_now_ms() + 10000) != 0) {
            free(buf);
            ctx->metrics.ipc_errors++;
            agent_warn("AGENT-IPC-MALFORMED", "truncated frame (%u bytes announced)", n);
            break;
        }
        reply = handle(ctx, buf, n);
        free(buf);
        if (!reply)
            reply = error_reply("Internal", "cannot build the reply");
        if (!reply)
            break;
        if (strcmp(json_string_value(json_object_get(reply, "type")), "error") == 0) {
            ctx->metrics.ipc_errors++;
            agent_debug("AGENT-IPC-ERROR-REPLY", "%s",
                        json_string_value(json_object_get(reply, "error")));
        }
        if (send_msg(c->fd, reply) != 0)
            break;
    }
    close(c->fd);
    c->ipc->nconn--;
    free(c);
    return NULL;
}

static void *accept_loop(void *arg)
{
    agent_ipc_t *ipc = arg;
    for (;;) {
        struct pollfd p[2] = {{ipc->fd, POLLIN, 0}, {ipc->stop_pipe[0], POLLIN, 0}};
        conn_t *c;
        pthread_t t;
        pthread_attr_t attr;
        int fd;
        if (poll(p, 2, 1000) < 0 && errno != EINTR)
            break;
        if (p[1].revents)
            break;
        if (!(p[0].revents & POLLIN))
            continue;
        fd = accept4(ipc->fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            continue;
        if (ipc->nconn >= MAX_CONN) {
            agent_warn("AGENT-IPC-BUSY", "%d connections open; refusing one", MAX_CONN);
            send_msg(fd, error_reply("Busy", "too many connections; retry"));
            close(fd);
            continue;
        }
        c = malloc(sizeof(*c));
        if (!c) {
            close(fd);
            continue;
        }
        c->ipc = ipc;
        c->fd = fd;
        ipc->nconn++;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 256 * 1024);
        if (pthread_create(&t, &attr, serve_conn, c) != 0) {
            ipc->nconn--;
            close(fd);
            free(c);
        }
        pthread_attr_destroy(&attr);
    }
    return NULL;
}

int agent_ipc_start(agent_ctx_t *ctx, const char *path, agent_ipc_t **out)
{
    agent_ipc_t *ipc = calloc(1, sizeof(*ipc));
    struct sockaddr_un sa;
    mode_t old;
    if (!ipc)
        return -1;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        agent_error("AGENT-IPC-FAIL", "socket path %s is longer than %zu bytes", path,
                    sizeof(sa.sun_path) - 1);
        free(ipc);
        return -1;
    }
    ipc->ctx = ctx;
    snprintf(ipc->path, sizeof(ipc->path), "%s", path);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    ipc->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (ipc->fd < 0 || pipe2(ipc->stop_pipe, O_CLOEXEC) != 0) {
        agent_error("AGENT-IPC-FAIL", "socket: %s", strerror(errno));
        free(ipc);
        return -1;
    }
    if (unlink(path) != 0 && errno != ENOENT)
        agent_warn("AGENT-IPC-FAIL", "cannot remove old socket %s: %s", path, strerror(errno));
    old = umask(0077); /* the socket is created 0600: no window with wider permissions */
    if (bind(ipc->fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        umask(old);
        agent_error("AGENT-IPC-FAIL", "bind %s: %s", path, strerror(errno));
        close(ipc->fd);
        free(ipc);
        return -1;
    }
    umask(old);
    if (chmod(path, 0600) != 0 || listen(ipc->fd, 128) != 0) {
        agent_error("AGENT-IPC-FAIL", "chmod/listen %s: %s", path, strerror(errno));
        close(ipc->fd);
        free(ipc);
        return -1;
    }
    if (pthread_create(&ipc->thread, NULL, accept_loop, ipc) != 0) {
        close(ipc->fd);
        free(ipc);
        return -1;
    }
    agent_info("AGENT-IPC-LISTEN", "serving the library on %s (protocol v%d)", path,
               AGENT_PROTOCOL_V);
    *out = ipc;
    return 0;
}

void agent_ipc_stop(agent_ipc_t *ipc)
{
    if (!ipc)
        return;
    if (write(ipc->stop_pipe[1], "x", 1) != 1)
        agent_warn("AGENT-IPC-FAIL", "cannot signal the accept thread");
    pthread_join(ipc->thread, NULL);
    close(ipc->fd);
    unlink(ipc->path);
    /* connection threads are detached; a hello waiting for rendezvous sees ctx->stop within
     * 200 ms. One still busy after 2 s keeps the struct (the process exits next). */
    for (int i = 0; i < 200 && ipc->nconn > 0; i++)
        agent_sleep_ms(10);
    if (ipc->nconn > 0)
        return;
    close(ipc->stop_pipe[0]);
    close(ipc->stop_pipe[1]);
    free(ipc);
}
