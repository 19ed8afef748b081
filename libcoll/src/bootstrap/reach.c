/* The root's network check, before any data connection: can the ranks reach each other's data
 * addresses? Where every rank's address is on one network (address and prefix length, as its
 * interface has it), nothing is done: the usual job costs nothing. Where they are on several (a
 * routed fabric, or a host that took the wrong interface), the ranks of the network most ranks
 * share probe one address of each other host (a TCP connect from their own data address, a few
 * seconds at most); the root asks them over their open bootstrap connections and collects the
 * answers. An address none of them can reach fails the job at once, on every rank (the one at
 * fault included: it is still connected to the root), naming its rank, host, interface, address
 * and network, the job's network and the CIDR pin that fixes it. A routed fabric whose hosts
 * reach each other passes. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/error.h"
#include "base/handshake.h"
#include "base/netif.h"
#include "base/sockutil.h"
#include "base/util.h"
#include "bootstrap/bootstrap.h"

/* Unknown, not probed (no prober on another host, or its prober did not answer). */
#define REACH_UNKNOWN     (-1)
#define REACH_PER_PROBER  64   /* addresses one rank probes (as many sockets at once) */
#define REACH_MAX_TARGETS 1024 /* addresses probed in all */

static void rec_addr(const colli_wire_member_t *w, struct sockaddr_storage *a)
{
    memset(a, 0, sizeof(*a));
    if (w->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)a;
        in->sin_family = AF_INET;
        in->sin_port = htons(w->port);
        memcpy(&in->sin_addr, w->addr, 4);
    } else if (w->family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)a;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(w->port);
        memcpy(&in6->sin6_addr, w->addr, 16);
    }
}

static bool rec_known(const colli_wire_member_t *w)
{
    return (w->family == AF_INET && w->prefix > 0 && w->prefix <= 32) ||
           (w->family == AF_INET6 && w->prefix > 0 && w->prefix <= 128);
}

static bool same_ip(const colli_wire_member_t *a, const colli_wire_member_t *b)
{
    return a->family == b->family && memcmp(a->addr, b->addr, a->family == AF_INET ? 4 : 16) == 0;
}

static void result_mac(const uint8_t key[16], const colli_wire_probe_result_t *res, uint32_t n,
                       uint8_t mac[16])
{
    uint8_t digest[16] = {0};
    colli_digest_step(key, digest, "kc-prob", 8);
    colli_digest_step(key, digest, &n, sizeof(n));
    for (uint32_t i = 0; i < n; i++)
        colli_digest_step(key, digest, &res[i], sizeof(res[i]));
    memcpy(mac, digest, 16);
}

static void entries_digest(const uint8_t secret[16], const colli_wire_probe_t *e, uint32_t n,
                           uint8_t digest[16])
{
    memset(digest, 0, 16);
    for (uint32_t i = 0; i < n; i++)
        colli_digest_step(secret, digest, &e[i], sizeof(e[i]));
}

/* ---- the rank's side ---- */

/* A probe's outcome: 0 reached (refused too: the host answered), the errno when the network
 * does not reach the address, negative when this rank could not tell (out of descriptors, no
 * local address to bind, ...): the root then leaves it to the data connections. */
static int verdict(int err)
{
    switch (err) {
    case 0:
    case ECONNREFUSED:
        return 0;
    case ENETUNREACH:
    case EHOSTUNREACH:
    case EHOSTDOWN:
    case ETIMEDOUT:
    case EACCES:
    case EPERM:
        return err;
    default:
        return err > 0 ? -err : -EIO;
    }
}

int colli_reach_answer(int fd, const colli_root_reply_t *h, const uint8_t key[16],
                       const uint8_t secret[16], const struct sockaddr_storage *from, int rank,
                       double deadline)
{
    const uint32_t n = h->nranks;
    if (n == 0 || n > COLLI_PROBE_MAX || h->msg_len != 0) {
        errno = EPROTO;
        return COLLI_IO_ERR;
    }
    colli_wire_probe_t *e = calloc(n, sizeof(*e));
    colli_wire_probe_result_t *res = calloc(n, sizeof(*res));
    struct pollfd *pfd = calloc(n, sizeof(*pfd));
    struct sockaddr_storage *to = calloc(n, sizeof(*to));
    int io =
        e && res && pfd && to ? colli_sock_read_all(fd, e, n * sizeof(*e), deadline) : COLLI_IO_ERR;
    uint8_t digest[16], mac[16];
    if (io == COLLI_IO_OK) {
        entries_digest(secret, e, n, digest);
        colli_reply_mac(key, h, "", digest, mac);
        if (!colli_mem_equal(mac, h->mac, sizeof(mac))) {
            io = COLLI_HS_BADAUTH;
            goto out;
        }
        /* every connect at once, from this rank's data address as its data connections go */
        for (uint32_t i = 0; i < n; i++) {
            colli_wire_member_t w = {.family = e[i].family, .port = e[i].port};
            memcpy(w.addr, e[i].addr, sizeof(w.addr));
            rec_addr(&w, &to[i]);
            res[i].rank = e[i].rank;
            pfd[i] = (struct pollfd){.fd = -1, .events = POLLOUT};
            if (to[i].ss_family == AF_UNSPEC)
                res[i].err = EAFNOSUPPORT;
            else if (colli_sock_connect_start(&to[i], from, &pfd[i].fd) != COLLI_IO_OK)
                res[i].err = verdict(errno);
            else
                res[i].err = ETIMEDOUT;
        }
        const double end = colli_now() + COLLI_PROBE_SECS;
        for (;;) {
            uint32_t waiting = 0;
            for (uint32_t i = 0; i < n; i++)
                waiting += pfd[i].fd >= 0;
            const double left = end - colli_now();
            if (waiting == 0 || left <= 0)
                break;
            if (poll(pfd, n, (int)(left * 1000) + 1) < 0 && errno != EINTR)
                break;
            for (uint32_t i = 0; i < n; i++) {
                if (pfd[i].fd < 0 || pfd[i].revents == 0)
                    continue;
                int err = 0;
                socklen_t sl = sizeof(err);
                if (getsockopt(pfd[i].fd, SOL_SOCKET, SO_ERROR, &err, &sl) != 0)
                    err = errno;
                res[i].err = verdict(err);
                close(pfd[i].fd);
                pfd[i].fd = -1;
            }
        }
        for (uint32_t i = 0; i < n; i++) {
            if (pfd[i].fd >= 0)
                close(pfd[i].fd);
            char a[80];
            colli_sockaddr_str(&to[i], a, sizeof(a));
            coll_info(INIT,
                      "rank %d: the bootstrap root asked whether rank %d at %s is reachable: %s",
                      rank, e[i].rank, a,
                      res[i].err == 0           ? "yes"
                      : res[i].err == ETIMEDOUT ? "no answer within the probe's deadline"
                                                : strerror(res[i].err));
        }
        io = colli_sock_write_all(fd, res, n * sizeof(*res), deadline);
        result_mac(key, res, n, mac);
        if (io == COLLI_IO_OK)
            io = colli_sock_write_all(fd, mac, sizeof(mac), deadline);
    }
out:
    free(e);
    free(res);
    free(pfd);
    free(to);
    return io;
}

/* ---- the root's side ---- */

typedef struct {
    const colli_reach_rank_t *ranks;
    int n;
    int *net;     /* network index of each rank, -1 unknown */
    int *prober;  /* the rank that probes it, -1 none */
    int *same_as; /* an earlier rank of the same address (probed once), -1 none */
    int *err;     /* REACH_UNKNOWN, 0 reached, else errno */
    int *mains;   /* the ranks of the main network */
    int *load;    /* entries each prober was given */
    int *targets; /* the ranks probed (REACH_MAX_TARGETS at most) */
    int nnets, main, main_count;
    struct sockaddr_storage main_addr;
    int main_prefix;
} plan_t;

/* The plan's arrays in buf (PLAN_INTS(n) ints); returns the per-network counts among them. */
#define PLAN_INTS(n) ((size_t)(n)*7 + REACH_MAX_TARGETS)
static int *plan_arrays(plan_t *p, int *buf)
{
    const int n = p->n;
    p->net = buf;
    p->prober = buf + n;
    p->same_as = buf + 2 * n;
    p->err = buf + 3 * n;
    p->mains = buf + 5 * n;
    p->load = buf + 6 * n;
    p->targets = buf + 7 * n;
    return buf + 4 * n;
}

/* Group the ranks by network; false when they share one (or say too little to tell). */
static bool group(plan_t *p, const struct sockaddr_storage *root, int *count)
{
    for (int i = 0; i < p->n; i++) {
        const colli_wire_member_t *w = p->ranks[i].rec;
        p->net[i] = -1;
        if (!rec_known(w))
            continue;
        struct sockaddr_storage a;
        rec_addr(w, &a);
        for (int j = 0; j < i && p->net[i] < 0; j++) {
            const colli_wire_member_t *o = p->ranks[j].rec;
            struct sockaddr_storage b;
            rec_addr(o, &b);
            if (p->net[j] >= 0 && o->prefix == w->prefix && colli_net_same(&a, &b, w->prefix))
                p->net[i] = p->net[j];
        }
        if (p->net[i] < 0)
            p->net[i] = p->nnets++;
        count[p->net[i]]++;
    }
    if (p->nnets < 2)
        return false;
    /* the job's network: most ranks; on a tie the root's, then the lowest rank's */
    p->main = -1;
    for (int i = 0; i < p->n; i++) {
        const int k = p->net[i];
        if (k < 0)
            continue;
        struct sockaddr_storage a;
        rec_addr(p->ranks[i].rec, &a);
        const bool has_root = colli_net_same(&a, root, p->ranks[i].rec->prefix);
        if (p->main < 0 || count[k] > p->main_count ||
            (count[k] == p->main_count && has_root &&
             !colli_net_same(&p->main_addr, root, p->main_prefix))) {
            p->main = k;
            p->main_count = count[k];
            p->main_addr = a;
            p->main_prefix = p->ranks[i].rec->prefix;
        }
    }
    return true;
}

/* Each address off the job's network gets a prober on it, on another host (round robin), at
 * most REACH_PER_PROBER each and REACH_MAX_TARGETS in all (a fabric of thousands of per-node
 * subnets is sampled; what is not probed is left to the data connections). */
static int assign(plan_t *p)
{
    int next = 0, probes = 0, nmains = 0;
    for (int i = 0; i < p->n; i++) {
        p->load[i] = 0;
        if (p->net[i] == p->main)
            p->mains[nmains++] = i;
    }
    for (int j = 0; j < p->n; j++) {
        p->prober[j] = p->same_as[j] = -1;
        p->err[j] = REACH_UNKNOWN;
        if (p->net[j] < 0 || p->net[j] == p->main)
            continue;
        const colli_wire_member_t *t = p->ranks[j].rec;
        for (int k = 0; k < probes && p->same_as[j] < 0; k++)
            if (same_ip(p->ranks[p->targets[k]].rec, t))
                p->same_as[j] = p->targets[k];
        if (p->same_as[j] >= 0 || probes == REACH_MAX_TARGETS)
            continue;
        for (int tries = 0; tries < nmains; tries++) {
            const int i = p->mains[(next + tries) % nmains];
            const colli_wire_member_t *w = p->ranks[i].rec;
            if (p->load[i] >= REACH_PER_PROBER || same_ip(w, t) ||
                strncmp(w->host_id, t->host_id, sizeof(w->host_id)) == 0)
                continue;
            p->prober[j] = i;
            p->load[i]++;
            next = (next + tries + 1) % nmains;
            p->targets[probes++] = j;
            break;
        }
    }
    return probes;
}

/* Send prober i its entries; false when it cannot be asked. */
static bool ask(const plan_t *p, int i, const uint8_t secret[16], uint32_t *count)
{
    uint32_t n = 0;
    for (int j = 0; j < p->n; j++)
        n += p->prober[j] == i;
    *count = n;
    if (n == 0)
        return false;
    colli_wire_probe_t *e = calloc(n, sizeof(*e));
    if (e == NULL)
        return false;
    uint32_t k = 0;
    for (int j = 0; j < p->n && k < n; j++) {
        if (p->prober[j] != i)
            continue;
        const colli_wire_member_t *w = p->ranks[j].rec;
        e[k] = (colli_wire_probe_t){.rank = w->rank, .family = w->family, .port = w->port};
        memcpy(e[k].addr, w->addr, sizeof(e[k].addr));
        k++;
    }
    colli_root_reply_t h = {.magic = COLLI_FRAME_MAGIC, .status = COLLI_ROOT_PROBE, .nranks = n};
    uint8_t digest[16];
    entries_digest(secret, e, n, digest);
    colli_reply_mac(p->ranks[i].key, &h, "", digest, h.mac);
    const double dl = colli_now() + 2.0;
    int io = colli_sock_write_all(p->ranks[i].fd, &h, sizeof(h), dl);
    if (io == COLLI_IO_OK)
        io = colli_sock_write_all(p->ranks[i].fd, e, n * sizeof(*e), dl);
    free(e);
    return io == COLLI_IO_OK;
}

/* Read prober i's n answers (until deadline) into p->err. */
static void collect(plan_t *p, int i, uint32_t n, double deadline)
{
    colli_wire_probe_result_t *res = calloc(n, sizeof(*res));
    uint8_t mac[16], want[16];
    if (res == NULL)
        return;
    int io = colli_sock_read_all(p->ranks[i].fd, res, n * sizeof(*res), deadline);
    if (io == COLLI_IO_OK)
        io = colli_sock_read_all(p->ranks[i].fd, mac, sizeof(mac), deadline);
    result_mac(p->ranks[i].key, res, n, want);
    if (io != COLLI_IO_OK || !colli_mem_equal(mac, want, sizeof(mac))) {
        coll_warn(BOOT, "bootstrap root: rank %d did not answer its reachability probes: %s", i,
                  io != COLLI_IO_OK ? colli_io_str(io, errno) : "failed authentication");
        free(res);
        return;
    }
    uint32_t k = 0;
    for (int j = 0; j < p->n && k < n; j++)
        if (p->prober[j] == i) {
            if (res[k].rank == p->ranks[j].rec->rank)
                p->err[j] = res[k].err >= 0 ? res[k].err : REACH_UNKNOWN;
            k++;
        }
    free(res);
}

static const char *how_str(int how)
{
    switch (how) {
    case COLLI_NETIF_FIRST:
        return "its first interface, as nothing pins one";
    case COLLI_NETIF_TOWARD:
        return "the interface on the bootstrap root's network";
    case COLLI_NETIF_NAME:
        return "chosen by an interface-name pin";
    case COLLI_NETIF_CIDR:
        return "chosen by a CIDR pin";
    default:
        return "its interface choice not recorded";
    }
}

static void describe(const plan_t *p, const struct sockaddr_storage *root, int root_prefix,
                     char *msg, size_t len)
{
    int bad = -1, nbad = 0;
    for (int j = 0; j < p->n; j++) {
        const int e = p->same_as[j] >= 0 ? p->err[p->same_as[j]] : p->err[j];
        if (e > 0) {
            nbad++;
            if (bad < 0)
                bad = j;
        }
    }
    const colli_wire_member_t *t = p->ranks[bad].rec;
    const int src = p->same_as[bad] >= 0 ? p->same_as[bad] : bad;
    const colli_wire_member_t *pr = p->ranks[p->prober[src]].rec;
    struct sockaddr_storage ta, pa;
    rec_addr(t, &ta);
    rec_addr(pr, &pa);
    char tas[80], tnet[64], pas[INET6_ADDRSTRLEN] = "?", mnet[64], ras[80] = "?", rnet[64];
    colli_sockaddr_str(&ta, tas, sizeof(tas));
    colli_net_str(&ta, t->prefix, tnet, sizeof(tnet));
    inet_ntop(pr->family, pr->addr, pas, sizeof(pas));
    colli_net_str(&p->main_addr, p->main_prefix, mnet, sizeof(mnet));
    if (root->ss_family == AF_INET || root->ss_family == AF_INET6)
        inet_ntop(root->ss_family,
                  root->ss_family == AF_INET
                      ? (const void *)&((const struct sockaddr_in *)root)->sin_addr
                      : (const void *)&((const struct sockaddr_in6 *)root)->sin6_addr,
                  ras, sizeof(ras));
    const int e = p->err[src];
    char why[160];
    if (e == ETIMEDOUT)
        snprintf(why, sizeof(why), "no answer within %.0f s", COLLI_PROBE_SECS);
    else
        snprintf(why, sizeof(why), "%s", strerror(e));
    size_t used = (size_t)snprintf(
        msg, len,
        "rank %d (pid %d on %.64s) cannot be reached by the other ranks: its data address %s on "
        "%.32s (network %s, %s) does not answer rank %d (%s on %.64s): %s. ",
        t->rank, t->pid, t->hostname, tas, t->ifname, tnet, how_str(t->how), pr->rank, pas,
        pr->hostname, why);
    if (used < len && root_prefix > 0 && colli_net_same(root, &p->main_addr, p->main_prefix))
        used += (size_t)snprintf(msg + used, len - used,
                                 "The bootstrap root (%s) and %d of %d ranks are on %s. ", ras,
                                 p->main_count, p->n, mnet);
    else if (used < len) {
        if (root_prefix > 0)
            colli_net_str(root, root_prefix, rnet, sizeof(rnet));
        used += (size_t)snprintf(
            msg + used, len - used, "%d of %d ranks are on %s; the bootstrap root is %s (%s). ",
            p->main_count, p->n, mnet, ras, root_prefix > 0 ? rnet : "its network unknown here");
    }
    if (used < len && nbad > 1) {
        used += (size_t)snprintf(msg + used, len - used, "Unreachable too: ");
        int listed = 0;
        for (int j = bad + 1; j < p->n && used < len; j++) {
            const int ej = p->same_as[j] >= 0 ? p->err[p->same_as[j]] : p->err[j];
            if (ej <= 0)
                continue;
            if (listed++ == 4) {
                used += (size_t)snprintf(msg + used, len - used, ", and %d more", nbad - 5);
                break;
            }
            struct sockaddr_storage ja;
            char js[80];
            rec_addr(p->ranks[j].rec, &ja);
            colli_sockaddr_str(&ja, js, sizeof(js));
            used += (size_t)snprintf(msg + used, len - used, "%srank %d (%s on %.64s)",
                                     listed > 1 ? ", " : "", p->ranks[j].rec->rank, js,
                                     p->ranks[j].rec->hostname);
        }
        if (used < len)
            used += (size_t)snprintf(msg + used, len - used, ". ");
    }
    if (used < len)
        snprintf(msg + used, len - used,
                 "Pin that network on every rank by address: COLL_SOCKET_IFNAME=%s (a CIDR "
                 "selects each host's interface on that network, whatever its name)%s.",
                 mnet,
                 t->pod[0] ? "; under the kcoll agent, its CollectiveTopology's spec.network "
                             "pins the network"
                           : "");
}

coll_result_t colli_reach_check(const colli_reach_rank_t *ranks, int n, const uint8_t secret[16],
                                const struct sockaddr_storage *root, char *msg, size_t len)
{
    plan_t p = {.ranks = ranks, .n = n};
    int *buf = calloc(PLAN_INTS(n), sizeof(int));
    if (buf == NULL)
        return COLL_SUCCESS; /* a check, not a requirement: the data connections still tell */
    int *count = plan_arrays(&p, buf);
    coll_result_t st = COLL_SUCCESS;
    if (!group(&p, root, count) || assign(&p) == 0)
        goto out;
    char mnet[64];
    colli_net_str(&p.main_addr, p.main_prefix, mnet, sizeof(mnet));
    coll_info(BOOT,
              "bootstrap root: the ranks' data addresses are on %d networks (%d of %d ranks on "
              "%s): they probe each other before the first data connection",
              p.nnets, p.main_count, n, mnet);
    uint32_t *asked = calloc((size_t)n, sizeof(uint32_t));
    if (asked == NULL)
        goto out;
    for (int i = 0; i < n; i++)
        if (!ask(&p, i, secret, &asked[i]))
            asked[i] = 0;
    const double deadline = colli_now() + COLLI_PROBE_SECS + 3.0;
    for (int i = 0; i < n; i++)
        if (asked[i] > 0)
            collect(&p, i, asked[i], deadline);
    free(asked);
    for (int j = 0; j < n; j++)
        if (p.err[p.same_as[j] >= 0 ? p.same_as[j] : j] > 0) {
            describe(&p, root, colli_netif_prefix_of(root), msg, len);
            st = COLL_ERR_NETWORK;
            break;
        }
out:
    free(buf);
    return st;
}
