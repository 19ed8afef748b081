/* InfiniBand discovery: active ports matching COLL_IB_HCA, GID tables, and the probe the
 * transport policy runs (see ib_probe.h). */
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/ib/ib.h"

#ifdef COLLI_HAVE_VERBS
int ib_port_list(const colli_ib_verbs_t *v, const char *spec, ib_port_t *out, int max, int *ndev,
                 int *nmatch)
{
    int n = 0, found = 0;
    *ndev = 0;
    *nmatch = 0;
    struct ibv_device **list = v->get_device_list(&n);
    if (list == NULL)
        return 0;
    *ndev = n;
    for (int i = 0; i < n; i++) {
        const char *name = v->get_device_name(list[i]);
        struct ibv_context *ctx = name ? v->open_device(list[i]) : NULL;
        if (ctx == NULL)
            continue;
        struct ibv_device_attr da;
        if (v->query_device(ctx, &da) == 0) {
            for (int p = 1; p <= da.phys_port_cnt; p++) {
                struct ibv_port_attr pa;
                if (!colli_ib_hca_match(spec, name, p) ||
                    colli_ib_query_port(v, ctx, (uint8_t)p, &pa) != 0)
                    continue;
                (*nmatch)++;
                bool ll_ok = pa.link_layer == IBV_LINK_LAYER_INFINIBAND ||
                             pa.link_layer == IBV_LINK_LAYER_ETHERNET ||
                             pa.link_layer == IBV_LINK_LAYER_UNSPECIFIED;
                if (pa.state != IBV_PORT_ACTIVE || !ll_ok || found >= max)
                    continue;
                ib_port_t *o = &out[found++];
                memset(o, 0, sizeof(*o));
                snprintf(o->dev, sizeof(o->dev), "%s", name);
                o->port = p;
                o->rc = pa.link_layer != IBV_LINK_LAYER_UNSPECIFIED;
                o->link_layer = pa.link_layer == IBV_LINK_LAYER_ETHERNET
                                    ? IBV_LINK_LAYER_ETHERNET
                                    : IBV_LINK_LAYER_INFINIBAND;
                o->mtu = pa.active_mtu;
                o->lid = pa.lid;
            }
        }
        v->close_device(ctx);
    }
    v->free_device_list(list);
    return found;
}

/* "IB/RoCE v1" or "RoCE v2" from sysfs, as NCCL reads it where verbs cannot say. */
static int sysfs_gid_type(const char *dev, int port, int index)
{
    char path[256], buf[32] = "";
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, port,
             index);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return COLLI_IB_GID_UNKNOWN;
    bool ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    if (!ok)
        return COLLI_IB_GID_UNKNOWN;
    if (strstr(buf, "v2") != NULL)
        return COLLI_IB_GID_ROCE_V2;
    if (strstr(buf, "v1") != NULL)
        return COLLI_IB_GID_ROCE_V1;
    return COLLI_IB_GID_UNKNOWN;
}

/* The interface of a RoCE GID entry from sysfs, where verbs cannot say. */
static void sysfs_gid_ndev(const char *dev, int port, int index, char *out, size_t len)
{
    char path[256];
    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", dev, port,
             index);
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return;
    if (fgets(out, (int)len, f) != NULL)
        out[strcspn(out, "\n")] = '\0';
    else
        out[0] = '\0';
    fclose(f);
}

bool ib_gid_table(const colli_ib_verbs_t *v, struct ibv_context *ctx, const char *dev, int port,
                  int ntab, colli_ib_gid_t **out, int *n_out)
{
    colli_ib_gid_t *tab = calloc(ntab > 0 ? (size_t)ntab : 1, sizeof(*tab));
    if (tab == NULL)
        return false;
    int n = 0;
    for (int i = 0; i < ntab; i++) {
        union ibv_gid g;
        if (v->query_gid(ctx, (uint8_t)port, i, &g) != 0)
            continue;
        colli_ib_gid_t *t = &tab[n++];
        t->index = i;
        memcpy(t->gid, g.raw, 16);
        t->type = COLLI_IB_GID_UNKNOWN;
        struct ibv_gid_entry e;
        if (v->query_gid_ex != NULL &&
            v->query_gid_ex(ctx, (uint32_t)port, (uint32_t)i, &e, 0, sizeof(e)) == 0) {
            t->type = e.gid_type == IBV_GID_TYPE_ROCE_V2   ? COLLI_IB_GID_ROCE_V2
                      : e.gid_type == IBV_GID_TYPE_ROCE_V1 ? COLLI_IB_GID_ROCE_V1
                                                           : COLLI_IB_GID_IB;
            char name[IF_NAMESIZE];
            if (e.ndev_ifindex != 0 && if_indextoname(e.ndev_ifindex, name) != NULL)
                snprintf(t->ndev, sizeof(t->ndev), "%s", name);
        } else {
            t->type = sysfs_gid_type(dev, port, i);
        }
        if (t->ndev[0] == '\0')
            sysfs_gid_ndev(dev, port, i, t->ndev, sizeof(t->ndev));
    }
    *out = tab;
    *n_out = n;
    return true;
}
#endif

void colli_ib_probe(const char *lib, const char *hca_spec, colli_ib_probe_t *out)
{
    memset(out, 0, sizeof(*out));
    colli_ib_verbs_t v;
    if (!colli_ib_verbs_open(lib, &v, out->reason, sizeof(out->reason)))
        return;
#ifdef COLLI_HAVE_VERBS
    ib_port_t ports[16];
    int ndev = 0, nmatch = 0;
    int n = ib_port_list(&v, hca_spec, ports, 16, &ndev, &nmatch);
    if (ndev == 0) {
        snprintf(out->reason, sizeof(out->reason),
                 "libibverbs found no RDMA devices (no HCA, or /dev/infiniband not mounted in "
                 "the container)");
    } else if (n == 0) {
        snprintf(out->reason, sizeof(out->reason),
                 "%d RDMA device(s) found but %s (COLL_IB_HCA=\"%s\")", ndev,
                 nmatch ? "no matching port is ACTIVE with an InfiniBand or Ethernet link layer"
                        : "no port matches the HCA list",
                 hca_spec ? hca_spec : "");
    } else {
        size_t used = 0;
        for (int i = 0; i < n; i++) {
            out->usable = out->usable || ports[i].rc;
            int w = snprintf(out->devices + used, sizeof(out->devices) - used, "%s%s:%d",
                             used ? ", " : "", ports[i].dev, ports[i].port);
            if (w > 0 && (size_t)w < sizeof(out->devices) - used)
                used += (size_t)w;
        }
        out->no_rc = !out->usable;
        if (out->no_rc)
            snprintf(out->reason, sizeof(out->reason),
                     "the active RDMA ports (%s) report no InfiniBand or Ethernet link layer, as "
                     "AWS EFA's do: they have no reliable-connected queue pairs, which kcoll's "
                     "InfiniBand transport needs (sockets carry the data between hosts)",
                     out->devices);
    }
#endif
    colli_ib_verbs_close(&v);
}
