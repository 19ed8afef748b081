/* Internal to the device layer: the state that device.c (the queue, the gate, the progress
 * thread), pipe.c (the chunk pipeline of a collective) and ipc.c (CUDA IPC) share. */
#ifndef COLLI_DEVICE_INT_H
#define COLLI_DEVICE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "algo/algos.h"
#include "device/device.h"
#include "device/gpu_plugin.h"

/* DEV_GATE_WORDS: calls in flight that can hold their streams with the memop gate (more fall
 * back to a host function) */
enum { DEV_SLOTS = 3, DEV_IPC_MAPS = 32, DEV_GATE_WORDS = 1024 };

typedef struct dev_job {
    struct dev_job *next;
    pthread_mutex_t mu; /* started, finished, refs */
    pthread_cond_t cv;
    int started;  /* the caller's stream reached the gate */
    int finished; /* the call is over: the gate opens */
    int refs;     /* the gate and the progress thread: the last one frees the job */
    int memop;    /* held by the memop gate: its stream stores gate_words[slot], waits on
                   * gate_words[DEV_GATE_WORDS + slot] */
    uint32_t slot;
    uint64_t seq; /* device calls of this communicator so far */
    char what[48];
    char *staging;
    colli_dev_run_fn run; /* NULL: a collective through the chunk pipeline (ctx: its args) */
    bool scaled;          /* run NULL: first scale sc into the args' sendbuf (PreMulSum) */
    colli_dev_scale_t sc;
    void *ctx;
    int nregions;
    colli_dev_region_t regions[];
} dev_job_t;

typedef struct retired {
    struct retired *next;
    bool dev; /* device memory (scratch), else pinned host memory (staging) */
    void *p;
} retired_t;

struct colli_dev {
    const colli_gpu_ops_t *ops;
    char path[256];
    pthread_mutex_t mu; /* the queue and the counters */
    pthread_cond_t cv;  /* a job queued, a job finished, stop */
    dev_job_t *head, *tail;
    uint64_t submitted, done;
    int stop;  /* fini: the thread ends once the queue is empty */
    int abort; /* fini after abort: queued jobs fail without running (atomic) */
    bool thread_on;
    pthread_t thread;
    int device;    /* the GPU of every device call (its first one's), -1 before */
    int kernels;   /* the GPU the plugin's kernels were loaded on (load_kernels), -1: none */
    int copies;    /* staging copies so far (COLL_TEST_DEV_FAIL_COPY) */
    char *staging; /* the current pinned staging (caller's thread) */
    size_t staging_cap;
    retired_t *retired; /* staging replaced by a larger one, freed once its calls are over */
    /* PreMulSum's scaled inputs (device memory of the communicator's GPU, grow-only; the
     * replaced one is kept until fini). Calls run one at a time, so one serves all. */
    void *scratch;
    size_t scratch_cap;
    /* DEV_SLOTS slots, each a stream of its own with pinned host buffers (hs, hr) and device
     * scratch (ds) of slot_bytes (0: not yet allocated). Made on the caller's thread before the
     * first call that needs them is queued, freed at fini, never in between: an allocation or a
     * free on the progress thread may synchronise the device while a gate holds a stream. Staged
     * send/recv copies on slot 0's stream; the chunk pipeline (device_pipe.c) uses them all. */
    struct dev_slot {
        void *stream;
        char *hs, *hr, *ds;
    } slots[DEV_SLOTS];
    size_t slot_bytes;
    /* The memop gate (COLL_CUDA_GATE, gate_words in gpu_plugin.h): for each call in flight, a
     * word its stream stores when it reaches the call and one the progress thread stores to
     * let it go on, in pinned host memory made with the slots' streams; NULL: host functions. */
    volatile uint32_t *gate_words; /* [2 * DEV_GATE_WORDS]: arrived, then release */
    bool gate_told;                /* the fallback to host functions was said */
    /* CUDA IPC (device_ipc.c; progress thread only): peers' allocations mapped here, least
     * recently used first out */
    struct dev_ipc_map {
        int pid;
        uint64_t id; /* the allocation's id in its process */
        void *base;
        uint64_t used;
    } ipc_maps[DEV_IPC_MAPS];
    uint64_t ipc_clock;
    /* Mappings evicted from ipc_maps (under mu): closed on the caller's thread at its next
     * device call or at fini, never on the progress thread, where a close that synchronises
     * the device (as cudaFree does) would wait for a stream that our gate holds. */
    void *ipc_dead[DEV_IPC_MAPS];
    int ipc_ndead;
    bool ipc_told, ipc_announced; /* INFO lines said once */
};

/* Fail the communicator for job j: step (what was being done) failed with why; COLL_ERR_CUDA. */
coll_result_t colli_dev_fail(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j,
                             const char *step, const char *why);
/* Does this staging copy fail as a test asked (COLL_TEST_DEV_FAIL_COPY)? Counts the copy. */
bool colli_dev_inject(struct coll_comm *comm, struct colli_dev *d);
/* Run job j's collective through the chunk pipeline (progress thread, its stream reached). */
void colli_dev_pipe_run(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j);
/* A host-buffer collective on pinned or host memory as a step of the device call outer: its
 * messages carry outer's fingerprint, marked "device buffers"; count in outer's datatype. */
coll_result_t colli_dev_net(struct coll_comm *comm, const colli_coll_args_t *outer, int coll,
                            const void *sb, void *rb, size_t count);
/* Run job j's collective through CUDA IPC when every rank is on this host and can (on stream).
 * false: the pipeline runs it. true: done, or failed (*status; the communicator failed). */
bool colli_dev_ipc_try(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                       coll_result_t *status);
/* Close the evicted mappings (caller's thread, current device restored): 0 or the plugin's
 * error. A close may wait for the whole GPU, and take the driver's locks while it waits: so
 * only while no call of this communicator is queued (none holds a stream, the progress thread
 * opens no mapping), unless busy_too (destroy, after the progress thread ended). */
int colli_dev_ipc_close_dead(struct colli_dev *d, bool busy_too);
/* Close every mapped peer allocation (fini, the progress thread ended). */
void colli_dev_ipc_free(struct colli_dev *d);
/* Wait until stream (a slot stream) has run its work, at most COLL_TIMEOUT (wait.c): 0, the
 * runtime's error, or COLLI_DEV_STALLED; colli_dev_strerror says which. */
enum { COLLI_DEV_STALLED = 0x7fff0001 };
int colli_dev_wait(const struct coll_comm *comm, const struct colli_dev *d, void *stream);
const char *colli_dev_strerror(const struct colli_dev *d, int err);
/* Bytes of each slot buffer: enough for a step of any collective on this communicator. */
size_t colli_dev_slot_bytes(const struct coll_comm *comm);

#endif
