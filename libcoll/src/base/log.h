/* Logging: coll_warn / coll_info / coll_debug by subsystem, selected by COLL_DEBUG and
 * COLL_DEBUG_SUBSYS. The level and sink are set up once per process (log.c). */
#ifndef COLLI_LOG_H
#define COLLI_LOG_H

#include <stdbool.h>

typedef enum {
    COLLI_SUB_INIT = 1u << 0,
    COLLI_SUB_BOOT = 1u << 1,
    COLLI_SUB_COLL = 1u << 2,
    COLLI_SUB_NET = 1u << 3,
    COLLI_SUB_SHM = 1u << 4,
    COLLI_SUB_IB = 1u << 5,
    COLLI_SUB_CUDA = 1u << 6,
    COLLI_SUB_AGENT = 1u << 7,
    COLLI_SUB_CONFIG = 1u << 8,
} colli_subsys_t;

typedef enum {
    COLLI_LOG_NONE = 0,
    COLLI_LOG_WARN = 1,
    COLLI_LOG_INFO = 2,
    COLLI_LOG_TRACE = 3,
} colli_log_level_t;

bool colli_log_enabled(colli_log_level_t level, colli_subsys_t sub);
void colli_log(colli_log_level_t level, colli_subsys_t sub, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Rank shown in the prefix of this thread's log lines (-1: none). */
void colli_log_set_rank(int rank);
int colli_log_get_rank(void);

#define coll_warn(SUB, ...) colli_log(COLLI_LOG_WARN, COLLI_SUB_##SUB, __VA_ARGS__)
#define coll_info(SUB, ...)                                                                        \
    do {                                                                                           \
        if (colli_log_enabled(COLLI_LOG_INFO, COLLI_SUB_##SUB))                                    \
            colli_log(COLLI_LOG_INFO, COLLI_SUB_##SUB, __VA_ARGS__);                               \
    } while (0)
#define coll_debug(SUB, ...)                                                                       \
    do {                                                                                           \
        if (colli_log_enabled(COLLI_LOG_TRACE, COLLI_SUB_##SUB))                                   \
            colli_log(COLLI_LOG_TRACE, COLLI_SUB_##SUB, __VA_ARGS__);                              \
    } while (0)

#endif
