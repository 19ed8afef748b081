/* The device layer: calls on GPU buffers, ordered on the caller's stream, run by a progress
 * thread per communicator through a GPU plugin (gpu_plugin.h) loaded with dlopen; CUDA IPC
 * between the ranks of one host, else a chunk pipeline through pinned host memory. May include
 * base, plan, transport, engine and algo; the API entry layer (core/) calls it. */
#ifndef COLLI_DEVICE_H
#define COLLI_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "algo/algos.h"
#include "base/comm.h"

/* Load the GPU plugin when the process uses CUDA (or COLL_CUDA_PLUGIN names one). An error only
 * when COLL_CUDA_PLUGIN names a plugin that cannot be used. */
coll_result_t colli_dev_init(struct coll_comm *comm);
/* Finish or fail every queued call (abort: fail them), stop the progress thread, free all. */
void colli_dev_fini(struct coll_comm *comm, bool abort);
/* After fini, when the communicator is freed: close the CUDA driver it kept. */
void colli_dev_release(struct coll_comm *comm);

/* Where a buffer lives (colli_dev_locate). */
typedef enum {
    COLLI_BUF_HOST = 0,    /* host memory (pinned memory included) */
    COLLI_BUF_DEVICE = 1,  /* GPU (or managed) memory the plugin moves */
    COLLI_BUF_FOREIGN = 2, /* CUDA device memory, but no GPU plugin is loaded to move it */
} colli_buf_kind_t;

/* Ask the plugin (or, without one, the CUDA driver the process has loaded) where p lives;
 * *device gets the GPU's ordinal for COLLI_BUF_DEVICE, else -1. */
colli_buf_kind_t colli_dev_locate(const struct coll_comm *comm, const void *p, int *device);
/* The error for a COLLI_BUF_FOREIGN buffer: names fn, the argument and what to do. */
coll_result_t colli_dev_refuse_foreign(const char *fn, const char *what, const void *p);

/* Wait until the device calls queued so far have finished (a host-buffer call comes next). */
coll_result_t colli_dev_drain(struct coll_comm *comm, const char *fn);

/* One buffer of a device call: its device range, where it lies in the call's staging, and
 * whether it is read (copied to the host before) or written (copied back after). */
typedef struct colli_dev_region {
    const void *dev;
    size_t bytes;
    size_t off;
    bool in, out;
} colli_dev_region_t;

/* What the progress thread runs once the inputs are staged: a host-buffer call on staging. */
typedef coll_result_t (*colli_dev_run_fn)(struct coll_comm *comm, void *ctx);

/* Pinned staging of at least bytes for the next call (grow-only; valid for that call). */
coll_result_t colli_dev_staging(struct coll_comm *comm, size_t bytes, char **base);
/* Queue a call on device buffers, ordered on stream; returns without waiting for it. ctx (run's
 * argument, ctx_size bytes) is copied; regions lie in the staging from colli_dev_staging. run
 * NULL: a collective (ctx: its colli_coll_args_t) for CUDA IPC or the chunk pipeline. Every
 * device call of a communicator is on one GPU (the first one's); another is INVALID_USAGE. */
coll_result_t colli_dev_submit(struct coll_comm *comm, const char *what, int device, void *stream,
                               const colli_dev_region_t *regions, int nregions,
                               colli_dev_run_fn run, const void *ctx, size_t ctx_size);

/* PreMulSum's first step on device buffers: src (count elements of dt, device memory) times
 * the scalar, into device scratch of the communicator, on the GPU, by the progress thread. */
typedef struct colli_dev_scale {
    const void *src;
    size_t count;
    coll_datatype_t dt;
    uint8_t value[8]; /* the scalar (COLL_SCALAR_IMMEDIATE) */
    const void *ptr;  /* else host memory, read when the call is made, */
    bool on_device;   /* or memory of the call's GPU, read by the GPU when the call runs */
} colli_dev_scale_t;

/* Queue the collective a (a sum) on the scaled input: a's sendbuf is replaced by the scratch
 * that the progress thread fills from sc first (CUDA IPC or the pipeline then run it as any
 * collective on device buffers). */
coll_result_t colli_dev_submit_scaled(struct coll_comm *comm, const char *what, int device,
                                      void *stream, const colli_coll_args_t *a,
                                      const colli_dev_scale_t *sc);

#endif
