/* coll-agent's logger (agent_log.h). */
#define _GNU_SOURCE
#include "agent_log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static agent_log_level_t log_level = AGENT_LOG_INFO;
static char log_pod[128];
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;

void agent_log_init(const char *level_name, const char *pod)
{
    if (level_name) {
        if (strcasecmp(level_name, "debug") == 0)
            log_level = AGENT_LOG_DEBUG;
        else if (strcasecmp(level_name, "warn") == 0)
            log_level = AGENT_LOG_WARN;
        else if (strcasecmp(level_name, "error") == 0)
            log_level = AGENT_LOG_ERROR;
        else if (strcasecmp(level_name, "off") == 0) /* nothing (the fuzz targets) */
            log_level = (agent_log_level_t)(AGENT_LOG_ERROR + 1);
        else
            log_level = AGENT_LOG_INFO;
    }
    if (pod)
        snprintf(log_pod, sizeof(log_pod), "%s", pod);
}

void agent_log(agent_log_level_t level, const char *id, const char *fmt, ...)
{
    static const char *names[] = {"DEBUG", "INFO", "WARN", "ERROR"};
    char ts[40], msg[2048];
    va_list ap;
    if (level < log_level)
        return;
    agent_rfc3339_now(ts, sizeof(ts));
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    /* one line per event: no embedded newlines from library or server messages */
    for (char *p = msg; *p; p++)
        if (*p == '\n' || *p == '\r')
            *p = ' ';
    pthread_mutex_lock(&log_mu);
    fprintf(stderr, "%s coll-agent[%d] %s %s%s%s %s\n", ts, (int)getpid(), names[level], id,
            log_pod[0] ? " pod=" : "", log_pod, msg);
    fflush(stderr);
    pthread_mutex_unlock(&log_mu);
}

void agent_rfc3339_now(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int64_t agent_rfc3339_s(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = s ? strptime(s, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
    if (!end)
        return -1;
    if (*end == '.') /* fractional seconds (MicroTime) */
        while (*++end >= '0' && *end <= '9')
            ;
    if (*end != 'Z' || end[1] != '\0')
        return -1;
    return (int64_t)timegm(&tm);
}
