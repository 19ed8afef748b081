/* A stand-in libcuda.so.1 for nccl_cudriver: the driver calls kcoll's libnccl.so.2 makes when
 * the process has no CUDA runtime library to find (a runtime linked statically, as CuPy 14's),
 * with the real header's types, over host memory: the current context's GPU, cuMemAlloc,
 * cuMemFree, cuPointerGetAttribute (its memory type) and the per-thread capture mode;
 * cuDriverGetVersion for libcoll. stub_* let the test set the GPU (-1: no context current) and
 * see what was allocated, freed, and in which capture mode. */
#include <cuda.h>
#include <stdint.h>
#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

static int current = 0;
static void *given[16];
static int freed, strict_at_alloc = -1, strict_at_free = -1;
static _Thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

EXPORT void stub_set_device(int device)
{
    current = device;
}

/* 1 when p came from this cuMemAlloc and was not freed */
EXPORT int stub_owns(const void *p)
{
    for (int i = 0; i < 16; i++)
        if (given[i] != NULL && given[i] == p)
            return 1;
    return 0;
}

EXPORT int stub_freed(void)
{
    return freed;
}

/* 1 when the last cuMemAlloc / cuMemFree ran in a mode other than relaxed, -1 before any */
EXPORT int stub_strict_at(int alloc)
{
    return alloc ? strict_at_alloc : strict_at_free;
}

/* the calling thread's capture mode now */
EXPORT int stub_mode(void)
{
    return (int)mode;
}

EXPORT CUresult cuDriverGetVersion(int *version)
{
    *version = 13000;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
    const CUstreamCaptureMode was = mode;
    mode = *m;
    *m = was;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *device)
{
    if (current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    *device = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t bytes)
{
    if (current < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    strict_at_alloc = mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    for (int i = 0; i < 16; i++)
        if (given[i] == NULL) {
            given[i] = calloc(1, bytes ? bytes : 1);
            *p = (CUdeviceptr)(uintptr_t)given[i];
            return given[i] != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
        }
    return CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr d)
{
    void *p = (void *)(uintptr_t)d;
    strict_at_free = mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    for (int i = 0; i < 16; i++)
        if (given[i] != NULL && given[i] == p) {
            free(p);
            given[i] = NULL;
            freed++;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_VALUE;
}

EXPORT CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr d)
{
    if (!stub_owns((void *)(uintptr_t)d))
        return CUDA_ERROR_INVALID_VALUE; /* not CUDA's: host memory */
    if (attribute == CU_POINTER_ATTRIBUTE_MEMORY_TYPE)
        *(unsigned int *)data = CU_MEMORYTYPE_DEVICE;
    else if (attribute == CU_POINTER_ATTRIBUTE_IS_MANAGED)
        *(unsigned int *)data = 0;
    else
        return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}
