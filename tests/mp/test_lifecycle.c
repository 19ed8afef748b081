/*
 * Communicator lifecycle: test_lifecycle <nranks> <cycles>
 * Rank 0 creates each unique id itself (the root thread then lives in rank 0, as in NCCL
 * programs) and passes its printable form; the others parse it with
 * coll_unique_id_from_string. Every cycle creates a communicator, runs an all_reduce and
 * destroys it (odd cycles: every rank aborts instead). After the cycles, the process must have
 * the same open file descriptors and threads as after the first one: nothing leaks per
 * communicator.
 */
#define _GNU_SOURCE
#include "harness.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct lshared {
    long gen;
    long done[1024]; /* done[k]: ranks that finished the all_reduce of cycle k */
    char idstr[COLL_UNIQUE_ID_STRLEN];
} lshared_t;

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - (strcmp(path, "/proc/self/fd") == 0); /* the DIR's own descriptor */
}

static void list_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        char p[300], target[256];
        if (e->d_name[0] == '.')
            continue;
        snprintf(p, sizeof(p), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(p, target, sizeof(target) - 1);
        target[n > 0 ? n : 0] = '\0';
        mp_log("  fd %s -> %s", e->d_name, target);
    }
    if (d)
        closedir(d);
}

/* One cycle; returns 0 when the run cannot go on. */
static int cycle(mp_ctx_t *ctx, long k)
{
    lshared_t *sh = ctx->shared;
    int rank = ctx->rank, n = ctx->nranks;
    coll_unique_id_t id;
    if (rank == 0) {
        if (!CHECK_RC(coll_get_unique_id_ifname(&id, "lo"), COLL_SUCCESS,
                      "cycle %ld: coll_get_unique_id_ifname in rank 0", k))
            return 0;
        if (!CHECK_RC(coll_unique_id_to_string(&id, sh->idstr, sizeof(sh->idstr)), COLL_SUCCESS,
                      "cycle %ld: coll_unique_id_to_string", k))
            return 0;
        mp_store(&sh->gen, k);
    } else {
        double until = mp_now() + 30;
        while (mp_load(&sh->gen) < k && mp_now() < until)
            mp_sleep(0.0005);
        if (mp_load(&sh->gen) < k) {
            mp_fail("cycle %ld: no unique id from rank 0 within 30 s", k);
            return 0;
        }
        if (!CHECK_RC(coll_unique_id_from_string(&id, sh->idstr), COLL_SUCCESS,
                      "cycle %ld: coll_unique_id_from_string(\"%s\")", k, sh->idstr))
            return 0;
    }
    coll_comm_t comm = NULL;
    if (!CHECK_RC(coll_comm_init_rank(&comm, n, id, rank), COLL_SUCCESS,
                  "cycle %ld: coll_comm_init_rank", k))
        return 0;
    int32_t s[64], r[64];
    for (int i = 0; i < 64; i++)
        s[i] = (int32_t)(rank * 1000 + i + k);
    coll_result_t rc = coll_all_reduce(s, r, 64, COLL_INT32, COLL_SUM, comm, NULL);
    if (CHECK_RC(rc, COLL_SUCCESS, "cycle %ld: all_reduce", k)) {
        int bad = 0;
        for (int i = 0; i < 64; i++)
            bad += r[i] != (int32_t)(1000 * n * (n - 1) / 2 + n * (i + k));
        CHECK(bad == 0, "cycle %ld: all_reduce gave %d wrong elements", k, bad);
    }
    if (k % 2 == 1) {
        /* every rank must have finished the all_reduce before anyone aborts: an abort makes
         * the others' unfinished operations fail, as it should */
        mp_add(&sh->done[k], 1);
        double until = mp_now() + 30;
        while (mp_load(&sh->done[k]) < n && mp_now() < until)
            mp_sleep(0.0005);
        double t0 = mp_now();
        CHECK_RC(coll_comm_abort(comm), COLL_SUCCESS, "cycle %ld: coll_comm_abort on every rank",
                 k);
        CHECK(mp_now() - t0 < 5.0, "cycle %ld: coll_comm_abort took %.2f s", k, mp_now() - t0);
    } else {
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, "cycle %ld: coll_comm_destroy", k);
    }
    return rc == COLL_SUCCESS;
}

static void body(mp_ctx_t *ctx)
{
    long cycles = (long)(intptr_t)ctx->arg;
    if (cycles > 1000)
        cycles = 1000;
    if (!cycle(ctx, 1) || !cycle(ctx, 2))
        return;
    /* baseline after one destroy and one abort cycle (lazy one-time setup is allowed) */
    mp_sleep(0.3);
    int fd0 = count_dir("/proc/self/fd"), th0 = count_dir("/proc/self/task");
    double t0 = mp_now();
    for (long k = 3; k <= cycles + 2; k++)
        if (!cycle(ctx, k))
            return;
    if (ctx->rank == 0)
        mp_log("%ld create/all_reduce/destroy|abort cycles in %.2f s", cycles, mp_now() - t0);
    /* the root thread of the last id (rank 0) may take a moment to exit */
    int fd1 = -1, th1 = -1;
    double until = mp_now() + 3;
    do {
        fd1 = count_dir("/proc/self/fd");
        th1 = count_dir("/proc/self/task");
        if (fd1 <= fd0 && th1 <= th0)
            break;
        mp_sleep(0.05);
    } while (mp_now() < until);
    CHECK(fd1 <= fd0, "open file descriptors grew from %d to %d over %ld communicators", fd0, fd1,
          cycles);
    CHECK(th1 <= th0, "threads grew from %d to %d over %ld communicators", th0, th1, cycles);
    if (fd1 > fd0)
        list_fds();
}

int main(int argc, char **argv)
{
    mp_init();
    mp_opts_t o;
    memset(&o, 0, sizeof(o));
    o.name = "lifecycle";
    o.nranks = argc > 1 ? atoi(argv[1]) : 3;
    o.deadline_s = mp_env_int("MP_DEADLINE", 100);
    o.manual_init = 1;
    o.no_id = 1;
    o.expect_sigkill_rank = -1;
    o.body = body;
    o.arg = (void *)(intptr_t)(argc > 2 ? atol(argv[2]) : 20);
    mp_run(&o);
    return mp_finish();
}
