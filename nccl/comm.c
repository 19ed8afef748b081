/* NCCL communicators on kcoll's: unique ids, creation (blocking, non-blocking, several at once,
 * split), destroy and abort, queries, and buffer registration (accepted, not needed by kcoll). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_compat.h"

#define CONFIG_MAGIC 0xcafebeefu

/* A child forked while comm's non-blocking creation ran: the creating thread is not in it, so
 * the creation never ends here (joining returns at once: glibc marks the threads a fork left
 * behind as ended), and the locks of comm may be held by the parent's threads. */
static bool forked_while_creating(const struct ncclComm *comm)
{
    return __atomic_load_n(&comm->init_pending, __ATOMIC_ACQUIRE) == 1 && getpid() != comm->pid;
}

static ncclResult_t forked_error(const struct ncclComm *comm, const char *fn)
{
    return nccl_error(ncclInvalidUsage,
                      "%s: this communicator's non-blocking creation was running in process %d "
                      "when this process (%d) was forked from it: it cannot complete here. "
                      "Create a communicator in this process (start workers with exec or "
                      "multiprocessing's 'spawn'); ncclCommDestroy or ncclCommAbort here only "
                      "lets go of the handle",
                      fn, comm->pid, (int)getpid());
}

ncclResult_t nccl_comm(ncclComm_t comm, const char *fn, coll_comm_t *out)
{
    if (comm == NULL)
        return nccl_error(ncclInvalidArgument, "%s: comm is NULL", fn);
    if (forked_while_creating(comm)) /* joining would wait for ever */
        return forked_error(comm, fn);
    if (__atomic_load_n(&comm->init_pending, __ATOMIC_ACQUIRE)) {
        /* a call on a communicator still being created waits for it (as a blocking one would);
         * of several threads that get here at once, one joins the creating thread */
        pthread_mutex_lock(&comm->join_lock);
        if (__atomic_load_n(&comm->init_pending, __ATOMIC_ACQUIRE)) {
            pthread_join(*(pthread_t *)comm->init_thread, NULL);
            free(comm->init_thread);
            comm->init_thread = NULL;
            __atomic_store_n(&comm->init_pending, 0, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&comm->join_lock);
    }
    if (comm->coll == NULL)
        return nccl_error(ncclInvalidUsage,
                          "%s: the communicator was never created (its creation failed: %s); "
                          "destroy it and create a new one",
                          fn, comm->init_msg[0] ? comm->init_msg : "see the earlier error");
    *out = comm->coll;
    return ncclSuccess;
}

KCOLL_NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    _Static_assert(sizeof(ncclUniqueId) == sizeof(coll_unique_id_t), "unique ids of one size");
    nccl_banner();
    if (uniqueId == NULL)
        return nccl_error(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL");
    /* NCCL makes every process's id from NCCL_COMM_ID (the same bytes everywhere, rank 0
     * hosting the root there at ncclCommInitRank). kcoll's id also carries the secret that
     * authenticates the job: with COLL_JOB_SECRET, the same on every rank, it is made the same
     * way, or under the kcoll agent with the job's secret it holds; without either, each
     * process would make its own, and the ranks would wait for each other until
     * COLL_BOOTSTRAP_TIMEOUT: refused at once, saying so. */
    const char *env_id = secure_getenv("NCCL_COMM_ID");
    if (env_id != NULL && *env_id != '\0') {
        const char *secret = secure_getenv("COLL_JOB_SECRET");
        const char *agent = secure_getenv("COLL_AGENT_SOCKET");
        if (secret != NULL && *secret == '\0')
            secret = NULL;
        if (secret == NULL && (agent == NULL || *agent == '\0'))
            return nccl_error(ncclInvalidUsage,
                              "ncclGetUniqueId: NCCL_COMM_ID=%s is set, but COLL_JOB_SECRET is "
                              "not: a kcoll id carries a secret that authenticates the job's "
                              "connections, which kcoll cannot make from an address. Set "
                              "COLL_JOB_SECRET=$(openssl rand -hex 16), the same on every rank "
                              "(under the kcoll agent it comes from the agent), or unset "
                              "NCCL_COMM_ID and hand the id of one rank to the others (as "
                              "PyTorch, vLLM and CuPy do)",
                              env_id);
        coll_unique_id_t id;
        coll_result_t r = coll_unique_id_from_address(&id, env_id, secret);
        if (r != COLL_SUCCESS)
            return nccl_error(nccl_result(r), "ncclGetUniqueId: NCCL_COMM_ID: %s",
                              coll_get_last_error());
        memcpy(uniqueId, &id, sizeof(id));
        return ncclSuccess;
    }
    coll_unique_id_t id;
    coll_result_t r = coll_get_unique_id(&id);
    if (r == COLL_SUCCESS)
        memcpy(uniqueId, &id, sizeof(id));
    return nccl_result(r);
}
KCOLL_NCCL_ALIAS(ncclGetUniqueId);

/* ---- creation ---- */

/* The config of the creations NCCL makes whole before it returns, whatever NCCL_COMM_BLOCKING
 * says: ncclCommInitRank outside a group (NCCL runs a creation at once at group depth 0; only
 * the ones that open a group of their own, ncclCommInitRankConfig and ncclCommInitRankScalable,
 * return ncclInProgress) and ncclCommInitAll (its ranks are made together in this thread). */
static const ncclConfig_t always_blocking;
#define ALWAYS_BLOCKING (&always_blocking)

/* What a caller's config asks for (NULL: the defaults, and NCCL_COMM_BLOCKING). Callers built
 * against any 2.x header pass a config of their own size: only the fields within it are read. */
static ncclResult_t read_config(const ncclConfig_t *config, const char *fn, int *blocking)
{
    *blocking = 1;
    if (config == ALWAYS_BLOCKING)
        return ncclSuccess;
    const char *env = getenv("NCCL_COMM_BLOCKING");
    if (env != NULL && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0))
        *blocking = env[0] == '1';
    if (config == NULL)
        return ncclSuccess;
    if (config->magic != CONFIG_MAGIC || config->size < offsetof(ncclConfig_t, blocking))
        return nccl_error(ncclInvalidArgument,
                          "%s: config is not initialized (magic 0x%x, size %zu); set it to "
                          "NCCL_CONFIG_INITIALIZER before changing fields",
                          fn, config->magic, config->size);
    if (config->size >= offsetof(ncclConfig_t, blocking) + sizeof(int) &&
        config->blocking != NCCL_CONFIG_UNDEF_INT) {
        if (config->blocking != 0 && config->blocking != 1)
            return nccl_error(ncclInvalidArgument, "%s: config->blocking is %d; use 0 or 1", fn,
                              config->blocking);
        *blocking = config->blocking;
    }
    return nccl_config_audit(config, fn);
}

static ncclResult_t new_comm(ncclComm_t *out, const char *fn, struct ncclComm **comm)
{
    nccl_banner();
    nccl_warn_other_copies();
    if (out == NULL)
        return nccl_error(ncclInvalidArgument, "%s: comm is NULL (pass an ncclComm_t to fill)", fn);
    *out = NULL;
    *comm = calloc(1, sizeof(**comm));
    if (*comm == NULL)
        return nccl_error(ncclSystemError, "%s: out of memory", fn);
    if (pthread_mutex_init(&(*comm)->join_lock, NULL) != 0) {
        free(*comm);
        return nccl_error(ncclSystemError, "%s: cannot create a mutex", fn);
    }
    if (pthread_mutex_init(&(*comm)->state_lock, NULL) != 0) {
        pthread_mutex_destroy(&(*comm)->join_lock);
        free(*comm);
        return nccl_error(ncclSystemError, "%s: cannot create a mutex", fn);
    }
    (*comm)->cuda_device = nccl_current_device();
    (*comm)->pid = (int)getpid();
    return ncclSuccess;
}

static void free_comm(struct ncclComm *comm)
{
    pthread_mutex_destroy(&comm->join_lock);
    pthread_mutex_destroy(&comm->state_lock);
    free(comm);
}

typedef struct {
    struct ncclComm *comm;
    int nranks, rank;
    coll_unique_id_t id;
} init_job_t;

static void *init_thread(void *arg)
{
    init_job_t *job = arg;
    struct ncclComm *comm = job->comm;
    coll_comm_t made = NULL;
    coll_result_t r = coll_comm_init_rank(&made, job->nranks, job->id, job->rank);
    free(job);
    pthread_mutex_lock(&comm->state_lock);
    const bool abandoned = comm->abandoned != 0;
    if (!abandoned) {
        comm->coll = made;
        if (r != COLL_SUCCESS)
            snprintf(comm->init_msg, sizeof(comm->init_msg), "%s", coll_get_last_error());
        comm->init_rc = nccl_result(r);
        __atomic_store_n(&comm->init_pending, 2, __ATOMIC_RELEASE); /* 2: done, not joined */
    }
    pthread_mutex_unlock(&comm->state_lock);
    if (abandoned) { /* aborted meanwhile: nobody holds comm but this thread */
        if (made != NULL)
            (void)coll_comm_abort(made);
        pthread_mutex_lock(&comm->join_lock); /* the aborter is out */
        pthread_mutex_unlock(&comm->join_lock);
        free_comm(comm);
    }
    return NULL;
}

/* An abort of a communicator whose non-blocking creation still runs (a peer that never came):
 * the creation is abandoned, not waited for (it may wait for its peers until
 * COLL_BOOTSTRAP_TIMEOUT); its thread ends what it made and frees comm. true when so. */
static bool abandon_creation(struct ncclComm *comm)
{
    bool abandoned = false;
    pthread_mutex_lock(&comm->join_lock);
    if (comm->init_thread != NULL) { /* not joined */
        pthread_mutex_lock(&comm->state_lock);
        if (__atomic_load_n(&comm->init_pending, __ATOMIC_ACQUIRE) == 1) {
            comm->abandoned = 1;
            abandoned = true;
        }
        pthread_mutex_unlock(&comm->state_lock);
        if (abandoned) {
            (void)pthread_detach(*(pthread_t *)comm->init_thread);
            free(comm->init_thread);
            comm->init_thread = NULL;
        }
    }
    pthread_mutex_unlock(&comm->join_lock);
    return abandoned;
}

/* Non-blocking creation: on a thread of its own; ncclCommGetAsyncError says ncclInProgress
 * until it is done, then its result. */
static ncclResult_t init_async(struct ncclComm *comm, int nranks, const coll_unique_id_t *id,
                               int rank)
{
    init_job_t *job = malloc(sizeof(*job));
    pthread_t *tid = malloc(sizeof(*tid));
    if (job == NULL || tid == NULL) {
        free(job);
        free(tid);
        return nccl_error(ncclSystemError, "ncclCommInitRankConfig: out of memory");
    }
    *job = (init_job_t){comm, nranks, rank, *id};
    comm->init_pending = 1;
    comm->init_rc = ncclInProgress;
    if (pthread_create(tid, NULL, init_thread, job) != 0) {
        free(job);
        free(tid);
        comm->init_pending = 0;
        return nccl_error(ncclSystemError, "ncclCommInitRankConfig: cannot start a thread");
    }
    comm->init_thread = tid;
    return ncclInProgress;
}

static ncclResult_t init_rank(ncclComm_t *out, int nranks, const ncclUniqueId *commId, int rank,
                              const ncclConfig_t *config, const char *fn)
{
    int blocking = 1;
    struct ncclComm *comm = NULL;
    ncclResult_t rc = read_config(config, fn, &blocking);
    if (rc == ncclSuccess && (nranks < 1 || rank < 0 || rank >= nranks)) {
        if (out != NULL)
            *out = NULL;
        /* at once, also for a non-blocking config (NCCL checks before it starts the creation) */
        return nccl_error(ncclInvalidArgument,
                          "%s: rank %d of %d ranks: nranks must be at least 1 and rank in "
                          "[0, nranks)",
                          fn, rank, nranks);
    }
    if (rc == ncclSuccess)
        rc = new_comm(out, fn, &comm);
    if (rc != ncclSuccess)
        return rc;
    coll_unique_id_t id;
    memcpy(&id, commId, sizeof(id));
    *out = comm;
    if (!blocking) {
        rc = init_async(comm, nranks, &id, rank);
        if (rc != ncclInProgress) {
            free_comm(comm);
            *out = NULL;
        }
        return rc;
    }
    /* in a group: created at ncclGroupEnd (comm->coll is written then) */
    rc = nccl_result(coll_comm_init_rank(&comm->coll, nranks, id, rank));
    if (rc != ncclSuccess) {
        free_comm(comm);
        *out = NULL;
    }
    return rc;
}

KCOLL_NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                             int rank)
{
    return nccl_refused(
        init_rank(comm, nranks, &commId, rank, ALWAYS_BLOCKING, "ncclCommInitRank"));
}
KCOLL_NCCL_ALIAS(ncclCommInitRank);

KCOLL_NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks,
                                                   ncclUniqueId commId, int rank,
                                                   ncclConfig_t *config)
{
    return nccl_refused(init_rank(comm, nranks, &commId, rank, config, "ncclCommInitRankConfig"));
}
KCOLL_NCCL_ALIAS(ncclCommInitRankConfig);

/* Several ids spread the bootstrap of a very large job in NCCL; kcoll's root serves any size,
 * so the first id is the communicator's. */
KCOLL_NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                     int nId, ncclUniqueId *commIds,
                                                     ncclConfig_t *config)
{
    if (nId < 1 || nId > nranks || commIds == NULL)
        return nccl_refused(
            nccl_error(ncclInvalidArgument,
                       "ncclCommInitRankScalable: nId is %d (nranks %d) and commIds %p; pass "
                       "from one to nranks unique ids",
                       nId, nranks, (void *)commIds));
    return nccl_refused(
        init_rank(newcomm, nranks, &commIds[0], myrank, config, "ncclCommInitRankScalable"));
}
KCOLL_NCCL_ALIAS(ncclCommInitRankScalable);

/* Every rank of a new communicator in this process, one per device (devlist NULL: 0..ndev-1),
 * created at once through a group, blocking whatever NCCL_COMM_BLOCKING says (a non-blocking
 * rank would start a creation of its own, which waits for the ranks after it, and they are
 * made in this thread only after it returns). */
KCOLL_NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    if (comms == NULL || ndev < 1)
        return nccl_error(ncclInvalidArgument, "ncclCommInitAll: comms is %p and ndev %d",
                          (void *)comms, ndev);
    ncclUniqueId id;
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess)
        return rc;
    for (int i = 0; i < ndev; i++)
        comms[i] = NULL;
    coll_group_start();
    for (int i = 0; i < ndev && rc == ncclSuccess; i++) {
        rc = init_rank(&comms[i], ndev, &id, i, ALWAYS_BLOCKING, "ncclCommInitAll");
        if (rc == ncclSuccess)
            comms[i]->cuda_device = devlist != NULL ? devlist[i] : i;
    }
    ncclResult_t end = nccl_result(coll_group_end());
    if (rc == ncclSuccess)
        rc = end;
    for (int i = 0; i < ndev && rc != ncclSuccess; i++) {
        if (comms[i] != NULL && comms[i]->coll != NULL)
            (void)coll_comm_destroy(comms[i]->coll);
        free(comms[i]);
        comms[i] = NULL;
    }
    return rc;
}
KCOLL_NCCL_ALIAS(ncclCommInitAll);

/* ---- communicators made from others inside a group ---- */

/* This thread's group (NCCL's groups are per thread): its depth, and the splits and shrinks
 * made in it, whose kcoll communicators are written at its end. */
static _Thread_local struct {
    int depth;
    struct pending {
        struct ncclComm *child;
        ncclComm_t *newcomm; /* the caller's, valid until the group ends (as in NCCL) */
    } * pending;
    int n, cap;
} group;

void nccl_group_started(void)
{
    group.depth++;
}

void nccl_group_ended(ncclResult_t rc)
{
    if (group.depth == 0 || --group.depth > 0)
        return;
    for (int i = 0; i < group.n; i++) {
        struct ncclComm *child = group.pending[i].child;
        if (child->coll != NULL)
            continue;
        if (rc == ncclSuccess) { /* NCCL_SPLIT_NOCOLOR: no communicator, as NCCL says */
            *group.pending[i].newcomm = NULL;
            free_comm(child);
        } else { /* the group failed: the handle says why (destroy or abort it) */
            snprintf(child->init_msg, sizeof(child->init_msg), "%s", ncclGetLastError(NULL));
        }
    }
    free(group.pending);
    memset(&group, 0, sizeof(group));
}

/* Room for one more child made in this group; false when memory is short. */
static bool group_room(void)
{
    if (group.n < group.cap)
        return true;
    const int cap = group.cap > 0 ? 2 * group.cap : 8;
    struct pending *p = realloc(group.pending, (size_t)cap * sizeof(*p));
    if (p == NULL)
        return false;
    group.pending = p;
    group.cap = cap;
    return true;
}

/* A communicator made from comm (split, shrink): its config checked, comm's kcoll communicator
 * and a fresh child on comm's device. The child is made ready when the creation returns (also
 * for a non-blocking config: ncclCommGetAsyncError then says ncclSuccess at once). */
static ncclResult_t child_start(ncclComm_t comm, ncclConfig_t *config, ncclComm_t *newcomm,
                                const char *fn, coll_comm_t *parent, struct ncclComm **child)
{
    int blocking = 1;
    ncclResult_t rc = read_config(config, fn, &blocking);
    if (rc == ncclSuccess)
        rc = nccl_comm(comm, fn, parent);
    if (rc == ncclSuccess && group.depth > 0 && !group_room())
        rc = nccl_error(ncclSystemError, "%s: out of memory", fn);
    if (rc == ncclSuccess)
        rc = new_comm(newcomm, fn, child);
    if (rc == ncclSuccess)
        (*child)->cuda_device = comm->cuda_device;
    return rc;
}

/* The child becomes *newcomm when its creation made one; else (an error, NCCL_SPLIT_NOCOLOR)
 * it is freed and *newcomm stays NULL. Inside a group the creation runs at ncclGroupEnd, which
 * writes child->coll: the child is *newcomm until then (NULL after it for NOCOLOR). */
static ncclResult_t child_finish(ncclResult_t rc, struct ncclComm *child, ncclComm_t *newcomm)
{
    if (rc == ncclSuccess && group.depth > 0) {
        group.pending[group.n++] = (struct pending){child, newcomm}; /* room: child_start */
        *newcomm = child;
    } else if (rc == ncclSuccess && child->coll != NULL) {
        *newcomm = child;
    } else {
        free_comm(child);
    }
    return rc;
}

KCOLL_NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                          ncclConfig_t *config)
{
    coll_comm_t parent = NULL;
    struct ncclComm *child = NULL;
    ncclResult_t rc = child_start(comm, config, newcomm, "ncclCommSplit", &parent, &child);
    if (rc != ncclSuccess)
        return nccl_refused(rc);
    return child_finish(nccl_result(coll_comm_split(parent, color, key, &child->coll)), child,
                        newcomm);
}
KCOLL_NCCL_ALIAS(ncclCommSplit);

KCOLL_NCCL_API ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                                           int excludeRanksCount, ncclComm_t *newcomm,
                                           ncclConfig_t *config, int shrinkFlags)
{
    if ((shrinkFlags & ~NCCL_SHRINK_ABORT) != 0)
        return nccl_refused(
            nccl_error(ncclInvalidArgument,
                       "ncclCommShrink: shrinkFlags 0x%x: only NCCL_SHRINK_DEFAULT and "
                       "NCCL_SHRINK_ABORT exist",
                       (unsigned)shrinkFlags));
    if (excludeRanksCount <= 0)
        return nccl_refused(
            nccl_error(ncclInvalidArgument,
                       "ncclCommShrink: excludeRanksCount is %d: list at least one rank to "
                       "leave out (to copy a communicator, use ncclCommSplit with one color)",
                       excludeRanksCount));
    coll_comm_t parent = NULL;
    struct ncclComm *child = NULL;
    ncclResult_t rc = child_start(comm, config, newcomm, "ncclCommShrink", &parent, &child);
    if (rc != ncclSuccess)
        return nccl_refused(rc);
    rc = nccl_result(coll_comm_shrink(
        parent, excludeRanksList, excludeRanksCount,
        (shrinkFlags & NCCL_SHRINK_ABORT) ? COLL_SHRINK_ABORT : COLL_SHRINK_DEFAULT, &child->coll));
    return child_finish(rc, child, newcomm);
}
KCOLL_NCCL_ALIAS(ncclCommShrink);

/* As nccl.h says: once revoked (and quiescent: kcoll's revoke returns when the operations in
 * flight have stopped), ncclCommGetAsyncError says ncclSuccess, collectives and sends are
 * ncclInvalidUsage, and shrink, destroy or abort follow. A NULL communicator is nothing to
 * revoke; a second revoke, or one after ncclCommFinalize, is ncclInvalidArgument. */
KCOLL_NCCL_API ncclResult_t ncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    if (comm == NULL)
        return ncclSuccess;
    if (revokeFlags != 0)
        return nccl_error(ncclInvalidArgument,
                          "ncclCommRevoke: revokeFlags 0x%x: NCCL 2.28 defines none (pass 0)",
                          (unsigned)revokeFlags);
    const bool revoked = __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE) != 0;
    if (revoked || comm->finalized)
        return nccl_error(ncclInvalidArgument, "ncclCommRevoke: the communicator was already %s",
                          revoked ? "revoked" : "finalized (ncclCommFinalize)");
    coll_comm_t c = NULL;
    ncclResult_t rc = nccl_comm(comm, "ncclCommRevoke", &c);
    if (rc == ncclSuccess)
        rc = nccl_result(coll_comm_revoke(c));
    if (rc == ncclSuccess)
        __atomic_store_n(&comm->revoked, 1, __ATOMIC_RELEASE);
    return rc;
}
KCOLL_NCCL_ALIAS(ncclCommRevoke);

/* ---- the end of a communicator ---- */

/* kcoll's calls on host buffers are complete when they return and its destroy finishes queued
 * device calls: nothing is left to flush here. A NULL communicator is nothing to finalize,
 * destroy or abort (NCCL returns success: PyTorch aborts a communicator it already aborted,
 * whose handle it set to NULL, from its watchdog and again at exit). */
KCOLL_NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm)
{
    coll_comm_t c = NULL;
    if (comm == NULL)
        return ncclSuccess;
    if (comm->finalized) /* as NCCL: a second finalize is a caller's mistake */
        return nccl_error(ncclInvalidArgument,
                          "ncclCommFinalize: the communicator was already finalized; destroy "
                          "it with ncclCommDestroy");
    ncclResult_t rc = nccl_comm(comm, "ncclCommFinalize", &c);
    if (rc == ncclSuccess)
        comm->finalized = 1;
    return rc;
}
KCOLL_NCCL_ALIAS(ncclCommFinalize);

static ncclResult_t end_comm(ncclComm_t comm, const char *fn, coll_result_t (*end)(coll_comm_t))
{
    if (comm != NULL && forked_while_creating(comm)) {
        /* let go: comm's memory stays, as its locks may be held by threads not in this process */
        return ncclSuccess;
    }
    if (comm == NULL || (end == coll_comm_abort && abandon_creation(comm)))
        return ncclSuccess;
    coll_comm_t c = NULL;
    (void)nccl_comm(comm, fn, &c); /* waits for a creation still running */
    ncclResult_t rc = c != NULL ? nccl_result(end(c)) : ncclSuccess;
    if (rc == ncclSuccess)
        free_comm(comm);
    return rc;
}

KCOLL_NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return end_comm(comm, "ncclCommDestroy", coll_comm_destroy);
}
KCOLL_NCCL_ALIAS(ncclCommDestroy);

/* Safe from another thread while a call on comm is blocked: that call returns an error. */
KCOLL_NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return end_comm(comm, "ncclCommAbort", coll_comm_abort);
}
KCOLL_NCCL_ALIAS(ncclCommAbort);

/* ---- queries ---- */

KCOLL_NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (comm == NULL || asyncError == NULL)
        return nccl_error(ncclInvalidArgument, "ncclCommGetAsyncError: comm %p, asyncError %p",
                          (void *)comm, (void *)asyncError);
    if (forked_while_creating(comm)) { /* not "in progress" for ever: a caller polls */
        *asyncError = forked_error(comm, "ncclCommGetAsyncError");
        return ncclSuccess;
    }
    if (__atomic_load_n(&comm->init_pending, __ATOMIC_ACQUIRE) == 1) {
        *asyncError = ncclInProgress;
        return ncclSuccess;
    }
    coll_comm_t c = NULL;
    if (nccl_comm(comm, "ncclCommGetAsyncError", &c) != ncclSuccess) {
        *asyncError = comm->init_rc != ncclSuccess ? comm->init_rc : ncclInternalError;
        return ncclSuccess;
    }
    if (__atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE)) { /* quiescent (ncclCommRevoke) */
        *asyncError = ncclSuccess;
        return ncclSuccess;
    }
    coll_result_t async = COLL_SUCCESS;
    ncclResult_t rc = nccl_result(coll_comm_get_async_error(c, &async));
    if (rc == ncclSuccess)
        *asyncError = nccl_result(async);
    return rc;
}
KCOLL_NCCL_ALIAS(ncclCommGetAsyncError);

KCOLL_NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    coll_comm_t c = NULL;
    ncclResult_t rc = nccl_comm(comm, "ncclCommCount", &c);
    return rc != ncclSuccess ? rc : nccl_result(coll_comm_count(c, count));
}
KCOLL_NCCL_ALIAS(ncclCommCount);

KCOLL_NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    coll_comm_t c = NULL;
    ncclResult_t rc = nccl_comm(comm, "ncclCommUserRank", &c);
    return rc != ncclSuccess ? rc : nccl_result(coll_comm_user_rank(c, rank));
}
KCOLL_NCCL_ALIAS(ncclCommUserRank);

KCOLL_NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (comm == NULL || device == NULL)
        return nccl_error(ncclInvalidArgument, "ncclCommCuDevice: comm %p, device %p", (void *)comm,
                          (void *)device);
    *device = comm->cuda_device;
    return ncclSuccess;
}
KCOLL_NCCL_ALIAS(ncclCommCuDevice);

/* ---- registration: kcoll needs none; handles are returned so that callers work unchanged ---- */

KCOLL_NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                             void **handle)
{
    coll_comm_t c = NULL;
    ncclResult_t rc = nccl_comm(comm, "ncclCommRegister", &c);
    if (rc != ncclSuccess)
        return rc;
    if (handle == NULL)
        return nccl_error(ncclInvalidArgument, "ncclCommRegister: handle is NULL");
    (void)size;
    *handle = buff != NULL ? buff : (void *)comm;
    return ncclSuccess;
}
KCOLL_NCCL_ALIAS(ncclCommRegister);

KCOLL_NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t comm, void *handle)
{
    coll_comm_t c = NULL;
    (void)handle;
    return nccl_comm(comm, "ncclCommDeregister", &c);
}
KCOLL_NCCL_ALIAS(ncclCommDeregister);

KCOLL_NCCL_API ncclResult_t ncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                                   ncclWindow_t *win, int winFlags)
{
    coll_comm_t c = NULL;
    ncclResult_t rc = nccl_comm(comm, "ncclCommWindowRegister", &c);
    if (rc != ncclSuccess)
        return rc;
    if (win == NULL)
        return nccl_error(ncclInvalidArgument, "ncclCommWindowRegister: win is NULL");
    (void)size, (void)winFlags;
    *win = (ncclWindow_t)(buff != NULL ? buff : (void *)comm);
    return ncclSuccess;
}
KCOLL_NCCL_ALIAS(ncclCommWindowRegister);

KCOLL_NCCL_API ncclResult_t ncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    coll_comm_t c = NULL;
    (void)win;
    return nccl_comm(comm, "ncclCommWindowDeregister", &c);
}
KCOLL_NCCL_ALIAS(ncclCommWindowDeregister);
