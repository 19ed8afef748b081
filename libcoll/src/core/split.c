/* coll_comm_split: communicators made from a parent, with no unique id and no agent round trip.
 * Every rank of the parent says its color and key (an all_gather on the parent); the first rank
 * of each color in (key, parent rank) order starts a bootstrap root on its data listener's
 * address with a fresh secret, and a second all_gather hands that endpoint to the color's
 * members. Each child is created from its parent: the same configuration snapshot (the pinned
 * network, transport policy, tuning and timeouts), test seams, agent and pod names. */
#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "bootstrap/bootstrap.h"
#include "core/core.h"

/* What each rank contributes to the first exchange. */
typedef struct {
    int32_t color;
    int32_t key;
} split_req_t;

/* What each rank contributes to the second one: a color's bootstrap root (leaders only). */
typedef struct {
    uint32_t valid;
    uint16_t family;
    uint16_t port;
    uint8_t addr[16];
    uint8_t secret[16];
} split_root_t;

/* A host-buffer all_gather on the parent, after its queued device calls. */
static coll_result_t gather(struct coll_comm *comm, const void *mine, void *all, size_t bytes)
{
    colli_coll_args_t a = {.coll = COLLI_COLL_ALL_GATHER,
                           .sendbuf = mine,
                           .recvbuf = all,
                           .count = bytes,
                           .dt = COLL_UINT8,
                           .op = COLL_SUM};
    coll_result_t status = colli_dev_drain(comm, "coll_comm_split");
    if (status != COLL_SUCCESS)
        return status;
    if (colli_p2p_outstanding(comm, true) > 0) /* freed ones: the all_gather completes them */
        return COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                         "rank %d: coll_comm_split on a communicator with %d coll_isend/coll_irecv "
                         "requests not complete: the split's messages would cross theirs. "
                         "Complete them first (coll_wait)",
                         comm->rank, colli_p2p_outstanding(comm, true));
    return colli_run_collective(comm, &a);
}

/* Does parent rank a come before b in the child ((key, parent rank) order)? */
static bool before(const split_req_t *req, int a, int b)
{
    return req[a].key != req[b].key ? req[a].key < req[b].key : a < b;
}

/* This rank's place among the ranks of its color: *newrank, *newsize, *leader (parent rank). */
static void place(const struct coll_comm *comm, const split_req_t *req, int *newrank, int *newsize,
                  int *leader)
{
    const int me = comm->rank, color = req[me].color;
    *newrank = 0;
    *newsize = 0;
    *leader = me;
    for (int q = 0; q < comm->nranks; q++) {
        if (req[q].color != color)
            continue;
        (*newsize)++;
        if (before(req, q, me))
            (*newrank)++;
        if (before(req, q, *leader))
            *leader = q;
    }
}

/* The leader of a color: a root for the child on this rank's data listener address. */
static coll_result_t start_root(struct coll_comm *comm, split_root_t *out, pthread_t *thread)
{
    uint8_t secret[16];
    coll_result_t status = colli_random_bytes(secret, sizeof(secret));
    if (status != COLL_SUCCESS)
        return status;
    struct sockaddr_storage addr = comm->members[comm->rank].addr, bound;
    if (addr.ss_family == AF_INET)
        ((struct sockaddr_in *)&addr)->sin_port = 0;
    else
        ((struct sockaddr_in6 *)&addr)->sin6_port = 0;
    status = colli_root_start(&addr, secret, comm->cfg.bootstrap_timeout, &bound, thread);
    if (status != COLL_SUCCESS)
        return status;
    memset(out, 0, sizeof(*out));
    out->valid = 1;
    out->family = bound.ss_family;
    if (bound.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&bound;
        out->port = ntohs(in->sin_port);
        memcpy(out->addr, &in->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&bound;
        out->port = ntohs(in6->sin6_port);
        memcpy(out->addr, &in6->sin6_addr, 16);
    }
    memcpy(out->secret, secret, sizeof(secret));
    return COLL_SUCCESS;
}

static void root_addr(const split_root_t *r, struct sockaddr_storage *out)
{
    memset(out, 0, sizeof(*out));
    if (r->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)out;
        in->sin_family = AF_INET;
        in->sin_port = htons(r->port);
        memcpy(&in->sin_addr, r->addr, 4);
    } else {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(r->port);
        memcpy(&in6->sin6_addr, r->addr, 16);
    }
}

static coll_result_t check_split_args(coll_comm_t handle, int color, coll_comm_t *out,
                                      struct coll_comm **comm)
{
    if (out == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_split: newcomm is NULL (pass a coll_comm_t to fill)");
    *out = NULL;
    coll_result_t status = colli_comm_lookup(handle, comm);
    if (status != COLL_SUCCESS)
        return status;
    if (color < COLL_SPLIT_NOCOLOR)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_split: color %d is negative; use a color >= 0, or "
                         "COLL_SPLIT_NOCOLOR (-1) for a rank that joins no new communicator",
                         color);
    return COLL_SUCCESS;
}

/* The new communicator of this rank's color, once the leaders' roots are known (roots[]). */
static coll_result_t create_child(struct coll_comm *comm, const split_root_t *roots, int color,
                                  int newrank, int newsize, int leader, coll_comm_t *newcomm)
{
    if (!roots[leader].valid)
        return COLLI_ERR(INIT, COLL_ERR_REMOTE,
                         "coll_comm_split: rank %d, the first rank of color %d, could not start "
                         "the new communicator's bootstrap (see its log)",
                         leader, color);
    colli_create_t c = {.nranks = newsize, .rank = newrank, .parent = comm};
    root_addr(&roots[leader], &c.root);
    memcpy(c.secret, roots[leader].secret, sizeof(c.secret));
    coll_info(INIT, "coll_comm_split: rank %d of %d is rank %d of %d in color %d", comm->rank,
              comm->nranks, newrank, newsize, color);
    return colli_comm_create(&c, newcomm);
}

/* A stopped parent (coll_comm_revoke, a shrink with COLL_SHRINK_ABORT) has no connections left
 * to exchange colors on, yet nccl.h lets a revoked communicator be split. Every rank first makes a
 * whole copy of it on fresh connections (a shrink that leaves nobody out: no exchange on the
 * parent), splits the copy, and drops it. Every rank of the parent must have stopped it: one
 * that has not waits in the parent's exchange and fails at its timeout. */
static coll_result_t split_stopped(coll_comm_t handle, int color, int key, coll_comm_t *newcomm)
{
    coll_comm_t copy = NULL;
    coll_info(INIT, "coll_comm_split: the communicator was stopped (revoked); splitting a fresh "
                    "copy of it");
    coll_result_t status = coll_comm_shrink(handle, NULL, 0, COLL_SHRINK_DEFAULT, &copy);
    if (status != COLL_SUCCESS)
        return status;
    status = coll_comm_split(copy, color, key, newcomm);
    char why[2048];
    snprintf(why, sizeof(why), "%s", colli_last_error());
    if (coll_comm_destroy(copy) != COLL_SUCCESS) /* the child is whole: only a warning */
        coll_warn(INIT, "coll_comm_split: dropping the copy of the stopped communicator: %s",
                  colli_last_error());
    if (status != COLL_SUCCESS)
        colli_set_last_error(why); /* the split's error, not the copy's destroy's */
    return status;
}

coll_result_t coll_comm_split(coll_comm_t handle, int color, int key, coll_comm_t *newcomm)
{
    struct coll_comm *comm;
    coll_result_t status = check_split_args(handle, color, newcomm, &comm);
    if (status != COLL_SUCCESS)
        return colli_group_note(status); /* in a group: fails it */
    if (colli_group_active()) { /* made at coll_group_end, with the group's other creations */
        const colli_group_child_t c = {.parent = handle, .color = color, .key = key};
        return colli_group_note(colli_group_enqueue_child(&c, newcomm));
    }
    if (__atomic_load_n(&comm->abort_req, __ATOMIC_ACQUIRE))
        return split_stopped(handle, color, key, newcomm);
    const int n = comm->nranks;
    split_req_t mine = {color, key}, *req = calloc((size_t)n, sizeof(*req));
    split_root_t root = {0}, *roots = calloc((size_t)n, sizeof(*roots));
    bool hosts_root = false;
    pthread_t root_thread;
    if (req == NULL || roots == NULL) {
        /* the others are told (the parent fails), instead of waiting in the gather for us */
        status = COLLI_ERR(INIT, COLL_ERR_SYSTEM, "coll_comm_split: out of memory");
        colli_comm_fail(comm, status, colli_last_error());
        goto out;
    }
    COLL_CHECK_GOTO(gather(comm, &mine, req, sizeof(mine)), out);
    int newrank = 0, newsize = 0, leader = comm->rank;
    place(comm, req, &newrank, &newsize, &leader);
    coll_result_t root_status = COLL_SUCCESS;
    if (color != COLL_SPLIT_NOCOLOR && leader == comm->rank) {
        root_status = start_root(comm, &root, &root_thread); /* a failure still gathers */
        hosts_root = root_status == COLL_SUCCESS;
    }
    COLL_CHECK_GOTO(gather(comm, &root, roots, sizeof(root)), out);
    if ((status = root_status) == COLL_SUCCESS && color != COLL_SPLIT_NOCOLOR)
        status = create_child(comm, roots, color, newrank, newsize, leader, newcomm);
out:
    /* on success the leader waits until its root answered every member (leaving earlier would
     * cut their answers off); otherwise the root finishes on its own */
    if (hosts_root)
        colli_root_finish(root_thread, status);
    free(req);
    free(roots);
    return status;
}
