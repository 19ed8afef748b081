/*
 * Replayed hellos (issue 21, findings 1 and 4). An attacker who can watch the network records the
 * first bytes of kcoll connections on the loopback interface (AF_PACKET, as root) and sends them
 * again on connections of its own:
 *   - the bootstrap: rank 0's hello, response and member record, replayed to the root before rank
 *     1 arrives. Before, the root took the copy for a second process claiming rank 0 and failed
 *     the job; now it challenges the copy, gets the old answer, drops the connection, and the job
 *     bootstraps.
 *   - a data connection: one rank's hello to the other, replayed while the two all-reduce in a
 *     loop, followed by the recorded response, a recorded frame header and a payload of garbage.
 *     Before, the copy replaced the real stream and the garbage was reduced (a wrong result
 *     reported as success); now the rank drops it ("wrong answer to the challenge") and every
 *     result stays exact.
 * replay            (exit 0: pass, 1: fail, 77: skipped: needs root for AF_PACKET)
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/ip.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"

#define COUNT (64 * 1024) /* float32: 256 KiB a call */
#define HELLO 64
#define CHAL  32
#define RESP  16
#define FRAME 48
#define REC   (RESP + 640 + 16) /* response, member record, its MAC */

static int failed;

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    fflush(stdout);
    failed |= !ok;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    _Atomic int stop;      /* the parent is done attacking */
    _Atomic long iters[2]; /* all_reduce calls completed per rank */
    _Atomic long wrong[2]; /* elements that differed from the expected sum */
    _Atomic int status[2]; /* 0: running, 1: ok, 2: a call failed */
    char error[2][512];
} shared_t;

static int rank_main(shared_t *sh, coll_unique_id_t id, int rank, const char *log)
{
    if (freopen(log, "w", stderr) == NULL)
        return 1;
    setvbuf(stderr, NULL, _IOLBF, 0);
    coll_comm_t comm;
    coll_result_t rc = coll_comm_init_rank(&comm, 2, id, rank);
    if (rc != COLL_SUCCESS) {
        snprintf(sh->error[rank], sizeof(sh->error[rank]), "init: %s", coll_get_last_error());
        sh->status[rank] = 2;
        return 1;
    }
    float *s = malloc(COUNT * sizeof(float)), *r = malloc(COUNT * sizeof(float));
    double end = now() + 60;
    long it = 0;
    /* both ranks make the same number of calls: stop at an iteration count agreed through the
     * shared page (the first even one after the parent says stop) */
    while (rc == COLL_SUCCESS && now() < end) {
        for (size_t i = 0; i < COUNT; i++)
            s[i] = (float)((i + (size_t)rank + (size_t)it) % 13);
        int stop = atomic_load(&sh->stop);
        rc = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, comm, NULL);
        long bad = 0;
        for (size_t i = 0; rc == COLL_SUCCESS && i < COUNT; i++)
            bad += r[i] != (float)((i + (size_t)it) % 13 + (i + 1 + (size_t)it) % 13);
        atomic_fetch_add(&sh->wrong[rank], bad);
        it++;
        atomic_store(&sh->iters[rank], it);
        /* agree on stopping: an all_reduce of the stop flags */
        int32_t mine = stop, any = 0;
        if (rc == COLL_SUCCESS)
            rc = coll_all_reduce(&mine, &any, 1, COLL_INT32, COLL_MAX, comm, NULL);
        if (rc == COLL_SUCCESS && any)
            break;
    }
    if (rc != COLL_SUCCESS) {
        snprintf(sh->error[rank], sizeof(sh->error[rank]), "all_reduce: %s", coll_get_last_error());
        sh->status[rank] = 2;
        coll_comm_abort(comm);
        return 1;
    }
    coll_comm_destroy(comm);
    sh->status[rank] = 1;
    free(s);
    free(r);
    return 0;
}

/* ---- the recorder: TCP payloads on lo, per connection (by source port) ---- */

typedef struct {
    uint16_t sport, dport;
    unsigned char data[4096];
    size_t len;
} stream_t;

static int sniffer_open(void)
{
    int fd = socket(AF_PACKET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_IP));
    if (fd < 0)
        return -1;
    struct sockaddr_ll sll = {.sll_family = AF_PACKET,
                              .sll_protocol = htons(ETH_P_IP),
                              .sll_ifindex = (int)if_nametoindex("lo")};
    if (bind(fd, (struct sockaddr *)&sll, sizeof(sll)) != 0) {
        close(fd);
        return -1;
    }
    /* Everything on lo lands here, other programs' traffic too, while the ranks all-reduce and
     * this process may be descheduled: a buffer large enough that no packet is dropped (root may
     * exceed rmem_max; the default 208 KiB overflowed under load and lost the data hello). */
    int big = 64 << 20;
    if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof(big)) != 0)
        (void)setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    return fd;
}

/* Record payloads until a stream to dport (0: any) starts with a hello of `kind` and holds want
 * bytes; returns it, or NULL at the deadline. */
static stream_t *record(int sn, stream_t *st, int *nst, uint16_t dport, int kind, size_t want,
                        double deadline)
{
    unsigned char pkt[70000];
    while (now() < deadline) {
        for (int i = 0; i < *nst; i++) {
            const stream_t *s = &st[i];
            if ((dport == 0 || s->dport == dport) && s->len >= want && s->len >= HELLO &&
                memcmp(s->data, "KCHL", 4) == 0 && s->data[6] == kind)
                return &st[i];
        }
        struct sockaddr_ll from;
        socklen_t fl = sizeof(from);
        ssize_t n = recvfrom(sn, pkt, sizeof(pkt), 0, (struct sockaddr *)&from, &fl);
        if (n < 0) {
            struct pollfd p = {.fd = sn, .events = POLLIN};
            poll(&p, 1, 20);
            continue;
        }
        if (from.sll_pkttype == PACKET_OUTGOING || n < (ssize_t)sizeof(struct iphdr))
            continue; /* lo shows each packet twice */
        const struct iphdr *ip = (const void *)pkt;
        size_t ihl = (size_t)ip->ihl * 4, tot = ntohs(ip->tot_len);
        if (ip->protocol != IPPROTO_TCP || tot > (size_t)n || tot < ihl + sizeof(struct tcphdr))
            continue;
        const struct tcphdr *tcp = (const void *)(pkt + ihl);
        size_t off = ihl + (size_t)tcp->doff * 4;
        if (off >= tot)
            continue;
        uint16_t sp = ntohs(tcp->source), dp = ntohs(tcp->dest);
        stream_t *s = NULL;
        for (int i = 0; i < *nst && s == NULL; i++)
            if (st[i].sport == sp && st[i].dport == dp)
                s = &st[i];
        /* a new stream only where a kcoll hello starts it: other programs' connections on lo
         * must not take the table's slots */
        if (s == NULL && *nst < 256 && tot - off >= 4 && memcmp(pkt + off, "KCHL", 4) == 0) {
            s = &st[(*nst)++];
            memset(s, 0, sizeof(*s));
            s->sport = sp;
            s->dport = dp;
        }
        if (s == NULL)
            continue;
        size_t len = tot - off;
        if (len > sizeof(s->data) - s->len)
            len = sizeof(s->data) - s->len;
        memcpy(s->data + s->len, pkt + off, len);
        s->len += len;
    }
    return NULL;
}

static int connect_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Read up to len bytes within s seconds; the count read, or -1 at end of stream first. */
static ssize_t read_within(int fd, void *buf, size_t len, double s, int *eof)
{
    size_t got = 0;
    double end = now() + s;
    *eof = 0;
    while (got < len && now() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        if (n <= 0) {
            *eof = 1;
            break;
        }
        got += (size_t)n;
    }
    return (ssize_t)got;
}

/* Replay `hello` and what followed it (`rest`), after reading the challenge; true when the peer
 * challenged the copy and then closed it. */
static void replay(const char *what, int port, const unsigned char *hello,
                   const unsigned char *rest, size_t rest_len, const unsigned char *extra,
                   size_t extra_len)
{
    char line[256];
    int fd = connect_port(port);
    snprintf(line, sizeof(line), "%s: connected to the port a second time", what);
    check(fd >= 0, line);
    if (fd < 0)
        return;
    int eof = 0;
    unsigned char chal[CHAL];
    ssize_t w = send(fd, hello, HELLO, MSG_NOSIGNAL);
    ssize_t got = read_within(fd, chal, sizeof(chal), 5.0, &eof);
    snprintf(line, sizeof(line),
             "%s: the recorded hello passes its MAC check and is answered with a fresh "
             "challenge (%zd of %d bytes)",
             what, got, CHAL);
    check(w == HELLO && got == CHAL, line);
    (void)!send(fd, rest, rest_len, MSG_NOSIGNAL);
    if (extra_len > 0)
        (void)!send(fd, extra, extra_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    unsigned char sink[4096];
    double t0 = now();
    while (!eof && now() - t0 < 5.0)
        (void)read_within(fd, sink, sizeof(sink), 0.2, &eof);
    snprintf(line, sizeof(line),
             "%s: the recorded response does not answer it: closed after %.2f s", what, now() - t0);
    check(eof, line);
    close(fd);
}

static int log_has(const char *path, const char *needle)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int found = 0;
    while (f != NULL && !found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, needle) != NULL;
    if (f != NULL)
        fclose(f);
    return found;
}

/* The data listener's port from a rank's INFO line "rank R of N: 127.0.0.1:PORT on ..." */
static int log_port(const char *path)
{
    FILE *f = fopen(path, "r");
    char line[4096];
    int port = 0;
    while (f != NULL && port == 0 && fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, " of 2: 127.0.0.1:");
        if (p != NULL)
            port = atoi(p + strlen(" of 2: 127.0.0.1:"));
    }
    if (f != NULL)
        fclose(f);
    return port;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int sn = sniffer_open();
    if (sn < 0) {
        printf("SKIPPED: recording packets on lo needs root (AF_PACKET): %s\n", strerror(errno));
        return 77;
    }
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    setenv("COLL_SHM_DISABLE", "1", 1); /* the ranks talk TCP: the connections to record */
    setenv("COLL_BOOTSTRAP_TIMEOUT", "30", 1);
    setenv("COLL_DEBUG", "INFO", 1); /* the ranks name their listeners */
    coll_unique_id_t id;
    char str[COLL_UNIQUE_ID_STRLEN], addr[64] = "";
    int root_port = 0;
    if (coll_get_unique_id(&id) != COLL_SUCCESS ||
        coll_unique_id_to_string(&id, str, sizeof(str)) != COLL_SUCCESS ||
        sscanf(str, "kcoll1:%63[0-9.]:%d:", addr, &root_port) != 2) {
        printf("FAIL unique id: %s\n", coll_get_last_error());
        return 1;
    }
    shared_t *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    memset(sh, 0, sizeof(*sh));
    char logs[2][64];
    pid_t pids[2];
    for (int r = 0; r < 2; r++)
        snprintf(logs[r], sizeof(logs[r]), "/tmp/kcoll-replay-%d-rank%d.log", (int)getpid(), r);
    static stream_t streams[256];
    int nst = 0;

    /* 1. the bootstrap: rank 0 checks in; its bytes to the root are recorded and replayed */
    pids[0] = fork();
    if (pids[0] == 0)
        _exit(rank_main(sh, id, 0, logs[0]));
    stream_t *boot = record(sn, streams, &nst, (uint16_t)root_port, 1, HELLO + REC, now() + 20);
    check(boot != NULL, "recorded rank 0's hello, response and member record to the root");
    if (boot != NULL)
        replay("bootstrap", root_port, boot->data, boot->data + HELLO, REC, NULL, 0);
    pids[1] = fork();
    if (pids[1] == 0)
        _exit(rank_main(sh, id, 1, logs[1]));

    /* 2. a data connection: a rank's hello to the other, its response, a frame header */
    double until = now() + 30;
    while (atomic_load(&sh->iters[0]) < 1 && now() < until && !sh->status[0] && !sh->status[1])
        usleep(10000);
    check(atomic_load(&sh->iters[0]) >= 1, "the replayed bootstrap did not stop the job: "
                                           "both ranks bootstrapped and all-reduced");
    /* only connections to our ranks' listeners ("rank R of 2: 127.0.0.1:PORT on lo", INFO):
     * other programs on this machine may talk kcoll on lo too */
    int ports[2] = {log_port(logs[0]), log_port(logs[1])};
    check(ports[0] > 0 && ports[1] > 0, "found both ranks' data listeners in their logs");
    stream_t *data = NULL;
    for (int k = 0; k < 2 && data == NULL && ports[k] > 0; k++) {
        for (int i = 0; i < nst && data == NULL; i++)
            if (streams[i].dport == ports[k] && streams[i].len >= HELLO + RESP + FRAME &&
                memcmp(streams[i].data, "KCHL", 4) == 0 && streams[i].data[6] == 2)
                data = &streams[i];
        if (data == NULL)
            data =
                record(sn, streams, &nst, (uint16_t)ports[k], 2, HELLO + RESP + FRAME, now() + 5);
    }
    check(data != NULL, "recorded a data connection's first bytes");
    int target = data != NULL ? data->data[20] : 0; /* the hello's to_rank */
    if (data != NULL) {
        long before = atomic_load(&sh->iters[0]);
        static unsigned char garbage[1 << 20];
        memset(garbage, 0x7f, sizeof(garbage));
        /* the recorded response, the recorded first frame header, then a payload of garbage */
        replay("data stream", data->dport, data->data, data->data + HELLO, RESP + FRAME, garbage,
               sizeof(garbage));
        until = now() + 20;
        while (atomic_load(&sh->iters[0]) < before + 3 && now() < until && !sh->status[0])
            usleep(10000);
        check(atomic_load(&sh->iters[0]) >= before + 3,
              "the ranks went on all-reducing after the replay");
    }
    atomic_store(&sh->stop, 1);
    for (int r = 0; r < 2; r++) {
        int st = 0;
        waitpid(pids[r], &st, 0);
        char line[700];
        snprintf(line, sizeof(line), "rank %d: %ld all_reduce calls, all succeeded%s%s", r,
                 atomic_load(&sh->iters[r]), sh->error[r][0] ? ": " : "", sh->error[r]);
        check(WIFEXITED(st) && WEXITSTATUS(st) == 0 && sh->status[r] == 1, line);
        snprintf(line, sizeof(line), "rank %d: every result exact (%ld wrong elements)", r,
                 atomic_load(&sh->wrong[r]));
        check(atomic_load(&sh->wrong[r]) == 0, line);
    }
    char said[200];
    snprintf(said, sizeof(said),
             "rank %d said why it dropped the copy (\"wrong answer to the challenge: a replayed "
             "hello\")",
             target);
    check(log_has(logs[target & 1], "wrong answer to the challenge: a replayed hello"), said);
    for (int r = 0; r < 2; r++)
        if (failed) {
            printf("--- rank %d's log (%s):\n", r, logs[r]);
            FILE *f = fopen(logs[r], "r");
            char line[4096];
            while (f != NULL && fgets(line, sizeof(line), f) != NULL)
                fputs(line, stdout);
            if (f != NULL)
                fclose(f);
        }
    unlink(logs[0]);
    unlink(logs[1]);
    printf("%s\n", failed ? "FAILED" : "passed");
    return failed;
}
