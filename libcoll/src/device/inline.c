/* Inline programs (COLL_CUDA_GATE=inline, the default where the driver offers stream memory
 * operations): a call on device buffers enqueues all its GPU work on the caller's stream when it
 * is made, between stream memory operations on words in pinned memory (device_int.h, W_*):
 *
 *   stream: ARR=n, wait GO>=n, [scale], the call's copies and kernels with the network between
 *           them (pipe.c for collectives; staged: copies in, PRE=1, wait NET1>=1, copies out),
 *           END=n
 *   progress thread (one call at a time, in call order): wait ARR, GO, the network, wait END.
 *
 * GO serialises the programs of one communicator on whatever streams they are, so its slots,
 * staging and scratch serve one call at a time. Nothing of a call is enqueued later from
 * another thread: work enqueued behind a stream that waits may wait with it, as every stream
 * of the waiting one's hardware queue does (CUDA_DEVICE_MAX_CONNECTIONS), and the memop and
 * hostfunc gates, which run the call on streams of their own while the caller's waits, can
 * stall so (wait.c). After a failure the progress thread releases every wait of the program:
 * the stream runs the rest of it, which then computes nothing of use (the call failed and the
 * communicator with it), and goes on. */
#include <stdio.h>
#include <string.h>

#include "device/device_int.h"

enum { RELEASED = 0x7fffffff }; /* a NET word after a failure: every wait of the program passes */

/* The staged copies of a send/recv group: in (device to staging) or out (back). */
static void stage_copies(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                         bool in)
{
    for (int i = 0; i < j->nregions && j->bad == NULL; i++) {
        const colli_dev_region_t *r = &j->regions[i];
        if ((in ? !r->in : !r->out) || r->bytes == 0)
            continue;
        j->bad = in ? "copying the inputs to host staging" : "copying the results back";
        char *host = j->staging + r->off;
        int err = 0;
        if (colli_dev_inject(comm, d))
            j->bad_why = "injected failure (COLL_TEST_DEV_FAIL_COPY)";
        else if ((err = in ? d->ops->memcpy_async(host, r->dev, r->bytes, stream)
                           : d->ops->memcpy_async((void *)r->dev, host, r->bytes, stream)) != 0)
            j->bad_why = d->ops->error_string(err);
        else
            j->bad = NULL;
    }
}

bool colli_dev_emit_word(struct colli_dev *d, dev_job_t *j, void *stream, bool wait, int w,
                         uint32_t v)
{
    if (j->truncated)
        return false;
    volatile uint32_t *word = j->words + w;
    int err = wait ? d->ops->word_wait(stream, word, v) : d->ops->word_write(stream, word, v);
    if (err != 0) {
        j->truncated = true;
        j->bad = "enqueueing the call's stream memory operations";
        j->bad_why = d->ops->error_string(err);
    }
    return err == 0;
}

int colli_dev_inline_emit(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                          uint64_t seq)
{
    const colli_gpu_ops_t *o = d->ops;
    j->seq = seq;
    j->stream = stream;
    if (j->words == NULL) { /* not a graph's (graph.c): the window's words, the call's number */
        j->slot = (uint32_t)(seq % DEV_GATE_WORDS);
        j->words = d->words + (size_t)j->slot * DEV_WORDS;
        j->wv = (uint32_t)seq;
        /* the window's last call is over (fewer than DEV_GATE_WORDS in flight) */
        for (int i = 0; i < DEV_WORDS; i++)
            __atomic_store_n(&j->words[i], 0, __ATOMIC_RELEASE);
    }
    volatile uint32_t *w = j->words;
    int err = o->word_write(stream, &w[W_ARR], j->wv);
    if (err == 0)
        err = o->word_wait(stream, &w[W_GO], j->wv);
    if (err != 0)
        return err; /* nothing that holds the stream: the caller takes another gate */
    j->inl = 1;
    j->refs = 1; /* no runtime thread holds it */
    if (j->scaled) {
        const colli_coll_args_t *a = j->ctx;
        uint8_t scalar[8]; /* the kernel takes it by value, or reads it in device memory */
        memcpy(scalar, j->sc.value, coll_datatype_size(j->sc.dt));
        err = o->scale((void *)a->sendbuf, j->sc.src, j->sc.count, (int)j->sc.dt,
                       j->sc.on_device ? j->sc.ptr : scalar, j->sc.on_device, stream);
        if (err != 0) {
            j->bad = "scaling the input of a PreMulSum";
            j->bad_why = o->error_string(err);
        }
    }
    if (j->run == NULL && j->ipc && !j->declined) {
        colli_dev_ipc_emit(comm, d, j, stream);
    } else if (j->run == NULL) {
        colli_dev_pipe_emit(comm, d, j, stream);
    } else {
        stage_copies(comm, d, j, stream, true);
        if (colli_dev_emit_word(d, j, stream, false, W_PRE, 1) &&
            colli_dev_emit_word(d, j, stream, true, W_NET1, 1))
            stage_copies(comm, d, j, stream, false);
    }
    if (!j->truncated)
        (void)colli_dev_emit_word(d, j, stream, false, W_END, j->wv);
    return 0;
}

/* A send/recv group's host side: the inputs staged, the host-buffer calls, the outputs may go. */
static void staged_host(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    int err = colli_dev_wait_word(comm, d, j, W_PRE, 1);
    if (err != 0) {
        if (err != COLLI_DEV_ABORTED)
            colli_dev_fail(comm, d, j, "waiting for the copies of the inputs to host staging",
                           colli_dev_strerror(d, err));
        return;
    }
    if (j->run(comm, j->ctx) != COLL_SUCCESS)
        return; /* the call failed the communicator, as on host buffers */
    __atomic_store_n(&j->words[W_NET1], 1, __ATOMIC_RELEASE);
}

void colli_dev_inline_run(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    volatile uint32_t *w = j->words;
    bool ran = false;
    if (colli_dev_wait_started(comm, d, j)) {
        int err = d->ops->set_device(d->device);
        if (__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) != COLL_SUCCESS) {
            /* an earlier call failed: this one does nothing (the next call reports it) */
        } else if (j->bad != NULL) {
            colli_dev_fail(comm, d, j, j->bad, j->bad_why);
        } else if (err != 0) {
            colli_dev_fail(comm, d, j, "making its GPU current", d->ops->error_string(err));
        } else {
            __atomic_store_n(&w[W_GO], j->wv, __ATOMIC_RELEASE);
            if (j->run == NULL && j->ipc)
                (j->declined ? colli_dev_ipc_declined_host : colli_dev_ipc_host)(comm, d, j);
            else if (j->run == NULL)
                colli_dev_pipe_host(comm, d, j);
            else
                staged_host(comm, d, j);
            ran = true;
        }
    }
    /* a call that did not run (an earlier one failed, an abort) runs no CUDA IPC lists: they
     * hold an earlier call's work until its host side empties them. Its stream is still at GO
     * (it copies the lists after NET1), and the earlier call's program is over, unless it was
     * dropped (dangling: then the lists are left as they are). */
    if (!ran && d->lists_h != NULL && !d->dangling)
        memset(d->lists_h, 0, DEV_LISTS * sizeof(colli_gpu_list_t));
    /* every wait of the program passes now (after a success they have) */
    __atomic_store_n(&w[W_NET1], RELEASED, __ATOMIC_RELEASE);
    __atomic_store_n(&w[W_NET2], RELEASED, __ATOMIC_RELEASE);
    __atomic_store_n(&w[W_GO], j->wv, __ATOMIC_RELEASE);
    /* the slots, staging and scratch serve the next call only once the stream is done with them */
    int err = j->truncated ? COLLI_DEV_ABORTED : colli_dev_wait_word(comm, d, j, W_END, j->wv);
    if (err == 0)
        return;
    d->dangling = true;
    if (ran && err != COLLI_DEV_ABORTED &&
        __atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) == COLL_SUCCESS)
        colli_dev_fail(comm, d, j, "waiting for the results' copies", colli_dev_strerror(d, err));
}
