/* Small utilities: clock, randomness, SipHash-2-4 (keyed MAC for tags and handshakes), names. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/error.h"
#include "base/util.h"
#include "base/wire.h"

double colli_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

coll_result_t colli_random_bytes(void *buf, size_t len)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = getrandom(p, len, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "getrandom failed: %s", strerror(errno));
        }
        p += n;
        len -= (size_t)n;
    }
    return COLL_SUCCESS;
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

static uint64_t load64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v; /* little-endian host (checked in colli.h) */
}

static void siphash(const uint8_t key[16], const void *data, size_t len, uint8_t *out,
                    size_t outlen)
{
    const uint8_t *in = data;
    uint64_t k0 = load64(key), k1 = load64(key + 8);
    uint64_t v0 = 0x736f6d6570736575ULL ^ k0, v1 = 0x646f72616e646f6dULL ^ k1;
    uint64_t v2 = 0x6c7967656e657261ULL ^ k0, v3 = 0x7465646279746573ULL ^ k1;
    if (outlen == 16)
        v1 ^= 0xee;
    const uint8_t *end = in + len - (len % 8);
    for (; in != end; in += 8) {
        uint64_t m = load64(in);
        v3 ^= m;
        SIPROUND;
        SIPROUND;
        v0 ^= m;
    }
    uint64_t b = ((uint64_t)len) << 56;
    switch (len & 7) {
    case 7:
        b |= ((uint64_t)in[6]) << 48; /* fall through */
    case 6:
        b |= ((uint64_t)in[5]) << 40; /* fall through */
    case 5:
        b |= ((uint64_t)in[4]) << 32; /* fall through */
    case 4:
        b |= ((uint64_t)in[3]) << 24; /* fall through */
    case 3:
        b |= ((uint64_t)in[2]) << 16; /* fall through */
    case 2:
        b |= ((uint64_t)in[1]) << 8; /* fall through */
    case 1:
        b |= ((uint64_t)in[0]);
        break;
    default:
        break;
    }
    v3 ^= b;
    SIPROUND;
    SIPROUND;
    v0 ^= b;
    v2 ^= (outlen == 16) ? 0xee : 0xff;
    for (int i = 0; i < 4; i++)
        SIPROUND;
    uint64_t h = v0 ^ v1 ^ v2 ^ v3;
    memcpy(out, &h, 8);
    if (outlen == 8)
        return;
    v1 ^= 0xdd;
    for (int i = 0; i < 4; i++)
        SIPROUND;
    h = v0 ^ v1 ^ v2 ^ v3;
    memcpy(out + 8, &h, 8);
}

uint64_t colli_siphash64(const uint8_t key[16], const void *data, size_t len)
{
    uint8_t out[8];
    siphash(key, data, len, out, 8);
    return load64(out);
}

void colli_siphash128(const uint8_t key[16], const void *data, size_t len, uint8_t out[16])
{
    siphash(key, data, len, out, 16);
}

bool colli_mem_equal(const void *a, const void *b, size_t len)
{
    const volatile uint8_t *x = a, *y = b;
    uint8_t d = 0;
    for (size_t i = 0; i < len; i++)
        d |= (uint8_t)(x[i] ^ y[i]);
    return d == 0;
}

void colli_sockaddr_str(const struct sockaddr_storage *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";
    if (sa->ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "(no address)");
    }
}

bool colli_parse_long(const char *s, long min, long max, long *out)
{
    if (s == NULL || *s == '\0')
        return false;
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

size_t coll_datatype_size(coll_datatype_t dt)
{
    static const size_t sizes[COLL_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};
    if ((int)dt < 0 || dt >= COLL_NUM_DATATYPES)
        return 0;
    return sizes[dt];
}

const char *coll_datatype_name(coll_datatype_t dt)
{
    static const char *names[COLL_NUM_DATATYPES] = {
        "int8",    "uint8",    "int32",   "uint32",  "int64",       "uint64",
        "float16", "bfloat16", "float32", "float64", "float8_e4m3", "float8_e5m2"};
    if ((int)dt < 0 || dt >= COLL_NUM_DATATYPES)
        return "invalid";
    return names[dt];
}

const char *coll_op_name(coll_op_t op)
{
    static const char *names[COLL_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};
    if ((int)op < 0 || op >= COLL_NUM_OPS)
        return "invalid";
    return names[op];
}
