/* Internal to the device layer: the state that device.c (the queue, the gate, the progress
 * thread), pipe.c (the chunk pipeline of a collective) and ipc.c (CUDA IPC) share. */
#ifndef COLLI_DEVICE_INT_H
#define COLLI_DEVICE_INT_H

#include <pthread.h>
#include <stdint.h>

#include "algo/algos.h"
#include "device/device.h"
#include "device/gpu_plugin.h"

/* DEV_GATE_WORDS: calls in flight on device buffers per communicator (the window of words of
 * the inline programs and memop gates; a call beyond it waits for room: submit) */
enum { DEV_SLOTS = 3, DEV_IPC_MAPS = 32, DEV_GATE_WORDS = 1024, DEV_LISTS = 3 };

/* The words of a call's inline program (COLL_CUDA_GATE=inline, DEV_WORDS per call in flight):
 * the stream stores ARR (it reached the call: the call's number), PRE and MID (a step's copies
 * and kernels before the network ran: steps so far) and END (the program ran: the number); the
 * progress thread stores GO (the call may start: the number), NET1 and NET2 (the network steps
 * done so far). */
enum { W_ARR, W_GO, W_PRE, W_NET1, W_MID, W_NET2, W_END, DEV_WORDS = 8 };

struct dev_captured;
struct dev_home;

typedef struct dev_job {
    struct dev_job *next;
    pthread_mutex_t mu; /* started, finished, refs */
    pthread_cond_t cv;
    int started;  /* the caller's stream reached the gate */
    int finished; /* the call is over: the gate opens */
    int refs;     /* the gate and the progress thread: the last one frees the job */
    int memop;    /* held by the memop gate: its stream stores gate_words[slot], waits on
                   * gate_words[DEV_GATE_WORDS + slot] */
    int inl;      /* an inline program on its stream, between its words */
    volatile uint32_t *words; /* inline: its DEV_WORDS words */
    uint32_t wv;              /* ... the value its ARR, GO and END take (its number; 1: graph) */
    struct dev_captured *gc;  /* a replay of a call captured into a CUDA graph (graph.c) */
    bool deferred;            /* posted by a host function on its stream (graph.c) ... */
    struct dev_home *home;    /* ... which posts it there */
    int emitted;              /* ... once its program is enqueued (atomic) */
    void *stream;    /* the caller's stream (inline: the progress thread asks it for errors; NULL in
                      * a replay, which may run on any stream) */
    size_t steps;    /* inline: the network steps of the program (0: a staged call, 1 step) */
    const char *bad; /* inline: a copy or kernel could not be enqueued (the step), or NULL */
    const char *bad_why; /* ... why (the plugin's error string, a static string) */
    bool truncated;      /* ... and the program lacks its end: the stream is never waited for */
    bool ipc;            /* CUDA IPC's exchange comes first (colli_dev_ipc_eligible) */
    bool declined;       /* ... and this rank refuses it: inline, the pipeline's program follows */
    bool fb;             /* ... or takes it with a fallback in its program (ipc.c): no rank has
                          * shown yet that it can map this communicator's buffers */
    bool exported;       /* ... and xp holds this rank's buffers (send, receive) as exported at
                          * the call (colli_dev_ipc_exportable), for the exchange */
    bool bounced;        /* ... through d->bounce (its args name it): the caller's buffers */
    const void *user_in;
    void *user_out;
    struct dev_export {
        uint8_t handle[COLLI_GPU_IPC_HANDLE];
        size_t off, size;
        uint64_t id;
    } xp[2];
    uint32_t slot;
    uint64_t seq; /* device calls of this communicator so far */
    char what[48];
    char *staging;
    colli_dev_run_fn run; /* NULL: a collective through the chunk pipeline (ctx: its args) */
    bool scaled;          /* run NULL: first scale sc into the args' sendbuf (PreMulSum) */
    colli_dev_scale_t sc;
    void *ctx;
    size_t ctx_size;
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
    uint64_t submitted, done; /* jobs queued (or to be posted by their streams), jobs done */
    uint64_t calls;           /* calls made on the caller's thread (their numbers) */
    int stop;                 /* fini: the thread ends once every job is done, or once closing */
    int closing;              /* fini: no job is posted any more (graph.c) */
    int abort;                /* fini after abort: queued jobs fail without running (atomic) */
    bool thread_on;
    pthread_t thread;
    int device;    /* the GPU of every device call (its first one's), -1 before */
    int kernels;   /* the GPU the plugin's kernels were loaded on (load_kernels), -1: none */
    int copies;    /* staging copies so far (COLL_TEST_DEV_FAIL_COPY) */
    void *staging; /* the current pinned staging (caller's thread) */
    size_t staging_cap;
    bool fb_grew; /* ... grown for CUDA IPC's fallback: dropped once ipc_proven (caller's thread) */
    retired_t *retired; /* staging replaced by a larger one, freed once its calls are over */
    /* PreMulSum's scaled inputs (device memory of the communicator's GPU, grow-only; the
     * replaced one is kept until fini). Calls run one at a time, so one serves all. */
    void *scratch;
    size_t scratch_cap;
    /* CUDA IPC's bounce buffer (ipc.c), grown and kept as scratch is: a call whose buffers this
     * rank cannot export copies its inputs in, takes CUDA IPC on it, and copies its outputs out */
    void *bounce;
    size_t bounce_cap;
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
    volatile uint32_t *words;      /* [DEV_GATE_WORDS * DEV_WORDS]: the inline programs' */
    bool inline_told;              /* a fallback from inline programs was said */
    bool bounce_told;              /* the bounce buffer's use, or its limit, was said */
    bool dangling;   /* a dropped call's program may still run: its buffers are kept at fini */
    bool one_queue;  /* CUDA_DEVICE_MAX_CONNECTIONS=1: no CUDA IPC (its fallback is not inline) */
    bool ipc_broken; /* a rank could not map a peer's buffer: no CUDA IPC from then (atomic) */
    bool ipc_proven; /* every rank mapped every buffer of a call: no fallback in the programs */
    /* CUDA IPC's inline programs (ipc.c): the DEV_LISTS lists of a call's reductions and copies,
     * filled by the progress thread in pinned memory, copied by the stream to device memory after
     * GO (calls run one at a time); NULL: CUDA IPC's calls take a gate */
    colli_gpu_list_t *lists_h;
    colli_gpu_list_t *lists_d;
    bool gate_told; /* the fallback to host functions was said */
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
     * the device (as cudaFree does) would wait for a stream that our gate holds. The list
     * grows as it must (malloc only): a mapping never fails for want of room in it. */
    void **ipc_dead;
    int ipc_ndead, ipc_dead_cap;
    bool ipc_told, ipc_announced; /* INFO lines said once */
    /* CUDA graphs (graph.c): what outlives the communicator for the calls captured into graphs
     * and the calls that their streams post; NULL before the first capture */
    struct dev_home *home;
    bool graphs; /* a call was captured: later calls are posted by their streams (in stream
                  * order with the replays), and replaced staging is kept until fini */
};

/* Inline: wait until the stream stored at least value into job j's word w, at most COLL_TIMEOUT
 * (wait.c): 0, the stream's error, COLLI_DEV_STALLED_PROGRAM, or COLLI_DEV_ABORTED. */
int colli_dev_wait_word(const struct coll_comm *comm, const struct colli_dev *d, const dev_job_t *j,
                        int w, uint32_t value);
/* Inline: enqueue job j's collective (its pipeline) on stream after the call's start (caller's
 * thread); j->bad and j->truncated say what failed. Run its host side (progress thread). */
void colli_dev_pipe_emit(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream);
void colli_dev_pipe_host(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j);
/* Inline (inline.c): enqueue job j's whole program on stream (caller's thread, seq its number):
 * 0, or the plugin's error when not even its start could be enqueued (another gate then). */
int colli_dev_inline_emit(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                          uint64_t seq);
/* One stream memory operation of job j's program (a store of v into word w, or a wait for it);
 * a failure truncates the program (nothing more is enqueued: false from then on) and says so in
 * j->bad. */
bool colli_dev_emit_word(struct colli_dev *d, dev_job_t *j, void *stream, bool wait, int w,
                         uint32_t v);
/* Run job j's host side and wait for its program's end (progress thread). */
void colli_dev_inline_run(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j);
/* Until the caller's stream reached job j (device.c): false when aborted first. */
bool colli_dev_wait_started(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j);
/* Inline CUDA IPC (ipc.c): enqueue job j's program after the call's start (caller's thread);
 * run its host side (progress thread): the exchange, the lists, GO, the barrier; when a rank
 * cannot map, the chunk pipeline on the slot streams while the caller's stream waits. */
void colli_dev_ipc_emit(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream);
void colli_dev_ipc_host(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j);
/* Job j's collective through the chunk pipeline on the slot streams (progress thread). */
void colli_dev_pipe_slots(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j);
/* Job j's collective through the pipeline's network steps with the CPU doing its copies and
 * reductions, from the inputs at in to the outputs at out (host memory, laid out as the call's
 * buffers; progress thread): CUDA IPC's fallback inside its program (ipc.c). Its messages are
 * those of the pipeline on the GPU, which ranks that declined CUDA IPC run beside it. */
coll_result_t colli_dev_pipe_cpu(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j,
                                 const void *in, void *out);
/* Does collective a on device buffers take CUDA IPC's exchange (every rank decides alike)?
 * Does this rank refuse CUDA IPC for it whatever its buffers (then it runs the call as an inline
 * pipeline after the exchange: colli_dev_ipc_declined_host)? */
bool colli_dev_ipc_eligible(const struct coll_comm *comm, const colli_coll_args_t *a);
bool colli_dev_ipc_declines(const struct coll_comm *comm, const colli_coll_args_t *a);
/* Can this rank export job j's buffers for CUDA IPC (asked at the call: else it declines)? When
 * it can, they are in j->xp. When it cannot and may_bounce (an inline program), the call may
 * go through the bounce buffer instead (j->bounced: its args name it); unbounce undoes that
 * (the call then takes a gate). */
bool colli_dev_ipc_exportable(const struct coll_comm *comm, dev_job_t *j, bool may_bounce);
void colli_dev_ipc_unbounce(dev_job_t *j);
/* Bytes of one region that holds CUDA IPC call a's inputs at off[0] and outputs at off[1] (off
 * may be NULL): laid out as the caller's buffers when they overlap (in place), else the outputs
 * after the inputs, 64-byte aligned. The fallback's staging and the bounce buffer are so. */
size_t colli_dev_ipc_span(const struct coll_comm *comm, const colli_coll_args_t *a, size_t off[2]);
void colli_dev_ipc_declined_host(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j);
/* At least bytes in the grow-only buffer *buf of capacity *cap: device memory of the
 * communicator's GPU (dev; a replaced one is kept until fini: peers may map it through CUDA
 * IPC) or pinned host memory (a replaced one is freed once no call is queued); caller's thread,
 * after the first call's preparation: 0, the plugin's error, or -1 (out of memory); *want: the
 * size it tried. */
int colli_dev_grow(struct colli_dev *d, void **buf, size_t *cap, size_t bytes, size_t *want,
                   bool dev);
/* CUDA graphs (graph.c). capture: job j, whose call is made on stream while it captures a
 * graph, becomes the template of the graph's replays: a host function that posts a copy of it
 * at each replay, then its inline program on words of its own (0, or the plugin's error; the
 * caller then still owns j). defer: once graphs exist, a call made outside a capture is posted
 * by a host function on its stream too (before its program: 0, or the plugin's error), so that
 * the progress thread takes calls and replays in the order their streams reach them; call
 * colli_dev_emitted once its program is enqueued. */
int colli_dev_graph_capture(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                            uint64_t seq);
int colli_dev_graph_defer(struct colli_dev *d, dev_job_t *j, void *stream);
void colli_dev_emitted(dev_job_t *j);
/* Do graphs that hold calls of this communicator, or calls their streams have yet to post,
 * still exist (caller's thread)? None: calls are posted at once again (d->graphs false). */
bool colli_dev_graphs_held(struct colli_dev *d);
/* Progress thread: job j (its program enqueued) is done; a replay's words are free again. */
void colli_dev_graph_done(dev_job_t *j);
/* Fini: no job is posted from now on; true when graphs or posts to come still use the
 * communicator's buffers (they are then kept until the process ends). */
bool colli_dev_graph_fini(struct colli_dev *d);
/* Link job j into the queue (counted: it was not yet), for the progress thread. */
void colli_dev_post(struct colli_dev *d, dev_job_t *j, bool count);
/* Free job j (no one else holds it). */
void colli_dev_job_free(dev_job_t *j);
/* Grow-only buffers (memory.c). retire: p (staging, or device memory when dev) was replaced
 * by a larger one: freed by free_retired once no call is queued (staging; never while graphs
 * may name it) or at fini (all). scratch_for: device scratch of at least bytes on d->device for
 * a PreMulSum's scaled input (*p). */
void colli_dev_retire(struct colli_dev *d, retired_t *r, void *p, bool dev);
void colli_dev_free_retired(struct colli_dev *d, bool all);
coll_result_t colli_dev_scratch_for(struct coll_comm *comm, struct colli_dev *d, size_t bytes,
                                    void **p);
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
enum {
    COLLI_DEV_STALLED = 0x7fff0001,         /* a slot stream's work (memop, hostfunc) */
    COLLI_DEV_STALLED_PROGRAM = 0x7fff0002, /* an inline program */
    COLLI_DEV_ABORTED = 0x7fff0003,
};
int colli_dev_wait(const struct coll_comm *comm, const struct colli_dev *d, void *stream);
const char *colli_dev_strerror(const struct colli_dev *d, int err);
/* Bytes of each slot buffer: enough for a step of any collective on this communicator. */
size_t colli_dev_slot_bytes(const struct coll_comm *comm);

#endif
