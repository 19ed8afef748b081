/*
 * Communicators made from a parent, and several ranks created by one thread:
 *   test_split split <nranks>   coll_comm_split: even/odd colors with keys that reverse the
 *                               order, COLL_SPLIT_NOCOLOR, one color for all, a split of a split;
 *                               the children's collectives and the parent's afterwards are
 *                               checked; bad arguments and a split inside a group are refused.
 *   test_split group <nranks>   one process, one thread: coll_comm_init_rank of every rank
 *                               inside one group, then collectives and a send/recv ring over
 *                               all of them in groups (they run concurrently); a group whose
 *                               creation cannot complete fails as a whole and leaves every
 *                               handle NULL.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ok(mp_ctx_t *ctx, coll_result_t rc, const char *what)
{
    if (CHECK_RC(rc, COLL_SUCCESS, "%s", what))
        return 1;
    if (ctx != NULL)
        ctx->fatal = 1;
    return 0;
}

/* sum over the ranks q of the parent with q % mod == res (mod 0: all) of (q + 1) */
static long expected_sum(int n, int mod, int res)
{
    long s = 0;
    for (int q = 0; q < n; q++)
        if (mod == 0 || q % mod == res)
            s += q + 1;
    return s;
}

/* The child's size and rank are as (key, parent rank) order says; an all_reduce and an
 * all_gather of parent ranks over it give the right members in the right order. */
static void check_child(mp_ctx_t *ctx, coll_comm_t child, int want_size, int want_rank,
                        long want_sum, const int *want_order, const char *what)
{
    int size = -1, rank = -1;
    if (!ok(ctx, coll_comm_count(child, &size), what) ||
        !ok(ctx, coll_comm_user_rank(child, &rank), what))
        return;
    CHECK(size == want_size && rank == want_rank, "%s: rank %d of %d, want %d of %d", what, rank,
          size, want_rank, want_size);
    long mine = ctx->rank + 1, sum = 0;
    if (ok(ctx, coll_all_reduce(&mine, &sum, 1, COLL_INT64, COLL_SUM, child, NULL), what))
        CHECK(sum == want_sum, "%s: all_reduce %ld, want %ld", what, sum, want_sum);
    int *order = calloc((size_t)size, sizeof(int));
    int me = ctx->rank;
    if (order != NULL && ok(ctx, coll_all_gather(&me, order, 1, COLL_INT32, child, NULL), what))
        for (int i = 0; i < size; i++)
            CHECK(order[i] == want_order[i], "%s: child rank %d is parent rank %d, want %d", what,
                  i, order[i], want_order[i]);
    free(order);
}

static void split_body(mp_ctx_t *ctx)
{
    const int n = ctx->nranks, r = ctx->rank;
    int order[MP_MAX_RANKS] = {0}, k = 0;

    /* even and odd ranks, each in reverse order (key = -rank) */
    coll_comm_t parity = NULL;
    if (!ok(ctx, coll_comm_split(ctx->comm, r % 2, -r, &parity), "split by parity"))
        return;
    int same = 0, before = 0;
    for (int q = n - 1; q >= 0; q--)
        if (q % 2 == r % 2) {
            order[k++] = q;
            same++;
            before += q > r;
        }
    check_child(ctx, parity, same, before, expected_sum(n, 2, r % 2), order, "parity child");

    /* a split of a split: the parity child split again into one color (its own order) */
    coll_comm_t again = NULL;
    if (ok(ctx, coll_comm_split(parity, 7, 0, &again), "split of the parity child")) {
        check_child(ctx, again, same, before, expected_sum(n, 2, r % 2), order, "grandchild");
        ok(ctx, coll_comm_destroy(again), "destroy grandchild");
    }
    ok(ctx, coll_comm_destroy(parity), "destroy parity child");

    /* rank 0 joins none, the others keep their order */
    coll_comm_t rest = NULL;
    if (ok(ctx, coll_comm_split(ctx->comm, r == 0 ? COLL_SPLIT_NOCOLOR : 3, 0, &rest),
           "split without rank 0")) {
        if (r == 0) {
            CHECK(rest == NULL, "COLL_SPLIT_NOCOLOR gives NULL");
        } else if (rest == NULL) {
            mp_fail("rank %d was left out of the split", r);
        } else {
            k = 0;
            for (int q = 1; q < n; q++)
                order[k++] = q;
            check_child(ctx, rest, n - 1, r - 1, expected_sum(n, 0, 0) - 1, order, "rest child");
            ok(ctx, coll_comm_destroy(rest), "destroy rest child");
        }
    }

    /* bad arguments are refused locally, before anything is exchanged */
    coll_comm_t none = (coll_comm_t)1;
    CHECK_RC(coll_comm_split(ctx->comm, 0, 0, NULL), COLL_ERR_INVALID_ARGUMENT, "NULL newcomm");
    CHECK_RC(coll_comm_split(ctx->comm, -2, 0, &none), COLL_ERR_INVALID_ARGUMENT, "color -2");
    CHECK(none == NULL, "a refused split leaves newcomm NULL");
    CHECK(mp_contains(coll_get_last_error(), "COLL_SPLIT_NOCOLOR"), "the message says what to use");
    /* in a group (as XLA splits all its communicators): made at the group's end, in issue
     * order with a second split of the same parent; a refused split fails the group */
    coll_comm_t same_order = NULL, reversed = NULL;
    coll_group_start();
    ok(ctx, coll_comm_split(ctx->comm, 0, r, &same_order), "split in a group");
    ok(ctx, coll_comm_split(ctx->comm, 0, -r, &reversed), "a second split in the group");
    CHECK(same_order == NULL && reversed == NULL, "made at the group's end, not before it");
    if (ok(ctx, coll_group_end(), "the group of two splits") && same_order && reversed) {
        for (int q = 0; q < n; q++)
            order[q] = q;
        check_child(ctx, same_order, n, r, expected_sum(n, 0, 0), order, "grouped split");
        for (int q = 0; q < n; q++)
            order[q] = n - 1 - q;
        check_child(ctx, reversed, n, n - 1 - r, expected_sum(n, 0, 0), order, "reversed split");
    }
    if (same_order != NULL)
        ok(ctx, coll_comm_destroy(same_order), "destroy");
    if (reversed != NULL)
        ok(ctx, coll_comm_destroy(reversed), "destroy");
    coll_group_start();
    CHECK_RC(coll_comm_split(ctx->comm, -3, 0, &none), COLL_ERR_INVALID_ARGUMENT,
             "color -3 in a group");
    CHECK_RC(coll_group_end(), COLL_ERR_INVALID_ARGUMENT, "the group of a refused split fails");

    /* the parent still works */
    long mine = r + 1, sum = 0;
    if (ok(ctx, coll_all_reduce(&mine, &sum, 1, COLL_INT64, COLL_SUM, ctx->comm, NULL),
           "parent after the splits"))
        CHECK(sum == expected_sum(n, 0, 0), "parent all_reduce %ld", sum);
}

/* ---- one thread, every rank ---- */

static void group_test(int n)
{
    coll_unique_id_t id;
    coll_comm_t comms[MP_MAX_RANKS] = {0};
    if (!ok(NULL, coll_get_unique_id(&id), "unique id"))
        return;
    coll_group_start();
    for (int r = 0; r < n; r++)
        if (!ok(NULL, coll_comm_init_rank(&comms[r], n, id, r), "init in a group"))
            break;
    if (!ok(NULL, coll_group_end(), "group of inits"))
        return;
    for (int r = 0; r < n; r++)
        if (comms[r] == NULL) {
            mp_fail("rank %d was not created", r);
            return;
        }

    /* a collective on every rank in one group: they run concurrently */
    long in[MP_MAX_RANKS], out[MP_MAX_RANKS];
    coll_group_start();
    for (int r = 0; r < n; r++) {
        in[r] = r + 1;
        out[r] = 0;
        ok(NULL, coll_all_reduce(&in[r], &out[r], 1, COLL_INT64, COLL_SUM, comms[r], NULL),
           "queue all_reduce");
    }
    if (ok(NULL, coll_group_end(), "group of all_reduces"))
        for (int r = 0; r < n; r++)
            CHECK(out[r] == expected_sum(n, 0, 0), "rank %d: all_reduce %ld", r, out[r]);

    /* a ring of sends and receives over every rank, in one group */
    coll_group_start();
    for (int r = 0; r < n; r++) {
        in[r] = 100 + r;
        out[r] = -1;
        ok(NULL, coll_send(&in[r], 1, COLL_INT64, (r + 1) % n, comms[r], NULL), "queue send");
        ok(NULL, coll_recv(&out[r], 1, COLL_INT64, (r + n - 1) % n, comms[r], NULL), "queue recv");
    }
    if (ok(NULL, coll_group_end(), "group of sends and receives"))
        for (int r = 0; r < n; r++)
            CHECK(out[r] == 100 + (r + n - 1) % n, "rank %d received %ld", r, out[r]);
    for (int r = 0; r < n; r++)
        ok(NULL, coll_comm_destroy(comms[r]), "destroy");

    /* one rank short: the group fails as a whole (bootstrap timeout), every handle stays NULL */
    if (!ok(NULL, coll_get_unique_id(&id), "unique id"))
        return;
    coll_group_start();
    for (int r = 0; r < n - 1; r++) {
        comms[r] = (coll_comm_t)1;
        ok(NULL, coll_comm_init_rank(&comms[r], n, id, r), "init in a group");
    }
    double t0 = mp_now();
    coll_result_t rc = coll_group_end();
    CHECK(rc != COLL_SUCCESS, "a group missing rank %d fails", n - 1);
    CHECK(mp_mentions_rank(coll_get_last_error(), n - 1), "the error names rank %d: %s", n - 1,
          coll_get_last_error());
    CHECK(mp_now() - t0 < 30, "it fails within the bootstrap timeout (%.1f s)", mp_now() - t0);
    for (int r = 0; r < n - 1; r++)
        CHECK(comms[r] == NULL, "rank %d left NULL", r);
}

int main(int argc, char **argv)
{
    mp_init();
    int n = argc > 2 ? atoi(argv[2]) : 4;
    if (argc < 2 || n < 1 || n > MP_MAX_RANKS) {
        fprintf(stderr, "usage: test_split split|group <nranks 1..%d>\n", MP_MAX_RANKS);
        return 2;
    }
    if (strcmp(argv[1], "group") == 0) {
        group_test(n);
        return mp_finish();
    }
    mp_opts_t o = {.name = "split",
                   .nranks = n,
                   .deadline_s = mp_env_int("MP_DEADLINE", 90),
                   .expect_sigkill_rank = -1,
                   .body = split_body};
    mp_run(&o);
    return mp_finish();
}
