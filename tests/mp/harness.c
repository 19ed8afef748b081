#define _GNU_SOURCE
#include "harness.h"

#include <ctype.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gpu_plugin.h"

int mp_rank = -1;
long mp_passed;
long mp_failed;

/* What a child leaves for the parent. */
typedef struct report {
    long passed[MP_MAX_RANKS];
    long failed[MP_MAX_RANKS];
    long reported[MP_MAX_RANKS];
    long id_state; /* 0: not yet, 1: id is valid, -1: the parent could not create one */
    coll_unique_id_t id;
} report_t;

static const char *who(char *buf, size_t len)
{
    if (mp_rank < 0)
        snprintf(buf, len, "[parent]");
    else
        snprintf(buf, len, "[rank %d]", mp_rank);
    return buf;
}

void mp_log(const char *fmt, ...)
{
    char w[32], line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    /* One write per line so that lines of different ranks do not interleave. */
    char out[2100];
    int n = snprintf(out, sizeof(out), "%s %s\n", who(w, sizeof(w)), line);
    if (n > (int)sizeof(out) - 1)
        n = (int)sizeof(out) - 1;
    if (write(STDOUT_FILENO, out, (size_t)n) < 0) {
        /* nothing sensible to do */
    }
}

void mp_init(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!getenv("COLL_SOCKET_IFNAME"))
        setenv("COLL_SOCKET_IFNAME", "lo", 0);
}

int mp_finish(void)
{
    printf("%ld passed, %ld failed\n", mp_passed, mp_failed);
    fflush(stdout);
    return mp_failed ? 1 : 0;
}

void mp_pass(void)
{
    mp_passed++;
}

void mp_fail(const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    mp_failed++;
    mp_log("FAIL: %s", line);
}

void mp_check(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
{
    if (ok) {
        mp_passed++;
        return;
    }
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mp_failed++;
    const char *base = strrchr(file, '/');
    mp_log("FAIL %s:%d: %s (%s)", base ? base + 1 : file, line, msg, expr);
}

const char *mp_result_name(coll_result_t rc)
{
    switch (rc) {
#define NAME_(name, val, str)                                                                      \
    case COLL_##name:                                                                              \
        return "COLL_" #name;
        COLL_RESULT_MAP(NAME_)
#undef NAME_
    default:
        return "(out-of-range result)";
    }
}

int mp_check_rc(coll_result_t rc, coll_result_t expected, const char *file, int line,
                const char *fmt, ...)
{
    if (rc == expected) {
        mp_passed++;
        return 1;
    }
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    mp_failed++;
    const char *base = strrchr(file, '/');
    mp_log("FAIL %s:%d: %s: expected %s, got %s (%d); last error: \"%s\"", base ? base + 1 : file,
           line, msg, mp_result_name(expected), mp_result_name(rc), (int)rc, coll_get_last_error());
    return 0;
}

double mp_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

void mp_sleep(double seconds)
{
    struct timespec ts;
    ts.tv_sec = (time_t)seconds;
    ts.tv_nsec = (long)((seconds - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int mp_contains(const char *haystack, const char *needle)
{
    if (!haystack || !needle)
        return 0;
    return strcasestr(haystack, needle) != NULL;
}

static const char *skip_seps(const char *p)
{
    for (;;) {
        if (*p == ' ' || *p == ':' || *p == '=' || *p == '#' || *p == ',' || *p == '[' ||
            *p == '(' || *p == '{' || *p == '\t') {
            p++;
        } else if (strncasecmp(p, "and ", 4) == 0) {
            p += 4;
        } else {
            return p;
        }
    }
}

int mp_mentions_rank(const char *msg, int r)
{
    if (!msg)
        return 0;
    const char *p = msg;
    while ((p = strcasestr(p, "rank")) != NULL) {
        p += 4;
        if (*p == 's' || *p == 'S')
            p++;
        if (strncmp(p, "(s)", 3) == 0)
            p += 3;
        /* a list of numbers: "2", "1, 2", "[0,2]", "1 and 2", "1-3" */
        for (;;) {
            p = skip_seps(p);
            if (!isdigit((unsigned char)*p))
                break;
            char *end;
            long v = strtol(p, &end, 10);
            p = end;
            if (*p == '-' && isdigit((unsigned char)p[1])) {
                long hi = strtol(p + 1, &end, 10);
                p = end;
                if (r >= v && r <= hi)
                    return 1;
            } else if (v == r) {
                return 1;
            }
            /* keep going only through list separators */
            const char *q = skip_seps(p);
            if (q == p || !isdigit((unsigned char)*q))
                break;
        }
    }
    return 0;
}

int mp_env_int(const char *name, int def)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return def;
    char *end;
    long v = strtol(s, &end, 10);
    if (*end != '\0')
        return def;
    return (int)v;
}

/* ---- buffers with guards ---- */

static unsigned char guard_byte(size_t i)
{
    return (unsigned char)(0xA5 ^ (i * 29));
}

/* The fake GPU's table under MP_MEM=fakegpu, else NULL (loaded once per process). */
static const colli_gpu_ops_t *fake_gpu(void)
{
    static int loaded;
    static const colli_gpu_ops_t *ops;
    if (loaded)
        return ops;
    loaded = 1;
    const char *mem = getenv("MP_MEM"), *lib = getenv("COLL_CUDA_PLUGIN"), *why = "unset";
    if (mem == NULL || strcmp(mem, "fakegpu") != 0)
        return NULL;
    if (lib == NULL || (ops = colli_gpu_plugin_open(lib, &why)) == NULL) {
        mp_fail("MP_MEM=fakegpu needs COLL_CUDA_PLUGIN naming the fake GPU plugin (%s)", why);
        abort();
    }
    return ops;
}

void mp_dev_sync(void)
{
    const colli_gpu_ops_t *o = fake_gpu();
    if (o != NULL && o->stream_sync(NULL) != 0) {
        mp_fail("stream_sync of the default stream failed");
        abort();
    }
}

void *mp_buf_alloc(mp_buf_t *b, size_t bytes, int fill)
{
    b->bytes = bytes;
    const char *mem = getenv("MP_MEM");
    const colli_gpu_ops_t *gpu = fake_gpu();
    b->device = gpu != NULL;
    b->shared = mem != NULL &&
                (strcmp(mem, "coll") == 0 || (strcmp(mem, "coll-odd") == 0 && mp_rank % 2 == 1));
    if (b->shared) {
        void *p = NULL;
        coll_result_t rc = coll_mem_alloc(&p, bytes + 2 * MP_GUARD_BYTES);
        if (rc != COLL_SUCCESS) {
            mp_fail("coll_mem_alloc of %zu bytes: %s", bytes, coll_get_last_error());
            abort();
        }
        b->base = p;
    } else if (gpu != NULL) {
        void *p = NULL;
        b->base = gpu->dev_alloc(&p, bytes + 2 * MP_GUARD_BYTES) == 0 ? p : NULL;
    } else {
        b->base = malloc(bytes + 2 * MP_GUARD_BYTES);
    }
    if (!b->base) {
        mp_fail("out of memory allocating %zu bytes", bytes);
        abort();
    }
    b->p = b->base + MP_GUARD_BYTES;
    for (size_t i = 0; i < MP_GUARD_BYTES; i++) {
        b->base[i] = guard_byte(i);
        b->p[bytes + i] = guard_byte(i + 7);
    }
    memset(b->p, fill, bytes);
    return b->p;
}

int mp_buf_guards_ok(const mp_buf_t *b, const char *what)
{
    for (size_t i = 0; i < MP_GUARD_BYTES; i++) {
        if (b->base[i] != guard_byte(i)) {
            mp_log("  %s: guard byte %zd before the buffer was overwritten (0x%02x)", what,
                   (ssize_t)i - MP_GUARD_BYTES, b->base[i]);
            return 0;
        }
        if (b->p[b->bytes + i] != guard_byte(i + 7)) {
            mp_log("  %s: guard byte %zu after the end of the buffer (%zu bytes) was "
                   "overwritten (0x%02x)",
                   what, i, b->bytes, b->p[b->bytes + i]);
            return 0;
        }
    }
    return 1;
}

void mp_buf_free(mp_buf_t *b)
{
    if (b->shared) {
        if (coll_mem_free(b->base) != COLL_SUCCESS)
            mp_fail("coll_mem_free: %s", coll_get_last_error());
    } else if (b->device) {
        if (fake_gpu()->dev_free(b->base) != 0)
            mp_fail("dev_free of the fake GPU failed");
    } else {
        free(b->base);
    }
    b->base = b->p = NULL;
    b->bytes = 0;
}

/* ---- processes ---- */

static void child_main(const mp_opts_t *o, int rank, void *shared, report_t *rep)
{
    mp_rank = rank;
    mp_passed = 0;
    mp_failed = 0;
    /* wait for the parent's unique id */
    double until = mp_now() + 60;
    long st;
    while ((st = __atomic_load_n(&rep->id_state, __ATOMIC_SEQ_CST)) == 0 && mp_now() < until)
        mp_sleep(0.001);
    if (st != 1) {
        if (st == 0)
            mp_fail("%s: no unique id from the parent after 60 s", o->name);
        fflush(stdout);
        _exit(3);
    }
    coll_unique_id_t id = rep->id;
    mp_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    ctx.rank = rank;
    ctx.nranks = o->nranks;
    ctx.id = id;
    ctx.shared = shared;
    ctx.arg = o->arg;
    if (!o->manual_init) {
        coll_comm_t comm = NULL;
        coll_result_t rc = coll_comm_init_rank(&comm, o->nranks, id, rank);
        if (!CHECK_RC(rc, COLL_SUCCESS, "%s: coll_comm_init_rank(nranks=%d, rank=%d)", o->name,
                      o->nranks, rank)) {
            goto out;
        }
        ctx.comm = comm;
    }
    o->body(&ctx);
    if (ctx.comm) {
        if (ctx.fatal) {
            coll_result_t rc = coll_comm_abort(ctx.comm);
            CHECK_RC(rc, COLL_SUCCESS, "%s: coll_comm_abort after a failure", o->name);
        } else {
            coll_result_t rc = coll_comm_destroy(ctx.comm);
            CHECK_RC(rc, COLL_SUCCESS, "%s: coll_comm_destroy", o->name);
        }
    }
out:
    rep->passed[rank] = mp_passed;
    rep->failed[rank] = mp_failed;
    __atomic_store_n(&rep->reported[rank], 1, __ATOMIC_SEQ_CST);
    fflush(stdout);
    fflush(stderr);
    _exit(mp_failed ? 1 : 0);
}

/* MP_GDB_ON_HANG=1: print every thread's stack of a hung rank before killing it. */
static void dump_stacks(int rank, pid_t pid)
{
    char cmd[256];
    mp_log("rank %d (pid %d) hung; its threads:", rank, (int)pid);
    snprintf(cmd, sizeof(cmd),
             "gdb -q -batch -p %d -ex 'thread apply all bt 30' 2>&1 | grep -E '^(Thread|#)'",
             (int)pid);
    if (system(cmd) != 0)
        mp_log("(gdb failed)");
}

long mp_run(const mp_opts_t *o)
{
    long failed_before = mp_failed;
    const char *name = o->name ? o->name : "test";
    if (o->nranks < 1 || o->nranks > MP_MAX_RANKS) {
        mp_fail("%s: bad nranks %d in the test itself", name, o->nranks);
        return 1;
    }
    void *shared =
        mmap(NULL, MP_SHARED_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    report_t *rep =
        mmap(NULL, sizeof(report_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED || rep == MAP_FAILED) {
        mp_fail("%s: mmap: %s", name, strerror(errno));
        return 1;
    }
    memset(shared, 0, MP_SHARED_BYTES);
    memset(rep, 0, sizeof(*rep));

    /*
     * Fork first, then create the unique id (which starts the bootstrap root thread in this
     * process) and hand it to the children through shared memory: a fork while a library
     * thread runs can copy a lock held by that thread into the child (seen with the ASan
     * allocator: children deadlocked in calloc), so no fork happens after the id exists.
     */
    pid_t pids[MP_MAX_RANKS];
    int exited[MP_MAX_RANKS];
    int status[MP_MAX_RANKS];
    int hung[MP_MAX_RANKS];
    memset(exited, 0, sizeof(exited));
    memset(hung, 0, sizeof(hung));
    memset(status, 0, sizeof(status));
    fflush(stdout);
    fflush(stderr);
    for (int r = 0; r < o->nranks; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            mp_fail("%s: fork: %s", name, strerror(errno));
            for (int k = 0; k < r; k++)
                kill(pids[k], SIGKILL);
            for (int k = 0; k < r; k++)
                waitpid(pids[k], NULL, 0);
            munmap(shared, MP_SHARED_BYTES);
            munmap(rep, sizeof(*rep));
            return mp_failed - failed_before;
        }
        if (pid == 0)
            child_main(o, r, shared, rep);
        pids[r] = pid;
    }

    coll_unique_id_t id;
    memset(&id, 0, sizeof(id));
    coll_result_t rc = o->no_id ? COLL_SUCCESS : coll_get_unique_id_ifname(&id, "lo");
    if (CHECK_RC(rc, COLL_SUCCESS, "%s: coll_get_unique_id_ifname(\"lo\")", name)) {
        rep->id = id;
        __atomic_store_n(&rep->id_state, 1, __ATOMIC_SEQ_CST);
    } else {
        __atomic_store_n(&rep->id_state, -1, __ATOMIC_SEQ_CST);
        for (int r = 0; r < o->nranks; r++)
            waitpid(pids[r], NULL, 0);
        munmap(shared, MP_SHARED_BYTES);
        munmap(rep, sizeof(*rep));
        return mp_failed - failed_before;
    }

    mp_parent_t par = {o->nranks, pids, exited, shared, o->arg};
    double deadline = mp_now() + (o->deadline_s > 0 ? o->deadline_s : 60);
    int left = o->nranks;
    while (left > 0) {
        for (int r = 0; r < o->nranks; r++) {
            if (exited[r])
                continue;
            pid_t w = waitpid(pids[r], &status[r], WNOHANG);
            if (w == pids[r]) {
                exited[r] = 1;
                left--;
            }
        }
        if (left == 0)
            break;
        if (o->parent_poll)
            o->parent_poll(&par);
        if (mp_now() > deadline) {
            for (int r = 0; r < o->nranks; r++) {
                if (!exited[r]) {
                    hung[r] = 1;
                    if (getenv("MP_GDB_ON_HANG"))
                        dump_stacks(r, pids[r]);
                    kill(pids[r], SIGKILL);
                }
            }
            for (int r = 0; r < o->nranks; r++) {
                if (!exited[r]) {
                    waitpid(pids[r], &status[r], 0);
                    exited[r] = 1;
                }
            }
            left = 0;
            break;
        }
        mp_sleep(0.002);
    }

    for (int r = 0; r < o->nranks; r++) {
        int st = status[r];
        if (rep->reported[r]) {
            mp_passed += rep->passed[r];
            mp_failed += rep->failed[r];
        }
        if (hung[r]) {
            mp_fail("%s: rank %d still running after the %.0f s deadline (hang); killed", name, r,
                    o->deadline_s);
        } else if (WIFSIGNALED(st)) {
            if (WTERMSIG(st) == SIGKILL && r == o->expect_sigkill_rank) {
                mp_passed++;
            } else {
                mp_fail("%s: rank %d died from signal %d (%s)", name, r, WTERMSIG(st),
                        strsignal(WTERMSIG(st)));
            }
        } else if (WIFEXITED(st)) {
            if (r == o->expect_sigkill_rank && o->expect_sigkill_rank >= 0) {
                mp_fail("%s: rank %d was expected to be killed but exited with %d", name, r,
                        WEXITSTATUS(st));
            } else if (!rep->reported[r]) {
                mp_fail("%s: rank %d exited with status %d without reporting (crash in exit "
                        "path or sanitizer report?)",
                        name, r, WEXITSTATUS(st));
            } else if (WEXITSTATUS(st) != 0 && rep->failed[r] == 0) {
                mp_fail("%s: rank %d exited with status %d", name, r, WEXITSTATUS(st));
            }
        }
    }
    if (o->parent_done)
        o->parent_done(&par);
    munmap(shared, MP_SHARED_BYTES);
    munmap(rep, sizeof(*rep));
    return mp_failed - failed_before;
}
