/* The transport policy as the InfiniBand transport applies it (COLL_TRANSPORT): whether this
 * rank offers InfiniBand (the probe) and which peers it reaches over it (can_connect). The one
 * place that decides between InfiniBand and sockets:
 *   Socket     never InfiniBand;
 *   auto       InfiniBand between hosts when every rank of the communicator has an active port
 *              on the pinned network (a RoCE port on the interface the communicator runs on, or
 *              an InfiniBand port matching COLL_IB_HCA), else sockets between every pair of
 *              hosts; one INFO line on every rank says which and why;
 *   PreferIB   InfiniBand between every pair of ranks that both offer it, sockets for the rest
 *              with one WARN line;
 *   RequireIB  InfiniBand between every pair of hosts, or the communicator fails naming the rank
 *              without it. */
#include <stdio.h>
#include <string.h>

#include "transport/ib/ib.h"

coll_result_t ib_policy_probe(struct coll_comm *comm, bool *use)
{
    const colli_config_t *cfg = &comm->cfg;
    *use = false;
    if (cfg->transport == COLLI_TP_SOCKET)
        return COLL_SUCCESS;
    colli_ib_probe_t probe;
    colli_ib_probe(comm->test.ib_verbs_lib, cfg->ib_hca, &probe);
    if (!probe.usable) {
        if (cfg->transport == COLLI_TP_REQUIRE_IB)
            return COLLI_ERR(IB, COLL_ERR_NETWORK, "%s, but InfiniBand is not usable here: %s",
                             colli_config_source(cfg, "COLL_TRANSPORT") == COLLI_SRC_NCCL
                                 ? "NCCL_NET=IB (kcoll's COLL_TRANSPORT=RequireIB)"
                                 : "COLL_TRANSPORT=RequireIB",
                             probe.reason);
        if (cfg->transport == COLLI_TP_AUTO)
            coll_info(IB,
                      "COLL_TRANSPORT=auto: rank %d offers no InfiniBand (sockets between "
                      "hosts): %s",
                      comm->rank, probe.reason);
        else
            coll_warn(IB, "COLL_TRANSPORT=PreferIB: using sockets because %s", probe.reason);
        return COLL_SUCCESS;
    }
    if (cfg->transport == COLLI_TP_AUTO)
        coll_debug(IB, "COLL_TRANSPORT=auto: InfiniBand ports %s are active", probe.devices);
    else
        coll_info(IB, "COLL_TRANSPORT=%s: InfiniBand ports %s are active",
                  cfg->transport == COLLI_TP_REQUIRE_IB ? "RequireIB" : "PreferIB", probe.devices);
    *use = true;
    return COLL_SUCCESS;
}

#ifdef COLLI_HAVE_VERBS
/* "3 5 7" (at most about 100 characters, then " ...") */
static void rank_list_add(char *list, size_t len, int p)
{
    size_t u = strlen(list);
    if (u < len - 16)
        snprintf(list + u, len - u, "%s%d", u ? " " : "", p);
    else if (u < len - 5 && strcmp(list + u - 4, " ...") != 0)
        snprintf(list + u, len - u, " ...");
}

/* auto: InfiniBand between hosts only when every rank offers it (all ranks see the same member
 * table, so all decide alike). */
static void decide_auto(struct coll_comm *comm, ib_state_t *st)
{
    int no = 0;
    char list[128] = "";
    for (int p = 0; p < comm->nranks; p++)
        if (!(comm->members[p].caps & COLLI_CAP_IB)) {
            rank_list_add(list, sizeof(list), p);
            no++;
        }
    st->auto_ib = no == 0;
    if (st->auto_ib)
        coll_info(IB,
                  "COLL_TRANSPORT=auto: rank %d uses InfiniBand between hosts: every rank has an "
                  "active RDMA port on the pinned network (here %s:%d, %s on %s)",
                  comm->rank, st->port.dev, st->port.port,
                  st->port.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                  st->ifname);
    else
        coll_info(IB,
                  "COLL_TRANSPORT=auto: rank %d uses sockets between hosts: rank%s %s ha%s no "
                  "active RDMA port on the pinned network (their logs say why), and a job uses "
                  "InfiniBand only where every rank has one (PreferIB mixes both)",
                  comm->rank, no > 1 ? "s" : "", list, no > 1 ? "ve" : "s");
}

/* PreferIB and RequireIB: ranks on other hosts that offer no InfiniBand: RequireIB fails naming
 * the first one, PreferIB says once which ones it reaches over sockets. */
static coll_result_t check_policy(struct coll_comm *comm)
{
    const colli_member_t *me = &comm->members[comm->rank];
    int noib = 0;
    char noib_list[128] = "";
    for (int p = 0; p < comm->nranks; p++) {
        const colli_member_t *m = &comm->members[p];
        if (p == comm->rank || strcmp(m->host_id, me->host_id) == 0 ||
            (me->caps & m->caps & COLLI_CAP_IB))
            continue;
        if (comm->cfg.transport == COLLI_TP_REQUIRE_IB) {
            char who[200];
            colli_member_desc(comm, p, who, sizeof(who));
            colli_comm_blame(comm, p);
            return COLLI_ERR(IB, COLL_ERR_NETWORK,
                             "COLL_TRANSPORT=RequireIB on rank %d, but %s, on another host, "
                             "offers no InfiniBand (its COLL_TRANSPORT is Socket, or it has no "
                             "usable port: see its log). Give every rank the same policy and an "
                             "active HCA port.",
                             comm->rank, who);
        }
        rank_list_add(noib_list, sizeof(noib_list), p);
        noib++;
    }
    if (noib > 0)
        coll_warn(IB,
                  "COLL_TRANSPORT=PreferIB: rank%s %s on other hosts %s no usable InfiniBand; "
                  "rank %d reaches %s over sockets",
                  noib > 1 ? "s" : "", noib_list, noib > 1 ? "have" : "has", comm->rank,
                  noib > 1 ? "them" : "it");
    return COLL_SUCCESS;
}

coll_result_t ib_can_connect(struct coll_comm *comm, int tp, const colli_member_t *peer, bool *yes)
{
    ib_state_t *st = comm->tp[tp].state;
    const colli_member_t *me = &comm->members[comm->rank];
    *yes = false;
    if (!st->policy_checked) {
        st->policy_checked = true;
        if (comm->cfg.transport == COLLI_TP_AUTO) {
            decide_auto(comm, st);
        } else {
            coll_result_t status = check_policy(comm);
            if (status != COLL_SUCCESS)
                return status;
        }
    }
    if (comm->cfg.transport == COLLI_TP_AUTO && !st->auto_ib)
        return COLL_SUCCESS;
    *yes = strcmp(peer->host_id, me->host_id) != 0 && (me->caps & peer->caps & COLLI_CAP_IB);
    return COLL_SUCCESS;
}
#endif
