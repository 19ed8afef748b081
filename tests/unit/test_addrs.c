/* The bootstrap root's address check (libcoll/src/bootstrap/addrs.c): ranks on different
 * machines (boot ids) with one data address fail, naming two of them, the address, the
 * interfaces and the fix; ranks of one machine may share one (hostNetwork pods); loopback is
 * every machine's own; a host identity without a boot id is not judged. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "base/member.h"
#include "bootstrap/bootstrap.h"
#include "check.h"

#define N 4
static colli_wire_member_t recs[N];
static const colli_wire_member_t *ptrs[N];
static char msg[2048];

/* rank r at ip (v4 or v6) on machine boot, interface eth<r>; pod "" for none */
static void rank_at(int r, const char *ip, const char *boot, const char *ipc, const char *pod)
{
    colli_member_t m;
    memset(&m, 0, sizeof(m));
    m.rank = r;
    m.nranks = N;
    m.proto = COLLI_PROTO_VERSION;
    m.pid = 100 + r;
    struct sockaddr_in *in = (struct sockaddr_in *)&m.addr;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&m.addr;
    if (inet_pton(AF_INET, ip, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons((uint16_t)(4000 + r));
    } else if (inet_pton(AF_INET6, ip, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons((uint16_t)(4000 + r));
    }
    m.nstreams = 1;
    m.chunk_size = 1 << 20;
    snprintf(m.hostname, sizeof(m.hostname), "host%d", r);
    if (boot != NULL)
        snprintf(m.host_id, sizeof(m.host_id), "host%d/%s/%s", r, boot, ipc);
    else
        snprintf(m.host_id, sizeof(m.host_id), "host%d", r); /* no boot id part */
    snprintf(m.ifname, sizeof(m.ifname), "eth%d", r);
    snprintf(m.pod, sizeof(m.pod), "%s", pod);
    if (pod[0] != '\0')
        snprintf(m.node, sizeof(m.node), "node-%s", boot);
    colli_member_to_wire(&m, &recs[r]);
    ptrs[r] = &recs[r];
}

static coll_result_t run(int n)
{
    msg[0] = '\0';
    return colli_addrs_check(ptrs, n, msg, sizeof(msg));
}

static void has(const char *what, const char *case_name)
{
    check(strstr(msg, what) != NULL, "%s: \"%s\" not in \"%s\"", case_name, what, msg);
}

int main(void)
{
    /* distinct addresses on distinct machines */
    rank_at(0, "10.0.0.1", "b0", "i", "");
    rank_at(1, "10.0.0.2", "b1", "i", "");
    rank_at(2, "10.0.0.3", "b2", "i", "");
    check(run(3) == COLL_SUCCESS, "distinct addresses: %s", msg);

    /* one address on two machines (host-local IPAM): names both, the address and the fix */
    rank_at(1, "10.0.0.1", "b1", "i", "");
    check(run(3) == COLL_ERR_NETWORK, "10.0.0.1 on two machines passed");
    has("rank 0 (pid 100 on host0) and rank 1 (pid 101 on host1) are on different machines but "
        "have the same data address 10.0.0.1 (interfaces eth0 and eth1)",
        "two machines");
    has("host-local IPAM", "two machines");
    has("whereabouts", "two machines");
    has("docker0", "two machines");
    has("COLL_SOCKET_IFNAME", "two machines");

    /* the same address on one machine, other IPC namespaces (pods with hostNetwork) */
    rank_at(1, "10.0.0.1", "b0", "j", "");
    check(run(3) == COLL_SUCCESS, "one machine, two IPC namespaces: %s", msg);

    /* loopback is each machine's own */
    rank_at(0, "127.0.0.1", "b0", "i", "");
    rank_at(1, "127.0.0.1", "b1", "i", "");
    rank_at(2, "127.0.1.1", "b2", "i", "");
    rank_at(3, "127.0.1.1", "b3", "i", "");
    check(run(4) == COLL_SUCCESS, "IPv4 loopback on four machines: %s", msg);
    rank_at(0, "::1", "b0", "i", "");
    rank_at(1, "::1", "b1", "i", "");
    rank_at(2, "::ffff:127.0.0.1", "b2", "i", "");
    rank_at(3, "::ffff:127.0.0.1", "b3", "i", "");
    check(run(4) == COLL_SUCCESS, "IPv6 loopback on four machines: %s", msg);

    /* IPv6, and the count of the others: ranks 0, 1 and 2 on three machines, rank 3 with 0 */
    rank_at(0, "fd00::7", "b0", "i", "");
    rank_at(1, "fd00::7", "b1", "i", "");
    rank_at(2, "fd00::7", "b2", "i", "");
    rank_at(3, "fd00::7", "b0", "k", "");
    check(run(4) == COLL_ERR_NETWORK, "fd00::7 on three machines passed");
    has("rank 0 (pid 100 on host0) and rank 1 (pid 101 on host1)", "IPv6");
    has("the same data address fd00::7", "IPv6");
    has("(and 1 more ranks of other machines)", "IPv6");

    /* the ranks in the records' order do not matter: the lowest ranks of a pair are named */
    ptrs[0] = &recs[3];
    ptrs[3] = &recs[0];
    check(run(4) == COLL_ERR_NETWORK, "reordered: passed");
    has("rank 0 (pid 100 on host0) and rank 1 (pid 101 on host1)", "reordered");
    ptrs[0] = &recs[0];
    ptrs[3] = &recs[3];

    /* pods and nodes from the agent */
    rank_at(0, "192.168.1.10", "b0", "i", "trainer-0");
    rank_at(1, "192.168.1.10", "b1", "i", "trainer-1");
    check(run(2) == COLL_ERR_NETWORK, "pods on two nodes passed");
    has("rank 0 (pod trainer-0 on node node-b0, pid 100) and rank 1 (pod trainer-1 on node "
        "node-b1, pid 101)",
        "pods");

    /* a host identity without a boot id (not this format) is not judged */
    rank_at(0, "10.0.0.9", NULL, "", "");
    rank_at(1, "10.0.0.9", NULL, "", "");
    check(run(2) == COLL_SUCCESS, "no boot ids: %s", msg);

    /* a long message is cut, not overrun */
    rank_at(0, "10.0.0.9", "b0", "i", "");
    rank_at(1, "10.0.0.9", "b1", "i", "");
    char small[40];
    memset(small, 'x', sizeof(small));
    check(colli_addrs_check(ptrs, 2, small, 32) == COLL_ERR_NETWORK && small[31] == '\0' &&
              small[32] == 'x',
          "a 32-byte message buffer: cut at 31 and nothing written past it");

    printf("%llu passed, %llu failed\n", n_passed, n_failed);
    return n_failed ? 1 : 0;
}
