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

/* The facts an error reply to this thread's last hello carried (LocalRanksMissing, ...). */
static _Thread_local colli_proto_facts_t failed_facts;
static _Thread_local colli_proto_failure_t failed_how;
static _Thread_local int failed_facts_valid;

int colli_agent_failed_facts(colli_proto_facts_t *out, colli_proto_failure_t *how)
{
    if (!failed_facts_valid)
        return -1;
    *out = failed_facts;
    *how = failed_how;
    return 0;
}

#ifdef COLL_HAVE_JANSSON
#include <jansson.h>

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
static coll_result_t exchange(const char *path, int timeout_ms, const json_t *req, json_t **reply)
{
    long long deadline = now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
    size_t n;
    unsigned char *frame = colli_proto_frame_encode(req, &n), hdr[COLLI_PROTO_FRAME_HEADER];
    char *buf = NULL;
    uint32_t rn;
    json_error_t jerr;
    json_t *r;
    int fd;

    if (!frame) {
        set_err("agent: cannot encode request");
        return COLL_ERR_INTERNAL;
    }
    fd = connect_agent(path, deadline);
    if (fd < 0) {
        set_err("cannot reach the kcoll agent at %s: %s; is the coll-agent sidecar running "
                "(kubectl logs POD -c coll-agent) and %s set to its socket?",
                path, strerror(errno), COLL_ENV_AGENT_SOCKET);
        free(frame);
        return COLL_ERR_SYSTEM;
    }
    if (io_full(fd, frame, n, 1, deadline) != 0 ||
        io_full(fd, hdr, sizeof(hdr), 0, deadline) != 0) {
        int timed_out = errno == ETIMEDOUT;
        set_err("kcoll agent at %s: %s after %d ms", path, timed_out ? "no reply" : strerror(errno),
                timeout_ms);
        free(frame);
        close(fd);
        return timed_out ? COLL_ERR_TIMEOUT : COLL_ERR_SYSTEM;
    }
    free(frame);
    rn = colli_proto_frame_length(hdr);
    if (rn == 0 || rn > COLLI_PROTO_FRAME_MAX || !(buf = malloc(rn))) {
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
    switch (colli_proto_code_class(code)) {
    case COLLI_PROTO_CLASS_NETWORK:
        return COLL_ERR_NETWORK;
    case COLLI_PROTO_CLASS_TIMEOUT:
        return COLL_ERR_TIMEOUT;
    case COLLI_PROTO_CLASS_SYSTEM:
        return COLL_ERR_SYSTEM;
    case COLLI_PROTO_CLASS_USAGE:
        break;
    }
    return COLL_ERR_INVALID_USAGE;
}

/* An error reply becomes the thread's message and a result code. */
static coll_result_t check_reply(const char *path, json_t *r, const char *want_type)
{
    const char *type = colli_proto_type(r);
    if (type && strcmp(type, COLLI_PROTO_TYPE_ERROR) == 0) {
        const char *code, *msg;
        colli_proto_error_fields(r, &code, &msg);
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

/* A launcher's variable (LOCAL_RANK, ...) as a number 0..65535 into *out (-1 when unset); -1
 * with the message set when it is not one. */
static int env_count(const char *name, int *out)
{
    const char *v = secure_getenv(name);
    char *end;
    long x;
    *out = -1;
    if (v == NULL || *v == '\0')
        return 0;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < 0 || x > 65535) {
        set_err("%s=\"%.32s\" is not a number in 0..65535; the launcher (torchrun) sets it to "
                "the process's place in its pod",
                name, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

coll_result_t colli_agent_hello(const char *socket_path, int timeout_ms, colli_proto_facts_t *out)
{
    json_t *req, *r = NULL;
    char err[256];
    coll_result_t status;
    int lr, lws, restart;

    failed_facts_valid = 0;
    if (!socket_path || !socket_path[0] || !out || timeout_ms <= 0) {
        set_err("colli_agent_hello: socket path, output and a positive timeout are required");
        return COLL_ERR_INVALID_ARGUMENT;
    }
    /* several ranks per pod: the process's place in it, as torchrun (or any launcher) says */
    if (env_count(COLL_ENV_LOCAL_RANK_POD, &lr) != 0 ||
        env_count(COLL_ENV_LOCAL_WORLD_SIZE, &lws) != 0 ||
        env_count(COLL_ENV_RESTART_COUNT, &restart) != 0)
        return COLL_ERR_INVALID_USAGE;
    req = colli_proto_hello_request(timeout_ms, coll_get_version_string(), (int)getpid());
    if (!req || colli_proto_hello_set_local(req, lr, lws, restart) != 0) {
        json_decref(req);
        set_err("agent: cannot build hello");
        return COLL_ERR_INTERNAL;
    }
    status = exchange(socket_path, timeout_ms, req, &r);
    json_decref(req);
    if (status != COLL_SUCCESS)
        return status;
    status = check_reply(socket_path, r, COLLI_PROTO_TYPE_HELLO);
    if (status != COLL_SUCCESS &&
        colli_proto_hello_failure_facts(r, &failed_facts, &failed_how) == 0)
        failed_facts_valid = 1;
    if (status == COLL_SUCCESS && colli_proto_hello_decode(r, out, err, sizeof(err)) != 0) {
        set_err("kcoll agent at %s: %s", socket_path, err);
        status = COLL_ERR_INVALID_USAGE;
    }
    json_decref(r);
    return status;
}

/* Send one report and wait for the agent's acknowledgement. */
static coll_result_t send_report(const char *socket_path, int timeout_ms,
                                 const colli_proto_report_t *rep)
{
    json_t *req, *r = NULL;
    coll_result_t status;
    if (!socket_path || !socket_path[0] || !colli_proto_phase_name(rep->phase) || timeout_ms <= 0) {
        set_err("colli_agent_report: socket path, a valid phase and a positive timeout are "
                "required");
        return COLL_ERR_INVALID_ARGUMENT;
    }
    req = colli_proto_report_build(rep);
    if (!req) {
        set_err("agent: cannot build report");
        return COLL_ERR_INTERNAL;
    }
    status = exchange(socket_path, timeout_ms, req, &r);
    json_decref(req);
    if (status != COLL_SUCCESS)
        return status;
    status = check_reply(socket_path, r, COLLI_PROTO_TYPE_ACK);
    json_decref(r);
    return status;
}

coll_result_t colli_agent_report_ready(const char *socket_path, int timeout_ms,
                                       const char *transport, const colli_proto_place_t *places,
                                       int nplaces, int more)
{
    colli_proto_report_t rep = {
        .phase = COLLI_PROTO_PHASE_READY, .transport = transport, .places_more = more};
    for (int k = 0; k < nplaces && k < COLLI_PROTO_MAX_PLACES; k++)
        rep.places[rep.nplaces++] = places[k];
    return send_report(socket_path, timeout_ms, &rep);
}

coll_result_t colli_agent_report_ex(const char *socket_path, int timeout_ms,
                                    colli_proto_phase_t phase, int ready_ranks, int err_rank,
                                    const char *err_pod, const char *err_node,
                                    const char *error_message, const char *cond_type, int cond_ok,
                                    const char *cond_reason, const char *cond_message)
{
    colli_proto_report_t rep = {
        .phase = phase,
        .has_ready_ranks = ready_ranks >= 0,
        .ready_ranks = ready_ranks,
        .has_error = error_message && error_message[0],
        .has_err_rank = err_rank >= 0,
        .err_rank = err_rank,
        .err_pod = err_rank >= 0 ? err_pod : NULL,
        .err_node = err_rank >= 0 ? err_node : NULL,
        .err_message = error_message,
        .pid = (int)getpid(),
        .conds = {{.type = cond_type,
                   .status = cond_ok ? COLLI_PROTO_STATUS_TRUE : COLLI_PROTO_STATUS_FALSE,
                   .reason = cond_reason ? cond_reason : (cond_ok ? "Ok" : "Failed"),
                   .message = cond_message}},
    };
    return send_report(socket_path, timeout_ms, &rep);
}

coll_result_t colli_agent_report(const char *socket_path, int timeout_ms, colli_proto_phase_t phase,
                                 const char *error_message)
{
    return colli_agent_report_ex(socket_path, timeout_ms, phase, -1, -1, NULL, NULL, error_message,
                                 NULL, 0, NULL, NULL);
}

coll_result_t colli_agent_request(const char *socket_path, int timeout_ms, const json_t *req,
                                  const char *want_type, json_t **reply)
{
    json_t *r = NULL;
    coll_result_t status;
    if (!socket_path || !socket_path[0] || !req || !want_type || !reply || timeout_ms <= 0) {
        set_err("colli_agent_request: socket path, request, reply type, output and a positive "
                "timeout are required");
        return COLL_ERR_INVALID_ARGUMENT;
    }
    status = exchange(socket_path, timeout_ms, req, &r);
    if (status != COLL_SUCCESS)
        return status;
    status = check_reply(socket_path, r, want_type);
    if (status != COLL_SUCCESS) {
        json_decref(r);
        return status;
    }
    *reply = r;
    return COLL_SUCCESS;
}

coll_result_t colli_agent_ask_peers(const char *socket_path, int timeout_ms,
                                    const colli_proto_peer_msg_t *q, int *ended, char *cause,
                                    size_t len, bool *pending)
{
    json_t *req = colli_proto_peer_request(q), *reply = NULL;
    *ended = -1;
    *pending = false;
    if (!req) {
        set_err("out of memory for a question to the kcoll agent");
        return COLL_ERR_SYSTEM;
    }
    coll_result_t status =
        colli_agent_request(socket_path, timeout_ms, req, COLLI_PROTO_TYPE_PEER, &reply);
    json_decref(req);
    if (status != COLL_SUCCESS)
        return status;
    colli_proto_peer_msg_t a;
    char err[256];
    if (colli_proto_peer_reply_parse(reply, &a, err, sizeof(err)) != 0) {
        set_err("kcoll agent at %s: %s", socket_path, err);
        json_decref(reply);
        return COLL_ERR_INVALID_USAGE;
    }
    *pending = a.pending != 0;
    if (a.npeers > 0) {
        *ended = a.peers[0].rank;
        snprintf(cause, len, "%s", a.peers[0].cause);
    }
    json_decref(reply);
    return COLL_SUCCESS;
}

#else /* !COLL_HAVE_JANSSON */

coll_result_t colli_agent_ask_peers(const char *socket_path, int timeout_ms,
                                    const colli_proto_peer_msg_t *q, int *ended, char *cause,
                                    size_t len, bool *pending)
{
    (void)timeout_ms;
    (void)q;
    (void)cause;
    (void)len;
    *ended = -1;
    *pending = false;
    set_err("this libcoll was built without jansson, so it cannot ask the kcoll agent at %s",
            socket_path ? socket_path : "(null)");
    return COLL_ERR_UNSUPPORTED;
}

coll_result_t colli_agent_request(const char *socket_path, int timeout_ms, const struct json_t *req,
                                  const char *want_type, struct json_t **reply)
{
    (void)timeout_ms;
    (void)req;
    (void)want_type;
    (void)reply;
    set_err("this libcoll was built without jansson, so it cannot talk to the kcoll agent at %s; "
            "rebuild with libjansson-dev installed (COLL_HAVE_JANSSON)",
            socket_path ? socket_path : "(null)");
    return COLL_ERR_UNSUPPORTED;
}

coll_result_t colli_agent_hello(const char *socket_path, int timeout_ms, colli_proto_facts_t *out)
{
    (void)timeout_ms;
    (void)out;
    set_err("this libcoll was built without jansson, so it cannot talk to the kcoll agent at %s; "
            "rebuild with libjansson-dev installed (COLL_HAVE_JANSSON)",
            socket_path ? socket_path : "(null)");
    return COLL_ERR_UNSUPPORTED;
}

coll_result_t colli_agent_report_ex(const char *socket_path, int timeout_ms,
                                    colli_proto_phase_t phase, int ready_ranks, int err_rank,
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

coll_result_t colli_agent_report(const char *socket_path, int timeout_ms, colli_proto_phase_t phase,
                                 const char *error_message)
{
    return colli_agent_report_ex(socket_path, timeout_ms, phase, -1, -1, NULL, NULL, error_message,
                                 NULL, 0, NULL, NULL);
}

coll_result_t colli_agent_report_ready(const char *socket_path, int timeout_ms,
                                       const char *transport, const colli_proto_place_t *places,
                                       int nplaces, int more)
{
    (void)transport;
    (void)places;
    (void)nplaces;
    (void)more;
    return colli_agent_report(socket_path, timeout_ms, COLLI_PROTO_PHASE_READY, NULL);
}

#endif /* COLL_HAVE_JANSSON */
