/* Interface selection: COLL_SOCKET_IFNAME (NCCL syntax) plus CIDR pins. */
#ifndef COLLI_NETIF_H
#define COLLI_NETIF_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "coll.h"
#include "netaddr.h" /* proto/: colli_net_same, colli_net_str */

/* How an interface was chosen (said in the member record, for the root's network check). */
enum {
    COLLI_NETIF_FIRST = 1,  /* nothing pinned: the first interface that is up */
    COLLI_NETIF_TOWARD = 2, /* nothing pinned: the interface on the bootstrap root's network */
    COLLI_NETIF_NAME = 3,   /* COLL_SOCKET_IFNAME (or the agent's pin) by interface name */
    COLLI_NETIF_CIDR = 4,   /* COLL_SOCKET_IFNAME by network (CIDR) */
};

typedef struct colli_netif {
    char name[32];
    struct sockaddr_storage addr; /* port 0 */
    int prefix;                   /* the address's prefix length (its network), 0 = unknown */
    int how;                      /* COLLI_NETIF_* */
} colli_netif_t;

/* Choose the interface (and its address) matching spec, a comma list where each entry is a name
 * prefix or a CIDR (10.1.0.0/16); a leading '^' excludes the listed ones, a leading '=' makes
 * names exact. Empty spec: the first interface that is up and not loopback (loopback when there is
 * nothing else). family: AF_UNSPEC, AF_INET or AF_INET6. No match is an error that lists every
 * interface with its addresses. */
coll_result_t colli_netif_select(const char *spec, int family, colli_netif_t *out);

/* As colli_netif_select, but with an empty spec the interface whose network (address and mask)
 * holds toward (the bootstrap root) comes first, so that a host whose first interface is another
 * network (a management bond0) still joins on the job's one; without such an interface, the
 * choice of colli_netif_select. An INFO line names the choice. */
coll_result_t colli_netif_select_toward(const char *spec, int family,
                                        const struct sockaddr_storage *toward, colli_netif_t *out);

/* The prefix length of this host's interface address equal to addr's (0: none here). */
int colli_netif_prefix_of(const struct sockaddr_storage *addr);

/* Is this host's interface name down (not up, no carrier, or gone)? 1 down, 0 up, -1 unknown. */
int colli_netif_link_down(const char *name);

/* True when spec matches (name, addr): exposed for unit tests. */
bool colli_netif_match(const char *spec, const char *name, const struct sockaddr *addr);

#endif
