#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fuzz.h"

void fuzz_fail(const char *what)
{
    fprintf(stderr, "fuzz invariant violated: %s\n", what);
    abort();
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int fuzz_poll(struct pollfd *fds, nfds_t nfds, int timeout_ms)
{
    int64_t deadline = now_ms() + timeout_ms;
    for (;;) {
        int64_t left = deadline - now_ms();
        int rc = poll(fds, nfds, left > 0 ? (int)left : 0);
        if (rc >= 0 || errno != EINTR)
            return rc;
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* every rejected input would log a WARN line: keep the fuzzer fast and quiet */
    setenv("COLL_DEBUG", "NONE", 1);
    return 0;
}

int fuzz_listen(const char *what, struct sockaddr_un *addr, socklen_t *len)
{
    signal(SIGPIPE, SIG_IGN);
    memset(addr, 0, sizeof(*addr));
    addr->sun_family = AF_UNIX;
    int n = snprintf(addr->sun_path + 1, sizeof(addr->sun_path) - 1, "kcoll-fuzz-%s-%d", what,
                     (int)getpid());
    *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)addr, *len) != 0 || listen(fd, 64) != 0)
        fuzz_fail("cannot listen for the fake peers");
    return fd;
}

const char *fuzz_as_file(const uint8_t *data, size_t size)
{
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        fd = memfd_create("fuzz-input", MFD_CLOEXEC);
        if (fd < 0)
            fuzz_fail("memfd_create");
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size > 0 && pwrite(fd, data, size, 0) != (ssize_t)size))
        fuzz_fail("cannot write the input to its memfd");
    return path;
}
