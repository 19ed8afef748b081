/* kcoll's libnccl.so.2 finds a CUDA runtime that the process loaded privately (RTLD_LOCAL, as a
 * Python extension module does), which dlsym(RTLD_DEFAULT) does not see:
 * ncclCommCuDevice says the GPU the runtime has current, ncclMemAlloc and ncclMemFree use its
 * cudaMalloc and cudaFree. Before the runtime is loaded, ncclMemAlloc gives kcoll's host memory.
 *   nccl_cudart <path of the stand-in libcudart.so.13> */
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf(" (%s)\n", ncclGetLastError(NULL));                                             \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: nccl_cudart <libcudart.so.13 stand-in>\n");
        return 2;
    }
    void *host = NULL;
    CHECK(ncclMemAlloc(&host, 4096) == ncclSuccess && host != NULL, "ncclMemAlloc, no runtime");
    CHECK(ncclMemFree(host) == ncclSuccess, "ncclMemFree of host memory");

    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        printf("FAIL: cannot load the stand-in %s: %s\n", argv[1], dlerror());
        return 1;
    }
    CHECK(dlsym(RTLD_DEFAULT, "cudaMalloc") == NULL, "the stand-in is private to its handle");
    void (*set_device)(int) = NULL;
    int (*owns)(const void *) = NULL, (*freed)(void) = NULL;
    *(void **)&set_device = dlsym(h, "stub_set_device");
    *(void **)&owns = dlsym(h, "stub_owns");
    *(void **)&freed = dlsym(h, "stub_freed");
    if (set_device == NULL || owns == NULL || freed == NULL) {
        printf("FAIL: the stand-in lacks stub_set_device, stub_owns or stub_freed\n");
        return 1;
    }
    set_device(3);

    ncclUniqueId id;
    ncclComm_t comm = NULL;
    int dev = -1;
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "ncclCommInitRank");
    if (comm != NULL) {
        CHECK(ncclCommCuDevice(comm, &dev) == ncclSuccess && dev == 3,
              "ncclCommCuDevice says GPU %d, the runtime has GPU 3 current", dev);
        CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
    }
    void *p = NULL;
    CHECK(ncclMemAlloc(&p, 4096) == ncclSuccess && p != NULL, "ncclMemAlloc");
    CHECK(owns(p), "ncclMemAlloc's memory %p comes from the runtime's cudaMalloc", p);
    CHECK(ncclMemFree(p) == ncclSuccess, "ncclMemFree");
    CHECK(freed() == 1, "ncclMemFree called the runtime's cudaFree %d times (want 1)", freed());
    if (failures == 0)
        printf("ok: a privately loaded CUDA runtime is used (GPU %d, cudaMalloc, cudaFree)\n", dev);
    return failures != 0;
}
