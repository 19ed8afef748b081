/* Groups: calls between coll_group_start and coll_group_end are checked at once and queued per
 * thread (as the API defines it); at the outermost end the collectives run in issue order, then
 * each communicator's sends and receives as one concurrent operation. */
#include <stdlib.h>

#include "core/core.h"

static _Thread_local struct {
    int depth;
    colli_item_t *items;
    int n, cap;
} group;

bool colli_group_active(void)
{
    return group.depth > 0;
}

coll_result_t colli_group_enqueue(const colli_item_t *it)
{
    if (group.n == group.cap) {
        int cap = group.cap ? group.cap * 2 : 16;
        colli_item_t *n = realloc(group.items, (size_t)cap * sizeof(*n));
        if (n == NULL)
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory queueing a group operation");
        group.items = n;
        group.cap = cap;
    }
    group.items[group.n++] = *it;
    return COLL_SUCCESS;
}

coll_result_t coll_group_start(void)
{
    group.depth++;
    return COLL_SUCCESS;
}

/* A queued collective: its communicator may have been destroyed since it was queued. */
static coll_result_t run_queued_collective(const colli_item_t *it)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(it->handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    return colli_dispatch_collective(comm, it);
}

/* Is items[i] the first send or receive of its communicator? */
static bool first_p2p_of_comm(const colli_item_t *items, int i)
{
    for (int k = 0; k < i; k++)
        if (items[k].kind != COLLI_ITEM_COLL && items[k].handle == items[i].handle)
            return false;
    return true;
}

coll_result_t coll_group_end(void)
{
    if (group.depth == 0)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "coll_group_end without a matching coll_group_start");
    if (--group.depth > 0)
        return COLL_SUCCESS;
    coll_result_t status = COLL_SUCCESS;
    for (int i = 0; i < group.n && status == COLL_SUCCESS; i++)
        if (group.items[i].kind == COLLI_ITEM_COLL)
            status = run_queued_collective(&group.items[i]);
    for (int i = 0; i < group.n && status == COLL_SUCCESS; i++)
        if (group.items[i].kind != COLLI_ITEM_COLL && first_p2p_of_comm(group.items, i))
            status = colli_dispatch_p2p(group.items[i].handle, group.items, group.n);
    free(group.items);
    group.items = NULL;
    group.n = group.cap = 0;
    return status;
}
