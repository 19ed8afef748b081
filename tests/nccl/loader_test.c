/* A program built against NVIDIA's libnccl.so.2 (linked with it, nothing of kcoll) that runs on
 * kcoll's when the loader is pointed at it (LD_PRELOAD or LD_LIBRARY_PATH): one rank, an
 * all_reduce on host memory. It prints whose NCCL answered; NCCL_DEBUG=VERSION makes kcoll's
 * print its banner. With the argument "dlopen" it then opens NCCL by its unversioned name, as
 * TensorRT-LLM does (dlopen("libnccl.so")), and says whether that handle's ncclGetVersion is the
 * one the program runs on. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <nccl.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *(*kcoll)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "kcollGetVersion");
    int version = 0;
    ncclGetVersion(&version);
    printf("NCCL API %d, %s%s\n", version, kcoll ? "kcoll " : "NVIDIA NCCL", kcoll ? kcoll() : "");
    if (kcoll == NULL)
        return 1;
    /* "dlopen": NCCL opened by its unversioned name first, as TensorRT-LLM does; the
     * communicator is made after, so that kcoll sees whatever that loaded */
    const int by_name = argc >= 2 && strcmp(argv[1], "dlopen") == 0;
    void *h = by_name ? dlopen("libnccl.so", RTLD_LAZY | RTLD_GLOBAL) : NULL;
    ncclUniqueId id;
    ncclComm_t comm;
    float x = 2, y = 0;
    if (ncclGetUniqueId(&id) != ncclSuccess || ncclCommInitRank(&comm, 1, id, 0) != ncclSuccess ||
        ncclAllReduce(&x, &y, 1, ncclFloat32, ncclSum, comm, NULL) != ncclSuccess ||
        ncclCommDestroy(comm) != ncclSuccess) {
        printf("FAIL: %s\n", ncclGetLastError(NULL));
        return 1;
    }
    printf("all_reduce on 1 rank: %g\n", y);
    if (y != 2)
        return 1;
    if (!by_name)
        return 0;
    void *f = h != NULL ? dlsym(h, "ncclGetVersion") : NULL;
    Dl_info where = {0};
    if (f == NULL) {
        printf("dlopen(libnccl.so): no such library (%s)\n", dlerror());
        return 1;
    }
    if (f != (void *)ncclGetVersion) {
        (void)dladdr(f, &where);
        printf("dlopen(libnccl.so): another NCCL, %s\n", where.dli_fname ? where.dli_fname : "?");
        return 1;
    }
    printf("dlopen(libnccl.so): the same library\n");
    return 0;
}
