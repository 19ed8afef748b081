/* Result strings (from the one X-macro table), per-thread last error, version. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"

static _Thread_local char last_error[2048];

const char *coll_get_error_string(coll_result_t result)
{
    switch (result) {
#define COLL_RESULT_STR_(name, val, str)                                                           \
    case COLL_##name:                                                                              \
        return str;
        COLL_RESULT_MAP(COLL_RESULT_STR_)
#undef COLL_RESULT_STR_
    default:
        return "unknown result";
    }
}

const char *coll_get_last_error(void)
{
    return last_error;
}

const char *colli_last_error(void)
{
    return last_error;
}

void colli_set_last_error(const char *msg)
{
    if (msg != last_error)
        snprintf(last_error, sizeof(last_error), "%s", msg);
}

coll_result_t colli_error(colli_subsys_t sub, coll_result_t code, const char *fmt, ...)
{
    char msg[sizeof(last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    snprintf(last_error, sizeof(last_error), "%s", msg);
    /* the class first ("version mismatch: ..."), unless the text says it already */
    const char *cls = coll_get_error_string(code);
    if (strstr(msg, cls) != NULL)
        colli_log(COLLI_LOG_WARN, sub, "%s", msg);
    else
        colli_log(COLLI_LOG_WARN, sub, "%s: %s", cls, msg);
    return code;
}

coll_result_t coll_get_version(int *version)
{
    if (version == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_get_version: version is NULL (pass a pointer to an int)");
    *version = COLL_VERSION;
    return COLL_SUCCESS;
}

const char *coll_get_version_string(void)
{
    return COLL_VERSION_STRING_BUILD;
}
