/*
 * Strangers: programs that connect to a kcoll port without being a rank of the job (a port
 * scanner, a health check, a process of another job). While 2 ranks run a loop of all_reduces,
 * connect to a rank's data listener (found from its INFO line "rank R of N: ADDR:PORT on IF")
 * and send garbage, a truncated hello, a hello with a wrong protocol or a forged MAC, or nothing
 * at all; the job must go on with correct results and each connection must be dropped with a
 * WARN "dropped connection from <its address>: <why>". The same against the bootstrap root's
 * port (from the unique id string) before the ranks start.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dh.h"

#define COUNT (64 * 1024) /* float32: 256 KiB, ring all_reduce */

enum { U_STOP = 0 };

static void body(dh_ctx_t *ctx)
{
    dh_out_t *out = &ctx->sh->out[ctx->rank];
    coll_comm_t comm = NULL;
    dh_begin(ctx, ctx->rank);
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (rc != COLL_SUCCESS) {
        dh_record(ctx, "coll_comm_init_rank", rc);
        return;
    }
    float *s = malloc(COUNT * sizeof(float)), *r = malloc(COUNT * sizeof(float));
    double end = dh_now() + 60;
    while (rc == COLL_SUCCESS && dh_now() < end) {
        long it = out->iters;
        for (size_t i = 0; i < COUNT; i++)
            s[i] = (float)((i + (size_t)ctx->rank + (size_t)it) % 11);
        rc = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        for (size_t i = 0; i < COUNT; i++) {
            float want = 0;
            for (int k = 0; k < ctx->nranks; k++)
                want += (float)((i + (size_t)k + (size_t)it) % 11);
            out->bad += r[i] != want;
        }
        out->checked++;
        dh_store(&out->iters, it + 1);
        /* U_STOP is an iteration count both ranks have not reached yet: equal calls on both */
        long stop = dh_load(&ctx->sh->user[U_STOP]);
        if (stop > 0 && it + 1 >= stop)
            break;
    }
    dh_record(ctx, "all_reduce loop", rc);
    if (rc == COLL_SUCCESS)
        CHECK_RC(coll_comm_destroy(comm), COLL_SUCCESS, coll_get_last_error(), "destroy");
    else
        coll_comm_abort(comm);
    free(s);
    free(r);
}

/* ---- strangers ---- */

static int connect_to(int port, int *local_port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        dh_fail("cannot connect to 127.0.0.1:%d: %s", port, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    struct sockaddr_in l;
    socklen_t ll = sizeof(l);
    getsockname(fd, (struct sockaddr *)&l, &ll);
    *local_port = ntohs(l.sin_port);
    return fd;
}

/* The library's wire protocol (COLLI_PROTO_VERSION in libcoll/src/base/wire.h). */
#define WIRE_PROTO 5

/* A 64-byte hello as the wire defines it (magic, proto, kind, ...) with a made-up MAC. */
static void fake_hello(unsigned char *h, uint16_t proto, int to_rank)
{
    memset(h, 0, 64);
    uint32_t magic = 0x4c48434bu; /* "KCHL", little-endian on the wire */
    memcpy(h, &magic, 4);
    memcpy(h + 4, &proto, 2);
    h[6] = 2; /* data connection */
    int32_t from = 1 - to_rank, to = to_rank;
    memcpy(h + 16, &from, 4);
    memcpy(h + 20, &to, 4);
    uint32_t nranks = 2;
    memcpy(h + 28, &nranks, 4);
    for (int i = 32; i < 64; i++)
        h[i] = (unsigned char)(i * 37 + 11);
}

typedef struct stranger {
    const char *what;
    size_t len; /* bytes to send (from data) */
    int hello;  /* data is a fake hello (proto below) followed by zeros */
    uint16_t proto;
    const char *data; /* raw bytes when !hello */
    const char *why;  /* the reason the WARN must give */
} stranger_t;

/* Connect, send, close; then wait for the WARN naming our address. */
static void visit(dh_job_t *j, int who, int port, const stranger_t *s, const char *prefix,
                  int target_rank)
{
    int lp = 0;
    int fd = connect_to(port, &lp);
    if (fd < 0)
        return;
    unsigned char buf[512];
    memset(buf, 0, sizeof(buf));
    if (s->hello)
        fake_hello(buf, s->proto, target_rank);
    else
        memcpy(buf, s->data, s->len);
    if (s->len > 0 && send(fd, buf, s->len, MSG_NOSIGNAL) != (ssize_t)s->len)
        dh_fail("%s: send: %s", s->what, strerror(errno));
    dh_sleep(0.2);
    close(fd);
    char want[256];
    if (s->why == NULL) { /* quiet: a rank's reachability probe looks like this */
        snprintf(want, sizeof(want), "%sdropped connection from 127.0.0.1:%d:", prefix, lp);
        dh_sleep(1.0);
        CHECK(!dh_wait_output(j, who, want, 0.5), "%s: a WARN \"%s\" (want none)", s->what, want);
        return;
    }
    snprintf(want, sizeof(want), "%sdropped connection from 127.0.0.1:%d: %s", prefix, lp, s->why);
    int ok = dh_wait_output(j, who, want, 5.0);
    CHECK(ok, "%s: no WARN \"%s\" from %s%d", s->what, want, who < 0 ? "the root" : "rank ",
          who < 0 ? 0 : who);
    if (ok)
        CHECK(dh_count_lines(dh_output(j, who), "kcoll WARN", want) == 1,
              "%s: the WARN line carries the level", s->what);
}

static const stranger_t rank_visits[] = {
    {"garbage (an HTTP request)", 18, 0, 0, "GET / HTTP/1.0\r\n\r\n",
     "not a kcoll connection (bad magic); a stranger or a port scan"},
    {"truncated hello (magic + 8 bytes)", 12, 0, 0, "KCHL\x01\x00\x02\x00\x00\x00\x00\x00",
     "closed before completing its hello"},
    /* no WARN: another rank's reachability probe at bootstrap (bootstrap/reach.c) does this */
    {"connect and send nothing", 0, 0, 0, "", NULL},
    {"hello with wire protocol 99", 64, 1, 99, NULL,
     "different kcoll wire-protocol version (mixed library versions in one job?)"},
    {"hello with a forged MAC", 64, 1, WIRE_PROTO, NULL,
     "authentication failed (the peer does not hold this communicator's secret)"},
};

static const stranger_t root_visits[] = {
    {"garbage (an HTTP request)", 18, 0, 0, "GET / HTTP/1.0\r\n\r\n",
     "not a kcoll connection (bad magic)"},
    {"truncated hello (magic + 8 bytes)", 12, 0, 0, "KCHL\x01\x00\x01\x00\x00\x00\x00\x00",
     "closed before sending a complete hello"},
    {"connect and send nothing", 0, 0, 0, "", "closed before sending a complete hello"},
    {"hello + record with a forged MAC", 64 + 320, 1, 1, NULL,
     "authentication failed (the peer does not hold this communicator's secret)"},
};

static int listener_port(dh_job_t *j, int r)
{
    char pat[64];
    snprintf(pat, sizeof(pat), "rank %d of 2: 127.0.0.1:", r);
    if (!dh_wait_output(j, r, pat, 20.0))
        return -1;
    const char *p = strstr(dh_output(j, r), pat);
    return atoi(p + strlen(pat));
}

static int held_fd = -1, held_port;

static void before_ranks(dh_job_t *j, void *arg)
{
    int port = dh_id_port(j);
    dh_log("bootstrap root at 127.0.0.1:%d", port);
    for (size_t i = 0; i < sizeof(root_visits) / sizeof(root_visits[0]); i++) {
        dh_log("stranger at the root: %s", root_visits[i].what);
        visit(j, -1, port, &root_visits[i], "bootstrap root: ", 0);
    }
    /* a silent connection that stays open while the ranks bootstrap */
    held_fd = connect_to(port, &held_port);
}

static long iters_min(dh_job_t *j)
{
    long m = dh_load(&dh_shared(j)->out[0].iters), m1 = dh_load(&dh_shared(j)->out[1].iters);
    return m < m1 ? m : m1;
}

/* Pump until both ranks completed `more` further all_reduces. */
static int progress(dh_job_t *j, long more, double seconds)
{
    long want = iters_min(j) + more;
    double end = dh_now() + seconds;
    while (iters_min(j) < want && dh_now() < end)
        dh_pump(j, 0.005);
    return iters_min(j) >= want;
}

/* ---- many idle strangers at the root ---- */

#define FLOOD 70
static int flood_fd[FLOOD];

static void before_ranks_flood(dh_job_t *j, void *arg)
{
    int port = dh_id_port(j), lp;
    for (int i = 0; i < FLOOD; i++)
        flood_fd[i] = connect_to(port, &lp);
    dh_log("%d idle connections held open at the bootstrap root (127.0.0.1:%d)", FLOOD, port);
}

static int test_flood(void)
{
    dh_opts_t o = {.name = "idle strangers at the root",
                   .nranks = 2,
                   .deadline_s = 60,
                   .body = body,
                   .before_ranks = before_ranks_flood};
    dh_log("--- %s", o.name);
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return dh_finish();
    double t0 = dh_now();
    int ok = progress(j, 1, 30);
    double dt = dh_now() - t0;
    dh_log("the ranks completed their first all_reduce %.1f s after they started", dt);
    CHECK(ok, "the job did not start with %d idle strangers at the root", FLOOD);
    CHECK(dt < 5.0,
          "bootstrap took %.1f s with %d idle connections at the root (want < 5 s: idle "
          "strangers must not delay the ranks)",
          dt, FLOOD);
    for (int i = 0; i < FLOOD; i++)
        if (flood_fd[i] >= 0)
            close(flood_fd[i]);
    dh_shared(j)->user[U_STOP] = iters_min(j) + 3;
    dh_wait(j);
    for (int r = 0; r < 2; r++)
        CHECK_RC(dh_shared(j)->out[r].rc, COLL_SUCCESS, dh_shared(j)->out[r].msg, "rank %d", r);
    dh_free(j);
    return dh_finish();
}

/* ---- a flood of strangers at a rank's data listener (issue 21, finding 2) ---- */

#define LFLOOD 400
static int lflood_fd[LFLOOD];

/* From 127.0.0.2, another address than the peers', the magic of a hello and nothing more. */
static int stranger_from2(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in from = {.sin_family = AF_INET};
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.2", &from.sin_addr);
    inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
    const unsigned char magic[4] = {'K', 'C', 'H', 'L'};
    if (fd < 0 || bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0 ||
        connect(fd, (struct sockaddr *)&to, sizeof(to)) != 0 || write(fd, magic, 4) != 4) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

static int test_listener_flood(void)
{
    /* the ranks run with 200 descriptors: a flood of 400 would exhaust them */
    struct rlimit rl, low;
    getrlimit(RLIMIT_NOFILE, &rl);
    low = rl;
    low.rlim_cur = 200;
    setrlimit(RLIMIT_NOFILE, &low);
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", "INIT");
    dh_opts_t o = {
        .name = "a flood at a rank's listener", .nranks = 2, .deadline_s = 60, .body = body};
    dh_log("--- %s (the ranks' open-file limit 200, %d strangers)", o.name, LFLOOD);
    dh_job_t *j = dh_start(&o);
    setrlimit(RLIMIT_NOFILE, &rl);
    if (j == NULL)
        return dh_finish();
    CHECK(progress(j, 2, 30), "the job did not start its all_reduce loop");
    int port = listener_port(j, 1), opened = 0;
    CHECK(port > 0, "rank 1's INFO line with its listener port");
    for (int i = 0; i < LFLOOD; i++)
        opened += (lflood_fd[i] = port > 0 ? stranger_from2(port) : -1) >= 0;
    dh_log("%d connections from 127.0.0.2 at rank 1 (127.0.0.1:%d), each the magic only", opened,
           port);
    CHECK(opened >= 300, "the flood opened %d connections", opened);
    CHECK(progress(j, 5, 10), "the all_reduce loop stalled under the flood");
    dh_sleep(2.5); /* the held strangers time out, others come from the backlog */
    CHECK(progress(j, 5, 10), "the all_reduce loop stalled after 2.5 s of flood");
    for (int i = 0; i < LFLOOD; i++)
        if (lflood_fd[i] >= 0)
            close(lflood_fd[i]);
    dh_shared(j)->user[U_STOP] = iters_min(j) + 3;
    dh_wait(j);
    for (int r = 0; r < 2; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d: the communicator survives the flood",
                 r);
        CHECK(out->bad == 0, "rank %d: %ld wrong elements", r, out->bad);
    }
    long warns = dh_count_lines(dh_output(j, 1), "kcoll WARN NET", NULL);
    dh_log("rank 1 logged %ld WARN lines about the flood", warns);
    CHECK(warns <= 12,
          "rank 1: %ld WARN lines for one flood (bounded: 8 named, then a count "
          "every 10 s)",
          warns);
    dh_free(j);
    return dh_finish();
}

int main(int argc, char **argv)
{
    dh_init();
    if (argc == 2 && strcmp(argv[1], "rootflood") == 0)
        return test_flood();
    if (argc == 2 && strcmp(argv[1], "listenerflood") == 0)
        return test_listener_flood();
    /* The log level is read once per process: INFO for INIT, so that ranks print their port. */
    dh_setenv("COLL_DEBUG", "INFO");
    dh_setenv("COLL_DEBUG_SUBSYS", "INIT");
    dh_opts_t o = {.name = "strangers",
                   .nranks = 2,
                   .deadline_s = 60,
                   .body = body,
                   .before_ranks = before_ranks};
    dh_log("--- strangers at the bootstrap root, then at the ranks' listeners");
    dh_job_t *j = dh_start(&o);
    if (j == NULL)
        return dh_finish();
    CHECK(progress(j, 2, 30), "the job did not start its all_reduce loop with a silent stranger "
                              "connected to the root");
    if (held_fd >= 0)
        close(held_fd);

    int port[2] = {listener_port(j, 0), listener_port(j, 1)};
    CHECK(port[0] > 0 && port[1] > 0, "INFO lines with the ranks' listener ports");
    /* a silent stranger that stays: dropped after 10 s without a hello */
    int silent_lp = 0, silent = port[1] > 0 ? connect_to(port[1], &silent_lp) : -1;
    double t_silent = dh_now();
    for (int r = 0; r < 2 && port[0] > 0 && port[1] > 0; r++) {
        for (size_t i = 0; i < sizeof(rank_visits) / sizeof(rank_visits[0]); i++) {
            dh_log("stranger at rank %d (127.0.0.1:%d): %s", r, port[r], rank_visits[i].what);
            visit(j, r, port[r], &rank_visits[i], "", r);
            CHECK(progress(j, 2, 10), "rank %d: the all_reduce loop stalled after: %s", r,
                  rank_visits[i].what);
        }
    }
    if (silent >= 0) {
        char want[160];
        snprintf(want, sizeof(want),
                 "dropped connection from 127.0.0.1:%d: no complete hello within 10 s", silent_lp);
        int ok = dh_wait_output(j, 1, want, 14.0 - (dh_now() - t_silent));
        CHECK(ok, "rank 1: no WARN \"%s\" within 14 s", want);
        dh_log("silent stranger dropped after %.1f s", dh_now() - t_silent);
        close(silent);
    }
    CHECK(progress(j, 2, 10), "the loop stalled after the silent stranger");
    dh_shared(j)->user[U_STOP] = iters_min(j) + 3;
    dh_wait(j);
    for (int r = 0; r < 2; r++) {
        const dh_out_t *out = &dh_shared(j)->out[r];
        CHECK_RC(out->rc, COLL_SUCCESS, out->msg, "rank %d: all_reduce loop", r);
        CHECK(out->bad == 0, "rank %d: %ld wrong elements", r, out->bad);
        dh_log("rank %d: %ld all_reduces checked", r, out->checked);
        CHECK(dh_count_lines(dh_output(j, r), "kcoll WARN", NULL) ==
                  dh_count_lines(dh_output(j, r), "kcoll WARN NET dropped connection from", NULL),
              "rank %d: WARN lines other than dropped strangers", r);
    }
    dh_free(j);
    return dh_finish();
}
