/* The device path's grow-only buffers (caller's thread): pinned staging for send/recv and CUDA
 * IPC's fallback, device scratch for PreMulSum, the bounce buffer; a replaced one is retired and
 * freed when nothing can use it any more. */
#include <stdlib.h>

#include "base/error.h"
#include "device/device_int.h"

void colli_dev_free_retired(struct colli_dev *d, bool all)
{
    pthread_mutex_lock(&d->mu);
    const bool idle = d->done == d->submitted;
    pthread_mutex_unlock(&d->mu);
    for (retired_t **pp = &d->retired; *pp != NULL;) {
        retired_t *r = *pp;
        /* replaced scratch stays until fini: peers may keep it mapped through CUDA IPC, and
         * freeing an allocation another process still maps is undefined in CUDA (it is at
         * most as large as the scratch in use, which doubles as it grows). Staging is freed
         * once no call is queued: freeing pinned memory may wait for the whole GPU, which a
         * gate of a queued call may hold (the progress thread meanwhile in the driver). */
        if (!all && (!idle || r->dev || d->graphs)) { /* a graph may name it */
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        (void)(r->dev ? d->ops->dev_free(r->p) : d->ops->host_free(r->p));
        free(r);
    }
}

void colli_dev_retire(struct colli_dev *d, retired_t *r, void *p, bool dev)
{
    r->dev = dev;
    r->p = p;
    r->next = d->retired;
    d->retired = r;
}

/* A grow-only buffer's next size for bytes: at least double, in 2 MiB steps. */
static size_t grown(size_t cap, size_t bytes)
{
    size_t want = cap * 2 > bytes ? cap * 2 : bytes;
    return (want + (2u << 20) - 1) & ~(size_t)((2u << 20) - 1);
}

coll_result_t colli_dev_staging(struct coll_comm *comm, size_t bytes, char **base)
{
    struct colli_dev *d = comm->dev;
    size_t want = 0;
    const int err = colli_dev_grow(d, &d->staging, &d->staging_cap, bytes, &want, false);
    *base = d->staging;
    if (err < 0)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory");
    if (err != 0)
        return COLLI_ERR(COLL, COLL_ERR_CUDA,
                         "rank %d: cannot allocate %zu bytes of pinned host memory to stage "
                         "device buffers: %s (raise the memlock limit, or make the calls "
                         "smaller)",
                         comm->rank, want, d->ops->error_string(err));
    return COLL_SUCCESS;
}

int colli_dev_grow(struct colli_dev *d, void **buf, size_t *cap, size_t bytes, size_t *want,
                   bool dev)
{
    colli_dev_free_retired(d, false);
    *want = bytes;
    if (bytes <= *cap)
        return 0;
    *want = grown(*cap, bytes);
    retired_t *r = *buf != NULL ? malloc(sizeof(*r)) : NULL;
    if (*buf != NULL && r == NULL)
        return -1;
    const colli_gpu_ops_t *o = d->ops;
    void *m = NULL;
    int prev = -1, err = dev ? o->get_device(&prev) : 0;
    if (err == 0 && dev)
        err = o->set_device(d->device);
    if (err == 0)
        err = dev ? o->dev_alloc(&m, *want) : o->host_alloc(&m, *want);
    if (prev >= 0 && prev != d->device)
        (void)o->set_device(prev);
    if (err != 0) {
        free(r);
        return err;
    }
    if (r != NULL)
        colli_dev_retire(d, r, *buf, dev);
    *buf = m;
    *cap = *want;
    return 0;
}

coll_result_t colli_dev_scratch_for(struct coll_comm *comm, struct colli_dev *d, size_t bytes,
                                    void **p)
{
    size_t want = 0;
    const int err = colli_dev_grow(d, &d->scratch, &d->scratch_cap, bytes, &want, true);
    *p = d->scratch;
    if (err < 0)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory");
    if (err != 0)
        return COLLI_ERR(COLL, COLL_ERR_CUDA,
                         "rank %d: cannot allocate %zu bytes of GPU %d memory for the scaled "
                         "input of a PreMulSum: %s (free GPU memory, or make the calls smaller)",
                         comm->rank, want, d->device, d->ops->error_string(err));
    return COLL_SUCCESS;
}
