/* Loading the GPU plugin for a communicator (device.c runs the calls): the CUDA driver when the
 * process has loaded it (device buffers told apart even without a plugin), and the plugin beside
 * libcoll or named by COLL_CUDA_PLUGIN. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "device/cuda_driver.h"
#include "device/device_int.h"

static void cond_init_monotonic(pthread_cond_t *cv)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &ca);
    pthread_condattr_destroy(&ca);
}

static bool plugin_path(const struct coll_comm *comm, char *path, size_t len)
{
    if (comm->cfg.cuda_plugin[0] != '\0') {
        snprintf(path, len, "%s", comm->cfg.cuda_plugin);
        return true;
    }
    /* beside libcoll.so (or the executable that linked libcoll.a) */
    Dl_info info;
    const char *slash = NULL;
    if (dladdr((void *)colli_dev_init, &info) != 0 && info.dli_fname != NULL)
        slash = strrchr(info.dli_fname, '/');
    if (slash == NULL)
        snprintf(path, len, "libcoll_cuda.so.0");
    else
        snprintf(path, len, "%.*s/libcoll_cuda.so.0", (int)(slash - info.dli_fname),
                 info.dli_fname);
    return false;
}

/* The CUDA driver, when the process already loaded it: device buffers are told apart from host
 * buffers even without a plugin (refused with a clear error then). */
static coll_result_t open_driver(struct coll_comm *comm)
{
    colli_cuda_driver_t drv;
    if (!colli_cuda_driver_open(&drv, true))
        return COLL_SUCCESS;
    if (drv.pointer_get_attribute == NULL) {
        colli_cuda_driver_close(&drv);
        return COLL_SUCCESS;
    }
    comm->cuda = malloc(sizeof(*comm->cuda));
    if (comm->cuda == NULL) {
        colli_cuda_driver_close(&drv);
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory for the CUDA driver's entry points");
    }
    *comm->cuda = drv;
    coll_info(INIT, "the CUDA driver is loaded in this process: device buffers are detected");
    return COLL_SUCCESS;
}

void colli_dev_release(struct coll_comm *comm)
{
    if (comm->cuda != NULL)
        colli_cuda_driver_close(comm->cuda);
    free(comm->cuda);
    comm->cuda = NULL;
}

/* A GPU node: the NVIDIA driver's control device exists (checked without touching CUDA). */
static bool gpu_node(void)
{
    return access("/dev/nvidiactl", F_OK) == 0 || access("/dev/nvidia0", F_OK) == 0;
}

coll_result_t colli_dev_init(struct coll_comm *comm)
{
    char path[256];
    coll_result_t status = open_driver(comm);
    if (status != COLL_SUCCESS)
        return status;
    const bool named = plugin_path(comm, path, sizeof(path));
    /* A process that has not touched CUDA yet may still pass device buffers later (a program
     * that creates its communicator first, then allocates): on a GPU node the plugin is loaded
     * now, when it is there, so that those buffers are known as device memory and never read as
     * host memory. Elsewhere the process does not use CUDA. */
    if (!named && comm->cuda == NULL && (!gpu_node() || access(path, F_OK) != 0))
        return COLL_SUCCESS;
    const char *load_err = NULL;
    const colli_gpu_ops_t *ops = colli_gpu_plugin_open(path, &load_err);
    if (ops == NULL && !named) {
        coll_info(INIT,
                  "the process uses CUDA, but the GPU plugin %s cannot be loaded (%s): device "
                  "buffers are refused (this kcoll was built without nvcc?)",
                  path, load_err);
        return COLL_SUCCESS;
    }
    if (ops == NULL)
        return COLLI_ERR(INIT, COLL_ERR_UNSUPPORTED,
                         "COLL_CUDA_PLUGIN=%s cannot be loaded: %s; point it at "
                         "libcoll_cuda.so.0 of this kcoll build, or unset it",
                         path, load_err);
    char why[256] = "";
    int err = ops->init(why, sizeof(why));
    if (err != 0 && why[0] == '\0')
        snprintf(why, sizeof(why), "%s", ops->error_string(err));
    if (err != 0) {
        if (!named) {
            coll_info(INIT, "GPU plugin %s: %s; device buffers are refused", path, why);
            return COLL_SUCCESS;
        }
        return COLLI_ERR(INIT, COLL_ERR_CUDA, "COLL_CUDA_PLUGIN=%s: %s", path, why);
    }
    struct colli_dev *d = calloc(1, sizeof(*d));
    if (d == NULL)
        return COLLI_ERR(INIT, COLL_ERR_SYSTEM, "out of memory for the device-buffer path");
    d->ops = ops;
    d->device = -1;
    d->kernels = -1;
    const char *conns = secure_getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    d->one_queue = conns != NULL && atoi(conns) == 1;
    snprintf(d->path, sizeof(d->path), "%s", path);
    pthread_mutex_init(&d->mu, NULL);
    cond_init_monotonic(&d->cv);
    comm->dev = d;
    coll_info(INIT, "device buffers: GPU plugin \"%s\" (%s)", ops->name, path);
    /* The kernels now, while no gate of this communicator holds a stream, when the program
     * made its GPU current first (as NCCL asks: cudaSetDevice before creating a communicator);
     * else at the first device call (prepare). A failure here is told there. */
    int loaded = 0, dev = -1;
    err = ops->load_kernels(1, &loaded);
    if (err == 0 && loaded && ops->get_device(&dev) == 0)
        d->kernels = dev;
    else if (err != 0)
        coll_info(INIT, "GPU plugin %s: cannot load its kernels yet: %s", path,
                  ops->error_string(err));
    return COLL_SUCCESS;
}
