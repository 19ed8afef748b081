/* A stand-in libcudart.so.13 for nccl_cudart: the few runtime calls kcoll's libnccl.so.2 makes
 * (cudaGetDevice, cudaMalloc, cudaFree, cudaPointerGetAttributes), with the real header's
 * types, over host memory; stub_* let the test set the current GPU and see what was
 * allocated and freed. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#define EXPORT __attribute__((visibility("default")))

static int current = 0;
static void *given[16];
static int freed;

EXPORT void stub_set_device(int device)
{
    current = device;
}

/* 1 when p came from this cudaMalloc and was not freed; the number of cudaFree calls. */
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

EXPORT cudaError_t cudaGetDevice(int *device)
{
    *device = current;
    return cudaSuccess;
}

EXPORT cudaError_t cudaMalloc(void **p, size_t bytes)
{
    for (int i = 0; i < 16; i++)
        if (given[i] == NULL) {
            given[i] = *p = calloc(1, bytes ? bytes : 1);
            return *p != NULL ? cudaSuccess : cudaErrorMemoryAllocation;
        }
    return cudaErrorMemoryAllocation;
}

EXPORT cudaError_t cudaFree(void *p)
{
    for (int i = 0; i < 16; i++)
        if (given[i] != NULL && given[i] == p) {
            free(p);
            given[i] = NULL;
            freed++;
            return cudaSuccess;
        }
    return cudaErrorInvalidValue;
}

EXPORT cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
    memset(a, 0, sizeof(*a));
    a->type = stub_owns(p) ? cudaMemoryTypeDevice : cudaMemoryTypeUnregistered;
    a->device = current;
    return cudaSuccess;
}
