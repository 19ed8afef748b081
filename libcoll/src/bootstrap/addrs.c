/* The root's address check: two ranks on different machines with one data address. A
 * connection to that address from either machine reaches the machine it starts on, never the
 * other: every transfer between them fails ("connection refused" from the wrong host), or, worse,
 * reaches another program there. It happens where a network hands out addresses that are unique
 * per node only: a Multus attachment with host-local IPAM (every node assigns the same range),
 * or a bridge that every host has with one address (docker0, virbr0, cni0) pinned as the data
 * interface. The reach check (reach.c) cannot see it: every rank is on one network.
 *
 * A machine is its kernel: the boot id inside the host identity. Ranks of one machine may share
 * an address (pods with hostNetwork, each in an IPC namespace of its own), and loopback is every
 * machine's own (a one-host job; tests that make ranks of this machine count as hosts). */
#include <arpa/inet.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bootstrap/bootstrap.h"

/* The boot id of a host identity ("hostname/boot id/IPC namespace", base/member.c), in out;
 * "" when it has no such part. */
static void boot_of(const char *host_id, size_t size, char *out, size_t len)
{
    out[0] = '\0';
    const size_t n = strnlen(host_id, size); /* a record's field need not end in a NUL */
    const char *a = memchr(host_id, '/', n);
    const char *b = a != NULL ? memchr(a + 1, '/', n - (size_t)(a + 1 - host_id)) : NULL;
    if (b == NULL || (size_t)(b - a - 1) >= len)
        return;
    memcpy(out, a + 1, (size_t)(b - a - 1));
    out[b - a - 1] = '\0';
}

/* An address that means "this machine" anywhere (loopback), or none at all. */
static bool machine_local(const colli_wire_member_t *m)
{
    static const uint8_t zero[16], v6_loop[16] = {[15] = 1};
    if (m->family == AF_INET)
        return m->addr[0] == 127 || memcmp(m->addr, zero, 4) == 0;
    if (m->family == AF_INET6)
        return memcmp(m->addr, v6_loop, 16) == 0 || memcmp(m->addr, zero, 16) == 0 ||
               (memcmp(m->addr, zero, 10) == 0 && m->addr[10] == 0xff && m->addr[11] == 0xff &&
                m->addr[12] == 127);
    return true;
}

static int by_addr(const void *x, const void *y)
{
    const colli_wire_member_t *a = *(const colli_wire_member_t *const *)x;
    const colli_wire_member_t *b = *(const colli_wire_member_t *const *)y;
    if (a->family != b->family)
        return a->family < b->family ? -1 : 1;
    int c = memcmp(a->addr, b->addr, 16);
    return c != 0 ? c : a->rank < b->rank ? -1 : a->rank > b->rank;
}

/* "rank 0 (pod p0 on node n0, pid 11 on host)" or "rank 0 (pid 11 on host)" */
static void who(const colli_wire_member_t *m, char *buf, size_t len)
{
    if (m->proto >= 2 && m->pod[0] != '\0')
        snprintf(buf, len, "rank %d (pod %.64s on node %.64s, pid %d)", m->rank, m->pod,
                 m->node[0] != '\0' ? m->node : m->hostname, m->pid);
    else
        snprintf(buf, len, "rank %d (pid %d on %.64s)", m->rank, m->pid, m->hostname);
}

coll_result_t colli_addrs_check(const colli_wire_member_t *const *recs, int n, char *msg,
                                size_t len)
{
    const colli_wire_member_t **s = malloc(sizeof(*s) * (size_t)(n > 0 ? n : 1));
    if (s == NULL)
        return COLL_SUCCESS; /* a check, not a requirement: the connections still fail */
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!machine_local(recs[i]))
            s[k++] = recs[i];
    qsort(s, (size_t)k, sizeof(*s), by_addr);
    const colli_wire_member_t *a = NULL, *b = NULL;
    int pairs = 0;
    for (int i = 1, start = 0; i < k; i++) {
        if (s[i]->family != s[start]->family || memcmp(s[i]->addr, s[start]->addr, 16) != 0) {
            start = i; /* the first rank of the next address */
            continue;
        }
        char b0[64], b1[64];
        boot_of(s[start]->host_id, sizeof(s[start]->host_id), b0, sizeof(b0));
        boot_of(s[i]->host_id, sizeof(s[i]->host_id), b1, sizeof(b1));
        if (b0[0] == '\0' || b1[0] == '\0' || strcmp(b0, b1) == 0)
            continue;
        if (pairs++ == 0) {
            a = s[start];
            b = s[i];
        }
    }
    free(s);
    if (pairs == 0)
        return COLL_SUCCESS;
    char wa[200], wb[200], addr[INET6_ADDRSTRLEN] = "?";
    who(a, wa, sizeof(wa));
    who(b, wb, sizeof(wb));
    inet_ntop(a->family, a->addr, addr, sizeof(addr));
    char ifs[80];
    if (strcmp(a->ifname, b->ifname) == 0)
        snprintf(ifs, sizeof(ifs), "interface %.32s", a->ifname);
    else
        snprintf(ifs, sizeof(ifs), "interfaces %.32s and %.32s", a->ifname, b->ifname);
    char more[64] = "";
    if (pairs > 1)
        snprintf(more, sizeof(more), " (and %d more ranks of other machines)", pairs - 1);
    snprintf(msg, len,
             "%s and %s are on different machines but have the same data address %s (%s)%s: a "
             "connection to it never leaves the machine it starts on, so "
             "the two cannot reach each other. The network gives out addresses that are unique "
             "per node only: a host-local IPAM range that every node reuses (give the "
             "NetworkAttachmentDefinition a cluster-wide IPAM such as whereabouts), or a bridge "
             "that every host has with one address (docker0, virbr0, cni0). Pin a network whose "
             "addresses are unique across the job (COLL_SOCKET_IFNAME, or the "
             "CollectiveTopology's network).",
             wa, wb, addr, ifs, more);
    return COLL_ERR_NETWORK;
}
