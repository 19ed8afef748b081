/* The one place that loads the CUDA driver (see cuda_driver.h): device-pointer queries and the
 * versions for the bootstrap's version check. The runtime version is the CUDA toolkit a CUDA
 * build of libcoll was compiled against (COLL_CUDA_RUNTIME_VERSION, set by CMake for the device
 * path). A CPU-only build reports 0 for both: its ranks do not use a GPU, so their drivers may
 * differ. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "device/cuda_driver.h"

/* From the CUDA driver API (cuda.h), which the library does not include. */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED  8
#define CU_MEMORYTYPE_DEVICE             2

bool colli_cuda_driver_open(colli_cuda_driver_t *drv, bool only_if_loaded)
{
    memset(drv, 0, sizeof(*drv));
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | (only_if_loaded ? RTLD_NOLOAD : 0));
    if (h == NULL)
        return false;
    *(void **)&drv->pointer_get_attribute = dlsym(h, "cuPointerGetAttribute");
    *(void **)&drv->driver_get_version = dlsym(h, "cuDriverGetVersion");
    if (drv->pointer_get_attribute == NULL && drv->driver_get_version == NULL) {
        dlclose(h);
        memset(drv, 0, sizeof(*drv));
        return false;
    }
    drv->lib = h;
    return true;
}

void colli_cuda_driver_close(colli_cuda_driver_t *drv)
{
    if (drv->lib != NULL)
        dlclose(drv->lib);
    memset(drv, 0, sizeof(*drv));
}

bool colli_cuda_driver_is_device(const colli_cuda_driver_t *drv, const void *p)
{
    if (drv->pointer_get_attribute == NULL || p == NULL)
        return false;
    unsigned int type = 0, managed = 0;
    const unsigned long long addr = (unsigned long long)p;
    if (drv->pointer_get_attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, addr) != 0)
        return false; /* not known to CUDA: host memory */
    return type == CU_MEMORYTYPE_DEVICE ||
           (drv->pointer_get_attribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, addr) == 0 &&
            managed);
}

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
    colli_cuda_driver_t drv;
    if (!colli_cuda_driver_open(&drv, false))
        return 0;
    int v = 0;
    if (drv.driver_get_version == NULL || drv.driver_get_version(&v) != 0 || v < 0)
        v = 0;
    colli_cuda_driver_close(&drv);
    return (uint32_t)v;
}
#endif

void colli_cuda_versions(const colli_testhook_t *test, int rank, uint32_t *runtime,
                         uint32_t *driver)
{
    *runtime = 0;
    *driver = 0;
    const char *list = test->cuda_versions;
    if (list[0] != '\0') {
        size_t n = 0;
        const char *p = colli_testhook_rank_entry(list, rank, &n);
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
