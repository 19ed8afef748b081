/* The library's unix socket (the protocol is proto/agent_ipc.h): 4-byte big-endian length + a
 * JSON object with "v" and "type".
 * Unknown fields are ignored; malformed messages get an error reply, never a crash; every read
 * has a deadline; at most MAX_CONN connections are served at once.
 * Who may connect: the kernel's word (SO_PEERCRED), not the message's. A peer whose uid is
 * neither the agent's nor one of --ipc-allow-uid is refused; where the peer's pid is visible
 * (its pid namespace is ours or below), a hello or report must carry that pid. */
#define _GNU_SOURCE
#include "agent.h"
#include "kube.h"
#include "nccl_ipc.h"
#include "peer_ipc.h"

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

#define MAX_CONN   128
#define IDLE_MS    60000
#define MAX_ALLOW  32
#define WARN_FIRST 8     /* refused peers named one by one, then ... */
#define WARN_EVERY 10000 /* ... one line per 10 s that counts them */

struct agent_ipc {
    agent_ctx_t *ctx;
    int fd;
    int stop_pipe[2];
    pthread_t thread;
    char path[108];
    _Atomic int nconn;
    uid_t self;             /* the agent's euid */
    uid_t allow[MAX_ALLOW]; /* --ipc-allow-uid */
    int nallow;
    long refused;       /* peers refused so far (accept thread only) */
    long refused_shown; /* of which named */
    int64_t refused_ms; /* last summary line */
};

typedef struct {
    agent_ipc_t *ipc;
    int fd;
    pid_t peer_pid; /* 0 when the peer lives in a pid namespace we cannot see */
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
    size_t n;
    unsigned char *frame = colli_proto_frame_encode(msg, &n);
    int rc;
    json_decref(msg);
    if (!frame)
        return -1;
    rc = write_full(fd, frame, n, agent_now_ms() + 10000);
    free(frame);
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
    return colli_proto_error_reply(code, msg);
}

agent_state_t agent_wait_facts(agent_ctx_t *ctx, int64_t wait_ms, agent_facts_t *f,
                               agent_condition_t *fail)
{
    int64_t deadline = agent_now_ms() + wait_ms;
    agent_state_t st;
    pthread_mutex_lock(&ctx->mu);
    while (ctx->state == AGENT_STATE_STARTING && agent_remaining_ms(deadline) > 0 && !ctx->stop)
        agent_wait_step(ctx, deadline);
    st = ctx->state;
    *f = ctx->facts;
    *fail = ctx->failure;
    pthread_mutex_unlock(&ctx->mu);
    return st;
}

static json_t *hello_reply(agent_ctx_t *ctx, const json_t *req)
{
    int64_t wait = colli_proto_hello_wait_ms(req);
    agent_facts_t f;
    agent_condition_t fail;
    int64_t deadline = agent_now_ms() + wait;
    agent_state_t st = agent_wait_facts(ctx, wait, &f, &fail);
    int known;
    pthread_mutex_lock(&ctx->mu);
    known = ctx->failed_known;
    pthread_mutex_unlock(&ctx->mu);
    if (st == AGENT_STATE_FAILED && known) /* the process tells the others through the root */
        return agent_local_failed(req, &f, fail.type, fail.message);
    if (st == AGENT_STATE_FAILED)
        return error_reply(fail.type, "%s", fail.message);
    if (st != AGENT_STATE_READY)
        return error_reply(COLLI_PROTO_CODE_NOT_READY,
                           "the agent is still resolving this pod's rank and root endpoint after "
                           "%lld ms; retry, or read the agent's log (AGENT-* lines)",
                           (long long)wait);
    return agent_local_hello(ctx, req, deadline);
}

/* A hello or report speaks for the process that sent it: where the kernel tells us the peer's
 * pid, the "pid" in the message must be it (NULL when it is, or when nothing can be checked). */
static json_t *pid_mismatch(const json_t *req, const char *type, pid_t peer_pid)
{
    const json_t *jp = json_object_get(req, COLLI_PROTO_KEY_PID);
    if (peer_pid <= 0 || !json_is_integer(jp) || json_integer_value(jp) == peer_pid ||
        (strcmp(type, COLLI_PROTO_TYPE_HELLO) != 0 && strcmp(type, COLLI_PROTO_TYPE_REPORT) != 0))
        return NULL;
    agent_warn("AGENT-IPC-PEER-REFUSED",
               "a %s says pid %lld but the connected process is pid %d (SO_PEERCRED): a process "
               "speaks only for itself; refused",
               type, (long long)json_integer_value(jp), (int)peer_pid);
    return error_reply("PeerPidMismatch",
                       "the %s says pid %lld but the process connected to the agent is pid %d: a "
                       "process may speak only for itself",
                       type, (long long)json_integer_value(jp), (int)peer_pid);
}

static json_t *handle(agent_ctx_t *ctx, const char *buf, size_t len, pid_t peer_pid)
{
    json_error_t jerr;
    json_t *req = json_loadb(buf, len, 0, &jerr), *reply;
    const char *type;
    long long v;
    if (!req)
        return error_reply(COLLI_PROTO_CODE_MALFORMED, "message is not JSON: %s (byte %d)",
                           jerr.text, jerr.position);
    if (!json_is_object(req)) {
        json_decref(req);
        return error_reply(COLLI_PROTO_CODE_MALFORMED, "message must be a JSON object");
    }
    if (colli_proto_header(req, &v, &type) != 0) {
        json_decref(req);
        return error_reply(COLLI_PROTO_CODE_MALFORMED,
                           "message needs an integer \"" COLLI_PROTO_KEY_V
                           "\" and a string \"" COLLI_PROTO_KEY_TYPE "\"");
    }
    if (v != COLLI_PROTO_IPC_VERSION) {
        json_decref(req);
        return error_reply(COLLI_PROTO_CODE_UNSUPPORTED_VERSION,
                           "protocol version %lld is not supported; this agent speaks v%d", v,
                           COLLI_PROTO_IPC_VERSION);
    }
    if ((reply = pid_mismatch(req, type, peer_pid)) != NULL) {
        /* refused: nothing of the message is used */
    } else if (strcmp(type, COLLI_PROTO_TYPE_HELLO) == 0) {
        reply = hello_reply(ctx, req);
    } else if (strcmp(type, COLLI_PROTO_TYPE_REPORT) == 0) {
        colli_proto_report_t rep;
        char err[256];
        if (colli_proto_report_parse(req, &rep, err, sizeof(err)) != 0) {
            reply = error_reply(COLLI_PROTO_CODE_MALFORMED, "%s", err);
        } else {
            if (ctx->health)
                agent_health_report(ctx->health, &rep);
            reply = colli_proto_ack();
        }
    } else if (strcmp(type, COLLI_PROTO_TYPE_NCCL_INIT) == 0) {
        reply = agent_nccl_init(ctx, req);
    } else if (strcmp(type, COLLI_PROTO_TYPE_NCCL_ENDED) == 0) {
        reply = agent_nccl_ended(ctx, req);
    } else if (strcmp(type, COLLI_PROTO_TYPE_PEER) == 0) {
        reply = agent_peer_question(ctx->health, req);
        if (!reply)
            reply = error_reply(COLLI_PROTO_CODE_MALFORMED,
                                "a peer question needs an array \"" COLLI_PROTO_KEY_PEERS "\"");
    } else {
        reply = error_reply(COLLI_PROTO_CODE_UNKNOWN_TYPE,
                            "unknown message type \"%.64s\" (known: " COLLI_PROTO_TYPE_HELLO
                            ", " COLLI_PROTO_TYPE_REPORT ", " COLLI_PROTO_TYPE_NCCL_INIT
                            ", " COLLI_PROTO_TYPE_NCCL_ENDED ", " COLLI_PROTO_TYPE_PEER ")",
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
        unsigned char hdr[COLLI_PROTO_FRAME_HEADER];
        uint32_t n;
        char *buf;
        json_t *reply;
        int rc = read_full(c->fd, hdr, sizeof(hdr), agent_now_ms() + IDLE_MS);
        if (rc != 0)
            break;
        n = colli_proto_frame_length(hdr);
        ctx->metrics.ipc_requests++;
        if (n == 0 || n > COLLI_PROTO_FRAME_MAX) {
            ctx->metrics.ipc_errors++;
            agent_warn("AGENT-IPC-MALFORMED", "frame length %u out of range (1..%u); closing", n,
                       COLLI_PROTO_FRAME_MAX);
            send_msg(c->fd,
                     error_reply(COLLI_PROTO_CODE_MALFORMED, "frame length %u out of range (1..%u)",
                                 n, COLLI_PROTO_FRAME_MAX));
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
        reply = handle(ctx, buf, n, c->peer_pid);
        free(buf);
        if (!reply)
            reply = error_reply(COLLI_PROTO_CODE_INTERNAL, "cannot build the reply");
        if (!reply)
            break;
        if (strcmp(colli_proto_type(reply), COLLI_PROTO_TYPE_ERROR) == 0) {
            const char *code, *text;
            colli_proto_error_fields(reply, &code, &text);
            ctx->metrics.ipc_errors++;
            agent_debug("AGENT-IPC-ERROR-REPLY", "%s", text);
        }
        if (send_msg(c->fd, reply) != 0)
            break;
    }
    close(c->fd);
    c->ipc->nconn--;
    free(c);
    return NULL;
}

/* May the process at the other end of fd use the socket? 1 yes (its pid into *pid), else 0
 * after a WARN (the first few by name, then counted every 10 s) and an error reply. */
static int peer_allowed(agent_ipc_t *ipc, int fd, pid_t *pid)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    char allowed[MAX_ALLOW * 12] = "";
    int64_t now;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) != 0) {
        agent_warn("AGENT-IPC-PEER-REFUSED", "cannot read the peer's credentials (%s); refused",
                   strerror(errno));
        return 0;
    }
    *pid = cr.pid;
    if (cr.uid == ipc->self)
        return 1;
    for (int i = 0; i < ipc->nallow; i++)
        if (cr.uid == ipc->allow[i])
            return 1;
    for (int i = 0; i < ipc->nallow; i++) {
        size_t used = strlen(allowed);
        snprintf(allowed + used, sizeof(allowed) - used, ",%u", (unsigned)ipc->allow[i]);
    }
    ipc->refused++;
    now = agent_now_ms();
    if (ipc->refused_shown < WARN_FIRST) {
        ipc->refused_shown++;
        agent_warn("AGENT-IPC-PEER-REFUSED",
                   "connection from uid %u (gid %u, pid %d%s) refused: the socket admits the "
                   "agent's uid %u%s%s only; add the uid of the training container to "
                   "COLL_AGENT_IPC_ALLOW_UIDS (--ipc-allow-uid; the webhook sets it from the "
                   "containers' runAsUser)",
                   (unsigned)cr.uid, (unsigned)cr.gid, (int)cr.pid,
                   cr.pid ? "" : ": another pid namespace", (unsigned)ipc->self,
                   ipc->nallow ? " and " : "", ipc->nallow ? allowed + 1 : "");
        ipc->refused_ms = now;
    } else if (now - ipc->refused_ms >= WARN_EVERY) {
        agent_warn("AGENT-IPC-PEER-REFUSED", "%ld connections refused so far (latest: uid %u)",
                   ipc->refused, (unsigned)cr.uid);
        ipc->refused_ms = now;
    }
    ipc->ctx->metrics.ipc_errors++;
    send_msg(fd, error_reply("PeerNotAllowed",
                             "uid %u may not use this coll-agent socket: it admits uid %u%s%s; "
                             "set COLL_AGENT_IPC_ALLOW_UIDS on the agent",
                             (unsigned)cr.uid, (unsigned)ipc->self, ipc->nallow ? " and " : "",
                             ipc->nallow ? allowed + 1 : ""));
    return 0;
}

/* "1000,0" into ipc->allow; -1 when malformed. */
static int parse_allow(agent_ipc_t *ipc, const char *list)
{
    const char *p = list;
    ipc->nallow = 0;
    while (p && *p) {
        char *end;
        unsigned long v;
        if (*p < '0' || *p > '9')
            return -1;
        errno = 0;
        v = strtoul(p, &end, 10);
        if (errno || v > 0x7fffffffUL || end == p || (*end && *end != ',') ||
            ipc->nallow >= MAX_ALLOW)
            return -1;
        ipc->allow[ipc->nallow++] = (uid_t)v;
        p = *end ? end + 1 : end;
    }
    return 0;
}

static void *accept_loop(void *arg)
{
    agent_ipc_t *ipc = arg;
    for (;;) {
        struct pollfd p[2] = {{ipc->fd, POLLIN, 0}, {ipc->stop_pipe[0], POLLIN, 0}};
        conn_t *c;
        pthread_t t;
        pthread_attr_t attr;
        pid_t pid = 0;
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
        if (!peer_allowed(ipc, fd, &pid)) {
            close(fd);
            continue;
        }
        if (ipc->nconn >= MAX_CONN) {
            agent_warn("AGENT-IPC-BUSY", "%d connections open; refusing one", MAX_CONN);
            send_msg(fd, error_reply(COLLI_PROTO_CODE_BUSY, "too many connections; retry"));
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
        c->peer_pid = pid;
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
    ipc->self = geteuid();
    if (parse_allow(ipc, ctx->opt.ipc_allow_uids) != 0) {
        agent_error(
            "AGENT-IPC-FAIL",
            "--ipc-allow-uid / COLL_AGENT_IPC_ALLOW_UIDS \"%.80s\" is not a comma-separated "
            "list of at most %d uids",
            ctx->opt.ipc_allow_uids, MAX_ALLOW);
        free(ipc);
        return -1;
    }
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
    /* other uids must be able to connect for SO_PEERCRED to decide: the socket is then open to
     * all (in a pod, its emptyDir is the pod's own) and the uid check is the gate */
    if (chmod(path, ipc->nallow ? 0666 : 0600) != 0 || listen(ipc->fd, 128) != 0) {
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
    agent_info("AGENT-IPC-LISTEN", "serving the library on %s (protocol v%d; uid %u%s%s)", path,
               COLLI_PROTO_IPC_VERSION, (unsigned)ipc->self, ipc->nallow ? " and " : " only",
               ipc->nallow ? ctx->opt.ipc_allow_uids : "");
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
