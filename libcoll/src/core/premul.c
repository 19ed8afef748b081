/* PreMulSum operators (coll_op_create_premul_sum), and float16 COLL_AVG: each rank's input
 * multiplied by its own scalar (into recvbuf or a temporary buffer), then summed by the ordinary
 * all_reduce / reduce / reduce_scatter (so every algorithm and transport serves them unchanged). On
 * device buffers the GPU scales (the plugin's scale kernel, on the progress thread, into device
 * scratch), and the sum runs as any collective on device buffers (CUDA IPC or the chunk pipeline).
 */
#include <stdlib.h>
#include <string.h>

#include "coll_kernels.h"
#include "core/core.h"

static struct colli_premul *slot_of(struct coll_comm *comm, coll_op_t op)
{
    int k = (int)op - COLL_NUM_OPS;
    if (k < 0 || k >= COLL_MAX_PREMUL_OPS || !comm->premul[k].used)
        return NULL;
    return &comm->premul[k];
}

coll_result_t coll_op_create_premul_sum(coll_op_t *op, const void *scalar, coll_datatype_t dt,
                                        coll_scalar_residence_t residence, coll_comm_t handle)
{
    static const char fn[] = "coll_op_create_premul_sum";
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    if (op == NULL || scalar == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn,
                         op == NULL ? "op" : "scalar");
    if ((int)dt < 0 || dt >= COLL_NUM_DATATYPES)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: datatype %d is not a coll_datatype_t (0..%d)", fn, (int)dt,
                         COLL_NUM_DATATYPES - 1);
    if (residence != COLL_SCALAR_IMMEDIATE && residence != COLL_SCALAR_POINTER)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: residence %d is neither COLL_SCALAR_IMMEDIATE nor "
                         "COLL_SCALAR_POINTER",
                         fn, (int)residence);
    int dev = -1;
    const colli_buf_kind_t kind = colli_dev_locate(comm, scalar, &dev);
    if (kind == COLLI_BUF_FOREIGN)
        return colli_dev_refuse_foreign(fn, "scalar", scalar);
    if (kind == COLLI_BUF_DEVICE && residence != COLL_SCALAR_POINTER)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "%s: the scalar %p is in GPU memory, but COLL_SCALAR_IMMEDIATE "
                         "(ncclScalarHostImmediate) reads it now, on the host: pass a host "
                         "value, or COLL_SCALAR_POINTER (ncclScalarDevice) to have the GPU read "
                         "it at each call",
                         fn, scalar);
    for (int k = 0; k < COLL_MAX_PREMUL_OPS; k++) {
        struct colli_premul *p = &comm->premul[k];
        if (p->used)
            continue;
        memset(p, 0, sizeof(*p));
        p->used = true;
        p->dt = dt;
        p->by_pointer = residence == COLL_SCALAR_POINTER;
        p->on_device = kind == COLLI_BUF_DEVICE;
        p->device = dev;
        p->ptr = scalar;
        if (!p->on_device)
            memcpy(p->value, scalar, coll_datatype_size(dt));
        *op = (coll_op_t)(COLL_NUM_OPS + k);
        return COLL_SUCCESS;
    }
    return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                     "%s: this communicator already holds %d PreMulSum operators; destroy one "
                     "(coll_op_destroy / ncclRedOpDestroy) before making another",
                     fn, COLL_MAX_PREMUL_OPS);
}

coll_result_t coll_datatype_from_double(coll_datatype_t dt, double v, void *out)
{
    if (out == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "coll_datatype_from_double: out is NULL");
    const float f = (float)v;
    uint16_t h;
    uint8_t b;
    switch (dt) {
    case COLL_FLOAT16:
        h = colli_float_to_half(f);
        memcpy(out, &h, sizeof(h));
        return COLL_SUCCESS;
    case COLL_BFLOAT16:
        h = colli_float_to_bf16(f);
        memcpy(out, &h, sizeof(h));
        return COLL_SUCCESS;
    case COLL_FLOAT32:
        memcpy(out, &f, sizeof(f));
        return COLL_SUCCESS;
    case COLL_FLOAT64:
        memcpy(out, &v, sizeof(v));
        return COLL_SUCCESS;
    case COLL_FLOAT8_E4M3:
    case COLL_FLOAT8_E5M2:
        b = dt == COLL_FLOAT8_E4M3 ? colli_float_to_fp8_e4m3(f) : colli_float_to_fp8_e5m2(f);
        memcpy(out, &b, sizeof(b));
        return COLL_SUCCESS;
    default:
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "coll_datatype_from_double: %s (%d) is not a floating datatype",
                         coll_datatype_name(dt), (int)dt);
    }
}

coll_result_t coll_op_destroy(coll_op_t op, coll_comm_t handle)
{
    struct coll_comm *comm;
    coll_result_t status = colli_comm_lookup(handle, &comm);
    if (status != COLL_SUCCESS)
        return status;
    struct colli_premul *p = slot_of(comm, op);
    if (p == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "coll_op_destroy: operator %d was not made by coll_op_create_premul_sum "
                         "on this communicator (or was destroyed already)",
                         (int)op);
    memset(p, 0, sizeof(*p));
    return COLL_SUCCESS;
}

coll_result_t colli_premul_check(struct coll_comm *comm, const char *fn, const colli_coll_args_t *a,
                                 struct colli_premul *pm)
{
    const struct colli_premul *p = slot_of(comm, a->op);
    if (p == NULL)
        return COLLI_ERR(
            COLL, COLL_ERR_INVALID_ARGUMENT,
            "%s: operator %d is neither a coll_op_t (0..%d) nor a PreMulSum operator of "
            "this communicator",
            fn, (int)a->op, COLL_NUM_OPS - 1);
    if (p->dt != a->dt)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "%s: PreMulSum operator %d was made for %s, but this call's datatype is "
                         "%s",
                         fn, (int)a->op, coll_datatype_name(p->dt), coll_datatype_name(a->dt));
    *pm = *p;
    return COLL_SUCCESS;
}

/* Elements of sendbuf the scalar multiplies (reduce_scatter sends a block per rank). */
static size_t send_count(const struct coll_comm *comm, const colli_coll_args_t *a)
{
    return a->coll == COLLI_COLL_REDUCE_SCATTER ? a->count * (size_t)comm->nranks : a->count;
}

/* *pm: a scale by v, one element of dt (an integer datatype: by 1, the only scale used on one;
 * coll_datatype_from_double would refuse it and log a WARN) */
static void scalar_pm(struct colli_premul *pm, coll_datatype_t dt, double v)
{
    memset(pm, 0, sizeof(*pm));
    pm->used = true;
    pm->dt = dt;
    pm->device = -1;
    if (dt <= COLL_UINT64)
        pm->value[0] = 1; /* little-endian 1, the rest zero */
    else
        (void)coll_datatype_from_double(dt, v, pm->value); /* a floating dt: cannot fail */
}

bool colli_premul_avg(const struct coll_comm *comm, const colli_coll_args_t *a,
                      struct colli_premul *pm)
{
    if (a->op != COLL_AVG || a->dt != COLL_FLOAT16 || comm->nranks < 1)
        return false;
    scalar_pm(pm, COLL_FLOAT16, 1.0 / comm->nranks);
    return true;
}

void colli_premul_copy(const colli_coll_args_t *a, struct colli_premul *pm)
{
    scalar_pm(pm, a->dt, 1.0); /* the GPU copies by multiplying by 1 (exact in every type) */
    pm->copy_only = true;
}

/* sendbuf and recvbuf are the same buffer, or apart: recvbuf can take the scaled input. */
static bool recv_can_scale(const colli_coll_args_t *a, size_t bytes)
{
    const uintptr_t s = (uintptr_t)a->sendbuf, r = (uintptr_t)a->recvbuf;
    return s == r || s + bytes <= r || r + bytes <= s;
}

coll_result_t colli_premul_run(struct coll_comm *comm, const colli_item_t *it)
{
    const struct colli_premul *p = &it->pm;
    const colli_coll_args_t *a = &it->a;
    colli_coll_args_t s = *a;
    s.op = p->copy_only ? a->op : COLL_SUM;
    size_t len[2];
    colli_buffer_sizes(a, comm->nranks, comm->rank, len);
    const size_t n = p->copy_only ? len[0] / coll_datatype_size(a->dt) : send_count(comm, a);
    if (n == 0)
        return colli_run_collective(comm, &s);
    const void *scalar = p->by_pointer ? p->ptr : p->value;
    const size_t bytes = n * coll_datatype_size(a->dt);
    /* an all_reduce, and a reduce at its root, scale into recvbuf (sendbuf's size: also in
     * place) and sum there: no temporary buffer, whose fresh pages would cost more than the
     * scaling (64 MiB: 2.4 times the sum's time, against 1.1 times this way) */
    if (!p->copy_only && recv_can_scale(a, bytes) &&
        (a->coll == COLLI_COLL_ALL_REDUCE ||
         (a->coll == COLLI_COLL_REDUCE && comm->rank == a->root))) {
        colli_scale(a->recvbuf, a->sendbuf, n, a->dt, scalar);
        s.sendbuf = a->recvbuf;
        return colli_run_collective(comm, &s);
    }
    void *scaled = malloc(bytes);
    if (scaled == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM,
                         "%s: out of memory for a copy of the %zu bytes of %s",
                         colli_coll_name(a->coll), bytes,
                         p->copy_only ? "a sendbuf that overlaps recvbuf" : "a PreMulSum's input");
    if (p->copy_only)
        memcpy(scaled, a->sendbuf, bytes);
    else
        colli_scale(scaled, a->sendbuf, n, a->dt, scalar);
    s.sendbuf = scaled;
    coll_result_t status = colli_run_collective(comm, &s);
    free(scaled);
    return status;
}

coll_result_t colli_premul_dev(struct coll_comm *comm, const colli_item_t *it)
{
    const struct colli_premul *p = &it->pm;
    colli_coll_args_t a = it->a;
    if (!p->copy_only)
        a.op = COLL_SUM;
    colli_dev_scale_t sc = {
        .src = a.sendbuf,
        .count = send_count(comm, &a),
        .dt = a.dt,
        .ptr = p->by_pointer ? p->ptr : NULL,
        .on_device = p->on_device,
    };
    memcpy(sc.value, p->value, coll_datatype_size(a.dt));
    return colli_dev_submit_scaled(comm, colli_coll_name(a.coll), it->device, it->stream, &a, &sc);
}
