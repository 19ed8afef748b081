/* test_shm's InfiniBand cases, over the fake verbs provider (tests/ib/fake_verbs.c, RequireIB):
 *   ib_wc_error  2 ranks on two hosts loop 8 MiB all_reduces; rank 1's fake HCA fails its 40th
 *                RDMA write with "transport retry counter exceeded": rank 1 fails naming the
 *                verb's status, the HCA, the port and rank 0; rank 0 fails with rank 1's report
 *   ib_port_down the same with port 1 of rank 1's HCA going down after 40 writes
 *   ib_qp_error  real verbs (the soft-RoCE guest of tests/ib-rxe, not the fake): the same loop,
 *                rank 1 forces the QP of its 40th RDMA write into the error state
 *                (COLL_TEST_IB_QP_ERROR): rank 1 fails naming the flushed request, the QP's
 *                error state, the HCA and rank 0; rank 0 fails with rank 1's report
 *   ib_lazy      4 ranks on 4 hosts: a ring exchange of send/recv connects each rank to its 2
 *                neighbours only (2 connection lines per rank); an all_to_all afterwards
 *                connects the third pair; results checked
 *   ib_fork      2 ranks on two hosts, each forking a child that outlives a few all_reduces, under
 *                the fake's three kinds of kernel (FAKE_VERBS_FORK): where the kernel needs it,
 *                ibv_fork_init comes before the first registration (the fake aborts otherwise);
 *                where it does not, rdma-core's answer is logged; where ibv_fork_init fails, a
 *                WARN says what a fork risks and what to do, and the communicator still works
 *   ib_efa       2 ranks on two hosts whose only RDMA port reports an unspecified link layer and
 *                refuses RC queue pairs, as AWS EFA's do (FAKE_VERBS_LINK_LAYER=unspecified):
 *                COLL_TRANSPORT=auto and PreferIB run over sockets, saying why; RequireIB fails
 *                the creation naming the ports and the reason (before, the port was taken
 *                for InfiniBand: RequireIB asked whether a subnet manager runs, and a port with
 *                a LID would have failed the first transfer creating its RC queue pair) */
#define _GNU_SOURCE
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "shm_test.h"

/* An HCA error injected on the victim (2 ranks on two hosts, InfiniBand between): the victim
 * fails naming the verb's status or event, the HCA and the port; the other fails with its report.
 */
static void ib_fault_case(targs_t *a, const char *const want[], int nwant)
{
    dh_setenv("COLL_TIMEOUT", "10");
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", a->hosts);
    dh_opts_t o = {.name = a->name, .nranks = 2, .deadline_s = 60, .body = loop_body, .arg = a};
    dh_log("--- %s: 2 ranks on two hosts over InfiniBand, rank %d: %s", o.name, a->victim,
           a->inject ? a->inject : getenv("COLL_TEST_IB_QP_ERROR"));
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_wait(j);
    dh_shared_t *sh = dh_shared(j);
    for (int r = 0; r < 2; r++) {
        const dh_out_t *out = &sh->out[r];
        dh_log("rank %d: %s after %ld iterations: %s", r, dh_rc_name(out->rc), out->iters,
               out->msg);
        CHECK(out->rc == COLL_ERR_NETWORK || out->rc == COLL_ERR_REMOTE,
              "rank %d: expected COLL_ERR_NETWORK (or the peer's report), got %s", r,
              dh_rc_name(out->rc));
        for (int k = 0; k < nwant; k++)
            CHECK_HAS(out->msg, want[k], "rank %d: the message names it", r);
    }
    CHECK(sh->out[a->victim].rc == COLL_ERR_NETWORK, "rank %d (the HCA that failed): %s", a->victim,
          dh_rc_name(sh->out[a->victim].rc));
    dh_free(j);
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", NULL);
    check_no_segments(a->name);
}

void test_ib_wc_error(void)
{
    static const char *const want[] = {
        ("InfiniBand work completion error on rank 1: transport retry counter exceeded "
         "(status 12, vendor error 0x81) for an RDMA write to rank 0 (pid "),
        "on fake_roce0 port 1", "Check the link of both hosts"};
    targs_t a = {.name = "ib_wc_error",
                 .victim = 1,
                 .count = 2u << 20,
                 .hosts = "a,b",
                 .inject = "wc_error:40"};
    ib_fault_case(&a, want, 3);
}

void test_ib_port_down(void)
{
    static const char *const want[] = {
        "InfiniBand port went down on rank 1: fake_roce0 port 1 (port error) during "
        "all_reduce(count 2097152, float32, sum)",
        "Check the cable, the switch port and the subnet manager"};
    targs_t a = {.name = "ib_port_down",
                 .victim = 1,
                 .count = 2u << 20,
                 .hosts = "a,b",
                 .inject = "port_down:40"};
    ib_fault_case(&a, want, 2);
}

void test_ib_qp_error(void)
{
    static const char *const want[] = {"Work Request Flushed Error (status 5",
                                       "the queue pair is in the error state", "on rxe0 port 1"};
    targs_t a = {.name = "ib_qp_error", .victim = 1, .count = 2u << 20, .hosts = "a,b"};
    dh_setenv("COLL_TEST_IB_QP_ERROR", "0,40");
    ib_fault_case(&a, want, 3);
    dh_setenv("COLL_TEST_IB_QP_ERROR", NULL);
}

/* ---- InfiniBand connections made at the first transfer ---- */

#define LAZY_MARK "=== ring exchange done ==="

static void lazy_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const int n = ctx->nranks, me = ctx->rank;
    const size_t count = 100000;
    float *s = malloc(count * (size_t)n * sizeof(float)),
          *r = malloc(count * (size_t)n * sizeof(float));
    long bad = 0;
    for (size_t i = 0; i < count * (size_t)n; i++)
        s[i] = value(i, me);
    coll_group_start();
    coll_send(s, count, COLL_FLOAT32, (me + 1) % n, comm, NULL);
    coll_recv(r, count, COLL_FLOAT32, (me + n - 1) % n, comm, NULL);
    rc = coll_group_end();
    for (size_t i = 0; i < count && rc == COLL_SUCCESS; i++)
        bad += r[i] != value(i, (me + n - 1) % n);
    fprintf(stderr, "%s\n", LAZY_MARK);
    /* nobody starts the all_to_all (and connects to its third peer) before every rank is past
     * its mark: a link a peer opens is set up as soon as this rank makes progress */
    wait_done(ctx, n, 30);
    if (rc == COLL_SUCCESS)
        rc = coll_all_to_all(s, r, count, COLL_FLOAT32, comm, NULL);
    for (size_t i = 0; i < count * (size_t)n && rc == COLL_SUCCESS; i++)
        bad += r[i] != value((size_t)me * count + i % count, (int)(i / count));
    dh_record(ctx, "ring exchange, then all_to_all", rc);
    ctx->sh->out[me].bad = bad;
    coll_comm_destroy(comm);
    free(s);
    free(r);
}

void test_ib_lazy(void)
{
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", "a,b,c,d");
    debug_on("IB");
    dh_opts_t o = {.name = "ib_lazy", .nranks = 4, .deadline_s = 60, .body = lazy_body, .quiet = 1};
    dh_log("--- 4 ranks on 4 hosts over InfiniBand (fake verbs): ring exchange, then all_to_all");
    dh_job_t *j = dh_start(&o);
    if (j != NULL) {
        dh_wait(j);
        for (int r = 0; r < 4; r++) {
            const dh_out_t *out = &dh_shared(j)->out[r];
            CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d", r);
            CHECK(out->bad == 0, "rank %d: %ld wrong elements", r, out->bad);
            const char *log = dh_output(j, r), *mark = strstr(log, LAZY_MARK);
            CHECK(dh_count_lines(log, "3 peers reachable over InfiniBand", NULL) == 1,
                  "rank %d: logs its 3 InfiniBand peers once", r);
            if (!CHECK(mark != NULL, "rank %d: reached the all_to_all", r))
                continue;
            char *head = strndup(log, (size_t)(mark - log));
            int first = dh_count_lines(head, "InfiniBand connection to rank", "ready");
            int total = dh_count_lines(log, "InfiniBand connection to rank", "ready");
            free(head);
            dh_log("rank %d: %d connections after the ring exchange, %d after the all_to_all", r,
                   first, total);
            CHECK(first == 2, "rank %d: the ring exchange connects its 2 neighbours only (%d)", r,
                  first);
            CHECK(total == 3, "rank %d: the all_to_all connects the third peer (%d)", r, total);
        }
        dh_free(j);
    }
    debug_off();
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", NULL);
    check_no_segments("ib_lazy");
}

/* ---- fork safety: ibv_fork_init before the first registration ---- */

static void fork_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const size_t n = 1u << 16;
    float *s = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        s[i] = value(i, ctx->rank);
    pid_t child = fork(); /* shares every page copy-on-write while the all_reduces run */
    if (child == 0) {
        usleep(300 * 1000);
        _exit(0);
    }
    CHECK(child > 0, "rank %d: fork", ctx->rank);
    for (int it = 0; it < 3 && rc == COLL_SUCCESS; it++) {
        rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc == COLL_SUCCESS)
            bad += wrong_sums(r, n, ctx->nranks);
    }
    if (child > 0)
        CHECK(waitpid(child, NULL, 0) == child, "rank %d: the child is reaped", ctx->rank);
    dh_record(ctx, "all_reduces with a forked child alive", rc);
    ctx->sh->out[ctx->rank].bad = bad;
    CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    free(s);
    free(r);
}

void test_ib_fork(void)
{
    static const struct {
        const char *mode, *want;
    } cases[] = {
        {"needed", "ibv_fork_init: registered memory is kept out of forked children"},
        {"unneeded", "this kernel copies registered memory at fork"},
        {"late", "ibv_fork_init failed (Invalid argument) and this kernel ("},
    };
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", "a,b");
    debug_on("IB");
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        dh_setenv("FAKE_VERBS_FORK", cases[c].mode);
        dh_opts_t o = {
            .name = "ib_fork", .nranks = 2, .deadline_s = 60, .body = fork_body, .quiet = 1};
        dh_log("--- 2 ranks on two hosts over InfiniBand, FAKE_VERBS_FORK=%s", cases[c].mode);
        dh_job_t *j = dh_start(&o);
        if (j == NULL)
            continue;
        dh_wait(j);
        for (int r = 0; r < 2; r++) {
            const dh_out_t *out = &dh_shared(j)->out[r];
            const char *log = dh_output(j, r);
            CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "%s: rank %d", cases[c].mode, r);
            CHECK(out->bad == 0, "%s: rank %d: %ld wrong elements", cases[c].mode, r, out->bad);
            CHECK(dh_count_lines(log, cases[c].want, NULL) == 1, "%s: rank %d logs \"%s\" once",
                  cases[c].mode, r, cases[c].want);
            const bool warned = dh_count_lines(log, "ibv_fork_init failed", NULL) > 0;
            CHECK(warned == (strcmp(cases[c].mode, "late") == 0),
                  "%s: rank %d warns only when ibv_fork_init fails", cases[c].mode, r);
            if (warned)
                CHECK_HAS(log, "RDMAV_FORK_SAFE=1", "%s: rank %d says what to do", cases[c].mode,
                          r);
        }
        dh_free(j);
    }
    dh_setenv("FAKE_VERBS_FORK", NULL);
    debug_off();
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", NULL);
    check_no_segments("ib_fork");
}

static void efa_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    const size_t n = 1u << 18; /* 1 MiB: past the small-message path */
    float *s = malloc(n * sizeof(float)), *r = malloc(n * sizeof(float));
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        s[i] = value(i, ctx->rank);
    for (int it = 0; it < 3 && rc == COLL_SUCCESS; it++) {
        rc = coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc == COLL_SUCCESS)
            bad += wrong_sums(r, n, ctx->nranks);
    }
    dh_record(ctx, "creation and 3 all_reduces", rc);
    ctx->sh->out[ctx->rank].bad = bad;
    if (comm != NULL)
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    free(s);
    free(r);
}

void test_ib_efa(void)
{
    static const char *const policies[] = {"auto", "PreferIB", "RequireIB"};
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", "a,b");
    dh_setenv("FAKE_VERBS_LINK_LAYER", "unspecified");
    debug_on("IB");
    for (size_t c = 0; c < sizeof(policies) / sizeof(policies[0]); c++) {
        const bool required = strcmp(policies[c], "RequireIB") == 0;
        dh_setenv("COLL_TRANSPORT", policies[c]);
        dh_opts_t o = {
            .name = "ib_efa", .nranks = 2, .deadline_s = 60, .body = efa_body, .quiet = 1};
        dh_log("--- 2 ranks on two hosts, EFA-like ports only, COLL_TRANSPORT=%s", policies[c]);
        dh_job_t *j = dh_start(&o);
        if (j == NULL)
            continue;
        dh_wait(j);
        for (int r = 0; r < 2; r++) {
            const dh_out_t *out = &dh_shared(j)->out[r];
            const char *log = dh_output(j, r);
            dh_log("%s: rank %d: %s %s", policies[c], r, dh_rc_name(out->rc), out->msg);
            if (required) {
                CHECK_RC(out->rc, COLL_ERR_NETWORK, out->msg, "RequireIB: rank %d", r);
                CHECK_HAS(out->msg, "COLL_TRANSPORT=RequireIB, but InfiniBand is not usable",
                          "RequireIB: rank %d names the policy", r);
                CHECK_HAS(out->msg, "report no InfiniBand or Ethernet link layer, as AWS EFA's",
                          "RequireIB: rank %d says why", r);
                CHECK_HAS(out->msg, "fake_roce0:1", "RequireIB: rank %d names the port", r);
                continue;
            }
            CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "%s: rank %d", policies[c], r);
            CHECK(out->bad == 0, "%s: rank %d: %ld wrong elements", policies[c], r, out->bad);
            const char *says = strcmp(policies[c], "auto") == 0
                                   ? "offers no InfiniBand (sockets between hosts): the active "
                                     "RDMA ports (fake_roce0:1) report no InfiniBand"
                                   : "using sockets because the active RDMA ports (fake_roce0:1) "
                                     "report no InfiniBand";
            CHECK(dh_count_lines(log, says, "as AWS EFA's do") == 1,
                  "%s: rank %d says once that it uses sockets, and why", policies[c], r);
        }
        dh_free(j);
    }
    dh_setenv("COLL_TRANSPORT", NULL);
    debug_off();
    dh_setenv("FAKE_VERBS_LINK_LAYER", NULL);
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", NULL);
}
