/*
 * tcp_stream: single-stream loopback TCP throughput, the physical limit that a socket transport
 * can reach on this machine. One receiver process (the parent) and one sender process (a forked
 * child) over 127.0.0.1; the sender writes large buffers for a fixed duration; the receiver counts
 * the bytes and prints GB/s (1e9 bytes per second, as nccl-tests and coll-perf report).
 *
 * usage: tcp_stream [-t seconds] [-s write_bytes] [-q]
 *   -q prints only the number (GB/s), for scripts.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    fprintf(stderr, "tcp_stream: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int run_sender(uint16_t port, double seconds, size_t wsize)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        die("connect");
    char *buf = malloc(wsize);
    if (buf == NULL)
        die("malloc");
    memset(buf, 0x5a, wsize);
    double end = now_s() + seconds;
    while (now_s() < end) {
        size_t off = 0;
        while (off < wsize) {
            ssize_t n = send(fd, buf + off, wsize - off, MSG_NOSIGNAL);
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                die("send");
            }
            off += (size_t)n;
        }
    }
    free(buf);
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    double seconds = 2.5;
    size_t wsize = 4u << 20;
    int quiet = 0;
    int c;
    while ((c = getopt(argc, argv, "t:s:qh")) != -1) {
        switch (c) {
        case 't':
            seconds = atof(optarg);
            break;
        case 's':
            wsize = (size_t)strtoull(optarg, NULL, 0);
            break;
        case 'q':
            quiet = 1;
            break;
        default:
            fprintf(stderr, "usage: %s [-t seconds] [-s write_bytes] [-q]\n", argv[0]);
            return c == 'h' ? 0 : 2;
        }
    }
    if (seconds <= 0 || wsize == 0) {
        fprintf(stderr, "tcp_stream: -t and -s must be positive\n");
        return 2;
    }

    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0)
        die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lfd, 1) != 0)
        die("bind/listen");
    socklen_t alen = sizeof(a);
    if (getsockname(lfd, (struct sockaddr *)&a, &alen) != 0)
        die("getsockname");

    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        close(lfd);
        _exit(run_sender(ntohs(a.sin_port), seconds, wsize));
    }

    int fd = accept(lfd, NULL, NULL);
    if (fd < 0)
        die("accept");
    close(lfd);
    char *buf = malloc(wsize);
    if (buf == NULL)
        die("malloc");
    uint64_t total = 0;
    double t0 = 0, t1 = 0;
    for (;;) {
        ssize_t n = recv(fd, buf, wsize, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            die("recv");
        }
        if (n == 0)
            break;
        t1 = now_s();
        if (total == 0)
            t0 = t1;
        total += (uint64_t)n;
    }
    close(fd);
    free(buf);
    int st = 0;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "tcp_stream: sender failed\n");
        return 1;
    }
    if (t1 <= t0) {
        fprintf(stderr, "tcp_stream: no data measured\n");
        return 1;
    }
    double gbs = (double)total / (t1 - t0) / 1e9;
    if (quiet)
        printf("%.2f\n", gbs);
    else
        printf("tcp_stream: %.2f GB/s (%.2f GB in %.2f s, writes of %zu bytes, 127.0.0.1)\n", gbs,
               (double)total / 1e9, t1 - t0, wsize);
    return 0;
}
