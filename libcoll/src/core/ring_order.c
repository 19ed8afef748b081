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

#include "colli.h"

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

/* Lowest rank i <= r with the same value of field (a string of the member record). */
static int first_with(const colli_member_t *m, int r, size_t off)
{
    const char *v = (const char *)&m[r] + off;
    for (int i = 0; i < r; i++)
        if (strcmp((const char *)&m[i] + off, v) == 0)
            return i;
    return r;
}

coll_result_t colli_comm_ring_order(struct coll_comm *comm)
{
    const int n = comm->nranks;
    const colli_member_t *m = comm->members;
    int ngroups = 0, grouped = 0;
    ring_key_t *keys = calloc((size_t)n, sizeof(*keys));
    if (keys == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory ordering a %d-rank ring", n);
    /* O(n * distinct values) in practice; n is at most a few thousand */
    for (int r = 0; r < n; r++) {
        keys[r].group_first = first_with(m, r, offsetof(colli_member_t, group));
        keys[r].host_first = first_with(m, r, offsetof(colli_member_t, host_id));
        keys[r].rank = r;
        ngroups += keys[r].group_first == r;
        grouped += m[r].group[0] != '\0';
    }
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
