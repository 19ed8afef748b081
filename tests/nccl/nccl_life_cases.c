/* nccl_test's cases about communicators' lives in a process: many at once, a creation that
 * fails on one rank, a rank that forks and then dies. */
#define _GNU_SOURCE
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nccl_test.h"

/* ---- many communicators at once ---- */

/* The descriptors open in this process (the directory's own too) as "fd -> target" lines into
 * out (NULL: just count them). */
static int open_fds(char *out, size_t cap)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    int n = 0;
    size_t used = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (e->d_name[0] == '.')
            continue;
        n++;
        char path[300], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t len = readlink(path, target, sizeof(target) - 1);
        target[len > 0 ? len : 0] = '\0';
        if (out != NULL && used < cap) {
            int w = snprintf(out + used, cap - used, "%s -> %s\n", e->d_name, target);
            used += w > 0 ? (size_t)w : 0;
        }
    }
    closedir(d);
    return n;
}

/* Makes n communicators split from comm, all alive at once, an all_reduce on each, then
 * destroys them; false once one could not be made. */
static int many_round(ncclComm_t comm, int n, int round)
{
    ncclComm_t *kids = calloc((size_t)n, sizeof(*kids));
    int made = 0;
    double t0 = now();
    for (; kids != NULL && made < n; made++) {
        ncclResult_t rc = ncclCommSplit(comm, 0, rank_, &kids[made], NULL);
        if (rc != ncclSuccess) {
            CHECK_OK(rc, "ncclCommSplit");
            break;
        }
    }
    CHECK(made == n, "round %d: rank %d made %d of %d communicators", round, rank_, made, n);
    if (rank_ == 0)
        printf("round %d: %d communicators of %d ranks alive: %d descriptors, %.1f ms each\n",
               round, made, nranks_, open_fds(NULL, 0), (now() - t0) * 1e3 / (made ? made : 1));
    long bad = 0;
    for (int k = 0; k < made; k++) {
        int64_t v = rank_ + k, sum = -1, want = 0;
        for (int q = 0; q < nranks_; q++)
            want += q + k;
        CHECK_OK(ncclAllReduce(&v, &sum, 1, ncclInt64, ncclSum, kids[k], NULL), "all_reduce");
        bad += sum != want;
    }
    CHECK(bad == 0, "round %d: %ld of %d communicators gave a wrong sum", round, bad, made);
    for (int k = 0; k < made; k++)
        CHECK_OK(ncclCommDestroy(kids[k]), "destroy");
    free(kids);
    return made == n;
}

/* NCCL_TEST_COMMS (64) communicators of every rank alive at once, split from one parent, as a
 * framework holds one per group and per pair: each is made, carries an all_reduce while all of
 * them are alive, and is destroyed, after which the process holds the descriptors it held
 * before. Every two ranks of a node are joined by a link per communicator, so a node of 8 ranks
 * with 64 of them holds 1792 links: under ports_test.sh, whose network namespace has 2000
 * ephemeral ports, this is what ran out of them when each link took a port of its own. */
void case_many(void)
{
    const char *e = getenv("NCCL_TEST_COMMS");
    int n = e ? atoi(e) : 64;
    ncclComm_t comm = init_comm();
    if (comm == NULL || n < 1)
        return;
    /* The parent makes its links to the other ranks when it first uses them (the splits do):
     * the descriptors are counted after a first round, and the second must end where it began */
    static char before[8192], after[8192];
    if (many_round(comm, n, 1)) {
        int fds = open_fds(before, sizeof(before));
        many_round(comm, n, 2);
        int left = open_fds(after, sizeof(after));
        CHECK(left == fds,
              "rank %d holds %d descriptors after destroying them all, %d before:\n%s\nnow:\n%s",
              rank_, left, fds, before, after);
    }
    CHECK_OK(ncclCommDestroy(comm), "destroy parent");
}

/* ---- a creation that fails on one rank after the exchange ---- */

/* COLL_TEST_FAIL_READY (by rank) makes some ranks fail after the exchange, before their links.
 * Every other rank must fail within seconds with the failing rank's reason: its creation, where
 * it waits for that rank's links (ranks of one host), or else its first operation. They used to
 * wait for the links until COLL_BOOTSTRAP_TIMEOUT (1800 s with NCCL's defaults) and then fail
 * without the reason. */
void case_initfail(void)
{
    const char *list = getenv("COLL_TEST_FAIL_READY"), *p = list;
    for (int r = 0; p != NULL && r < rank_; r++) {
        p = strchr(p, ',');
        p = p ? p + 1 : NULL;
    }
    const int mine = p != NULL && *p == '1';
    double t0 = now();
    ncclComm_t comm = NULL;
    ncclResult_t rc = ncclCommInitRank(&comm, nranks_, sh->id, rank_);
    const char *when = "ncclCommInitRank";
    if (rc == ncclSuccess && !mine) {
        int64_t one = 1, sum = 0;
        rc = ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, NULL);
        when = "the first all_reduce";
    }
    double took = now() - t0;
    const char *msg = ncclGetLastError(NULL);
    CHECK(rc == (mine ? ncclSystemError : ncclRemoteError), "rank %d: %s gave %d (%s), want %s",
          rank_, when, (int)rc, ncclGetErrorString(rc),
          mine ? "ncclSystemError" : "ncclRemoteError");
    CHECK(strstr(msg, "injected failure after the exchange") != NULL &&
              (mine || strstr(msg, " reported: ") != NULL),
          "rank %d: %s names the failing rank's reason: \"%s\"", rank_, when, msg);
    CHECK(took < 10, "rank %d failed after %.1f s", rank_, took);
    if (comm != NULL)
        CHECK_OK(ncclCommDestroy(comm), "destroy");
}

/* ---- a rank that forks, then dies ---- */

/* A communicator that ran one all_reduce of *one into *sum: its connections and links are made
 * at first use, so a child forked after this holds them. NULL when the creation failed. */
static ncclComm_t used_comm(int64_t *one, int64_t *sum)
{
    ncclComm_t comm = init_comm();
    if (comm != NULL)
        CHECK_OK(ncclAllReduce(one, sum, 1, ncclInt64, ncclSum, comm, NULL), "all_reduce");
    return comm;
}

/* Every rank forks a child after its communicator's first all_reduce, as a PyTorch DataLoader
 * worker (fork start method) is; the children sleep and hold whatever they inherited. The
 * communicator still works; then rank 2 dies (exits at once) while the others wait for it in an
 * all_reduce. They must fail within seconds naming rank 2: its child still lived, and before the
 * child let go of the communicator's sockets (base/comm.c, fork_child), they waited for as long
 * as it lived (20 s here: its alarm). */
void case_forkdeath(void)
{
    int64_t one = 1, sum = 0;
    ncclComm_t comm = used_comm(&one, &sum);
    if (comm == NULL)
        return;
    pid_t child = fork();
    if (child == 0) {
        alarm(20); /* the child outlives its parent rank, but not the test */
        for (;;)
            pause();
    }
    CHECK(child > 0, "rank %d forks a child", rank_);
    sh->stage[rank_] = child > 0 ? (int)child : 0;
    sum = 0;
    CHECK_OK(ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, NULL),
             "all_reduce with children");
    CHECK(sum == nranks_, "all_reduce with children alive: %lld", (long long)sum);
    if (rank_ == nranks_ - 1) {
        usleep(200000); /* the others are in their all_reduce by now */
        publish();      /* this rank's counts; then it ends as a killed rank would, without a */
        _exit(0);       /* word to its peers: the kernel closes its descriptors */
    }
    double t0 = now();
    ncclResult_t rc = ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, NULL);
    double took = now() - t0;
    char dead[32];
    snprintf(dead, sizeof(dead), "rank %d ", nranks_ - 1);
    CHECK(rc == ncclRemoteError && strstr(ncclGetLastError(NULL), dead) != NULL,
          "rank %d: the all_reduce with a dead peer gave %d: %s", rank_, (int)rc,
          ncclGetLastError(NULL));
    CHECK(took < 5, "rank %d learnt of the dead rank after %.1f s (its child still lives)", rank_,
          took);
    (void)ncclCommDestroy(comm);
    if (rank_ == 0) /* every child, the dead rank's too */
        for (int r = 0; r < nranks_; r++)
            if (sh->stage[r] > 0)
                kill((pid_t)sh->stage[r], SIGKILL);
    if (child > 0)
        waitpid(child, NULL, 0);
}

/* ---- a root that dies before its first transfer ---- */

/* Rank 0 ends right after the creation, without a word to its peers (the kernel closes its
 * descriptors, as for a killed rank), before it sent anything; the others broadcast from it.
 * Across hosts nobody has a connection from rank 0 that could break (the sender opens them), and
 * under NCCL's defaults (no COLL_TIMEOUT) they waited for ever. A probe of rank 0's listener
 * must fail them within seconds, naming it. */
void case_deadroot(void)
{
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    sh->stage[rank_] = 1; /* every rank has its communicator before rank 0 goes */
    for (double end = now() + 30; now() < end; usleep(1000)) {
        int all = 1;
        for (int r = 0; r < nranks_; r++)
            all &= sh->stage[r] == 1;
        if (all)
            break;
    }
    if (rank_ == 0) {
        publish();
        _exit(0);
    }
    int64_t v = 0;
    double t0 = now();
    ncclResult_t rc = ncclBroadcast(&v, &v, 1, ncclInt64, 0, comm, NULL);
    double took = now() - t0;
    CHECK(rc == ncclRemoteError && strstr(ncclGetLastError(NULL), "rank 0 (pid ") != NULL &&
              strstr(ncclGetLastError(NULL), "is gone") != NULL,
          "rank %d: a broadcast from a root that died gave %d: %s", rank_, (int)rc,
          ncclGetLastError(NULL));
    CHECK(took < 5, "rank %d learnt that the root died after %.1f s", rank_, took);
    (void)ncclCommAbort(comm);
}

/* The child forked (child: fork's result) ran its checks and exited 0. */
static void child_passed(pid_t child, const char *which)
{
    CHECK(child > 0, "rank %d forks a child", rank_);
    int status = -1;
    pid_t w = child > 0 ? waitpid(child, &status, 0) : -1;
    CHECK(w == child && WIFEXITED(status) && WEXITSTATUS(status) == 0,
          "rank %d: %s passed its checks (status 0x%x)", rank_, which, (unsigned)status);
}

/* Rank 0 forks while a non-blocking creation of its own waits for a peer that never comes: the
 * child has no creating thread. Its ncclCommGetAsyncError must not say ncclInProgress for ever
 * (it did: a caller polls until it changes), its calls must say why they fail (they said that the
 * creation had failed, "see the earlier error", of which there was none), and its abort only
 * lets go. */
static void forked_creation(void)
{
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclUniqueId lone;
    ncclComm_t pending = NULL;
    CHECK_OK(ncclGetUniqueId(&lone), "ncclGetUniqueId");
    ncclResult_t rc = ncclCommInitRankConfig(&pending, 2, lone, 0, &config);
    CHECK(rc == ncclInProgress && pending != NULL, "a creation that waits: %d", (int)rc);
    if (pending == NULL)
        return;
    pid_t child = fork();
    if (child == 0) {
        alarm(10);
        ncclResult_t state = ncclInProgress;
        for (double end = now() + 3; state == ncclInProgress && now() < end; usleep(1000))
            CHECK_OK(ncclCommGetAsyncError(pending, &state), "ncclCommGetAsyncError in a child");
        CHECK(state == ncclInvalidUsage, "the child polls the inherited creation to %d (%s)",
              (int)state, ncclGetErrorString(state));
        int count = 0;
        expect(ncclCommCount(pending, &count), ncclInvalidUsage,
               "ncclCommCount on a creation inherited by a fork", "non-blocking creation was");
        CHECK_OK(ncclCommAbort(pending), "ncclCommAbort in the child");
        _exit(failed == 0 ? 0 : 1);
    }
    child_passed(child, "the child of a pending creation");
    ncclResult_t state = ncclSuccess;
    CHECK(ncclCommGetAsyncError(pending, &state) == ncclSuccess && state == ncclInProgress,
          "the parent's creation still runs: %d", (int)state);
    CHECK_OK(ncclCommAbort(pending), "ncclCommAbort of the pending creation");
}

/* A child forked from each rank (a DataLoader worker, a helper) that uses the communicator it
 * inherited: every call is refused naming the fork, and its destroy (odd ranks) or abort (even
 * ranks) lets go of the handle and touches nothing else. Before, the abort told the peers the
 * communicator ended and both closed descriptors by number: the fork had closed the
 * communicator's, and the child's own pipes (made after the fork) took those numbers. The
 * parents' communicator must still work afterwards. */
void case_forkuse(void)
{
    if (rank_ == 0)
        forked_creation();
    int64_t one = 1, sum = 0;
    ncclComm_t comm = used_comm(&one, &sum);
    if (comm == NULL)
        return;
    pid_t child = fork();
    if (child == 0) {
        int p[8][2];
        int npipes = 0;
        while (npipes < 8 && pipe(p[npipes]) == 0)
            npipes++;
        CHECK(npipes == 8, "child of rank %d: 8 pipes (%d)", rank_, npipes);
        expect(ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, NULL), ncclInvalidUsage,
               "all_reduce in a forked child", "was forked from it");
        int count = 0;
        expect(ncclCommCount(comm, &count), ncclInvalidUsage, "ncclCommCount in a forked child",
               "Create a communicator in this process");
        if (rank_ % 2 == 0)
            CHECK_OK(ncclCommAbort(comm), "ncclCommAbort in a forked child");
        else
            CHECK_OK(ncclCommDestroy(comm), "ncclCommDestroy in a forked child");
        for (int i = 0; i < npipes; i++) {
            char b = (char)('a' + i), got = 0;
            CHECK(write(p[i][1], &b, 1) == 1 && read(p[i][0], &got, 1) == 1 && got == b,
                  "child of rank %d: its pipe %d (fds %d, %d) still works", rank_, i, p[i][0],
                  p[i][1]);
        }
        _exit(failed == 0 ? 0 : 1);
    }
    child_passed(child, "its child");
    sum = 0;
    CHECK_OK(ncclAllReduce(&one, &sum, 1, ncclInt64, ncclSum, comm, NULL),
             "all_reduce after the children let go");
    CHECK(sum == nranks_, "all_reduce after the children: %lld", (long long)sum);
    CHECK_OK(ncclCommDestroy(comm), "ncclCommDestroy");
}
