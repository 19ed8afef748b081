/* Errors: the one check macro, and colli_error for the place that decides an error (it logs the
 * error once at WARN and stores it as this thread's last error). Result codes and their strings
 * come from coll.h's X-macro table. */
#ifndef COLLI_ERROR_H
#define COLLI_ERROR_H

#include "base/log.h"
#include "coll.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "kcoll's wire format is little-endian; big-endian hosts are not supported"
#endif

#ifndef COLL_VERSION_STRING_BUILD
#define COLL_VERSION_STRING_BUILD "0.0.0-dev"
#endif

/* Evaluate expr (a coll_result_t); on failure store it in the local `status` and jump. */
#define COLL_CHECK_GOTO(expr, label)                                                               \
    do {                                                                                           \
        status = (expr);                                                                           \
        if (status != COLL_SUCCESS)                                                                \
            goto label;                                                                            \
    } while (0)

/* The place that decides an error calls this: it formats the message, stores it as this
 * thread's last error, logs it once at WARN, and returns code. */
coll_result_t colli_error(colli_subsys_t sub, coll_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Store a message as the last error without logging (the error was logged already). */
void colli_set_last_error(const char *msg);
/* The last error message of this thread, for callers that wrap it. */
const char *colli_last_error(void);
#define COLLI_ERR(SUB, code, ...) colli_error(COLLI_SUB_##SUB, code, __VA_ARGS__)

#endif
