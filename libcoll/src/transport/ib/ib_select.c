/* Pure selection rules: HCA lists (COLL_IB_HCA) and the RoCE GID index (see ib_probe.h). */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "transport/ib/ib_probe.h"

static bool gid_zero(const uint8_t g[16])
{
    for (int i = 0; i < 16; i++)
        if (g[i] != 0)
            return false;
    return true;
}

/* 2: IPv4-mapped (::ffff:a.b.c.d), 1: global IPv6, 0: link-local (fe80::/10) */
static int gid_addr_class(const uint8_t g[16])
{
    static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (memcmp(g, v4map, sizeof(v4map)) == 0)
        return 2;
    if (g[0] == 0xfe && (g[1] & 0xc0) == 0x80)
        return 0;
    return 1;
}

static int gid_type_rank(int type)
{
    switch (type) {
    case COLLI_IB_GID_ROCE_V2:
        return 3;
    case COLLI_IB_GID_ROCE_V1:
        return 2;
    case COLLI_IB_GID_UNKNOWN:
        return 1;
    default:
        return 0;
    }
}

static const char *gid_type_name(int type)
{
    switch (type) {
    case COLLI_IB_GID_ROCE_V2:
        return "RoCE v2";
    case COLLI_IB_GID_ROCE_V1:
        return "RoCE v1";
    case COLLI_IB_GID_IB:
        return "IB";
    default:
        return "unknown type";
    }
}

void colli_ib_gid_str(const uint8_t gid[16], char *buf, size_t len)
{
    char a[INET6_ADDRSTRLEN];
    if (inet_ntop(AF_INET6, gid, a, sizeof(a)) == NULL)
        snprintf(a, sizeof(a), "?");
    snprintf(buf, len, "%s", a);
}

int colli_ib_gid_select(const colli_ib_gid_t *tab, int n, int want, char *why, size_t whylen)
{
    if (want >= 0) {
        for (int i = 0; i < n; i++) {
            if (tab[i].index != want)
                continue;
            if (gid_zero(tab[i].gid)) {
                snprintf(why, whylen,
                         "COLL_IB_GID_INDEX=%d names an empty (all-zero) GID table entry; unset it "
                         "for automatic selection or choose a configured index (show_gids)",
                         want);
                return -1;
            }
            return want;
        }
        snprintf(why, whylen,
                 "COLL_IB_GID_INDEX=%d is not in the port's GID table (%d entries); unset it for "
                 "automatic selection",
                 want, n);
        return -1;
    }
    int best = -1, best_score = -1;
    for (int i = 0; i < n; i++) {
        if (gid_zero(tab[i].gid))
            continue;
        int score = gid_type_rank(tab[i].type) * 4 + gid_addr_class(tab[i].gid);
        if (score > best_score || (score == best_score && tab[i].index < tab[best].index)) {
            best = i;
            best_score = score;
        }
    }
    if (best < 0) {
        snprintf(why, whylen,
                 "the port's GID table has no configured entry (%d entries, all zero): give the "
                 "RoCE interface an IP address, or set COLL_IB_GID_INDEX",
                 n);
        return -1;
    }
    char g[64];
    colli_ib_gid_str(tab[best].gid, g, sizeof(g));
    coll_debug(IB, "GID index %d selected (%s, %s)", tab[best].index, gid_type_name(tab[best].type),
               g);
    return tab[best].index;
}

int colli_ib_gid_on_ifname(colli_ib_gid_t *tab, int n, const char *ifname)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(tab[i].ndev, ifname) != 0)
            continue;
        colli_ib_gid_t t = tab[k];
        tab[k++] = tab[i];
        tab[i] = t;
    }
    return k;
}

bool colli_ib_gid_compatible(const uint8_t mine[16], int my_type, const uint8_t theirs[16],
                             int their_type, char *why, size_t whylen)
{
    char a[64], b[64];
    colli_ib_gid_str(mine, a, sizeof(a));
    colli_ib_gid_str(theirs, b, sizeof(b));
    if ((gid_addr_class(mine) == 2) != (gid_addr_class(theirs) == 2)) {
        snprintf(why, whylen,
                 "its GID %s is an %s address and this rank's %s an %s one: RoCE packets between "
                 "them are dropped. Unset COLL_IB_GID_INDEX on every rank (automatic selection "
                 "prefers RoCE v2 with IPv4) or set it to entries of the same kind",
                 b, gid_addr_class(theirs) == 2 ? "IPv4" : "IPv6", a,
                 gid_addr_class(mine) == 2 ? "IPv4" : "IPv6");
        return false;
    }
    bool known = (my_type == COLLI_IB_GID_ROCE_V1 || my_type == COLLI_IB_GID_ROCE_V2) &&
                 (their_type == COLLI_IB_GID_ROCE_V1 || their_type == COLLI_IB_GID_ROCE_V2);
    if (known && my_type != their_type) {
        snprintf(why, whylen,
                 "its GID %s is %s and this rank's %s is %s: the two versions cannot talk. Unset "
                 "COLL_IB_GID_INDEX on every rank or set it to entries of the same version",
                 b, gid_type_name(their_type), a, gid_type_name(my_type));
        return false;
    }
    return true;
}
