/* Public entry points of the collectives and point-to-point calls: argument checks, group
 * deferral, running an op and turning a failure into the communicator's async error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"
#include "transport/transport.h"

const char *colli_coll_name(int coll)
{
    switch (coll) {
    case COLLI_COLL_ALL_REDUCE:
        return "all_reduce";
    case COLLI_COLL_BROADCAST:
        return "broadcast";
    case COLLI_COLL_REDUCE:
        return "reduce";
    case COLLI_COLL_ALL_GATHER:
        return "all_gather";
    case COLLI_COLL_REDUCE_SCATTER:
        return "reduce_scatter";
    case COLLI_COLL_ALL_TO_ALL:
        return "all_to_all";
    case COLLI_COLL_SEND_RECV:
        return "send/recv";
    default:
        return "unknown collective";
    }
}

enum { ITEM_COLL = 0, ITEM_SEND = 1, ITEM_RECV = 2 };

typedef struct {
    int kind;
    coll_comm_t handle;
    colli_coll_args_t a;
    int peer;
    int device;   /* the GPU of its buffers, -1 for host buffers */
    void *stream; /* device buffers: the caller's stream */
} group_item_t;

/* Group calls are per thread, as the API requires. */
static _Thread_local struct {
    int depth;
    group_item_t *items;
    int n, cap;
    coll_result_t deferred_error;
} group;

/* Take the communicator for one operation: rejects a failed or busy communicator. */
static coll_result_t op_begin(struct coll_comm *comm)
{
    if (comm->async_error != COLL_SUCCESS)
        return COLLI_ERR(COLL, comm->async_error,
                         "the communicator failed earlier and cannot be used (destroy or abort "
                         "it and create a new one): %s",
                         comm->async_msg);
    int expected = 0;
    if (!__atomic_compare_exchange_n(&comm->busy, &expected, 1, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "another thread is running an operation on this communicator; use one "
                         "thread per communicator at a time");
    colli_log_set_rank(comm->rank);
    return COLL_SUCCESS;
}

static coll_result_t op_end(struct coll_comm *comm, colli_op_t *op, coll_result_t status)
{
    if (status == COLL_SUCCESS && op != NULL)
        status = colli_op_run(op);
    if (status != COLL_SUCCESS && status != COLL_ERR_INVALID_ARGUMENT &&
        status != COLL_ERR_INVALID_USAGE)
        colli_comm_fail(comm, status, colli_last_error());
    if (op != NULL)
        colli_op_free(op);
    __atomic_store_n(&comm->busy, 0, __ATOMIC_RELEASE);
    colli_log_set_rank(-1);
    return status;
}

coll_result_t colli_run_collective(struct coll_comm *comm, const colli_coll_args_t *a)
{
    coll_result_t status = op_begin(comm);
    if (status != COLL_SUCCESS)
        return status;
    uint64_t seq = ++comm->coll_seq;
    if (a->count == 0)
        return op_end(comm, NULL, COLL_SUCCESS);
    bool direct = false;
    status = colli_direct_try(comm, a, seq, &direct);
    if (status != COLL_SUCCESS || direct)
        return op_end(comm, NULL, status);
    colli_op_t op;
    /* An all_reduce builds nothing while building (no local copies, no scratch): the op of the
     * last identical call runs again on the new buffers. */
    const colli_op_key_t key = {.valid = a->coll == COLLI_COLL_ALL_REDUCE && comm->nranks > 1,
                                .coll = a->coll,
                                .count = a->count,
                                .dt = a->dt,
                                .redop = a->op,
                                .root = a->root,
                                .sendbuf = a->sendbuf,
                                .recvbuf = a->recvbuf};
    colli_op_t *again = key.valid ? colli_op_reuse(comm, &key, seq) : NULL;
    if (again != NULL)
        return op_end(comm, again, COLL_SUCCESS);
    status = colli_op_init(&op, comm, colli_coll_name(a->coll), a->dt, a->op);
    if (status != COLL_SUCCESS)
        return op_end(comm, NULL, status);
    status = colli_build_collective(&op, a, seq);
    op.key = key;
    return op_end(comm, &op, status);
}

static coll_result_t dev_collective(struct coll_comm *comm, const colli_coll_args_t *a, int device,
                                    void *stream);

/* A collective queued in a group. */
static coll_result_t run_collective(const group_item_t *it)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(it->handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (it->device >= 0)
        return dev_collective(comm, &it->a, it->device, it->stream);
    if ((status = colli_dev_drain(comm, colli_coll_name(it->a.coll))) != COLL_SUCCESS)
        return status;
    return colli_run_collective(comm, &it->a);
}

static bool overlaps(const void *a, size_t alen, const void *b, size_t blen)
{
    uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
    return alen && blen && x < y + blen && y < x + alen;
}

/* Device or host buffers? *device: the GPU of the call's buffers, -1 for host buffers (sname:
 * what to call sendbuf in a message; send/recv passes its one buffer as sendbuf). Both
 * buffers a call uses are of one kind (and one GPU); a stream orders device buffers only. */
static coll_result_t check_memory(const char *fn, struct coll_comm *comm, const char *sname,
                                  const void *sendbuf, bool send_used, const void *recvbuf,
                                  bool recv_used, coll_stream_t stream, int *device)
{
    int ds = -1, dr = -1;
    /* one pointer query per distinct buffer (in place: one buffer) */
    const bool one = send_used && recv_used && sendbuf == recvbuf;
    bool s_dev = send_used && colli_dev_ptr(comm, sendbuf, &ds);
    bool r_dev = one ? (dr = ds, s_dev) : recv_used && colli_dev_ptr(comm, recvbuf, &dr);
    *device = s_dev ? ds : r_dev ? dr : -1;
    if ((s_dev || r_dev) && send_used && recv_used && (s_dev != r_dev || ds != dr)) {
        char sk[32], rk[32];
        snprintf(sk, sizeof(sk), s_dev ? "memory of GPU %d" : "host memory", ds);
        snprintf(rk, sizeof(rk), r_dev ? "memory of GPU %d" : "host memory", dr);
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: sendbuf %p is %s but recvbuf %p is %s: one call takes device "
                         "buffers of one GPU or host buffers, not a mix (copy one of them)",
                         fn, sendbuf, sk, recvbuf, rk);
    }
    if (*device < 0 && stream != NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s: stream is not NULL, but the buffers are host memory; pass NULL as "
                         "the stream for host buffers (streams order device buffers only)",
                         fn);
    /* without a GPU plugin, device memory of a CUDA process still gets a clear error; with one,
     * the plugin has answered already */
    coll_result_t status = COLL_SUCCESS;
    if (*device < 0 && comm->dev == NULL && comm->cu_ptr_attr != NULL) {
        if (send_used && (status = colli_check_host_buffer(comm, fn, sname, sendbuf)))
            return status;
        if (recv_used && !one && (status = colli_check_host_buffer(comm, fn, "recvbuf", recvbuf)))
            return status;
    }
    return COLL_SUCCESS;
}

/* Check everything that does not need the network; name the offending argument. */
static coll_result_t check_args(const char *fn, coll_comm_t handle, const colli_coll_args_t *a,
                                coll_stream_t stream, bool reduces, bool rooted,
                                struct coll_comm **comm_out, int *device)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    int n = comm->nranks, r = comm->rank;
    *comm_out = comm;
    *device = -1;
    if ((int)a->dt < 0 || a->dt >= COLL_NUM_DATATYPES)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: datatype %d is not a coll_datatype_t (0..%d)", fn, (int)a->dt,
                         COLL_NUM_DATATYPES - 1);
    if (reduces && ((int)a->op < 0 || a->op >= COLL_NUM_OPS))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: op %d is not a coll_op_t (0..%d)",
                         fn, (int)a->op, COLL_NUM_OPS - 1);
    if (rooted && (a->root < 0 || a->root >= n))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: root %d is out of range [0, %d)", fn,
                         a->root, n);
    bool send_used = !(a->coll == COLLI_COLL_BROADCAST && r != a->root);
    bool recv_used = !(a->coll == COLLI_COLL_REDUCE && r != a->root);
    if ((status = check_memory(fn, comm, "sendbuf", a->sendbuf, send_used, a->recvbuf, recv_used,
                               stream, device)) != COLL_SUCCESS)
        return status;
    size_t e = coll_datatype_size(a->dt);
    size_t mult = (a->coll == COLLI_COLL_ALL_GATHER || a->coll == COLLI_COLL_REDUCE_SCATTER ||
                   a->coll == COLLI_COLL_ALL_TO_ALL)
                      ? (size_t)n
                      : 1;
    if (a->count > SIZE_MAX / e / mult || a->count * e * mult > (SIZE_MAX >> 1))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: count %zu of %s overflows the addressable size", fn, a->count,
                         coll_datatype_name(a->dt));
    if (a->count == 0)
        return COLL_SUCCESS;
    if (send_used && a->sendbuf == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: sendbuf is NULL with count %zu", fn,
                         a->count);
    if (recv_used && a->recvbuf == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: recvbuf is NULL with count %zu", fn,
                         a->count);
    if (!send_used || !recv_used)
        return COLL_SUCCESS;
    size_t len[2];
    colli_buffer_sizes(a, n, r, len); /* both used here: neither is 0 */
    const size_t slen = len[0], rlen = len[1];
    const char *inplace_at = a->recvbuf;
    if (a->coll == COLLI_COLL_ALL_GATHER) {
        inplace_at = (const char *)a->recvbuf + (size_t)r * slen;
    } else if (a->coll == COLLI_COLL_REDUCE_SCATTER) {
        if (overlaps(a->sendbuf, slen, a->recvbuf, rlen) &&
            (const char *)a->sendbuf + (size_t)r * rlen != (const char *)a->recvbuf)
            goto partial;
        return COLL_SUCCESS;
    }
    if (overlaps(a->sendbuf, slen, a->recvbuf, rlen) && a->sendbuf != inplace_at &&
        !(a->coll == COLLI_COLL_ALL_TO_ALL && a->sendbuf == a->recvbuf))
        goto partial;
    return COLL_SUCCESS;
partial:
    return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                     "%s: sendbuf %p and recvbuf %p overlap without being the in-place layout "
                     "(identical buffers, or for all_gather sendbuf == recvbuf + rank*count, for "
                     "reduce_scatter recvbuf == sendbuf + rank*recvcount)",
                     fn, a->sendbuf, a->recvbuf);
}

static coll_result_t enqueue(int kind, coll_comm_t handle, const colli_coll_args_t *a, int peer,
                             int device, void *stream)
{
    if (group.n == group.cap) {
        int cap = group.cap ? group.cap * 2 : 16;
        group_item_t *n = realloc(group.items, (size_t)cap * sizeof(*n));
        if (n == NULL)
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory queueing a group operation");
        group.items = n;
        group.cap = cap;
    }
    group.items[group.n++] = (group_item_t){
        .kind = kind, .handle = handle, .a = *a, .peer = peer, .device = device, .stream = stream};
    return COLL_SUCCESS;
}

/* ---- device buffers: queued for the communicator's progress thread (device.c) ---- */

#define STAGE_ALIGN 64

/* A collective on device buffers: queued for the progress thread, which runs it through CUDA IPC
 * (device_ipc.c) or the chunk pipeline (device_pipe.c). */
static coll_result_t dev_collective(struct coll_comm *comm, const colli_coll_args_t *a, int device,
                                    void *stream)
{
    return colli_dev_submit(comm, colli_coll_name(a->coll), device, stream, NULL, 0, NULL, a,
                            sizeof(*a));
}

typedef struct {
    coll_comm_t handle;
    int n;
    group_item_t items[];
} staged_p2p_t;

static coll_result_t run_p2p_on(struct coll_comm *comm, coll_comm_t handle,
                                const group_item_t *items, int n);

static coll_result_t run_staged_p2p(struct coll_comm *comm, void *ctx)
{
    const staged_p2p_t *p = ctx;
    return run_p2p_on(comm, p->handle, p->items, p->n);
}

/* The sends and receives of one communicator in a group (or one alone) on device buffers: one
 * queued job; every item has its own staging range. */
static coll_result_t dev_p2p(struct coll_comm *comm, coll_comm_t handle, const group_item_t *items,
                             int n)
{
    int device = -1, mine = 0;
    void *stream = NULL;
    for (int i = 0; i < n; i++) {
        const group_item_t *it = &items[i];
        if (it->handle != handle || it->kind == ITEM_COLL)
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
    size_t ctx_size = sizeof(staged_p2p_t) + (size_t)mine * sizeof(group_item_t);
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
        const group_item_t *it = &items[i];
        if (it->handle != handle || it->kind == ITEM_COLL)
            continue;
        bool send = it->kind == ITEM_SEND;
        reg[k] = (colli_dev_region_t){.dev = send ? it->a.sendbuf : it->a.recvbuf,
                                      .bytes = it->a.count * coll_datatype_size(it->a.dt),
                                      .off = total,
                                      .in = send,
                                      .out = !send};
        total += (reg[k].bytes + STAGE_ALIGN - 1) & ~(size_t)(STAGE_ALIGN - 1);
        ctx->items[k++] = *it;
    }
    char *base = NULL;
    if ((status = colli_dev_staging(comm, total, &base)) != COLL_SUCCESS)
        goto out;
    for (int k = 0; k < mine; k++) {
        colli_coll_args_t *h = &ctx->items[k].a;
        if (ctx->items[k].kind == ITEM_SEND)
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

static coll_result_t collective(const char *fn, const colli_coll_args_t *a, coll_comm_t comm,
                                coll_stream_t stream, bool reduces, bool rooted)
{
    struct coll_comm *c;
    int device = -1;
    coll_result_t status = check_args(fn, comm, a, stream, reduces, rooted, &c, &device);
    if (status != COLL_SUCCESS)
        return status;
    if (group.depth > 0)
        return enqueue(ITEM_COLL, comm, a, -1, device, stream);
    if (device >= 0)
        return dev_collective(c, a, device, stream);
    if ((status = colli_dev_drain(c, fn)) != COLL_SUCCESS)
        return status;
    return colli_run_collective(c, a);
}

coll_result_t coll_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                              coll_datatype_t datatype, coll_op_t op, coll_comm_t comm,
                              coll_stream_t stream)
{
    colli_coll_args_t a = {COLLI_COLL_ALL_REDUCE, sendbuf, recvbuf, count, datatype, op, 0, NULL};
    return collective("coll_all_reduce", &a, comm, stream, true, false);
}

coll_result_t coll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                             coll_datatype_t datatype, int root, coll_comm_t comm,
                             coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_BROADCAST, sendbuf, recvbuf, count, datatype, COLL_SUM, root, NULL};
    return collective("coll_broadcast", &a, comm, stream, false, true);
}

coll_result_t coll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                          coll_datatype_t datatype, coll_op_t op, int root, coll_comm_t comm,
                          coll_stream_t stream)
{
    colli_coll_args_t a = {COLLI_COLL_REDUCE, sendbuf, recvbuf, count, datatype, op, root, NULL};
    return collective("coll_reduce", &a, comm, stream, true, true);
}

coll_result_t coll_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                              coll_datatype_t datatype, coll_comm_t comm, coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_ALL_GATHER, sendbuf, recvbuf, sendcount, datatype, COLL_SUM, 0, NULL};
    return collective("coll_all_gather", &a, comm, stream, false, false);
}

coll_result_t coll_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                  coll_datatype_t datatype, coll_op_t op, coll_comm_t comm,
                                  coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, datatype, op, 0, NULL};
    return collective("coll_reduce_scatter", &a, comm, stream, true, false);
}

coll_result_t coll_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
                              coll_datatype_t datatype, coll_comm_t comm, coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_ALL_TO_ALL, sendbuf, recvbuf, count, datatype, COLL_SUM, 0, NULL};
    return collective("coll_all_to_all", &a, comm, stream, false, false);
}

/* ---- point-to-point and groups ---- */

static coll_result_t run_p2p(coll_comm_t handle, const group_item_t *items, int n);

static coll_result_t p2p(const char *fn, int kind, void *buf, size_t count, coll_datatype_t dt,
                         int peer, coll_comm_t handle, coll_stream_t stream)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if ((int)dt < 0 || dt >= COLL_NUM_DATATYPES)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: datatype %d is not a coll_datatype_t (0..%d)", fn, (int)dt,
                         COLL_NUM_DATATYPES - 1);
    if (peer < 0 || peer >= comm->nranks)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: peer %d is out of range [0, %d)", fn,
                         peer, comm->nranks);
    int device = -1;
    if ((status = check_memory(fn, comm, "buffer", buf, true, NULL, false, stream, &device)) !=
        COLL_SUCCESS)
        return status;
    if (count > (SIZE_MAX >> 1) / coll_datatype_size(dt))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: count %zu of %s overflows the addressable size", fn, count,
                         coll_datatype_name(dt));
    if (count > 0 && buf == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: buffer is NULL with count %zu", fn,
                         count);
    colli_coll_args_t a = {COLLI_COLL_SEND_RECV,
                           kind == ITEM_SEND ? buf : NULL,
                           kind == ITEM_RECV ? buf : NULL,
                           count,
                           dt,
                           COLL_SUM,
                           -1,
                           NULL};
    if (group.depth > 0)
        return enqueue(kind, handle, &a, peer, device, stream);
    if (peer == comm->rank)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s to itself (rank %d) outside a group would never complete; put the "
                         "send and the matching recv inside coll_group_start/coll_group_end",
                         fn, peer);
    group_item_t it = {
        .kind = kind, .handle = handle, .a = a, .peer = peer, .device = device, .stream = stream};
    if (device >= 0)
        return dev_p2p(comm, handle, &it, 1);
    return run_p2p(handle, &it, 1);
}

coll_result_t coll_send(const void *sendbuf, size_t count, coll_datatype_t datatype, int peer,
                        coll_comm_t comm, coll_stream_t stream)
{
    return p2p("coll_send", ITEM_SEND, (void *)sendbuf, count, datatype, peer, comm, stream);
}

coll_result_t coll_recv(void *recvbuf, size_t count, coll_datatype_t datatype, int peer,
                        coll_comm_t comm, coll_stream_t stream)
{
    return p2p("coll_recv", ITEM_RECV, recvbuf, count, datatype, peer, comm, stream);
}

/* Run the point-to-point items of one communicator (in issue order) as one op, so that they
 * progress concurrently. Self sends and receives are matched in order by local copies. */
static coll_result_t run_p2p(coll_comm_t handle, const group_item_t *items, int n)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    for (int i = 0; i < n; i++)
        if (items[i].handle == handle && items[i].kind != ITEM_COLL && items[i].device >= 0)
            return dev_p2p(comm, handle, items, n);
    if ((status = colli_dev_drain(comm, "send/recv")) != COLL_SUCCESS)
        return status;
    return run_p2p_on(comm, handle, items, n);
}

static coll_result_t run_p2p_on(struct coll_comm *comm, coll_comm_t handle,
                                const group_item_t *items, int n)
{
    coll_result_t status = op_begin(comm);
    if (status != COLL_SUCCESS)
        return status;
    colli_op_t op;
    status = colli_op_init(&op, comm, "send/recv", COLL_INT8, COLL_SUM);
    if (status != COLL_SUCCESS)
        return op_end(comm, NULL, status);
    int self_sends = 0, self_recvs = 0;
    for (int i = 0; i < n; i++) {
        const group_item_t *it = &items[i];
        if (it->handle != handle || it->kind == ITEM_COLL)
            continue;
        if (it->peer == comm->rank) {
            /* the j-th self send pairs with the j-th self recv */
            int j = it->kind == ITEM_SEND ? self_sends++ : self_recvs++;
            int want = it->kind == ITEM_SEND ? ITEM_RECV : ITEM_SEND, seen = 0;
            for (int k = 0; k < n && it->kind == ITEM_SEND; k++) {
                const group_item_t *o = &items[k];
                if (o->handle != handle || o->kind != want || o->peer != comm->rank)
                    continue;
                if (seen++ != j)
                    continue;
                if (o->a.count != it->a.count || o->a.dt != it->a.dt) {
                    status = COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                                       "send to self of %zu x %s does not match the recv from "
                                       "self of %zu x %s",
                                       it->a.count, coll_datatype_name(it->a.dt), o->a.count,
                                       coll_datatype_name(o->a.dt));
                    goto out;
                }
                memmove(o->a.recvbuf, it->a.sendbuf, it->a.count * coll_datatype_size(it->a.dt));
            }
            continue;
        }
        const size_t e = coll_datatype_size(it->a.dt), ce = colli_chunk_elems(comm, e);
        const bool send = it->kind == ITEM_SEND;
        uint64_t seq = send ? comm->p2p_send_seq[it->peer]++ : comm->p2p_recv_seq[it->peer]++;
        colli_op_add_fp(&op, COLLI_COLL_SEND_RECV, it->a.dt, COLL_SUM, -1, it->a.count, seq);
        colli_op_reset_msg(&op, it->peer, send);
        size_t off = 0;
        do { /* a zero-length message still sends its header, so mismatches are caught */
            size_t len = it->a.count - off < ce ? it->a.count - off : ce;
            if (send)
                colli_op_send(&op, it->peer, (const char *)it->a.sendbuf + off * e, len * e,
                              COLLI_NO_DEP);
            else
                colli_op_recv(&op, it->peer, (char *)it->a.recvbuf + off * e, len * e,
                              COLLI_NO_DEP);
            off += len;
        } while (off < it->a.count);
    }
    if (self_sends != self_recvs)
        status = COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                           "rank %d: %d sends to itself but %d receives from itself in one group; "
                           "each send to self needs a matching recv in the same group",
                           comm->rank, self_sends, self_recvs);
out:
    if (status != COLL_SUCCESS) {
        colli_op_free(&op);
        return op_end(comm, NULL, status);
    }
    return op_end(comm, &op, status);
}

coll_result_t coll_group_start(void)
{
    group.depth++;
    return COLL_SUCCESS;
}

coll_result_t coll_group_end(void)
{
    if (group.depth == 0)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "coll_group_end without a matching coll_group_start");
    if (--group.depth > 0)
        return COLL_SUCCESS;
    coll_result_t status = COLL_SUCCESS;
    /* Collectives first, in issue order; then each communicator's sends and receives as one
     * concurrent operation. */
    for (int i = 0; i < group.n && status == COLL_SUCCESS; i++)
        if (group.items[i].kind == ITEM_COLL)
            status = run_collective(&group.items[i]);
    for (int i = 0; i < group.n && status == COLL_SUCCESS; i++) {
        if (group.items[i].kind == ITEM_COLL)
            continue;
        bool first = true;
        for (int k = 0; k < i; k++)
            if (group.items[k].kind != ITEM_COLL && group.items[k].handle == group.items[i].handle)
                first = false;
        if (first)
            status = run_p2p(group.items[i].handle, group.items, group.n);
    }
    free(group.items);
    group.items = NULL;
    group.n = group.cap = 0;
    return status;
}
