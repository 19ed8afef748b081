/*
 * coll-run: start N local ranks of a program, each with the environment a kcoll rank needs
 * (COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK, COLL_SOCKET_IFNAME), forward their
 * output line by line with a "[rank R] " prefix, and stop every rank as soon as one fails.
 *
 * coll-run creates the unique id itself, so the bootstrap root thread lives in this process:
 * coll-run stays alive, forwarding output, until every rank has exited.
 *
 * With --agent, coll-run serves each rank the way a pod's kcoll sidecar would: it writes a
 * standalone topology (a free root port, a fresh random secret, the interface, the pinned library
 * version) into a private temporary directory, starts one `coll-agent --topology` per rank, waits
 * until every agent's socket exists and then starts the ranks with COLL_AGENT_SOCKET instead of
 * COLL_UNIQUE_ID (the ranks call coll_comm_init_agent; rank 0 hosts the bootstrap root). The
 * agents' output is forwarded with an "[agent R] " prefix; they are stopped (SIGTERM, then
 * SIGKILL) and the directory is removed once the ranks are done.
 *
 * Signals: SIGCHLD, SIGINT and SIGTERM are blocked before the library starts its thread (so only
 * the main thread ever sees them) and are unblocked only inside ppoll(), which makes the event
 * loop free of wake-up races. Every rank runs in its own process group so that a kill reaches
 * the shell pipelines and helpers it started too.
 */
#include <coll.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
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
#define ENV_AGENT_SOCKET  "COLL_AGENT_SOCKET"
#define ENV_BOOT_TIMEOUT  "COLL_BOOTSTRAP_TIMEOUT"
#define ENV_TIMEOUT       "COLL_TIMEOUT"
#define AGENT_NAME        "coll-agent"
#define AGENT_START_S     30.0 /* every agent's socket must exist within this long */
#define AGENT_POLL_MS     20   /* how often to look for the sockets meanwhile */
#define DEFAULT_BOOT_S    120  /* the library's defaults, pinned unless the environment says */
#define DEFAULT_TIMEOUT_S 300

extern char **environ;

/* One output stream (stdout or stderr) of one rank. */
struct stream {
    int fd;     /* read end of the pipe, -1 once closed */
    int out_fd; /* where its lines go: 1 or 2 */
    size_t len;
    char buf[LINE_MAX_BYTES];
};

/* A rank, or (with --agent) the coll-agent that serves it. */
struct rank {
    int rank;
    bool is_agent;
    pid_t pid; /* also its process group id */
    bool running;
    bool signalled_by_us; /* coll-run sent it SIGTERM/SIGKILL */
    bool exec_failed;     /* already reported; its exit status 127 says nothing new */
    int status;           /* wait status once reaped */
    char **envp;
    char **argv;     /* agents only: their own command line */
    char *sock_path; /* agents only: the socket the rank is given */
    struct stream out, err;
};

struct run {
    int nranks;
    int nprocs;         /* nranks, plus nranks agents with --agent */
    struct rank *ranks; /* ranks[0..nranks), then the agents: ranks[nranks + r] serves rank r */
    char *prog_path;    /* resolved path of the program */
    char **argv;        /* program argv (argv[0] as the user wrote it) */
    double timeout_s;   /* 0: none */

    int nrunning;
    bool stopping;    /* termination started: failure, timeout or signal */
    bool killed_hard; /* SIGKILL already sent */
    double kill_at;   /* when to send SIGKILL (monotonic seconds) */
    double deadline;  /* --timeout deadline, 0 when none */
    double drain_until;
    int exit_code;      /* decided by the first event that stops the job */
    bool stdout_broken; /* our stdout is a closed pipe: drop rank stdout */
    bool stderr_broken;

    /* --agent */
    bool agent_mode;
    char *agent_path; /* resolved coll-agent */
    char *tmp_dir;    /* topology and sockets, removed at the end */
    char *topo_path;
    bool ranks_launched;
    int nagents_running;
    bool agents_stopping; /* SIGTERM sent to the agents */
    bool agents_killed_hard;
    double agents_kill_at;
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
        "usage: coll-run -n N [--ifname SPEC] [--timeout SEC] [--agent[=PATH] [--pin-version V]]\n"
        "                [--] program [args...]\n"
        "\n"
        "Start N ranks of program on this host. Each rank gets the parent's environment plus\n"
        "COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK and COLL_SOCKET_IFNAME; its\n"
        "stdout and stderr lines are forwarded with a \"[rank R] \" prefix. When a rank fails\n"
        "the others are stopped (SIGTERM, SIGKILL after %.0f s).\n"
        "\n"
        "  -n, --nranks N     number of ranks (1..%d)\n"
        "  --ifname SPEC      interface spec for the bootstrap and the ranks, COLL_SOCKET_IFNAME\n"
        "                     syntax (default: $COLL_SOCKET_IFNAME if set, else \"%s\")\n"
        "  --timeout SEC      stop every rank after SEC seconds and fail (exit %d)\n"
        "  --agent[=PATH]     serve every rank from its own coll-agent in standalone mode, as a\n"
        "                     pod's kcoll sidecar would: the ranks get COLL_AGENT_SOCKET (and\n"
        "                     COLL_LOCAL_RANK) instead of COLL_UNIQUE_ID/COLL_RANK/COLL_NRANKS "
        "and\n"
        "                     create their communicator with coll_comm_init_agent. PATH defaults\n"
        "                     to coll-agent next to coll-run, then ../k8s-agent/coll-agent (the\n"
        "                     build tree), then PATH. The agents' output is prefixed \"[agent R] "
        "\"\n"
        "  --pin-version V    with --agent: the libraryVersion the topology pins (default: this\n"
        "                     coll-run's library, %s; \"\" pins none)\n"
        "  -h, --help         this text\n"
        "\n"
        "Exit status: 0 when every rank exited 0; the first failing rank's exit status (128+N\n"
        "for signal N); %d on timeout; 128+N when coll-run got signal N; %d for bad usage;\n"
        "1 when the agents cannot be started.\n",
        KILL_GRACE_S, MAX_RANKS, DEFAULT_IFNAME, EXIT_TIMEOUT, coll_get_version_string(),
        EXIT_TIMEOUT, EXIT_USAGE);
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

static bool env_is_any(const char *entry, const char *const *names)
{
    for (; *names != NULL; names++)
        if (env_is(entry, *names))
            return true;
    return false;
}

/*
 * The parent's environment without the variables named in drop, plus the nadd entries of add
 * (taken over: freed with the rest by free_env). Built here, before fork, because a forked child
 * of a multi-threaded process may not allocate.
 */
static char **make_env(const char *const *drop, char **add, size_t nadd)
{
    size_t n = 0, k = 0;
    char **envp;

    while (environ[n] != NULL)
        n++;
    envp = xcalloc(n + nadd + 2, sizeof(*envp));
    /* envp[0] holds the number of owned entries at the end, hidden before the array proper. */
    envp[k++] = (char *)(uintptr_t)nadd;
    for (size_t i = 0; i < n; i++)
        if (!env_is_any(environ[i], drop))
            envp[k++] = environ[i];
    for (size_t i = 0; i < nadd; i++)
        envp[k++] = add[i];
    envp[k] = NULL;
    return envp + 1;
}

static void free_env(char **envp)
{
    size_t n = 0, own;

    if (envp == NULL)
        return;
    own = (size_t)(uintptr_t)envp[-1];
    while (envp[n] != NULL)
        n++;
    for (size_t k = n - own; k < n; k++)
        free(envp[k]);
    free(envp - 1);
}

/* A rank's environment: its variables replace any inherited ones. A user's COLL_SOCKET_IFNAME is
 * kept unless --ifname (or the default) replaces it. */
static char **build_env(int rank, int nranks, const char *id_str, const char *ifname,
                        bool override_ifname)
{
    static const char *const drop[] = {COLL_ENV_UNIQUE_ID, COLL_ENV_RANK,     COLL_ENV_NRANKS,
                                       ENV_LOCAL_RANK,     ENV_SOCKET_IFNAME, NULL};
    static const char *const drop_keep_ifname[] = {COLL_ENV_UNIQUE_ID, COLL_ENV_RANK,
                                                   COLL_ENV_NRANKS, ENV_LOCAL_RANK, NULL};
    char *add[5];
    size_t nadd = 0;

    add[nadd++] = xasprintf("%s=%s", COLL_ENV_UNIQUE_ID, id_str);
    add[nadd++] = xasprintf("%s=%d", COLL_ENV_RANK, rank);
    add[nadd++] = xasprintf("%s=%d", COLL_ENV_NRANKS, nranks);
    add[nadd++] = xasprintf("%s=%d", ENV_LOCAL_RANK, rank);
    if (override_ifname)
        add[nadd++] = xasprintf("%s=%s", ENV_SOCKET_IFNAME, ifname);
    return make_env(override_ifname ? drop : drop_keep_ifname, add, nadd);
}

/* With --agent: the rank learns rank, world size and root from its agent, as in a pod. */
static char **build_agent_rank_env(int rank, const char *sock_path)
{
    static const char *const drop[] = {COLL_ENV_UNIQUE_ID, COLL_ENV_RANK,    COLL_ENV_NRANKS,
                                       ENV_LOCAL_RANK,     ENV_AGENT_SOCKET, NULL};
    char *add[2];

    add[0] = xasprintf("%s=%s", ENV_AGENT_SOCKET, sock_path);
    add[1] = xasprintf("%s=%d", ENV_LOCAL_RANK, rank);
    return make_env(drop, add, 2);
}

/* The agents: no library copy (that is for pods), rank and socket come from the command line. */
static char **build_agent_env(void)
{
    static const char *const drop[] = {"COLL_AGENT_LIB_DIR", COLL_ENV_RANK, ENV_AGENT_SOCKET, NULL};

    return make_env(drop, NULL, 0);
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
            msg("read from %s %d failed: %s", r->is_agent ? "agent" : "rank", r->rank,
                strerror(errno));
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
        msg("cannot send signal %d to %s %d (pid %d): %s", sig, r->is_agent ? "agent" : "rank",
            r->rank, (int)r->pid, strerror(errno));
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

/* Stop the agents (SIGTERM, SIGKILL after the grace period); they served their ranks. */
static void stop_agents(struct run *run, int sig)
{
    if (!run->agents_stopping) {
        run->agents_stopping = true;
        run->agents_kill_at = now_s() + KILL_GRACE_S;
    }
    for (int i = run->nranks; i < run->nprocs; i++)
        signal_rank(&run->ranks[i], sig);
    if (sig == SIGKILL)
        run->agents_killed_hard = true;
}

static void report_agent_exit(struct run *run, struct rank *a)
{
    char sname[96], how[160];
    int st = a->status;

    if (a->exec_failed)
        return;
    if (WIFEXITED(st))
        snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(how, sizeof(how), "was killed by signal %s",
                 signal_name(WTERMSIG(st), sname, sizeof(sname)));
    else
        snprintf(how, sizeof(how), "ended (wait status 0x%x)", (unsigned)st);
    if (run->agents_stopping) {
        /* Stopped by us: only an unclean end is worth a line. */
        if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
            msg("agent %d (pid %d) %s", a->rank, (int)a->pid, how);
        return;
    }
    if (!run->ranks_launched) {
        /* Its rank could never start: fail the job now rather than at the deadline. */
        msg("agent %d (pid %d) %s before its rank started (its output is above, prefixed "
            "\"[agent %d] \"); stopping",
            a->rank, (int)a->pid, how, a->rank);
        if (!run->stopping) {
            run->stopping = true;
            run->exit_code = EXIT_FAILURE;
        }
        return;
    }
    /* Like a sidecar that went away: a rank that still needs it fails and is named. */
    msg("agent %d (pid %d) %s while the ranks were running", a->rank, (int)a->pid, how);
}

static void report_exit(struct run *run, struct rank *r)
{
    char sname[96];
    int st = r->status;

    if (r->is_agent) {
        report_agent_exit(run, r);
        return;
    }
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
    for (int i = 0; i < run->nprocs; i++) {
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
            msg("waitpid for %s %d (pid %d) failed: %s", r->is_agent ? "agent" : "rank", r->rank,
                (int)r->pid, strerror(errno));
            r->status = W_EXITCODE(EXIT_FAILURE, 0);
        }
        r->running = false;
        if (r->is_agent)
            run->nagents_running--;
        else
            run->nrunning--;
        /* Forward what it wrote before it exited, so its last words come before our verdict. */
        read_stream(run, r, &r->out, true);
        read_stream(run, r, &r->err, true);
        report_exit(run, r);
    }
    if (run->nrunning == 0 && run->nagents_running == 0)
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
    if (r->is_agent)
        execve(run->agent_path, r->argv, r->envp);
    else
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
        msg("cannot create pipes for %s %d: %s (raise the open-files limit, ulimit -n)",
            r->is_agent ? "agent" : "rank", r->rank, strerror(errno));
        goto err_close;
    }
    pid = fork();
    if (pid < 0) {
        msg("fork for %s %d failed: %s", r->is_agent ? "agent" : "rank", r->rank, strerror(errno));
        goto err_close;
    }
    if (pid == 0)
        child_exec(run, r, outp[1], errp[1], ep[1], orig_mask, parent);

    /* Also from the parent, so that a kill of the group cannot race the child's setpgid. */
    if (setpgid(pid, pid) != 0 && errno != EACCES && errno != ESRCH)
        msg("setpgid for %s %d failed: %s", r->is_agent ? "agent" : "rank", r->rank,
            strerror(errno));
    r->pid = pid;
    r->running = true;
    if (r->is_agent)
        run->nagents_running++;
    else
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
        msg("reading %s %d's exec status failed: %s", r->is_agent ? "agent" : "rank", r->rank,
            strerror(errno));
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

static void check_fd_limit(int nprocs)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)nprocs * 2 + 64;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        msg("getrlimit(RLIMIT_NOFILE) failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        msg("%d processes need about %lu open files but the hard limit is %lu; raise it "
            "(ulimit -Hn)",
            nprocs, (unsigned long)need, (unsigned long)rl.rlim_max);
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

/* Which part of the job the event loop runs. */
enum phase {
    PHASE_AGENTS, /* --agent: the agents are starting; the ranks are not yet */
    PHASE_RUN,    /* the ranks run (and then the agents are stopped) */
};

static void handle_events(struct run *run, enum phase phase)
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
        } else {
            if (!run->stopping) {
                run->stopping = true;
                run->exit_code = 128 + sig;
            }
            if (run->nagents_running > 0 && run->agents_stopping && !run->agents_killed_hard) {
                msg("got %s; killing the agents with SIGKILL", sname);
                stop_agents(run, SIGKILL);
            }
        }
    }
    if (run->deadline > 0 && !run->stopping && now_s() >= run->deadline) {
        if (phase == PHASE_AGENTS) {
            msg("timeout: %g s passed while the agents were starting; stopping them",
                run->timeout_s);
            run->stopping = true;
            run->exit_code = EXIT_TIMEOUT;
        } else if (run->nrunning > 0) {
            msg("timeout: %g s passed with %d rank(s) still running; stopping them", run->timeout_s,
                run->nrunning);
            for (int i = 0; i < run->nranks; i++)
                if (run->ranks[i].running)
                    msg("  rank %d (pid %d) was still running", i, (int)run->ranks[i].pid);
            stop_all(run, SIGTERM, EXIT_TIMEOUT);
        }
    }
    if (run->stopping && !run->killed_hard && run->nrunning > 0 && now_s() >= run->kill_at) {
        msg("%d rank(s) still running %.0f s after SIGTERM; sending SIGKILL", run->nrunning,
            KILL_GRACE_S);
        stop_all(run, SIGKILL, run->exit_code);
    }
    /* The agents outlive their ranks, as a sidecar does, and are stopped once the ranks are
     * gone (or never start). */
    if (phase == PHASE_RUN && run->nagents_running > 0 && run->nrunning == 0 &&
        !run->agents_stopping)
        stop_agents(run, SIGTERM);
    if (run->agents_stopping && !run->agents_killed_hard && run->nagents_running > 0 &&
        now_s() >= run->agents_kill_at) {
        msg("%d agent(s) still running %.0f s after SIGTERM; sending SIGKILL", run->nagents_running,
            KILL_GRACE_S);
        stop_agents(run, SIGKILL);
    }
}

/* Milliseconds until the next timed event, -1 for none. */
static int next_timeout_ms(const struct run *run, enum phase phase)
{
    double next = 0, t = now_s();
    double ms;

#define CONSIDER(when)                                                                             \
    do {                                                                                           \
        double w_ = (when);                                                                        \
        if (w_ > 0 && (next == 0 || w_ < next))                                                    \
            next = w_;                                                                             \
    } while (0)
    if (run->nrunning == 0 && run->nagents_running == 0)
        CONSIDER(run->drain_until);
    else if (run->stopping && !run->killed_hard && run->nrunning > 0)
        CONSIDER(run->kill_at);
    else if (!run->stopping && run->deadline > 0)
        CONSIDER(run->deadline);
    if (run->agents_stopping && !run->agents_killed_hard && run->nagents_running > 0)
        CONSIDER(run->agents_kill_at);
    if (phase == PHASE_AGENTS)
        CONSIDER(t + AGENT_POLL_MS / 1000.0);
#undef CONSIDER
    if (next == 0)
        return -1;
    ms = (next - t) * 1000.0 + 1.0;
    if (ms < 0)
        return 0;
    if (ms > INT_MAX)
        return INT_MAX;
    return (int)ms;
}

/* --agent: true once every agent's socket exists. */
static bool agent_sockets_ready(struct run *run)
{
    for (int i = run->nranks; i < run->nprocs; i++) {
        struct stat st;

        if (stat(run->ranks[i].sock_path, &st) != 0 || !S_ISSOCK(st.st_mode))
            return false;
    }
    return true;
}

/*
 * Forward output and handle signals and exits. PHASE_AGENTS returns when every agent's socket
 * exists, or the job is stopping (an agent died, a signal, --timeout, the start deadline);
 * PHASE_RUN returns when every process has exited and its output is forwarded.
 */
static void event_loop(struct run *run, const sigset_t *orig_mask, enum phase phase)
{
    struct pollfd *pfds = xcalloc((size_t)run->nprocs * 2, sizeof(*pfds));
    struct stream **owners = xcalloc((size_t)run->nprocs * 2, sizeof(*owners));
    struct rank **owner_ranks = xcalloc((size_t)run->nprocs * 2, sizeof(*owner_ranks));
    double agents_deadline = now_s() + AGENT_START_S;

    for (;;) {
        nfds_t n = 0;
        int ms, rc;

        handle_events(run, phase);
        if (phase == PHASE_AGENTS) {
            if (run->stopping || agent_sockets_ready(run))
                break;
            if (now_s() >= agents_deadline) {
                for (int i = run->nranks; i < run->nprocs; i++) {
                    struct stat st;
                    const struct rank *a = &run->ranks[i];

                    if (stat(a->sock_path, &st) != 0 || !S_ISSOCK(st.st_mode))
                        msg("agent %d (pid %d) has not opened its socket %s after %.0f s", a->rank,
                            (int)a->pid, a->sock_path, AGENT_START_S);
                }
                msg("the agents did not start; stopping (their output is above, prefixed "
                    "\"[agent R] \")");
                run->stopping = true;
                run->exit_code = EXIT_FAILURE;
                break;
            }
        } else if (run->nrunning == 0 && run->nagents_running == 0 && now_s() >= run->drain_until) {
            break;
        }
        for (int i = 0; i < run->nprocs; i++) {
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
        if (phase == PHASE_RUN && n == 0 && run->nrunning == 0 && run->nagents_running == 0)
            break;
        ms = next_timeout_ms(run, phase);
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
            if (run->nagents_running > 0)
                stop_agents(run, SIGKILL);
            continue;
        }
        for (nfds_t j = 0; j < n; j++) {
            if (pfds[j].revents & (POLLIN | POLLHUP | POLLERR))
                read_stream(run, owner_ranks[j], owners[j], false);
            else if (pfds[j].revents & POLLNVAL)
                owners[j]->fd = -1;
        }
    }
    if (phase == PHASE_RUN) {
        /* Helpers of exited ranks may still hold a pipe open: forward what we have and stop. */
        for (int i = 0; i < run->nprocs; i++) {
            struct rank *r = &run->ranks[i];

            if (r->out.fd >= 0)
                close_stream(run, r, &r->out);
            if (r->err.fd >= 0)
                close_stream(run, r, &r->err);
        }
    }
    free(pfds);
    free(owners);
    free(owner_ranks);
}

/* ---- --agent: topology, agents, cleanup ---- */

/* coll-agent: --agent=PATH as given (PATH lookup without a slash), else next to coll-run, else
 * the build tree's k8s-agent/, else PATH. NULL (with the places tried in tried) if none. */
static char *find_agent(const char *given, char *tried, size_t tried_len)
{
    char self[PATH_MAX], *slash, *cand;
    ssize_t n;

    if (given != NULL)
        return resolve_program(given);
    n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            cand = xasprintf("%s/%s", self, AGENT_NAME);
            if (access(cand, X_OK) == 0)
                return cand;
            free(cand);
            cand = xasprintf("%s/../k8s-agent/%s", self, AGENT_NAME);
            if (access(cand, X_OK) == 0)
                return cand;
            free(cand);
            snprintf(tried, tried_len, "%s/%s, %s/../k8s-agent/%s and PATH", self, AGENT_NAME, self,
                     AGENT_NAME);
        }
    }
    cand = resolve_program(AGENT_NAME);
    if (cand == NULL && tried[0] == '\0')
        snprintf(tried, tried_len, "PATH");
    return cand;
}

static int cidr_match4(const char *tok, const struct sockaddr *sa)
{
    char buf[64], *slash;
    struct in_addr net;
    long bits;
    uint32_t mask, a;

    snprintf(buf, sizeof(buf), "%s", tok);
    slash = strchr(buf, '/');
    if (slash == NULL)
        return -1; /* not a CIDR */
    *slash = '\0';
    if (inet_pton(AF_INET, buf, &net) != 1)
        return -1;
    bits = strtol(slash + 1, NULL, 10);
    if (bits < 0 || bits > 32)
        return -1;
    if (sa->sa_family != AF_INET)
        return 0;
    mask = bits == 0 ? 0 : htonl(~(uint32_t)0 << (32 - bits));
    a = ((const struct sockaddr_in *)sa)->sin_addr.s_addr;
    return (a & mask) == (net.s_addr & mask);
}

/* COLL_SOCKET_IFNAME syntax: a list of name prefixes, "=" for exact names, "^" to exclude,
 * IPv4 CIDR blocks. */
static bool ifname_match(const char *spec, const char *name, const struct sockaddr *sa)
{
    bool exclude = false, exact = false, hit = false;
    char buf[256], *save = NULL;

    if (*spec == '^')
        exclude = true, spec++;
    if (*spec == '=')
        exact = true, spec++;
    snprintf(buf, sizeof(buf), "%s", spec);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int c = cidr_match4(tok, sa);
        char *colon;

        if (c >= 0) {
            hit = hit || c == 1;
            continue;
        }
        colon = strchr(tok, ':');
        if (colon != NULL)
            *colon = '\0';
        if (exact ? strcmp(name, tok) == 0 : strncmp(name, tok, strlen(tok)) == 0)
            hit = true;
    }
    return exclude ? !hit : hit;
}

/* The interface the spec selects and its address (IPv4 first, else a global IPv6 one), the way
 * the library would pick it; exits with a message listing the interfaces when none matches. */
static void pick_interface(const char *spec, char *name, size_t name_len, char *addr,
                           size_t addr_len, int *family)
{
    struct ifaddrs *list = NULL;
    char have[1024] = "";
    size_t used = 0;

    if (getifaddrs(&list) != 0) {
        msg("getifaddrs failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    for (int fam = 0; fam < 2; fam++) {
        int want = fam == 0 ? AF_INET : AF_INET6;

        for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
            const void *src;

            if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != want ||
                !(ifa->ifa_flags & IFF_UP))
                continue;
            if (want == AF_INET6 &&
                IN6_IS_ADDR_LINKLOCAL(&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))
                continue;
            if (!ifname_match(spec, ifa->ifa_name, ifa->ifa_addr))
                continue;
            src = want == AF_INET
                      ? (const void *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr
                      : (const void *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
            if (inet_ntop(want, src, addr, (socklen_t)addr_len) == NULL)
                continue;
            snprintf(name, name_len, "%s", ifa->ifa_name);
            *family = want;
            freeifaddrs(list);
            return;
        }
    }
    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        char a[INET6_ADDRSTRLEN] = "?";
        int f = ifa->ifa_addr != NULL ? ifa->ifa_addr->sa_family : AF_UNSPEC;
        int w;

        if (f != AF_INET && f != AF_INET6)
            continue;
        inet_ntop(f,
                  f == AF_INET
                      ? (const void *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr
                      : (const void *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr,
                  a, sizeof(a));
        w = snprintf(have + used, sizeof(have) - used, "%s%s %s%s", used ? ", " : "", ifa->ifa_name,
                     a, (ifa->ifa_flags & IFF_UP) ? "" : " (down)");
        if (w < 0 || (size_t)w >= sizeof(have) - used)
            break;
        used += (size_t)w;
    }
    freeifaddrs(list);
    msg("--agent: no interface that is up matches the interface spec '%s'; this host has: %s", spec,
        have[0] ? have : "no interfaces with an address");
    exit(EXIT_FAILURE);
}

/* A port that is free on addr now; rank 0 binds the bootstrap root there. */
static int free_port(const char *addr, int family)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int fd, port = -1;

    memset(&ss, 0, sizeof(ss));
    if (family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&ss;

        in->sin_family = AF_INET;
        inet_pton(AF_INET, addr, &in->sin_addr);
        len = sizeof(*in);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;

        in6->sin6_family = AF_INET6;
        inet_pton(AF_INET6, addr, &in6->sin6_addr);
        len = sizeof(*in6);
    }
    fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        msg("socket() failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (bind(fd, (struct sockaddr *)&ss, len) != 0 ||
        getsockname(fd, (struct sockaddr *)&ss, &len) != 0) {
        msg("cannot find a free port on %s: %s", addr, strerror(errno));
        close_fd(fd);
        exit(EXIT_FAILURE);
    }
    port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&ss)->sin_port
                                   : ((struct sockaddr_in6 *)&ss)->sin6_port);
    close_fd(fd);
    return port;
}

static void random_secret_hex(char out[33])
{
    unsigned char b[16];
    size_t got = 0;

    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);

        if (n < 0) {
            if (errno == EINTR)
                continue;
            msg("getrandom failed: %s; cannot make the job's secret", strerror(errno));
            exit(EXIT_FAILURE);
        }
        got += (size_t)n;
    }
    for (size_t i = 0; i < sizeof(b); i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;

        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

/* Seconds from a COLL_* timeout variable, rounded up; def when unset or not a positive number. */
static int env_seconds(const char *name, int def)
{
    const char *v = getenv(name);
    char *end;
    double d;

    if (v == NULL || *v == '\0')
        return def;
    errno = 0;
    d = strtod(v, &end);
    if (errno != 0 || end == v || *end != '\0' || !isfinite(d) || d <= 0 || d > INT_MAX)
        return def;
    return (int)ceil(d);
}

/* Remove the temporary directory and what the agents left in it (sockets, the topology). */
static void remove_tmp_dir(struct run *run)
{
    DIR *d;
    struct dirent *e;

    if (run->tmp_dir == NULL)
        return;
    d = opendir(run->tmp_dir);
    if (d != NULL) {
        int dfd = dirfd(d);

        while ((e = readdir(d)) != NULL) {
            if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                continue;
            if (unlinkat(dfd, e->d_name, 0) != 0 && errno != ENOENT)
                msg("cannot remove %s/%s: %s", run->tmp_dir, e->d_name, strerror(errno));
        }
        closedir(d);
    }
    if (rmdir(run->tmp_dir) != 0 && errno != ENOENT)
        msg("cannot remove %s: %s", run->tmp_dir, strerror(errno));
    free(run->tmp_dir);
    run->tmp_dir = NULL;
}

/*
 * The standalone topology every agent reads: this host's ranks on one interface, a free root
 * port on rank 0's address, a fresh secret, transport Socket, the pinned library version, and
 * the bootstrap and operation timeouts the user's environment asks for (the agent pins them).
 */
static void write_topology(struct run *run, const char *spec, const char *pin_version)
{
    const char *tmp = getenv("TMPDIR");
    char ifname[IF_NAMESIZE + 1], addr[INET6_ADDRSTRLEN], host[256] = "localhost", secret[33];
    struct sockaddr_un probe;
    int family = AF_INET, port;
    FILE *f;

    pick_interface(spec, ifname, sizeof(ifname), addr, sizeof(addr), &family);
    port = free_port(addr, family);
    random_secret_hex(secret);
    if (gethostname(host, sizeof(host) - 1) != 0)
        snprintf(host, sizeof(host), "localhost");
    /* The sockets must fit sun_path: fall back to /tmp when $TMPDIR is too long. */
    if (tmp == NULL || *tmp == '\0' ||
        strlen(tmp) + sizeof("/coll-run.XXXXXX/agent4096.sock") > sizeof(probe.sun_path))
        tmp = "/tmp";
    run->tmp_dir = xasprintf("%s/coll-run.XXXXXX", tmp);
    if (mkdtemp(run->tmp_dir) == NULL) {
        msg("cannot create a temporary directory %s: %s", run->tmp_dir, strerror(errno));
        exit(EXIT_FAILURE);
    }
    run->topo_path = xasprintf("%s/topology.json", run->tmp_dir);
    f = fopen(run->topo_path, "we");
    if (f == NULL) {
        msg("cannot write %s: %s", run->topo_path, strerror(errno));
        remove_tmp_dir(run);
        exit(EXIT_FAILURE);
    }
    fprintf(f, "{\n  \"job\": \"coll-run-%d\",\n  \"port\": %d,\n  \"secret\": \"%s\",\n",
            (int)getpid(), port, secret);
    fprintf(f, "  \"transport\": \"Socket\",\n");
    if (pin_version[0] != '\0') {
        fprintf(f, "  \"libraryVersion\": ");
        json_str(f, pin_version);
        fprintf(f, ",\n");
    }
    fprintf(f, "  \"bootstrapTimeoutSeconds\": %d,\n  \"timeoutSeconds\": %d,\n",
            env_seconds(ENV_BOOT_TIMEOUT, DEFAULT_BOOT_S),
            env_seconds(ENV_TIMEOUT, DEFAULT_TIMEOUT_S));
    fprintf(f, "  \"nranks\": %d,\n  \"ranks\": [\n", run->nranks);
    for (int r = 0; r < run->nranks; r++) {
        fprintf(f, "    {\"rank\": %d, \"address\": \"%s\", \"interface\": ", r, addr);
        json_str(f, ifname);
        fprintf(f, ", \"node\": ");
        json_str(f, host);
        fprintf(f, ", \"pod\": \"coll-run-rank-%d\"}%s\n", r, r + 1 < run->nranks ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (ferror(f) != 0 || fclose(f) != 0) {
        msg("cannot write %s: %s", run->topo_path, strerror(errno));
        remove_tmp_dir(run);
        exit(EXIT_FAILURE);
    }
}

/* One coll-agent per rank, each with its own socket. */
static void prepare_agents(struct run *run)
{
    for (int r = 0; r < run->nranks; r++) {
        struct rank *a = &run->ranks[run->nranks + r];
        char **argv = xcalloc(10, sizeof(*argv));

        a->rank = r;
        a->is_agent = true;
        a->out.fd = -1;
        a->err.fd = -1;
        a->sock_path = xasprintf("%s/agent%d.sock", run->tmp_dir, r);
        argv[0] = run->agent_path;
        argv[1] = "--topology";
        argv[2] = run->topo_path;
        argv[3] = "--rank";
        argv[4] = xasprintf("%d", r);
        argv[5] = "--socket";
        argv[6] = a->sock_path;
        argv[7] = "--health-port";
        argv[8] = "0";
        argv[9] = NULL;
        a->argv = argv;
        a->envp = build_agent_env();
    }
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"ifname", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},
        {"agent", optional_argument, NULL, 'a'},
        {"pin-version", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct run run;
    const char *ifname = NULL, *agent_arg = NULL, *pin_version = NULL;
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
        case 'a':
            run.agent_mode = true;
            if (optarg != NULL && *optarg == '\0')
                usage_error("--agent=: empty path (use --agent alone for the default)");
            agent_arg = optarg;
            break;
        case 'p':
            pin_version = optarg;
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
    if (pin_version != NULL && !run.agent_mode)
        usage_error("--pin-version needs --agent (it is the version the agents pin)");
    if (optind >= argc)
        usage_error("missing the program to run");
    run.argv = &argv[optind];
    run.prog_path = resolve_program(run.argv[0]);
    if (run.prog_path == NULL)
        usage_error("program '%s' %s: %s", run.argv[0],
                    strchr(run.argv[0], '/') != NULL ? "cannot be run" : "not found in PATH",
                    strerror(errno));
    if (run.agent_mode) {
        char tried[PATH_MAX * 2 + 64] = "";

        run.agent_path = find_agent(agent_arg, tried, sizeof(tried));
        if (run.agent_path == NULL && agent_arg != NULL)
            usage_error("--agent: '%s' %s: %s", agent_arg,
                        strchr(agent_arg, '/') != NULL ? "cannot be run" : "not found in PATH",
                        strerror(errno));
        if (run.agent_path == NULL)
            usage_error("--agent: %s not found (looked at %s); build it (k8s-agent/) or give "
                        "its path with --agent=PATH",
                        AGENT_NAME, tried);
    }

    /* An explicit --ifname wins over the environment; otherwise the user's setting is kept. */
    override_ifname = ifname != NULL || getenv(ENV_SOCKET_IFNAME) == NULL;
    if (ifname == NULL)
        ifname = override_ifname ? DEFAULT_IFNAME : getenv(ENV_SOCKET_IFNAME);

    run.nprocs = run.agent_mode ? 2 * run.nranks : run.nranks;
    check_fd_limit(run.nprocs);
    /* Before the library starts its bootstrap thread, so that the thread inherits the mask. */
    install_handlers(&orig_mask);

    run.ranks = xcalloc((size_t)run.nprocs, sizeof(*run.ranks));
    if (run.agent_mode) {
        /* No unique id here: rank 0 hosts the bootstrap root at the endpoint its agent serves. */
        write_topology(&run, ifname, pin_version != NULL ? pin_version : coll_get_version_string());
        prepare_agents(&run);
    } else {
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
    }
    for (int i = 0; i < run.nranks; i++) {
        run.ranks[i].rank = i;
        run.ranks[i].out.fd = -1;
        run.ranks[i].err.fd = -1;
        run.ranks[i].envp = run.agent_mode
                                ? build_agent_rank_env(i, run.ranks[run.nranks + i].sock_path)
                                : build_env(i, run.nranks, id_str, ifname, override_ifname);
    }
    if (run.timeout_s > 0)
        run.deadline = now_s() + run.timeout_s;

    if (run.agent_mode) {
        for (int i = run.nranks; i < run.nprocs && !run.stopping; i++) {
            int err = start_rank(&run, &run.ranks[i], &orig_mask);

            if (err != 0) {
                if (err > 0)
                    msg("cannot execute '%s' for agent %d: %s", run.agent_path, i - run.nranks,
                        strerror(err));
                run.stopping = true;
                run.exit_code = EXIT_FAILURE;
            }
        }
        if (!run.stopping)
            event_loop(&run, &orig_mask, PHASE_AGENTS);
    }
    for (int i = 0; i < run.nranks && !run.stopping; i++) {
        int err = start_rank(&run, &run.ranks[i], &orig_mask);

        run.ranks_launched = true;
        if (err != 0) {
            if (err > 0)
                msg("cannot execute '%s' for rank %d: %s", run.prog_path, i, strerror(err));
            /* Ranks already started would wait for the missing one until their timeout. */
            stop_all(&run, SIGTERM, err > 0 ? EXIT_USAGE : EXIT_FAILURE);
            break;
        }
    }

    event_loop(&run, &orig_mask, PHASE_RUN);

    if (!run.stopping) {
        /* Normal end: every rank exited on its own; a non-zero status would have stopped us. */
        run.exit_code = EXIT_SUCCESS;
    }
    remove_tmp_dir(&run);
    for (int i = 0; i < run.nprocs; i++) {
        struct rank *r = &run.ranks[i];

        free_env(r->envp);
        if (r->argv != NULL)
            free(r->argv[4]);
        free(r->argv);
        free(r->sock_path);
    }
    free(run.ranks);
    free(run.prog_path);
    free(run.agent_path);
    free(run.topo_path);
    if (fflush(stdout) != 0 && !run.stdout_broken)
        msg("cannot flush stdout: %s", strerror(errno));
    return run.exit_code;
}
