/* A stand-in libcuda.so.1 for nccl_cudart driver: the driver calls kcoll's libnccl.so.2 makes
 * when the process has no CUDA runtime library to find (a runtime linked statically, as CuPy
 * 14's), with the real header's types, over host memory (stub_alloc.h): the current context's
 * GPU, cuMemAlloc, cuMemFree, cuPointerGetAttribute (its memory type) and the per-thread
 * capture mode; cuDriverGetVersion for libcoll. stub_strict_at and stub_mode tell the test in
 * which capture mode the allocation and the free ran, and the mode now. */
#include <cuda.h>
#include <stdint.h>

#include "stub_alloc.h"

static int strict_at_alloc = -1, strict_at_free = -1;
static _Thread_local CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* 1 when the last cuMemAlloc (alloc) / cuMemFree ran in a mode other than relaxed, -1 before
 * any */
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
    void *m = stub_alloc(bytes);
    *p = (CUdeviceptr)(uintptr_t)m;
    return m != NULL ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr d)
{
    strict_at_free = mode != CU_STREAM_CAPTURE_MODE_RELAXED;
    return stub_free((void *)(uintptr_t)d) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
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
