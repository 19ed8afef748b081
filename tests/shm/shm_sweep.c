/* test_shm sweep: names left in /dev/shm by pairs that both died. A kcoll segment of this
 * version, an hour old, that nobody holds locked is removed when a communicator starts (and
 * logged); one locked by a live process, a young one, one of another segment version and a file
 * that is no segment stay. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "shm_test.h"

static void sweep_body(dh_ctx_t *ctx)
{
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    dh_record(ctx, "init", rc);
    if (rc == COLL_SUCCESS)
        coll_comm_destroy(comm);
}

/* Write /dev/shm/NAME: a segment header (magic "KSHM", version) or junk, mtime age_s ago. */
static int make_leftover(const char *name, uint32_t version, int junk, long age_s)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    int fd = open(path, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (!CHECK(fd >= 0, "create %s: %s", path, strerror(errno)))
        return -1;
    unsigned char page[8192];
    memset(page, junk ? 0x5a : 0, sizeof(page));
    uint32_t head[2] = {0x4d48534bu, version};
    if (!junk)
        memcpy(page, head, sizeof(head));
    CHECK(write(fd, page, sizeof(page)) == (ssize_t)sizeof(page), "write %s", path);
    struct timespec ts[2] = {{.tv_sec = time(NULL) - age_s}, {.tv_sec = time(NULL) - age_s}};
    CHECK(futimens(fd, ts) == 0, "futimens %s: %s", path, strerror(errno));
    return fd;
}

static int shm_exists(const char *name)
{
    char path[128];
    snprintf(path, sizeof(path), "/dev/shm/%s", name);
    return access(path, F_OK) == 0;
}

void test_sweep(void)
{
    static const char *const names[] = {
        "kcoll-00000000deadbeef-0-1", /* dead: removed */
        "kcoll-00000000deadbeef-1-0", /* locked by this process: a live creator */
        "kcoll-00000000deadbeef-2-0", /* young */
        "kcoll-00000000deadbeef-3-0", /* segment version 1 */
        "kcoll-00000000deadbeef-4-0", /* not a segment */
    };
    int fds[5];
    fds[0] = make_leftover(names[0], 2, 0, 3600);
    fds[1] = make_leftover(names[1], 2, 0, 3600);
    fds[2] = make_leftover(names[2], 2, 0, 0);
    fds[3] = make_leftover(names[3], 1, 0, 3600);
    fds[4] = make_leftover(names[4], 2, 1, 3600);
    struct flock fl = {.l_type = F_RDLCK, .l_whence = SEEK_SET};
    CHECK(fds[1] >= 0 && fcntl(fds[1], F_OFD_SETLK, &fl) == 0, "OFD read lock: %s",
          strerror(errno));
    debug_on("SHM");
    dh_opts_t o = {.name = "sweep", .nranks = 2, .deadline_s = 60, .body = sweep_body, .quiet = 1};
    dh_log("--- leftover names in /dev/shm, then a communicator of 2 local ranks starts");
    dh_job_t *j = dh_start(&o);
    if (j != NULL) {
        dh_wait(j);
        int logged = 0;
        for (int r = 0; r < 2; r++) {
            const dh_out_t *out = &dh_shared(j)->out[r];
            CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d: init", r);
            logged += dh_count_lines(dh_output(j, r),
                                     "removed /dev/shm/kcoll-00000000deadbeef-0-1: a segment whose "
                                     "creator and receiver are both gone",
                                     NULL);
        }
        CHECK(logged == 1, "one rank logs the removal (%d)", logged);
        dh_free(j);
    }
    debug_off();
    CHECK(!shm_exists(names[0]), "the dead pair's name is gone");
    static const char *const why[] = {"", "locked by a live process", "younger than the grace",
                                      "another segment version", "not a segment"};
    for (int i = 1; i < 5; i++) {
        CHECK(shm_exists(names[i]), "%s stays: %s", names[i], why[i]);
        char path[128];
        snprintf(path, sizeof(path), "/dev/shm/%s", names[i]);
        unlink(path);
    }
    for (int i = 0; i < 5; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    check_no_segments("sweep");
}
