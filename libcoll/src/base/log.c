/* Logging: COLL_DEBUG selects the level, COLL_DEBUG_SUBSYS the subsystems, COLL_DEBUG_FILE the
 * sink (stderr by default). Each line carries host, pid and rank. The level and sink are the
 * only process-wide logging state, set up once. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>
#include <unistd.h>

#include "base/envmap.h"
#include "base/log.h"
#include "coll.h"

static struct {
    pthread_once_t once;
    colli_log_level_t level;
    uint32_t subsys;
    char host[64];
    FILE *sink; /* COLL_DEBUG_FILE, or NULL: stderr */
    pthread_mutex_t lock;
} log_state = {PTHREAD_ONCE_INIT, COLLI_LOG_WARN, ~0u, "", NULL, PTHREAD_MUTEX_INITIALIZER};

static _Thread_local int log_rank = -1;

static void write_line(const char *line);

static const struct {
    const char *name;
    uint32_t bit;
} subsys_names[] = {
    {"INIT", COLLI_SUB_INIT}, {"BOOT", COLLI_SUB_BOOT},   {"COLL", COLLI_SUB_COLL},
    {"NET", COLLI_SUB_NET},   {"SHM", COLLI_SUB_SHM},     {"IB", COLLI_SUB_IB},
    {"CUDA", COLLI_SUB_CUDA}, {"AGENT", COLLI_SUB_AGENT}, {"CONFIG", COLLI_SUB_CONFIG},
};

static const char *subsys_name(colli_subsys_t sub)
{
    for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
        if (subsys_names[i].bit == (uint32_t)sub)
            return subsys_names[i].name;
    return "?";
}

/* A COLL_* logging variable, else its NCCL twin (NCCL_DEBUG, NCCL_DEBUG_SUBSYS); *nccl says
 * which. */
static const char *log_env(const char *coll, bool *nccl)
{
    const char *v = secure_getenv(coll), *raw = NULL;
    *nccl = false;
    if (v != NULL && *v != '\0')
        return v;
    const colli_env_alias_t *alias = colli_env_alias(coll);
    v = alias != NULL ? colli_env_nccl_value(alias, &raw) : NULL;
    *nccl = v != NULL;
    return v;
}

/* NCCL's subsystem names that differ from kcoll's; NCCL's others (GRAPH, TUNING, ...) mean
 * nothing here and are skipped. */
static const char *nccl_subsys(const char *tok)
{
    return strcasecmp(tok, "BOOTSTRAP") == 0 ? "BOOT"
           : strcasecmp(tok, "ENV") == 0     ? "CONFIG"
                                             : tok;
}

/* pattern with NCCL's %h (host) and %p (pid) expanded, %% a percent sign; false when too long */
static bool expand_path(const char *pattern, char *out, size_t len)
{
    size_t n = 0;
    for (const char *p = pattern; *p != '\0'; p++) {
        char num[24];
        const char *add = num;
        if (p[0] == '%' && p[1] == 'h') {
            add = log_state.host;
            p++;
        } else if (p[0] == '%' && p[1] == 'p') {
            snprintf(num, sizeof(num), "%d", (int)getpid());
            p++;
        } else if (p[0] == '%' && p[1] == '%') {
            snprintf(num, sizeof(num), "%%");
            p++;
        } else {
            snprintf(num, sizeof(num), "%c", *p);
        }
        size_t k = strlen(add);
        if (n + k >= len)
            return false;
        memcpy(out + n, add, k);
        n += k;
    }
    out[n] = '\0';
    return true;
}

/* The log goes to the file COLL_DEBUG_FILE names (created or emptied, as NCCL does with
 * NCCL_DEBUG_FILE); when it cannot be opened, one WARN on stderr and the log stays there. */
static void open_sink(const char *pattern, const char *var)
{
    char path[4096];
    if (!expand_path(pattern, path, sizeof(path))) {
        fprintf(stderr,
                "%s:%d kcoll WARN CONFIG %s is longer than %zu bytes once expanded; "
                "logging to stderr\n",
                log_state.host, (int)getpid(), var, sizeof(path) - 1);
        return;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (f == NULL) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        fprintf(stderr,
                "%s:%d kcoll WARN CONFIG %s=%s: cannot open %s: %s; logging to stderr (name a "
                "file in a writable folder; %%h is the host, %%p the pid)\n",
                log_state.host, (int)getpid(), var, pattern, path, strerror(e));
        return;
    }
    log_state.sink = f;
}

static void log_init(void)
{
    bool nccl = false;
    const char *lvl = log_env("COLL_DEBUG", &nccl);
    if (lvl != NULL && *lvl != '\0') {
        if (strcasecmp(lvl, "NONE") == 0 || strcasecmp(lvl, "OFF") == 0)
            log_state.level = COLLI_LOG_NONE;
        else if (strcasecmp(lvl, "WARN") == 0 || strcasecmp(lvl, "VERSION") == 0)
            log_state.level = COLLI_LOG_WARN;
        else if (strcasecmp(lvl, "INFO") == 0)
            log_state.level = COLLI_LOG_INFO;
        else if (strcasecmp(lvl, "TRACE") == 0 || strcasecmp(lvl, "DEBUG") == 0)
            log_state.level = COLLI_LOG_TRACE;
        else
            fprintf(stderr,
                    "kcoll WARN %s=%s not understood (use WARN, INFO or TRACE); keeping WARN\n",
                    nccl ? "NCCL_DEBUG" : "COLL_DEBUG", lvl);
    }
    const char *subs = log_env("COLL_DEBUG_SUBSYS", &nccl);
    if (subs != NULL && *subs != '\0') {
        /* "INIT,NET" selects; "^NET" deselects from ALL. */
        bool invert = subs[0] == '^';
        uint32_t mask = 0;
        char buf[256];
        snprintf(buf, sizeof(buf), "%s", subs + (invert ? 1 : 0));
        char *save = NULL;
        for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
            if (strcasecmp(tok, "ALL") == 0) {
                mask = ~0u;
                continue;
            }
            bool found = false;
            if (nccl)
                tok = (char *)nccl_subsys(tok);
            for (size_t i = 0; i < sizeof(subsys_names) / sizeof(subsys_names[0]); i++)
                if (strcasecmp(tok, subsys_names[i].name) == 0) {
                    mask |= subsys_names[i].bit;
                    found = true;
                }
            if (!found && !nccl)
                fprintf(stderr,
                        "kcoll WARN COLL_DEBUG_SUBSYS: unknown subsystem '%s' (known: "
                        "INIT,BOOT,COLL,NET,SHM,IB,CUDA,AGENT,CONFIG,ALL)\n",
                        tok);
        }
        log_state.subsys = invert ? ~mask : mask;
    }
    if (gethostname(log_state.host, sizeof(log_state.host) - 1) != 0)
        snprintf(log_state.host, sizeof(log_state.host), "unknown-host");
    const char *file = log_env("COLL_DEBUG_FILE", &nccl);
    if (file != NULL && *file != '\0')
        open_sink(file, nccl ? "NCCL_DEBUG_FILE" : "COLL_DEBUG_FILE");
}

bool colli_log_enabled(colli_log_level_t level, colli_subsys_t sub)
{
    pthread_once(&log_state.once, log_init);
    /* WARN lines are never filtered by subsystem: an error must always be seen. */
    if (level == COLLI_LOG_WARN)
        return log_state.level >= COLLI_LOG_WARN;
    return log_state.level >= level && (log_state.subsys & (uint32_t)sub) != 0;
}

void colli_log_set_rank(int rank)
{
    log_rank = rank;
}

int colli_log_get_rank(void)
{
    return log_rank;
}

void colli_log(colli_log_level_t level, colli_subsys_t sub, const char *fmt, ...)
{
    if (!colli_log_enabled(level, sub))
        return;
    static const char *names[] = {"NONE", "WARN", "INFO", "TRACE"};
    char line[2400];
    int n;
    if (log_rank >= 0)
        n = snprintf(line, sizeof(line), "%s:%d:rank %d kcoll %s %s ", log_state.host,
                     (int)getpid(), log_rank, names[level], subsys_name(sub));
    else
        n = snprintf(line, sizeof(line), "%s:%d kcoll %s %s ", log_state.host, (int)getpid(),
                     names[level], subsys_name(sub));
    if (n < 0)
        return;
    if ((size_t)n < sizeof(line)) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
        va_end(ap);
    }
    write_line(line);
}

/* One whole line to the sink. */
static void write_line(const char *line)
{
    FILE *out = log_state.sink != NULL ? log_state.sink : stderr;
    pthread_mutex_lock(&log_state.lock);
    fprintf(out, "%s\n", line);
    fflush(out);
    pthread_mutex_unlock(&log_state.lock);
}

void coll_log_text(const char *text)
{
    pthread_once(&log_state.once, log_init);
    if (text != NULL)
        write_line(text);
}
