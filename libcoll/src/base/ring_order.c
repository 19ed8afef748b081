/* Topology-aware ring order: ranks are placed in rings and chains by (topology group, host,
 * rank), where groups and hosts come in the order of their lowest rank. Ranks whose node shares
 * a switch or rack (the group the coll-agent read from the CollectiveTopology's topologyKey
 * node label) become ring neighbours, and so do the ranks of one host, so a ring crosses each
 * group and host boundary once instead of once per hop. A job launched in that order already
 * keeps the rank order (and its exact reduction order). */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/comm.h"
#include "base/error.h"

typedef struct {
    int group_first; /* lowest rank of the same group */
    int host_first;  /* lowest rank of the same host */
    int rank;
} ring_key_t;

static int key_cmp(const void *pa, const void *pb)
{
    const ring_key_t *a = pa, *b = pb;
    if (a->group_first != b->group_first)
        return a->group_first < b->group_first ? -1 : 1;
    if (a->host_first != b->host_first)
        return a->host_first < b->host_first ? -1 : 1;
    return a->rank < b->rank ? -1 : (a->rank > b->rank);
}

typedef struct {
    const char *value;
    int rank;
} ring_val_t;

static int val_cmp(const void *pa, const void *pb)
{
    const ring_val_t *a = pa, *b = pb;
    int c = strcmp(a->value, b->value);
    return c ? c : (a->rank > b->rank) - (a->rank < b->rank);
}

/* first[r] = the lowest rank whose member field (a string at offset off) equals rank r's:
 * sorted by (value, rank), each run of equal values starts with its lowest rank. O(n log n). */
static bool lowest_with_same(const colli_member_t *m, int n, size_t off, int *first)
{
    ring_val_t *v = malloc(sizeof(*v) * (size_t)n);
    if (v == NULL)
        return false;
    for (int r = 0; r < n; r++)
        v[r] = (ring_val_t){(const char *)&m[r] + off, r};
    qsort(v, (size_t)n, sizeof(*v), val_cmp);
    for (int i = 0, lead = 0; i < n; i++) {
        if (i > 0 && strcmp(v[i].value, v[i - 1].value) != 0)
            lead = i;
        first[v[i].rank] = v[lead].rank;
    }
    free(v);
    return true;
}

coll_result_t colli_comm_ring_order(struct coll_comm *comm)
{
    const int n = comm->nranks;
    const colli_member_t *m = comm->members;
    int ngroups = 0, grouped = 0;
    ring_key_t *keys = calloc((size_t)n, sizeof(*keys));
    int *gfirst = malloc(sizeof(int) * (size_t)n), *hfirst = malloc(sizeof(int) * (size_t)n);
    if (keys == NULL || gfirst == NULL || hfirst == NULL ||
        !lowest_with_same(m, n, offsetof(colli_member_t, group), gfirst) ||
        !lowest_with_same(m, n, offsetof(colli_member_t, host_id), hfirst)) {
        free(keys);
        free(gfirst);
        free(hfirst);
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory ordering a %d-rank ring", n);
    }
    for (int r = 0; r < n; r++) {
        keys[r].group_first = gfirst[r];
        keys[r].host_first = hfirst[r];
        keys[r].rank = r;
        ngroups += keys[r].group_first == r;
        grouped += m[r].group[0] != '\0';
    }
    free(gfirst);
    free(hfirst);
    qsort(keys, (size_t)n, sizeof(*keys), key_cmp);
    bool identity = true;
    for (int p = 0; p < n; p++)
        identity = identity && keys[p].rank == p;
    if (!identity) {
        comm->ring_rank = malloc(sizeof(int) * (size_t)n);
        comm->ring_posof = malloc(sizeof(int) * (size_t)n);
        if (comm->ring_rank == NULL || comm->ring_posof == NULL) {
            free(keys);
            return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory ordering a %d-rank ring", n);
        }
        for (int p = 0; p < n; p++) {
            comm->ring_rank[p] = keys[p].rank;
            comm->ring_posof[keys[p].rank] = p;
        }
    }
    free(keys);
    if (grouped == 0 && identity)
        return COLL_SUCCESS;
    char order[200] = "";
    size_t used = 0;
    for (int p = 0; p < n && used < sizeof(order) - 16; p++) {
        int w = snprintf(order + used, sizeof(order) - used, "%s%d", p ? " " : "",
                         colli_ring_rank(comm, p));
        used += w > 0 ? (size_t)w : 0;
    }
    if (grouped == 0)
        coll_info(INIT, "ring order by host (the ranks of one host adjacent): ring %s%s", order,
                  used >= sizeof(order) - 16 ? " ..." : "");
    else
        coll_info(INIT,
                  "ring order by (topology group, host, rank): %d group%s%s; this rank's group "
                  "\"%s\"; ring %s%s",
                  ngroups, ngroups == 1 ? "" : "s", grouped < n ? " (some ranks have none)" : "",
                  m[comm->rank].group, order, used >= sizeof(order) - 16 ? " ..." : "");
    return COLL_SUCCESS;
}
