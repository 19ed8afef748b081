/*
 * Conformance of every collective against an independent reference:
 *   test_conformance <collective|all> <nranks> [large=0|1]
 * every datatype x every op (reducing collectives) x counts {0, 1, 7, 1023, 1Mi+3}, in place
 * and out of place, roots 0, nranks-1 and a middle one. One communicator runs every case.
 */
#define _GNU_SOURCE
#include "harness.h"
#include "ref.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LARGE_COUNT ((size_t)1048576 + 3)
#define POISON      0xCD /* fill of output buffers before a call */
#define OTHER       0x5A /* fill of buffers that must stay untouched */

typedef enum {
    K_ALL_REDUCE,
    K_BROADCAST,
    K_REDUCE,
    K_ALL_GATHER,
    K_REDUCE_SCATTER,
    K_ALL_TO_ALL,
    K_NUM
} kind_t;

static const char *const kind_names[K_NUM] = {"all_reduce", "broadcast",      "reduce",
                                              "all_gather", "reduce_scatter", "all_to_all"};

static int kind_reduces(kind_t k)
{
    return k == K_ALL_REDUCE || k == K_REDUCE || k == K_REDUCE_SCATTER;
}

static int kind_has_root(kind_t k)
{
    return k == K_BROADCAST || k == K_REDUCE;
}

typedef struct conf_args {
    int kinds[K_NUM];
    int large;
    int verbose; /* MP_VERBOSE=1: rank 0 logs the time of every large case */
} conf_args_t;

typedef struct ccase {
    kind_t kind;
    coll_datatype_t dt;
    coll_op_t op;
    size_t count;
    int inplace;
    int root;
    uint64_t seed;
    char desc[160];
} ccase_t;

/* Which (dtype, op) pairs run at the large count: every dtype with sum, every op with float32
 * and int8; for the data-movement collectives one dtype per element size. */
static int large_selected(kind_t k, coll_datatype_t dt, coll_op_t op)
{
    if (kind_reduces(k))
        return op == COLL_SUM || dt == COLL_FLOAT32 || dt == COLL_INT8;
    if (k == K_BROADCAST)
        return 1;
    return dt == COLL_INT8 || dt == COLL_BFLOAT16 || dt == COLL_FLOAT32 || dt == COLL_FLOAT64;
}

/*
 * Checks the result of the call. A failed call stops the run (returns 0) only when the
 * communicator reports an async error; a local rejection (the same on every rank, e.g. a
 * combination the library refuses) is reported and the run goes on with the next case.
 */
static int check_call(const ccase_t *c, coll_comm_t comm, coll_result_t rc)
{
    mp_dev_sync(); /* device buffers: the call ran on the stream */
    coll_result_t late = COLL_SUCCESS;
    if (rc == COLL_SUCCESS && coll_comm_get_async_error(comm, &late) == COLL_SUCCESS &&
        late != COLL_SUCCESS)
        rc = late; /* failed on the stream, after the call returned */
    if (rc == COLL_SUCCESS)
        return 1;
    mp_fail("%s: returned %s (%d); last error: \"%s\"", c->desc, mp_result_name(rc), (int)rc,
            coll_get_last_error());
    coll_result_t ae = COLL_SUCCESS;
    if (coll_comm_get_async_error(comm, &ae) != COLL_SUCCESS || ae != COLL_SUCCESS)
        return 0;
    return -1;
}

static void verdict(const ccase_t *c, size_t bad)
{
    if (bad)
        mp_fail("%s: wrong result (details above)", c->desc);
    else
        mp_pass();
}

static int run_all_reduce(coll_comm_t comm, int rank, int n, ccase_t *c)
{
    ref_gen_t g = {c->seed, c->dt, c->op};
    size_t esz = ref_dt_size(c->dt), bytes = c->count * esz, bad = 0;
    mp_buf_t sb, rb;
    coll_result_t rc;
    int ok;
    if (c->inplace) {
        void *buf = mp_buf_alloc(&rb, bytes, POISON);
        ref_fill_input(buf, &g, rank, 0, c->count);
        rc = coll_all_reduce(buf, buf, c->count, c->dt, c->op, comm, NULL);
        if ((ok = check_call(c, comm, rc)) != 1) {
            mp_buf_free(&rb);
            return ok == 0 ? 0 : 1;
        }
        bad += ref_check_reduced(buf, &g, n, 0, c->count, c->desc);
        bad += !mp_buf_guards_ok(&rb, c->desc);
        mp_buf_free(&rb);
    } else {
        void *s = mp_buf_alloc(&sb, bytes, POISON);
        void *r = mp_buf_alloc(&rb, bytes, POISON);
        ref_fill_input(s, &g, rank, 0, c->count);
        rc = coll_all_reduce(s, r, c->count, c->dt, c->op, comm, NULL);
        if ((ok = check_call(c, comm, rc)) != 1) {
            mp_buf_free(&sb);
            mp_buf_free(&rb);
            return ok == 0 ? 0 : 1;
        }
        bad += ref_check_reduced(r, &g, n, 0, c->count, c->desc);
        bad += ref_check_input(s, &g, rank, 0, c->count, "sendbuf changed");
        bad += !mp_buf_guards_ok(&rb, "recvbuf");
        bad += !mp_buf_guards_ok(&sb, "sendbuf");
        mp_buf_free(&sb);
        mp_buf_free(&rb);
    }
    verdict(c, bad);
    return 1;
}

static int run_broadcast(coll_comm_t comm, int rank, int n, ccase_t *c)
{
    ref_gen_t g = {c->seed, c->dt, COLL_SUM};
    size_t esz = ref_dt_size(c->dt), bytes = c->count * esz, bad = 0;
    mp_buf_t sb, rb;
    coll_result_t rc;
    int ok;
    (void)n;
    if (c->inplace) {
        void *buf = mp_buf_alloc(&rb, bytes, POISON);
        if (rank == c->root)
            ref_fill_input(buf, &g, rank, 0, c->count);
        rc = coll_broadcast(buf, buf, c->count, c->dt, c->root, comm, NULL);
        if ((ok = check_call(c, comm, rc)) != 1) {
            mp_buf_free(&rb);
            return ok == 0 ? 0 : 1;
        }
        bad += ref_check_input(buf, &g, c->root, 0, c->count, c->desc);
        bad += !mp_buf_guards_ok(&rb, c->desc);
        mp_buf_free(&rb);
    } else {
        /* on non-root ranks sendbuf is a distinct buffer that must be neither read nor written */
        void *s = mp_buf_alloc(&sb, bytes, OTHER);
        void *r = mp_buf_alloc(&rb, bytes, POISON);
        if (rank == c->root)
            ref_fill_input(s, &g, rank, 0, c->count);
        rc = coll_broadcast(s, r, c->count, c->dt, c->root, comm, NULL);
        if ((ok = check_call(c, comm, rc)) != 1) {
            mp_buf_free(&sb);
            mp_buf_free(&rb);
            return ok == 0 ? 0 : 1;
        }
        bad += ref_check_input(r, &g, c->root, 0, c->count, c->desc);
        if (rank == c->root)
            bad += ref_check_input(s, &g, rank, 0, c->count, "root sendbuf changed");
        else
            bad += ref_check_fill(s, bytes, OTHER, "non-root sendbuf");
        bad += !mp_buf_guards_ok(&rb, "recvbuf");
        bad += !mp_buf_guards_ok(&sb, "sendbuf");
        mp_buf_free(&sb);
        mp_buf_free(&rb);
    }
    verdict(c, bad);
    return 1;
}

static int run_reduce(coll_comm_t comm, int rank, int n, ccase_t *c)
{
    ref_gen_t g = {c->seed, c->dt, c->op};
    size_t esz = ref_dt_size(c->dt), bytes = c->count * esz, bad = 0;
    mp_buf_t sb, rb;
    coll_result_t rc;
    int ok;
    if (c->inplace) {
        void *buf = mp_buf_alloc(&rb, bytes, POISON);
        ref_fill_input(buf, &g, rank, 0, c->count);
        rc = coll_reduce(buf, buf, c->count, c->dt, c->op, c->root, comm, NULL);
        if ((ok = check_call(c, comm, rc)) != 1) {
            mp_buf_free(&rb);
            return ok == 0 ? 0 : 1;
        }
        if (rank == c->root)
            bad += ref_check_reduced(buf, &g, n, 0, c->count, c->desc);
        else
            bad += ref_check_input(buf, &g, rank, 0, c->count, "non-root in-place buffer changed");
        bad += !mp_buf_guards_ok(&rb, c->desc);
        mp_buf_free(&rb);
    } else {
        void *s = mp_buf_alloc(&sb, bytes, POISON);
        void *r = mp_buf_alloc(&rb, bytes, OTHER);
        ref_fill_input(s, &g, rank, 0, c->count);
        rc = coll_reduce(s, r, c->count, c->dt, c->op, c->root, comm, NULL);
        if ((ok = check_call(c, comm, rc)) != 1) {
            mp_buf_free(&sb);
            mp_buf_free(&rb);
            return ok == 0 ? 0 : 1;
        }
        if (rank == c->root)
            bad += ref_check_reduced(r, &g, n, 0, c->count, c->desc);
        else
            bad += ref_check_fill(r, bytes, OTHER, "non-root recvbuf (used on root only)");
        bad += ref_check_input(s, &g, rank, 0, c->count, "sendbuf changed");
        bad += !mp_buf_guards_ok(&rb, "recvbuf");
        bad += !mp_buf_guards_ok(&sb, "sendbuf");
        mp_buf_free(&sb);
        mp_buf_free(&rb);
    }
    verdict(c, bad);
    return 1;
}

static int run_all_gather(coll_comm_t comm, int rank, int n, ccase_t *c)
{
    ref_gen_t g = {c->seed, c->dt, COLL_SUM};
    size_t esz = ref_dt_size(c->dt), bytes = c->count * esz, bad = 0;
    mp_buf_t sb, rb;
    coll_result_t rc;
    int ok;
    char what[200];
    unsigned char *r = mp_buf_alloc(&rb, bytes * (size_t)n, POISON);
    const void *s;
    if (c->inplace) {
        s = r + (size_t)rank * bytes;
        ref_fill_input(r + (size_t)rank * bytes, &g, rank, 0, c->count);
    } else {
        s = mp_buf_alloc(&sb, bytes, POISON);
        ref_fill_input(sb.p, &g, rank, 0, c->count);
    }
    rc = coll_all_gather(s, r, c->count, c->dt, comm, NULL);
    if ((ok = check_call(c, comm, rc)) != 1) {
        mp_buf_free(&rb);
        if (!c->inplace)
            mp_buf_free(&sb);
        return ok == 0 ? 0 : 1;
    }
    for (int b = 0; b < n; b++) {
        snprintf(what, sizeof(what), "%s: block of rank %d", c->desc, b);
        bad += ref_check_input(r + (size_t)b * bytes, &g, b, 0, c->count, what);
    }
    bad += !mp_buf_guards_ok(&rb, "recvbuf");
    if (!c->inplace) {
        bad += ref_check_input(sb.p, &g, rank, 0, c->count, "sendbuf changed");
        bad += !mp_buf_guards_ok(&sb, "sendbuf");
        mp_buf_free(&sb);
    }
    mp_buf_free(&rb);
    verdict(c, bad);
    return 1;
}

static int run_reduce_scatter(coll_comm_t comm, int rank, int n, ccase_t *c)
{
    ref_gen_t g = {c->seed, c->dt, c->op};
    size_t esz = ref_dt_size(c->dt), bytes = c->count * esz, bad = 0;
    size_t total = c->count * (size_t)n;
    mp_buf_t sb, rb;
    coll_result_t rc;
    int ok;
    unsigned char *s = mp_buf_alloc(&sb, bytes * (size_t)n, POISON);
    ref_fill_input(s, &g, rank, 0, total);
    void *r = c->inplace ? s + (size_t)rank * bytes : mp_buf_alloc(&rb, bytes, POISON);
    rc = coll_reduce_scatter(s, r, c->count, c->dt, c->op, comm, NULL);
    if ((ok = check_call(c, comm, rc)) != 1) {
        mp_buf_free(&sb);
        if (!c->inplace)
            mp_buf_free(&rb);
        return ok == 0 ? 0 : 1;
    }
    bad += ref_check_reduced(r, &g, n, (size_t)rank * c->count, c->count, c->desc);
    bad += !mp_buf_guards_ok(&sb, "sendbuf");
    if (!c->inplace) {
        bad += ref_check_input(s, &g, rank, 0, total, "sendbuf changed");
        bad += !mp_buf_guards_ok(&rb, "recvbuf");
        mp_buf_free(&rb);
    }
    mp_buf_free(&sb);
    verdict(c, bad);
    return 1;
}

static int run_all_to_all(coll_comm_t comm, int rank, int n, ccase_t *c)
{
    ref_gen_t g = {c->seed, c->dt, COLL_SUM};
    size_t esz = ref_dt_size(c->dt), bytes = c->count * esz, bad = 0;
    size_t total = c->count * (size_t)n;
    mp_buf_t sb, rb;
    coll_result_t rc;
    int ok;
    char what[200];
    /* rank r's block j holds ref_input(r, j*count + e) */
    unsigned char *s = mp_buf_alloc(&sb, bytes * (size_t)n, POISON);
    ref_fill_input(s, &g, rank, 0, total);
    unsigned char *r = c->inplace ? s : mp_buf_alloc(&rb, bytes * (size_t)n, POISON);
    rc = coll_all_to_all(s, r, c->count, c->dt, comm, NULL);
    if ((ok = check_call(c, comm, rc)) != 1) {
        mp_buf_free(&sb);
        if (!c->inplace)
            mp_buf_free(&rb);
        return ok == 0 ? 0 : 1;
    }
    for (int b = 0; b < n; b++) {
        snprintf(what, sizeof(what), "%s: block from rank %d", c->desc, b);
        bad +=
            ref_check_input(r + (size_t)b * bytes, &g, b, (size_t)rank * c->count, c->count, what);
    }
    bad += !mp_buf_guards_ok(&sb, "sendbuf");
    if (!c->inplace) {
        bad += ref_check_input(s, &g, rank, 0, total, "sendbuf changed");
        bad += !mp_buf_guards_ok(&rb, "recvbuf");
        mp_buf_free(&rb);
    }
    mp_buf_free(&sb);
    verdict(c, bad);
    return 1;
}

static int run_case(coll_comm_t comm, int rank, int n, ccase_t *c)
{
    switch (c->kind) {
    case K_ALL_REDUCE:
        return run_all_reduce(comm, rank, n, c);
    case K_BROADCAST:
        return run_broadcast(comm, rank, n, c);
    case K_REDUCE:
        return run_reduce(comm, rank, n, c);
    case K_ALL_GATHER:
        return run_all_gather(comm, rank, n, c);
    case K_REDUCE_SCATTER:
        return run_reduce_scatter(comm, rank, n, c);
    default:
        return run_all_to_all(comm, rank, n, c);
    }
}

static void body(mp_ctx_t *ctx)
{
    const conf_args_t *a = ctx->arg;
    int n = ctx->nranks, rank = ctx->rank;
    int v = -1;
    CHECK_RC(coll_comm_count(ctx->comm, &v), COLL_SUCCESS, "coll_comm_count");
    CHECK(v == n, "coll_comm_count gave %d, expected %d", v, n);
    v = -1;
    CHECK_RC(coll_comm_user_rank(ctx->comm, &v), COLL_SUCCESS, "coll_comm_user_rank");
    CHECK(v == rank, "coll_comm_user_rank gave %d, expected %d", v, rank);

    const size_t counts[] = {0, 1, 7, 1023, LARGE_COUNT};
    int roots[3] = {0, n - 1, n / 2};
    int nroots = n == 1 ? 1 : (n == 2 ? 2 : 3);
    uint64_t caseno = 0;
    double t0 = mp_now();
    for (int k = 0; k < K_NUM; k++) {
        if (!a->kinds[k])
            continue;
        long failed_before = mp_failed, cases = 0;
        double tk = mp_now();
        for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
            int nops = kind_reduces((kind_t)k) ? COLL_NUM_OPS : 1;
            for (int op = 0; op < nops; op++) {
                for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
                    size_t count = counts[ci];
                    if (count == LARGE_COUNT &&
                        (!a->large ||
                         !large_selected((kind_t)k, (coll_datatype_t)dt, (coll_op_t)op)))
                        continue;
                    for (int inplace = 0; inplace < 2; inplace++) {
                        ccase_t c;
                        c.kind = (kind_t)k;
                        c.dt = (coll_datatype_t)dt;
                        c.op = (coll_op_t)op;
                        c.count = count;
                        c.inplace = inplace;
                        /* every root meets every count across the datatype/op loop */
                        c.root = roots[(dt + op + (int)ci + inplace) % nroots];
                        c.seed = 0x1234567ull + caseno * 0x10001ull + (uint64_t)k * 0x77;
                        caseno++;
                        cases++;
                        int len = snprintf(c.desc, sizeof(c.desc), "%s nranks=%d %s", kind_names[k],
                                           n, ref_dt_name(c.dt));
                        if (kind_reduces(c.kind))
                            len += snprintf(c.desc + len, sizeof(c.desc) - (size_t)len, " %s",
                                            ref_op_name(c.op));
                        len += snprintf(c.desc + len, sizeof(c.desc) - (size_t)len, " count=%zu %s",
                                        count, inplace ? "in-place" : "out-of-place");
                        if (kind_has_root(c.kind))
                            snprintf(c.desc + len, sizeof(c.desc) - (size_t)len, " root=%d",
                                     c.root);
                        double tc = mp_now();
                        int cont = run_case(ctx->comm, rank, n, &c);
                        tc = mp_now() - tc;
                        if ((a->verbose && rank == 0 && count == LARGE_COUNT) || tc > 2.0)
                            mp_log("%s: %.3f s%s", c.desc, tc, tc > 2.0 ? " (slow)" : "");
                        if (!cont) {
                            ctx->fatal = 1;
                            mp_log("stopping after the failed call (the communicator is no "
                                   "longer usable)");
                            return;
                        }
                    }
                }
            }
        }
        if (rank == 0)
            mp_log("%s nranks=%d: %ld cases, %s, %.1f s", kind_names[k], n, cases,
                   mp_failed == failed_before ? "all passed" : "FAILURES", mp_now() - tk);
    }
    coll_result_t ae = COLL_ERR_INTERNAL;
    CHECK_RC(coll_comm_get_async_error(ctx->comm, &ae), COLL_SUCCESS, "coll_comm_get_async_error");
    CHECK(ae == COLL_SUCCESS, "async error after the conformance run: %s", mp_result_name(ae));
    if (rank == 0)
        mp_log("nranks=%d: %llu cases in %.1f s", n, (unsigned long long)caseno, mp_now() - t0);
}

int main(int argc, char **argv)
{
    mp_init();
    if (argc < 3) {
        fprintf(stderr, "usage: %s <collective|all|reductions|movement> <nranks> [large=1]\n",
                argv[0]);
        return 2;
    }
    conf_args_t a;
    memset(&a, 0, sizeof(a));
    a.large = argc > 3 ? atoi(argv[3]) : 1;
    a.verbose = mp_env_int("MP_VERBOSE", 0);
    for (int k = 0; k < K_NUM; k++) {
        if (strcmp(argv[1], "all") == 0 || strcmp(argv[1], kind_names[k]) == 0 ||
            (strcmp(argv[1], "reductions") == 0 && kind_reduces((kind_t)k)) ||
            (strcmp(argv[1], "movement") == 0 && !kind_reduces((kind_t)k)))
            a.kinds[k] = 1;
    }
    int n = atoi(argv[2]);
    mp_opts_t o;
    memset(&o, 0, sizeof(o));
    o.name = argv[1];
    o.nranks = n;
    o.deadline_s = mp_env_int("MP_DEADLINE", 280);
    o.expect_sigkill_rank = -1;
    o.body = body;
    o.arg = &a;
    mp_run(&o);
    return mp_finish();
}
