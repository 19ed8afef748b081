/* Stall diagnosis: an op that made no progress for COLL_TIMEOUT tells every rank whom it waits
 * on, then fails naming the silent ranks (stopped, hung or cut off) or the peers it is stuck
 * on. */
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/netif.h"
#include "engine/engine.h"
#include "transport/transport.h"

coll_result_t colli_engine_stall_error(colli_op_t *op, double idle)
{
    struct coll_comm *comm = op->comm;
    char d[160];
    const char *what = colli_op_desc(op, d, sizeof(d));
    unsigned long long seq = colli_op_seq(op);
    /* A rank cut off by its own link hears nobody: say so instead of blaming the peers. */
    const char *ifname = comm->members[comm->rank].ifname;
    if (colli_netif_link_down(ifname) == 1) {
        char w[512];
        colli_op_waits(op, NULL, w, sizeof(w));
        return COLLI_ERR(COLL, COLL_ERR_NETWORK,
                         "%s #%llu on rank %d made no progress for %.0f s (COLL_TIMEOUT): this "
                         "rank's link %s is down (not up, or no carrier), so it is cut off from "
                         "the ranks it waits on (%s). Bring %s back up; the peers are not at "
                         "fault.",
                         what, seq, comm->rank, idle, ifname, w, ifname);
    }
    /* Ranks somebody waits on that sent no stuck report of their own are the silent ones: a
     * stopped, hung or cut-off process cannot report. */
    uint8_t *mine = calloc((size_t)comm->nranks, 1);
    char waits[512];
    if (mine != NULL)
        colli_op_waits(op, mine, waits, sizeof(waits));
    char silent[700] = "";
    size_t su = 0;
    int nsilent = 0;
    for (int r = 0; mine != NULL && comm->stuck_reported != NULL && r < comm->nranks; r++) {
        if (r == comm->rank || comm->stuck_reported[r] || !(mine[r] || comm->stuck_waits[r]))
            continue;
        if (nsilent == 0)
            colli_comm_blame(comm, r); /* the first silent rank: it cannot report itself */
        if (nsilent++ < 4 && su < sizeof(silent) - 220) {
            char who[200];
            colli_member_desc(comm, r, who, sizeof(who));
            int n = snprintf(silent + su, sizeof(silent) - su, "%s%s", su ? ", " : "", who);
            su += n > 0 ? (size_t)n : 0;
        }
    }
    free(mine);
    if (nsilent > 0)
        return COLLI_ERR(COLL, COLL_ERR_TIMEOUT,
                         "%s #%llu made no progress for %.0f s (COLL_TIMEOUT): %s%s sent no data "
                         "and no status while other ranks waited on %s; %s stopped, hung or cut "
                         "off from the network (this is rank %d, waiting on ranks %s)",
                         what, seq, idle, silent, nsilent > 4 ? " and more" : "",
                         nsilent > 1 ? "them" : "it", nsilent > 1 ? "they are" : "it is",
                         comm->rank, waits);
    char msg[1024];
    size_t used = 0;
    int listed = 0;
    for (int i = 0; i < op->nlanes && used < sizeof(msg) - 200; i++) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n)
            continue;
        if (listed++ == 4)
            break;
        char who[200];
        colli_member_desc(comm, l->peer, who, sizeof(who));
        if (listed == 1)
            colli_comm_blame(comm, l->peer);
        int n = snprintf(msg + used, sizeof(msg) - used, "%s%s %s (unit %d of %d)",
                         listed > 1 ? "; " : "", l->send ? "sending to" : "receiving from", who,
                         l->done + 1, l->n);
        used += n > 0 ? (size_t)n : 0;
    }
    return COLLI_ERR(COLL, COLL_ERR_TIMEOUT,
                     "%s #%llu on rank %d made no progress for %.0f s (COLL_TIMEOUT): stuck %s. "
                     "The peer is stuck, stopped or unreachable; check its state and logs.",
                     what, seq, comm->rank, idle, msg);
}
