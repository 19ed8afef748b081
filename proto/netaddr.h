/* IP address arithmetic that libcoll and the agent share: an address's bytes, an interface's
 * prefix length, "same network" and a network's text. Needs nothing but libc. */
#ifndef COLLI_PROTO_NETADDR_H
#define COLLI_PROTO_NETADDR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

struct ifaddrs;

/* The bytes of an IPv4 or IPv6 address (n: 4 or 16), NULL for another family (or NULL sa). */
const uint8_t *colli_ip_bytes(const struct sockaddr *sa, size_t *n);

/* The prefix length of an interface address: the leading one bits of its netmask (0 without). */
int colli_ifa_prefix(const struct ifaddrs *ifa);

/* Does a hold b's address within its first prefix bits (the same network)? */
bool colli_net_same(const struct sockaddr_storage *a, const struct sockaddr_storage *b, int prefix);

/* "10.77.1.0/24": the network of addr with prefix bits ("?" for another family). */
void colli_net_str(const struct sockaddr_storage *addr, int prefix, char *buf, size_t len);

#endif /* COLLI_PROTO_NETADDR_H */
