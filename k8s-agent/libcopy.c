/* The sidecar delivers its pinned libcoll build: libcoll.so* from the image (--lib-src) into the
 * shared volume (COLL_AGENT_LIB_DIR, e.g. /var/run/kcoll/lib) before it opens its socket, so that
 * every training container loads the same build; with it the GPU plugin libcoll_cuda.so* when the
 * image has one (a CUDA build), which libcoll loads from its own directory for device buffers.
 * Files are written to a temporary name and renamed, so a reader never sees a partial library. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int copy_file(const char *src, const char *dst, mode_t mode)
{
    char tmp[PATH_MAX], buf[65536];
    int in, out, rc = -1;
    if (agent_fmt(tmp, sizeof(tmp), "%s.tmp.%d", dst, (int)getpid()) < 0)
        return -1;
    in = open(src, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    out = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode & 0755);
    if (out < 0) {
        close(in);
        return -1;
    }
    for (;;) {
        ssize_t n = read(in, buf, sizeof(buf)), off = 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto done;
        if (n == 0)
            break;
        while (off < n) {
            ssize_t w = write(out, buf + off, (size_t)(n - off));
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                goto done;
            off += w;
        }
    }
    if (fsync(out) != 0)
        goto done;
    rc = 0;
done:
    close(in);
    if (close(out) != 0)
        rc = -1;
    if (rc == 0 && rename(tmp, dst) != 0)
        rc = -1;
    if (rc != 0)
        unlink(tmp);
    return rc;
}

static int copy_link(const char *src, const char *dst)
{
    char target[PATH_MAX], tmp[PATH_MAX];
    ssize_t n = readlink(src, target, sizeof(target) - 1);
    if (n < 0)
        return -1;
    target[n] = '\0';
    if (agent_fmt(tmp, sizeof(tmp), "%s.tmp.%d", dst, (int)getpid()) < 0)
        return -1;
    unlink(tmp);
    if (symlink(target, tmp) != 0)
        return -1;
    if (rename(tmp, dst) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

int agent_copy_library(const char *src_dir, const char *dst_dir, agent_condition_t *cond)
{
    DIR *d;
    struct dirent *e;
    int copied = 0, plugins = 0;
    memset(cond, 0, sizeof(*cond));
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "LibraryCopyFailed");
    if (mkdir(dst_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(cond->message, sizeof(cond->message),
                 "cannot create %s: %s (is the shared emptyDir mounted?)", dst_dir,
                 strerror(errno));
        return -1;
    }
    d = opendir(src_dir);
    if (!d) {
        snprintf(cond->type, sizeof(cond->type), "LibraryMissing");
        snprintf(cond->message, sizeof(cond->message),
                 "the agent image has no library directory %s (%s): use the kcoll agent image "
                 "whose tag is the pinned library version",
                 src_dir, strerror(errno));
        return -1;
    }
    while ((e = readdir(d)) != NULL) {
        char src[PATH_MAX], dst[PATH_MAX];
        struct stat st;
        const bool plugin = strncmp(e->d_name, "libcoll_cuda.so", 15) == 0;
        if (!plugin && strncmp(e->d_name, "libcoll.so", 10) != 0)
            continue;
        if (agent_fmt(src, sizeof(src), "%s/%s", src_dir, e->d_name) < 0 ||
            agent_fmt(dst, sizeof(dst), "%s/%s", dst_dir, e->d_name) < 0 || lstat(src, &st) != 0)
            continue;
        if ((S_ISLNK(st.st_mode) ? copy_link(src, dst) : copy_file(src, dst, st.st_mode)) != 0) {
            snprintf(cond->message, sizeof(cond->message), "copying %s to %s: %s", src, dst,
                     strerror(errno));
            closedir(d);
            return -1;
        }
        if (plugin)
            plugins++;
        else
            copied++;
    }
    closedir(d);
    if (copied == 0) {
        snprintf(cond->type, sizeof(cond->type), "LibraryMissing");
        snprintf(cond->message, sizeof(cond->message),
                 "no libcoll.so* in %s: the agent image is incomplete", src_dir);
        return -1;
    }
    agent_info("AGENT-LIB-COPIED",
               "copied %d libcoll file(s) and %d GPU plugin file(s) from %s to %s", copied, plugins,
               src_dir, dst_dir);
    return 0;
}
