/*
 * coll-run's messages ("coll-run: ..." on stderr), small helpers that exit on failure, and the
 * forwarding of every rank's (and agent's) output line by line with a "[rank R] " or
 * "[agent R] " prefix.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "coll_run.h"

void run_msg(const char *fmt, ...)
{
    va_list ap;
    char line[1024];
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = sizeof(line) - 1;
    /* Best effort: there is nowhere else to report a failing stderr. */
    if (fprintf(stderr, "coll-run: %.*s\n", n, line) < 0)
        return;
}

void run_close_fd(int fd)
{
    if (fd >= 0 && close(fd) != 0 && errno != EINTR)
        run_msg("close(%d) failed: %s", fd, strerror(errno));
}

double run_now_s(void)
{
    struct timespec ts;

    /* CLOCK_MONOTONIC cannot fail with a valid pointer; keep the check anyway. */
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        run_msg("clock_gettime failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

const char *run_signal_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    const char *desc = strsignal(sig);

    if (abbrev != NULL)
        snprintf(buf, len, "SIG%s (%s)", abbrev, desc != NULL ? desc : "?");
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}

void *run_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);

    if (p == NULL) {
        run_msg("out of memory");
        exit(EXIT_FAILURE);
    }
    return p;
}

char *run_xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) {
        run_msg("out of memory");
        exit(EXIT_FAILURE);
    }
    return s;
}

/* ---- output forwarding ---- */

static bool *broken_flag(struct run *run, int out_fd)
{
    return out_fd == 1 ? &run->stdout_broken : &run->stderr_broken;
}

static void write_all(struct run *run, int out_fd, struct iovec *iov, int iovcnt)
{
    bool *broken = broken_flag(run, out_fd);

    while (!*broken && iovcnt > 0) {
        ssize_t w = writev(out_fd, iov, iovcnt);

        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) {
                /* Our stdout was made non-blocking by someone else: wait until it drains. */
                struct pollfd pfd = {.fd = out_fd, .events = POLLOUT};

                if (poll(&pfd, 1, -1) < 0 && errno != EINTR)
                    *broken = true;
                continue;
            }
            /* EPIPE and friends: the reader is gone; keep running the job, drop output. */
            *broken = true;
            if (out_fd == 1)
                run_msg("cannot write to stdout (%s); discarding the ranks' stdout from now on",
                        strerror(errno));
            return;
        }
        while (iovcnt > 0 && (size_t)w >= iov->iov_len) {
            w -= (ssize_t)iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + w;
            iov->iov_len -= (size_t)w;
        }
    }
}

static void emit_line(struct run *run, const struct rank *r, const struct stream *s,
                      const char *line, size_t len)
{
    char prefix[32];
    int plen =
        snprintf(prefix, sizeof(prefix), "[%s %d] ", r->is_agent ? "agent" : "rank", r->rank);
    struct iovec iov[3] = {
        {.iov_base = prefix, .iov_len = (size_t)plen},
        {.iov_base = (void *)line, .iov_len = len},
        {.iov_base = "\n", .iov_len = 1},
    };

    write_all(run, s->out_fd, iov, 3);
}

/* Forward every complete line in the buffer; with flush, the partial last line too. */
static void forward_lines(struct run *run, const struct rank *r, struct stream *s, bool flush)
{
    size_t start = 0;

    for (;;) {
        char *nl = memchr(s->buf + start, '\n', s->len - start);

        if (nl == NULL)
            break;
        emit_line(run, r, s, s->buf + start, (size_t)(nl - (s->buf + start)));
        start = (size_t)(nl - s->buf) + 1;
    }
    if (start > 0) {
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
    }
    if (s->len == sizeof(s->buf) || (flush && s->len > 0)) {
        emit_line(run, r, s, s->buf, s->len);
        s->len = 0;
    }
}

void run_close_stream(struct run *run, struct rank *r, struct stream *s)
{
    forward_lines(run, r, s, true);
    run_close_fd(s->fd);
    s->fd = -1;
}

/* Read once (or, with drain, until the pipe is empty) from a rank's stream. */
void run_read_stream(struct run *run, struct rank *r, struct stream *s, bool drain)
{
    size_t budget = drain ? 16u * READ_CHUNK : READ_CHUNK;

    while (s->fd >= 0 && budget > 0) {
        size_t room = sizeof(s->buf) - s->len;
        ssize_t n;

        if (room > budget)
            room = budget;
        n = read(s->fd, s->buf + s->len, room);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            run_msg("read from %s %d failed: %s", r->is_agent ? "agent" : "rank", r->rank,
                    strerror(errno));
            run_close_stream(run, r, s);
            return;
        }
        if (n == 0) {
            run_close_stream(run, r, s);
            return;
        }
        s->len += (size_t)n;
        budget -= (size_t)n;
        forward_lines(run, r, s, false);
        if (!drain)
            return;
    }
}
