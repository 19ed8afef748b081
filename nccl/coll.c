/* NCCL's collectives, point-to-point calls and groups on kcoll's: datatypes and reduction
 * operators translated, gather and scatter as grouped sends and receives (as NCCL builds them),
 * streams passed through (device buffers are ordered on them; host buffers take a NULL stream). */
#include <stdint.h>

#include "nccl_compat.h"

static ncclResult_t redop(ncclRedOp_t op, const char *fn, coll_op_t *out)
{
    switch (op) {
    case ncclSum:
        *out = COLL_SUM;
        return ncclSuccess;
    case ncclProd:
        *out = COLL_PROD;
        return ncclSuccess;
    case ncclMax:
        *out = COLL_MAX;
        return ncclSuccess;
    case ncclMin:
        *out = COLL_MIN;
        return ncclSuccess;
    case ncclAvg:
        *out = COLL_AVG;
        return ncclSuccess;
    default:
        /* an operator of ncclRedOpCreatePreMulSum: the same number in kcoll, which checks that
         * the communicator holds it */
        if ((int)op >= (int)ncclNumOps && (int)op < (int)ncclMaxRedOp) {
            *out = (coll_op_t)op;
            return ncclSuccess;
        }
        return nccl_error(ncclInvalidArgument,
                          "%s: reduction operator %d is not ncclSum, ncclProd, ncclMax, ncclMin, "
                          "ncclAvg or one made by ncclRedOpCreatePreMulSum",
                          fn, (int)op);
    }
}

_Static_assert((int)ncclNumOps == (int)COLL_NUM_OPS,
               "PreMulSum operators are numbered from ncclNumOps in NCCL, COLL_NUM_OPS in kcoll");

/* The kcoll communicator, datatype and (for reductions) operator of a call. */
static ncclResult_t args(ncclComm_t comm, ncclDataType_t dt, const ncclRedOp_t *op, const char *fn,
                         coll_comm_t *c, coll_datatype_t *kdt, coll_op_t *kop)
{
    ncclResult_t rc = nccl_comm(comm, fn, c);
    if (rc == ncclSuccess && __atomic_load_n(&comm->revoked, __ATOMIC_ACQUIRE))
        rc = nccl_error(ncclInvalidUsage,
                        "%s: the communicator was revoked (ncclCommRevoke): only ncclCommSplit, "
                        "ncclCommShrink, ncclCommDestroy and ncclCommAbort remain",
                        fn);
    if (rc == ncclSuccess)
        rc = nccl_datatype(dt, fn, kdt);
    if (rc == ncclSuccess && op != NULL)
        rc = redop(*op, fn, kop);
    return rc;
}

KCOLL_NCCL_API ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                          ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                          cudaStream_t stream)
{
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    coll_op_t kop = COLL_SUM;
    ncclResult_t rc = args(comm, datatype, &op, "ncclAllReduce", &c, &dt, &kop);
    return rc != ncclSuccess
               ? nccl_refused(rc)
               : nccl_result(coll_all_reduce(sendbuff, recvbuff, count, dt, kop, c, stream));
}
KCOLL_NCCL_ALIAS(ncclAllReduce);

KCOLL_NCCL_API ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                          ncclDataType_t datatype, int root, ncclComm_t comm,
                                          cudaStream_t stream)
{
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    ncclResult_t rc = args(comm, datatype, NULL, "ncclBroadcast", &c, &dt, NULL);
    return rc != ncclSuccess
               ? nccl_refused(rc)
               : nccl_result(coll_broadcast(sendbuff, recvbuff, count, dt, root, c, stream));
}
KCOLL_NCCL_ALIAS(ncclBroadcast);

/* The in-place broadcast of NCCL's first API. */
KCOLL_NCCL_API ncclResult_t ncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                      ncclComm_t comm, cudaStream_t stream)
{
    return ncclBroadcast(buff, buff, count, datatype, root, comm, stream);
}
KCOLL_NCCL_ALIAS(ncclBcast);

KCOLL_NCCL_API ncclResult_t ncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, int root,
                                       ncclComm_t comm, cudaStream_t stream)
{
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    coll_op_t kop = COLL_SUM;
    ncclResult_t rc = args(comm, datatype, &op, "ncclReduce", &c, &dt, &kop);
    return rc != ncclSuccess
               ? nccl_refused(rc)
               : nccl_result(coll_reduce(sendbuff, recvbuff, count, dt, kop, root, c, stream));
}
KCOLL_NCCL_ALIAS(ncclReduce);

KCOLL_NCCL_API ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                          ncclDataType_t datatype, ncclComm_t comm,
                                          cudaStream_t stream)
{
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    ncclResult_t rc = args(comm, datatype, NULL, "ncclAllGather", &c, &dt, NULL);
    return rc != ncclSuccess
               ? nccl_refused(rc)
               : nccl_result(coll_all_gather(sendbuff, recvbuff, sendcount, dt, c, stream));
}
KCOLL_NCCL_ALIAS(ncclAllGather);

KCOLL_NCCL_API ncclResult_t ncclReduceScatter(const void *sendbuff, void *recvbuff,
                                              size_t recvcount, ncclDataType_t datatype,
                                              ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream)
{
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    coll_op_t kop = COLL_SUM;
    ncclResult_t rc = args(comm, datatype, &op, "ncclReduceScatter", &c, &dt, &kop);
    return rc != ncclSuccess ? nccl_refused(rc)
                             : nccl_result(coll_reduce_scatter(sendbuff, recvbuff, recvcount, dt,
                                                               kop, c, stream));
}
KCOLL_NCCL_ALIAS(ncclReduceScatter);

KCOLL_NCCL_API ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                         ncclDataType_t datatype, ncclComm_t comm,
                                         cudaStream_t stream)
{
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    ncclResult_t rc = args(comm, datatype, NULL, "ncclAlltoAll", &c, &dt, NULL);
    return rc != ncclSuccess
               ? nccl_refused(rc)
               : nccl_result(coll_all_to_all(sendbuff, recvbuff, count, dt, c, stream));
}
KCOLL_NCCL_ALIAS(ncclAlltoAll);

/* ---- point-to-point, and gather / scatter built from it ---- */

/* A send or receive as bytes: NCCL matches a send with its receive by size alone (4 float32
 * sent, 16 uint8 received), so kcoll compares bytes too, not count and datatype. */
static ncclResult_t p2p_bytes(ncclComm_t comm, size_t count, ncclDataType_t datatype,
                              const char *fn, coll_comm_t *c, size_t *bytes)
{
    coll_datatype_t dt = COLL_INT8;
    ncclResult_t rc = args(comm, datatype, NULL, fn, c, &dt, NULL);
    if (rc != ncclSuccess)
        return rc;
    const size_t e = coll_datatype_size(dt);
    if (count > (SIZE_MAX >> 1) / e)
        return nccl_error(ncclInvalidArgument, "%s: count %zu of %s overflows the addressable size",
                          fn, count, coll_datatype_name(dt));
    *bytes = count * e;
    return ncclSuccess;
}

KCOLL_NCCL_API ncclResult_t ncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclComm_t comm, cudaStream_t stream)
{
    coll_comm_t c = NULL;
    size_t bytes = 0;
    ncclResult_t rc = p2p_bytes(comm, count, datatype, "ncclSend", &c, &bytes);
    return rc != ncclSuccess ? nccl_refused(rc)
                             : nccl_result(coll_send(sendbuff, bytes, COLL_UINT8, peer, c, stream));
}
KCOLL_NCCL_ALIAS(ncclSend);

KCOLL_NCCL_API ncclResult_t ncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype,
                                     int peer, ncclComm_t comm, cudaStream_t stream)
{
    coll_comm_t c = NULL;
    size_t bytes = 0;
    ncclResult_t rc = p2p_bytes(comm, count, datatype, "ncclRecv", &c, &bytes);
    return rc != ncclSuccess ? nccl_refused(rc)
                             : nccl_result(coll_recv(recvbuff, bytes, COLL_UINT8, peer, c, stream));
}
KCOLL_NCCL_ALIAS(ncclRecv);

/* Rooted exchange of count elements per rank: gather (every rank sends its block to root, which
 * receives block r from rank r) or scatter (the reverse), as one group. */
static ncclResult_t rooted(bool gather, const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream,
                           const char *fn)
{
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    int nranks = 0, rank = 0;
    ncclResult_t rc = args(comm, datatype, NULL, fn, &c, &dt, NULL);
    if (rc == ncclSuccess)
        rc = nccl_result(coll_comm_count(c, &nranks));
    if (rc == ncclSuccess)
        rc = nccl_result(coll_comm_user_rank(c, &rank));
    if (rc != ncclSuccess)
        return nccl_refused(rc);
    if (root < 0 || root >= nranks)
        return nccl_refused(nccl_error(ncclInvalidArgument, "%s: root %d is out of range [0, %d)",
                                       fn, root, nranks));
    const size_t block = count * nccl_datatype_size(datatype);
    coll_group_start();
    coll_result_t r = COLL_SUCCESS;
    if (gather) {
        r = coll_send(sendbuff, count, dt, root, c, stream);
        for (int q = 0; q < nranks && rank == root && r == COLL_SUCCESS; q++)
            r = coll_recv((char *)recvbuff + (size_t)q * block, count, dt, q, c, stream);
    } else {
        for (int q = 0; q < nranks && rank == root && r == COLL_SUCCESS; q++)
            r = coll_send((const char *)sendbuff + (size_t)q * block, count, dt, q, c, stream);
        if (r == COLL_SUCCESS)
            r = coll_recv(recvbuff, count, dt, root, c, stream);
    }
    coll_result_t end = coll_group_end();
    return nccl_result(r != COLL_SUCCESS ? r : end);
}

KCOLL_NCCL_API ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    return rooted(true, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclGather");
}
KCOLL_NCCL_ALIAS(ncclGather);

KCOLL_NCCL_API ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                        ncclDataType_t datatype, int root, ncclComm_t comm,
                                        cudaStream_t stream)
{
    return rooted(false, sendbuff, recvbuff, count, datatype, root, comm, stream, "ncclScatter");
}
KCOLL_NCCL_ALIAS(ncclScatter);

/* ---- groups ---- */

KCOLL_NCCL_API ncclResult_t ncclGroupStart(void)
{
    ncclResult_t rc = nccl_result(coll_group_start());
    if (rc == ncclSuccess)
        nccl_group_started();
    return rc;
}
KCOLL_NCCL_ALIAS(ncclGroupStart);

KCOLL_NCCL_API ncclResult_t ncclGroupEnd(void)
{
    ncclResult_t rc = nccl_result(coll_group_end());
    nccl_group_ended(rc);
    return rc;
}
KCOLL_NCCL_ALIAS(ncclGroupEnd);

/* The group ends and its calls are dropped, as NCCL's simulation leaves it; kcoll has no
 * performance model to fill simInfo with, so the caller's own estimate is used (PyTorch's
 * inductor falls back to its own on this error). */
KCOLL_NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    (void)simInfo;
    const coll_result_t r = coll_group_discard();
    nccl_group_ended(nccl_result(r));
    if (r != COLL_SUCCESS)
        return nccl_result(r);
    return nccl_error(ncclInvalidUsage,
                      "ncclGroupSimulateEnd is not offered by kcoll (it has no NCCL performance "
                      "model): the group ended and its calls were dropped, as after a "
                      "simulation; end a group with ncclGroupEnd to run its calls");
}
KCOLL_NCCL_ALIAS(ncclGroupSimulateEnd);

/* ---- reduction operators made at run time ---- */

KCOLL_NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                     ncclDataType_t datatype,
                                                     ncclScalarResidence_t residence,
                                                     ncclComm_t comm)
{
    static const char fn[] = "ncclRedOpCreatePreMulSum";
    coll_comm_t c = NULL;
    coll_datatype_t dt = COLL_INT8;
    ncclResult_t rc = args(comm, datatype, NULL, fn, &c, &dt, NULL);
    if (rc != ncclSuccess)
        return rc;
    if (residence != ncclScalarHostImmediate && residence != ncclScalarDevice)
        return nccl_error(ncclInvalidArgument,
                          "%s: residence %d is neither ncclScalarDevice nor "
                          "ncclScalarHostImmediate",
                          fn, (int)residence);
    /* ncclScalarDevice: read at each call, where kcoll can (host-accessible memory) */
    coll_op_t kop = COLL_SUM;
    rc = nccl_result(coll_op_create_premul_sum(
        &kop, scalar, dt,
        residence == ncclScalarDevice ? COLL_SCALAR_POINTER : COLL_SCALAR_IMMEDIATE, c));
    if (rc == ncclSuccess && op != NULL)
        *op = (ncclRedOp_t)kop;
    return rc;
}
KCOLL_NCCL_ALIAS(ncclRedOpCreatePreMulSum);

KCOLL_NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    coll_comm_t c = NULL;
    ncclResult_t rc = nccl_comm(comm, "ncclRedOpDestroy", &c);
    if (rc != ncclSuccess)
        return rc;
    if ((int)op < (int)ncclNumOps)
        return nccl_error(ncclInvalidArgument,
                          "ncclRedOpDestroy: operator %d is built in, not one of "
                          "ncclRedOpCreatePreMulSum",
                          (int)op);
    return nccl_result(coll_op_destroy((coll_op_t)op, c));
}
KCOLL_NCCL_ALIAS(ncclRedOpDestroy);
