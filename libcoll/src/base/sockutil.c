#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <time.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sockutil.h"
#include "base/util.h"

socklen_t colli_sockaddr_len(const struct sockaddr_storage *sa)
{
    return sa->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

void colli_sock_tune(int fd)
{
    int one = 1;
    /* Best effort: a socket without NODELAY is slower, not wrong. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
}

coll_result_t colli_sock_listen(const struct sockaddr_storage *addr, int *fd_out,
                                struct sockaddr_storage *bound)
{
    int fd = socket(addr->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return COLLI_ERR(NET, COLL_ERR_SYSTEM,
                         "socket() failed: %s (check the descriptor limit, "
                         "ulimit -n)",
                         strerror(errno));
    int one = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0)
        coll_debug(NET, "SO_REUSEADDR failed: %s", strerror(errno));
    char a[80];
    colli_sockaddr_str(addr, a, sizeof(a));
    if (bind(fd, (const struct sockaddr *)addr, colli_sockaddr_len(addr)) != 0) {
        int e = errno;
        close(fd);
        return COLLI_ERR(NET, COLL_ERR_NETWORK, "cannot listen on %s: bind: %s", a, strerror(e));
    }
    if (listen(fd, SOMAXCONN) != 0) {
        int e = errno;
        close(fd);
        return COLLI_ERR(NET, COLL_ERR_SYSTEM, "listen on %s failed: %s", a, strerror(e));
    }
    socklen_t len = sizeof(*bound);
    memset(bound, 0, sizeof(*bound));
    if (getsockname(fd, (struct sockaddr *)bound, &len) != 0) {
        int e = errno;
        close(fd);
        return COLLI_ERR(NET, COLL_ERR_SYSTEM, "getsockname failed: %s", strerror(e));
    }
    *fd_out = fd;
    return COLL_SUCCESS;
}

int colli_sock_connect_start(const struct sockaddr_storage *to,
                             const struct sockaddr_storage *bind_addr, int *fd_out)
{
    int fd = socket(to->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return COLLI_IO_ERR;
    if (bind_addr != NULL && bind_addr->ss_family == to->ss_family) {
        /* Outgoing connections leave from the pinned interface, not wherever routing says. */
        struct sockaddr_storage b = *bind_addr;
        if (b.ss_family == AF_INET)
            ((struct sockaddr_in *)&b)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)&b)->sin6_port = 0;
        /* The port is chosen at connect, for this destination only: a port bound at bind would
         * be unique among every socket of the address, so a node's ranks, with a link between
         * every two of them per communicator, ran out of the ~28k ephemeral ports (connections
         * closed a minute ago, in TIME_WAIT, count too) at a few hundred communicators: "bind:
         * Address already in use" (the `ports` test). Best effort: kernels before 4.2 lack it. */
        int one = 1;
        (void)setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
        if (bind(fd, (struct sockaddr *)&b, colli_sockaddr_len(&b)) != 0) {
            int e = errno;
            close(fd);
            errno = e;
            return COLLI_IO_ERR;
        }
    }
    colli_sock_tune(fd);
    if (connect(fd, (const struct sockaddr *)to, colli_sockaddr_len(to)) != 0 &&
        errno != EINPROGRESS && errno != EINTR) {
        int e = errno;
        close(fd);
        errno = e;
        return COLLI_IO_ERR;
    }
    *fd_out = fd;
    return COLLI_IO_OK;
}

static int wait_fd(int fd, short events, double deadline)
{
    for (;;) {
        double left = deadline - colli_now();
        if (left <= 0)
            return COLLI_IO_TIMEOUT;
        struct pollfd p = {.fd = fd, .events = events};
        int ms = left > 1.0 ? 1000 : (int)(left * 1000) + 1;
        int r = poll(&p, 1, ms);
        if (r < 0 && errno != EINTR)
            return COLLI_IO_ERR;
        if (r > 0)
            return COLLI_IO_OK;
    }
}

/* How long a peer answered only "no route" (ENETUNREACH, EHOSTUNREACH) before connect stops
 * retrying: long enough for routes that are still being programmed, far shorter than a bootstrap
 * timeout, so that a host on the wrong network learns it in seconds. */
#define UNREACHABLE_BUDGET_S 10.0

static int connect_retry(const struct sockaddr_storage *to,
                         const struct sockaddr_storage *bind_addr, double deadline, bool retry,
                         double refused_s, void (*on_refused)(void *arg), void *arg, int *fd_out)
{
    double backoff = 0.01, unreachable_since = -1, refused_since = -1;
    int last = 0; /* the last real failure (never EINPROGRESS of a connect still under way) */
    for (;;) {
        int fd = -1;
        int r = colli_sock_connect_start(to, bind_addr, &fd);
        int err = r == COLLI_IO_OK ? 0 : errno;
        if (r == COLLI_IO_OK) {
            r = wait_fd(fd, POLLOUT, deadline);
            if (r == COLLI_IO_OK) {
                socklen_t len = sizeof(err);
                if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
                    err = errno;
                if (err == 0) {
                    *fd_out = fd;
                    return COLLI_IO_OK;
                }
                r = COLLI_IO_ERR;
            } else {
                err = r == COLLI_IO_TIMEOUT ? last : errno;
            }
            close(fd);
            if (r == COLLI_IO_TIMEOUT) {
                errno = err;
                return r;
            }
        }
        if (err != 0)
            last = err;
        const bool unreachable = err == ENETUNREACH || err == EHOSTUNREACH;
        if (err != ECONNREFUSED)
            refused_since = -1;
        else if (refused_since < 0)
            refused_since = colli_now();
        if (on_refused != NULL && refused_since >= 0 && colli_now() - refused_since >= refused_s) {
            on_refused(arg);
            on_refused = NULL;
        }
        if (!unreachable)
            unreachable_since = -1;
        else if (unreachable_since < 0)
            unreachable_since = colli_now();
        bool transient = err == ECONNREFUSED || err == EAGAIN || err == ECONNRESET ||
                         err == ETIMEDOUT || err == EINTR || unreachable;
        if (unreachable && colli_now() - unreachable_since >= UNREACHABLE_BUDGET_S) {
            errno = err; /* no route for that long: a wrong network, not a slow peer */
            return COLLI_IO_ERR;
        }
        if (!retry || !transient || colli_now() + backoff >= deadline) {
            errno = err;
            return colli_now() + backoff >= deadline && retry && transient ? COLLI_IO_TIMEOUT
                                                                           : COLLI_IO_ERR;
        }
        struct timespec ts = {0, (long)(backoff * 1e9)};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 0.5 ? 0.5 : backoff * 2;
    }
}

int colli_sock_connect(const struct sockaddr_storage *to, const struct sockaddr_storage *bind_addr,
                       double deadline, bool retry, int *fd_out)
{
    return connect_retry(to, bind_addr, deadline, retry, 0, NULL, NULL, fd_out);
}

int colli_sock_connect_noted(const struct sockaddr_storage *to,
                             const struct sockaddr_storage *bind_addr, double deadline,
                             double refused_s, void (*on_refused)(void *arg), void *arg,
                             int *fd_out)
{
    return connect_retry(to, bind_addr, deadline, true, refused_s, on_refused, arg, fd_out);
}

int colli_sock_write_all(int fd, const void *buf, size_t len, double deadline)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return COLLI_IO_ERR;
        int r = wait_fd(fd, POLLOUT, deadline);
        if (r != COLLI_IO_OK)
            return r;
    }
    return COLLI_IO_OK;
}

int colli_sock_read_all(int fd, void *buf, size_t len, double deadline)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = recv(fd, p, len, 0);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0)
            return COLLI_IO_EOF;
        if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return COLLI_IO_ERR;
        int r = wait_fd(fd, POLLIN, deadline);
        if (r != COLLI_IO_OK)
            return r;
    }
    return COLLI_IO_OK;
}

const char *colli_io_str(int io, int err)
{
    switch (io) {
    case COLLI_IO_OK:
        return "ok";
    case COLLI_IO_EOF:
        return "connection closed by the peer";
    case COLLI_IO_TIMEOUT:
        return "timed out";
    default:
        return strerror(err);
    }
}

coll_result_t colli_sock_resolve(const char *host, int port, struct sockaddr_storage *out,
                                 const char *what, const char *hint)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    char ps[16];
    snprintf(ps, sizeof(ps), "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0 || res == NULL)
        return COLLI_ERR(NET, COLL_ERR_NETWORK, "%s %s:%d does not resolve: %s%s", what, host, port,
                         gai_strerror(rc), hint);
    memset(out, 0, sizeof(*out));
    memcpy(out, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return COLL_SUCCESS;
}
