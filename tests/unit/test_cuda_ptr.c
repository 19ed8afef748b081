/* Device buffers given to this host-only build are refused with a clear error, not a crash:
 * with the CUDA driver loaded in the process (here a stand-in libcuda.so.1 whose
 * cuPointerGetAttribute marks one range as device memory and one as managed memory), every
 * collective and send/recv names the device buffer; managed memory too (read by the CPU at once
 * it could be read before the kernels queued ahead of the call ran); host memory still works.
 *   test_cuda_ptr <path of the stand-in libcuda.so.1> */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll.h"

static int failures;

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            printf("FAIL %s:%d: ", __FILE__, __LINE__);                                            \
            printf(__VA_ARGS__);                                                                   \
            printf("\n");                                                                          \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

static void expect_device_error(coll_result_t r, const char *fn, const char *what)
{
    const char *msg = coll_get_last_error();
    CHECK(r == COLL_ERR_INVALID_ARGUMENT, "%s with a device %s: result %s", fn, what,
          coll_get_error_string(r));
    CHECK(strstr(msg, fn) && strstr(msg, what) && strstr(msg, "is CUDA device memory") &&
              strstr(msg, "cudaMemcpy"),
          "%s: message does not name the device %s and the fix: \"%s\"", fn, what, msg);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        printf("usage: test_cuda_ptr <libcuda.so.1 stand-in>\n");
        return 2;
    }
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (h == NULL) {
        printf("FAIL: cannot load the stand-in %s: %s\n", argv[1], dlerror());
        return 1;
    }
    void (*set_ranges)(const void *, size_t, const void *, size_t);
    *(void **)&set_ranges = dlsym(h, "stub_set_ranges");
    if (set_ranges == NULL) {
        printf("FAIL: the stand-in lacks stub_set_ranges\n");
        return 1;
    }
    enum { N = 1024 };
    float *dev = calloc(N, sizeof(float)), *man = calloc(N, sizeof(float));
    float *host = calloc(N, sizeof(float)), *out = calloc(N, sizeof(float));
    if (!dev || !man || !host || !out) {
        printf("FAIL: out of memory\n");
        return 1;
    }
    set_ranges(dev, N * sizeof(float), man, N * sizeof(float));

    coll_unique_id_t id;
    coll_comm_t comm;
    if (coll_get_unique_id(&id) != COLL_SUCCESS ||
        coll_comm_init_rank(&comm, 1, id, 0) != COLL_SUCCESS) {
        printf("FAIL: cannot create a 1-rank communicator: %s\n", coll_get_last_error());
        return 1;
    }
    for (int i = 0; i < N; i++)
        host[i] = man[i] = (float)i;

    expect_device_error(coll_all_reduce(dev, out, N, COLL_FLOAT32, COLL_SUM, comm, NULL),
                        "coll_all_reduce", "sendbuf");
    expect_device_error(coll_all_reduce(host, dev, N, COLL_FLOAT32, COLL_SUM, comm, NULL),
                        "coll_all_reduce", "recvbuf");
    expect_device_error(coll_broadcast(dev, dev, N, COLL_FLOAT32, 0, comm, NULL), "coll_broadcast",
                        "sendbuf");
    expect_device_error(coll_all_gather(host, dev, N, COLL_FLOAT32, comm, NULL), "coll_all_gather",
                        "recvbuf");
    expect_device_error(coll_send(dev, N, COLL_FLOAT32, 0, comm, NULL), "coll_send", "buffer");
    expect_device_error(coll_recv(dev, N, COLL_FLOAT32, 0, comm, NULL), "coll_recv", "buffer");

    expect_device_error(coll_all_reduce(man, out, N, COLL_FLOAT32, COLL_SUM, comm, NULL),
                        "coll_all_reduce", "sendbuf");
    /* the communicator is still usable; host memory works */
    coll_result_t r = coll_all_reduce(host, out, N, COLL_FLOAT32, COLL_SUM, comm, NULL);
    CHECK(r == COLL_SUCCESS && out[7] == 7.0f, "all_reduce of host memory: %s",
          coll_get_last_error());
    CHECK(coll_comm_destroy(comm) == COLL_SUCCESS, "destroy: %s", coll_get_last_error());
    free(dev);
    free(man);
    free(host);
    free(out);
    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("device and managed buffers refused by name; host memory works\n");
    return 0;
}
