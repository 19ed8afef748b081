/* Member records: this process's record and its wire form. */
#include <arpa/inet.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/member.h"

static void copy_str(char *dst, size_t dlen, const char *src, size_t slen)
{
    size_t n = strnlen(src, slen);
    if (n >= dlen)
        n = dlen - 1;
    memcpy(dst, src, n);
    dst[n] = '\0';
}

void colli_member_to_wire(const colli_member_t *m, colli_wire_member_t *w)
{
    memset(w, 0, sizeof(*w));
    w->proto = m->proto;
    copy_str(w->version, sizeof(w->version), m->version, sizeof(m->version));
    w->rank = m->rank;
    w->nranks = m->nranks;
    w->pid = m->pid;
    copy_str(w->hostname, sizeof(w->hostname), m->hostname, sizeof(m->hostname));
    copy_str(w->host_id, sizeof(w->host_id), m->host_id, sizeof(m->host_id));
    copy_str(w->ifname, sizeof(w->ifname), m->ifname, sizeof(m->ifname));
    w->family = m->addr.ss_family;
    if (m->addr.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&m->addr;
        w->port = ntohs(in->sin_port);
        memcpy(w->addr, &in->sin_addr, 4);
    } else if (m->addr.ss_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&m->addr;
        w->port = ntohs(in6->sin6_port);
        memcpy(w->addr, &in6->sin6_addr, 16);
    }
    w->prefix = (uint8_t)(m->prefix > 0 && m->prefix <= 128 ? m->prefix : 0);
    w->how = (uint8_t)(m->how > 0 && m->how < 256 ? m->how : 0);
    w->nstreams = m->nstreams;
    w->chunk_size = m->chunk_size;
    w->small_threshold = m->small_threshold;
    w->direct_min = m->direct_min;
    w->caps = m->caps;
    copy_str(w->pod, sizeof(w->pod), m->pod, sizeof(m->pod));
    copy_str(w->node, sizeof(w->node), m->node, sizeof(m->node));
    copy_str(w->group, sizeof(w->group), m->group, sizeof(m->group));
    w->cuda_runtime = m->cuda_runtime;
    w->cuda_driver = m->cuda_driver;
    w->local_rank = m->local_rank;
    w->local_size = (uint16_t)(m->local_size > 0 && m->local_size < 65536 ? m->local_size : 0);
    w->gpu = (int16_t)(m->gpu >= -1 && m->gpu < 32768 ? m->gpu : -1);
    w->hier_min = m->hier_min;
}

coll_result_t colli_member_from_wire(const colli_wire_member_t *w, colli_member_t *m)
{
    memset(m, 0, sizeof(*m));
    m->proto = w->proto;
    copy_str(m->version, sizeof(m->version), w->version, sizeof(w->version));
    m->rank = w->rank;
    m->nranks = w->nranks;
    m->pid = w->pid;
    copy_str(m->hostname, sizeof(m->hostname), w->hostname, sizeof(w->hostname));
    copy_str(m->host_id, sizeof(m->host_id), w->host_id, sizeof(w->host_id));
    copy_str(m->ifname, sizeof(m->ifname), w->ifname, sizeof(w->ifname));
    copy_str(m->pod, sizeof(m->pod), w->pod, sizeof(w->pod));
    copy_str(m->node, sizeof(m->node), w->node, sizeof(w->node));
    copy_str(m->group, sizeof(m->group), w->group, sizeof(w->group));
    m->cuda_runtime = w->cuda_runtime;
    m->cuda_driver = w->cuda_driver;
    m->local_size = w->local_size;
    m->local_rank = m->local_size > 0 && w->local_rank >= 0 && w->local_rank < m->local_size
                        ? w->local_rank
                        : 0;
    m->gpu = m->local_size > 0 && w->gpu >= -1 ? w->gpu : -1;
    m->hier_min = w->hier_min;
    m->prefix = w->prefix <= (w->family == AF_INET ? 32 : 128) ? w->prefix : 0;
    m->how = w->how;
    if (w->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&m->addr;
        in->sin_family = AF_INET;
        in->sin_port = htons(w->port);
        memcpy(&in->sin_addr, w->addr, 4);
    } else if (w->family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&m->addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(w->port);
        memcpy(&in6->sin6_addr, w->addr, 16);
    } else {
        return COLLI_ERR(BOOT, COLL_ERR_INTERNAL,
                         "member record of rank %d has no usable address (family %u)", w->rank,
                         w->family);
    }
    if (w->nstreams < 1 || w->nstreams > 16 || w->chunk_size < 4096 || w->chunk_size > (64u << 20))
        return COLLI_ERR(BOOT, COLL_ERR_INTERNAL,
                         "member record of rank %d carries invalid tuning (streams %u, chunk %llu)",
                         w->rank, w->nstreams, (unsigned long long)w->chunk_size);
    m->nstreams = w->nstreams;
    m->chunk_size = w->chunk_size;
    m->small_threshold = w->small_threshold;
    m->direct_min = w->direct_min;
    m->caps = w->caps;
    return COLL_SUCCESS;
}

static void read_small_file(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, len - 1);
    close(fd);
    if (n <= 0) {
        buf[0] = '\0';
        return;
    }
    buf[n] = '\0';
    char *nl = strchr(buf, '\n');
    if (nl)
        *nl = '\0';
}

void colli_member_fill_host(colli_member_t *m)
{
    if (gethostname(m->hostname, sizeof(m->hostname) - 1) != 0)
        snprintf(m->hostname, sizeof(m->hostname), "unknown-host");
    char boot[64], ipc[64] = "";
    read_small_file("/proc/sys/kernel/random/boot_id", boot, sizeof(boot));
    struct stat st;
    if (stat("/proc/self/ns/ipc", &st) == 0)
        snprintf(ipc, sizeof(ipc), "%llu", (unsigned long long)st.st_ino);
    snprintf(m->host_id, sizeof(m->host_id), "%.40s/%.36s/%.16s", m->hostname, boot, ipc);
    m->pid = (int)getpid();
}
