#define _GNU_SOURCE
#include "dh.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

long dh_passed, dh_failed;
int dh_rank = -1;

#define HOLDER DH_MAX_RANKS /* index of the root holder in the per-process arrays */

typedef struct meta {
    long id_ready; /* 1: id valid, -1: the holder failed */
    coll_unique_id_t id;
    char idstr[COLL_UNIQUE_ID_STRLEN];
    double t_start;
    char err[DH_MSG_BYTES];
    long holder_child; /* root_forked: the holder's child (not ours to wait for) */
} meta_t;

struct dh_job {
    dh_opts_t o;
    dh_shared_t *sh;
    meta_t *meta;
    int n;
    pid_t pid[DH_MAX_RANKS + 1];
    int fd[DH_MAX_RANKS + 1];
    char *buf[DH_MAX_RANKS + 1];
    size_t len[DH_MAX_RANKS + 1], cap[DH_MAX_RANKS + 1], echoed[DH_MAX_RANKS + 1];
    long lines_echoed[DH_MAX_RANKS + 1];
    int truncated[DH_MAX_RANKS + 1];
    int status[DH_MAX_RANKS + 1];
    int exited[DH_MAX_RANKS + 1];
    int expect_sig[DH_MAX_RANKS + 1];
    int hung[DH_MAX_RANKS + 1];
    double deadline;
    int guard_fd; /* holds the dead root's port (root_dead) */
    /* dh_failed when the job started: a quiet job that failed shows its ranks' output */
    long failed_start;
};

/* ---- output and checks ---- */

void dh_log(const char *fmt, ...)
{
    char line[DH_MSG_BYTES + 512], out[DH_MSG_BYTES + 600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    int n;
    if (dh_rank < 0)
        n = snprintf(out, sizeof(out), "[parent] %s\n", line);
    else
        n = snprintf(out, sizeof(out), "[rank %d] %s\n", dh_rank, line);
    if (n > (int)sizeof(out) - 1)
        n = (int)sizeof(out) - 1;
    /* one write per line: lines of different processes do not interleave */
    if (write(STDOUT_FILENO, out, (size_t)n) < 0) {
        /* nothing sensible to do */
    }
}

void dh_init(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    /* loopback only, unless a test pins something else */
    setenv("COLL_SOCKET_IFNAME", "lo", 0);
}

int dh_finish(void)
{
    printf("%ld passed, %ld failed\n", dh_passed, dh_failed);
    fflush(stdout);
    return dh_failed ? 1 : 0;
}

void dh_skip(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    printf("SKIPPED: %s\n", line);
    printf("%ld passed, %ld failed\n", dh_passed, dh_failed);
    fflush(stdout);
    exit(77);
}

void dh_fail(const char *fmt, ...)
{
    char line[DH_MSG_BYTES + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    dh_failed++;
    dh_log("FAIL: %s", line);
}

int dh_check(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
{
    if (ok) {
        dh_passed++;
        return 1;
    }
    char msg[DH_MSG_BYTES + 256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    dh_failed++;
    const char *base = strrchr(file, '/');
    dh_log("FAIL %s:%d: %s (%s)", base ? base + 1 : file, line, msg, expr);
    return 0;
}

const char *dh_rc_name(int rc)
{
    switch (rc) {
#define NAME_(name, val, str)                                                                      \
    case COLL_##name:                                                                              \
        return "COLL_" #name;
        COLL_RESULT_MAP(NAME_)
#undef NAME_
    case -1:
        return "(no result)";
    default:
        return "(out-of-range result)";
    }
}

int dh_check_rc(int rc, int expected, const char *msg, const char *file, int line, const char *fmt,
                ...)
{
    if (rc == expected) {
        dh_passed++;
        return 1;
    }
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    dh_failed++;
    const char *base = strrchr(file, '/');
    dh_log("FAIL %s:%d: %s: expected %s, got %s; message: \"%s\"", base ? base + 1 : file, line,
           what, dh_rc_name(expected), dh_rc_name(rc), msg ? msg : "");
    return 0;
}

int dh_check_has(const char *msg, const char *needle, const char *file, int line, const char *fmt,
                 ...)
{
    if (msg && needle && strstr(msg, needle)) {
        dh_passed++;
        return 1;
    }
    char what[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    dh_failed++;
    const char *base = strrchr(file, '/');
    dh_log("FAIL %s:%d: %s: \"%s\" not found in \"%s\"", base ? base + 1 : file, line, what,
           needle ? needle : "(null)", msg ? msg : "(null)");
    return 0;
}

/* ---- helpers ---- */

double dh_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void dh_sleep(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int dh_contains(const char *haystack, const char *needle)
{
    return haystack && needle && strstr(haystack, needle) != NULL;
}

int dh_count_lines(const char *text, const char *needle, const char *needle2)
{
    int count = 0;
    const char *p = text;
    while (p && *p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char *line = strndup(p, len);
        if (line && strstr(line, needle) && (needle2 == NULL || strstr(line, needle2)))
            count++;
        free(line);
        p = nl ? nl + 1 : NULL;
    }
    return count;
}

int dh_names_rank(const char *msg, int r)
{
    char pat[32];
    int n = snprintf(pat, sizeof(pat), "rank %d", r);
    for (const char *p = msg; p && (p = strstr(p, pat)) != NULL; p += n) {
        char c = p[n];
        if (c < '0' || c > '9')
            return 1;
    }
    return 0;
}

void dh_setenv(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

/* ---- jobs ---- */

dh_shared_t *dh_shared(dh_job_t *j)
{
    return j->sh;
}

pid_t dh_pid(dh_job_t *j, int rank)
{
    return j->pid[rank];
}

int dh_exited(dh_job_t *j, int rank)
{
    return j->exited[rank];
}

const char *dh_output(dh_job_t *j, int rank)
{
    int i = rank < 0 ? HOLDER : rank;
    return j->buf[i] ? j->buf[i] : "";
}

const char *dh_id_string(dh_job_t *j)
{
    return j->meta->idstr;
}

int dh_id_port(dh_job_t *j)
{
    const char *id = dh_id_string(j);
    const char *last = strrchr(id, ':');
    const char *p = last;
    while (p > id && p[-1] != ':')
        p--;
    return last ? atoi(p) : -1;
}

double dh_t_start(dh_job_t *j)
{
    return j->meta->t_start;
}

void dh_expect_signal(dh_job_t *j, int rank, int sig)
{
    j->expect_sig[rank] = sig;
}

void dh_begin(dh_ctx_t *ctx, int slot)
{
    ctx->sh->out[slot].t0 = dh_now();
}

void dh_record(dh_ctx_t *ctx, const char *what, coll_result_t rc)
{
    dh_record_slot(ctx, ctx->rank, what, rc);
}

void dh_record_slot(dh_ctx_t *ctx, int slot, const char *what, coll_result_t rc)
{
    dh_out_t *o = &ctx->sh->out[slot];
    o->t = dh_now();
    o->rc = rc;
    snprintf(o->what, sizeof(o->what), "%s", what);
    snprintf(o->msg, sizeof(o->msg), "%s", rc == COLL_SUCCESS ? "" : coll_get_last_error());
    __atomic_store_n(&o->done, 1, __ATOMIC_SEQ_CST);
}

/* A runaway process (a log flood) must not exhaust memory or the ctest log. */
#define DH_KEEP_BYTES (8u << 20)
#define DH_ECHO_LINES 400

static void append(dh_job_t *j, int i, const char *data, size_t n)
{
    if (j->len[i] + n > DH_KEEP_BYTES) {
        if (!j->truncated[i])
            dh_log("output of %s %d exceeds %u MiB: the rest is dropped",
                   i == HOLDER ? "the root holder" : "rank", i == HOLDER ? -1 : i,
                   DH_KEEP_BYTES >> 20);
        j->truncated[i] = 1;
        return;
    }
    if (j->len[i] + n + 1 > j->cap[i]) {
        size_t cap = j->cap[i] ? j->cap[i] : 4096;
        while (cap < j->len[i] + n + 1)
            cap *= 2;
        char *b = realloc(j->buf[i], cap);
        if (b == NULL)
            return;
        j->buf[i] = b;
        j->cap[i] = cap;
    }
    memcpy(j->buf[i] + j->len[i], data, n);
    j->len[i] += n;
    j->buf[i][j->len[i]] = '\0';
    if (j->o.quiet)
        return;
    /* echo complete lines, prefixed with the process they came from */
    for (;;) {
        char *start = j->buf[i] + j->echoed[i];
        char *nl = memchr(start, '\n', j->len[i] - j->echoed[i]);
        if (nl == NULL)
            break;
        char pre[32];
        if (i == HOLDER)
            snprintf(pre, sizeof(pre), "  root| ");
        else
            snprintf(pre, sizeof(pre), "  r%-3d| ", i);
        size_t ll = (size_t)(nl - start) + 1;
        char *line = ++j->lines_echoed[i] <= DH_ECHO_LINES ? malloc(ll + sizeof(pre)) : NULL;
        if (j->lines_echoed[i] == DH_ECHO_LINES + 1)
            dh_log("%s %d printed more than %d lines: not echoing the rest",
                   i == HOLDER ? "root holder" : "rank", i == HOLDER ? -1 : i, DH_ECHO_LINES);
        if (line) {
            size_t pl = strlen(pre);
            memcpy(line, pre, pl);
            memcpy(line + pl, start, ll);
            if (write(STDOUT_FILENO, line, pl + ll) < 0) {
                /* ignore */
            }
            free(line);
        }
        j->echoed[i] += ll;
    }
}

static void child_setup_output(int wfd)
{
    dup2(wfd, STDOUT_FILENO);
    dup2(wfd, STDERR_FILENO);
    if (wfd > STDERR_FILENO)
        close(wfd);
    setvbuf(stdout, NULL, _IOLBF, 0);
}

static int make_pipe(int p[2])
{
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    fcntl(p[0], F_SETFL, O_NONBLOCK);
    return 0;
}

static void holder_main(dh_job_t *j, int wfd)
{
    child_setup_output(wfd);
    dh_rank = -1;
    coll_result_t rc = coll_get_unique_id_ifname(&j->meta->id, j->o.ifname ? j->o.ifname : "lo");
    if (rc == COLL_SUCCESS)
        rc = coll_unique_id_to_string(&j->meta->id, j->meta->idstr, sizeof(j->meta->idstr));
    j->meta->t_start = dh_now();
    if (rc != COLL_SUCCESS) {
        snprintf(j->meta->err, sizeof(j->meta->err), "%s: %s", dh_rc_name(rc),
                 coll_get_last_error());
        __atomic_store_n(&j->meta->id_ready, -1, __ATOMIC_SEQ_CST);
        _exit(1);
    }
    if (j->o.root_forked) {
        pid_t c = fork(); /* the root runs: its sockets are what the child must not keep */
        if (c == 0) {
            int nul = open("/dev/null", O_RDWR);
            if (nul >= 0) {
                dup2(nul, STDOUT_FILENO);
                dup2(nul, STDERR_FILENO);
            }
            alarm(120); /* dh_free kills it; this, if the test itself died */
            for (;;)
                pause();
        }
        j->meta->holder_child = c;
    }
    __atomic_store_n(&j->meta->id_ready, 1, __ATOMIC_SEQ_CST);
    /* keep the root thread alive until the parent is done with us */
    for (;;)
        pause();
}

static void rank_main(dh_job_t *j, int r, int wfd)
{
    child_setup_output(wfd);
    dh_rank = r;
    dh_passed = dh_failed = 0;
    if (j->o.body == NULL) {
        char idv[16], nv[16];
        snprintf(idv, sizeof(idv), "%d", r);
        snprintf(nv, sizeof(nv), "%d", j->o.nranks);
        setenv(COLL_ENV_UNIQUE_ID, j->meta->idstr, 1);
        setenv(COLL_ENV_RANK, idv, 1);
        setenv(COLL_ENV_NRANKS, nv, 1);
        char *const *argv = j->o.argv_for(r, j->o.arg);
        execv(argv[0], argv);
        printf("exec %s failed: %s\n", argv[0], strerror(errno));
        fflush(stdout);
        _exit(127);
    }
    dh_ctx_t ctx = {
        .rank = r, .nranks = j->o.nranks, .id = j->meta->id, .sh = j->sh, .arg = j->o.arg};
    j->sh->out[r].rc = -1;
    j->o.body(&ctx);
    j->sh->passed[r] = dh_passed;
    j->sh->failed[r] = dh_failed;
    __atomic_store_n(&j->sh->reported[r], 1, __ATOMIC_SEQ_CST);
    fflush(stdout);
    fflush(stderr);
    _exit(dh_failed ? 1 : 0);
}

static pid_t spawn(dh_job_t *j, int i)
{
    int p[2];
    if (make_pipe(p) != 0) {
        dh_fail("%s: pipe: %s", j->o.name, strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        dh_fail("%s: fork: %s", j->o.name, strerror(errno));
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        int w = fcntl(p[1], F_DUPFD, 3); /* drop O_CLOEXEC: exec'd ranks keep their output */
        close(p[1]);
        if (i == HOLDER)
            holder_main(j, w);
        rank_main(j, i, w);
    }
    close(p[1]);
    j->fd[i] = p[0];
    j->pid[i] = pid;
    return pid;
}

static void drain(dh_job_t *j, int i)
{
    char tmp[8192];
    while (j->fd[i] >= 0) {
        ssize_t n = read(j->fd[i], tmp, sizeof(tmp));
        if (n > 0) {
            append(j, i, tmp, (size_t)n);
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            close(j->fd[i]);
            j->fd[i] = -1;
        }
        break;
    }
}

static void reap(dh_job_t *j)
{
    for (int i = 0; i <= HOLDER; i++) {
        if (j->pid[i] <= 0 || j->exited[i])
            continue;
        if (waitpid(j->pid[i], &j->status[i], WNOHANG) == j->pid[i])
            j->exited[i] = 1;
    }
}

static int running(dh_job_t *j)
{
    int n = 0;
    for (int r = 0; r < j->n; r++)
        n += j->pid[r] > 0 && !j->exited[r];
    return n;
}

/* Wait up to `seconds` for output, read it, reap exited ranks. */
static void pump_once(dh_job_t *j, double seconds)
{
    struct pollfd pf[DH_MAX_RANKS + 1];
    int idx[DH_MAX_RANKS + 1], k = 0;
    for (int i = 0; i <= HOLDER; i++)
        if (j->fd[i] >= 0) {
            pf[k] = (struct pollfd){.fd = j->fd[i], .events = POLLIN};
            idx[k++] = i;
        }
    int ms = seconds <= 0 ? 0 : seconds > 0.01 ? 10 : (int)(seconds * 1000) + 1;
    if (k > 0)
        poll(pf, (nfds_t)k, ms);
    else
        dh_sleep(ms / 1000.0);
    for (int x = 0; x < k; x++)
        if (pf[x].revents)
            drain(j, idx[x]);
    reap(j);
}

int dh_pump(dh_job_t *j, double seconds)
{
    double end = dh_now() + seconds;
    do
        pump_once(j, end - dh_now());
    while (dh_now() < end && running(j) > 0);
    return running(j);
}

int dh_wait_output(dh_job_t *j, int rank, const char *needle, double seconds)
{
    double end = dh_now() + seconds;
    while (!dh_contains(dh_output(j, rank), needle) && dh_now() < end)
        pump_once(j, end - dh_now());
    return dh_contains(dh_output(j, rank), needle);
}

/* Keep the dead root's port bound but not listening: connections to it are refused, and no
 * other socket (a rank's listener, another test) can take the port while the ranks retry. */
static void guard_port(dh_job_t *j)
{
    const char *last = strrchr(j->meta->idstr, ':');
    const char *p = last;
    while (p && p > j->meta->idstr && p[-1] != ':')
        p--;
    int port = p ? atoi(p) : 0;
    j->guard_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (j->guard_fd < 0 || port <= 0 || bind(j->guard_fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        dh_log("could not hold the dead root's port %d (%s): another socket may take it", port,
               strerror(errno));
}

dh_job_t *dh_start(const dh_opts_t *o)
{
    dh_job_t *j = calloc(1, sizeof(*j));
    if (j == NULL)
        abort();
    j->o = *o;
    j->failed_start = dh_failed;
    /* DH_ECHO=1 echoes the ranks' output of a quiet job too (to watch a failing case) */
    const char *echo = getenv("DH_ECHO");
    if (echo != NULL && strcmp(echo, "1") == 0)
        j->o.quiet = 0;
    j->n = o->nranks;
    j->guard_fd = -1;
    for (int i = 0; i <= HOLDER; i++)
        j->fd[i] = -1;
    if (o->nranks < 1 || o->nranks > DH_MAX_RANKS) {
        dh_fail("%s: bad nranks %d", o->name, o->nranks);
        free(j);
        return NULL;
    }
    j->sh =
        mmap(NULL, sizeof(dh_shared_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    j->meta = mmap(NULL, sizeof(meta_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (j->sh == MAP_FAILED || j->meta == MAP_FAILED)
        abort();
    memset(j->sh, 0, sizeof(*j->sh));
    memset(j->meta, 0, sizeof(*j->meta));
    for (int r = 0; r < DH_MAX_RANKS; r++)
        j->sh->out[r].rc = -1;
    /* The root is a thread of a forked holder process, never of this one: the parent stays
     * single-threaded, so that forking ranks cannot copy a lock (malloc's, the sanitizer
     * allocator's, kcoll's log lock) that the root thread holds at that moment. */
    if (spawn(j, HOLDER) < 0) {
        dh_free(j);
        return NULL;
    }
    double end = dh_now() + 30;
    while (__atomic_load_n(&j->meta->id_ready, __ATOMIC_SEQ_CST) == 0 && dh_now() < end) {
        drain(j, HOLDER);
        dh_sleep(0.002);
    }
    if (j->meta->id_ready != 1) {
        dh_fail("%s: the root holder could not create a unique id: %s", o->name, j->meta->err);
        dh_free(j);
        return NULL;
    }
    if (o->root_dead) {
        kill(j->pid[HOLDER], SIGKILL);
        waitpid(j->pid[HOLDER], &j->status[HOLDER], 0);
        j->exited[HOLDER] = 1;
        drain(j, HOLDER);
        guard_port(j);
    }
    if (o->before_ranks)
        o->before_ranks(j, o->arg);
    j->deadline = dh_now() + (o->deadline_s > 0 ? o->deadline_s : 60);
    for (int r = 0; r < o->nranks; r++)
        if (spawn(j, r) < 0) {
            j->deadline = 0; /* dh_wait kills what was started */
            break;
        }
    return j;
}

void dh_parse_results(dh_job_t *j)
{
    for (int r = 0; r < j->n; r++) {
        const char *p = dh_output(j, r);
        while ((p = strstr(p, "DIAG-RESULT ")) != NULL) {
            int rank = -1, rc = -1;
            double t = 0;
            int off = 0;
            if (sscanf(p, "DIAG-RESULT rank=%d rc=%d t=%lf msg=%n", &rank, &rc, &t, &off) >= 3 &&
                off > 0 && rank >= 0 && rank < j->n) {
                dh_out_t *o = &j->sh->out[rank];
                o->rc = rc;
                o->t = t;
                const char *m = p + off;
                const char *nl = strchr(m, '\n');
                size_t ml = nl ? (size_t)(nl - m) : strlen(m);
                if (ml >= sizeof(o->msg))
                    ml = sizeof(o->msg) - 1;
                memcpy(o->msg, m, ml);
                o->msg[ml] = '\0';
                o->done = 1;
            }
            p += 12;
        }
    }
}

long dh_wait(dh_job_t *j)
{
    long before = dh_failed;
    const char *name = j->o.name;
    while (running(j) > 0 && dh_now() < j->deadline)
        dh_pump(j, 0.05);
    for (int r = 0; r < j->n; r++)
        if (j->pid[r] > 0 && !j->exited[r]) {
            j->hung[r] = 1;
            kill(j->pid[r], SIGCONT);
            kill(j->pid[r], SIGKILL);
        }
    for (int r = 0; r < j->n; r++)
        if (j->pid[r] > 0 && !j->exited[r]) {
            waitpid(j->pid[r], &j->status[r], 0);
            j->exited[r] = 1;
        }
    if (j->pid[HOLDER] > 0) {
        dh_pump(j, 0.1); /* the root's last words */
        if (!j->exited[HOLDER]) {
            kill(j->pid[HOLDER], SIGKILL);
            waitpid(j->pid[HOLDER], &j->status[HOLDER], 0);
            j->exited[HOLDER] = 1;
        }
    }
    for (int i = 0; i <= HOLDER; i++)
        drain(j, i);
    if (j->o.body == NULL)
        dh_parse_results(j);
    for (int r = 0; r < j->n; r++) {
        if (j->pid[r] <= 0)
            continue;
        int st = j->status[r];
        if (j->sh->reported[r]) {
            dh_passed += j->sh->passed[r];
            dh_failed += j->sh->failed[r];
        }
        if (j->hung[r]) {
            dh_fail("%s: rank %d still running after the %.0f s deadline (a hang); killed", name, r,
                    j->o.deadline_s);
        } else if (WIFSIGNALED(st)) {
            if (WTERMSIG(st) != j->expect_sig[r])
                dh_fail("%s: rank %d died from signal %d (%s)", name, r, WTERMSIG(st),
                        strsignal(WTERMSIG(st)));
        } else if (j->expect_sig[r]) {
            dh_fail("%s: rank %d was expected to die from signal %d but exited with %d", name, r,
                    j->expect_sig[r], WEXITSTATUS(st));
        } else if (j->o.body != NULL && !j->sh->reported[r]) {
            dh_fail("%s: rank %d exited with status %d without reporting (a crash, or a "
                    "sanitizer report?)",
                    name, r, WEXITSTATUS(st));
        } else if (WEXITSTATUS(st) != 0 && (j->o.body == NULL || j->sh->failed[r] == 0)) {
            dh_fail("%s: rank %d exited with status %d", name, r, WEXITSTATUS(st));
        }
    }
    return dh_failed - before;
}

/* The last `lines` lines of rank i's output, prefixed like the echo. */
static void print_tail(const dh_job_t *j, int i, int lines)
{
    const char *l = j->buf[i], *end = l + j->len[i];
    if (l == NULL || j->len[i] == 0)
        return;
    int total = end[-1] != '\n'; /* a last line without its newline counts too */
    for (const char *p = l; p < end; p++)
        total += *p == '\n';
    for (int skip = total - lines; skip > 0; skip--)
        l = (const char *)memchr(l, '\n', (size_t)(end - l)) + 1;
    dh_log("---- the last %d lines of rank %d's output (a quiet job that failed):", lines, i);
    while (l < end) {
        const char *nl = memchr(l, '\n', (size_t)(end - l));
        const int n = (int)((nl ? nl : end) - l);
        printf("  r%-3d| %.*s\n", i, n, l);
        l += n + 1;
    }
    fflush(stdout);
}

void dh_free(dh_job_t *j)
{
    if (j == NULL)
        return;
    if (j->o.quiet && dh_failed > j->failed_start)
        for (int i = 0; i < j->n && i < DH_MAX_RANKS; i++)
            print_tail(j, i, 40);
    for (int i = 0; i <= HOLDER; i++) {
        if (j->pid[i] > 0 && !j->exited[i]) {
            kill(j->pid[i], SIGCONT);
            kill(j->pid[i], SIGKILL);
            waitpid(j->pid[i], NULL, 0);
        }
        if (j->fd[i] >= 0)
            close(j->fd[i]);
        free(j->buf[i]);
    }
    if (j->guard_fd >= 0)
        close(j->guard_fd);
    if (j->meta->holder_child > 0)
        kill((pid_t)j->meta->holder_child, SIGKILL);
    munmap(j->sh, sizeof(dh_shared_t));
    munmap(j->meta, sizeof(meta_t));
    free(j);
}
