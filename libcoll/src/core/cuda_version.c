/* CUDA runtime and driver versions for the bootstrap's version check. The runtime is the CUDA
 * toolkit a CUDA build of libcoll was compiled against (COLL_CUDA_RUNTIME_VERSION, set by CMake
 * for the device path); the driver is asked through dlopen of libcuda.so.1, so that the library
 * never links the driver. A CPU-only build reports 0 for both: its ranks do not use a GPU, so
 * their drivers may differ. COLL_TEST_CUDA_VERSIONS overrides both in tests. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "colli.h"

static bool parse_pair(const char *p, size_t n, uint32_t *runtime, uint32_t *driver)
{
    char buf[64];
    if (n == 0 || n >= sizeof(buf))
        return false;
    memcpy(buf, p, n);
    buf[n] = '\0';
    char *slash = strchr(buf, '/'), *end = NULL;
    if (slash == NULL)
        return false;
    *slash = '\0';
    unsigned long r = strtoul(buf, &end, 10);
    if (end == buf || *end != '\0' || r > 1000000)
        return false;
    unsigned long d = strtoul(slash + 1, &end, 10);
    if (end == slash + 1 || *end != '\0' || d > 1000000)
        return false;
    *runtime = (uint32_t)r;
    *driver = (uint32_t)d;
    return true;
}

#ifdef COLL_CUDA_RUNTIME_VERSION
static uint32_t driver_version(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h == NULL)
        return 0;
    int v = 0;
    int (*get)(int *) = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    if (get == NULL || get(&v) != 0 || v < 0)
        v = 0;
    dlclose(h);
    return (uint32_t)v;
}
#endif

void colli_cuda_versions(const colli_config_t *cfg, int rank, uint32_t *runtime, uint32_t *driver)
{
    *runtime = 0;
    *driver = 0;
    const char *list = cfg->test_cuda_versions;
    if (list[0] != '\0') {
        size_t n = 0;
        const char *p = colli_rank_entry(list, rank, &n);
        if (p != NULL && parse_pair(p, n, runtime, driver))
            coll_info(INIT, "COLL_TEST_CUDA_VERSIONS (tests only): CUDA runtime %u, driver %u",
                      *runtime, *driver);
        else
            coll_warn(CONFIG, "COLL_TEST_CUDA_VERSIONS=%s: no RUNTIME/DRIVER pair for rank %d",
                      list, rank);
        return;
    }
#ifdef COLL_CUDA_RUNTIME_VERSION
    *runtime = COLL_CUDA_RUNTIME_VERSION;
    *driver = driver_version();
#endif
}
