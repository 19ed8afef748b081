/* coll_comm_shrink: the surviving ranks of a communicator form a new one without the excluded
 * (possibly dead) ranks, with no unique id and no exchange on the parent: every survivor derives
 * the same new secret from the parent's (and the shrink's number and list), and the lowest
 * survivor serves the bootstrap root on its own data listener, whose address every member already
 * knows. A survivor whose connection the parent's transport took first (and dropped as a stranger)
 * connects again (colli_create_t.shared_root). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/util.h"
#include "bootstrap/bootstrap.h"
#include "core/core.h"
#include "transport/transport.h"

static coll_result_t check_list(const struct coll_comm *comm, const int *exclude, int nexclude,
                                bool *excluded)
{
    const int n = comm->nranks;
    if (nexclude < 0 || nexclude >= n || (nexclude > 0 && exclude == NULL))
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_shrink: %d excluded ranks of %d%s: at least this rank must "
                         "remain",
                         nexclude, n, nexclude > 0 && exclude == NULL ? " with a NULL list" : "");
    for (int i = 0; i < nexclude; i++) {
        const int r = exclude[i];
        if (r < 0 || r >= n)
            return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                             "coll_comm_shrink: excluded rank %d is out of range [0, %d)", r, n);
        if (excluded[r])
            return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                             "coll_comm_shrink: rank %d is listed twice", r);
        excluded[r] = true;
    }
    if (excluded[comm->rank])
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_shrink: this rank (%d) is in the exclude list; only the ranks "
                         "that remain call it (an excluded rank destroys or aborts its "
                         "communicator)",
                         comm->rank);
    return COLL_SUCCESS;
}

/* The new communicator's secret: the parent's, keyed over the shrink's number, then over the
 * list (one byte per parent rank). Every survivor computes the same, with no allocation. */
static void derive_secret(const struct coll_comm *comm, uint32_t epoch, const bool *excluded,
                          uint8_t out[16])
{
    uint8_t head[20] = "kcoll-shrink-v1", key[16];
    memcpy(head + 16, &epoch, 4);
    colli_siphash128(comm->secret, head, sizeof(head), key);
    colli_siphash128(key, excluded, (size_t)comm->nranks * sizeof(bool), out);
}

static coll_result_t shrink(coll_comm_t handle, const int *exclude, int nexclude, int flags,
                            coll_comm_t *newcomm)
{
    if (newcomm == NULL)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_shrink: newcomm is NULL (pass a coll_comm_t to fill)");
    *newcomm = NULL;
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if ((flags & ~COLL_SHRINK_ABORT) != 0)
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "coll_comm_shrink: flags 0x%x: only COLL_SHRINK_DEFAULT (0) and "
                         "COLL_SHRINK_ABORT (1) exist",
                         (unsigned)flags);
    bool *excluded = calloc((size_t)comm->nranks, sizeof(bool));
    if (excluded == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "coll_comm_shrink: out of memory");
    status = check_list(comm, exclude, nexclude, excluded);
    if (status != COLL_SUCCESS)
        goto out;
    if (colli_group_active()) { /* made at coll_group_end, with the group's other creations */
        const colli_group_child_t c = {.parent = handle,
                                       .shrink = true,
                                       .exclude = exclude,
                                       .nexclude = nexclude,
                                       .flags = flags};
        status = colli_group_enqueue_child(&c, newcomm);
        goto out;
    }
    if (flags & COLL_SHRINK_ABORT) {
        char why[128];
        snprintf(why, sizeof(why), "rank %d shrank the communicator with COLL_SHRINK_ABORT",
                 comm->rank);
        if ((status = colli_comm_stop(comm, why, NULL)) != COLL_SUCCESS)
            goto out;
    } else if (__atomic_load_n(&comm->busy, __ATOMIC_ACQUIRE)) {
        status = COLLI_ERR(INIT, COLL_ERR_INVALID_USAGE,
                           "coll_comm_shrink: an operation is running on this communicator in "
                           "another thread; wait for it, or pass COLL_SHRINK_ABORT");
        goto out;
    }
    int leader = -1, newrank = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (excluded[r])
            continue;
        if (leader < 0)
            leader = r;
        if (r < comm->rank)
            newrank++;
    }
    colli_create_t c = {.nranks = comm->nranks - nexclude,
                        .rank = newrank,
                        .root = comm->members[leader].addr,
                        .parent = comm,
                        .shared_root = true};
    derive_secret(comm, ++comm->shrink_epoch, excluded, c.secret);
    pthread_t root;
    bool hosts_root = false;
    if (leader == comm->rank) {
        int fd = colli_tp_listener_fd(comm);
        if (fd < 0) {
            status = COLLI_ERR(INIT, COLL_ERR_INTERNAL,
                               "coll_comm_shrink: this rank has no listener to serve the new "
                               "communicator's bootstrap from");
            goto out;
        }
        if ((status = colli_root_start_on(fd, c.secret, comm->cfg.bootstrap_timeout, &root)) !=
            COLL_SUCCESS)
            goto out;
        hosts_root = true;
    }
    coll_info(INIT,
              "coll_comm_shrink: rank %d of %d is rank %d of %d (%d excluded, root at rank %d)",
              comm->rank, comm->nranks, newrank, c.nranks, nexclude, leader);
    status = colli_comm_create(&c, newcomm);
    if (hosts_root)
        colli_root_finish(root, status);
out:
    free(excluded);
    return status;
}

coll_result_t coll_comm_shrink(coll_comm_t handle, const int *exclude, int nexclude, int flags,
                               coll_comm_t *newcomm)
{
    return colli_group_note(shrink(handle, exclude, nexclude, flags, newcomm)); /* in a group */
}
