/* Running checked calls: host buffers through algo/run.c, device buffers queued for the
 * communicator's progress thread (device/), which stages them and runs the host call. */
#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"

coll_result_t colli_dispatch_collective(struct coll_comm *comm, const colli_item_t *it)
{
    const colli_coll_args_t *a = &it->a;
    const bool reduces = a->coll == COLLI_COLL_ALL_REDUCE || a->coll == COLLI_COLL_REDUCE ||
                         a->coll == COLLI_COLL_REDUCE_SCATTER;
    if (it->device >= 0 && reduces && it->pm.used)
        return colli_premul_dev(comm, it); /* staged through host memory */
    if (it->device >= 0) /* CUDA IPC or the chunk pipeline, on the progress thread */
        return colli_dev_submit(comm, colli_coll_name(a->coll), it->device, it->stream, NULL, 0,
                                NULL, a, sizeof(*a));
    coll_result_t status = colli_dev_drain(comm, colli_coll_name(a->coll));
    if (status != COLL_SUCCESS)
        return status;
    if (it->pm.used) /* a PreMulSum, or (any collective) an input to copy first */
        return colli_premul_run(comm, it);
    return colli_run_collective(comm, a);
}

static bool is_p2p_of(const colli_item_t *it, coll_comm_t handle)
{
    return it->handle == handle && it->kind != COLLI_ITEM_COLL;
}

/* The sends and receives of handle, as algo/ takes them. */
static coll_result_t run_host_p2p(struct coll_comm *comm, coll_comm_t handle,
                                  const colli_item_t *items, int n)
{
    colli_p2p_t few[16] = {{0}}; /* a lone send or recv, or a small group: no allocation */
    colli_p2p_t *msgs = n <= 16 ? few : malloc((size_t)n * sizeof(*msgs));
    if (msgs == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory running send/recv");
    int k = 0;
    for (int i = 0; i < n; i++) {
        const colli_item_t *it = &items[i];
        if (!is_p2p_of(it, handle))
            continue;
        const bool send = it->kind == COLLI_ITEM_SEND;
        msgs[k++] = (colli_p2p_t){.send = send,
                                  .peer = it->peer,
                                  .buf = send ? (void *)it->a.sendbuf : it->a.recvbuf,
                                  .count = it->a.count,
                                  .dt = it->a.dt,
                                  .tag = it->tag};
    }
    coll_result_t status = colli_run_p2p(comm, msgs, k);
    if (msgs != few)
        free(msgs);
    return status;
}

typedef struct {
    coll_comm_t handle;
    int n;
    colli_item_t items[];
} staged_p2p_t;

static coll_result_t run_staged_p2p(struct coll_comm *comm, void *ctx)
{
    const staged_p2p_t *p = ctx;
    return run_host_p2p(comm, p->handle, p->items, p->n);
}

/* The sends and receives of one communicator in a group (or one alone) on device buffers: one
 * queued job; every item has its own staging range. */
static coll_result_t dev_p2p(struct coll_comm *comm, coll_comm_t handle, const colli_item_t *items,
                             int n)
{
    int device = -1, mine = 0;
    void *stream = NULL;
    for (int i = 0; i < n; i++) {
        const colli_item_t *it = &items[i];
        if (!is_p2p_of(it, handle))
            continue;
        if (mine++ == 0) {
            device = it->device;
            stream = it->stream;
        } else if (it->device != device || it->stream != stream) {
            return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                             "sends and receives of one communicator in a group mix host and "
                             "device buffers, GPUs or streams (buffers on %s %d and %s %d, "
                             "streams %p and %p): give them one kind of memory and one stream",
                             device < 0 ? "host" : "GPU", device, it->device < 0 ? "host" : "GPU",
                             it->device, stream, it->stream);
        }
    }
    size_t ctx_size = sizeof(staged_p2p_t) + (size_t)mine * sizeof(colli_item_t);
    staged_p2p_t *ctx = malloc(ctx_size);
    colli_dev_region_t *reg = calloc((size_t)mine + 1, sizeof(*reg));
    coll_result_t status = COLL_SUCCESS;
    if (ctx == NULL || reg == NULL) {
        status = COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory queueing send/recv");
        goto out;
    }
    ctx->handle = handle;
    ctx->n = mine;
    size_t total = 0;
    for (int i = 0, k = 0; i < n; i++) {
        const colli_item_t *it = &items[i];
        if (!is_p2p_of(it, handle))
            continue;
        bool send = it->kind == COLLI_ITEM_SEND;
        reg[k] = (colli_dev_region_t){.dev = send ? it->a.sendbuf : it->a.recvbuf,
                                      .bytes = it->a.count * coll_datatype_size(it->a.dt),
                                      .off = total,
                                      .in = send,
                                      .out = !send};
        total += colli_stage_span(reg[k].bytes);
        ctx->items[k++] = *it;
    }
    char *base = NULL;
    if ((status = colli_dev_staging(comm, total, &base)) != COLL_SUCCESS)
        goto out;
    for (int k = 0; k < mine; k++) {
        colli_coll_args_t *h = &ctx->items[k].a;
        if (ctx->items[k].kind == COLLI_ITEM_SEND)
            h->sendbuf = base + reg[k].off;
        else
            h->recvbuf = base + reg[k].off;
    }
    status = colli_dev_submit(comm, "send/recv", device, stream, reg, mine, run_staged_p2p, ctx,
                              ctx_size);
out:
    free(ctx);
    free(reg);
    return status;
}

coll_result_t colli_dispatch_p2p(coll_comm_t handle, const colli_item_t *items, int n)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    for (int i = 0; i < n; i++)
        if (is_p2p_of(&items[i], handle) && items[i].device >= 0)
            return dev_p2p(comm, handle, items, n);
    if ((status = colli_dev_drain(comm, "send/recv")) != COLL_SUCCESS)
        return status;
    return run_host_p2p(comm, handle, items, n);
}
