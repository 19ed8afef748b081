/* The parts of test_shm its cases share (see shm_test.h). */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "shm_test.h"

void debug_on(const char *subsys)
{
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", subsys);
}

void debug_off(void)
{
    dh_setenv("COLL_DEBUG", NULL);
    dh_setenv("COLL_DEBUG_SUBSYS", NULL);
}

/* ---- /dev/shm ---- */

static int private_shm; /* the test has its own tmpfs on /dev/shm */
static char *before[4096];
static int nbefore;

static int list_kcoll(char **names, int max)
{
    DIR *d = opendir("/dev/shm");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        if (strncmp(e->d_name, "kcoll-", 6) == 0 && n < max)
            names[n++] = strdup(e->d_name);
    if (d)
        closedir(d);
    return n;
}

void private_dev_shm(void)
{
    if (geteuid() != 0) {
        dh_log("not root: comparing /dev/shm before and after instead of a private tmpfs");
    } else if (unshare(CLONE_NEWNS) != 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) ||
               mount("kcoll-test", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
                     "size=1g,mode=1777")) {
        dh_log("no private /dev/shm (%s): comparing before and after instead", strerror(errno));
    } else {
        private_shm = 1;
    }
    nbefore = list_kcoll(before, 4096);
}

void check_no_segments(const char *what)
{
    char *now[4096];
    int n = list_kcoll(now, 4096), left = 0;
    for (int i = 0; i < n; i++) {
        int old = 0;
        for (int k = 0; k < nbefore && !private_shm; k++)
            old |= strcmp(now[i], before[k]) == 0;
        if (!old) {
            dh_fail("%s: /dev/shm/%s was left behind", what, now[i]);
            left++;
        }
        free(now[i]);
    }
    CHECK(left == 0, "%s: %d shared-memory segments left in /dev/shm", what, left);
    if (left == 0)
        dh_log("%s: no kcoll segment left in /dev/shm", what);
}

void wait_done(dh_ctx_t *ctx, long want, double max_s)
{
    dh_add(&ctx->sh->user[0], 1);
    double end = dh_now() + max_s;
    while (dh_load(&ctx->sh->user[0]) < want && dh_now() < end)
        dh_sleep(0.01);
}

float value(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 3) % 13);
}

long wrong_sums(const float *r, size_t n, int nranks)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < nranks; q++)
            want += value(i, q);
        bad += r[i] != want;
    }
    return bad;
}

void loop_body(dh_ctx_t *ctx)
{
    const targs_t *a = ctx->arg;
    dh_out_t *out = &ctx->sh->out[ctx->rank];
    if (a->inject != NULL && ctx->rank == a->victim)
        dh_setenv("FAKE_VERBS_INJECT", a->inject);
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "init"))
        return;
    const size_t n = a->count, total = a->a2a ? n * (size_t)ctx->nranks : n;
    float *s = NULL, *r = NULL;
    if (a->shared) {
        void *p = NULL, *q = NULL;
        CHECK_RC(coll_mem_alloc(&p, total * sizeof(float)), COLL_SUCCESS, coll_get_last_error(),
                 "coll_mem_alloc");
        CHECK_RC(coll_mem_alloc(&q, total * sizeof(float)), COLL_SUCCESS, coll_get_last_error(),
                 "coll_mem_alloc");
        s = p;
        r = q;
    } else {
        s = malloc(total * sizeof(float));
        r = malloc(total * sizeof(float));
    }
    if (s == NULL || r == NULL)
        return;
    for (size_t i = 0; i < total; i++)
        s[i] = value(i, ctx->rank);
    double end = dh_now() + 60;
    dh_begin(ctx, ctx->rank);
    while (dh_now() < end) {
        rc = a->a2a ? coll_all_to_all(s, r, n, COLL_FLOAT32, comm, NULL)
                    : coll_all_reduce(s, r, n, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        size_t bad = 0;
        for (size_t i = 0; i < total; i += out->iters == 0 ? 1 : 4099) {
            float want = 0;
            if (a->a2a)
                want = value((size_t)ctx->rank * n + i % n, (int)(i / n));
            else
                for (int k = 0; k < ctx->nranks; k++)
                    want += value(i, k);
            bad += r[i] != want;
        }
        out->bad += (long)bad;
        dh_store(&out->iters, out->iters + 1);
    }
    dh_record(ctx, a->a2a ? "all_to_all loop" : "all_reduce loop", rc);
    CHECK(out->bad == 0, "rank %d: %ld wrong elements before the failure", ctx->rank, out->bad);
    wait_done(ctx, ctx->nranks - 1, 40); /* every survivor */
    if (ctx->rank % 2)
        CHECK_RC(coll_comm_abort(comm), COLL_SUCCESS, coll_get_last_error(), "abort");
    else
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    if (a->shared) {
        coll_mem_free(s);
        coll_mem_free(r);
    } else {
        free(s);
        free(r);
    }
}

void kill_case(targs_t *a, int nranks)
{
    dh_setenv("COLL_TIMEOUT", "10");
    dh_setenv("COLL_TEST_HOST_ID_SUFFIX", a->hosts);
    dh_setenv("COLL_SHM_DIRECT_MIN", a->rings ? "0" : NULL);
    dh_opts_t o = {
        .name = a->name, .nranks = nranks, .deadline_s = 60, .body = loop_body, .arg = a};
    dh_log("--- %s: %d ranks, %zu floats per %s%s, rank %d is killed", o.name, nranks, a->count,
           a->a2a ? "all_to_all" : "all_reduce", a->shared ? " (coll_mem_alloc buffers)" : "",
           a->victim);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return;
    dh_shared_t *sh = dh_shared(j);
    double end = dh_now() + 30;
    while (dh_load(&sh->out[a->victim].iters) < 3 && dh_now() < end)
        dh_pump(j, 0.0005);
    sh->t_event = dh_now();
    dh_expect_signal(j, a->victim, SIGKILL);
    kill(dh_pid(j, a->victim), SIGKILL);
    dh_wait(j);
    char victim[64];
    snprintf(victim, sizeof(victim), "rank %d (pid %d on ", a->victim, (int)dh_pid(j, a->victim));
    for (int r = 0; r < nranks; r++) {
        if (r == a->victim)
            continue;
        const dh_out_t *out = &sh->out[r];
        double dt = out->t - sh->t_event;
        dh_log("rank %d: %s %.3f s after the kill, after %ld iterations: %s", r,
               dh_rc_name(out->rc), dt, out->iters, out->msg);
        CHECK(out->rc == COLL_ERR_REMOTE || out->rc == COLL_ERR_TIMEOUT,
              "rank %d: expected COLL_ERR_REMOTE or COLL_ERR_TIMEOUT, got %s", r,
              dh_rc_name(out->rc));
        CHECK_HAS(out->msg, victim, "rank %d: names the killed rank with its pid", r);
        CHECK(dt >= 0 && dt < MARGIN, "rank %d failed %.2f s after the kill (want < %.0f s)", r, dt,
              MARGIN);
    }
    dh_free(j);
    check_no_segments(a->name);
}
