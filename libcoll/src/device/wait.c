/* Waiting for the GPU work the progress thread enqueued on its slot streams, with a deadline.
 *
 * While a call runs, its gate holds the caller's stream, and the slot streams' copies and
 * kernels must run for the gate to open. The GPU runs streams through a few hardware queues
 * (CUDA_DEVICE_MAX_CONNECTIONS, 8 by default; Megatron-LM sets 1), in order within a queue: a
 * slot stream that shares the held stream's queue may have its work queued behind the gate,
 * which then never opens (CUDA's documentation of stream memory operations warns of exactly
 * this). Until the device path enqueues its GPU work on the caller's stream itself, that hang
 * is turned into an error: a wait that passes COLL_TIMEOUT fails the call, whose gate the
 * progress thread then opens, and says why. */
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
        if (i < 2000) { /* a short call's copies: a few hundred microseconds */
            sched_yield();
            continue;
        }
        struct timespec nap = {0, 100000}; /* a long kernel's: 0.1 ms naps */
        nanosleep(&nap, NULL);
    }
}

const char *colli_dev_strerror(const struct colli_dev *d, int err)
{
    if (err != COLLI_DEV_STALLED)
        return d->ops->error_string(err);
    return "the GPU did not run kcoll's copies and kernels within COLL_TIMEOUT although the "
           "call's stream had reached the call: the GPU may have queued them behind the stream "
           "the call holds (streams share the GPU's hardware queues; CUDA_DEVICE_MAX_CONNECTIONS="
           "1, as Megatron-LM sets it, makes this certain, the default 8 possible), a limit of "
           "kcoll's device path: leave CUDA_DEVICE_MAX_CONNECTIONS unset or raise it to 32, or "
           "use host buffers";
}
