/*
 * The GPU plugin interface: what libcoll's device-buffer path (libcoll/src/device/) needs
 * from a GPU runtime, as a table of plain C functions. libcoll never links CUDA: it loads a plugin
 * with dlopen and calls colli_gpu_plugin_v1() for the table.
 *
 *   libcoll_cuda.so.0   the CUDA plugin (plugins/cuda/plugin.cu), built when CMake finds nvcc,
 *                       linked with the static CUDA runtime and the CUDA kernels
 *   tests/device/fake_gpu.c  a stand-in that runs without a GPU ("device" memory is host
 *                       memory it hands out, a stream is a thread): the path's own logic
 *                       (staging, the pipeline, CUDA IPC, stream ordering, the progress thread,
 *                       errors) is tested on every machine
 *
 * Every function returns 0 on success or the runtime's error code (a cudaError_t for CUDA), which
 * error_string names. A stream is the runtime's stream handle as void * (NULL: the default
 * stream). Internal to kcoll, not installed.
 */
#ifndef COLLI_GPU_PLUGIN_H
#define COLLI_GPU_PLUGIN_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define COLLI_GPU_PLUGIN_VERSION 8
#define COLLI_GPU_MAX_SRCS       8  /* inputs of one reduce call */
#define COLLI_GPU_IPC_HANDLE     64 /* bytes of an IPC handle (a cudaIpcMemHandle_t) */
#define COLLI_GPU_PLUGIN_SYMBOL  "colli_gpu_plugin_v1"

/* A list of reductions and copies that a kernel reads when it runs, not when it is enqueued
 * (reduce_list): for work whose pointers are known only later, such as CUDA IPC's peers'. */
#define COLLI_GPU_LIST_OPS 8
typedef struct colli_gpu_list_op {
    void *dst;
    const void *srcs[COLLI_GPU_MAX_SRCS];
    uint64_t count;   /* elements of the list's datatype; bytes for a copy */
    int32_t nsrcs;    /* 1..COLLI_GPU_MAX_SRCS as for reduce; 0: a copy of count bytes of srcs[0] */
    uint32_t divisor; /* as for reduce (COLL_AVG) */
} colli_gpu_list_op_t;
typedef struct colli_gpu_list {
    uint32_t n; /* ops[0, n) run; 0: nothing */
    uint32_t pad;
    colli_gpu_list_op_t ops[COLLI_GPU_LIST_OPS];
} colli_gpu_list_t;

typedef struct colli_gpu_ops {
    uint32_t struct_size; /* sizeof(colli_gpu_ops_t) of the plugin's build */
    uint32_t version;     /* COLLI_GPU_PLUGIN_VERSION */
    const char *name;     /* "cuda", "fake" */
    /* Ready to use? 0, or an error with the reason in why (no device, driver too old). */
    int (*init)(char *why, size_t len);
    /* 1 when p is device or managed memory (*device: its ordinal), 0 for host or pinned memory
     * (which the CPU reads directly, whatever is queued on the streams). */
    int (*ptr_device)(const void *p, int *device);
    /* Make device the calling thread's current device; the calling thread's current device. */
    int (*set_device)(int device);
    int (*get_device)(int *device);
    /* Device memory, and pinned host memory for staging. */
    int (*dev_alloc)(void **p, size_t bytes);
    int (*dev_free)(void *p);
    int (*host_alloc)(void **p, size_t bytes);
    int (*host_free)(void *p);
    /* A stream of the current device that does not synchronise with the default stream. */
    int (*stream_create)(void **stream);
    int (*stream_destroy)(void *stream);
    /* Copy bytes in any direction (unified addressing), ordered on stream. */
    int (*memcpy_async)(void *dst, const void *src, size_t bytes, void *stream);
    /* Wait until everything enqueued on stream so far has run; its first error. */
    int (*stream_sync)(void *stream);
    /* Run fn(arg) on a runtime thread once the stream reaches this point; the stream goes on
     * when fn returns. fn must not call the runtime. */
    int (*host_func)(void *stream, void (*fn)(void *), void *arg);
    /* Keep the stream busy for about us microseconds (a kernel): for tests and benchmarks. */
    int (*delay)(void *stream, unsigned us);
    /* "cudaErrorInvalidValue: invalid argument" */
    const char *(*error_string)(int err);
    /* Device name of ordinal device ("NVIDIA H100 80GB HBM3"), for logs; "" when unknown. */
    const char *(*device_name)(int device);
    /* dst[i] = srcs[0][i] OP ... OP srcs[nsrcs-1][i] for i < count on the current device's
     * memory, ordered on stream: the kernels of reduce_cuda.h (colli_cuda_reduce), with their
     * semantics (dt a coll_datatype_t, op a coll_op_t; COLL_AVG sums and, with divisor > 0,
     * divides at the last step). 1 <= nsrcs <= COLLI_GPU_MAX_SRCS; dst may equal srcs[0]. */
    int (*reduce)(void *dst, const void *const *srcs, int nsrcs, size_t count, int dt, int op,
                  uint32_t divisor, void *stream);
    /* Device memory shared between processes of one host (CUDA IPC). ipc_export: a handle
     * (COLLI_GPU_IPC_HANDLE bytes) for the allocation that contains p, p's offset in it, the
     * allocation's size and an id that no other allocation of this process has had (a handle
     * may repeat once its allocation is freed). ipc_open: map a handle another process exported
     * (never this one's) on the current device; *base is the allocation's start here.
     * ipc_close: unmap it. */
    int (*ipc_export)(const void *p, void *handle, size_t *offset, size_t *size, uint64_t *id);
    int (*ipc_open)(const void *handle, void **base);
    int (*ipc_close)(void *base);
    /* A gate without a blocked thread: once stream reaches this point, store value into
     * *arrived, then hold the stream until (int32_t)(*release - value) >= 0. Both words are in
     * pinned host memory from host_alloc; the host reads arrived and writes release. Not
     * supported: a nonzero error (the caller then uses host_func). */
    int (*gate_words)(void *stream, volatile uint32_t *arrived, volatile uint32_t *release,
                      uint32_t value);
    /* Load every kernel the plugin launches (reduce, delay) into the calling thread's current
     * context now; *loaded says whether it did. CUDA loads a kernel lazily at its first launch
     * (CUDA_MODULE_LOADING=LAZY, the default since 12.2), and the load may wait until the
     * whole device is idle: at a first launch on the progress thread, while a gate holds the
     * caller's stream, that wait would never end. So the library calls this on the caller's
     * thread before any gate: at creation with only_if_current (nothing is done, *loaded = 0,
     * when the thread has no context yet: a context is not made only for this), and at the
     * first device call on its GPU without. 0, or an error (no kernel image for this GPU). */
    int (*load_kernels)(int only_if_current, int *loaded);
    /* dst[i] = scalar * src[i] for i < count on the current device's memory, ordered on stream
     * (PreMulSum's first step): scalar is one element of dt in host memory, read now, or with
     * on_device in device memory, read when the work runs (ncclScalarDevice); computed as
     * colli_scale (coll_kernels.h) does. dst may equal src. */
    int (*scale)(void *dst, const void *src, size_t count, int dt, const void *scalar,
                 int on_device, void *stream);
    /* Is stream capturing a CUDA graph (cudaStreamIsCapturing: active, or invalidated by an
     * error)? Work enqueued on such a stream is recorded into the graph, not run (graph.c).
     * 0, or an error. */
    int (*stream_capturing)(void *stream, int *capturing);
    /* For tests: begin a capture on stream in the global mode (PyTorch's default), or end it
     * (begin = 0; an error when the capture was invalidated) and instantiate the graph into
     * *exec (exec NULL: discard it). */
    int (*capture)(void *stream, int begin, void **exec);
    /* Has stream run everything enqueued on it so far? *busy = 0 when it has (cudaStreamQuery);
     * 0, or the first error of its work. */
    int (*stream_query)(void *stream, int *busy);
    /* Stream memory operations one at a time, for a call's program on the caller's stream
     * (device.c): once stream gets here, word_write stores value into *word, after everything
     * enqueued before it has run and its writes are visible to the host (cuStreamWriteValue32);
     * word_wait holds the stream until (int32_t)(*word - value) >= 0 (cuStreamWaitValue32,
     * GEQ). Words in pinned host memory from host_alloc. Not supported: a nonzero error. */
    int (*word_write)(void *stream, volatile uint32_t *word, uint32_t value);
    int (*word_wait)(void *stream, volatile uint32_t *word, uint32_t value);
    /* Run the ops of *list (device memory of the current device, read when the kernel runs) on
     * stream, in no set order (they must not depend on each other): reductions in dt and op
     * with reduce's semantics, copies of bytes. */
    int (*reduce_list)(const colli_gpu_list_t *list, int dt, int op, void *stream);
    /* CUDA graphs (graph.c). graph_keep: keep arg alive with the graph that stream is
     * capturing (cudaStreamGetCaptureInfo): once that graph and every executable graph made
     * from it are destroyed, release(arg) runs on a runtime thread (it must not call the
     * runtime; cudaUserObjectCreate, cudaGraphRetainUserObject); release(arg) runs exactly
     * once, so after an error too (the stream is not capturing). 0, or an error. For tests:
     * launch an executable graph from capture on stream; destroy it. */
    int (*graph_keep)(void *stream, void (*release)(void *), void *arg);
    int (*graph_launch)(void *exec, void *stream);
    int (*graph_destroy)(void *exec);
} colli_gpu_ops_t;

typedef const colli_gpu_ops_t *(*colli_gpu_plugin_fn)(void);

/* The one symbol a plugin exports. */
const colli_gpu_ops_t *colli_gpu_plugin_v1(void);

/* Load the plugin at path (a path or a name) and return its table, or NULL with *why saying
 * what went wrong. The library stays loaded: a GPU runtime is not made to be unloaded. Not yet
 * initialised (init). */
static inline const colli_gpu_ops_t *colli_gpu_plugin_open(const char *path, const char **why)
{
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        *why = dlerror();
        return NULL;
    }
    colli_gpu_plugin_fn fn;
    *(void **)&fn = dlsym(h, COLLI_GPU_PLUGIN_SYMBOL);
    const colli_gpu_ops_t *o = fn != NULL ? fn() : NULL;
    if (o == NULL || o->version != COLLI_GPU_PLUGIN_VERSION ||
        o->struct_size < sizeof(colli_gpu_ops_t)) {
        *why = "not a kcoll GPU plugin of this build's version (no " COLLI_GPU_PLUGIN_SYMBOL
               ", or another version)";
        return NULL;
    }
    return o;
}

#ifdef __cplusplus
}
#endif

#endif
