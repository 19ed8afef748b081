/* The fake GPU's hardware queues (fake_gpu_queues.c). */
#ifndef FAKE_GPU_QUEUES_H
#define FAKE_GPU_QUEUES_H

#include <stdbool.h>
#include <stdint.h>

/* The queue of a new stream on GPU device: the streams of a GPU take its FAKE_GPU_CONNECTIONS
 * queues in turn; -1 when unset (streams never wait for each other). */
int fq_queue_new(int device);
/* A task enqueued on stream (in queue q): its ticket; a blocking one (a gate, a host function)
 * is remembered until fq_done. */
uint64_t fq_enqueue(int q, const void *stream, bool blocking);
/* Before the stream runs the task of this ticket: wait while a blocking task enqueued earlier
 * by another stream of its queue has not finished. */
void fq_before_run(int q, const void *stream, uint64_t ticket);
/* The task of this ticket finished. */
void fq_done(int q, uint64_t ticket);

#endif
