/* Which CUDA kcoll's libnccl.so.2 finds in a process that uses CUDA (it never loads one):
 *   runtime  a runtime the process loaded privately (RTLD_LOCAL, as a Python extension module
 *            does), which dlsym(RTLD_DEFAULT) does not see: ncclCommCuDevice says the GPU the
 *            runtime has current, ncclMemAlloc and ncclMemFree use its cudaMalloc and cudaFree;
 *            before the runtime is loaded, ncclMemAlloc gives kcoll's host memory.
 *   driver   a runtime linked statically (CuPy 14): no runtime library to find, only the
 *            driver, libcuda.so.1: ncclCommCuDevice says the GPU of the thread's current
 *            context; ncclMemAlloc and ncclMemFree use cuMemAlloc and cuMemFree, in the relaxed
 *            capture mode (restored after), so that a graph captured meanwhile in the global
 *            mode stays valid; with no context current, ncclMemAlloc fails saying to set a GPU,
 *            never handing out host memory.
 *   nccl_cudart runtime|driver <path of the stand-in libcudart.so.13 | libcuda.so.1> */
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

/* the stand-in's stub_* function name, or NULL */
static void *stub(void *h, const char *name)
{
    void *fn = dlsym(h, name);
    if (fn == NULL)
        printf("FAIL: the stand-in lacks %s\n", name);
    return fn;
}

int main(int argc, char **argv)
{
    const int driver = argc == 3 && strcmp(argv[1], "driver") == 0;
    if (argc != 3 || (!driver && strcmp(argv[1], "runtime") != 0)) {
        printf("usage: nccl_cudart runtime|driver <stand-in libcudart.so.13 | libcuda.so.1>\n");
        return 2;
    }
    if (!driver) {
        void *host = NULL;
        CHECK(ncclMemAlloc(&host, 4096) == ncclSuccess && host != NULL, "ncclMemAlloc, no CUDA");
        CHECK(ncclMemFree(host) == ncclSuccess, "ncclMemFree of host memory");
    }
    void *h = dlopen(argv[2], RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        printf("FAIL: cannot load the stand-in %s: %s\n", argv[2], dlerror());
        return 1;
    }
    CHECK(dlsym(RTLD_DEFAULT, driver ? "cuMemAlloc_v2" : "cudaMalloc") == NULL,
          "the stand-in is private to its handle");
    void (*set_device)(int) = NULL;
    int (*owns)(const void *) = NULL, (*freed)(void) = NULL, (*strict_at)(int) = NULL;
    int (*mode)(void) = NULL;
    *(void **)&set_device = stub(h, "stub_set_device");
    *(void **)&owns = stub(h, "stub_owns");
    *(void **)&freed = stub(h, "stub_freed");
    if (driver) {
        *(void **)&strict_at = stub(h, "stub_strict_at");
        *(void **)&mode = stub(h, "stub_mode");
    }
    if (!set_device || !owns || !freed || (driver && (!strict_at || !mode)))
        return 1;
    set_device(3);

    ncclUniqueId id;
    ncclComm_t comm = NULL;
    int dev = -1;
    CHECK(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    CHECK(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess, "ncclCommInitRank");
    if (comm != NULL) {
        CHECK(ncclCommCuDevice(comm, &dev) == ncclSuccess && dev == 3,
              "ncclCommCuDevice says GPU %d, the %s has GPU 3 current", dev,
              driver ? "current context" : "runtime");
        CHECK(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy");
    }
    const int before = driver ? mode() : 0;
    void *p = NULL;
    CHECK(ncclMemAlloc(&p, 4096) == ncclSuccess && p != NULL, "ncclMemAlloc");
    CHECK(owns(p), "ncclMemAlloc's memory %p comes from the %s", p,
          driver ? "driver's cuMemAlloc" : "runtime's cudaMalloc");
    CHECK(ncclMemFree(p) == ncclSuccess, "ncclMemFree");
    CHECK(freed() == 1, "ncclMemFree freed %d times (want 1)", freed());
    if (driver) {
        CHECK(strict_at(1) == 0 && strict_at(0) == 0,
              "cuMemAlloc and cuMemFree ran in the relaxed capture mode (%d, %d)", strict_at(1),
              strict_at(0));
        CHECK(mode() == before, "the capture mode is restored (%d, was %d)", mode(), before);
        set_device(-1);
        p = NULL;
        CHECK(ncclMemAlloc(&p, 4096) == ncclUnhandledCudaError && p == NULL,
              "ncclMemAlloc with no context current fails (%p)", p);
        CHECK(strstr(ncclGetLastError(NULL), "no GPU is current") != NULL, "says why: %s",
              ncclGetLastError(NULL));
    }
    if (failures == 0)
        printf("ok: the %s is used (GPU %d, allocation and free)\n",
               driver ? "driver, where no runtime library is loaded," : "privately loaded runtime",
               dev);
    return failures != 0;
}
