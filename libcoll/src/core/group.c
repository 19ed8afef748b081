/* Groups: calls between coll_group_start and coll_group_end are checked at once and queued per
 * thread (as the API defines it). A call that fails its checks fails the whole group, as in NCCL:
 * coll_group_end runs nothing and returns that error (a rank that ran part of a group would
 * desert its peers in the rest). At the outermost end, queued communicator creations run first,
 * all at once: one thread per creation from a unique id, one per parent for splits and shrinks
 * (in issue order), since one thread may hold several ranks of one communicator, as
 * ncclCommInitAll makes them. Then each communicator's collectives run in issue order and its
 * sends and receives as one concurrent operation. A group that spans several communicators runs
 * each one on a thread of its own, so that ranks of one job driven by one thread all make
 * progress. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

typedef struct {
    colli_create_t create;     /* a creation from a unique id (child.parent NULL) */
    colli_group_child_t child; /* or a split or shrink of child.parent */
    int *exclude;              /* child.exclude: the copy of a shrink's list */
    colli_proto_facts_t facts; /* the agent's, when create.agent_socket is set */
    char agent_socket[108];
    coll_comm_t *out;
    coll_comm_t made;
    coll_result_t status;
    char msg[1100]; /* the creating thread's last error */
} init_item_t;

static _Thread_local struct {
    int depth;
    colli_item_t *items;
    int n, cap;
    init_item_t *inits;
    int ninit, init_cap;
    coll_result_t failed; /* the first call of the group that failed, and its message */
    char failed_msg[600];
} group;

bool colli_group_active(void)
{
    return group.depth > 0;
}

coll_result_t coll_group_fail(coll_result_t status, const char *why)
{
    if (status != COLL_SUCCESS && group.depth > 0 && group.failed == COLL_SUCCESS) {
        group.failed = status;
        snprintf(group.failed_msg, sizeof(group.failed_msg), "%s", why != NULL ? why : "");
    }
    return status;
}

coll_result_t colli_group_note(coll_result_t status)
{
    return status == COLL_SUCCESS ? status : coll_group_fail(status, coll_get_last_error());
}

/* arr (n used of *cap elements of elt bytes) with room for one more: arr itself, or a larger copy
 * (*cap updated); NULL when memory is short (arr unchanged). */
static void *grow(void *arr, int n, int *cap, size_t elt)
{
    if (n < *cap)
        return arr;
    int ncap = *cap ? *cap * 2 : 16;
    void *p = realloc(arr, (size_t)ncap * elt);
    if (p != NULL)
        *cap = ncap;
    return p;
}

coll_result_t colli_group_enqueue(const colli_item_t *it)
{
    colli_item_t *items = grow(group.items, group.n, &group.cap, sizeof(*items));
    if (items == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory queueing a group operation");
    group.items = items;
    group.items[group.n++] = *it;
    return COLL_SUCCESS;
}

/* a new item at the end of the queued creations, zeroed; NULL when memory is short */
static init_item_t *new_init(void)
{
    init_item_t *inits = grow(group.inits, group.ninit, &group.init_cap, sizeof(*inits));
    if (inits == NULL)
        return NULL;
    group.inits = inits;
    init_item_t *it = &group.inits[group.ninit++];
    memset(it, 0, sizeof(*it));
    return it;
}

coll_result_t colli_group_enqueue_child(const colli_group_child_t *c, coll_comm_t *out)
{
    int *exclude = NULL;
    if (c->nexclude > 0) {
        exclude = malloc((size_t)c->nexclude * sizeof(*exclude));
        if (exclude == NULL)
            return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory queueing a shrink");
        memcpy(exclude, c->exclude, (size_t)c->nexclude * sizeof(*exclude));
    }
    init_item_t *it = new_init();
    if (it == NULL) {
        free(exclude);
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory queueing a communicator creation");
    }
    it->child = *c;
    it->exclude = exclude; /* the caller's list need not outlive the call */
    it->child.exclude = exclude;
    it->out = out;
    return COLL_SUCCESS;
}

coll_result_t colli_group_enqueue_init(const colli_create_t *c, coll_comm_t *out)
{
    if (c->parent != NULL)
        return COLLI_ERR(INIT, COLL_ERR_INTERNAL, "only unique-id creations are queued");
    init_item_t *it = new_init();
    if (it == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory queueing a communicator creation");
    it->create = *c;
    it->out = out;
    /* the agent's facts travel with the item (the array may move: pointers are set when the
     * creation runs) */
    if (c->agent != NULL)
        it->facts = *c->agent;
    if (c->agent_socket != NULL)
        snprintf(it->agent_socket, sizeof(it->agent_socket), "%s", c->agent_socket);
    return COLL_SUCCESS;
}

coll_result_t coll_group_start(void)
{
    group.depth++;
    return COLL_SUCCESS;
}

/* ---- creations ---- */

static void create_one(init_item_t *it)
{
    if (it->child.parent != NULL) { /* outside any group on this thread, or past its end */
        it->status =
            it->child.shrink
                ? coll_comm_shrink(it->child.parent, it->child.exclude, it->child.nexclude,
                                   it->child.flags, &it->made)
                : coll_comm_split(it->child.parent, it->child.color, it->child.key, &it->made);
        if (it->status != COLL_SUCCESS)
            snprintf(it->msg, sizeof(it->msg), "%s", colli_last_error());
        return;
    }
    if (it->create.agent != NULL)
        it->create.agent = &it->facts;
    if (it->create.agent_socket != NULL)
        it->create.agent_socket = it->agent_socket;
    it->status = colli_comm_create(&it->create, &it->made);
    colli_agent_created(&it->create, it->made, it->status);
    if (it->status != COLL_SUCCESS)
        snprintf(it->msg, sizeof(it->msg), "%s", colli_last_error());
}

/* A chain of creations run in order on one thread: the splits and shrinks of one parent (each
 * a collective over it, issued in the same order on every rank), or one unique-id creation. */
typedef struct {
    init_item_t *first;
    int n; /* items from first on: those whose child.parent is first's */
} chain_t;

static void *chain_thread(void *arg)
{
    chain_t *c = arg;
    for (int i = 0; i < c->n; i++) {
        init_item_t *it = &c->first[i];
        if (i == 0 || (it->child.parent != NULL && it->child.parent == c->first->child.parent))
            create_one(it);
    }
    return NULL;
}

/* fn(items + i * size) for i < n, each on a thread of its own but the last, which runs on this
 * one (so does any whose thread cannot be started); returns once every one has. */
static coll_result_t run_at_once(void *(*fn)(void *), void *items, size_t size, int n)
{
    pthread_t *tids = calloc((size_t)n, sizeof(*tids));
    bool *started = calloc((size_t)n, sizeof(*started));
    if (tids == NULL || started == NULL) {
        free(tids);
        free(started);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory starting %d threads", n);
    }
    for (int i = 0; i < n; i++) {
        void *it = (char *)items + (size_t)i * size;
        if (i == n - 1 || pthread_create(&tids[i], NULL, fn, it) != 0)
            fn(it);
        else
            started[i] = true;
    }
    for (int i = 0; i < n; i++)
        if (started[i])
            pthread_join(tids[i], NULL);
    free(tids);
    free(started);
    return COLL_SUCCESS;
}

/* Run every queued creation at once, as chains (chain_t). All or nothing: when one fails, the
 * others are destroyed and every output stays NULL; the first failure is returned, with its
 * message. A split with COLL_SPLIT_NOCOLOR makes nothing and leaves its output NULL. */
static coll_result_t run_inits(init_item_t *inits, int n)
{
    for (int i = 0; i < n; i++)
        *inits[i].out = NULL;
    chain_t *chains = calloc((size_t)n, sizeof(*chains));
    if (chains == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory starting %d creations", n);
    int nchains = 0;
    for (int i = 0; i < n; i++) {
        bool later = false; /* a split or shrink of a parent an earlier chain runs */
        for (int j = 0; j < i && !later; j++)
            later = inits[i].child.parent != NULL && inits[j].child.parent == inits[i].child.parent;
        if (!later)
            chains[nchains++] = (chain_t){&inits[i], inits[i].child.parent != NULL ? n - i : 1};
    }
    coll_result_t status = run_at_once(chain_thread, chains, sizeof(*chains), nchains);
    free(chains);
    if (status != COLL_SUCCESS)
        return status;
    int failed = -1;
    for (int i = 0; i < n && failed < 0; i++)
        if (inits[i].status != COLL_SUCCESS)
            failed = i;
    for (int i = 0; i < n; i++) {
        if (failed < 0)
            *inits[i].out = inits[i].made;
        else if (inits[i].status == COLL_SUCCESS && inits[i].made != NULL)
            (void)coll_comm_destroy(inits[i].made);
    }
    if (failed < 0)
        return COLL_SUCCESS;
    colli_set_last_error(inits[failed].msg);
    return inits[failed].status;
}

/* ---- calls ---- */

/* A queued collective: its communicator may have been destroyed since it was queued. */
static coll_result_t run_queued_collective(const colli_item_t *it)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(it->handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    return colli_dispatch_collective(comm, it);
}

/* The queued calls of one communicator (all of them when handle is NULL): collectives in issue
 * order, then every communicator's sends and receives as one operation each. */
static coll_result_t run_calls(const colli_item_t *items, int n, coll_comm_t handle)
{
    coll_result_t status = COLL_SUCCESS;
    for (int i = 0; i < n && status == COLL_SUCCESS; i++)
        if (items[i].kind == COLLI_ITEM_COLL && (handle == NULL || items[i].handle == handle))
            status = run_queued_collective(&items[i]);
    for (int i = 0; i < n && status == COLL_SUCCESS; i++) {
        if (items[i].kind == COLLI_ITEM_COLL || (handle != NULL && items[i].handle != handle))
            continue;
        bool first = true; /* of its communicator's sends and receives */
        for (int k = 0; k < i && first; k++)
            first = items[k].kind == COLLI_ITEM_COLL || items[k].handle != items[i].handle;
        if (first)
            status = colli_dispatch_p2p(items[i].handle, items, n);
    }
    return status;
}

typedef struct {
    const colli_item_t *items;
    int n;
    coll_comm_t handle;
    coll_result_t status;
    char msg[1100];
} comm_calls_t;

static void *calls_thread(void *arg)
{
    comm_calls_t *c = arg;
    c->status = run_calls(c->items, c->n, c->handle);
    if (c->status != COLL_SUCCESS)
        snprintf(c->msg, sizeof(c->msg), "%s", colli_last_error());
    return NULL;
}

/* Are all of handle's calls among items[0..n) on device buffers? */
static bool device_only(const colli_item_t *items, int n, coll_comm_t handle)
{
    for (int i = 0; i < n; i++)
        if (items[i].handle == handle && items[i].device < 0)
            return false;
    return true;
}

/* Several communicators: those whose calls are all on device buffers on this thread first
 * (they are queued on their streams and return; a stream handle such as
 * cudaStreamPerThread means the caller's thread's stream, and the caller's current GPU is
 * kept), then the others one thread each, so that a thread that drives several ranks of one
 * job makes progress on all. The first failure is returned: of the device-only communicators,
 * then of the others, each in issue order. */
static coll_result_t run_calls_concurrently(const colli_item_t *items, int n)
{
    comm_calls_t *per = calloc((size_t)n, sizeof(*per));
    if (per == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory running a group");
    int ncomm = 0, ndev = 0;
    for (int i = 0; i < n; i++) {
        bool seen = false;
        for (int k = 0; k < ncomm && !seen; k++)
            seen = per[k].handle == items[i].handle;
        if (!seen)
            per[ncomm++] = (comm_calls_t){.items = items, .n = n, .handle = items[i].handle};
    }
    for (int k = 0; k < ncomm; k++) /* the device-only ones to the front, in order */
        if (device_only(items, n, per[k].handle)) {
            const comm_calls_t dev = per[k];
            memmove(&per[ndev + 1], &per[ndev], (size_t)(k - ndev) * sizeof(*per));
            per[ndev++] = dev;
        }
    for (int k = 0; k < ndev; k++)
        calls_thread(&per[k]);
    coll_result_t status = ncomm > ndev
                               ? run_at_once(calls_thread, per + ndev, sizeof(*per), ncomm - ndev)
                               : COLL_SUCCESS;
    for (int k = 0; k < ncomm && status == COLL_SUCCESS; k++)
        if (per[k].status != COLL_SUCCESS) {
            status = per[k].status;
            colli_set_last_error(per[k].msg);
        }
    free(per);
    return status;
}

static bool one_communicator(const colli_item_t *items, int n)
{
    for (int i = 1; i < n; i++)
        if (items[i].handle != items[0].handle)
            return false;
    return true;
}

static coll_result_t group_end(const char *fn, bool run)
{
    if (group.depth == 0)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE, "%s without a matching coll_group_start",
                         fn);
    if (--group.depth > 0)
        return COLL_SUCCESS;
    coll_result_t status = COLL_SUCCESS;
    if (group.failed != COLL_SUCCESS && run) /* as NCCL: the group is dropped, and says why */
        status = COLLI_ERR(COLL, group.failed,
                           "%s: nothing in this group ran (%d calls, %d communicator creations), "
                           "because a call in it failed: %s",
                           fn, group.n, group.ninit, group.failed_msg);
    else if (group.ninit > 0)
        status = run_inits(group.inits, group.ninit);
    if (status == COLL_SUCCESS && group.n > 0 && run)
        status = one_communicator(group.items, group.n)
                     ? run_calls(group.items, group.n, NULL)
                     : run_calls_concurrently(group.items, group.n);
    free(group.items);
    for (int i = 0; i < group.ninit; i++)
        free(group.inits[i].exclude);
    free(group.inits);
    memset(&group, 0, sizeof(group));
    return status;
}

coll_result_t coll_group_end(void)
{
    return group_end("coll_group_end", true);
}

coll_result_t coll_group_discard(void)
{
    return group_end("coll_group_discard", false);
}
