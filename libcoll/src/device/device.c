/* The device-buffer path: collectives and point-to-point calls on GPU memory, ordered on the
 * caller's stream without blocking the caller (NCCL semantics).
 *
 * libcoll does not link CUDA: a GPU plugin (device/gpu_plugin.h; libcoll_cuda.so.0 for CUDA) is
 * loaded with dlopen (load.c). A call on device buffers
 *   1. (caller's thread) makes the communicator's streams and buffers the first time, and
 *      queues a job for the communicator's progress thread after enqueuing on the caller's
 *      stream either the call's whole program (inline.c: its copies and kernels between
 *      stream memory operations on words the progress thread writes; the default where the
 *      driver offers them), or a gate that holds the stream until the call is over (CUDA
 *      IPC's calls, whose copies need the peers' pointers; no stream memory operations;
 *      COLL_CUDA_GATE=memop or hostfunc); it returns at once. A call on a stream that captures
 *      a CUDA graph goes into the graph, whose replays post it (graph.c);
 *   2. (progress thread, one job at a time, in call order) waits until the stream reached the
 *      call, then runs the network steps between the program's words (inline), or the whole
 *      call on streams of its own and opens the gate: a collective through CUDA IPC between
 *      the ranks of one host (ipc.c) or the chunk pipeline (pipe.c); sends and receives are
 *      staged whole: copied to pinned staging, sent and received by the host-buffer calls,
 *      copied back. The caller's stream goes on with the results in place.
 * A failure (a copy, the network, a peer) fails the communicator as any call does (its async
 * error, the peers told); every wait of the stream is released anyway, so no stream waits
 * forever, and the next call reports the error. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/util.h"
#include "device/device_int.h"

/* Wait on cv for at most s seconds (mu held). */
static void cond_wait_s(pthread_cond_t *cv, pthread_mutex_t *mu, double s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long ns = ts.tv_nsec + (long)((s - (double)(long)s) * 1e9);
    ts.tv_sec += (time_t)s + ns / 1000000000L;
    ts.tv_nsec = ns % 1000000000L;
    (void)pthread_cond_timedwait(cv, mu, &ts);
}

/* ---- jobs ---- */

static void job_unref(dev_job_t *j)
{
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left == 0)
        colli_dev_job_free(j);
}

void colli_dev_job_free(dev_job_t *j)
{
    pthread_mutex_destroy(&j->mu);
    pthread_cond_destroy(&j->cv);
    free(j->ctx);
    free(j);
}

void colli_dev_post(struct colli_dev *d, dev_job_t *j, bool count)
{
    pthread_mutex_lock(&d->mu);
    if (count)
        d->submitted++;
    if (d->tail != NULL)
        d->tail->next = j;
    else
        d->head = j;
    d->tail = j;
    pthread_cond_broadcast(&d->cv);
    pthread_mutex_unlock(&d->mu);
}

/* The gate on the caller's stream (a runtime thread runs it): the stream waits here until the
 * call is over. The progress thread finishes every job it was given, fini included, so this
 * wait ends. */
static void gate(void *arg)
{
    dev_job_t *j = arg;
    pthread_mutex_lock(&j->mu);
    j->started = 1;
    pthread_cond_broadcast(&j->cv);
    while (!j->finished)
        pthread_cond_wait(&j->cv, &j->mu);
    pthread_mutex_unlock(&j->mu);
    job_unref(j);
}

/* Until the caller's stream reached the gate: false when the communicator is aborted first.
 * The stream may legitimately be busy for long (a long kernel before the call), so there is no
 * deadline, but a warning every COLL_TIMEOUT says which call waits. */
bool colli_dev_wait_started(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    volatile uint32_t *arrived = j->inl     ? j->words + W_ARR
                                 : j->memop ? &d->gate_words[j->slot]
                                            : NULL;
    double since = colli_now(), warned = since, nap = 20e-6;
    pthread_mutex_lock(&j->mu);
    while (!j->started && !__atomic_load_n(&d->abort, __ATOMIC_ACQUIRE)) {
        if (arrived != NULL) {
            /* the stream stores the call's number when it gets here: poll, backing off to 0.1 ms
             * naps (a call queued ahead of a long forward pass is seen at most that late; 1 ms
             * before, a millisecond added to such a call; about 10,000 cheap wakes a second) */
            const uint32_t want = j->inl ? j->wv : (uint32_t)j->seq;
            if (__atomic_load_n(arrived, __ATOMIC_ACQUIRE) == want) {
                j->started = 1;
                break;
            }
            pthread_mutex_unlock(&j->mu);
            struct timespec ts = {0, (long)(nap * 1e9)};
            nanosleep(&ts, NULL);
            nap = nap < 100e-6 ? nap * 2 : nap;
            pthread_mutex_lock(&j->mu);
        } else {
            cond_wait_s(&j->cv, &j->mu, 0.1);
        }
        double now = colli_now();
        if (!j->started && now - warned >= fmin(comm->cfg.timeout, 300.0)) { /* 0: none */
            warned = now;
            coll_warn(COLL,
                      "rank %d: %s #%llu on device buffers still waits for its stream to reach "
                      "it (%.0f s): the stream is busy with earlier work or waits on something "
                      "that never comes",
                      comm->rank, j->what, (unsigned long long)j->seq, now - since);
        }
    }
    bool started = j->started != 0;
    pthread_mutex_unlock(&j->mu);
    return started;
}

coll_result_t colli_dev_fail(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j,
                             const char *step, const char *why)
{
    char msg[700];
    snprintf(msg, sizeof(msg),
             "rank %d: %s #%llu on device buffers (GPU %d, %s): %s failed: %s. Check the GPU "
             "(nvidia-smi, dmesg for Xid errors) and that the buffers are live device memory "
             "of the sizes given",
             comm->rank, j->what, (unsigned long long)j->seq, d->device,
             d->ops->device_name(d->device), step, why);
    colli_set_last_error(msg);
    colli_comm_fail(comm, COLL_ERR_CUDA, msg);
    return COLL_ERR_CUDA;
}

bool colli_dev_inject(struct coll_comm *comm, struct colli_dev *d)
{
    /* counted on the caller's thread (inline programs) and the progress thread (the others) */
    return comm->test.dev_fail_copy > 0 &&
           __atomic_add_fetch(&d->copies, 1, __ATOMIC_RELAXED) == comm->test.dev_fail_copy;
}

/* Copy the regions with (in: device to staging) or without (out: back) in set, then wait. */
static coll_result_t stage(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, bool in)
{
    const colli_gpu_ops_t *o = d->ops;
    const char *step = in ? "copying the inputs to host staging" : "copying the results back";
    int err = 0;
    bool injected = false;
    for (int i = 0; i < j->nregions && err == 0 && !injected; i++) {
        const colli_dev_region_t *r = &j->regions[i];
        if ((in ? !r->in : !r->out) || r->bytes == 0)
            continue;
        injected = colli_dev_inject(comm, d);
        char *host = j->staging + r->off;
        if (!injected)
            err = in ? o->memcpy_async(host, r->dev, r->bytes, d->slots[0].stream)
                     : o->memcpy_async((void *)r->dev, host, r->bytes, d->slots[0].stream);
    }
    /* even after a failure: no copy enqueued so far may outlive this call (its staging is
     * reused or freed next) */
    int sync_err = colli_dev_wait(comm, d, d->slots[0].stream);
    if (err == 0)
        err = sync_err;
    if (injected)
        return colli_dev_fail(comm, d, j, step, "injected failure (COLL_TEST_DEV_FAIL_COPY)");
    return err == 0 ? COLL_SUCCESS : colli_dev_fail(comm, d, j, step, colli_dev_strerror(d, err));
}

/* PreMulSum: the input times the scalar into the scratch that the job's args name as sendbuf,
 * on slot 0's stream, waited for. false: the communicator failed. */
static bool prescale(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    const colli_coll_args_t *a = j->ctx;
    const colli_dev_scale_t *sc = &j->sc;
    uint8_t scalar[8];
    memcpy(scalar, sc->value, coll_datatype_size(sc->dt)); /* a host ptr was read at the call */
    int err = d->ops->scale((void *)a->sendbuf, sc->src, sc->count, (int)sc->dt,
                            sc->on_device ? sc->ptr : scalar, sc->on_device, d->slots[0].stream);
    int sync_err = colli_dev_wait(comm, d, d->slots[0].stream);
    if (err == 0)
        err = sync_err;
    if (err != 0)
        colli_dev_fail(comm, d, j, "scaling the input of a PreMulSum", colli_dev_strerror(d, err));
    return err == 0;
}

static void run_job(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    const colli_gpu_ops_t *o = d->ops;
    if (!colli_dev_wait_started(comm, d, j))
        return; /* aborted: fini failed the communicator */
    if (__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) != COLL_SUCCESS)
        return; /* an earlier call failed: this one does nothing (the next call reports it) */
    int err = o->set_device(d->device); /* every call's GPU (prepare) */
    if (err != 0) {
        colli_dev_fail(comm, d, j, "making its GPU current", o->error_string(err));
        return;
    }
    if (j->run == NULL) {
        if (j->scaled && !prescale(comm, d, j))
            return;
        colli_dev_pipe_run(comm, d, j);
        return;
    }
    if (stage(comm, d, j, true) != COLL_SUCCESS)
        return;
    if (j->run(comm, j->ctx) != COLL_SUCCESS)
        return; /* the call failed the communicator, as on host buffers */
    (void)stage(comm, d, j, false);
}

static void *progress_main(void *arg)
{
    struct coll_comm *comm = arg;
    struct colli_dev *d = comm->dev;
    colli_log_set_rank(comm->rank);
    for (;;) {
        pthread_mutex_lock(&d->mu);
        /* at fini: until every job is done, or no more can come (jobs to be posted by their
         * streams are counted in submitted: graph.c) */
        while (d->head == NULL && !(d->stop && (d->done == d->submitted || d->closing)))
            pthread_cond_wait(&d->cv, &d->mu);
        dev_job_t *j = d->head;
        if (j != NULL) {
            d->head = j->next;
            if (d->head == NULL)
                d->tail = NULL;
        }
        pthread_mutex_unlock(&d->mu);
        if (j == NULL)
            break;
        /* posted by its stream: its program is enqueued by now, or a moment later (a hand-off
         * inside this process: bounded even where operations have no deadline) */
        const double by = colli_now() + (isinf(comm->cfg.timeout) ? 300.0 : comm->cfg.timeout);
        while (j->deferred && !__atomic_load_n(&j->emitted, __ATOMIC_ACQUIRE) && colli_now() < by)
            sched_yield();
        if (j->inl)
            colli_dev_inline_run(comm, d, j);
        else
            run_job(comm, d, j);
        if (j->memop) /* the gate opens: the stream goes on */
            __atomic_store_n(&d->gate_words[DEV_GATE_WORDS + j->slot], (uint32_t)j->seq,
                             __ATOMIC_RELEASE);
        pthread_mutex_lock(&j->mu);
        j->finished = 1;
        pthread_cond_broadcast(&j->cv);
        pthread_mutex_unlock(&j->mu);
        colli_dev_graph_done(j);
        job_unref(j);
        pthread_mutex_lock(&d->mu);
        d->done++;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
    }
    return NULL;
}

/* ---- the caller's side ---- */

/* The slots' streams, and their buffers when bytes > 0, on device; on the caller's thread, its
 * current device restored. Never reallocated: every later need fits (colli_dev_slot_bytes). */
static coll_result_t prepare(struct coll_comm *comm, struct colli_dev *d, int device, size_t bytes)
{
    if (d->device >= 0 && d->device != device)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "rank %d: this call's buffers are on GPU %d, but the communicator's "
                         "device calls are on GPU %d: use one communicator per GPU",
                         comm->rank, device, d->device);
    if (d->device >= 0 && (bytes == 0 || d->slot_bytes > 0))
        return COLL_SUCCESS;
    const colli_gpu_ops_t *o = d->ops;
    int prev = -1, err = o->get_device(&prev);
    if (err == 0)
        err = o->set_device(device);
    if (err == 0 && d->kernels != device) {
        /* before the first gate: a kernel loaded at its first launch, on the progress thread
         * while a gate holds the caller's stream, may wait for the device forever
         * (gpu_plugin.h, load_kernels); here the load waits at most for the work queued so far */
        int loaded = 0;
        err = o->load_kernels(0, &loaded);
        if (err != 0) {
            if (prev >= 0 && prev != device)
                (void)o->set_device(prev);
            return COLLI_ERR(COLL, COLL_ERR_CUDA,
                             "rank %d: cannot load kcoll's GPU kernels on GPU %d (%s): %s; a "
                             "plugin built for another GPU architecture has no kernel for this "
                             "one (rebuild with CMAKE_CUDA_ARCHITECTURES including it)",
                             comm->rank, device, o->device_name(device), o->error_string(err));
        }
        d->kernels = device;
    }
    for (int i = 0; i < DEV_SLOTS && err == 0; i++)
        if (d->slots[i].stream == NULL)
            err = o->stream_create(&d->slots[i].stream);
    if (err == 0 && d->gate_words == NULL && o->gate_words != NULL &&
        comm->cfg.dev_gate != COLLI_GATE_HOSTFUNC) {
        void *w = NULL; /* without it the gates are host functions: not an error */
        if (o->host_alloc(&w, 2 * DEV_GATE_WORDS * sizeof(uint32_t)) == 0) {
            memset(w, 0, 2 * DEV_GATE_WORDS * sizeof(uint32_t));
            d->gate_words = w;
        }
    }
    if (err == 0 && d->words == NULL && o->word_write != NULL && o->word_wait != NULL &&
        (comm->cfg.dev_gate == COLLI_GATE_AUTO || comm->cfg.dev_gate == COLLI_GATE_INLINE)) {
        void *w = NULL; /* without it the calls take the gates: not an error */
        if (o->host_alloc(&w, DEV_GATE_WORDS * DEV_WORDS * sizeof(uint32_t)) == 0) {
            memset(w, 0, DEV_GATE_WORDS * DEV_WORDS * sizeof(uint32_t));
            d->words = w;
        }
    }
    if (err == 0 && d->words != NULL && d->lists_h == NULL && bytes > 0 && o->reduce_list != NULL) {
        void *h = NULL, *dl = NULL; /* without them CUDA IPC's calls take a gate */
        if (o->host_alloc(&h, DEV_LISTS * sizeof(colli_gpu_list_t)) == 0 &&
            o->dev_alloc(&dl, DEV_LISTS * sizeof(colli_gpu_list_t)) == 0) {
            memset(h, 0, DEV_LISTS * sizeof(colli_gpu_list_t));
            d->lists_h = h;
            d->lists_d = dl;
        } else if (h != NULL) {
            (void)o->host_free(h);
        }
    }
    for (int i = 0; i < DEV_SLOTS && err == 0 && bytes > 0; i++) {
        struct dev_slot *s = &d->slots[i]; /* after a failure, the next call makes the rest */
        if (s->hs == NULL)
            err = o->host_alloc((void **)&s->hs, bytes);
        if (err == 0 && s->hr == NULL)
            err = o->host_alloc((void **)&s->hr, bytes);
        if (err == 0 && s->ds == NULL)
            err = o->dev_alloc((void **)&s->ds, bytes);
    }
    if (prev >= 0 && prev != device)
        (void)o->set_device(prev);
    if (err != 0)
        return COLLI_ERR(COLL, COLL_ERR_CUDA,
                         "rank %d: cannot set up the device-buffer path on GPU %d (%d streams, "
                         "%zu bytes of pinned host memory twice and of device memory for each): "
                         "%s; a smaller COLL_CUDA_CHUNK_SIZE needs less",
                         comm->rank, device, DEV_SLOTS, bytes, o->error_string(err));
    d->device = device;
    if (bytes > 0)
        d->slot_bytes = bytes;
    return COLL_SUCCESS;
}

/* Hold the caller's stream at this call until the progress thread is done with it: with the
 * memop gate where the plugin and the driver offer it (no thread blocked), else with a host
 * function (gate above). 0, or the runtime's error. */
static int enqueue_gate(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                        uint64_t seq)
{
    if (d->gate_words != NULL) {
        const uint32_t slot = (uint32_t)(seq % DEV_GATE_WORDS);
        /* the slot's last call is over (fewer than DEV_GATE_WORDS in flight: submit); a stream of a
         * dropped call that stores its old number later is told apart by the number */
        __atomic_store_n(&d->gate_words[slot], 0, __ATOMIC_RELEASE);
        int err = d->ops->gate_words(stream, &d->gate_words[slot],
                                     &d->gate_words[DEV_GATE_WORDS + slot], (uint32_t)seq);
        if (err == 0) {
            j->memop = 1;
            j->slot = slot;
            j->seq = seq; /* wait_started compares before the queue has it */
            j->refs = 1;  /* no runtime thread holds it */
            return 0;
        }
        if (!d->gate_told) {
            d->gate_told = true;
            colli_log(comm->cfg.dev_gate == COLLI_GATE_MEMOP ? COLLI_LOG_WARN : COLLI_LOG_INFO,
                      COLLI_SUB_COLL,
                      "rank %d: the GPU's stream memory operations are not available (%s): "
                      "device calls hold their streams with host functions",
                      comm->rank, d->ops->error_string(err));
        }
    }
    return d->ops->host_func(stream, gate, j);
}

/* Does job j (inline, CUDA IPC's exchange, not declined) bring the fallback in its program
 * (ipc.c: until every rank has mapped every buffer of a call once)? Then its pinned staging;
 * without that staging this rank declines CUDA IPC for the call (the inline pipeline). */
static void fallback_staging(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    const bool proven = __atomic_load_n(&d->ipc_proven, __ATOMIC_ACQUIRE);
    j->fb = j->ipc && !j->declined && (!proven || comm->test.dev_ipc_fallback);
    retired_t *r = NULL;
    if (!j->fb && j->ipc && proven && d->fb_grew && (r = malloc(sizeof(*r))) != NULL) {
        /* staging of the size of the first CUDA IPC calls, for a fallback no longer carried:
         * freed once no call is queued (send/recv grow their own again) */
        colli_dev_retire(d, r, d->staging, false);
        d->staging = NULL;
        d->staging_cap = 0;
        d->fb_grew = false;
    }
    if (!j->fb)
        return;
    const size_t cap = d->staging_cap;
    size_t want = 0;
    int err = colli_dev_grow(d, &d->staging, &d->staging_cap,
                             colli_dev_ipc_span(comm, j->ctx, NULL), &want, false);
    j->staging = d->staging;
    d->fb_grew = d->fb_grew || d->staging_cap != cap;
    if (err == 0)
        return;
    j->fb = false;
    j->declined = true;
    colli_dev_ipc_unbounce(j); /* the pipeline takes the caller's buffers */
    coll_info(COLL,
              "rank %d: no pinned host memory (%zu bytes: %s) for the fallback of a CUDA IPC call "
              "in its program: this rank declines CUDA IPC for %s",
              comm->rank, want, err < 0 ? "out of memory" : d->ops->error_string(err), j->what);
}

/* enqueue_call: a call on a capturing stream that cannot be put in the graph (it would take a
 * gate); nothing was enqueued */
enum { NO_CAPTURE = -2 };

/* Enqueue job j on the caller's stream: its whole program (inline.c) where it can, else a gate
 * that holds the stream while the progress thread runs it (CUDA IPC's exchange, whose copies
 * need the peers' pointers; no stream memory operations). */
static int enqueue_call(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                        uint64_t seq, bool capturing)
{
    j->ipc = j->run == NULL && colli_dev_ipc_eligible(comm, j->ctx);
    const bool inl = d->words != NULL && !d->inline_told;
    j->declined = j->ipc && (colli_dev_ipc_declines(comm, j->ctx) ||
                             !colli_dev_ipc_exportable(comm, j, inl && d->lists_h != NULL));
    /* CUDA IPC's inline program needs the lists */
    const bool program = inl && (!j->ipc || j->declined || d->lists_h != NULL);
    if (capturing && !program)
        return NO_CAPTURE;
    if (program) {
        fallback_staging(comm, d, j);
        if (capturing)
            return colli_dev_graph_capture(comm, d, j, stream, seq);
        int err = d->graphs ? colli_dev_graph_defer(d, j, stream) : 0;
        if (err != 0)
            return err;
        err = colli_dev_inline_emit(comm, d, j, stream, seq);
        if (j->deferred) { /* posted by its stream whatever comes: it fails the communicator */
            if (err != 0) {
                j->inl = j->started = j->refs = 1; /* no runtime thread holds it */
                j->truncated = true;
                j->bad = "enqueueing the call's stream memory operations";
                j->bad_why = d->ops->error_string(err);
            }
            colli_dev_emitted(j);
            return 0;
        }
        if (err == 0)
            return 0;
        j->fb = false;
        colli_dev_ipc_unbounce(j);
        d->inline_told = true; /* and not tried again */
        colli_log(comm->cfg.dev_gate == COLLI_GATE_INLINE ? COLLI_LOG_WARN : COLLI_LOG_INFO,
                  COLLI_SUB_COLL,
                  "rank %d: the GPU's stream memory operations are not available (%s): device "
                  "calls hold their streams with a gate while a thread runs them",
                  comm->rank, d->ops->error_string(err));
    }
    return enqueue_gate(comm, d, j, stream, seq);
}

static coll_result_t submit(struct coll_comm *comm, const char *what, int device, void *stream,
                            const colli_dev_region_t *regions, int nregions, colli_dev_run_fn run,
                            const void *ctx, size_t ctx_size, const colli_dev_scale_t *sc)
{
    struct colli_dev *d = comm->dev;
    if (__atomic_load_n(&comm->async_error, __ATOMIC_ACQUIRE) != COLL_SUCCESS)
        return COLLI_ERR(COLL, comm->async_error,
                         "the communicator failed earlier and cannot be used (destroy or abort "
                         "it and create a new one): %s",
                         comm->async_msg);
    /* a stream that captures a graph takes the call into the graph (graph.c) or nothing; the
     * default stream (NULL) asked for is the buffers' GPU's, whichever GPU is current */
    int cur = -1;
    const bool other = stream == NULL && d->ops->get_device(&cur) == 0 && cur != device;
    if (other)
        (void)d->ops->set_device(device);
    int capturing = 0, cerr = d->ops->stream_capturing(stream, &capturing);
    if (other)
        (void)d->ops->set_device(cur);
    if (cerr != 0)
        return COLLI_ERR(COLL, COLL_ERR_CUDA,
                         "rank %d: %s: cannot tell whether stream %p is capturing a CUDA graph: %s",
                         comm->rank, what, stream, d->ops->error_string(cerr));
    /* a scalar read at the call: a replay would not read it again (the GPU reads one in its
     * memory at each replay) */
    if (capturing && sc != NULL && sc->ptr != NULL && !sc->on_device)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "rank %d: %s with a PreMulSum whose scalar is read at each call "
                         "(COLL_SCALAR_POINTER, ncclScalarDevice) on stream %p, which is "
                         "capturing a CUDA graph: every replay would use the value read now; "
                         "make the operator with COLL_SCALAR_IMMEDIATE "
                         "(ncclScalarHostImmediate), or make this call outside the capture",
                         comm->rank, what, stream);
    /* the last graph is gone and every call it ordered was posted: back to posting at once
     * (only this thread makes graphs and calls to post, so none comes meanwhile) */
    if (d->graphs && !colli_dev_graphs_held(d))
        d->graphs = false;
    coll_result_t status = prepare(comm, d, device, run == NULL ? colli_dev_slot_bytes(comm) : 0);
    if (status != COLL_SUCCESS)
        return status;
    /* evicted mappings are closed when no call is queued (colli_dev_ipc_close_dead); when
     * DEV_IPC_MAPS / 2 wait, this call first waits for the queued ones (they need nothing from
     * this thread), so that mappings of freed buffers do not pile up while calls stay queued */
    pthread_mutex_lock(&d->mu);
    const double idle_by = colli_now() + comm->cfg.timeout;
    while (d->ipc_ndead >= DEV_IPC_MAPS / 2 && d->done < d->submitted && colli_now() < idle_by)
        cond_wait_s(&d->cv, &d->mu, 0.1);
    pthread_mutex_unlock(&d->mu);
    int closed = colli_dev_ipc_close_dead(d, false);
    if (closed != 0)
        coll_warn(COLL,
                  "rank %d: cannot close a peer's device buffer mapped for CUDA IPC (%s); the "
                  "mapping stays until the process ends",
                  comm->rank, d->ops->error_string(closed));
    dev_job_t *j = calloc(1, sizeof(*j) + (size_t)nregions * sizeof(j->regions[0]));
    void *c = malloc(ctx_size ? ctx_size : 1);
    if (j == NULL || c == NULL) {
        free(j);
        free(c);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory queueing %s", what);
    }
    memcpy(c, ctx, ctx_size);
    j->ctx_size = ctx_size;
    if (sc != NULL) {
        void *scratch = NULL;
        status = colli_dev_scratch_for(comm, d, sc->count * coll_datatype_size(sc->dt), &scratch);
        if (status != COLL_SUCCESS) {
            free(j);
            free(c);
            return status;
        }
        ((colli_coll_args_t *)c)->sendbuf = scratch;
        j->scaled = true;
        j->sc = *sc;
        if (sc->ptr != NULL && !sc->on_device) { /* a host one is read when the call is made */
            memcpy(j->sc.value, sc->ptr, coll_datatype_size(sc->dt));
            j->sc.ptr = NULL;
        }
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 2;
    snprintf(j->what, sizeof(j->what), "%s", what);
    j->staging = d->staging;
    j->run = run;
    j->ctx = c;
    j->nregions = nregions;
    if (nregions > 0)
        memcpy(j->regions, regions, (size_t)nregions * sizeof(regions[0]));
    if (!d->thread_on) {
        int rc = pthread_create(&d->thread, NULL, progress_main, comm);
        if (rc != 0) {
            j->refs = 1;
            job_unref(j);
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "cannot start the device progress thread: %s",
                             strerror(rc));
        }
        d->thread_on = true;
    }
    pthread_mutex_lock(&d->mu);
    /* A call beyond the window of DEV_GATE_WORDS calls in flight waits for room, as NCCL's host
     * waits for room in a full work FIFO. It never takes a gate made of a host function for
     * want of a word: CUDA may run the host functions of a whole process one at a time, so with
     * several ranks in one process (ncclCommInitAll, a thread per GPU) one rank's gate would
     * hold the others' and every rank would stall (nccl_fakegpu_initall_3); and once graphs
     * exist every call is posted by its stream in order with the replays, which a gate posted
     * at once would break. A call captured into a graph has words of its own. */
    const double room_by = colli_now() + comm->cfg.timeout;
    while (!capturing && d->submitted - d->done >= DEV_GATE_WORDS && colli_now() < room_by)
        cond_wait_s(&d->cv, &d->mu, 0.1);
    const uint64_t seq = ++d->calls, in_flight = d->submitted - d->done;
    pthread_mutex_unlock(&d->mu);
    if (!capturing && in_flight >= DEV_GATE_WORDS) {
        j->refs = 1;
        job_unref(j);
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "rank %d: %s: %llu earlier calls on device buffers of this communicator "
                         "have not been reached by their streams after %.0f s (COLL_TIMEOUT), and "
                         "a call cannot be queued beyond %d: synchronize the streams now and "
                         "then, or check for a stream that waits on something that never comes",
                         comm->rank, what, (unsigned long long)in_flight, comm->cfg.timeout,
                         DEV_GATE_WORDS);
    }
    j->seq = seq;
    /* on the communicator's GPU: the default stream (NULL) is the current device's, and a
     * thread driving several GPUs (ncclCommInitAll) may have another one current */
    int prev = -1, err = d->ops->get_device(&prev);
    if (err == 0 && prev != d->device)
        err = d->ops->set_device(d->device);
    if (err == 0)
        err = enqueue_call(comm, d, j, stream, seq, capturing != 0);
    if (prev >= 0 && prev != d->device)
        (void)d->ops->set_device(prev);
    if (err == NO_CAPTURE) {
        j->refs = 1;
        job_unref(j);
        return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                         "rank %d: %s on stream %p, which is capturing a CUDA graph: kcoll puts "
                         "a call into a graph only as an inline program, and this one would "
                         "hold its stream with a gate (COLL_CUDA_GATE=%s, or a driver without "
                         "stream memory operations: see the INFO log); leave COLL_CUDA_GATE "
                         "unset, or make this call outside the capture (vLLM: --enforce-eager)",
                         comm->rank, what, stream,
                         comm->cfg.dev_gate == COLLI_GATE_MEMOP      ? "memop"
                         : comm->cfg.dev_gate == COLLI_GATE_HOSTFUNC ? "hostfunc"
                                                                     : "auto");
    }
    if (err != 0) {
        j->refs = 1;
        job_unref(j);
        return COLLI_ERR(COLL, COLL_ERR_CUDA, "%s: cannot enqueue the call on stream %p%s: %s",
                         what, stream, capturing ? " (capturing a CUDA graph)" : "",
                         d->ops->error_string(err));
    }
    if (!capturing &&
        !j->deferred) /* captured: the graph keeps it; deferred: its stream posts it */
        colli_dev_post(d, j, true);
    return COLL_SUCCESS;
}

coll_result_t colli_dev_submit(struct coll_comm *comm, const char *what, int device, void *stream,
                               const colli_dev_region_t *regions, int nregions,
                               colli_dev_run_fn run, const void *ctx, size_t ctx_size)
{
    return submit(comm, what, device, stream, regions, nregions, run, ctx, ctx_size, NULL);
}

coll_result_t colli_dev_submit_scaled(struct coll_comm *comm, const char *what, int device,
                                      void *stream, const colli_coll_args_t *a,
                                      const colli_dev_scale_t *sc)
{
    return submit(comm, what, device, stream, NULL, 0, NULL, a, sizeof(*a),
                  sc->count > 0 ? sc : NULL);
}

coll_result_t colli_dev_drain(struct coll_comm *comm, const char *fn)
{
    struct colli_dev *d = comm->dev;
    if (d == NULL)
        return COLL_SUCCESS;
    const double end = colli_now() + comm->cfg.timeout;
    pthread_mutex_lock(&d->mu);
    while (d->done < d->submitted && colli_now() < end)
        cond_wait_s(&d->cv, &d->mu, 0.1);
    uint64_t left = d->submitted - d->done;
    pthread_mutex_unlock(&d->mu);
    if (left == 0)
        return COLL_SUCCESS;
    return COLLI_ERR(COLL, COLL_ERR_INVALID_USAGE,
                     "%s on host buffers: %llu earlier call(s) on device buffers of this "
                     "communicator have not finished after %.0f s (their streams have not "
                     "reached them); synchronize those streams before a host-buffer call",
                     fn, (unsigned long long)left, comm->cfg.timeout);
}

void colli_dev_fini(struct coll_comm *comm, bool abort)
{
    struct colli_dev *d = comm->dev;
    if (d == NULL)
        return;
    bool held = false; /* graphs, or calls their streams have yet to post, name our buffers */
    if (d->thread_on) {
        /* destroy: the queued calls run to their end, each stream given COLL_TIMEOUT to reach
         * its call; abort (or a stream that never comes): they fail without running */
        pthread_mutex_lock(&d->mu);
        d->stop = 1;
        pthread_cond_broadcast(&d->cv);
        double end = colli_now() + comm->cfg.timeout;
        while (!abort && d->done < d->submitted && colli_now() < end)
            cond_wait_s(&d->cv, &d->mu, 0.1);
        bool late = d->done < d->submitted;
        pthread_mutex_unlock(&d->mu);
        held = colli_dev_graph_fini(d); /* no job is posted from here on */
        if (abort || late) {
            __atomic_store_n(&d->abort, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&comm->abort_req, 1, __ATOMIC_RELEASE);
        }
        pthread_mutex_lock(&d->mu);
        d->closing = 1;
        pthread_cond_broadcast(&d->cv);
        pthread_mutex_unlock(&d->mu);
        pthread_join(d->thread, NULL);
        if (late)
            coll_warn(COLL,
                      "rank %d: the communicator was destroyed while calls on device buffers "
                      "still waited for their streams; they were dropped",
                      comm->rank);
    }
    /* on the communicator's GPU (a thread without a context would otherwise make one on GPU 0
     * for these calls), the caller's restored */
    int prev = -1;
    if (d->device >= 0 && d->ops->get_device(&prev) == 0 && prev != d->device)
        (void)d->ops->set_device(d->device);
    colli_dev_ipc_free(d);
    if (!d->thread_on)
        held = colli_dev_graph_fini(d);
    /* a dropped call's program may still run on its stream (inline), a graph's replay may come
     * (its waits released: graph.c): what they use is kept */
    const bool keep = d->dangling || held;
    if (d->dangling)
        coll_warn(COLL,
                  "rank %d: calls on device buffers were dropped before their streams ran them: "
                  "their pinned staging and device scratch stay allocated until the process ends",
                  comm->rank);
    else if (held)
        coll_warn(COLL,
                  "rank %d: the communicator was destroyed while CUDA graphs that hold its calls "
                  "still exist: their replays now do nothing (destroy the graphs first); its "
                  "pinned staging and device scratch stay allocated until the process ends",
                  comm->rank);
    for (int i = 0; i < DEV_SLOTS; i++) {
        const struct dev_slot *sl = &d->slots[i];
        if (sl->stream != NULL)
            (void)d->ops->stream_destroy(sl->stream);
        if (sl->hs != NULL && !keep)
            (void)d->ops->host_free(sl->hs);
        if (sl->hr != NULL && !keep)
            (void)d->ops->host_free(sl->hr);
        if (sl->ds != NULL && !keep)
            (void)d->ops->dev_free(sl->ds);
    }
    if (!keep)
        colli_dev_free_retired(d, true);
    if (d->staging != NULL && !keep)
        (void)d->ops->host_free(d->staging);
    if (d->scratch != NULL && !keep)
        (void)d->ops->dev_free(d->scratch);
    if (d->bounce != NULL && !keep)
        (void)d->ops->dev_free(d->bounce);
    /* a stream of a dropped call may still store to its words: kept then (8 KiB, 32 KiB) */
    const bool dropped = keep || __atomic_load_n(&d->abort, __ATOMIC_ACQUIRE);
    if (d->gate_words != NULL && !dropped)
        (void)d->ops->host_free((void *)d->gate_words);
    if (d->words != NULL && !dropped)
        (void)d->ops->host_free((void *)d->words);
    if (d->lists_h != NULL && !keep)
        (void)d->ops->host_free(d->lists_h);
    if (d->lists_d != NULL && !keep)
        (void)d->ops->dev_free(d->lists_d);
    if (prev >= 0 && prev != d->device)
        (void)d->ops->set_device(prev);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv);
    free(d);
    comm->dev = NULL;
}
