/* kcoll's NCCL face (libnccl.so.2): NVIDIA's nccl.h implemented on coll.h only. Every public
 * name of NCCL 2.28.9 is exported (with its pnccl alias); types and values are nccl.h's own, as
 * this layer is compiled against the real header. Internal to nccl/. */
#ifndef KCOLL_NCCL_COMPAT_H
#define KCOLL_NCCL_COMPAT_H

#include <nccl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "coll.h"

/* nccl.h declares these without a prototype; these are the same functions, with one. */
ncclResult_t ncclGroupStart(void);
ncclResult_t pncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);
ncclResult_t pncclGroupEnd(void);
void ncclResetDebugInit(void);
void pncclResetDebugInit(void);

/* The NCCL API level this library implements (it is compiled against that nccl.h). */
#define KCOLL_NCCL_API_CODE NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH)

/* Export name and its profiling alias pname (NCCL's PMPI-style interface). */
#define KCOLL_NCCL_ALIAS(name)                                                                     \
    extern __typeof__(name) p##name __attribute__((alias(#name), visibility("default")))
#define KCOLL_NCCL_API __attribute__((visibility("default")))

/* What an ncclComm_t points to. */
struct ncclComm {
    coll_comm_t coll;          /* NULL until a non-blocking creation finished */
    int cuda_device;           /* the CUDA device current at creation (0 without CUDA) */
    int init_pending;          /* non-blocking creation still running (atomic) */
    ncclResult_t init_rc;      /* its result once it finished */
    void *init_thread;         /* pthread_t *, joined by the first call that needs the result */
    pthread_mutex_t join_lock; /* one joiner: the watchdog polls while the main thread calls */
    char init_msg[1024];       /* the non-blocking creation's error message */
    /* an abort while the creation runs abandons it: the creating thread then ends what it
     * made and frees this (state_lock: between the two) */
    pthread_mutex_t state_lock;
    int abandoned;
    int pid; /* the process that made it: a child forked while its creation ran has no creator */
    int revoked, finalized; /* by ncclCommRevoke, ncclCommFinalize: neither may come again */
};

/* comm.c: ncclGroupStart and ncclGroupEnd (rc: its result) tell the communicators made inside
 * a group: a split with NCCL_SPLIT_NOCOLOR gives a NULL communicator at the group's end. */
void nccl_group_started(void);
void nccl_group_ended(ncclResult_t rc);

/* kcoll's result as the NCCL result a framework expects. */
ncclResult_t nccl_result(coll_result_t r);
/* Record an error of this layer as kcoll's last error (so ncclGetLastError says it) and return
 * code. */
ncclResult_t nccl_error(ncclResult_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* rc, a call this layer refused (its own checks, or a creation that failed): inside a group it
 * fails the group, as a refused kcoll call does and as in NCCL, so that ncclGroupEnd runs none
 * of the group's calls and returns the error again. ncclSuccess and ncclInProgress pass. */
ncclResult_t nccl_refused(ncclResult_t rc);
/* The kcoll communicator behind comm, or an error (NULL comm, creation still running or failed). */
ncclResult_t nccl_comm(ncclComm_t comm, const char *fn, coll_comm_t *out);
/* NCCL's datatype as kcoll's; an error naming fn for float8 and out-of-range values. */
ncclResult_t nccl_datatype(ncclDataType_t dt, const char *fn, coll_datatype_t *out);
/* Bytes of one element of an NCCL datatype (0 for an invalid one). */
size_t nccl_datatype_size(ncclDataType_t dt);
/* The first line NCCL_DEBUG=VERSION asks for (once per process). */
void nccl_banner(void);
/* A WARN line when another libnccl.so* than this library is loaded in the process. */
void nccl_warn_other_copies(void);
/* config.c: the config fields beyond blocking, answered (netName refused when it names a
 * network kcoll has not, or WARNed when it differs from the process's; the others INFO once). */
ncclResult_t nccl_config_audit(const ncclConfig_t *config, const char *fn);
/* The calling thread's CUDA device when the process uses CUDA, else 0. */
int nccl_current_device(void);

#endif
