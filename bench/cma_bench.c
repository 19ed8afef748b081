/* cma-bench: how fast the kernel's cross-memory attach (process_vm_readv/writev) copies between
 * two processes on this machine, in the blocks kcoll's single-copy path uses for buffers that
 * are not from coll_mem_alloc. This is the ceiling of that path, set by the kernel, measured
 * beside memcpy-bench's yardstick.
 *   cma-bench [MiB (64)] [reps (10)] [block KiB (256)]
 * A child process holds a SIZE-byte buffer of non-zero data; the parent copies all of it into a
 * block-sized buffer of its own with process_vm_readv, block by block, and writes a block-sized
 * buffer over all of it with process_vm_writev, as the single-copy path does with a peer's input
 * and output. Then both processes do the same to each other at once, as the two ranks of a
 * 2-rank all_reduce do. Best of REPS runs; GB/s = bytes copied per second / 10^9. Prints:
 *   cma readv <MiB> MiB (<K> KiB blocks): <GB/s> GB/s
 *   cma writev ...: <GB/s> GB/s
 *   cma readv both at once ...: <GB/s> GB/s per process
 *   cma writev both at once ...: <GB/s> GB/s per process
 * Exit status 0, 1 when a call fails (ptrace permission: one user, Yama; see the message). */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct side {
    pid_t peer;
    unsigned char *buf, *block; /* the SIZE bytes the peer reaches; this process's block */
    size_t n, b;
    long reps;
} side_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Best time of reps passes over the peer's whole buffer (its address is the same as ours: the
 * child is a fork), or -1 with the error printed. */
static double pass(const side_t *s, int write)
{
    double best = 1e30;
    for (long r = 0; r < s->reps; r++) {
        const double t0 = now_s();
        for (size_t off = 0; off < s->n; off += s->b) {
            struct iovec l = {.iov_base = s->block, .iov_len = s->b};
            struct iovec rem = {.iov_base = s->buf + off, .iov_len = s->b};
            ssize_t k = write ? process_vm_writev(s->peer, &l, 1, &rem, 1, 0)
                              : process_vm_readv(s->peer, &l, 1, &rem, 1, 0);
            if (k != (ssize_t)s->b) {
                fprintf(stderr,
                        "cma-bench: process_vm_%s of pid %d: %s (ptrace permission: run "
                        "both as one user; Yama's ptrace_scope must be 0 or 1)\n",
                        write ? "writev" : "readv", (int)s->peer,
                        k < 0 ? strerror(errno) : "short copy");
                return -1;
            }
        }
        const double t = now_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

/* One byte through a pipe: the two processes start each concurrent pass together. */
static int sync_byte(int wfd, int rfd)
{
    char c = 1;
    return write(wfd, &c, 1) == 1 && read(rfd, &c, 1) == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 64, reps = argc > 2 ? atol(argv[2]) : 10;
    long kib = argc > 3 ? atol(argv[3]) : 256;
    if (mib < 1 || mib > 4096 || reps < 1 || reps > 1000 || kib < 4 || kib > 65536 ||
        ((size_t)mib << 20) % ((size_t)kib << 10) != 0) {
        fprintf(stderr,
                "usage: %s [MiB 1..4096 (64)] [reps 1..1000 (10)] [block KiB 4..65536, "
                "dividing the size (256)]\n",
                argv[0]);
        return 2;
    }
    side_t s = {.n = (size_t)mib << 20, .b = (size_t)kib << 10, .reps = reps};
    s.buf = malloc(s.n);
    s.block = malloc(s.b);
    int to_child[2], to_parent[2];
    if (s.buf == NULL || s.block == NULL || pipe(to_child) != 0 || pipe(to_parent) != 0) {
        fprintf(stderr, "cma-bench: out of memory or pipes (%s)\n", strerror(errno));
        return 1;
    }
    for (size_t i = 0; i < s.n; i++)
        s.buf[i] = (unsigned char)(i * 131u + 7u) | 1u;
    memset(s.block, 3, s.b);
    const pid_t parent = getpid();
    const pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "cma-bench: fork: %s\n", strerror(errno));
        return 1;
    }
    if (child == 0) { /* wait for the parent's solo passes, then copy from it at the same time */
        side_t c = s;
        c.peer = parent;
        char go;
        if (read(to_child[0], &go, 1) != 1)
            _exit(1);
        int rc = 0;
        for (int w = 0; w < 2 && rc == 0; w++)
            rc = sync_byte(to_parent[1], to_child[0]) != 0 || pass(&c, w) < 0;
        if (rc == 0 && read(to_child[0], &go, 1) != 1) /* the parent is done with our buffer */
            rc = 1;
        _exit(rc);
    }
    s.peer = child;
    int rc = 0;
    const char *name[2] = {"readv", "writev"};
    for (int w = 0; w < 2 && rc == 0; w++) {
        double t = pass(&s, w);
        if (t < 0)
            rc = 1;
        else
            printf("cma %s %ld MiB (%ld KiB blocks): %.2f GB/s\n", name[w], mib, kib,
                   (double)s.n / t / 1e9);
    }
    char go = 1;
    if (rc == 0 && write(to_child[1], &go, 1) != 1)
        rc = 1;
    for (int w = 0; w < 2 && rc == 0; w++) {
        double t = -1;
        if (read(to_parent[0], &go, 1) == 1 && write(to_child[1], &go, 1) == 1)
            t = pass(&s, w);
        if (t < 0)
            rc = 1;
        else
            printf("cma %s both at once %ld MiB (%ld KiB blocks): %.2f GB/s per process\n", name[w],
                   mib, kib, (double)s.n / t / 1e9);
    }
    int st = 0;
    if (rc == 0 && write(to_child[1], &go, 1) != 1)
        rc = 1;
    if (rc != 0)
        kill(child, SIGKILL);
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        rc = 1;
    free(s.buf);
    free(s.block);
    return rc;
}
