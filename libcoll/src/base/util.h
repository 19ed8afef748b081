/* Small utilities: clock, randomness, SipHash, constant-time comparison, number parsing. */
#ifndef COLLI_UTIL_H
#define COLLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "coll.h"

double colli_now(void); /* monotonic seconds */
coll_result_t colli_random_bytes(void *buf, size_t len);
/* SipHash-2-4 keyed with a 16-byte key; 128-bit output variant writes 16 bytes. */
uint64_t colli_siphash64(const uint8_t key[16], const void *data, size_t len);
void colli_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16]);
/* Constant-time comparison. */
bool colli_mem_equal(const void *a, const void *b, size_t len);
/* "ip:port" of a socket address ("[v6]:port" for IPv6). */
void colli_sockaddr_str(const struct sockaddr_storage *sa, char *buf, size_t len);
/* Strictly parse a decimal integer within [min, max]. */
bool colli_parse_long(const char *s, long min, long max, long *out);

#endif
