/* The CUDA that the process already uses, found and never loaded by this layer: the runtime's
 * cudaMalloc/cudaFree/cudaGetDevice where a runtime library is loaded, else the driver's
 * equivalents (a program that links the runtime statically, as CuPy 14 does, has no runtime
 * library to find, only libcuda.so.1); with neither, the process does not use CUDA and
 * ncclMemAlloc gives kcoll's host memory, so that a CPU program runs too. Allocations and frees
 * run in the relaxed capture mode: while a thread captures a CUDA graph in the global mode
 * (PyTorch's default), CUDA refuses them on every thread in that mode, and the refusal
 * invalidates the capture (vLLM allocates from NCCL's pool inside torch.cuda.graph). */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>

#include "nccl_compat.h"

/* The runtime's entry point sym when the process has a runtime loaded (a framework that uses
 * CUDA does). Global symbols first (PyTorch makes its runtime global); else a runtime loaded
 * privately, found by its SONAME without loading it: a Python extension module brings libcudart
 * in with RTLD_LOCAL, which RTLD_DEFAULT does not see, and without it ncclCommCuDevice said GPU
 * 0 on every GPU and ncclMemAlloc gave host memory. The reference dlopen takes is kept: the
 * runtime stays while the process uses it. */
static void *cudart(const char *sym)
{
    static const char *const sonames[] = {"libcudart.so.13", "libcudart.so.12"};
    void *fn = dlsym(RTLD_DEFAULT, sym);
    for (size_t i = 0; fn == NULL && i < sizeof(sonames) / sizeof(sonames[0]); i++) {
        void *h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (h != NULL && (fn = dlsym(h, sym)) == NULL)
            (void)dlclose(h);
    }
    return fn;
}

/* The driver's entry point sym when the process has the driver loaded (every CUDA program
 * does, whatever way it links the runtime). The reference dlopen takes is given back: the
 * driver stays loaded by what loaded it, and is never unloaded. */
static void *driver(const char *sym)
{
    void *h = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    void *fn = h != NULL ? dlsym(h, sym) : NULL;
    if (h != NULL)
        (void)dlclose(h);
    return fn;
}

typedef CUresult (*exchange_fn)(CUstreamCaptureMode *mode);

/* The calling thread into the relaxed capture mode (*prev: the mode to restore; false: the
 * driver has no such call, nothing changed). The driver's call is the runtime's. */
static bool relax(exchange_fn *xchg, CUstreamCaptureMode *prev)
{
    *xchg = (exchange_fn)driver("cuThreadExchangeStreamCaptureMode");
    *prev = CU_STREAM_CAPTURE_MODE_RELAXED;
    return *xchg != NULL && (*xchg)(prev) == CUDA_SUCCESS;
}

static void unrelax(exchange_fn xchg, CUstreamCaptureMode prev, bool relaxed)
{
    if (relaxed)
        (void)xchg(&prev);
}

/* NCCL's allocator gives device memory: the runtime's cudaMalloc, else the driver's cuMemAlloc
 * in the thread's current context (the runtime's primary context of the current GPU), else
 * host memory that the ranks of a host can map (coll_mem_alloc). */
KCOLL_NCCL_API ncclResult_t ncclMemAlloc(void **ptr, size_t size)
{
    __typeof__(cudaMalloc) *alloc = (__typeof__(cudaMalloc) *)cudart("cudaMalloc");
    CUresult (*dalloc)(CUdeviceptr *, size_t) =
        alloc == NULL ? (CUresult(*)(CUdeviceptr *, size_t))driver("cuMemAlloc_v2") : NULL;
    if (alloc == NULL && dalloc == NULL && ptr != NULL && size == 0) {
        *ptr = NULL; /* as cudaMalloc of 0 bytes, where NCCL falls back to it */
        return ncclSuccess;
    }
    if (alloc == NULL && dalloc == NULL)
        return nccl_result(coll_mem_alloc(ptr, size));
    if (ptr == NULL)
        return nccl_error(ncclInvalidArgument, "ncclMemAlloc: ptr is NULL");
    exchange_fn xchg = NULL;
    CUstreamCaptureMode prev;
    const bool relaxed = relax(&xchg, &prev);
    int err = 0;
    if (alloc != NULL) {
        err = (int)alloc(ptr, size);
    } else {
        CUdeviceptr d = 0;
        err = (int)dalloc(&d, size);
        *ptr = err == 0 ? (void *)(uintptr_t)d : NULL;
    }
    unrelax(xchg, prev, relaxed);
    if (err != 0)
        return nccl_error(ncclUnhandledCudaError, "ncclMemAlloc of %zu bytes: %s failed (%d)%s",
                          size, alloc != NULL ? "cudaMalloc" : "cuMemAlloc", err,
                          err == CUDA_ERROR_INVALID_CONTEXT && alloc == NULL
                              ? ": no GPU is current on this thread (set one first, e.g. "
                                "cudaSetDevice or cupy.cuda.Device(n).use())"
                              : "");
    return ncclSuccess;
}
KCOLL_NCCL_ALIAS(ncclMemAlloc);

/* Device memory of this process (the runtime's or the driver's answer), which ncclMemAlloc
 * gave from CUDA; anything else came from coll_mem_alloc. */
static bool device_memory(void *ptr)
{
    __typeof__(cudaPointerGetAttributes) *attrs =
        (__typeof__(cudaPointerGetAttributes) *)cudart("cudaPointerGetAttributes");
    if (attrs != NULL) {
        struct cudaPointerAttributes a;
        return attrs(&a, ptr) == cudaSuccess && a.type == cudaMemoryTypeDevice;
    }
    CUresult (*attr)(void *, CUpointer_attribute, CUdeviceptr) =
        (CUresult(*)(void *, CUpointer_attribute, CUdeviceptr))driver("cuPointerGetAttribute");
    unsigned int type = 0;
    return attr != NULL &&
           attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (CUdeviceptr)(uintptr_t)ptr) ==
               CUDA_SUCCESS &&
           type == CU_MEMORYTYPE_DEVICE;
}

KCOLL_NCCL_API ncclResult_t ncclMemFree(void *ptr)
{
    if (ptr == NULL || !device_memory(ptr))
        return nccl_result(coll_mem_free(ptr));
    __typeof__(cudaFree) *release = (__typeof__(cudaFree) *)cudart("cudaFree");
    CUresult (*drelease)(CUdeviceptr) =
        release == NULL ? (CUresult(*)(CUdeviceptr))driver("cuMemFree_v2") : NULL;
    if (release == NULL && drelease == NULL)
        return nccl_error(ncclUnhandledCudaError, "ncclMemFree(%p): no cudaFree or cuMemFree", ptr);
    exchange_fn xchg = NULL;
    CUstreamCaptureMode prev;
    const bool relaxed = relax(&xchg, &prev);
    const int err =
        release != NULL ? (int)release(ptr) : (int)drelease((CUdeviceptr)(uintptr_t)ptr);
    unrelax(xchg, prev, relaxed);
    return err == 0 ? ncclSuccess
                    : nccl_error(ncclUnhandledCudaError, "ncclMemFree(%p): %s failed (%d)", ptr,
                                 release != NULL ? "cudaFree" : "cuMemFree", err);
}
KCOLL_NCCL_ALIAS(ncclMemFree);

int nccl_current_device(void)
{
    __typeof__(cudaGetDevice) *get = (__typeof__(cudaGetDevice) *)cudart("cudaGetDevice");
    int device = 0;
    if (get != NULL)
        return get(&device) == cudaSuccess ? device : 0;
    CUresult (*ctx_device)(CUdevice *) = (CUresult(*)(CUdevice *))driver("cuCtxGetDevice");
    CUdevice d = 0;
    return ctx_device != NULL && ctx_device(&d) == CUDA_SUCCESS ? (int)d : 0;
}
