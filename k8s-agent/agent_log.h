/*
 * coll-agent's one logger, for every mode (sidecar, standalone, webhook): one line per event on
 * stderr, "TIME coll-agent[PID] LEVEL ID pod=NAME message", with a stable ID (docs/agent.md, "Log
 * IDs"). Needs nothing but libc and pthreads, so the webhook links it without the rest of the
 * agent.
 */
#ifndef AGENT_LOG_H
#define AGENT_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    AGENT_LOG_DEBUG = 0,
    AGENT_LOG_INFO,
    AGENT_LOG_WARN,
    AGENT_LOG_ERROR
} agent_log_level_t;

/* level_name: debug, info, warn, error or off (NULL keeps the level; default info); pod: the
 * pod=NAME field (NULL keeps it; default none). */
void agent_log_init(const char *level_name, const char *pod);
void agent_log(agent_log_level_t level, const char *id, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define agent_debug(id, ...) agent_log(AGENT_LOG_DEBUG, id, __VA_ARGS__)
#define agent_info(id, ...)  agent_log(AGENT_LOG_INFO, id, __VA_ARGS__)
#define agent_warn(id, ...)  agent_log(AGENT_LOG_WARN, id, __VA_ARGS__)
#define agent_error(id, ...) agent_log(AGENT_LOG_ERROR, id, __VA_ARGS__)

/* UTC now as RFC 3339 ("2026-01-02T03:04:05Z"): log lines, status and Event times. */
void agent_rfc3339_now(char *buf, size_t len);
/* RFC 3339 as the API server writes it ("2026-11-29T12:03:11Z", fractional seconds allowed) to
 * epoch seconds; -1 if s is NULL or not such a time. */
int64_t agent_rfc3339_s(const char *s);

#endif /* AGENT_LOG_H */
