/* The parts of the NCCL face that need no communicator: versions, results and their strings,
 * the last error, datatypes, memory, and the names of NCCL's device API, which kcoll does not
 * offer (they fail with ncclInvalidUsage and a message that says so). */
#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "nccl_compat.h"

/* This layer's own last error (per thread, like kcoll's), and whether it is newer than kcoll's:
 * every kcoll result passes through nccl_result, which hands the word back to kcoll. */
static _Thread_local char layer_error[1024];
static _Thread_local bool layer_newest;

ncclResult_t nccl_result(coll_result_t r)
{
    layer_newest = false;
    switch (r) {
    case COLL_SUCCESS:
        return ncclSuccess;
    case COLL_ERR_INVALID_ARGUMENT:
        return ncclInvalidArgument;
    case COLL_ERR_INVALID_USAGE:
    case COLL_ERR_MISMATCH: /* ranks called different collectives: a usage error */
    case COLL_ERR_VERSION:  /* ranks run different builds: fix the deployment */
    case COLL_ERR_UNSUPPORTED:
        return ncclInvalidUsage;
    case COLL_ERR_SYSTEM:
    case COLL_ERR_NETWORK:
        return ncclSystemError;
    case COLL_ERR_REMOTE:
    case COLL_ERR_TIMEOUT: /* NCCL 2.28 has no ncclTimeout: a peer that does not answer */
    case COLL_ERR_ABORTED:
        return ncclRemoteError;
    case COLL_ERR_CUDA:
        return ncclUnhandledCudaError;
    case COLL_IN_PROGRESS:
        return ncclInProgress;
    default:
        return ncclInternalError;
    }
}

ncclResult_t nccl_error(ncclResult_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(layer_error, sizeof(layer_error), fmt, ap);
    va_end(ap);
    layer_newest = true;
    char line[sizeof(layer_error) + 128];
    snprintf(line, sizeof(line), "kcoll NCCL WARN %s: %s", ncclGetErrorString(code), layer_error);
    coll_log_text(line); /* where kcoll logs: stderr or NCCL_DEBUG_FILE */
    return code;
}

/* nccl_compat.h */
ncclResult_t nccl_refused(ncclResult_t rc)
{
    if (rc == ncclSuccess || rc == ncclInProgress)
        return rc;
    const coll_result_t code = rc == ncclInvalidArgument      ? COLL_ERR_INVALID_ARGUMENT
                               : rc == ncclInvalidUsage       ? COLL_ERR_INVALID_USAGE
                               : rc == ncclRemoteError        ? COLL_ERR_REMOTE
                               : rc == ncclUnhandledCudaError ? COLL_ERR_CUDA
                               : rc == ncclSystemError        ? COLL_ERR_SYSTEM
                                                              : COLL_ERR_INTERNAL;
    (void)coll_group_fail(code, ncclGetLastError(NULL)); /* returns code: rc is the answer */
    return rc;
}

KCOLL_NCCL_API const char *ncclGetLastError(ncclComm_t comm)
{
    (void)comm;
    return layer_newest ? layer_error : coll_get_last_error();
}
KCOLL_NCCL_ALIAS(ncclGetLastError);

KCOLL_NCCL_API const char *ncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess:
        return "no error";
    case ncclUnhandledCudaError:
        return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError:
        return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
        return "internal error - please report this issue to the kcoll developers";
    case ncclInvalidArgument:
        return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage:
        return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError:
        return "remote process exited or there was a network error";
    case ncclInProgress:
        return "NCCL operation in progress";
    default:
        return "unknown result code";
    }
}
KCOLL_NCCL_ALIAS(ncclGetErrorString);

static void nccl_load_alias(void);

/* NCCL programs bound their waits themselves (PyTorch's watchdog aborts at its timeout) and make
 * a communicator's ranks when each first needs one, minutes apart: kcoll's defaults are NCCL's
 * contract in this library (no operation deadline, a long bootstrap); COLL_* variables and the
 * agent's pins still win. */
__attribute__((constructor)) static void nccl_defaults(void)
{
    (void)coll_set_defaults(COLL_DEFAULTS_NCCL); /* cannot fail: a valid choice */
    nccl_load_alias();
}

/* NCCL's unversioned name answered by kcoll wherever this library is: PaddlePaddle's loader
 * tries dlopen("libnccl.so") before "libnccl.so.2", TensorRT-LLM opens only "libnccl.so". A
 * preloaded libnccl.so.2 does not answer that name (the loader matches it against SONAMEs), so
 * NVIDIA's libnccl.so was loaded and used instead, before kcoll made any communicator that could
 * warn of it. libnccl-alias.so (SONAME libnccl.so, one dependency: this library) is loaded from
 * this library's folder when it is there; a libnccl.so.2 copied alone loads nothing. The handle
 * is kept: the name must answer for the process's life. */
static void nccl_load_alias(void)
{
    Dl_info self;
    if (dladdr((void *)nccl_load_alias, &self) == 0 || self.dli_fname == NULL)
        return;
    const char *slash = strrchr(self.dli_fname, '/');
    char path[PATH_MAX];
    int n = slash != NULL ? snprintf(path, sizeof(path), "%.*s/libnccl-alias.so",
                                     (int)(slash - self.dli_fname), self.dli_fname)
                          : -1;
    if (n < 0 || (size_t)n >= sizeof(path) || access(path, R_OK) != 0)
        return;
    if (dlopen(path, RTLD_NOW | RTLD_LOCAL) == NULL) {
        char line[PATH_MAX + 600];
        const char *why = dlerror();
        snprintf(line, sizeof(line),
                 "kcoll NCCL WARN %s did not load (%s), so a dlopen(\"libnccl.so\") may load "
                 "another NCCL: replace that file with the one built beside kcoll's libnccl.so.2",
                 path, why != NULL ? why : "no reason given");
        coll_log_text(line);
    }
}

KCOLL_NCCL_API ncclResult_t ncclGetVersion(int *version)
{
    if (version == NULL)
        return nccl_error(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    *version = KCOLL_NCCL_API_CODE;
    return ncclSuccess;
}
KCOLL_NCCL_ALIAS(ncclGetVersion);

/* NCCL_DEBUG=VERSION (or INFO, TRACE) prints one first line, once per process, saying that this
 * NCCL is kcoll, its version and the API level it implements. */
static pthread_once_t banner_once = PTHREAD_ONCE_INIT;

static void print_banner(void)
{
    const char *level = getenv("NCCL_DEBUG");
    if (level == NULL || (strcasecmp(level, "VERSION") != 0 && strcasecmp(level, "INFO") != 0 &&
                          strcasecmp(level, "TRACE") != 0))
        return;
    char line[160];
    snprintf(line, sizeof(line),
             "NCCL version %d.%d.%d+kcoll%s (kcoll %s implements the NCCL "
             "%d.%d.%d API)",
             NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, coll_get_version_string(),
             coll_get_version_string(), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH);
    coll_log_text(line);
}

void nccl_banner(void)
{
    pthread_once(&banner_once, print_banner);
}

/* Another NCCL in this process: a loaded object whose file name starts with libnccl.so that is
 * not this library's file (a dlopen by path of NVIDIA's: vLLM's VLLM_NCCL_SO_PATH, CuPy's wheel
 * lookup). Calls through it never reach kcoll, and a communicator handed from one to the other
 * is read as the wrong structure. */
typedef struct {
    char mine[PATH_MAX];
    char found[600];
    size_t used;
} other_nccls_t;

static int visit_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    other_nccls_t *o = arg;
    const char *name = info->dlpi_name, *base = name != NULL ? strrchr(name, '/') : NULL;
    base = base != NULL ? base + 1 : name;
    char real[PATH_MAX];
    if (base == NULL || strncmp(base, "libnccl.so", 10) != 0 || realpath(name, real) == NULL ||
        strcmp(real, o->mine) == 0 || o->used + strlen(real) + 3 >= sizeof(o->found))
        return 0;
    int n = snprintf(o->found + o->used, sizeof(o->found) - o->used, "%s%s",
                     o->used > 0 ? ", " : "", real);
    o->used += n > 0 ? (size_t)n : 0;
    return 0;
}

void nccl_warn_other_copies(void)
{
    other_nccls_t o = {.used = 0};
    Dl_info self;
    if (dladdr((void *)nccl_warn_other_copies, &self) == 0 || self.dli_fname == NULL ||
        realpath(self.dli_fname, o.mine) == NULL)
        return;
    (void)dl_iterate_phdr(visit_object, &o);
    if (o.used == 0)
        return;
    char line[sizeof(o.mine) + sizeof(o.found) + 400];
    snprintf(line, sizeof(line),
             "kcoll NCCL WARN another NCCL is loaded in this process beside kcoll's %s: %s. Calls "
             "made through it do not reach kcoll, and a communicator of one passed to the other "
             "fails or crashes. Preload kcoll's library (LD_PRELOAD) where a framework opens "
             "NCCL by path, or point its setting at kcoll's file (docs/nccl.md)",
             o.mine, o.found);
    coll_log_text(line);
}

/* kcoll's own version behind the NCCL API level: "kcoll 0.1.0". */
KCOLL_NCCL_API const char *kcollGetVersion(void);
const char *kcollGetVersion(void)
{
    return coll_get_version_string();
}

size_t nccl_datatype_size(ncclDataType_t dt)
{
    switch (dt) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return 1;
    case ncclFloat16:
    case ncclBfloat16:
        return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32:
        return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64:
        return 8;
    default:
        return 0;
    }
}

ncclResult_t nccl_datatype(ncclDataType_t dt, const char *fn, coll_datatype_t *out)
{
    static const int map[ncclNumTypes] = {
        [ncclInt8] = COLL_INT8,
        [ncclUint8] = COLL_UINT8,
        [ncclInt32] = COLL_INT32,
        [ncclUint32] = COLL_UINT32,
        [ncclInt64] = COLL_INT64,
        [ncclUint64] = COLL_UINT64,
        [ncclFloat16] = COLL_FLOAT16,
        [ncclFloat32] = COLL_FLOAT32,
        [ncclFloat64] = COLL_FLOAT64,
        [ncclBfloat16] = COLL_BFLOAT16,
        [ncclFloat8e4m3] = COLL_FLOAT8_E4M3,
        [ncclFloat8e5m2] = COLL_FLOAT8_E5M2,
    };
    if ((int)dt < 0 || dt >= ncclNumTypes)
        return nccl_error(ncclInvalidArgument, "%s: datatype %d is not an ncclDataType_t (0..%d)",
                          fn, (int)dt, ncclNumTypes - 1);
    *out = (coll_datatype_t)map[dt];
    return ncclSuccess;
}

/* ---- debug ---- */

/* Deprecated in nccl.h; kept because NCCL still exports it. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
KCOLL_NCCL_API void ncclResetDebugInit(void) {}
KCOLL_NCCL_ALIAS(ncclResetDebugInit);
#pragma GCC diagnostic pop
KCOLL_NCCL_API void ncclResetDebugInitInternal(void);
void ncclResetDebugInitInternal(void) {}
