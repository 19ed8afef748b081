/* Waiting for the GPU with a deadline: for the work the progress thread enqueued on its slot
 * streams (memop and hostfunc gates), and for the words an inline program stores.
 *
 * While a call runs, its gate holds the caller's stream, and the slot streams' copies and
 * kernels must run for the gate to open. The GPU runs streams through a few hardware queues
 * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default; Megatron-LM sets 1), in order within a queue: a
 * slot stream that shares the held stream's queue may have its work queued behind the gate,
 * which then never opens (CUDA's documentation of stream memory operations warns of exactly
 * this). Inline programs (inline.c) enqueue their GPU work on the caller's stream itself; for
 * the calls that still take a gate (CUDA IPC's), that hang is turned into an error: a wait
 * that passes COLL_TIMEOUT fails the call, whose gate the progress thread then opens, and says
 * why. */
#include <sched.h>
#include <time.h>

#include "base/util.h"
#include "device/device_int.h"

int colli_dev_wait(const struct coll_comm *comm, const struct colli_dev *d, void *stream)
{
    const double end = colli_now() + comm->cfg.timeout;
    for (unsigned i = 0;; i++) {
        int busy = 0, err = d->ops->stream_query(stream, &busy);
        if (err != 0 || !busy)
            return err;
        if (colli_now() >= end)
            return COLLI_DEV_STALLED;
        if (__atomic_load_n(&d->abort, __ATOMIC_ACQUIRE)) /* bounds a wait without deadline */
            return COLLI_DEV_ABORTED;
        if (i < 2000) { /* a short call's copies: a few hundred microseconds */
            sched_yield();
            continue;
        }
        struct timespec nap = {0, 100000}; /* a long kernel's: 0.1 ms naps */
        nanosleep(&nap, NULL);
    }
}

int colli_dev_wait_word(const struct coll_comm *comm, const struct colli_dev *d, const dev_job_t *j,
                        int w, uint32_t value)
{
    const volatile uint32_t *word = j->words + w;
    const double start = colli_now(), end = start + comm->cfg.timeout;
    long nap = 1000;
    for (unsigned i = 0;; i++) {
        if ((int32_t)(__atomic_load_n(word, __ATOMIC_ACQUIRE) - value) >= 0)
            return 0;
        if (__atomic_load_n(&d->abort, __ATOMIC_ACQUIRE))
            return COLLI_DEV_ABORTED;
        if (i < 2000) { /* a step's copies: tens to hundreds of microseconds */
            sched_yield();
            continue;
        }
        const double now = colli_now();
        /* a failed copy or kernel leaves the word unwritten: after a second the stream says why
         * (not sooner: a program runs to its end after its stream was destroyed, as CUDA lets
         * a stream with work left be, and a destroyed stream cannot be asked) */
        void *stream = j->gc == NULL ? j->stream : d->slots[0].stream; /* a replay: any stream */
        int busy = 0, err = now - start >= 1.0 ? d->ops->stream_query(stream, &busy) : 0;
        if (err != 0)
            return err;
        if (now >= end)
            return COLLI_DEV_STALLED_PROGRAM;
        struct timespec ts = {0, nap};
        nanosleep(&ts, NULL);
        nap = nap < 100000 ? nap * 2 : nap;
    }
}

const char *colli_dev_strerror(const struct colli_dev *d, int err)
{
    if (err == COLLI_DEV_ABORTED)
        return "the communicator was aborted";
    if (err == COLLI_DEV_STALLED_PROGRAM)
        return "the call's copies and kernels on its stream did not run within COLL_TIMEOUT "
               "after the stream reached the call: the GPU is hung (nvidia-smi, dmesg for Xid "
               "errors) or the stream shares a hardware queue with work that waits for "
               "something this call waits for (another communicator's call issued in another "
               "order on another rank); raise COLL_TIMEOUT for very long steps";
    if (err != COLLI_DEV_STALLED)
        return d->ops->error_string(err);
    return "the GPU did not run kcoll's copies and kernels within COLL_TIMEOUT although the "
           "call's stream had reached the call: the GPU may have queued them behind the stream "
           "the call holds (streams share the GPU's hardware queues, CUDA_DEVICE_MAX_CONNECTIONS "
           "of them; the calls that hold their stream so are those with COLL_CUDA_GATE=memop "
           "or hostfunc, and a CUDA IPC call that a rank could not map), a limit of kcoll's "
           "device path: leave COLL_CUDA_GATE unset, set COLL_CUDA_IPC=0, or use host buffers";
}
