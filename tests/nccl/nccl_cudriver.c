/* kcoll's libnccl.so.2 in a process whose CUDA runtime is linked statically (CuPy 14): no
 * runtime library to find, only the driver (libcuda.so.1, a stand-in here). ncclCommCuDevice
 * says the GPU of the thread's current context; ncclMemAlloc and ncclMemFree use cuMemAlloc
 * and cuMemFree, in the relaxed capture mode (restored after), so that a graph captured
 * meanwhile in the global mode stays valid; with no context current, ncclMemAlloc fails saying
 * to set a GPU, never handing out host memory.
 *   nccl_cudriver <path of the stand-in libcuda.so.1> */
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
        printf("usage: nccl_cudriver <libcuda.so.1 stand-in>\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        printf("FAIL: cannot load the stand-in %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void (*set_device)(int) = NULL;
    int (*owns)(const void *) = NULL, (*freed)(void) = NULL, (*strict_at)(int) = NULL,
                           (*mode)(void) = NULL;
    *(void **)&set_device = dlsym(h, "stub_set_device");
    *(void **)&owns = dlsym(h, "stub_owns");
    *(void **)&freed = dlsym(h, "stub_freed");
    *(void **)&strict_at = dlsym(h, "stub_strict_at");
    *(void **)&mode = dlsym(h, "stub_mode");
    if (!set_device || !owns || !freed || !strict_at || !mode) {
        printf("FAIL: the stand-in lacks its stub_* functions\n");
        return 1;
    }
    set_device(2);
    ncclUniqueId id;
    ncclComm_t comm = NULL;
    int dev = -1;
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "ncclCommInitRank");
    if (comm != NULL) {
        CHECK(ncclCommCuDevice(comm, &dev) == ncclSuccess && dev == 2,
              "ncclCommCuDevice says GPU %d, the current context's is GPU 2", dev);
        CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
    }
    const int before = mode();
    void *p = NULL;
    CHECK(ncclMemAlloc(&p, 4096) == ncclSuccess && p != NULL, "ncclMemAlloc");
    CHECK(owns(p), "ncclMemAlloc's memory %p comes from the driver's cuMemAlloc", p);
    CHECK(strict_at(1) == 0, "cuMemAlloc ran in the relaxed capture mode (%d)", strict_at(1));
    CHECK(mode() == before, "the capture mode is restored (%d, was %d)", mode(), before);
    CHECK(ncclMemFree(p) == ncclSuccess, "ncclMemFree");
    CHECK(freed() == 1 && strict_at(0) == 0,
          "ncclMemFree called cuMemFree %d times (want 1), relaxed (%d)", freed(), strict_at(0));
    set_device(-1);
    p = NULL;
    CHECK(ncclMemAlloc(&p, 4096) == ncclUnhandledCudaError && p == NULL,
          "ncclMemAlloc with no context current fails (%p)", p);
    CHECK(strstr(ncclGetLastError(NULL), "no GPU is current") != NULL, "says why: %s",
          ncclGetLastError(NULL));
    if (failures == 0)
        printf("ok: the driver is used where no runtime library is loaded (GPU %d, cuMemAlloc, "
               "cuMemFree, relaxed capture mode)\n",
               dev);
    return failures != 0;
}
