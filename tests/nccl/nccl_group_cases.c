/* nccl_test's cases of communicators made inside a group (as XLA splits every communicator of a
 * process in one group), NCCL_COMM_BLOCKING=0 where NCCL makes the communicator whole before it
 * returns, and the answers nccl.h and NCCL 2.28.9's source give for revoke, finalize and a
 * few arguments. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nccl_test.h"

/* the sum of (rank + 1) over the n ranks of comm is all-reduced and checked */
static void sum_of(ncclComm_t comm, int n, int myrank, const char *what)
{
    int64_t mine = myrank + 1, sum = 0;
    CHECK_OK(ncclAllReduce(&mine, &sum, 1, ncclInt64, ncclSum, comm, NULL), what);
    CHECK(sum == (int64_t)n * (n + 1) / 2, "%s: sum %lld, want %d", what, (long long)sum,
          n * (n + 1) / 2);
}

/* n ranks of one process split in one group, by parity: the XLA pattern (one thread holds every
 * rank; each split waits for the others, so they must run together at ncclGroupEnd) */
static void split_all(ncclComm_t *comms, int n)
{
    ncclComm_t halves[MAX_RANKS] = {0};
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n; r++)
        CHECK_OK(ncclCommSplit(comms[r], r % 2, r, &halves[r], NULL), "ncclCommSplit in a group");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of the splits");
    int64_t in[MAX_RANKS], out[MAX_RANKS];
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    for (int r = 0; r < n; r++) {
        in[r] = r + 1;
        out[r] = 0;
        CHECK(halves[r] != NULL, "rank %d: the grouped split gave no communicator", r);
        if (halves[r] != NULL)
            CHECK_OK(ncclAllReduce(&in[r], &out[r], 1, ncclInt64, ncclSum, halves[r], NULL),
                     "all_reduce on a half");
    }
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of the halves' all_reduce");
    for (int r = 0; r < n; r++) {
        int64_t want = 0;
        for (int q = r % 2; q < n; q += 2)
            want += q + 1;
        CHECK(out[r] == want, "rank %d: its half's sum is %lld, want %lld", r, (long long)out[r],
              (long long)want);
        if (halves[r] != NULL)
            CHECK_OK(ncclCommDestroy(halves[r]), "destroy a half");
    }
}

/* One process, every rank: ncclCommInitAll (whatever NCCL_COMM_BLOCKING says: with 0 it once
 * returned ncclInProgress with no communicator, then freed one its creating thread still held),
 * then every rank split in one group. */
void case_initall_split(int n)
{
    ncclComm_t comms[MAX_RANKS] = {0};
    CHECK_OK(ncclCommInitAll(comms, n, NULL), "ncclCommInitAll");
    for (int r = 0; r < n; r++) {
        CHECK(comms[r] != NULL, "ncclCommInitAll gave no communicator for rank %d", r);
        if (comms[r] == NULL)
            return;
        ncclResult_t state = ncclInternalError;
        CHECK(ncclCommGetAsyncError(comms[r], &state) == ncclSuccess && state == ncclSuccess,
              "rank %d is ready: %d", r, (int)state);
    }
    split_all(comms, n);
    for (int r = 0; r < n; r++)
        CHECK_OK(ncclCommDestroy(comms[r]), "destroy");
}

/* NCCL_COMM_BLOCKING=0 (this case's environment): ncclCommInitRank outside a group is whole when
 * it returns (NCCL runs it at once at group depth 0), ncclCommInitRankConfig returns
 * ncclInProgress or ncclSuccess and is polled to success. */
static void env_nonblocking(void)
{
    ncclComm_t comm = NULL;
    CHECK(ncclCommInitRank(&comm, nranks_, sh->id, rank_) == ncclSuccess && comm != NULL,
          "ncclCommInitRank under NCCL_COMM_BLOCKING=0 returns ncclSuccess: %s",
          ncclGetLastError(NULL));
    if (comm == NULL)
        return;
    ncclResult_t state = ncclInternalError;
    CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess && state == ncclSuccess,
          "and the communicator is ready: %d", (int)state);
    ncclComm_t child = NULL;
    ncclResult_t rc = ncclCommSplit(comm, 0, rank_, &child, NULL);
    CHECK(rc == ncclSuccess || rc == ncclInProgress, "ncclCommSplit: %d", (int)rc);
    double end = now() + 30;
    while (child != NULL && ncclCommGetAsyncError(child, &state) == ncclSuccess &&
           state == ncclInProgress && now() < end)
        usleep(1000);
    CHECK(child != NULL && state == ncclSuccess, "the split is polled to success: %d", (int)state);
    if (child != NULL) {
        sum_of(child, nranks_, rank_, "the split's all_reduce");
        CHECK_OK(ncclCommDestroy(child), "destroy the split");
    }
    CHECK_OK(ncclCommDestroy(comm), "destroy");
}

/* Splits and shrinks inside a group, with a collective beside them; NOCOLOR in a group; a refused
 * split fails its group. Then revoke, finalize and argument answers as NCCL 2.28.9 gives them. */
void case_group(void)
{
    if (getenv("NCCL_COMM_BLOCKING") != NULL) {
        env_nonblocking();
        return;
    }
    ncclComm_t comm = init_comm();
    if (comm == NULL)
        return;
    const int last = nranks_ - 1;
    /* 1. a split by parity, a split that leaves rank 0 out, and an all_reduce: one group */
    ncclComm_t half = NULL, rest = NULL;
    int64_t one = rank_ + 1, all = 0;
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclCommSplit(comm, rank_ % 2, rank_, &half, NULL), "split by parity");
    CHECK_OK(ncclCommSplit(comm, rank_ == 0 ? NCCL_SPLIT_NOCOLOR : 0, rank_, &rest, NULL),
             "split with NOCOLOR on rank 0");
    CHECK_OK(ncclAllReduce(&one, &all, 1, ncclInt64, ncclSum, comm, NULL), "all_reduce beside");
    CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of two splits and an all_reduce");
    CHECK(all == (int64_t)nranks_ * (nranks_ + 1) / 2, "the group's all_reduce: %lld",
          (long long)all);
    CHECK((rest == NULL) == (rank_ == 0),
          "rank %d: NOCOLOR in a group gives NULL, at its end "
          "(got %p)",
          rank_, (void *)rest);
    int size = 0;
    CHECK(half != NULL && ncclCommCount(half, &size) == ncclSuccess &&
              size == (nranks_ + 1 - rank_ % 2) / 2,
          "the half has %d ranks", size);
    if (rest != NULL) {
        sum_of(rest, nranks_ - 1, rank_ - 1, "the NOCOLOR split's all_reduce");
        CHECK_OK(ncclCommDestroy(rest), "destroy");
    }
    if (half != NULL)
        CHECK_OK(ncclCommDestroy(half), "destroy");
    /* 2. a shrink in a group (the last rank left out, alive) */
    if (rank_ != last) {
        ncclComm_t shrunk = NULL;
        int excl = last;
        CHECK_OK(ncclGroupStart(), "ncclGroupStart");
        CHECK_OK(ncclCommShrink(comm, &excl, 1, &shrunk, NULL, NCCL_SHRINK_DEFAULT),
                 "ncclCommShrink in a group");
        CHECK_OK(ncclGroupEnd(), "ncclGroupEnd of a shrink");
        CHECK(shrunk != NULL, "the grouped shrink gave no communicator");
        if (shrunk != NULL) {
            sum_of(shrunk, nranks_ - 1, rank_, "the shrunk communicator's all_reduce");
            CHECK_OK(ncclCommDestroy(shrunk), "destroy");
        }
    }
    /* 3. a split refused in a group (a color below NOCOLOR) fails the group: the all_reduce
     * queued beside it does not run, ncclGroupEnd says why, and the next group works */
    ncclComm_t bad = NULL;
    all = -1;
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclAllReduce(&one, &all, 1, ncclInt64, ncclSum, comm, NULL), "queued");
    expect(ncclCommSplit(comm, -5, 0, &bad, NULL), ncclInvalidArgument, "color -5", "color -5");
    expect(ncclGroupEnd(), ncclInvalidArgument, "the group of a refused split", "color -5");
    CHECK(all == -1 && bad == NULL, "nothing of the failed group ran: %lld", (long long)all);
    /* ... and so does a creation this layer refuses itself (an uninitialized config) */
    ncclConfig_t junk;
    memset(&junk, 0, sizeof(junk));
    CHECK_OK(ncclGroupStart(), "ncclGroupStart");
    CHECK_OK(ncclAllReduce(&one, &all, 1, ncclInt64, ncclSum, comm, NULL), "queued");
    expect(ncclCommSplit(comm, 0, 0, &bad, &junk), ncclInvalidArgument, "a junk config",
           "NCCL_CONFIG_INITIALIZER");
    expect(ncclGroupEnd(), ncclInvalidArgument, "the group of a refused config",
           "NCCL_CONFIG_INITIALIZER");
    CHECK(all == -1 && bad == NULL, "nothing of that group ran either: %lld", (long long)all);
    sum_of(comm, nranks_, rank_, "the parent after a failed group");
    /* 4. arguments NCCL refuses before it starts anything */
    ncclConfig_t nb = NCCL_CONFIG_INITIALIZER;
    nb.blocking = 0;
    ncclComm_t c2 = (ncclComm_t)&c2;
    expect(ncclCommInitRankConfig(&c2, nranks_, sh->id, nranks_, &nb), ncclInvalidArgument,
           "a non-blocking creation with rank == nranks", "rank in [0, nranks)");
    CHECK(c2 == NULL, "and no communicator");
    expect(ncclCommInitRankScalable(&c2, 1, 0, 2, &sh->id, NULL), ncclInvalidArgument,
           "two ids for one rank", "from one to nranks unique ids");
    int excl = last;
    expect(ncclCommShrink(comm, &excl, 0, &c2, NULL, 0), ncclInvalidArgument,
           "a shrink that leaves nobody out", "excludeRanksCount is 0");
    void *p = &p;
    CHECK(ncclMemAlloc(&p, 0) == ncclSuccess && p == NULL, "ncclMemAlloc of 0 bytes: NULL");
    /* 5. revoke: NULL is nothing; then collectives are ncclInvalidUsage (even of 0 elements),
     * the state is ncclSuccess (quiescent), a second revoke is ncclInvalidArgument, and a
     * split and a shrink still follow */
    CHECK(ncclCommRevoke(NULL, 0) == ncclSuccess, "revoke of a NULL communicator");
    ncclComm_t dup = NULL;
    CHECK_OK(ncclCommSplit(comm, 0, rank_, &dup, NULL), "a copy to revoke");
    if (dup != NULL) {
        CHECK_OK(ncclCommRevoke(dup, 0), "ncclCommRevoke");
        ncclResult_t state = ncclInternalError;
        CHECK(ncclCommGetAsyncError(dup, &state) == ncclSuccess && state == ncclSuccess,
              "a revoked communicator is quiescent: %d", (int)state);
        expect(ncclAllReduce(&one, &all, 1, ncclInt64, ncclSum, dup, NULL), ncclInvalidUsage,
               "all_reduce on a revoked communicator", "was revoked");
        expect(ncclAllReduce(NULL, NULL, 0, ncclInt64, ncclSum, dup, NULL), ncclInvalidUsage,
               "an empty all_reduce on a revoked communicator", "was revoked");
        expect(ncclSend(&one, 1, ncclInt64, (rank_ + 1) % nranks_, dup, NULL), ncclInvalidUsage,
               "send on a revoked communicator", "was revoked");
        expect(ncclCommRevoke(dup, 0), ncclInvalidArgument, "a second revoke", "already revoked");
        /* nccl.h: once quiescent, a revoked communicator can still be split */
        ncclComm_t half = NULL;
        CHECK_OK(ncclCommSplit(dup, rank_ % 2, rank_, &half, NULL),
                 "split of the revoked communicator");
        if (half != NULL) {
            sum_of(half, (nranks_ - rank_ % 2 + 1) / 2, rank_ / 2, "split after the revoke");
            CHECK_OK(ncclCommDestroy(half), "destroy");
        }
        if (rank_ != last) {
            ncclComm_t shrunk = NULL;
            excl = last;
            CHECK_OK(ncclCommShrink(dup, &excl, 1, &shrunk, NULL, NCCL_SHRINK_ABORT),
                     "shrink of the revoked communicator");
            if (shrunk != NULL) {
                sum_of(shrunk, nranks_ - 1, rank_, "shrunk after the revoke");
                CHECK_OK(ncclCommDestroy(shrunk), "destroy");
            }
        }
        CHECK_OK(ncclCommDestroy(dup), "destroy the revoked communicator");
    }
    /* 6. finalize once; a second finalize or a revoke after it is ncclInvalidArgument */
    CHECK_OK(ncclCommFinalize(comm), "ncclCommFinalize");
    expect(ncclCommFinalize(comm), ncclInvalidArgument, "a second finalize", "already finalized");
    expect(ncclCommRevoke(comm, 0), ncclInvalidArgument, "revoke after finalize", "finalized");
    CHECK_OK(ncclCommDestroy(comm), "destroy");
}
