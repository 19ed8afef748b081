/* Internal to the fake GPU plugin (fake_gpu.c): its work items and streams, for
 * fake_gpu_graph.c (CUDA graphs). */
#ifndef FAKE_GPU_INT_H
#define FAKE_GPU_INT_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_plugin.h"

typedef struct fgraph fgraph_t;

enum { T_COPY, T_FUNC, T_DELAY, T_REDUCE, T_GATE, T_SCALE, T_LIST };

typedef struct task {
    struct task *next;
    int kind;
    uint64_t ticket; /* in the hardware queues (fake_gpu_queues.h) */
    void *dst;
    const void *src;
    size_t bytes;
    void (*fn)(void *);
    void *arg;
    unsigned us;
    /* T_REDUCE, T_SCALE (srcs[0], scalar, or the device scalar at src) */
    const void *srcs[COLLI_GPU_MAX_SRCS];
    uint8_t scalar[8];
    int nsrcs;
    size_t count;
    int dt, op;
    uint32_t divisor;
    /* T_GATE */
    volatile uint32_t *arrived, *release;
    uint32_t value;
} task_t;

typedef struct fstream {
    pthread_mutex_t mu;
    pthread_cond_t cv; /* work queued, work done */
    task_t *head, *tail;
    int running; /* a task is being run */
    int stop;
    /* capture (a test's): work enqueued meanwhile is recorded into graph */
    bool capturing, invalidated;
    fgraph_t *graph;
    int device; /* the current device of the thread that made it */
    int queue;  /* its hardware queue, -1 without (fake_gpu_queues.h) */
    pthread_t thread;
} fstream_t;

/* cudaStreamPerThread's value: the calling thread's default stream */
#define FAKE_STREAM_PER_THREAD ((void *)0x2)

/* The stream behind a handle (NULL: the current device's default stream; FAKE_STREAM_PER_THREAD:
 * the calling thread's, of its current device), or NULL. */
fstream_t *fake_stream_of(void *stream);
/* Enqueue a copy of t on stream (recorded instead while it captures): 0, or an error. */
int fake_enqueue(void *stream, const task_t *t);

/* Run fn(arg) as CUDA runs a host function or a user object's release: an op of the plugin
 * called meanwhile (FAKE_API, first in each) aborts the process saying which. */
void fake_callback_run(const char *what, void (*fn)(void *), void *arg);
void fake_api_check(const char *fn);
#define FAKE_API() fake_api_check(__func__)

/* CUDA graphs (fake_gpu_graph.c): the ops of gpu_plugin.h; fgraph_record appends a copy of t
 * to a capture's graph (false: out of memory). */
bool fgraph_record(fgraph_t *g, const task_t *t);
int fake_capture(void *stream, int begin, void **exec);
int fake_graph_keep(void *stream, void (*release)(void *), void *arg);
int fake_graph_launch(void *exec, void *stream);
int fake_graph_destroy(void *exec);

#endif
