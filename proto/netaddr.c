/* IP address arithmetic shared by libcoll and the agent (netaddr.h). */
#include "netaddr.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <stdio.h>

const uint8_t *colli_ip_bytes(const struct sockaddr *sa, size_t *n)
{
    if (sa == NULL)
        return NULL;
    *n = sa->sa_family == AF_INET ? 4 : 16;
    if (sa->sa_family == AF_INET)
        return (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (sa->sa_family == AF_INET6)
        return (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
    return NULL;
}

int colli_ifa_prefix(const struct ifaddrs *ifa)
{
    size_t n = 0;
    const uint8_t *m = ifa->ifa_addr != NULL && ifa->ifa_netmask != NULL &&
                               ifa->ifa_netmask->sa_family == ifa->ifa_addr->sa_family
                           ? colli_ip_bytes(ifa->ifa_netmask, &n)
                           : NULL;
    int bits = 0;
    for (size_t i = 0; m != NULL && i < n; i++)
        for (int b = 7; b >= 0 && ((m[i] >> b) & 1); b--)
            bits++;
    return bits;
}

bool colli_net_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b, int prefix)
{
    size_t na = 0, nb = 0;
    const uint8_t *x = colli_ip_bytes((const struct sockaddr *)a, &na);
    const uint8_t *y = colli_ip_bytes((const struct sockaddr *)b, &nb);
    if (x == NULL || y == NULL || na != nb || a->ss_family != b->ss_family || prefix <= 0 ||
        (size_t)prefix > na * 8)
        return false;
    for (int i = 0; i < prefix; i++) {
        const int byte = i / 8, bit = 7 - i % 8;
        if (((x[byte] >> bit) & 1) != ((y[byte] >> bit) & 1))
            return false;
    }
    return true;
}

void colli_net_str(const struct sockaddr_storage *addr, int prefix, char *buf, size_t len)
{
    size_t n = 0;
    const uint8_t *x = colli_ip_bytes((const struct sockaddr *)addr, &n);
    uint8_t net[16] = {0};
    char a[INET6_ADDRSTRLEN] = "?";
    if (x == NULL || prefix < 0 || (size_t)prefix > n * 8) {
        snprintf(buf, len, "?");
        return;
    }
    for (int i = 0; i < prefix; i++)
        net[i / 8] |= (uint8_t)(x[i / 8] & (1u << (7 - i % 8)));
    inet_ntop(addr->ss_family, net, a, sizeof(a));
    snprintf(buf, len, "%s/%d", a, prefix);
}
