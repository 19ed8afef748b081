/* The sidecar delivers its pinned libcoll build: libcoll.so* from the image (--lib-src) into the
 * shared volume (COLL_AGENT_LIB_DIR, e.g. /var/run/kcoll/lib) before it opens its socket, so that
 * every training container loads the same build. Files are written to a temporary name and
 * renamed, so a reader never sees a partial library. */
#define _GNU_SOURCE
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
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

static int has_prefix(const char *name, const char *const *prefixes)
{
    for (size_t i = 0; prefixes[i] != NULL; i++)
        if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
            return 1;
    return 0;
}

/* Copy the files and links of src_dir whose names start with one of prefixes into dst_dir
 * (created); *copied counts them. -1 with cond filled on a failure; a missing src_dir is
 * "LibraryMissing" unless optional (then nothing happens). */
static int copy_matching(const char *src_dir, const char *dst_dir, const char *const *prefixes,
                         int optional, int *copied, agent_condition_t *cond)
{
    DIR *d = opendir(src_dir);
    if (!d) {
        if (optional && errno == ENOENT)
            return 0;
        snprintf(cond->type, sizeof(cond->type), "LibraryMissing");
        snprintf(cond->message, sizeof(cond->message),
                 "the agent image has no library directory %s (%s): use the kcoll agent image "
                 "whose tag is the pinned library version",
                 src_dir, strerror(errno));
        return -1;
    }
    if (mkdir(dst_dir, 0755) != 0 && errno != EEXIST) {
        snprintf(cond->message, sizeof(cond->message),
                 "cannot create %s: %s (is the shared emptyDir mounted?)", dst_dir,
                 strerror(errno));
        closedir(d);
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char src[PATH_MAX], dst[PATH_MAX];
        struct stat st;
        if (!has_prefix(e->d_name, prefixes))
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
        (*copied)++;
    }
    closedir(d);
    return 0;
}

/* The optional SRC/sub into a directory beside DST (DST/../name, written to dst_out, PATH_MAX
 * bytes): the files whose names start with one of prefixes. */
static int copy_beside(const char *src_dir, const char *sub, const char *dst_dir, const char *name,
                       const char *const *prefixes, char *dst_out, int *copied,
                       agent_condition_t *cond)
{
    char src[PATH_MAX];
    const char *slash = strrchr(dst_dir, '/');
    int plen = slash != NULL ? (int)(slash - dst_dir) : 1;
    if (agent_fmt(src, sizeof(src), "%s/%s", src_dir, sub) < 0 ||
        agent_fmt(dst_out, PATH_MAX, "%.*s/%s", plen, slash != NULL ? dst_dir : ".", name) < 0) {
        snprintf(cond->message, sizeof(cond->message), "library path too long: %s", dst_dir);
        return -1;
    }
    return copy_matching(src, dst_out, prefixes, 1, copied, cond);
}

int agent_copy_library(const char *src_dir, const char *dst_dir, agent_condition_t *cond)
{
    static const char *const lib[] = {"libcoll.so", "libcoll_cuda.so", NULL};
    static const char *const nccl[] = {"libnccl.so", "libnccl-alias.so", NULL};
    static const char *const plugin[] = {"libcoll_cuda.so", NULL};
    static const char *const envplugin[] = {"libnccl-env", "libjansson.so", NULL};
    int copied = 0, ncopied = 0, ecopied = 0;
    memset(cond, 0, sizeof(*cond));
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "LibraryCopyFailed");
    if (copy_matching(src_dir, dst_dir, lib, 0, &copied, cond) != 0)
        return -1;
    if (copied == 0) {
        snprintf(cond->type, sizeof(cond->type), "LibraryMissing");
        snprintf(cond->message, sizeof(cond->message),
                 "no libcoll.so* in %s: the agent image is incomplete", src_dir);
        return -1;
    }
    /* kcoll's libnccl.so.2 (from SRC/kcoll-nccl, where the build installs it) goes beside the
     * library directory, in DST/../nccl, with the GPU plugin it looks up beside itself: not on
     * LD_LIBRARY_PATH, so that it replaces NVIDIA's NCCL only where the webhook preloads it
     * (CollectiveTopology spec.nccl: kcoll) */
    char ndst[PATH_MAX], edst[PATH_MAX];
    if (copy_beside(src_dir, "kcoll-nccl", dst_dir, "nccl", nccl, ndst, &ncopied, cond) != 0)
        return -1;
    if (ncopied > 0 && copy_matching(src_dir, ndst, plugin, 0, &ncopied, cond) != 0)
        return -1;
    /* NVIDIA NCCL's environment plugin (SRC/kcoll-nccl-env) in DST/../nccl-env, where the
     * webhook points NCCL_ENV_PLUGIN (CollectiveTopology spec.nccl: native), with the
     * libjansson.so.4 the image puts beside it (the training image need not have it) */
    if (copy_beside(src_dir, "kcoll-nccl-env", dst_dir, "nccl-env", envplugin, edst, &ecopied,
                    cond) != 0)
        return -1;
    agent_info("AGENT-LIB-COPIED", "copied %d libcoll file(s) from %s to %s%s%s%s%s", copied,
               src_dir, dst_dir, ncopied > 0 ? "; kcoll's libnccl.so.2 to " : "",
               ncopied > 0 ? ndst : "", ecopied > 0 ? "; NCCL's env plugin to " : "",
               ecopied > 0 ? edst : "");
    return 0;
}
