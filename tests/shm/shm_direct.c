/* test_shm's cases of the single-copy path (buffers from coll_mem_alloc):
 *   direct       3 local ranks: every collective, checked, takes the single-copy path (each
 *                rank logs so once); then rank 1 turns non-dumpable (its /proc/<pid>/fd cannot
 *                be opened): every rank logs the two-copy path and the results stay exact; then
 *                rank 0 calls all_reduce where the others call all_gather: a collective mismatch
 *                naming the single-copy path
 *   kill_direct  4 local ranks loop 8 MiB all_reduces on coll_mem_alloc buffers; the parent
 *                SIGKILLs rank 2 */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#include "shm_test.h"

enum { D_ALL, D_FALLBACK, D_MISMATCH };

static float dvalue(size_t i, int rank)
{
    return (float)((i * 3 + (size_t)rank * 5) % 11);
}

/* Every collective once on coll_mem_alloc buffers, each result checked element by element. */
static long direct_collectives(dh_ctx_t *ctx, coll_comm_t comm, size_t n, coll_result_t *rc)
{
    const int nr = ctx->nranks, me = ctx->rank;
    const size_t total = n * (size_t)nr;
    void *sp = NULL, *rp = NULL;
    *rc = coll_mem_alloc(&sp, total * sizeof(float));
    if (*rc == COLL_SUCCESS)
        *rc = coll_mem_alloc(&rp, total * sizeof(float));
    if (*rc != COLL_SUCCESS)
        return 0;
    float *s = sp, *r = rp;
    long bad = 0;
    for (int k = 0; k < 6 && *rc == COLL_SUCCESS; k++) {
        for (size_t i = 0; i < total; i++)
            s[i] = dvalue(i, me);
        memset(r, 0xCD, total * sizeof(float));
        size_t check = n;
        switch (k) {
        case 0:
            *rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
            break;
        case 1:
            *rc = coll_broadcast(s, r, n, COLL_FLOAT32, nr - 1, comm, NULL);
            break;
        case 2:
            *rc = coll_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, 1, comm, NULL);
            check = me == 1 ? n : 0;
            break;
        case 3:
            *rc = coll_all_gather(s, r, n, COLL_FLOAT32, comm, NULL);
            check = total;
            break;
        case 4:
            *rc = coll_reduce_scatter(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
            break;
        default:
            *rc = coll_all_to_all(s, r, n, COLL_FLOAT32, comm, NULL);
            check = total;
            break;
        }
        for (size_t i = 0; i < check && *rc == COLL_SUCCESS; i++) {
            float want = 0;
            if (k == 0 || k == 2)
                for (int q = 0; q < nr; q++)
                    want += dvalue(i, q);
            else if (k == 1)
                want = dvalue(i, nr - 1);
            else if (k == 3)
                want = dvalue(i % n, (int)(i / n));
            else if (k == 4)
                for (int q = 0; q < nr; q++)
                    want += dvalue((size_t)me * n + i, q);
            else
                want = dvalue((size_t)me * n + i % n, (int)(i / n));
            bad += r[i] != want;
        }
    }
    coll_mem_free(sp);
    coll_mem_free(rp);
    return bad;
}

static void direct_body(dh_ctx_t *ctx)
{
    const int mode = *(const int *)ctx->arg;
    if (mode == D_FALLBACK && ctx->rank == 1)
        prctl(PR_SET_DUMPABLE, 0);
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const size_t n = 100003; /* 400 KB per rank: above COLL_SHM_DIRECT_MIN (256 KiB) */
    if (mode == D_MISMATCH) {
        wait_done(ctx, ctx->nranks, 30); /* every rank's init is over before anyone fails */
        void *s = NULL, *r = NULL;
        coll_mem_alloc(&s, n * sizeof(float) * (size_t)ctx->nranks);
        coll_mem_alloc(&r, n * sizeof(float) * (size_t)ctx->nranks);
        dh_begin(ctx, ctx->rank);
        rc = ctx->rank == 0 ? coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL)
                            : coll_all_gather(s, r, n, COLL_FLOAT32, comm, NULL);
        dh_record(ctx, "mismatched collectives", rc);
        coll_comm_abort(comm);
        coll_mem_free(s);
        coll_mem_free(r);
        return;
    }
    long bad = 0;
    for (int round = 0; round < 2 && rc == COLL_SUCCESS; round++)
        bad += direct_collectives(ctx, comm, n, &rc);
    dh_record(ctx, "collectives", rc);
    ctx->sh->out[ctx->rank].bad = bad;
    coll_comm_destroy(comm);
}

static void direct_job(int mode)
{
    static const char *const what[] = {
        "every collective on coll_mem_alloc buffers, 3 local ranks",
        "the same with rank 1 not dumpable (its buffers cannot be mapped)",
        "rank 0 calls all_reduce, ranks 1 and 2 all_gather"};
    debug_on("SHM");
    dh_opts_t o = {.name = "direct",
                   .nranks = 3,
                   .deadline_s = 60,
                   .body = direct_body,
                   .arg = &mode,
                   .quiet = getenv("TEST_SHM_VERBOSE") == NULL};
    dh_log("--- %s", what[mode]);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    int mismatch = 0;
    for (int r = 0; r < 3; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        const char *log = dh_output(j, r);
        if (mode == D_MISMATCH) {
            dh_log("rank %d: %s: %s", r, dh_rc_name(out->rc), out->msg);
            CHECK(out->rc == COLL_ERR_MISMATCH || out->rc == COLL_ERR_REMOTE,
                  "rank %d: expected a mismatch (or the peer's abort), got %s", r,
                  dh_rc_name(out->rc));
            mismatch += out->rc == COLL_ERR_MISMATCH && strstr(out->msg, "collective mismatch") &&
                        strstr(out->msg, "(single-copy path)");
            continue;
        }
        CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "%s: rank %d", what[mode], r);
        CHECK(out->bad == 0, "%s: rank %d: %ld wrong elements", what[mode], r, out->bad);
        int direct = dh_count_lines(log, "single-copy path: every rank's buffers", NULL);
        int ring = dh_count_lines(log, "two-copy ring path", NULL);
        if (mode == D_ALL) {
            CHECK(direct == 1 && ring == 0,
                  "rank %d logs the single-copy path once (%d) and no fallback (%d)", r, direct,
                  ring);
        } else {
            CHECK(direct == 0 && ring == 1,
                  "rank %d logs the two-copy path once (%d) and never the single-copy path (%d)", r,
                  ring, direct);
        }
    }
    if (mode == D_MISMATCH)
        CHECK(mismatch >= 1, "a rank reports the collective mismatch on the single-copy path");
    dh_free(j);
    debug_off();
}

void test_direct(void)
{
    for (int mode = D_ALL; mode <= D_MISMATCH; mode++)
        direct_job(mode);
    check_no_segments("direct");
}

void test_kill_direct(void)
{
    targs_t a = {.name = "kill_direct", .victim = 2, .count = 2u << 20, .shared = 1};
    kill_case(&a, 4);
}
