/* A stand-in libcudart.so.13 for nccl_cudart runtime: the few runtime calls kcoll's
 * libnccl.so.2 makes (cudaGetDevice, cudaMalloc, cudaFree, cudaPointerGetAttributes), with the
 * real header's types, over host memory (stub_alloc.h). */
#include <cuda_runtime_api.h>
#include <string.h>

#include "stub_alloc.h"

EXPORT cudaError_t cudaGetDevice(int *device)
{
    *device = current;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMalloc(void **p, size_t bytes)
{
    *p = stub_alloc(bytes);
    return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaFree(void *p)
{
    return stub_free(p) == 0 ? cudaSuccess : cudaErrorInvalidValue;
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof(*a));
    a->type = stub_owns(p) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    a->device = current;
    return cudaSuccess;
}
