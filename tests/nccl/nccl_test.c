/*
 * kcoll's libnccl.so.2 through NVIDIA's real nccl.h, as a framework uses it: nccl_test CASE N
 * forks N ranks (the parent makes the unique id, which starts the bootstrap root, and hands it
 * over in shared memory), each runs CASE, and the parent sums the checks and kills any rank that
 * hangs past NCCL_TEST_DEADLINE seconds (default 90).
 *   conformance  every collective x datatype (float8 included) x operator on host buffers (out
 *                of place and in place), PreMulSum, broadcast/bcast, gather, scatter,
 *                all-to-all, a send/recv ring, checked against a reference (nccl_values.c)
 *   split        ncclCommSplit by parity with reversed keys, NCCL_SPLIT_NOCOLOR, collectives in
 *                both halves and on the parent afterwards, two communicators in one group
 *   nonblocking  ncclCommInitRankConfig with blocking = 0: ncclInProgress, polled to success by a
 *                watchdog thread while the main thread's first call waits for the creation
 *   errors       the codes a framework expects: ncclInvalidArgument, ncclInvalidUsage (device
 *                API, simulate, PreMulSum misuse), with messages; ncclRemoteError when a peer dies
 *   abort        rank 1 stops; rank 0's all_reduce is aborted from a second thread (no hang)
 *   initall      one process: ncclCommInitAll of N ranks, a grouped all_reduce over all of them
 *   shrink       a healthy shrink, wrong lists, then a rank killed: revoke, shrink with
 *                NCCL_SHRINK_ABORT, a second shrink
 * The cases live in nccl_conformance.c and nccl_comm_cases.c, the inputs and reference in
 * nccl_values.c, the shared declarations in nccl_test.h.
 * NCCL_TEST_MEM=fakegpu: the conformance buffers are device memory of the fake GPU plugin that
 * COLL_CUDA_PLUGIN names (tests/device/fake_gpu.c), so every call takes kcoll's device path on the
 * default stream, which the test synchronises before it reads a result.
 */
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

shared_t *sh;
int rank_ = -1, nranks_ = 0;
long passed, failed;

void check(int ok, int line, const char *fmt, ...)
{
    if (ok) { /* atomic: the abort and nonblocking cases check from a second thread too */
        __atomic_add_fetch(&passed, 1, __ATOMIC_RELAXED);
        return;
    }
    __atomic_add_fetch(&failed, 1, __ATOMIC_RELAXED);
    va_list ap;
    va_start(ap, fmt);
    printf("[rank %d] FAIL line %d: ", rank_, line);
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
}

/* the call is made once; its result checked */
void check_ok(ncclResult_t rc, int line, const char *what)
{
    sync_dev();
    check(rc == ncclSuccess, line, "%s: %s (%d): %s", what, ncclGetErrorString(rc), (int)rc,
          ncclGetLastError(NULL));
}

/* ---- buffers: host memory, or the fake GPU's device memory ---- */

const colli_gpu_ops_t *gpu;

/* NCCL_TEST_GRAPH=1 (with the fake GPU): the default stream always captures, so that every
 * call goes into a CUDA graph, which sync_dev launches once (then it captures again). */
static int graph_mode;

void gpu_open(void)
{
    const char *mem = getenv("NCCL_TEST_MEM"), *lib = getenv("COLL_CUDA_PLUGIN"), *why = "";
    if (mem == NULL || strcmp(mem, "fakegpu") != 0)
        return;
    gpu = lib != NULL ? colli_gpu_plugin_open(lib, &why) : NULL;
    char err[128] = "";
    if (gpu == NULL || gpu->init(err, sizeof(err)) != 0) {
        fprintf(stderr, "NCCL_TEST_MEM=fakegpu needs COLL_CUDA_PLUGIN naming the fake GPU (%s%s)\n",
                why, err);
        exit(2);
    }
    const char *graph = getenv("NCCL_TEST_GRAPH");
    graph_mode = graph != NULL && strcmp(graph, "1") == 0;
    if (graph_mode && gpu->capture(NULL, 1, NULL) != 0) {
        fprintf(stderr, "NCCL_TEST_GRAPH=1: cannot capture the default stream\n");
        exit(2);
    }
}

void *buf_alloc(size_t bytes)
{
    void *p = NULL;
    if (gpu == NULL)
        return malloc(bytes);
    return gpu->dev_alloc(&p, bytes) == 0 ? p : NULL;
}

void buf_free(void *p)
{
    if (gpu == NULL)
        free(p);
    else if (p != NULL)
        (void)gpu->dev_free(p);
}

/* Device calls are ordered on the default stream: wait for them before reading results. */
void sync_dev(void)
{
    if (gpu == NULL)
        return;
    void *exec = NULL;
    if (graph_mode && gpu->capture(NULL, 0, &exec) != 0)
        printf("[rank %d] FAIL: the capture of the default stream was invalidated\n", rank_);
    if (exec != NULL && gpu->graph_launch(exec, NULL) != 0)
        printf("[rank %d] FAIL: graph_launch on the default stream\n", rank_);
    if (gpu->stream_sync(NULL) != 0)
        printf("[rank %d] FAIL: stream_sync of the default stream\n", rank_);
    if (exec != NULL)
        (void)gpu->graph_destroy(exec);
    if (graph_mode && gpu->capture(NULL, 1, NULL) != 0)
        printf("[rank %d] FAIL: a capture of the default stream\n", rank_);
}

int graph_capturing(void)
{
    return graph_mode;
}

/* Counts into shared memory (a rank that exits on purpose publishes first). */
void publish(void)
{
    sh->passed[rank_] = passed;
    sh->failed[rank_] = failed;
}

double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void expect(ncclResult_t rc, ncclResult_t want, const char *what, const char *says)
{
    CHECK(rc == want, "%s: %d (%s), want %d", what, (int)rc, ncclGetErrorString(rc), (int)want);
    CHECK(strstr(ncclGetLastError(NULL), says) != NULL, "%s: message \"%s\" lacks \"%s\"", what,
          ncclGetLastError(NULL), says);
}

ncclComm_t init_comm(void)
{
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRank(&comm, nranks_, sh->id, rank_);
    CHECK_OK(rc, "ncclCommInitRank");
    return rc == ncclSuccess ? comm : NULL;
}

/* ---- driver ---- */

static void run_case(const char *name)
{
    if (strcmp(name, "conformance") == 0)
        case_conformance();
    else if (strcmp(name, "split") == 0)
        case_split();
    else if (strcmp(name, "many") == 0)
        case_many();
    else if (strcmp(name, "initfail") == 0)
        case_initfail();
    else if (strcmp(name, "forkdeath") == 0)
        case_forkdeath();
    else if (strcmp(name, "deadroot") == 0)
        case_deadroot();
    else if (strcmp(name, "forkuse") == 0)
        case_forkuse();
    else if (strcmp(name, "nonblocking") == 0)
        case_nonblocking();
    else if (strcmp(name, "errors") == 0)
        case_errors();
    else if (strcmp(name, "abort") == 0)
        case_abort();
    else if (strcmp(name, "shrink") == 0)
        case_shrink();
    else if (strcmp(name, "graph") == 0)
        case_graph();
    else if (strcmp(name, "group") == 0)
        case_group();
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc != 3 || (nranks_ = atoi(argv[2])) < 1 || nranks_ > MAX_RANKS) {
        fprintf(
            stderr,
            "usage: nccl_test "
            "conformance|split|many|initfail|forkdeath|deadroot|forkuse|nonblocking|errors|abort|"
            "shrink|"
            "graph|group|initall|initall_split N\n");
        return 2;
    }
    if (strcmp(argv[1], "initall") == 0 || strcmp(argv[1], "initall_split") == 0) {
        rank_ = 0;
        gpu_open();
        if (strcmp(argv[1], "initall") == 0)
            case_initall(nranks_);
        else
            case_initall_split(nranks_);
        printf("%ld passed, %ld failed\n", passed, failed);
        return failed ? 1 : 0;
    }
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 2;
    memset(sh, 0, sizeof(*sh));
    pid_t pids[MAX_RANKS];
    for (int r = 0; r < nranks_; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            rank_ = r;
            gpu_open();
            double end = now() + 30;
            while (!sh->id_ready && now() < end)
                usleep(1000);
            if (sh->id_ready) {
                /* every check is counted as it happens, so that a rank that exits on purpose
                 * (errors) keeps its counts */
                run_case(argv[1]);
            } else {
                failed++;
            }
            publish();
            _exit(failed ? 1 : 0);
        }
    }
    if (ncclGetUniqueId(&sh->id) != ncclSuccess) {
        fprintf(stderr, "ncclGetUniqueId: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    __atomic_store_n(&sh->id_ready, 1, __ATOMIC_RELEASE);
    const char *dl = getenv("NCCL_TEST_DEADLINE");
    double end = now() + (dl ? atof(dl) : 90);
    int left = nranks_;
    while (left > 0 && now() < end) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid <= 0) {
            usleep(10000);
            continue;
        }
        left--;
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("[parent] FAIL: pid %d ended with %s %d\n", (int)pid,
                   WIFSIGNALED(status) ? "signal" : "status",
                   WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            failed++;
        }
    }
    for (int r = 0; r < nranks_ && left > 0; r++)
        if (kill(pids[r], SIGKILL) == 0)
            printf("[parent] FAIL: rank %d still running at the deadline: killed\n", r);
    while (waitpid(-1, NULL, 0) > 0)
        ;
    for (int r = 0; r < nranks_; r++) {
        passed += sh->passed[r];
        failed += sh->failed[r];
    }
    failed += left > 0;
    printf("%s: %ld passed, %ld failed\n", argv[1], passed, failed);
    return failed ? 1 : 0;
}
