#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "base/netif.h"
#include "base/spec.h"
#include "base/util.h"

/* Does token "10.1.0.0/16" (or an IPv6 CIDR) contain addr? -1: token is not a CIDR. */
static int cidr_match(const char *tok, const struct sockaddr *addr)
{
    const char *slash = strchr(tok, '/');
    if (slash == NULL)
        return -1;
    char host[INET6_ADDRSTRLEN];
    size_t hl = (size_t)(slash - tok);
    if (hl >= sizeof(host))
        return 0;
    memcpy(host, tok, hl);
    host[hl] = '\0';
    long bits;
    uint8_t net[16];
    int fam = strchr(host, ':') ? AF_INET6 : AF_INET;
    int maxbits = fam == AF_INET ? 32 : 128;
    if (!colli_parse_long(slash + 1, 0, maxbits, &bits) || inet_pton(fam, host, net) != 1)
        return 0;
    if (addr->sa_family != fam)
        return 0;
    const uint8_t *a = fam == AF_INET
                           ? (const uint8_t *)&((const struct sockaddr_in *)addr)->sin_addr
                           : (const uint8_t *)&((const struct sockaddr_in6 *)addr)->sin6_addr;
    for (long i = 0; i < bits; i++) {
        int byte = (int)(i / 8), bit = 7 - (int)(i % 8);
        if (((a[byte] >> bit) & 1) != ((net[byte] >> bit) & 1))
            return 0;
    }
    return 1;
}

typedef struct {
    const char *name;
    const struct sockaddr *addr;
} netif_t;

/* One COLL_SOCKET_IFNAME entry: a CIDR network, or an interface name (prefix or exact). */
static bool netif_entry(char *tok, bool exact, void *arg)
{
    const netif_t *ni = arg;
    int c = cidr_match(tok, ni->addr);
    if (c >= 0)
        return c == 1;
    char *colon = strchr(tok, ':'); /* NCCL allows "eth0:port"; the port is ignored */
    if (colon)
        *colon = '\0';
    return exact ? strcmp(ni->name, tok) == 0 : strncmp(ni->name, tok, strlen(tok)) == 0;
}

bool colli_netif_match(const char *spec, const char *name, const struct sockaddr *addr)
{
    netif_t ni = {name, addr};
    return colli_spec_match(spec, netif_entry, &ni);
}

static bool usable(const struct ifaddrs *ifa, int family)
{
    if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP))
        return false;
    int f = ifa->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6)
        return false;
    if (family != AF_UNSPEC && f != family)
        return false;
    if (f == AF_INET6) {
        const struct in6_addr *a6 = &((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
        if (IN6_IS_ADDR_LINKLOCAL(a6))
            return false; /* needs a scope id; pin a global address instead */
    }
    return true;
}

static void take(const struct ifaddrs *ifa, int how, colli_netif_t *out)
{
    memset(out, 0, sizeof(*out));
    snprintf(out->name, sizeof(out->name), "%s", ifa->ifa_name);
    size_t len = ifa->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                     : sizeof(struct sockaddr_in6);
    memcpy(&out->addr, ifa->ifa_addr, len);
    out->prefix = colli_ifa_prefix(ifa);
    out->how = how;
}

int colli_netif_prefix_of(const struct sockaddr_storage *addr)
{
    size_t n = 0, k = 0;
    const uint8_t *want = colli_ip_bytes((const struct sockaddr *)addr, &n);
    struct ifaddrs *list = NULL;
    if (want == NULL || getifaddrs(&list) != 0)
        return 0;
    int bits = 0;
    for (const struct ifaddrs *ifa = list; ifa != NULL && bits == 0; ifa = ifa->ifa_next) {
        const uint8_t *a = ifa->ifa_addr != NULL && ifa->ifa_addr->sa_family == addr->ss_family
                               ? colli_ip_bytes(ifa->ifa_addr, &k)
                               : NULL;
        if (a != NULL && k == n && memcmp(a, want, n) == 0)
            bits = colli_ifa_prefix(ifa);
    }
    freeifaddrs(list);
    return bits;
}

coll_result_t colli_netif_select(const char *spec, int family, colli_netif_t *out)
{
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return COLLI_ERR(NET, COLL_ERR_SYSTEM, "getifaddrs failed: %s", strerror(errno));
    const struct ifaddrs *found = NULL, *lo = NULL;
    for (const struct ifaddrs *ifa = list; ifa && !found; ifa = ifa->ifa_next) {
        if (!usable(ifa, family))
            continue;
        if (spec != NULL && *spec != '\0') {
            if (colli_netif_match(spec, ifa->ifa_name, ifa->ifa_addr))
                found = ifa;
        } else if (ifa->ifa_flags & IFF_LOOPBACK) {
            if (!lo)
                lo = ifa;
        } else if (strncmp(ifa->ifa_name, "docker", 6) != 0 &&
                   strncmp(ifa->ifa_name, "virbr", 5) != 0) {
            found = ifa;
        }
    }
    if (!found && (spec == NULL || *spec == '\0'))
        found = lo;
    if (found) {
        take(found,
             spec == NULL || *spec == '\0' ? COLLI_NETIF_FIRST
             : strchr(spec, '/') != NULL   ? COLLI_NETIF_CIDR
                                           : COLLI_NETIF_NAME,
             out);
        freeifaddrs(list);
        return COLL_SUCCESS;
    }
    /* No match: list what this process has so the user can pick. */
    char have[1024] = "";
    size_t used = 0;
    for (const struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL ||
            (ifa->ifa_addr->sa_family != AF_INET && ifa->ifa_addr->sa_family != AF_INET6))
            continue;
        char a[INET6_ADDRSTRLEN] = "?";
        const void *src =
            ifa->ifa_addr->sa_family == AF_INET
                ? (const void *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr
                : (const void *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
        inet_ntop(ifa->ifa_addr->sa_family, src, a, sizeof(a));
        int n = snprintf(have + used, sizeof(have) - used, "%s%s %s%s", used ? ", " : "",
                         ifa->ifa_name, a, (ifa->ifa_flags & IFF_UP) ? "" : " (down)");
        if (n < 0 || (size_t)n >= sizeof(have) - used)
            break;
        used += (size_t)n;
    }
    freeifaddrs(list);
    return COLLI_ERR(NET, COLL_ERR_NETWORK,
                     "no network interface matches COLL_SOCKET_IFNAME=\"%s\"%s; this process has: "
                     "%s. Set COLL_SOCKET_IFNAME to one of these (prefix, =exact, ^exclude or "
                     "CIDR such as 10.0.0.0/24).",
                     spec ? spec : "",
                     family == AF_INET    ? " (AF_INET)"
                     : family == AF_INET6 ? " (AF_INET6)"
                                          : "",
                     have[0] ? have : "no interfaces with an address");
}

/* Is peer on the network of ifa (its address and netmask)? */
static bool same_subnet(const struct ifaddrs *ifa, const struct sockaddr *peer)
{
    const int f = ifa->ifa_addr->sa_family;
    if (ifa->ifa_netmask == NULL || peer->sa_family != f)
        return false;
    const size_t n = f == AF_INET ? 4 : 16;
    const uint8_t *a, *m, *p;
    if (f == AF_INET) {
        a = (const uint8_t *)&((const struct sockaddr_in *)ifa->ifa_addr)->sin_addr;
        m = (const uint8_t *)&((const struct sockaddr_in *)ifa->ifa_netmask)->sin_addr;
        p = (const uint8_t *)&((const struct sockaddr_in *)peer)->sin_addr;
    } else {
        a = (const uint8_t *)&((const struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr;
        m = (const uint8_t *)&((const struct sockaddr_in6 *)ifa->ifa_netmask)->sin6_addr;
        p = (const uint8_t *)&((const struct sockaddr_in6 *)peer)->sin6_addr;
    }
    bool any = false;
    for (size_t i = 0; i < n; i++) {
        if ((a[i] & m[i]) != (p[i] & m[i]))
            return false;
        any |= m[i] != 0;
    }
    return any; /* a /0 "network" says nothing */
}

coll_result_t colli_netif_select_toward(const char *spec, int family,
                                        const struct sockaddr_storage *toward, colli_netif_t *out)
{
    if ((spec != NULL && *spec != '\0') || toward == NULL ||
        (toward->ss_family != AF_INET && toward->ss_family != AF_INET6))
        return colli_netif_select(spec, family, out);
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return COLLI_ERR(NET, COLL_ERR_SYSTEM, "getifaddrs failed: %s", strerror(errno));
    const struct ifaddrs *found = NULL;
    for (const struct ifaddrs *ifa = list; ifa && !found; ifa = ifa->ifa_next)
        if (usable(ifa, family) && same_subnet(ifa, (const struct sockaddr *)toward))
            found = ifa;
    if (found == NULL) {
        freeifaddrs(list);
        return colli_netif_select(spec, family, out);
    }
    take(found, COLLI_NETIF_TOWARD, out);
    freeifaddrs(list);
    char a[80], r[80];
    colli_sockaddr_str(&out->addr, a, sizeof(a));
    colli_sockaddr_str(toward, r, sizeof(r));
    coll_info(INIT,
              "COLL_SOCKET_IFNAME is not set: %s (%s) chosen, the interface on the network of the "
              "bootstrap root %s",
              out->name, a, r);
    return COLL_SUCCESS;
}

int colli_netif_link_down(const char *name)
{
    if (name == NULL || name[0] == '\0')
        return -1;
    struct ifaddrs *list = NULL;
    if (getifaddrs(&list) != 0)
        return -1;
    int state = 1; /* gone counts as down */
    for (const struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        if (strcmp(ifa->ifa_name, name) != 0)
            continue;
        state = (ifa->ifa_flags & IFF_UP) && (ifa->ifa_flags & IFF_RUNNING) ? 0 : 1;
        if (state == 0)
            break;
    }
    freeifaddrs(list);
    return state;
}
