/*
 * Connection storms: NRANKS (default 32) ranks on this machine open every pairwise connection at
 * once. Repeated all_to_alls (64 KiB per peer) and full grouped send/recv exchanges must
 * complete with correct results, also with COLL_SOCKET_MAX_CONNECTING=2 (set by the caller).
 *   test_storm [nranks] [iterations]
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dh.h"

#define PER_PEER (64 * 1024 / 4) /* int32 elements per peer: 64 KiB */

typedef struct sargs {
    int iters;
} sargs_t;

static int32_t val(int from, int to, size_t k, int it)
{
    return (int32_t)((uint32_t)from * 1000003u + (uint32_t)to * 7919u + (uint32_t)k +
                     (uint32_t)it * 13u);
}

static void fill(int32_t *s, int rank, int n, int it)
{
    for (int to = 0; to < n; to++)
        for (size_t k = 0; k < PER_PEER; k++)
            s[(size_t)to * PER_PEER + k] = val(rank, to, k, it);
}

static long check(const int32_t *r, int rank, int n, int it, int skip_self)
{
    long bad = 0;
    for (int from = 0; from < n; from++) {
        if (skip_self && from == rank)
            continue;
        for (size_t k = 0; k < PER_PEER; k++)
            bad += r[(size_t)from * PER_PEER + k] != val(from, rank, k, it);
    }
    return bad;
}

static void body(dh_ctx_t *ctx)
{
    const sargs_t *a = ctx->arg;
    dh_out_t *out = &ctx->sh->out[ctx->rank];
    const int n = ctx->nranks, me = ctx->rank;
    coll_comm_t comm = NULL;
    dh_begin(ctx, me);
    coll_result_t rc = coll_comm_init_rank(&comm, n, ctx->id, me);
    if (rc != COLL_SUCCESS) {
        dh_record(ctx, "coll_comm_init_rank", rc);
        return;
    }
    size_t bytes = (size_t)n * PER_PEER * sizeof(int32_t);
    int32_t *s = malloc(bytes), *r = malloc(bytes);
    const char *what = "all_to_all";
    for (int it = 0; it < a->iters && rc == COLL_SUCCESS; it++) {
        fill(s, me, n, it);
        memset(r, 0xff, bytes);
        rc = coll_all_to_all(s, r, PER_PEER, COLL_INT32, comm, NULL);
        if (rc == COLL_SUCCESS) {
            out->bad += check(r, me, n, it, 0);
            out->checked++;
            out->iters++;
        }
    }
    for (int it = 0; it < a->iters && rc == COLL_SUCCESS; it++) {
        what = "grouped send/recv exchange";
        fill(s, me, n, it + 100);
        memset(r, 0xff, bytes);
        rc = coll_group_start();
        for (int p = 0; p < n && rc == COLL_SUCCESS; p++) {
            if (p == me)
                continue;
            rc = coll_send(s + (size_t)p * PER_PEER, PER_PEER, COLL_INT32, p, comm, NULL);
            if (rc == COLL_SUCCESS)
                rc = coll_recv(r + (size_t)p * PER_PEER, PER_PEER, COLL_INT32, p, comm, NULL);
        }
        coll_result_t rc2 = coll_group_end();
        if (rc == COLL_SUCCESS)
            rc = rc2;
        if (rc == COLL_SUCCESS) {
            out->bad += check(r, me, n, it + 100, 1);
            out->checked++;
            out->iters++;
        }
    }
    dh_record(ctx, what, rc);
    if (rc == COLL_SUCCESS)
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    else
        coll_comm_abort(comm);
    free(s);
    free(r);
}

int main(int argc, char **argv)
{
    dh_init();
    int n = argc > 1 ? atoi(argv[1]) : 32;
    sargs_t a = {.iters = argc > 2 ? atoi(argv[2]) : 3};
    if (n < 2 || n > DH_MAX_RANKS || a.iters < 1) {
        printf("usage: test_storm [nranks 2..%d] [iterations]\n", DH_MAX_RANKS);
        return 2;
    }
    const char *mc = getenv("COLL_SOCKET_MAX_CONNECTING");
    char name[128];
    snprintf(name, sizeof(name),
             "%d ranks, all_to_all + grouped exchange x%d, "
             "COLL_SOCKET_MAX_CONNECTING=%s",
             n, a.iters, mc ? mc : "(default)");
    dh_log("--- %s", name);
    dh_opts_t o = {.name = name, .nranks = n, .deadline_s = 240, .body = body, .arg = &a};
    double t0 = dh_now();
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return dh_finish();
    dh_wait(j);
    double slowest = 0;
    for (int r = 0; r < n; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d: %s", r, out->what);
        CHECK(out->checked == 2 * a.iters, "rank %d: %ld of %d operations checked", r, out->checked,
              2 * a.iters);
        CHECK(out->bad == 0, "rank %d: %ld wrong elements", r, out->bad);
        if (out->t - out->t0 > slowest)
            slowest = out->t - out->t0;
    }
    dh_log("%d ranks: slowest rank took %.1f s (job %.1f s)", n, slowest, dh_now() - t0);
    dh_free(j);
    return dh_finish();
}
