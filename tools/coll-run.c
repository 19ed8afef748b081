/*
 * coll-run: start N local ranks of a program, each with the environment a kcoll rank needs
 * (COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK, COLL_SOCKET_IFNAME), forward their
 * output line by line with a "[rank R] " prefix, and stop every rank as soon as one fails.
 *
 * coll-run creates the unique id itself, so the bootstrap root thread lives in this process:
 * coll-run stays alive, forwarding output, until every rank has exited.
 *
 * Signals: SIGCHLD, SIGINT and SIGTERM are blocked before the library starts its thread (so only
 * the main thread ever sees them) and are unblocked only inside ppoll(), which makes the event
 * loop free of wake-up races. Every rank runs in its own process group so that a kill reaches
 * the shell pipelines and helpers it started too.
 */
#include <coll.h>

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define EXIT_USAGE        2
#define EXIT_TIMEOUT      124
#define MAX_RANKS         4096
#define LINE_MAX_BYTES    65536 /* a longer line is forwarded in pieces of this size */
#define KILL_GRACE_S      2.0   /* SIGTERM, then SIGKILL after this long */
#define DRAIN_GRACE_S     1.0   /* after the last rank exited, wait this long for its helpers */
#define READ_CHUNK        65536
#define ENV_LOCAL_RANK    "COLL_LOCAL_RANK"
#define ENV_SOCKET_IFNAME "COLL_SOCKET_IFNAME"
#define DEFAULT_IFNAME    "lo"

extern char **environ;

/* One output stream (stdout or stderr) of one rank. */
struct stream {
    int fd;     /* read end of the pipe, -1 once closed */
    int out_fd; /* where its lines go: 1 or 2 */
    size_t len;
    char buf[LINE_MAX_BYTES];
};

struct rank {
    int rank;
    pid_t pid; /* also its process group id */
    bool running;
    bool signalled_by_us; /* coll-run sent it SIGTERM/SIGKILL */
    bool exec_failed;     /* already reported; its exit status 127 says nothing new */
    int status;           /* wait status once reaped */
    char **envp;
    struct stream out, err;
};

struct run {
    int nranks;
    struct rank *ranks;
    char *prog_path;  /* resolved path of the program */
    char **argv;      /* program argv (argv[0] as the user wrote it) */
    double timeout_s; /* 0: none */

    int nrunning;
    bool stopping;    /* termination started: failure, timeout or signal */
    bool killed_hard; /* SIGKILL already sent */
    double kill_at;   /* when to send SIGKILL (monotonic seconds) */
    double deadline;  /* --timeout deadline, 0 when none */
    double drain_until;
    int exit_code;      /* decided by the first event that stops the job */
    bool stdout_broken; /* our stdout is a closed pipe: drop rank stdout */
    bool stderr_broken;
};

static volatile sig_atomic_t got_sigchld;
static volatile sig_atomic_t got_term_signal; /* last SIGINT/SIGTERM received, 0 if none */
static volatile sig_atomic_t term_signal_count;

static void on_signal(int sig)
{
    if (sig == SIGCHLD) {
        got_sigchld = 1;
    } else {
        got_term_signal = sig;
        term_signal_count++;
    }
}

static void msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void msg(const char *fmt, ...)
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

static void close_fd(int fd)
{
    if (fd >= 0 && close(fd) != 0 && errno != EINTR)
        msg("close(%d) failed: %s", fd, strerror(errno));
}

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: coll-run -n N [--ifname SPEC] [--timeout SEC] [--] program [args...]\n"
        "\n"
        "Start N ranks of program on this host. Each rank gets the parent's environment plus\n"
        "COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK and COLL_SOCKET_IFNAME; its\n"
        "stdout and stderr lines are forwarded with a \"[rank R] \" prefix. When a rank fails\n"
        "the others are stopped (SIGTERM, SIGKILL after %.0f s).\n"
        "\n"
        "  -n, --nranks N   number of ranks (1..%d)\n"
        "  --ifname SPEC    interface spec for the bootstrap and the ranks, COLL_SOCKET_IFNAME\n"
        "                   syntax (default: $COLL_SOCKET_IFNAME if set, else \"%s\")\n"
        "  --timeout SEC    stop every rank after SEC seconds and fail (exit %d)\n"
        "  -h, --help       this text\n"
        "\n"
        "Exit status: 0 when every rank exited 0; the first failing rank's exit status (128+N\n"
        "for signal N); %d on timeout; 128+N when coll-run got signal N; %d for bad usage.\n",
        KILL_GRACE_S, MAX_RANKS, DEFAULT_IFNAME, EXIT_TIMEOUT, EXIT_TIMEOUT, EXIT_USAGE);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("coll-run: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n\n", stderr);
    usage(stderr);
    exit(EXIT_USAGE);
}

static double now_s(void)
{
    struct timespec ts;

    /* CLOCK_MONOTONIC cannot fail with a valid pointer; keep the check anyway. */
    if (clock_gettime(CLOCK_MONOTONIC, &ts) != 0) {
        msg("clock_gettime failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static const char *signal_name(int sig, char *buf, size_t len)
{
    const char *abbrev = sigabbrev_np(sig);
    const char *desc = strsignal(sig);

    if (abbrev != NULL)
        snprintf(buf, len, "SIG%s (%s)", abbrev, desc != NULL ? desc : "?");
    else
        snprintf(buf, len, "signal %d", sig);
    return buf;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n, size);

    if (p == NULL) {
        msg("out of memory");
        exit(EXIT_FAILURE);
    }
    return p;
}

static char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0) {
        msg("out of memory");
        exit(EXIT_FAILURE);
    }
    return s;
}

/* ---- argument parsing ---- */

static int parse_nranks(const char *s)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        usage_error("-n: '%s' is not a number", s);
    if (v <= 0)
        usage_error("-n: the number of ranks must be at least 1, got %ld", v);
    if (v > MAX_RANKS)
        usage_error("-n: at most %d ranks, got %ld", MAX_RANKS, v);
    return (int)v;
}

static double parse_timeout(const char *s)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v <= 0)
        usage_error("--timeout: '%s' is not a positive number of seconds", s);
    return v;
}

/* Find program like execvp would; returns a malloc'd path or NULL (errno set). */
static char *resolve_program(const char *prog)
{
    const char *path, *p;
    struct stat st;
    int saved = ENOENT;

    if (strchr(prog, '/') != NULL) {
        if (stat(prog, &st) != 0)
            return NULL;
        if (S_ISDIR(st.st_mode)) {
            errno = EISDIR;
            return NULL;
        }
        if (access(prog, X_OK) != 0)
            return NULL;
        return xasprintf("%s", prog);
    }
    path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    for (p = path;; p++) {
        const char *colon = strchr(p, ':');
        size_t dirlen = colon != NULL ? (size_t)(colon - p) : strlen(p);
        char *cand =
            dirlen == 0 ? xasprintf("./%s", prog) : xasprintf("%.*s/%s", (int)dirlen, p, prog);

        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0)
                return cand;
            saved = EACCES;
        }
        free(cand);
        if (colon == NULL)
            break;
        p = colon;
    }
    errno = saved;
    return NULL;
}

/* ---- child environment ---- */

static bool env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);

    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

/*
 * The parent's environment with this rank's variables replacing any inherited ones. Built here,
 * before fork, because a forked child of a multi-threaded process may not allocate.
 */
static char **build_env(int rank, int nranks, const char *id_str, const char *ifname,
                        bool override_ifname)
{
    size_t n = 0, k = 0;
    char **envp;

    while (environ[n] != NULL)
        n++;
    envp = xcalloc(n + 6, sizeof(*envp));
    for (size_t i = 0; i < n; i++) {
        const char *e = environ[i];

        if (env_is(e, COLL_ENV_UNIQUE_ID) || env_is(e, COLL_ENV_RANK) ||
            env_is(e, COLL_ENV_NRANKS) || env_is(e, ENV_LOCAL_RANK))
            continue;
        if (override_ifname && env_is(e, ENV_SOCKET_IFNAME))
            continue;
        envp[k++] = environ[i];
    }
    envp[k++] = xasprintf("%s=%s", COLL_ENV_UNIQUE_ID, id_str);
    envp[k++] = xasprintf("%s=%d", COLL_ENV_RANK, rank);
    envp[k++] = xasprintf("%s=%d", COLL_ENV_NRANKS, nranks);
    envp[k++] = xasprintf("%s=%d", ENV_LOCAL_RANK, rank);
    if (override_ifname)
        envp[k++] = xasprintf("%s=%s", ENV_SOCKET_IFNAME, ifname);
    envp[k] = NULL;
    return envp;
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
                msg("cannot write to stdout (%s); discarding the ranks' stdout from now on",
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
    int plen = snprintf(prefix, sizeof(prefix), "[rank %d] ", r->rank);
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

static void close_stream(struct run *run, struct rank *r, struct stream *s)
{
    forward_lines(run, r, s, true);
    close_fd(s->fd);
    s->fd = -1;
}

/* Read once (or, with drain, until the pipe is empty) from a rank's stream. */
static void read_stream(struct run *run, struct rank *r, struct stream *s, bool drain)
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
            msg("read from rank %d failed: %s", r->rank, strerror(errno));
            close_stream(run, r, s);
            return;
        }
        if (n == 0) {
            close_stream(run, r, s);
            return;
        }
        s->len += (size_t)n;
        budget -= (size_t)n;
        forward_lines(run, r, s, false);
        if (!drain)
            return;
    }
}

/* ---- stopping ranks ---- */

static void signal_rank(struct rank *r, int sig)
{
    if (!r->running)
        return;
    /* The whole process group: shells and the helpers they started. */
    if (kill(-r->pid, sig) != 0 && kill(r->pid, sig) != 0 && errno != ESRCH)
        msg("cannot send signal %d to rank %d (pid %d): %s", sig, r->rank, (int)r->pid,
            strerror(errno));
    r->signalled_by_us = true;
}

/* Begin stopping every running rank with sig; SIGKILL follows after the grace period. */
static void stop_all(struct run *run, int sig, int exit_code)
{
    if (!run->stopping) {
        run->stopping = true;
        run->exit_code = exit_code;
        run->kill_at = now_s() + KILL_GRACE_S;
    }
    for (int i = 0; i < run->nranks; i++)
        signal_rank(&run->ranks[i], sig);
    if (sig == SIGKILL)
        run->killed_hard = true;
}

static void report_exit(struct run *run, struct rank *r)
{
    char sname[96];
    int st = r->status;

    if (r->exec_failed)
        return;
    if (WIFEXITED(st)) {
        int code = WEXITSTATUS(st);

        if (code == 0)
            return;
        if (!run->stopping) {
            msg("rank %d (pid %d) exited with status %d; stopping the other ranks", r->rank,
                (int)r->pid, code);
            stop_all(run, SIGTERM, code);
        } else {
            msg("rank %d (pid %d) exited with status %d", r->rank, (int)r->pid, code);
        }
    } else if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        const char *core = WCOREDUMP(st) ? ", core dumped" : "";

        signal_name(sig, sname, sizeof(sname));
        if (!run->stopping) {
            msg("rank %d (pid %d) was killed by signal %s%s; stopping the other ranks", r->rank,
                (int)r->pid, sname, core);
            stop_all(run, SIGTERM, 128 + sig);
        } else if (r->signalled_by_us && (sig == SIGTERM || sig == SIGKILL || sig == SIGINT)) {
            msg("rank %d (pid %d) stopped by %s from coll-run", r->rank, (int)r->pid, sname);
        } else {
            msg("rank %d (pid %d) was killed by signal %s%s", r->rank, (int)r->pid, sname, core);
        }
    }
}

static void reap(struct run *run)
{
    for (int i = 0; i < run->nranks; i++) {
        struct rank *r = &run->ranks[i];
        pid_t p;

        if (!r->running)
            continue;
        do {
            p = waitpid(r->pid, &r->status, WNOHANG);
        } while (p < 0 && errno == EINTR);
        if (p == 0)
            continue;
        if (p < 0) {
            msg("waitpid for rank %d (pid %d) failed: %s", r->rank, (int)r->pid, strerror(errno));
            r->status = W_EXITCODE(EXIT_FAILURE, 0);
        }
        r->running = false;
        run->nrunning--;
        /* Forward what it wrote before it exited, so its last words come before our verdict. */
        read_stream(run, r, &r->out, true);
        read_stream(run, r, &r->err, true);
        report_exit(run, r);
    }
    if (run->nrunning == 0)
        run->drain_until = now_s() + DRAIN_GRACE_S;
}

/* ---- starting ranks ---- */

/* A close-on-exec pipe; with nonblock, a read end that never blocks. */
static int open_pipe(int fds[2], bool nonblock)
{
    fds[0] = fds[1] = -1;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    if (nonblock && fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) {
        int saved = errno;

        close_fd(fds[0]);
        close_fd(fds[1]);
        fds[0] = fds[1] = -1;
        errno = saved;
        return -1;
    }
    return 0;
}

/*
 * Runs in the forked child: async-signal-safe calls only. On failure the errno goes to the
 * parent through errpipe (close-on-exec, so a successful exec closes it with nothing written).
 */
static void __attribute__((noreturn))
child_exec(const struct run *run, const struct rank *r, int out_w, int err_w, int errpipe,
           const sigset_t *orig_mask, pid_t parent)
{
    struct sigaction dfl;
    int err, devnull;

    /* If coll-run itself is killed (SIGKILL from ctest or timeout), take the rank with it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        goto fail;
    if (getppid() != parent) {
        errno = ESRCH;
        goto fail;
    }

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    /* Ignored signals stay ignored across exec; the ranks get the default dispositions. */
    if (sigaction(SIGPIPE, &dfl, NULL) != 0 || sigaction(SIGINT, &dfl, NULL) != 0 ||
        sigaction(SIGTERM, &dfl, NULL) != 0 || sigaction(SIGCHLD, &dfl, NULL) != 0)
        goto fail;
    if (setpgid(0, 0) != 0)
        goto fail;
    devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0)
        goto fail;
    if (dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        goto fail;
    if (devnull > 2)
        close(devnull);
    if (sigprocmask(SIG_SETMASK, orig_mask, NULL) != 0)
        goto fail;
    execve(run->prog_path, run->argv, r->envp);
fail:
    err = errno;
    while (write(errpipe, &err, sizeof(err)) < 0 && errno == EINTR)
        ;
    _exit(127);
}

/* Returns 0, or the errno of a failed exec / -1 for a failed fork (message already printed). */
static int start_rank(struct run *run, struct rank *r, const sigset_t *orig_mask)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2] = {-1, -1};
    int child_err = 0;
    pid_t parent = getpid();
    ssize_t n;
    pid_t pid;

    if (open_pipe(outp, true) != 0 || open_pipe(errp, true) != 0 || open_pipe(ep, false) != 0) {
        msg("cannot create pipes for rank %d: %s (raise the open-files limit, ulimit -n)", r->rank,
            strerror(errno));
        goto err_close;
    }
    pid = fork();
    if (pid < 0) {
        msg("fork for rank %d failed: %s", r->rank, strerror(errno));
        goto err_close;
    }
    if (pid == 0)
        child_exec(run, r, outp[1], errp[1], ep[1], orig_mask, parent);

    /* Also from the parent, so that a kill of the group cannot race the child's setpgid. */
    if (setpgid(pid, pid) != 0 && errno != EACCES && errno != ESRCH)
        msg("setpgid for rank %d failed: %s", r->rank, strerror(errno));
    r->pid = pid;
    r->running = true;
    run->nrunning++;
    r->out.fd = outp[0];
    r->out.out_fd = 1;
    r->err.fd = errp[0];
    r->err.out_fd = 2;
    close_fd(outp[1]);
    close_fd(errp[1]);
    close_fd(ep[1]);
    do {
        n = read(ep[0], &child_err, sizeof(child_err));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        msg("reading rank %d's exec status failed: %s", r->rank, strerror(errno));
        child_err = EIO;
    }
    close_fd(ep[0]);
    if (n > 0) {
        r->exec_failed = true;
        return child_err != 0 ? child_err : EIO;
    }
    return 0;

err_close:
    for (int k = 0; k < 2; k++) {
        close_fd(outp[k]);
        close_fd(errp[k]);
        close_fd(ep[k]);
    }
    return -1;
}

/* ---- main ---- */

static void check_fd_limit(int nranks)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)nranks * 2 + 64;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        msg("getrlimit(RLIMIT_NOFILE) failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        msg("%d ranks need about %lu open files but the hard limit is %lu; raise it (ulimit -Hn)",
            nranks, (unsigned long)need, (unsigned long)rl.rlim_max);
        exit(EXIT_FAILURE);
    }
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        msg("cannot raise the open-files limit to %lu: %s", (unsigned long)need, strerror(errno));
        exit(EXIT_FAILURE);
    }
}

static void install_handlers(sigset_t *orig_mask)
{
    struct sigaction sa;
    sigset_t block;

    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &block, orig_mask) != 0) {
        msg("sigprocmask failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0 ||
        sigaction(SIGTERM, &sa, NULL) != 0) {
        msg("sigaction failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    /* A closed stdout must not kill coll-run (and with it the bootstrap root). */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPIPE, &sa, NULL) != 0) {
        msg("sigaction failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
}

static void handle_events(struct run *run)
{
    char sname[96];

    if (got_sigchld) {
        got_sigchld = 0;
        reap(run);
    }
    if (got_term_signal != 0) {
        int sig = got_term_signal;

        got_term_signal = 0;
        signal_name(sig, sname, sizeof(sname));
        if (run->nrunning > 0 && (term_signal_count > 1 || run->killed_hard)) {
            msg("got %s again; killing the ranks with SIGKILL", sname);
            stop_all(run, SIGKILL, 128 + sig);
        } else if (run->nrunning > 0) {
            msg("got %s; forwarding it to %d running rank(s)", sname, run->nrunning);
            stop_all(run, sig, 128 + sig);
        } else if (!run->stopping) {
            run->stopping = true;
            run->exit_code = 128 + sig;
        }
    }
    if (run->deadline > 0 && !run->stopping && run->nrunning > 0 && now_s() >= run->deadline) {
        msg("timeout: %g s passed with %d rank(s) still running; stopping them", run->timeout_s,
            run->nrunning);
        for (int i = 0; i < run->nranks; i++)
            if (run->ranks[i].running)
                msg("  rank %d (pid %d) was still running", i, (int)run->ranks[i].pid);
        stop_all(run, SIGTERM, EXIT_TIMEOUT);
    }
    if (run->stopping && !run->killed_hard && run->nrunning > 0 && now_s() >= run->kill_at) {
        msg("%d rank(s) still running %.0f s after SIGTERM; sending SIGKILL", run->nrunning,
            KILL_GRACE_S);
        stop_all(run, SIGKILL, run->exit_code);
    }
}

/* Milliseconds until the next timed event, -1 for none. */
static int next_timeout_ms(const struct run *run)
{
    double next = 0, t = now_s();
    double ms;

    if (run->nrunning == 0)
        next = run->drain_until;
    else if (run->stopping && !run->killed_hard)
        next = run->kill_at;
    else if (!run->stopping && run->deadline > 0)
        next = run->deadline;
    if (next == 0)
        return -1;
    ms = (next - t) * 1000.0 + 1.0;
    if (ms < 0)
        return 0;
    if (ms > INT_MAX)
        return INT_MAX;
    return (int)ms;
}

static void event_loop(struct run *run, const sigset_t *orig_mask)
{
    struct pollfd *pfds = xcalloc((size_t)run->nranks * 2, sizeof(*pfds));
    struct stream **owners = xcalloc((size_t)run->nranks * 2, sizeof(*owners));
    struct rank **owner_ranks = xcalloc((size_t)run->nranks * 2, sizeof(*owner_ranks));

    for (;;) {
        nfds_t n = 0;
        int ms, rc;

        handle_events(run);
        if (run->nrunning == 0 && now_s() >= run->drain_until)
            break;
        for (int i = 0; i < run->nranks; i++) {
            struct rank *r = &run->ranks[i];
            struct stream *ss[2] = {&r->out, &r->err};

            for (int k = 0; k < 2; k++) {
                if (ss[k]->fd < 0)
                    continue;
                pfds[n].fd = ss[k]->fd;
                pfds[n].events = POLLIN;
                pfds[n].revents = 0;
                owners[n] = ss[k];
                owner_ranks[n] = r;
                n++;
            }
        }
        if (n == 0 && run->nrunning == 0)
            break;
        ms = next_timeout_ms(run);
        if (ms >= 0) {
            struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

            rc = ppoll(pfds, n, &ts, orig_mask);
        } else {
            rc = ppoll(pfds, n, NULL, orig_mask);
        }
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            msg("poll failed: %s; killing the ranks", strerror(errno));
            stop_all(run, SIGKILL, EXIT_FAILURE);
            continue;
        }
        for (nfds_t j = 0; j < n; j++) {
            if (pfds[j].revents & (POLLIN | POLLHUP | POLLERR))
                read_stream(run, owner_ranks[j], owners[j], false);
            else if (pfds[j].revents & POLLNVAL)
                owners[j]->fd = -1;
        }
    }
    /* Helpers of exited ranks may still hold a pipe open: forward what we have and stop. */
    for (int i = 0; i < run->nranks; i++) {
        struct rank *r = &run->ranks[i];

        if (r->out.fd >= 0)
            close_stream(run, r, &r->out);
        if (r->err.fd >= 0)
            close_stream(run, r, &r->err);
    }
    free(pfds);
    free(owners);
    free(owner_ranks);
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"ifname", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct run run;
    const char *ifname = NULL;
    bool override_ifname;
    coll_unique_id_t id;
    char id_str[COLL_UNIQUE_ID_STRLEN];
    coll_result_t res;
    sigset_t orig_mask;
    int opt;

    memset(&run, 0, sizeof(run));
    opterr = 0;
    /* "+": stop at the first non-option, so the program's own options stay its own; ":" makes
     * a missing value report ':'. */
    while ((opt = getopt_long(argc, argv, "+:n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            run.nranks = parse_nranks(optarg);
            break;
        case 'i':
            if (*optarg == '\0')
                usage_error("--ifname: empty interface spec");
            ifname = optarg;
            break;
        case 't':
            run.timeout_s = parse_timeout(optarg);
            break;
        case 'h':
            usage(stdout);
            return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
        case ':':
            usage_error("option %s needs a value", argv[optind - 1]);
        default:
            if (optopt != 0)
                usage_error("unknown option -%c", optopt);
            usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    if (run.nranks == 0)
        usage_error("missing -n N (the number of ranks)");
    if (optind >= argc)
        usage_error("missing the program to run");
    run.argv = &argv[optind];
    run.prog_path = resolve_program(run.argv[0]);
    if (run.prog_path == NULL)
        usage_error("program '%s' %s: %s", run.argv[0],
                    strchr(run.argv[0], '/') != NULL ? "cannot be run" : "not found in PATH",
                    strerror(errno));

    /* An explicit --ifname wins over the environment; otherwise the user's setting is kept. */
    override_ifname = ifname != NULL || getenv(ENV_SOCKET_IFNAME) == NULL;
    if (ifname == NULL)
        ifname = override_ifname ? DEFAULT_IFNAME : getenv(ENV_SOCKET_IFNAME);

    check_fd_limit(run.nranks);
    /* Before the library starts its bootstrap thread, so that the thread inherits the mask. */
    install_handlers(&orig_mask);

    res = coll_get_unique_id_ifname(&id, ifname);
    if (res != COLL_SUCCESS) {
        msg("cannot create a unique id on interface spec '%s': %s: %s", ifname,
            coll_get_error_string(res), coll_get_last_error());
        return EXIT_FAILURE;
    }
    res = coll_unique_id_to_string(&id, id_str, sizeof(id_str));
    if (res != COLL_SUCCESS) {
        msg("cannot format the unique id: %s: %s", coll_get_error_string(res),
            coll_get_last_error());
        return EXIT_FAILURE;
    }

    run.ranks = xcalloc((size_t)run.nranks, sizeof(*run.ranks));
    for (int i = 0; i < run.nranks; i++) {
        run.ranks[i].rank = i;
        run.ranks[i].out.fd = -1;
        run.ranks[i].err.fd = -1;
        run.ranks[i].envp = build_env(i, run.nranks, id_str, ifname, override_ifname);
    }
    if (run.timeout_s > 0)
        run.deadline = now_s() + run.timeout_s;

    for (int i = 0; i < run.nranks; i++) {
        int err = start_rank(&run, &run.ranks[i], &orig_mask);

        if (err != 0) {
            if (err > 0)
                msg("cannot execute '%s' for rank %d: %s", run.prog_path, i, strerror(err));
            /* Ranks already started would wait for the missing one until their timeout. */
            stop_all(&run, SIGTERM, err > 0 ? EXIT_USAGE : EXIT_FAILURE);
            break;
        }
    }

    event_loop(&run, &orig_mask);

    if (!run.stopping) {
        /* Normal end: every rank exited on its own; a non-zero status would have stopped us. */
        run.exit_code = EXIT_SUCCESS;
    }
    for (int i = 0; i < run.nranks; i++) {
        char **e = run.ranks[i].envp;
        size_t n = 0;

        while (e[n] != NULL)
            n++;
        for (size_t k = n - (override_ifname ? 5 : 4); k < n; k++)
            free(e[k]);
        free(e);
    }
    free(run.ranks);
    free(run.prog_path);
    if (fflush(stdout) != 0 && !run.stdout_broken)
        msg("cannot flush stdout: %s", strerror(errno));
    return run.exit_code;
}
