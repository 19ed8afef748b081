/* Public entry points of the collectives and point-to-point calls: argument checks that name
 * the offending argument, then the call queued in the caller's group or run now (dispatch.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

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
    /* one query per distinct buffer (in place: one buffer) */
    const bool one = send_used && recv_used && sendbuf == recvbuf;
    colli_buf_kind_t sk = send_used ? colli_dev_locate(comm, sendbuf, &ds) : COLLI_BUF_HOST;
    colli_buf_kind_t rk = one         ? (dr = ds, sk)
                          : recv_used ? colli_dev_locate(comm, recvbuf, &dr)
                                      : COLLI_BUF_HOST;
    const bool s_dev = sk == COLLI_BUF_DEVICE, r_dev = rk == COLLI_BUF_DEVICE;
    *device = s_dev ? ds : r_dev ? dr : -1;
    if ((s_dev || r_dev) && send_used && recv_used && (s_dev != r_dev || ds != dr)) {
        char sdesc[32], rdesc[32];
        snprintf(sdesc, sizeof(sdesc), s_dev ? "memory of GPU %d" : "host memory", ds);
        snprintf(rdesc, sizeof(rdesc), r_dev ? "memory of GPU %d" : "host memory", dr);
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: sendbuf %p is %s but recvbuf %p is %s: one call takes device "
                         "buffers of one GPU or host buffers, not a mix (copy one of them)",
                         fn, sendbuf, sdesc, recvbuf, rdesc);
    }
    if (*device < 0 && stream != NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s: stream is not NULL, but the buffers are host memory; pass NULL as "
                         "the stream for host buffers (streams order device buffers only)",
                         fn);
    /* device memory that no GPU plugin moves: a clear error instead of a crash */
    if (sk == COLLI_BUF_FOREIGN)
        return colli_dev_refuse_foreign(fn, sname, sendbuf);
    if (rk == COLLI_BUF_FOREIGN && !one)
        return colli_dev_refuse_foreign(fn, "recvbuf", recvbuf);
    return COLL_SUCCESS;
}

/* Check everything that does not need the network; name the offending argument. */
static coll_result_t check_args(const char *fn, coll_comm_t handle, const colli_coll_args_t *a,
                                coll_stream_t stream, bool reduces, bool rooted,
                                struct coll_comm **comm_out, int *device, struct colli_premul *pm)
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
    const bool premul = reduces && (int)a->op >= COLL_NUM_OPS;
    if (reduces && (int)a->op < 0)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: op %d is not a coll_op_t (0..%d)",
                         fn, (int)a->op, COLL_NUM_OPS - 1);
    if (rooted && (a->root < 0 || a->root >= n))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: root %d is out of range [0, %d)", fn,
                         a->root, n);
    if (premul && (status = colli_premul_check(comm, fn, a, pm)) != COLL_SUCCESS)
        return status;
    if (reduces && !premul)
        (void)colli_premul_avg(comm, a, pm);
    if (a->count == 0) /* nothing to move: the caller does nothing (buffers may be NULL) */
        return COLL_SUCCESS;
    bool send_used = !(a->coll == COLLI_COLL_BROADCAST && r != a->root);
    bool recv_used = !(a->coll == COLLI_COLL_REDUCE && r != a->root);
    if ((status = check_memory(fn, comm, "sendbuf", a->sendbuf, send_used, a->recvbuf, recv_used,
                               stream, device)) != COLL_SUCCESS)
        return status;
    if (premul && pm->on_device && *device != pm->device) {
        char where[32];
        snprintf(where, sizeof(where), *device < 0 ? "host memory" : "on GPU %d", *device);
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s: PreMulSum operator %d reads its scalar from memory of GPU %d, but "
                         "this call's buffers are %s: a scalar in GPU memory is read by that "
                         "GPU, for calls on its buffers (make the operator with a host scalar "
                         "for the others)",
                         fn, (int)a->op, pm->device, where);
    }
    size_t e = coll_datatype_size(a->dt);
    size_t mult = (a->coll == COLLI_COLL_ALL_GATHER || a->coll == COLLI_COLL_REDUCE_SCATTER ||
                   a->coll == COLLI_COLL_ALL_TO_ALL)
                      ? (size_t)n
                      : 1;
    if (a->count > SIZE_MAX / e / mult || a->count * e * mult > (SIZE_MAX >> 1))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: count %zu of %s overflows the addressable size", fn, a->count,
                         coll_datatype_name(a->dt));
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
    /* NCCL runs such a call (Horovod's fused uneven reduce_scatter makes one, a reduce whose
     * root's blocks are packed): its input is copied first, where kcoll can copy it (host
     * buffers, and a reduction's on a GPU, through the scale kernel's scratch) */
    if (*device < 0 || reduces) {
        if (!pm->used)
            colli_premul_copy(a, pm);
        return COLL_SUCCESS;
    }
    return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                     "%s: sendbuf %p and recvbuf %p on GPU %d overlap without being the in-place "
                     "layout (identical buffers, or for all_gather sendbuf == recvbuf + "
                     "rank*count); use separate buffers or the in-place layout",
                     fn, a->sendbuf, a->recvbuf, *device);
}

static coll_result_t collective(const char *fn, const colli_coll_args_t *a, coll_comm_t comm,
                                coll_stream_t stream, bool reduces, bool rooted)
{
    struct coll_comm *c;
    int device = -1;
    struct colli_premul pm = {0};
    coll_result_t status = check_args(fn, comm, a, stream, reduces, rooted, &c, &device, &pm);
    /* count 0: a no-op on every rank, as in NCCL (an empty tensor's data pointer is NULL, and
     * nothing is put on the stream) */
    if (status != COLL_SUCCESS || a->count == 0)
        return status;
    const colli_item_t it = {.kind = COLLI_ITEM_COLL,
                             .handle = comm,
                             .a = *a,
                             .peer = -1,
                             .device = device,
                             .stream = stream,
                             .pm = pm};
    if (colli_group_active())
        return colli_group_enqueue(&it);
    return colli_dispatch_collective(c, &it);
}

coll_result_t coll_all_reduce(const void *sendbuf, void *recvbuf, size_t count,
                              coll_datatype_t datatype, coll_op_t op, coll_comm_t comm,
                              coll_stream_t stream)
{
    colli_coll_args_t a = {COLLI_COLL_ALL_REDUCE, sendbuf, recvbuf, count, datatype, op, 0, NULL};
    return colli_group_note(collective("coll_all_reduce", &a, comm, stream, true, false));
}

coll_result_t coll_broadcast(const void *sendbuf, void *recvbuf, size_t count,
                             coll_datatype_t datatype, int root, coll_comm_t comm,
                             coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_BROADCAST, sendbuf, recvbuf, count, datatype, COLL_SUM, root, NULL};
    return colli_group_note(collective("coll_broadcast", &a, comm, stream, false, true));
}

coll_result_t coll_reduce(const void *sendbuf, void *recvbuf, size_t count,
                          coll_datatype_t datatype, coll_op_t op, int root, coll_comm_t comm,
                          coll_stream_t stream)
{
    colli_coll_args_t a = {COLLI_COLL_REDUCE, sendbuf, recvbuf, count, datatype, op, root, NULL};
    return colli_group_note(collective("coll_reduce", &a, comm, stream, true, true));
}

coll_result_t coll_all_gather(const void *sendbuf, void *recvbuf, size_t sendcount,
                              coll_datatype_t datatype, coll_comm_t comm, coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_ALL_GATHER, sendbuf, recvbuf, sendcount, datatype, COLL_SUM, 0, NULL};
    return colli_group_note(collective("coll_all_gather", &a, comm, stream, false, false));
}

coll_result_t coll_reduce_scatter(const void *sendbuf, void *recvbuf, size_t recvcount,
                                  coll_datatype_t datatype, coll_op_t op, coll_comm_t comm,
                                  coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_REDUCE_SCATTER, sendbuf, recvbuf, recvcount, datatype, op, 0, NULL};
    return colli_group_note(collective("coll_reduce_scatter", &a, comm, stream, true, false));
}

coll_result_t coll_all_to_all(const void *sendbuf, void *recvbuf, size_t count,
                              coll_datatype_t datatype, coll_comm_t comm, coll_stream_t stream)
{
    colli_coll_args_t a = {
        COLLI_COLL_ALL_TO_ALL, sendbuf, recvbuf, count, datatype, COLL_SUM, 0, NULL};
    return colli_group_note(collective("coll_all_to_all", &a, comm, stream, false, false));
}

/* ---- point-to-point and groups ---- */

/* req: a coll_isend/coll_irecv's request (NULL: the blocking call) */
static coll_result_t p2p(const char *fn, int kind, void *buf, size_t count, coll_datatype_t dt,
                         int peer, int tag, coll_comm_t handle, coll_stream_t stream,
                         coll_request_t *req)
{
    struct coll_comm *comm;
    if (req != NULL)
        *req = NULL;
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
    /* count 0 on both sides (a send's count is its recv's): nothing to match or move, on any
     * stream (an empty tensor's data pointer is NULL; a zero split of an all_to_all_v) */
    int device = -1;
    if (count == 0 && req == NULL)
        return COLL_SUCCESS;
    if (count > 0 && (status = check_memory(fn, comm, "buffer", buf, true, NULL, false, stream,
                                            &device)) != COLL_SUCCESS)
        return status;
    if (count > (SIZE_MAX >> 1) / coll_datatype_size(dt))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: count %zu of %s overflows the addressable size", fn, count,
                         coll_datatype_name(dt));
    if (buf == NULL && count > 0)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: buffer is NULL with count %zu", fn,
                         count);
    colli_coll_args_t a = {COLLI_COLL_SEND_RECV,
                           kind == COLLI_ITEM_SEND ? buf : NULL,
                           kind == COLLI_ITEM_RECV ? buf : NULL,
                           count,
                           dt,
                           COLL_SUM,
                           -1,
                           NULL};
    const colli_item_t it = {.kind = kind,
                             .handle = handle,
                             .a = a,
                             .peer = peer,
                             .tag = tag,
                             .device = device,
                             .stream = stream};
    if (req != NULL)
        return colli_request_start(comm, &it, req);
    if (colli_group_active())
        return colli_group_enqueue(&it);
    if (peer == comm->rank)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s to itself (rank %d) outside a group would never complete; put the "
                         "send and the matching recv inside coll_group_start/coll_group_end",
                         fn, peer);
    return colli_dispatch_p2p(handle, &it, 1);
}

coll_result_t coll_send(const void *sendbuf, size_t count, coll_datatype_t datatype, int peer,
                        coll_comm_t comm, coll_stream_t stream)
{
    return colli_group_note(p2p("coll_send", COLLI_ITEM_SEND, (void *)sendbuf, count, datatype,
                                peer, 0, comm, stream, NULL));
}

coll_result_t coll_recv(void *recvbuf, size_t count, coll_datatype_t datatype, int peer,
                        coll_comm_t comm, coll_stream_t stream)
{
    return colli_group_note(
        p2p("coll_recv", COLLI_ITEM_RECV, recvbuf, count, datatype, peer, 0, comm, stream, NULL));
}

coll_result_t coll_send_tagged(const void *sendbuf, size_t count, coll_datatype_t datatype,
                               int peer, int tag, coll_comm_t comm, coll_stream_t stream)
{
    return colli_group_note(p2p("coll_send_tagged", COLLI_ITEM_SEND, (void *)sendbuf, count,
                                datatype, peer, tag, comm, stream, NULL));
}

coll_result_t coll_recv_tagged(void *recvbuf, size_t count, coll_datatype_t datatype, int peer,
                               int tag, coll_comm_t comm, coll_stream_t stream)
{
    return colli_group_note(p2p("coll_recv_tagged", COLLI_ITEM_RECV, recvbuf, count, datatype, peer,
                                tag, comm, stream, NULL));
}

coll_result_t coll_isend(const void *sendbuf, size_t count, coll_datatype_t datatype, int peer,
                         int tag, coll_comm_t comm, coll_request_t *request)
{
    if (request == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "coll_isend: request is NULL");
    return p2p("coll_isend", COLLI_ITEM_SEND, (void *)sendbuf, count, datatype, peer, tag, comm,
               NULL, request);
}

coll_result_t coll_irecv(void *recvbuf, size_t count, coll_datatype_t datatype, int peer, int tag,
                         coll_comm_t comm, coll_request_t *request)
{
    if (request == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "coll_irecv: request is NULL");
    return p2p("coll_irecv", COLLI_ITEM_RECV, recvbuf, count, datatype, peer, tag, comm, NULL,
               request);
}
