/* Time, base64, files, JSON and interface helpers. */
#define _GNU_SOURCE
#include "agent.h"
#include "netaddr.h" /* proto/ */

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

int64_t agent_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t agent_remaining_ms(int64_t deadline_ms)
{
    int64_t r = deadline_ms - agent_now_ms();
    return r > 0 ? r : 0;
}

void agent_sleep_ms(int64_t ms)
{
    struct timespec ts;
    if (ms <= 0)
        return;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000;
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

int agent_random_bytes(unsigned char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = getrandom(buf + got, len - got, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        got += (size_t)n;
    }
    return 0;
}

static int b64val(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long agent_base64_decode(const char *in, unsigned char **out)
{
    size_t n = strlen(in);
    unsigned char *buf = malloc(n / 4 * 3 + 4);
    unsigned acc = 0;
    int bits = 0;
    long o = 0;
    if (!buf)
        return -1;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        int v;
        if (c == '=' || c == '\n' || c == '\r' || c == ' ')
            continue;
        v = b64val(c);
        if (v < 0) {
            free(buf);
            return -1;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf[o++] = (unsigned char)((acc >> bits) & 0xff);
        }
    }
    buf[o] = '\0';
    *out = buf;
    return o;
}

int agent_read_file(const char *path, char **data, size_t *len, size_t max)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t cap = 4096, n = 0;
    char *buf;
    if (fd < 0)
        return -1;
    buf = malloc(cap + 1);
    if (!buf) {
        close(fd);
        return -1;
    }
    for (;;) {
        ssize_t r;
        if (n == cap) {
            char *nb;
            if (cap >= max) {
                free(buf);
                close(fd);
                errno = EFBIG;
                return -1;
            }
            cap *= 2;
            nb = realloc(buf, cap + 1);
            if (!nb) {
                free(buf);
                close(fd);
                return -1;
            }
            buf = nb;
        }
        r = read(fd, buf + n, cap - n);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            free(buf);
            close(fd);
            return -1;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *data = buf;
    if (len)
        *len = n;
    return 0;
}

int agent_fatal(agent_condition_t *cond, const char *type, const char *fmt, ...)
{
    va_list ap;
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "%s", type);
    va_start(ap, fmt);
    vsnprintf(cond->message, sizeof(cond->message), fmt, ap);
    va_end(ap);
    return -1;
}

int agent_fmt(char *buf, size_t len, const char *fmt, ...)
{
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return (n < 0 || (size_t)n >= len) ? -1 : n;
}

void agent_json_str(const json_t *obj, const char *key, char *buf, size_t len)
{
    const json_t *v = json_is_object(obj) ? json_object_get(obj, key) : NULL;
    if (len == 0)
        return;
    buf[0] = '\0';
    if (json_is_string(v))
        snprintf(buf, len, "%s", json_string_value(v));
}

json_t *agent_json_path(const json_t *root, const char *dotted)
{
    char key[256];
    const char *p = dotted;
    json_t *cur = (json_t *)root;
    while (cur && *p) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        if (n >= sizeof(key) || !json_is_object(cur))
            return NULL;
        memcpy(key, p, n);
        key[n] = '\0';
        cur = json_object_get(cur, key);
        p = dot ? dot + 1 : p + n;
    }
    return cur;
}

static int addr_string(const struct sockaddr *sa, char *buf, size_t len)
{
    if (sa->sa_family == AF_INET)
        return inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, buf, (socklen_t)len)
                   ? 0
                   : -1;
    if (sa->sa_family == AF_INET6)
        return inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, buf,
                         (socklen_t)len)
                   ? 0
                   : -1;
    return -1;
}

void agent_list_interfaces(char *buf, size_t len)
{
    struct ifaddrs *ifa, *i;
    size_t off = 0;
    buf[0] = '\0';
    if (getifaddrs(&ifa) != 0) {
        snprintf(buf, len, "(getifaddrs failed: %s)", strerror(errno));
        return;
    }
    for (i = ifa; i; i = i->ifa_next) {
        char a[INET6_ADDRSTRLEN];
        int n;
        if (!i->ifa_addr || addr_string(i->ifa_addr, a, sizeof(a)) != 0)
            continue;
        n = snprintf(buf + off, len - off, "%s%s %s", off ? ", " : "", i->ifa_name, a);
        if (n < 0 || (size_t)n >= len - off)
            break;
        off += (size_t)n;
    }
    freeifaddrs(ifa);
    if (!buf[0])
        snprintf(buf, len, "(none)");
}

int agent_check_interface(const char *ifname, const char *address, char *found, size_t found_len)
{
    struct ifaddrs *ifa, *i;
    int exists = 0, has_addr = 0;
    char first4[INET6_ADDRSTRLEN] = "", first6[INET6_ADDRSTRLEN] = "";
    if (getifaddrs(&ifa) != 0)
        return 1;
    for (i = ifa; i; i = i->ifa_next) {
        char a[INET6_ADDRSTRLEN];
        if (strcmp(i->ifa_name, ifname) != 0)
            continue;
        exists = 1;
        if (!i->ifa_addr || addr_string(i->ifa_addr, a, sizeof(a)) != 0)
            continue;
        if (i->ifa_addr->sa_family == AF_INET && !first4[0])
            snprintf(first4, sizeof(first4), "%s", a);
        if (i->ifa_addr->sa_family == AF_INET6 && !first6[0])
            snprintf(first6, sizeof(first6), "%s", a);
        if (address && address[0] && strcmp(a, address) == 0)
            has_addr = 1;
    }
    freeifaddrs(ifa);
    if (!exists)
        return 1;
    if (address && address[0])
        return has_addr ? 0 : 2;
    if (!first4[0] && !first6[0])
        return 2;
    if (found)
        snprintf(found, found_len, "%s", first4[0] ? first4 : first6);
    return 0;
}

int agent_interface_for_address(const char *address, char *ifname, size_t len)
{
    struct ifaddrs *ifa, *i;
    int rc = -1;
    if (getifaddrs(&ifa) != 0)
        return -1;
    for (i = ifa; i; i = i->ifa_next) {
        char a[INET6_ADDRSTRLEN];
        if (!i->ifa_addr || addr_string(i->ifa_addr, a, sizeof(a)) != 0)
            continue;
        if (strcmp(a, address) == 0) {
            snprintf(ifname, len, "%s", i->ifa_name);
            rc = 0;
            break;
        }
    }
    freeifaddrs(ifa);
    return rc;
}

/* An IP address in text, into sa; 0 when it is one. */
static int parse_ip(const char *text, struct sockaddr_storage *sa)
{
    memset(sa, 0, sizeof(*sa));
    struct sockaddr_in *a4 = (struct sockaddr_in *)sa;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)sa;
    if (inet_pton(AF_INET, text, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        return 0;
    }
    if (inet_pton(AF_INET6, text, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        return 0;
    }
    return -1;
}

/* The address of interface entry i, as a sockaddr_storage. */
static void ifa_addr(const struct ifaddrs *i, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof(*out));
    memcpy(out, i->ifa_addr,
           i->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                             : sizeof(struct sockaddr_in6));
}

int agent_root_network(const struct ifaddrs *ifa, const char *address, const char *root_host,
                       char *msg, size_t len)
{
    struct sockaddr_storage root, other_sa;
    const struct ifaddrs *mine = NULL, *other = NULL;
    msg[0] = '\0';
    if (address == NULL || !address[0] || parse_ip(root_host, &root) != 0)
        return 0;
    for (const struct ifaddrs *i = ifa; i != NULL; i = i->ifa_next) {
        char a[INET6_ADDRSTRLEN];
        if (i->ifa_addr == NULL || addr_string(i->ifa_addr, a, sizeof(a)) != 0)
            continue;
        struct sockaddr_storage sa;
        ifa_addr(i, &sa);
        const bool on_root_net = colli_net_same(&sa, &root, colli_ifa_prefix(i));
        if (strcmp(a, address) == 0) {
            if (on_root_net)
                return 0;
            mine = i;
        } else if (other == NULL && on_root_net) {
            other = i;
            other_sa = sa;
        }
    }
    if (mine == NULL)
        return 0; /* the interface checks name that */
    const int mp = colli_ifa_prefix(mine);
    if (other != NULL) {
        char oa[INET6_ADDRSTRLEN] = "?", onet[INET6_ADDRSTRLEN + 8];
        (void)addr_string(other->ifa_addr, oa, sizeof(oa));
        const int op = colli_ifa_prefix(other);
        colli_net_str(&other_sa, op, onet, sizeof(onet));
        snprintf(msg, len,
                 "the pinned interface %s (%s/%d) is not on the network of the bootstrap root %s, "
                 "but this host's %s (%s/%d) is: ranks on the root's network cannot reach this "
                 "one unless the two networks route to each other (the bootstrap checks and "
                 "names any pair that cannot); if they do not, pin %s or its network %s for this "
                 "rank",
                 mine->ifa_name, address, mp, root_host, other->ifa_name, oa, op, other->ifa_name,
                 onet);
        return 1;
    }
    snprintf(msg, len,
             "the pinned interface %s (%s/%d) is not on the network of the bootstrap root %s and "
             "no interface of this host is: the root and the ranks on its network are reached "
             "through a route",
             mine->ifa_name, address, mp, root_host);
    return 2;
}
