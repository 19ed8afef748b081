/* Library side of the coll-agent socket protocol: hello (facts) and report. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "agent_client.h"

#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char agent_err[1536];

static void set_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(agent_err, sizeof(agent_err), fmt, ap);
    va_end(ap);
}

const char *colli_agent_last_error(void)
{
    return agent_err;
}

#ifdef COLL_HAVE_JANSSON
#include <jansson.h>

#define MAX_REPLY_BYTES (1u << 20)

static long long now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int left_ms(long long deadline)
{
    long long l = deadline - now_ms();
    return l <= 0 ? 0 : (l > 1000 ? 1000 : (int)l);
}

/* Connect, retrying while the agent is not yet listening; -1 with errno at the deadline. */
static int connect_agent(const char *path, long long deadline)
{
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path) + 1);
    for (;;) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0), err;
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
            return fd;
        err = errno;
        close(fd);
        if ((err != ENOENT && err != ECONNREFUSED && err != EAGAIN && err != EINTR) ||
            now_ms() + 100 > deadline) {
            errno = err;
            return -1;
        }
        usleep(100 * 1000);
    }
}

static int io_full(int fd, void *buf, size_t n, int writing, long long deadline)
{
    size_t done = 0;
    while (done < n) {
        struct pollfd p = {fd, (short)(writing ? POLLOUT : POLLIN), 0};
        ssize_t r;
        int ms = left_ms(deadline);
        if (ms == 0) {
            errno = ETIMEDOUT;
            return -1;
        }
        if (poll(&p, 1, ms) < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (!p.revents)
            continue;
        if (writing)
            r = send(fd, (const char *)buf + done, n - done, MSG_NOSIGNAL);
        else
            r = recv(fd, (char *)buf + done, n - done, 0);
        if (r == 0) {
            errno = ECONNRESET;
            return -1;
        }
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

/* One request/reply exchange; *reply is a JSON object on success. */
static coll_result_t exchange(const char *path, int timeout_ms, json_t *req, json_t **reply)
{
    long long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
    char *s = json_dumps(req, JSON_COMPACT), *buf = NULL;
    unsigned char hdr[4];
    size_t n;
    uint32_t rn;
    json_error_t jerr;
    json_t *r;
    int fd;

    if (!s) {
        set_err("agent: cannot encode request");
        return COLL_ERR_INTERNAL;
    }
    fd = connect_agent(path, deadline);
    if (fd < 0) {
        set_err("cannot reach the kcoll agent at %s: %s; is the coll-agent sidecar running "
                "(kubectl logs POD -c coll-agent) and %s set to its socket?",
                path, strerror(errno), COLL_ENV_AGENT_SOCKET);
        free(s);
        return COLL_ERR_SYSTEM;
    }
    n = strlen(s);
    hdr[0] = (unsigned char)(n >> 24);
    hdr[1] = (unsigned char)(n >> 16);
    hdr[2] = (unsigned char)(n >> 8);
    hdr[3] = (unsigned char)n;
    if (io_full(fd, hdr, 4, 1, deadline) != 0 || io_full(fd, s, n, 1, deadline) != 0 ||
        io_full(fd, hdr, 4, 0, deadline) != 0) {
        int timed_out = errno == ETIMEDOUT;
        set_err("kcoll agent at %s: %s after %d ms", path, timed_out ? "no reply" : strerror(errno),
                timeout_ms);
        free(s);
        close(fd);
        return timed_out ? COLL_ERR_TIMEOUT : COLL_ERR_SYSTEM;
    }
    free(s);
    rn = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 | (uint32_t)hdr[2] << 8 | hdr[3];
    if (rn == 0 || rn > MAX_REPLY_BYTES || !(buf = malloc(rn))) {
        set_err("kcoll agent at %s: reply length %u out of range", path, rn);
        close(fd);
        return COLL_ERR_INVALID_USAGE;
    }
    if (io_full(fd, buf, rn, 0, deadline) != 0) {
        int timed_out = errno == ETIMEDOUT;
        set_err("kcoll agent at %s: truncated reply: %s", path, strerror(errno));
        free(buf);
        close(fd);
        return timed_out ? COLL_ERR_TIMEOUT : COLL_ERR_SYSTEM;
    }
    close(fd);
    r = json_loadb(buf, rn, 0, &jerr);
    free(buf);
    if (!json_is_object(r)) {
        set_err("kcoll agent at %s: reply is not a JSON object (%s)", path, jerr.text);
        json_decref(r);
        return COLL_ERR_INVALID_USAGE;
    }
    *reply = r;
    return COLL_SUCCESS;
}

static coll_result_t code_for_condition(const char *code)
{
    static const char *network[] = {"InterfaceMissing",        "AddressMissing",
                                    "NetworkNotAttached",      "NetworkStatusMissing",
                                    "NetworkStatusIncomplete", NULL};
    if (!code)
        return COLL_ERR_INVALID_USAGE;
    for (int i = 0; network[i]; i++)
        if (strcmp(code, network[i]) == 0)
            return COLL_ERR_NETWORK;
    if (strcmp(code, "NotReady") == 0 || strcmp(code, "RendezvousTimeout") == 0)
        return COLL_ERR_TIMEOUT;
    if (strcmp(code, "APIUnavailable") == 0)
        return COLL_ERR_SYSTEM;
    return COLL_ERR_INVALID_USAGE;
}

/* An error reply becomes the thread's message and a result code. */
static coll_result_t check_reply(const char *path, json_t *r, const char *want_type)
{
    const char *type = json_string_value(json_object_get(r, "type"));
    if (type && strcmp(type, "error") == 0) {
        const char *code = json_string_value(json_object_get(r, "code"));
        const char *msg = json_string_value(json_object_get(r, "error"));
        set_err("kcoll agent (%s): %s: %s", path, code ? code : "error", msg ? msg : "");
        return code_for_condition(code);
    }
    if (!type || strcmp(type, want_type) != 0) {
        set_err("kcoll agent at %s: unexpected reply type \"%s\" (wanted \"%s\")", path,
                type ? type : "", want_type);
        return COLL_ERR_INVALID_USAGE;
    }
    return COLL_SUCCESS;
}

static int copy_str(json_t *r, const char *key, char *dst, size_t len, int required)
{
    const char *v = json_string_value(json_object_get(r, key));
    if (!v) {
        dst[0] = '\0';
        return required ? -1 : 0;
    }
    if (strlen(v) >= len)
        return -1;
    memcpy(dst, v, strlen(v) + 1);
    return 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

coll_result_t colli_agent_hello(const char *socket_path, int timeout_ms, colli_agent_facts_t *out)
{
    colli_agent_facts_t f;
    json_t *req, *r = NULL, *v;
    const char *secret;
    coll_result_t status;

    if (!socket_path || !socket_path[0] || !out || timeout_ms <= 0) {
        set_err("colli_agent_hello: socket path, output and a positive timeout are required");
        return COLL_ERR_INVALID_ARGUMENT;
    }
    req = json_pack("{si ss si ss si}", "v", COLLI_AGENT_PROTOCOL_V, "type", "hello", "timeout_ms",
                    timeout_ms, "library_version", coll_get_version_string(), "pid", (int)getpid());
    if (!req) {
        set_err("agent: cannot build hello");
        return COLL_ERR_INTERNAL;
    }
    status = exchange(socket_path, timeout_ms, req, &r);
    json_decref(req);
    if (status != COLL_SUCCESS)
        return status;
    status = check_reply(socket_path, r, "hello");
    if (status != COLL_SUCCESS)
        goto done;
    memset(&f, 0, sizeof(f));
    status = COLL_ERR_INVALID_USAGE;
#define INT_FIELD(key, dst)                                                                        \
    do {                                                                                           \
        v = json_object_get(r, key);                                                               \
        if (!json_is_integer(v)) {                                                                 \
            set_err("kcoll agent at %s: hello reply lacks integer \"%s\"", socket_path, key);      \
            goto done;                                                                             \
        }                                                                                          \
        dst = (int)json_integer_value(v);                                                          \
    } while (0)
    INT_FIELD("rank", f.rank);
    INT_FIELD("nranks", f.nranks);
    INT_FIELD("root_port", f.root_port);
    INT_FIELD("bootstrap_timeout_s", f.bootstrap_timeout_s);
    INT_FIELD("timeout_s", f.timeout_s);
#undef INT_FIELD
    f.is_root = json_is_true(json_object_get(r, "is_root"));
    if (copy_str(r, "root_host", f.root_host, sizeof(f.root_host), 1) ||
        copy_str(r, "interface", f.ifname, sizeof(f.ifname), 1) ||
        copy_str(r, "address", f.address, sizeof(f.address), 1) ||
        copy_str(r, "transport", f.transport, sizeof(f.transport), 1) ||
        copy_str(r, "ib_device", f.ib_device, sizeof(f.ib_device), 0) ||
        copy_str(r, "library_version", f.pinned_version, sizeof(f.pinned_version), 0) ||
        copy_str(r, "pod", f.pod, sizeof(f.pod), 0) ||
        copy_str(r, "node", f.node, sizeof(f.node), 0) ||
        copy_str(r, "namespace", f.namespace_, sizeof(f.namespace_), 0) ||
        copy_str(r, "job", f.job, sizeof(f.job), 0) ||
        copy_str(r, "topology", f.topology, sizeof(f.topology), 0) ||
        copy_str(r, "group", f.group, sizeof(f.group), 0)) {
        set_err("kcoll agent at %s: hello reply has a missing or oversized string field",
                socket_path);
        goto done;
    }
    secret = json_string_value(json_object_get(r, "secret"));
    if (!secret || strlen(secret) != 2 * COLLI_AGENT_SECRET_BYTES) {
        set_err("kcoll agent at %s: hello reply has no 32-hex-digit secret", socket_path);
        goto done;
    }
    for (int i = 0; i < COLLI_AGENT_SECRET_BYTES; i++) {
        int hi = hexval(secret[2 * i]), lo = hexval(secret[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            set_err("kcoll agent at %s: secret is not hex", socket_path);
            goto done;
        }
        f.secret[i] = (unsigned char)(hi << 4 | lo);
    }
    if (f.nranks <= 0 || f.rank < 0 || f.rank >= f.nranks || f.root_port <= 0 ||
        f.root_port > 65535 || f.is_root != (f.rank == 0)) {
        set_err("kcoll agent at %s: inconsistent facts (rank %d of %d, root port %d)", socket_path,
                f.rank, f.nranks, f.root_port);
        goto done;
    }
    *out = f;
    status = COLL_SUCCESS;
done:
    json_decref(r);
    return status;
}

static const char *phase_name(colli_agent_phase_t p)
{
    switch (p) {
    case COLLI_AGENT_PENDING:
        return "Pending";
    case COLLI_AGENT_BOOTSTRAPPING:
        return "Bootstrapping";
    case COLLI_AGENT_READY:
        return "Ready";
    case COLLI_AGENT_DEGRADED:
        return "Degraded";
    case COLLI_AGENT_FAILED:
        return "Failed";
    }
    return NULL;
}

coll_result_t colli_agent_report_ex(const char *socket_path, int timeout_ms,
                                    colli_agent_phase_t phase, int ready_ranks, int err_rank,
                                    const char *err_pod, const char *err_node,
                                    const char *error_message, const char *cond_type, int cond_ok,
                                    const char *cond_reason, const char *cond_message)
{
    const char *pname = phase_name(phase);
    json_t *req, *r = NULL;
    coll_result_t status;
    if (!socket_path || !socket_path[0] || !pname || timeout_ms <= 0) {
        set_err("colli_agent_report: socket path, a valid phase and a positive timeout are "
                "required");
        return COLL_ERR_INVALID_ARGUMENT;
    }
    req = json_pack("{si ss ss}", "v", COLLI_AGENT_PROTOCOL_V, "type", "report", "phase", pname);
    if (!req) {
        set_err("agent: cannot build report");
        return COLL_ERR_INTERNAL;
    }
    if (ready_ranks >= 0)
        json_object_set_new(req, "ready_ranks", json_integer(ready_ranks));
    if (error_message && error_message[0]) {
        json_t *e = json_pack("{ss}", "message", error_message);
        if (e && err_rank >= 0)
            json_object_set_new(e, "rank", json_integer(err_rank));
        if (e && err_rank >= 0 && err_pod && err_pod[0])
            json_object_set_new(e, "pod", json_string(err_pod));
        if (e && err_rank >= 0 && err_node && err_node[0])
            json_object_set_new(e, "node", json_string(err_node));
        json_object_set_new(req, "error", e);
    }
    if (cond_type)
        json_object_set_new(req, "conditions",
                            json_pack("[{ss ss ss ss}]", "type", cond_type, "status",
                                      cond_ok ? "True" : "False", "reason",
                                      cond_reason ? cond_reason : (cond_ok ? "Ok" : "Failed"),
                                      "message", cond_message ? cond_message : ""));
    status = exchange(socket_path, timeout_ms, req, &r);
    json_decref(req);
    if (status != COLL_SUCCESS)
        return status;
    status = check_reply(socket_path, r, "ack");
    json_decref(r);
    return status;
}

coll_result_t colli_agent_report(const char *socket_path, int timeout_ms, colli_agent_phase_t phase,
                                 const char *error_message)
{
    return colli_agent_report_ex(socket_path, timeout_ms, phase, -1, -1, NULL, NULL, error_message,
                                 NULL, 0, NULL, NULL);
}

#else /* !COLL_HAVE_JANSSON */

coll_result_t colli_agent_hello(const char *socket_path, int timeout_ms, colli_agent_facts_t *out)
{
    (void)timeout_ms;
    (void)out;
    set_err("this libcoll was built without jansson, so it cannot talk to the kcoll agent at %s; "
            "rebuild with libjansson-dev installed (COLL_HAVE_JANSSON)",
            socket_path ? socket_path : "(null)");
    return COLL_ERR_UNSUPPORTED;
}

coll_result_t colli_agent_report_ex(const char *socket_path, int timeout_ms,
                                    colli_agent_phase_t phase, int ready_ranks, int err_rank,
                                    const char *err_pod, const char *err_node,
                                    const char *error_message, const char *cond_type, int cond_ok,
                                    const char *cond_reason, const char *cond_message)
{
    (void)timeout_ms;
    (void)phase;
    (void)ready_ranks;
    (void)err_rank;
    (void)err_pod;
    (void)err_node;
    (void)error_message;
    (void)cond_type;
    (void)cond_ok;
    (void)cond_reason;
    (void)cond_message;
    set_err("this libcoll was built without jansson, so it cannot report to the kcoll agent at "
            "%s; rebuild with libjansson-dev installed (COLL_HAVE_JANSSON)",
            socket_path ? socket_path : "(null)");
    return COLL_ERR_UNSUPPORTED;
}

coll_result_t colli_agent_report(const char *socket_path, int timeout_ms, colli_agent_phase_t phase,
                                 const char *error_message)
{
    return colli_agent_report_ex(socket_path, timeout_ms, phase, -1, -1, NULL, NULL, error_message,
                                 NULL, 0, NULL, NULL);
}

#endif /* COLL_HAVE_JANSSON */
