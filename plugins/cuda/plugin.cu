/*
 * libcoll_cuda.so.0: the CUDA GPU plugin (gpu_plugin.h) that libcoll loads with dlopen for the
 * device-buffer path. Thin wrappers around the CUDA runtime, linked statically, so that libcoll
 * itself never links CUDA and runs where CUDA is absent. Every function returns a cudaError_t.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "gpu_plugin.h"
#include "reduce_cuda.h"

/* A driver function, from the driver the runtime uses (the plugin links no libcuda), or NULL.
 * The version asked for must be at least the one the function came with: asked for as of an
 * earlier one, the driver answers "version not sufficient" and no pointer (cuFuncLoad, of 12.4,
 * asked for as of 12.0, was not found so, and the kernels were not loaded). DRIVER_FN takes the
 * version of the function's typedef in cudaTypedefs.h, so that the two cannot disagree. */
static void *driver_fn(const char *name, unsigned version)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
        return NULL;
    return fn;
}
#define DRIVER_FN(name, version) ((PFN_##name##_v##version)driver_fn(#name, version))

static int cu_init(char *why, size_t len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n == 0)
        e = cudaErrorNoDevice;
    if (e != cudaSuccess)
        snprintf(why, len, "no usable GPU: %s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    return (int)e;
}

static int cu_ptr_device(const void *p, int *device)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* not known to CUDA: host memory */
        return 0;
    }
    if (a.type != cudaMemoryTypeDevice && a.type != cudaMemoryTypeManaged)
        return 0; /* host or pinned (registered): the CPU reads it directly */
    /* Managed memory is device memory too, as for NCCL: the CPU could read it, but only in
     * stream order, after the kernels queued before the call (CuPy's managed allocator with
     * its NULL stream); its device is the one it was allocated for, else the current one. */
    if (a.device < 0 && cudaGetDevice(&a.device) != cudaSuccess)
        return 0;
    *device = a.device;
    return 1;
}

static int cu_set_device(int device)
{
    return (int)cudaSetDevice(device);
}

/* -1 on a thread without a current context: restoring "device 0" there (cudaGetDevice's answer)
 * would create a context on GPU 0 (about 0.5 GiB) for a rank that never uses it. */
static int cu_get_device(int *device)
{
    static const auto get_current = DRIVER_FN(cuCtxGetCurrent, 4000);
    CUcontext ctx = NULL;
    if (get_current != NULL && get_current(&ctx) == CUDA_SUCCESS && ctx == NULL) {
        *device = -1;
        return 0;
    }
    return (int)cudaGetDevice(device);
}

/* The calling thread in the relaxed capture mode for the scope of one call. While a thread of
 * the process captures a CUDA graph in the global mode (PyTorch's default), the runtime refuses
 * "potentially unsafe" calls (allocations, frees, stream creation, IPC) on that thread and on
 * every other thread in the global mode (a thread's default), and the refusal invalidates that
 * capture. The library makes
 * such calls while it captures a call into the user's graph (its buffers, the first time) and
 * on its progress thread while the user captures; none of them touches the capturing stream. */
struct relaxed {
    cudaStreamCaptureMode prev = cudaStreamCaptureModeRelaxed;
    relaxed()
    {
        (void)cudaThreadExchangeStreamCaptureMode(&prev);
    }
    ~relaxed()
    {
        (void)cudaThreadExchangeStreamCaptureMode(&prev);
    }
};

static int cu_dev_alloc(void **p, size_t bytes)
{
    relaxed r;
    return (int)cudaMalloc(p, bytes);
}

static int cu_dev_free(void *p)
{
    relaxed r;
    return (int)cudaFree(p);
}

static int cu_host_alloc(void **p, size_t bytes)
{
    relaxed r;
    return (int)cudaHostAlloc(p, bytes, cudaHostAllocPortable);
}

static int cu_host_free(void *p)
{
    relaxed r;
    return (int)cudaFreeHost(p);
}

static int cu_stream_create(void **stream)
{
    relaxed r;
    return (int)cudaStreamCreateWithFlags((cudaStream_t *)stream, cudaStreamNonBlocking);
}

static int cu_stream_destroy(void *stream)
{
    relaxed r;
    return (int)cudaStreamDestroy((cudaStream_t)stream);
}

static int cu_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    return (int)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream);
}

static int cu_stream_sync(void *stream)
{
    relaxed r; /* the progress thread's waits for its own streams */
    return (int)cudaStreamSynchronize((cudaStream_t)stream);
}

static int cu_host_func(void *stream, void (*fn)(void *), void *arg)
{
    return (int)cudaLaunchHostFunc((cudaStream_t)stream, fn, arg);
}

/* Spin on the global timer (nanoseconds) for us microseconds. */
__global__ void colli_delay_kernel(unsigned long long ns)
{
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

static int cu_delay(void *stream, unsigned us)
{
    colli_delay_kernel<<<1, 1, 0, (cudaStream_t)stream>>>((unsigned long long)us * 1000ull);
    return (int)cudaGetLastError();
}

static const char *cu_error_string(int err)
{
    static thread_local char buf[256];
    cudaError_t e = (cudaError_t)err;
    snprintf(buf, sizeof(buf), "%s: %s", cudaGetErrorName(e), cudaGetErrorString(e));
    return buf;
}

static const char *cu_device_name(int device)
{
    static thread_local char name[256];
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, device) != cudaSuccess) {
        (void)cudaGetLastError();
        return "";
    }
    snprintf(name, sizeof(name), "%s", p.name);
    return name;
}

static_assert(COLLI_GPU_MAX_SRCS <= COLLI_CUDA_MAX_SRCS, "the plugin takes what the kernels take");

/* The current device's multiprocessor count, for a launch grid: asked per call (an attribute
 * query, no synchronisation), so no per-device table is kept. */
static cudaError_t sm_count(int *sm)
{
    int device = 0;
    cudaError_t e = cudaGetDevice(&device);
    return e == cudaSuccess ? cudaDeviceGetAttribute(sm, cudaDevAttrMultiProcessorCount, device)
                            : e;
}

static int cu_reduce(void *dst, const void *const *srcs, int nsrcs, size_t count, int dt, int op,
                     uint32_t divisor, void *stream)
{
    int sm = 0;
    cudaError_t e = sm_count(&sm);
    if (e != cudaSuccess)
        return (int)e;
    return colli_cuda_reduce(dst, srcs, nsrcs, count, (coll_datatype_t)dt, (coll_op_t)op, divisor,
                             sm, stream);
}

static int cu_scale(void *dst, const void *src, size_t count, int dt, const void *scalar,
                    int on_device, void *stream)
{
    int sm = 0;
    cudaError_t e = sm_count(&sm);
    if (e != cudaSuccess)
        return (int)e;
    return colli_cuda_scale(dst, src, count, (coll_datatype_t)dt, scalar, on_device, sm, stream);
}

/* the plugin's list is the kernels' list */
static_assert(COLLI_GPU_LIST_OPS == COLLI_CUDA_LIST_OPS &&
                  sizeof(colli_gpu_list_t) == sizeof(colli_cuda_list_t) &&
                  sizeof(colli_gpu_list_op_t) == sizeof(colli_cuda_list_op_t) &&
                  offsetof(colli_gpu_list_t, ops) == offsetof(colli_cuda_list_t, ops) &&
                  offsetof(colli_gpu_list_op_t, srcs) == offsetof(colli_cuda_list_op_t, srcs) &&
                  offsetof(colli_gpu_list_op_t, count) == offsetof(colli_cuda_list_op_t, count) &&
                  offsetof(colli_gpu_list_op_t, nsrcs) == offsetof(colli_cuda_list_op_t, nsrcs) &&
                  offsetof(colli_gpu_list_op_t, divisor) == offsetof(colli_cuda_list_op_t, divisor),
              "list layout");

static int cu_reduce_list(const colli_gpu_list_t *list, int dt, int op, void *stream)
{
    int sm = 0;
    cudaError_t e = sm_count(&sm);
    if (e != cudaSuccess)
        return (int)e;
    return colli_cuda_reduce_list((const colli_cuda_list_t *)list, (coll_datatype_t)dt,
                                  (coll_op_t)op, sm, stream);
}

static_assert(sizeof(cudaIpcMemHandle_t) == COLLI_GPU_IPC_HANDLE, "IPC handle size");

static int cu_ipc_export(const void *p, void *handle, size_t *offset, size_t *size, uint64_t *id)
{
    /* looked up once per process (C++ initialises function statics once, thread-safely) */
    static const auto range = DRIVER_FN(cuMemGetAddressRange, 3020);
    static const auto attr = DRIVER_FN(cuPointerGetAttribute, 4000);
    if (range == NULL || attr == NULL)
        return (int)cudaErrorNotSupported;
    CUdeviceptr base = 0, dp = (CUdeviceptr)(uintptr_t)p;
    unsigned long long buffer_id = 0;
    if (range(&base, size, dp) != CUDA_SUCCESS ||
        attr(&buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, dp) != CUDA_SUCCESS)
        return (int)cudaErrorInvalidValue;
    cudaIpcMemHandle_t h;
    relaxed r;
    cudaError_t e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
    if (e != cudaSuccess)
        return (int)e;
    memcpy(handle, &h, sizeof(h));
    *offset = (size_t)(dp - base);
    *id = (uint64_t)buffer_id;
    return 0;
}

static int cu_ipc_open(const void *handle, void **base)
{
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof(h));
    relaxed r;
    return (int)cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
}

static int cu_ipc_close(void *base)
{
    relaxed r;
    return (int)cudaIpcCloseMemHandle(base);
}

/* The stream memory operations of the driver (cuStreamWriteValue32, cuStreamWaitValue32): the
 * stream itself stores and waits, no thread is blocked. The write has its default memory
 * barrier: the host sees the word only after the writes of the work before it (copies into
 * pinned memory). The driver's code is returned as it is (the runtime numbers these errors
 * alike: 1 invalid value, 801 not supported), so that a fallback's message names the cause. */
static int cu_word(void *stream, volatile uint32_t *word, uint32_t value, bool wait)
{
    static const auto write32 = DRIVER_FN(cuStreamWriteValue32, 11070);
    static const auto wait32 = DRIVER_FN(cuStreamWaitValue32, 11070);
    if (write32 == NULL || wait32 == NULL)
        return (int)cudaErrorNotSupported;
    void *w = NULL;
    cudaError_t e = cudaHostGetDevicePointer(&w, (void *)word, 0);
    if (e != cudaSuccess)
        return (int)e;
    CUresult c = wait ? wait32((CUstream)stream, (CUdeviceptr)w, value, CU_STREAM_WAIT_VALUE_GEQ)
                      : write32((CUstream)stream, (CUdeviceptr)w, value, 0);
    return c == CUDA_SUCCESS ? 0 : (int)c;
}

static int cu_word_write(void *stream, volatile uint32_t *word, uint32_t value)
{
    return cu_word(stream, word, value, false);
}

static int cu_word_wait(void *stream, volatile uint32_t *word, uint32_t value)
{
    return cu_word(stream, word, value, true);
}

static int cu_gate_words(void *stream, volatile uint32_t *arrived, volatile uint32_t *release,
                         uint32_t value)
{
    int err = cu_word_write(stream, arrived, value);
    return err != 0 ? err : cu_word_wait(stream, release, value);
}

/* Every kernel of the plugin, loaded into the current context now (gpu_plugin.h): the runtime
 * looks each one up (cudaGetFuncBySymbol, which loads its module), then the driver loads the
 * function where it is not yet (cuFuncIsLoaded, cuFuncLoad: drivers of CUDA 12.4 on, which a
 * CUDA 13 runtime needs anyway). A driver without them gets the lookup only, which may leave a
 * function to load at its first launch; CUDA_MODULE_LOADING=EAGER is the remedy there. */
static int cu_load_kernels(int only_if_current, int *loaded)
{
    static const auto get_current = DRIVER_FN(cuCtxGetCurrent, 4000);
    static const auto is_loaded = DRIVER_FN(cuFuncIsLoaded, 12040);
    static const auto load = DRIVER_FN(cuFuncLoad, 12040);
    *loaded = 0;
    if (only_if_current) {
        CUcontext ctx = NULL;
        if (get_current == NULL || get_current(&ctx) != CUDA_SUCCESS || ctx == NULL)
            return 0;
    }
    const void *syms[COLLI_CUDA_NUM_KERNELS + 1];
    relaxed r;
    size_t n = colli_cuda_kernel_symbols(syms, COLLI_CUDA_NUM_KERNELS);
    syms[n++] = (const void *)colli_delay_kernel;
    for (size_t i = 0; i < n; i++) {
        cudaFunction_t f = NULL;
        cudaError_t e = cudaGetFuncBySymbol(&f, syms[i]);
        if (e != cudaSuccess)
            return (int)e;
        /* the driver's codes are the runtime's for these calls' errors (209: no binary for
         * this GPU is cudaErrorNoKernelImageForDevice) */
        CUfunctionLoadingState state = CU_FUNCTION_LOADING_STATE_LOADED;
        CUresult c = is_loaded != NULL ? is_loaded(&state, (CUfunction)f) : CUDA_SUCCESS;
        if (c == CUDA_SUCCESS && state != CU_FUNCTION_LOADING_STATE_LOADED)
            c = load != NULL ? load((CUfunction)f) : CUDA_ERROR_NOT_SUPPORTED;
        if (c != CUDA_SUCCESS)
            return (int)c;
    }
    *loaded = 1;
    return 0;
}

static int cu_stream_capturing(void *stream, int *capturing)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = cudaStreamIsCapturing((cudaStream_t)stream, &st);
    *capturing = e == cudaSuccess && st != cudaStreamCaptureStatusNone;
    return (int)e;
}

static int cu_capture(void *stream, int begin, void **exec)
{
    if (begin)
        return (int)cudaStreamBeginCapture((cudaStream_t)stream, cudaStreamCaptureModeGlobal);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture((cudaStream_t)stream, &g);
    if (e == cudaSuccess && exec != NULL)
        e = cudaGraphInstantiate((cudaGraphExec_t *)exec, g, 0);
    if (g != NULL) /* the executable graph keeps what it needs, user objects included */
        (void)cudaGraphDestroy(g);
    return (int)e;
}

static int cu_graph_keep(void *stream, void (*release)(void *), void *arg)
{
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamGetCaptureInfo((cudaStream_t)stream, &st, NULL, &g);
    if (e == cudaSuccess && (st != cudaStreamCaptureStatusActive || g == NULL))
        e = cudaErrorStreamCaptureInvalidated;
    cudaUserObject_t obj = NULL;
    if (e == cudaSuccess)
        e = cudaUserObjectCreate(&obj, arg, release, 1, cudaUserObjectNoDestructorSync);
    if (e == cudaSuccess) /* the graph takes the one reference */
        e = cudaGraphRetainUserObject(g, obj, 1, cudaGraphUserObjectMove);
    if (e != cudaSuccess && obj != NULL)
        (void)cudaUserObjectRelease(obj, 1); /* release(arg) runs */
    else if (e != cudaSuccess)
        release(arg);
    return (int)e;
}

static int cu_graph_launch(void *exec, void *stream)
{
    return (int)cudaGraphLaunch((cudaGraphExec_t)exec, (cudaStream_t)stream);
}

static int cu_graph_destroy(void *exec)
{
    return (int)cudaGraphExecDestroy((cudaGraphExec_t)exec);
}

static int cu_stream_query(void *stream, int *busy)
{
    relaxed r;
    cudaError_t e = cudaStreamQuery((cudaStream_t)stream);
    *busy = e == cudaErrorNotReady;
    return e == cudaErrorNotReady ? 0 : (int)e;
}

static const colli_gpu_ops_t cu_ops = {
    sizeof(colli_gpu_ops_t),
    COLLI_GPU_PLUGIN_VERSION,
    "cuda",
    cu_init,
    cu_ptr_device,
    cu_set_device,
    cu_get_device,
    cu_dev_alloc,
    cu_dev_free,
    cu_host_alloc,
    cu_host_free,
    cu_stream_create,
    cu_stream_destroy,
    cu_memcpy_async,
    cu_stream_sync,
    cu_host_func,
    cu_delay,
    cu_error_string,
    cu_device_name,
    cu_reduce,
    cu_ipc_export,
    cu_ipc_open,
    cu_ipc_close,
    cu_gate_words,
    cu_load_kernels,
    cu_scale,
    cu_stream_capturing,
    cu_capture,
    cu_stream_query,
    cu_word_write,
    cu_word_wait,
    cu_reduce_list,
    cu_graph_keep,
    cu_graph_launch,
    cu_graph_destroy,
};

extern "C" __attribute__((visibility("default"))) const colli_gpu_ops_t *colli_gpu_plugin_v1(void)
{
    return &cu_ops;
}
