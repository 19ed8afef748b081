/* test_shm's cases of the single-copy path:
 *   direct       3 local ranks, every collective twice, each result checked, in these jobs:
 *                - coll_mem_alloc buffers: the single-copy path (each rank logs so once);
 *                - rank 1 non-dumpable (its /proc/<pid>/fd cannot be opened, nor its memory
 *                  read): every rank logs the two-copy path, the results stay exact;
 *                - malloc buffers: the single-copy path through cross-memory attach;
 *                - rank 0's buffers from malloc, the others' from coll_mem_alloc: the same;
 *                - malloc buffers, rank 2 with COLL_SHM_CMA=0: every rank takes the rings;
 *                - malloc buffers, rank 1 under a seccomp filter that refuses
 *                  process_vm_readv/writev with EPERM (as container runtimes do): the probe
 *                  fails on rank 1, every rank logs why and takes the rings;
 *                - rank 0 calls all_reduce where the others call all_gather: a collective
 *                  mismatch naming the single-copy path
 *   kill_direct  4 local ranks loop 8 MiB all_reduces on coll_mem_alloc buffers; the parent
 *                SIGKILLs rank 2
 *   kill_cma     the same on malloc buffers (cross-memory attach) */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "shm_test.h"

enum { D_ALL, D_FALLBACK, D_CMA, D_CMA_MIXED, D_CMA_OFF, D_CMA_DENIED, D_MISMATCH };

/* A seccomp filter on this process: process_vm_readv/writev fail with EPERM. */
static int deny_cma(void)
{
#if defined(__x86_64__)
    const unsigned arch = AUDIT_ARCH_X86_64;
#elif defined(__aarch64__)
    const unsigned arch = AUDIT_ARCH_AARCH64;
#else
    return 0;
#endif
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arch, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = {.len = (unsigned short)(sizeof(f) / sizeof(f[0])), .filter = f};
    return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
           prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) == 0;
}

/* This rank's buffers in a job: from malloc or from coll_mem_alloc. */
static int uses_malloc(int mode, int rank)
{
    return mode == D_CMA || mode == D_CMA_OFF || mode == D_CMA_DENIED ||
           (mode == D_CMA_MIXED && rank == 0);
}

static coll_result_t buf_alloc(int heap, void **p, size_t bytes)
{
    if (!heap)
        return coll_mem_alloc(p, bytes);
    *p = malloc(bytes);
    return *p != NULL ? COLL_SUCCESS : COLL_ERR_SYSTEM;
}

static void buf_free(int heap, void *p)
{
    if (heap)
        free(p);
    else
        coll_mem_free(p);
}

static float dvalue(size_t i, int rank)
{
    return (float)((i * 3 + (size_t)rank * 5) % 11);
}

/* Every collective once (malloc or coll_mem_alloc buffers), each result checked element by
 * element. */
static long direct_collectives(dh_ctx_t *ctx, coll_comm_t comm, size_t n, int heap,
                               coll_result_t *rc)
{
    const int nr = ctx->nranks, me = ctx->rank;
    const size_t total = n * (size_t)nr;
    void *sp = NULL, *rp = NULL;
    *rc = buf_alloc(heap, &sp, total * sizeof(float));
    if (*rc == COLL_SUCCESS)
        *rc = buf_alloc(heap, &rp, total * sizeof(float));
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
    buf_free(heap, sp);
    buf_free(heap, rp);
    return bad;
}

static void direct_body(dh_ctx_t *ctx)
{
    const int mode = *(const int *)ctx->arg;
    if (mode == D_FALLBACK && ctx->rank == 1)
        prctl(PR_SET_DUMPABLE, 0);
    if (mode == D_CMA_OFF && ctx->rank == 2)
        dh_setenv("COLL_SHM_CMA", "0");
    if (mode == D_CMA_DENIED && ctx->rank == 1)
        CHECK(deny_cma(), "rank 1 installs its seccomp filter: %s", strerror(errno));
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
        bad += direct_collectives(ctx, comm, n, uses_malloc(mode, ctx->rank), &rc);
    dh_record(ctx, "collectives", rc);
    ctx->sh->out[ctx->rank].bad = bad;
    coll_comm_destroy(comm);
}

static void direct_job(int mode)
{
    static const char *const what[] = {
        "every collective on coll_mem_alloc buffers, 3 local ranks",
        "the same with rank 1 not dumpable (its buffers cannot be mapped)",
        "every collective on malloc buffers (cross-memory attach)",
        "rank 0 on malloc buffers, ranks 1 and 2 on coll_mem_alloc buffers",
        "malloc buffers, rank 2 with COLL_SHM_CMA=0",
        "malloc buffers, process_vm_readv/writev refused on rank 1 (seccomp)",
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
        const int mapped = dh_count_lines(log, "single-copy path: every rank's buffers", NULL);
        const int cma = dh_count_lines(log, "single-copy path through cross-memory attach", NULL);
        const int ring = dh_count_lines(log, "two-copy ring path", NULL);
        const int denied =
            dh_count_lines(log, "rank 1 cannot read its peers' memory", "Operation not permitted");
        dh_log("rank %d logs: mapped %d, cross-memory attach %d, rings %d, refused %d", r, mapped,
               cma, ring, denied);
        if (mode == D_ALL)
            CHECK(mapped == 1 && cma == 0 && ring == 0,
                  "rank %d logs the single-copy path (mapped) once and no fallback", r);
        else if (mode == D_CMA || mode == D_CMA_MIXED)
            CHECK(cma == 1 && mapped == 0 && ring == 0,
                  "rank %d logs the single-copy path through cross-memory attach once and no "
                  "fallback",
                  r);
        else if (mode == D_CMA_DENIED)
            CHECK(denied == 1 && cma == 0 && mapped == 0,
                  "rank %d logs once that rank 1 cannot read its peers' memory (EPERM), and "
                  "never the single-copy path",
                  r);
        else
            CHECK(ring == 1 && mapped == 0 && cma == 0,
                  "rank %d logs the two-copy path once and never the single-copy path", r);
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

void test_kill_cma(void)
{
    targs_t a = {.name = "kill_cma", .victim = 2, .count = 2u << 20};
    kill_case(&a, 4);
}
