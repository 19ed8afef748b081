/* nccl_test's communicator cases: split, non-blocking creation, errors, abort, one process
 * with every rank, shrink. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nccl_test.h"

/* ---- split ---- */

void case_split(void)
{
    ncclComm_t comm = init_comm(), half = NULL, none = NULL;
    if (comm == NULL)
        return;
    CHECK_OK(ncclCommSplit(comm, rank_ % 2, -rank_, &half, NULL), "ncclCommSplit");
    int size = 0, r = -1;
    if (half != NULL) {
        CHECK_OK(ncclCommCount(half, &size), "ncclCommCount");
        CHECK_OK(ncclCommUserRank(half, &r), "ncclCommUserRank");
        int want = 0, before = 0;
        for (int q = 0; q < nranks_; q++)
            if (q % 2 == rank_ % 2) {
                want++;
                before += q > rank_;
            }
        CHECK(size == want && r == before, "half: rank %d of %d, want %d of %d", r, size, before,
              want);
        /* two communicators in one group: the parent's and the half's all_reduce at once */
        int64_t one = rank_ + 1, a = 0, b = 0, all = 0, mine = 0;
        for (int q = 0; q < nranks_; q++) {
            all += q + 1;
            mine += q % 2 == rank_ % 2 ? q + 1 : 0;
        }
        CHECK_OK(ncclGroupStart(), "ncclGroupStart");
        CHECK_OK(ncclAllReduce(&one, &a, 1, ncclInt64, ncclSum, comm, NULL), "parent");
        CHECK_OK(ncclAllReduce(&one, &b, 1, ncclInt64, ncclSum, half, NULL), "half");
        CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of two communicators");
        CHECK(a == all && b == mine, "parent %lld (want %lld), half %lld (want %lld)", (long long)a,
              (long long)all, (long long)b, (long long)mine);
        CHECK_OK(ncclCommDestroy(half), "destroy half");
    } else {
        CHECK(0, "ncclCommSplit gave no communicator");
    }
    CHECK_OK(ncclCommSplit(comm, rank_ == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &none, NULL),
             "ncclCommSplit with NCCL_SPLIT_NOCOLOR");
    CHECK((rank_ == 0) == (none == NULL), "rank %d: NOCOLOR gives NULL only to rank 0", rank_);
    if (none != NULL)
        CHECK_OK(ncclCommDestroy(none), "destroy");
    CHECK_OK(ncclCommDestroy(comm), "destroy parent");
}

/* ---- non-blocking creation ---- */

typedef struct {
    ncclComm_t comm;
    ncclResult_t state;
} watchdog_t;

/* Polls the creation's state, as PyTorch's watchdog thread does while the main thread calls. */
static void *watchdog(void *arg)
{
    watchdog_t *w = arg;
    double end = now() + 60;
    w->state = ncclInProgress;
    while (w->state == ncclInProgress && now() < end) {
        CHECK_OK(ncclCommGetAsyncError(w->comm, &w->state), "ncclCommGetAsyncError");
        usleep(200);
    }
    return NULL;
}

/* Run f with this process's stderr (where kcoll logs) going to a file; its text in out. */
static void with_stderr_captured(void (*f)(void *), void *arg, char *out, size_t len)
{
    char path[] = "/tmp/nccl_test_stderr_XXXXXX";
    int fd = mkstemp(path), saved = dup(2);
    out[0] = '\0';
    CHECK(fd >= 0 && saved >= 0, "capture stderr");
    if (fd < 0 || saved < 0)
        return;
    fflush(stderr);
    dup2(fd, 2);
    f(arg);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ssize_t n = pread(fd, out, len - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(path);
}

typedef struct {
    ncclComm_t parent;
    ncclConfig_t config;
} split_with_t;

static void split_with_config(void *arg)
{
    split_with_t *s = arg;
    ncclComm_t comm = NULL;
    CHECK_OK(ncclCommSplit(s->parent, 0, rank_, &comm, &s->config),
             "ncclCommSplit with netName, minCTAs, commName");
    float one = 1, sum = 0;
    if (comm != NULL) {
        CHECK_OK(ncclAllReduce(&one, &sum, 1, ncclFloat32, ncclSum, comm, NULL), "ncclAllReduce");
        CHECK(sum == nranks_, "sum %g", sum);
        CHECK_OK(ncclCommDestroy(comm), "ncclCommDestroy");
    }
}

/* The config's other fields are answered, not dropped: a netName kcoll has not is refused; IB
 * or Socket different from the process's network (NCCL_NET, COLL_TRANSPORT) is a WARN; the GPU
 * and resource knobs one INFO line each (NCCL_DEBUG=INFO). */
static void config_fields(ncclComm_t parent)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.netName = "EFA";
    ncclComm_t comm = NULL;
    CHECK(ncclCommInitRankConfig(&comm, nranks_, sh->id, rank_, &config) == ncclInvalidArgument &&
              comm == NULL,
          "config.netName \"EFA\" is ncclInvalidArgument");
    CHECK(strstr(ncclGetLastError(NULL), "config.netName is \"EFA\", a network kcoll does not "
                                         "have") != NULL,
          "message: %s", ncclGetLastError(NULL));
    CHECK(ncclCommSplit(parent, 0, rank_, &comm, &config) == ncclInvalidArgument && comm == NULL,
          "config.netName \"EFA\" in ncclCommSplit is ncclInvalidArgument");
    const char *net = getenv("NCCL_NET"), *tp = getenv("COLL_TRANSPORT");
    char *saved_net = net ? strdup(net) : NULL, *saved_tp = tp ? strdup(tp) : NULL;
    unsetenv("NCCL_NET");
    unsetenv("COLL_TRANSPORT");
    setenv("NCCL_DEBUG", "INFO", 1);
    split_with_t s = {parent, NCCL_CONFIG_INITIALIZER};
    s.config.netName = "Socket";
    s.config.minCTAs = 4;
    s.config.collnetEnable = 0; /* what kcoll does anyway: nothing to say */
    s.config.commName = "tp-group";
    char text[8192], wins[8192];
    with_stderr_captured(split_with_config, &s, text, sizeof(text));
    /* COLL_TRANSPORT wins over NCCL_NET: NCCL_NET=IB agreeing with netName "IB" does not make
     * it applied while COLL_TRANSPORT=Socket, and the WARN names the variable that decides */
    setenv("NCCL_NET", "IB", 1);
    setenv("COLL_TRANSPORT", "Socket", 1);
    split_with_t ib = {parent, NCCL_CONFIG_INITIALIZER};
    ib.config.netName = "IB";
    with_stderr_captured(split_with_config, &ib, wins, sizeof(wins));
    unsetenv("NCCL_NET");
    unsetenv("COLL_TRANSPORT");
    unsetenv("NCCL_DEBUG");
    if (saved_net != NULL)
        setenv("NCCL_NET", saved_net, 1);
    if (saved_tp != NULL)
        setenv("COLL_TRANSPORT", saved_tp, 1);
    free(saved_net);
    free(saved_tp);
    CHECK(strstr(text, "WARN ncclCommSplit: config.netName = \"Socket\" is not applied "
                       "per communicator") != NULL &&
              strstr(text, "set NCCL_NET=Socket") != NULL,
          "a WARN for netName: %s", text);
    CHECK(strstr(text, "config.minCTAs = 4 is not applied") != NULL, "an INFO for minCTAs: %s",
          text);
    CHECK(strstr(text, "config.commName = \"tp-group\" is not used") != NULL,
          "an INFO for commName: %s", text);
    CHECK(strstr(text, "collnetEnable") == NULL, "no line for collnetEnable = 0: %s", text);
    CHECK(strstr(wins, "config.netName = \"IB\" is not applied") != NULL &&
              strstr(wins, "(here COLL_TRANSPORT=Socket;") != NULL &&
              strstr(wins, "set COLL_TRANSPORT=RequireIB") != NULL,
          "netName IB under COLL_TRANSPORT=Socket and NCCL_NET=IB: a WARN naming "
          "COLL_TRANSPORT: %s",
          wins);
}

void case_nonblocking(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, nranks_, sh->id, rank_, &config);
    CHECK(rc == ncclInProgress || rc == ncclSuccess, "non-blocking init returns %d", (int)rc);
    if (comm == NULL)
        return;
    /* the watchdog polls while this thread's first call waits for the creation: both see it end
     * (one of them joins the creating thread) */
    watchdog_t w = {comm, ncclInProgress};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, watchdog, &w) == 0, "start the watchdog thread");
    int count = 0;
    CHECK_OK(ncclCommCount(comm, &count), "ncclCommCount during the creation");
    CHECK(count == nranks_, "count %d", count);
    pthread_join(t, NULL);
    CHECK(w.state == ncclSuccess, "polled to %d", (int)w.state);
    float one = 1, sum = 0;
    CHECK_OK(ncclAllReduce(&one, &sum, 1, ncclFloat32, ncclSum, comm, NULL), "ncclAllReduce");
    CHECK(sum == nranks_, "sum %g", sum);
    config_fields(comm);
    CHECK_OK(ncclCommDestroy(comm), "ncclCommDestroy");
    /* an abort while a creation waits for a peer that never comes returns at once (the creation
     * waits until COLL_BOOTSTRAP_TIMEOUT, 30 s here); the abandoned creation ends itself */
    if (rank_ == 0) {
        ncclUniqueId lone;
        ncclComm_t pending = NULL;
        CHECK_OK(ncclGetUniqueId(&lone), "ncclGetUniqueId");
        rc = ncclCommInitRankConfig(&pending, 2, lone, 0, &config);
        CHECK(rc == ncclInProgress && pending != NULL, "a creation that waits: %d", (int)rc);
        ncclResult_t state = ncclSuccess;
        CHECK(pending == NULL || (ncclCommGetAsyncError(pending, &state) == ncclSuccess &&
                                  state == ncclInProgress),
              "still in progress: %d", (int)state);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        CHECK(pending == NULL || ncclCommAbort(pending) == ncclSuccess, "ncclCommAbort");
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double took =
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
        CHECK(took < 5, "ncclCommAbort of a pending creation took %.1f s", took);
    }
    /* a config that was never initialized is refused */
    ncclConfig_t junk;
    memset(&junk, 0, sizeof(junk));
    comm = NULL;
    CHECK(ncclCommInitRankConfig(&comm, nranks_, sh->id, rank_, &junk) == ncclInvalidArgument,
          "an uninitialized config is ncclInvalidArgument");
    CHECK(strstr(ncclGetLastError(NULL), "NCCL_CONFIG_INITIALIZER") != NULL, "message: %s",
          ncclGetLastError(NULL));
}

/* ---- errors ---- */

void case_errors(void)
{
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    float x = 1, y = 0;
    expect(ncclAllReduce(&x, &y, 1, (ncclDataType_t)42, ncclSum, comm, NULL), ncclInvalidArgument,
           "bad datatype", "datatype 42");
    expect(ncclAllReduce(&x, &y, 1, ncclFloat32, (ncclRedOp_t)77, comm, NULL), ncclInvalidArgument,
           "bad operator", "operator 77");
    expect(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, NULL, NULL), ncclInvalidArgument,
           "NULL comm", "comm is NULL");
    /* as NCCL: nothing to end (PyTorch aborts a communicator it set to NULL again) */
    CHECK(ncclCommAbort(NULL) == ncclSuccess && ncclCommDestroy(NULL) == ncclSuccess &&
              ncclCommFinalize(NULL) == ncclSuccess,
          "abort, destroy and finalize of a NULL communicator succeed");
    expect(ncclAllReduce(NULL, &y, 1, ncclFloat32, ncclSum, comm, NULL), ncclInvalidArgument,
           "NULL sendbuff", "sendbuf is NULL");
    expect(ncclBroadcast(&x, &y, 1, ncclFloat32, nranks_, comm, NULL), ncclInvalidArgument,
           "root out of range", "root");
    expect(ncclSend(&x, 1, ncclFloat32, rank_, comm, NULL), ncclInvalidUsage, "send to self",
           "itself");
    /* PreMulSum operators: one datatype, one communicator, a limited number, destroyed once */
    ncclRedOp_t op = ncclSum, ops[64];
    CHECK_OK(ncclRedOpCreatePreMulSum(&op, &x, ncclFloat32, ncclScalarHostImmediate, comm),
             "ncclRedOpCreatePreMulSum");
    int64_t xi = 1, yi = 0;
    expect(ncclAllReduce(&xi, &yi, 1, ncclInt64, op, comm, NULL), ncclInvalidArgument,
           "PreMulSum of float32 used on int64", "was made for float32");
    expect(ncclBroadcast(&x, &y, 1, ncclFloat32, 0, comm, (cudaStream_t)(uintptr_t)1),
           ncclInvalidUsage, "a stream with host buffers", "stream");
    expect(ncclRedOpCreatePreMulSum(&op, &x, ncclFloat32, (ncclScalarResidence_t)7, comm),
           ncclInvalidArgument, "bad residence", "residence 7");
    int made = 1;
    ops[0] = op;
    while (made < 64 && ncclRedOpCreatePreMulSum(&ops[made], &x, ncclFloat32,
                                                 ncclScalarHostImmediate, comm) == ncclSuccess)
        made++;
    CHECK(made == 64, "made %d PreMulSum operators, want 64", made);
    expect(ncclRedOpCreatePreMulSum(&op, &x, ncclFloat32, ncclScalarHostImmediate, comm),
           ncclInvalidUsage, "the 65th PreMulSum operator", "destroy one");
    for (int k = 0; k < made; k++)
        CHECK_OK(ncclRedOpDestroy(ops[k], comm), "ncclRedOpDestroy");
    expect(ncclRedOpDestroy(ops[0], comm), ncclInvalidArgument, "destroyed twice",
           "destroyed already");
    expect(ncclRedOpDestroy(ncclSum, comm), ncclInvalidArgument, "destroy ncclSum", "built in");
    expect(ncclAllReduce(&x, &y, 1, ncclFloat32, ops[0], comm, NULL), ncclInvalidArgument,
           "a destroyed PreMulSum operator", "PreMulSum operator");
    /* a simulation: refused, and the group ends with its calls dropped (PyTorch's inductor
     * goes on after the error: a group left open would hold every later call) */
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    y = -1;
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL), "queue");
    expect(ncclGroupSimulateEnd(&sim), ncclInvalidUsage, "simulate", "ncclGroupSimulateEnd");
    CHECK(y == -1, "the simulated group's call did not run (%g)", y);
    expect(ncclGroupEnd(), ncclInvalidUsage, "group end without start", "without a matching");
    /* a refused call fails its group, as in NCCL: ncclGroupEnd returns the error and runs none of
     * the group's calls (every rank makes the same mistake here, so all stay in step); kcoll's
     * own check (root) and the layer's (datatype), each between two good calls */
    for (int k = 0; k < 2; k++) {
        float y2 = -1;
        y = -1;
        CHECK_OK(ncclGroupStart(), "ncclGroupStart");
        CHECK_OK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL), "queue");
        if (k == 0)
            expect(ncclBroadcast(&x, &y, 1, ncclFloat32, nranks_ + 3, comm, NULL),
                   ncclInvalidArgument, "root out of range in a group", "root");
        else
            expect(ncclAllReduce(&x, &y, 1, (ncclDataType_t)42, ncclSum, comm, NULL),
                   ncclInvalidArgument, "bad datatype in a group", "datatype 42");
        CHECK_OK(ncclAllReduce(&x, &y2, 1, ncclFloat32, ncclSum, comm, NULL), "queue after");
        expect(ncclGroupEnd(), ncclInvalidArgument, "the end of a group with a refused call",
               "nothing in this group ran");
        CHECK(y == -1 && y2 == -1, "no call of a failed group ran (%g, %g)", y, y2);
    }
    int version = 0;
    CHECK_OK(ncclGetVersion(&version), "ncclGetVersion");
    CHECK(version == NCCL_VERSION_CODE, "version %d, want %d", version, NCCL_VERSION_CODE);
    /* the communicator still works after refused calls */
    CHECK_OK(ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL), "all_reduce after");
    CHECK(y == nranks_, "sum %g", y);
    /* a peer that dies: ncclRemoteError naming it. It dies only once every rank has the result
     * above (a rank that finished its part first could otherwise leave one still draining). */
    __atomic_add_fetch(&sh->stage[0], 1, __ATOMIC_ACQ_REL);
    if (rank_ == nranks_ - 1) {
        const double end = now() + 30;
        while (__atomic_load_n(&sh->stage[0], __ATOMIC_ACQUIRE) < nranks_ && now() < end)
            usleep(1000);
        publish();
        _exit(0);
    }
    ncclResult_t rc = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL);
    CHECK(rc == ncclRemoteError, "a dead peer: %d (%s)", (int)rc, ncclGetErrorString(rc));
    char who[32];
    snprintf(who, sizeof(who), "rank %d", nranks_ - 1);
    CHECK(strstr(ncclGetLastError(NULL), who) != NULL, "names %s: %s", who, ncclGetLastError(NULL));
    (void)ncclCommAbort(comm);
}

/* ---- abort from another thread ---- */

static void *abort_later(void *arg)
{
    sleep(1);
    ncclResult_t *rc = malloc(sizeof(*rc));
    *rc = ncclCommAbort((ncclComm_t)arg);
    return rc;
}

void case_abort(void)
{
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    if (rank_ != 0) {
        /* never calls the all_reduce: rank 0 waits on it until it aborts */
        sh->stage[rank_] = 1;
        while (sh->stage[0] != 2)
            usleep(1000);
        (void)ncclCommAbort(comm);
        return;
    }
    pthread_t t;
    pthread_create(&t, NULL, abort_later, comm);
    float x = 1, y = 0;
    double t0 = now();
    ncclResult_t rc = ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL);
    double took = now() - t0;
    void *ret = NULL;
    pthread_join(t, &ret);
    CHECK(rc != ncclSuccess, "the aborted all_reduce fails (%d)", (int)rc);
    /* the ranks it still waited on, as a COLL_TIMEOUT failure names them (none before) */
    CHECK(strstr(ncclGetLastError(NULL), "waiting on rank ") != NULL,
          "the abort's message names a rank the call waited on: %s", ncclGetLastError(NULL));
    CHECK(took < 15, "it returns %.1f s after the start (abort after 1 s)", took);
    CHECK(ret != NULL && *(ncclResult_t *)ret == ncclSuccess, "ncclCommAbort from a thread");
    free(ret);
    sh->stage[0] = 2;
}

/* ---- one process, every rank ---- */

/* More calls in flight than kcoll's window of 1024, every rank in this one thread, behind
 * streams held for 0.2 s: the 1025th call of a rank waits for room (as NCCL's host waits for a
 * full work FIFO). It once took a gate made of a host function instead, which a driver may run
 * one at a time for the whole process (the fake GPU does): that gate held the host functions of
 * the other ranks' gates, and every rank failed at COLL_TIMEOUT. */
static void initall_burst(ncclComm_t *comms, int n)
{
    enum { CALLS = 1100 };
    float *buf[MAX_RANKS] = {0}, one[4] = {1, 1, 1, 1}, got[4];
    for (int r = 0; r < n; r++) {
        CHECK(gpu->set_device(r) == 0 && (buf[r] = buf_alloc(sizeof(one))) != NULL &&
                  gpu->memcpy_async(buf[r], one, sizeof(one), NULL) == 0 &&
                  gpu->delay(NULL, 200000) == 0,
              "rank %d: a buffer, a held stream", r);
    }
    ncclResult_t rc = ncclSuccess; /* not CHECK_OK, which synchronises the device */
    int i = 0;
    for (; i < CALLS && rc == ncclSuccess; i++) {
        rc = ncclGroupStart();
        for (int r = 0; r < n && rc == ncclSuccess; r++)
            rc = ncclAllReduce(buf[r], buf[r], 4, ncclFloat32, ncclMax, comms[r], NULL);
        if (rc == ncclSuccess)
            rc = ncclGroupEnd();
    }
    CHECK_OK(rc, i < CALLS ? "one of 1100 grouped calls" : "the last of 1100 grouped calls");
    for (int r = 0; r < n; r++) {
        ncclResult_t ae = ncclInternalError;
        CHECK(gpu->set_device(r) == 0 && gpu->memcpy_async(got, buf[r], sizeof(got), NULL) == 0 &&
                  gpu->stream_sync(NULL) == 0 && ncclCommGetAsyncError(comms[r], &ae) == 0 &&
                  ae == ncclSuccess && got[0] == 1 && got[3] == 1,
              "rank %d: %d calls ran (%g, %s)", r, CALLS, (double)got[0], ncclGetErrorString(ae));
        buf_free(buf[r]);
    }
}

/* A group over every rank on cudaStreamPerThread: each call on this thread's stream of its GPU,
 * after the copy of its input that this thread put there behind a 0.2 s delay (a group that ran
 * the calls on threads of its own once put them on those threads' streams, where they ran
 * before their input came). */
static void initall_per_thread(ncclComm_t *comms, int n)
{
    void *const per_thread = (void *)0x2;                  /* cudaStreamPerThread */
    float *buf[MAX_RANKS] = {0}, in[MAX_RANKS][4], got[4]; /* read when the copy runs */
    for (int r = 0; r < n; r++) {
        for (int i = 0; i < 4; i++)
            in[r][i] = (float)(r + i);
        CHECK(gpu->set_device(r) == 0 && (buf[r] = buf_alloc(sizeof(in[r]))) != NULL &&
                  gpu->delay(per_thread, 200000) == 0 &&
                  gpu->memcpy_async(buf[r], in[r], sizeof(in[r]), per_thread) == 0 &&
                  gpu->stream_sync(NULL) == 0, /* the copy waits on the delay, not on this */
              "rank %d: input behind a delay on the per-thread stream", r);
    }
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n; r++)
        CHECK_OK(ncclAllReduce(buf[r], buf[r], 4, ncclFloat32, ncclSum, comms[r], per_thread),
                 "queue an all_reduce on cudaStreamPerThread");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd on cudaStreamPerThread");
    for (int r = 0; r < n; r++) {
        CHECK(gpu->set_device(r) == 0 &&
                  gpu->memcpy_async(got, buf[r], sizeof(got), per_thread) == 0 &&
                  gpu->stream_sync(per_thread) == 0,
              "rank %d: read the result on the per-thread stream", r);
        for (int i = 0; i < 4; i++)
            CHECK(got[i] == (float)(n * (n - 1) / 2 + n * i), "rank %d: element %d is %g", r, i,
                  (double)got[i]);
        buf_free(buf[r]);
    }
}

/* NCCL_TEST_MEM=fakegpu: rank r's buffers on GPU r of one process/* NCCL_TEST_MEM=fakegpu: rank r's
 * buffers on GPU r of one process (FAKE_GPU_DEVICES=n), an all_reduce large enough for the CUDA IPC
 * path: no kernel of one GPU may read another's memory (the fake GPU faults as a GPU without peer
 * access does), so these go through host staging. */
static void initall_devices(ncclComm_t *comms, int n)
{
    enum { COUNT = 1 << 17 }; /* 512 KiB of float */
    static float host[COUNT];
    float *in[MAX_RANKS] = {0}, *out[MAX_RANKS] = {0};
    for (int r = 0; r < n; r++) {
        for (size_t i = 0; i < COUNT; i++)
            host[i] = (float)((i + (size_t)r) % 7);
        CHECK(gpu->set_device(r) == 0, "set GPU %d (FAKE_GPU_DEVICES=%d?)", r, n);
        in[r] = buf_alloc(COUNT * sizeof(float));
        out[r] = buf_alloc(COUNT * sizeof(float));
        CHECK(in[r] != NULL && out[r] != NULL &&
                  gpu->memcpy_async(in[r], host, sizeof(host), NULL) == 0 &&
                  gpu->stream_sync(NULL) == 0,
              "device buffers of rank %d on GPU %d", r, r);
    }
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n; r++)
        CHECK_OK(ncclAllReduce(in[r], out[r], COUNT, ncclFloat32, ncclSum, comms[r], NULL),
                 "queue a device all_reduce");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd over every GPU");
    for (int r = 0; r < n; r++) {
        long bad = 0; /* GPU r's default stream has rank r's call */
        CHECK(gpu->set_device(r) == 0 && gpu->memcpy_async(host, out[r], sizeof(host), NULL) == 0 &&
                  gpu->stream_sync(NULL) == 0,
              "read rank %d's result", r);
        for (size_t i = 0; i < COUNT; i++) {
            float want = 0;
            for (int q = 0; q < n; q++)
                want += (float)((i + (size_t)q) % 7);
            bad += host[i] != want;
        }
        CHECK(bad == 0, "rank %d (GPU %d): %ld of %d sums wrong", r, r, bad, COUNT);
        buf_free(in[r]);
        buf_free(out[r]);
    }
    initall_burst(comms, n);
    initall_per_thread(comms, n);
    (void)gpu->set_device(0);
}

void case_initall(int n)
{
    ncclComm_t comms[MAX_RANKS] = {0};
    CHECK_OK(ncclCommInitAll(comms, n, NULL), "ncclCommInitAll");
    double in[MAX_RANKS], out[MAX_RANKS];
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n; r++) {
        in[r] = r + 1;
        out[r] = 0;
        CHECK_OK(ncclAllReduce(&in[r], &out[r], 1, ncclFloat64, ncclSum, comms[r], NULL), "queue");
    }
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd over every rank");
    for (int r = 0; r < n; r++) {
        int dev = -1;
        CHECK_OK(ncclCommCuDevice(comms[r], &dev), "ncclCommCuDevice");
        CHECK(out[r] == n * (n + 1) / 2.0 && dev == r, "rank %d: sum %g device %d", r, out[r], dev);
    }
    if (gpu != NULL)
        initall_devices(comms, n);
    for (int r = 0; r < n; r++)
        CHECK_OK(ncclCommDestroy(comms[r]), "destroy");
}

/* ---- shrink: the way on without the last rank, healthy and after it died ---- */

/* the sum of (rank + 1) over the n ranks of comm, all-reduced and checked */
static void sum_check(ncclComm_t comm, int n, int myrank, const char *what)
{
    int64_t mine = myrank + 1, sum = 0;
    CHECK_OK(ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, comm, NULL), what);
    CHECK(sum == (int64_t)n * (n + 1) / 2, "%s: sum %lld, want %d", what, (long long)sum,
          n * (n + 1) / 2);
}

void case_shrink(void)
{
    ncclComm_t comm = init_comm(), child = NULL;
    if (comm == NULL)
        return;
    const int last = nranks_ - 1, m = nranks_ - 1;
    int excl = last, cnt = 0, r = -1;
    sum_check(comm, nranks_, rank_, "parent");
    /* 1. healthy (NCCL_SHRINK_DEFAULT): the last rank is alive but left out; the parent still
     * works afterwards */
    if (rank_ != last) {
        CHECK_OK(ncclCommShrink(comm, &excl, 1, &child, NULL, NCCL_SHRINK_DEFAULT),
                 "ncclCommShrink");
        if (child != NULL) {
            CHECK_OK(ncclCommCount(child, &cnt), "ncclCommCount");
            CHECK_OK(ncclCommUserRank(child, &r), "ncclCommUserRank");
            CHECK(cnt == m && r == rank_, "shrunk: rank %d of %d, want %d of %d", r, cnt, rank_, m);
            sum_check(child, m, rank_, "shrunk communicator");
            CHECK_OK(ncclCommDestroy(child), "destroy the shrunk communicator");
        }
        __atomic_add_fetch(&sh->stage[0], 1, __ATOMIC_ACQ_REL);
    } else {
        double end = now() + 60;
        while (__atomic_load_n(&sh->stage[0], __ATOMIC_ACQUIRE) < m && now() < end)
            usleep(1000);
    }
    sum_check(comm, nranks_, rank_, "parent after a shrink");
    /* the last rank dies only once every rank has its result (not while one still drains) */
    __atomic_add_fetch(&sh->stage[1], 1, __ATOMIC_ACQ_REL);
    /* wrong lists */
    if (rank_ == 0) {
        int self = 0, dup[2] = {last, last}, out = nranks_;
        expect(ncclCommShrink(comm, &self, 1, &child, NULL, 0), ncclInvalidArgument, "exclude self",
               "only the ranks that remain");
        expect(ncclCommShrink(comm, dup, 2, &child, NULL, 0), ncclInvalidArgument, "twice",
               "listed twice");
        expect(ncclCommShrink(comm, &out, 1, &child, NULL, 0), ncclInvalidArgument, "out of range",
               "out of range");
        expect(ncclCommShrink(comm, &excl, 1, &child, NULL, 4), ncclInvalidArgument, "flags",
               "shrinkFlags");
    }
    /* 2. the last rank dies: the others see the error, revoke, and shrink it away
     * (NCCL_SHRINK_ABORT) */
    if (rank_ == last) {
        double end = now() + 60;
        while (__atomic_load_n(&sh->stage[1], __ATOMIC_ACQUIRE) < nranks_ && now() < end)
            usleep(1000);
        publish();
        _exit(0);
    }
    int64_t one = 1, got = 0;
    ncclResult_t rc = ncclAllReduce(&one, &got, 1, ncclInt64, ncclSum, comm, NULL);
    CHECK(rc != ncclSuccess, "all_reduce with a dead rank returned %d", (int)rc);
    CHECK_OK(ncclCommRevoke(comm, 0), "ncclCommRevoke");
    rc = ncclAllReduce(&one, &got, 1, ncclInt64, ncclSum, comm, NULL);
    CHECK(rc != ncclSuccess, "all_reduce on a revoked communicator returned %d", (int)rc);
    child = NULL;
    double t0 = now();
    CHECK_OK(ncclCommShrink(comm, &excl, 1, &child, NULL, NCCL_SHRINK_ABORT),
             "ncclCommShrink after a death");
    if (child != NULL) {
        sum_check(child, m, rank_, "shrunk after a death");
        CHECK(now() - t0 < 10, "the shrink took %.1f s", now() - t0);
        /* and once more: a second shrink of the new one, leaving out its last rank */
        ncclComm_t grand = NULL;
        int excl2 = m - 1;
        if (rank_ != m - 1) {
            CHECK_OK(ncclCommShrink(child, &excl2, 1, &grand, NULL, 0), "second shrink");
            if (grand != NULL) {
                sum_check(grand, m - 1, rank_, "shrunk twice");
                CHECK_OK(ncclCommDestroy(grand), "destroy");
            }
        }
        CHECK_OK(ncclCommDestroy(child), "destroy the shrunk communicator");
    }
    CHECK_OK(ncclCommDestroy(comm), "destroy the revoked parent");
}

/* ---- graph: NCCL calls captured into a CUDA graph (the fake GPU's), replayed ---- */

void case_graph(void)
{
    if (gpu == NULL) {
        CHECK(0, "the graph case needs NCCL_TEST_MEM=fakegpu");
        return;
    }
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    const int n = nranks_, me = rank_;
    const size_t count = 100003, bytes = count * sizeof(float);
    void *s = NULL, *exec = NULL, *hin = NULL, *hout = NULL;
    float *in = buf_alloc(bytes), *sum = buf_alloc(bytes), *all = buf_alloc(bytes * n);
    CHECK(in != NULL && sum != NULL && all != NULL && gpu->stream_create(&s) == 0 &&
              gpu->host_alloc(&hin, bytes) == 0 && gpu->host_alloc(&hout, bytes * n) == 0,
          "buffers and a stream");
    /* as vLLM: an eager call (its warm-up), then the capture of its decode step's calls */
    CHECK_OK(ncclAllReduce(in, sum, count, ncclFloat32, ncclSum, comm, s), "eager all_reduce");
    CHECK(gpu->capture(s, 1, NULL) == 0, "begin a capture");
    CHECK_OK(ncclAllReduce(in, sum, count, ncclFloat32, ncclSum, comm, s), "captured all_reduce");
    CHECK_OK(ncclAllGather(in, all, count, ncclFloat32, comm, s), "captured all_gather");
    CHECK(gpu->capture(s, 0, &exec) == 0 && exec != NULL, "the capture ends");
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < count; i++)
            ((float *)hin)[i] = (float)((i + (size_t)me * 3 + (size_t)k) % 17);
        CHECK(gpu->memcpy_async(in, hin, bytes, s) == 0 && gpu->graph_launch(exec, s) == 0,
              "replay %d", k);
        /* an eager call between replays, on the same stream */
        CHECK_OK(ncclBroadcast(in, in, count, ncclFloat32, 0, comm, s), "eager broadcast");
        CHECK(gpu->memcpy_async(hout, sum, bytes, s) == 0 && gpu->stream_sync(s) == 0,
              "replay %d ran", k);
        long bad = 0;
        for (size_t i = 0; i < count; i++) {
            float want = 0;
            for (int r = 0; r < n; r++)
                want += (float)((i + (size_t)r * 3 + (size_t)k) % 17);
            bad += ((float *)hout)[i] != want;
        }
        CHECK(gpu->memcpy_async(hout, all, bytes * n, s) == 0 && gpu->stream_sync(s) == 0,
              "read the gather");
        for (int r = 0; r < n; r++)
            for (size_t i = 0; i < count; i++)
                bad += ((float *)hout)[(size_t)r * count + i] !=
                       (float)((i + (size_t)r * 3 + (size_t)k) % 17);
        CHECK(bad == 0, "replay %d: %ld wrong elements", k, bad);
    }
    ncclResult_t ae = ncclInternalError;
    CHECK_OK(ncclCommGetAsyncError(comm, &ae), "ncclCommGetAsyncError");
    CHECK(ae == ncclSuccess, "no async error (%d)", (int)ae);
    CHECK(gpu->graph_destroy(exec) == 0, "destroy the graph");
    CHECK_OK(ncclCommDestroy(comm), "destroy");
    buf_free(in);
    buf_free(sum);
    buf_free(all);
    gpu->host_free(hin);
    gpu->host_free(hout);
    gpu->stream_destroy(s);
}
