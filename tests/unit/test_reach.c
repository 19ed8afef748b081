/* The bootstrap root's network check (libcoll/src/bootstrap/reach.c, included so that the test
 * can make a prober's answer): networks of addresses, the member record's prefix, and the plan:
 * one network or no prober on another host costs nothing (no byte to any rank); ranks of one
 * address are probed once; a prober that could not tell fails nothing; a reachable address passes
 * (a real probe from this process); an unreachable one fails with the message that names rank,
 * host, interface, address, networks and the CIDR pin. */
#include "bootstrap/reach.c"

#include <pthread.h>
#include <sys/socket.h>

#include "base/member.h"
#include "check.h"

static const uint8_t secret[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
static const uint8_t key[16] = {21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36};

#define N 4
static colli_wire_member_t recs[N];
static colli_reach_rank_t ranks[N];
static int peer_fd[N]; /* the ranks' ends of the bootstrap connections */

static void sa4(struct sockaddr_storage *ss, const char *ip, int port)
{
    memset(ss, 0, sizeof(*ss));
    struct sockaddr_in *in = (struct sockaddr_in *)ss;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, ip, &in->sin_addr);
}

/* rank r at ip:port/prefix on host */
static void rank_at(int r, const char *ip, int port, int prefix, const char *host)
{
    colli_member_t m;
    memset(&m, 0, sizeof(m));
    m.rank = r;
    m.nranks = N;
    m.pid = 100 + r;
    sa4(&m.addr, ip, port);
    m.prefix = prefix;
    m.how = COLLI_NETIF_NAME;
    m.nstreams = 1;
    m.chunk_size = 1 << 20;
    snprintf(m.hostname, sizeof(m.hostname), "%s", host);
    snprintf(m.host_id, sizeof(m.host_id), "%s/boot/ipc", host);
    snprintf(m.ifname, sizeof(m.ifname), "eth%d", r);
    colli_member_to_wire(&m, &recs[r]);
}

static void reset(void)
{
    for (int i = 0; i < N; i++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            perror("socketpair");
            exit(1);
        }
        ranks[i] = (colli_reach_rank_t){.fd = sv[0], .key = key, .rec = &recs[i]};
        peer_fd[i] = sv[1];
    }
}

static void close_all(void)
{
    for (int i = 0; i < N; i++) {
        close(ranks[i].fd);
        close(peer_fd[i]);
    }
}

/* Nothing was written to any rank (the check cost nothing). */
static bool silent(void)
{
    for (int i = 0; i < N; i++) {
        char b;
        if (recv(peer_fd[i], &b, 1, MSG_DONTWAIT) >= 0)
            return false;
    }
    return true;
}

/* A prober: the real rank side (answer = 0), or a fake one that reports every entry
 * unreachable with errno answer. */
typedef struct {
    int fd;
    int answer;
    uint32_t entries;
    int io;
} prober_t;

static void *prober(void *arg)
{
    prober_t *p = arg;
    colli_root_reply_t h;
    if (colli_sock_read_all(p->fd, &h, sizeof(h), colli_now() + 10) != COLLI_IO_OK)
        return NULL;
    p->entries = h.nranks;
    if (p->answer == 0) {
        p->io = colli_reach_answer(p->fd, &h, key, secret, NULL, 0, colli_now() + 10);
        return NULL;
    }
    colli_wire_probe_t e[8];
    colli_wire_probe_result_t res[8];
    uint8_t mac[16];
    if (h.nranks > 8 ||
        colli_sock_read_all(p->fd, e, h.nranks * sizeof(e[0]), colli_now() + 10) != COLLI_IO_OK)
        return NULL;
    for (uint32_t i = 0; i < h.nranks; i++)
        res[i] = (colli_wire_probe_result_t){.rank = e[i].rank, .err = p->answer};
    result_mac(key, res, h.nranks, mac);
    p->io = colli_sock_write_all(p->fd, res, h.nranks * sizeof(res[0]), colli_now() + 10);
    if (p->io == COLLI_IO_OK)
        p->io = colli_sock_write_all(p->fd, mac, sizeof(mac), colli_now() + 10);
    return NULL;
}

static void test_helpers(void)
{
    struct sockaddr_storage a, b;
    char s[64];
    sa4(&a, "10.77.1.3", 0);
    sa4(&b, "10.77.1.200", 0);
    check(colli_net_same(&a, &b, 24) && !colli_net_same(&a, &b, 25), "10.77.1.3 vs .200");
    colli_net_str(&a, 24, s, sizeof(s));
    check(strcmp(s, "10.77.1.0/24") == 0, "network string %s", s);
    colli_net_str(&a, 20, s, sizeof(s));
    check(strcmp(s, "10.77.0.0/20") == 0, "network string %s", s);
    sa4(&a, "127.0.0.1", 0);
    check(colli_netif_prefix_of(&a) == 8, "lo's prefix is %d", colli_netif_prefix_of(&a));
    sa4(&a, "192.0.2.77", 0);
    check(colli_netif_prefix_of(&a) == 0, "an address of no interface has a prefix");
    colli_member_t m;
    rank_at(0, "10.77.1.1", 5, 24, "h");
    check(colli_member_from_wire(&recs[0], &m) == COLL_SUCCESS && m.prefix == 24 &&
              m.how == COLLI_NETIF_NAME,
          "prefix and interface choice survive the wire (%d, %d)", m.prefix, m.how);
}

static void test_one_network(void)
{
    char msg[2048] = "";
    struct sockaddr_storage root;
    sa4(&root, "10.77.1.9", 1);
    for (int r = 0; r < N; r++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "10.77.1.%d", r + 1);
        rank_at(r, ip, 1000 + r, 24, r < 2 ? "a" : "b");
    }
    reset();
    check(colli_reach_check(ranks, N, secret, &root, msg, sizeof(msg)) == COLL_SUCCESS,
          "one network failed: %s", msg);
    check(silent(), "one network: the root wrote to a rank");
    close_all();
    /* two networks, but every rank on one host: nobody can judge, nothing is probed */
    for (int r = 0; r < N; r++)
        rank_at(r, r == 3 ? "10.77.9.3" : "10.77.1.3", 1000 + r, 24, "same");
    reset();
    check(colli_reach_check(ranks, N, secret, &root, msg, sizeof(msg)) == COLL_SUCCESS,
          "one host failed: %s", msg);
    check(silent(), "one host: the root wrote to a rank");
    close_all();
}

/* Ranks 0 and 1 on 10.77.1.0/24 (hosts a, b); ranks 2 and 3 share another address on host c:
 * probed once, by rank 0. */
static void two_networks(const char *ip, int port, int prefix, int answer, coll_result_t want,
                         char *msg, size_t len, uint32_t *entries)
{
    struct sockaddr_storage root;
    sa4(&root, "10.77.1.9", 1);
    rank_at(0, "10.77.1.1", 1000, 24, "a");
    rank_at(1, "10.77.1.2", 1001, 24, "b");
    rank_at(2, ip, port, prefix, "c");
    rank_at(3, ip, port + 1, prefix, "c");
    reset();
    prober_t p = {.fd = peer_fd[0], .answer = answer, .io = -99};
    pthread_t t;
    pthread_create(&t, NULL, prober, &p);
    msg[0] = '\0';
    coll_result_t st = colli_reach_check(ranks, N, secret, &root, msg, len);
    pthread_join(t, NULL);
    check(st == want, "two networks: %d, want %d: %s", st, want, msg);
    check(p.io == COLLI_IO_OK, "the prober's answer: %d", p.io);
    *entries = p.entries;
    char b;
    for (int i = 1; i < N; i++)
        check(recv(peer_fd[i], &b, 1, MSG_DONTWAIT) < 0, "rank %d was asked to probe", i);
    close_all();
}

static void test_two_networks(void)
{
    char msg[2048];
    uint32_t entries = 0;
    /* a real probe of a real listener on 127.0.0.1 (another network than 10.77.1.0/24) */
    struct sockaddr_storage l;
    sa4(&l, "127.0.0.1", 0);
    int lfd = -1;
    struct sockaddr_storage bound;
    check(colli_sock_listen(&l, &lfd, &bound) == COLL_SUCCESS, "listen");
    int port = ntohs(((struct sockaddr_in *)&bound)->sin_port);
    two_networks("127.0.0.1", port, 8, 0, COLL_SUCCESS, msg, sizeof(msg), &entries);
    check(entries == 1, "ranks 2 and 3 share an address: %u probes, want 1", entries);
    close(lfd);
    /* a prober that could not tell (out of descriptors): left to the data connections */
    two_networks("10.77.9.3", 4000, 24, -EMFILE, COLL_SUCCESS, msg, sizeof(msg), &entries);
    /* a prober that reaches nothing */
    two_networks("10.77.9.3", 4000, 24, ENETUNREACH, COLL_ERR_NETWORK, msg, sizeof(msg), &entries);
    const char *want[] = {"rank 2 (pid 102 on c) cannot be reached by the other ranks",
                          "its data address 10.77.9.3:4000 on eth2",
                          "(network 10.77.9.0/24, chosen by an interface-name pin)",
                          "does not answer rank 0 (10.77.1.1 on a): Network is unreachable",
                          "2 of 4 ranks are on 10.77.1.0/24",
                          "Unreachable too: rank 3 (10.77.9.3:4001 on c). ",
                          "COLL_SOCKET_IFNAME=10.77.1.0/24"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        check(strstr(msg, want[i]) != NULL, "the message lacks \"%s\": %s", want[i], msg);
    printf("%s\n", msg);
}

/* A fabric of per-pod /32 addresses (every rank its own network): the root's network wins the
 * tie, its one rank probes at most REACH_PER_PROBER others, and nothing is probed from its own
 * host. */
static void test_per_pod_addresses(void)
{
    enum { M = 200 };
    static colli_wire_member_t many[M];
    static colli_reach_rank_t mr[M];
    static int buf[PLAN_INTS(M)];
    for (int r = 0; r < M; r++) {
        colli_member_t m;
        memset(&m, 0, sizeof(m));
        m.rank = r;
        m.nranks = M;
        char ip[32];
        snprintf(ip, sizeof(ip), "10.244.%d.%d", r / 200, r % 200 + 1);
        sa4(&m.addr, ip, 5000);
        m.prefix = 32;
        m.nstreams = 1;
        m.chunk_size = 1 << 20;
        snprintf(m.host_id, sizeof(m.host_id), "node-%d", r == 1 ? 0 : r);
        colli_member_to_wire(&m, &many[r]);
        mr[r] = (colli_reach_rank_t){.fd = -1, .key = key, .rec = &many[r]};
    }
    plan_t p = {.ranks = mr, .n = M};
    int *count = plan_arrays(&p, buf);
    struct sockaddr_storage root;
    sa4(&root, "10.244.0.1", 1);
    check(group(&p, &root, count) && p.nnets == M, "%d networks, want %d", p.nnets, M);
    check(p.main == p.net[0], "the root's network is the main one on a tie");
    const int probes = assign(&p);
    check(probes == REACH_PER_PROBER, "%d probes, want %d (one prober)", probes, REACH_PER_PROBER);
    check(p.prober[1] < 0, "rank 1 (on rank 0's host) was given a prober");
    for (int j = 0; j < M; j++)
        check(p.prober[j] < 0 || p.prober[j] == 0, "rank %d probed by %d", j, p.prober[j]);
}

int main(void)
{
    test_per_pod_addresses();
    test_helpers();
    test_one_network();
    test_two_networks();
    if (n_failed)
        fprintf(stderr, "%llu failures\n", n_failed);
    else
        printf("test_reach: all passed\n");
    return n_failed ? 1 : 0;
}
