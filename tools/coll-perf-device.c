/*
 * coll-perf --device cuda: buffers in GPU memory, from the same GPU plugin libcoll uses
 * (libcoll_cuda.so.0, or COLL_CUDA_PLUGIN). The patterns are filled and checked in host memory
 * and copied to and from the device around the checked call; the timed calls are enqueued on one
 * stream and timed up to its synchronisation, as nccl-tests does.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "coll_perf.h"
#include "gpu_plugin.h"

/* The plugin libcoll loads: COLL_CUDA_PLUGIN, else the one beside libcoll.so (as libcoll finds
 * it), else by name through the loader's path. */
static const char *plugin_path(char *buf, size_t len)
{
    const char *lib = getenv("COLL_CUDA_PLUGIN");
    if (lib != NULL && lib[0] != '\0')
        return lib;
    Dl_info info;
    const char *slash = NULL;
    if (dladdr((void *)coll_get_version, &info) != 0 && info.dli_fname != NULL)
        slash = strrchr(info.dli_fname, '/');
    if (slash == NULL)
        return "libcoll_cuda.so.0";
    snprintf(buf, len, "%.*s/libcoll_cuda.so.0", (int)(slash - info.dli_fname), info.dli_fname);
    return access(buf, F_OK) == 0 ? buf : "libcoll_cuda.so.0";
}

void perf_device_open(struct ctx *c, size_t alloc)
{
    char buf[4096];
    const char *lib = plugin_path(buf, sizeof(buf));
    const char *load_err = NULL;
    const colli_gpu_ops_t *o = colli_gpu_plugin_open(lib, &load_err);
    if (o == NULL)
        perf_fatal(c,
                   "--device cuda needs the GPU plugin %s: %s (a kcoll build with nvcc has it "
                   "beside libcoll.so)",
                   lib, load_err);
    char why[256] = "";
    if (o->init(why, sizeof(why)) != 0)
        perf_fatal(c, "--device cuda: %s", why);
    /* the GPU the agent placed this rank on (local rank r: GPU r of the pod's visible GPUs) */
    coll_rank_place_t pl;
    if (coll_comm_rank_place(c->comm, c->rank, &pl) == COLL_SUCCESS && pl.gpu >= 0) {
        int err = o->set_device(pl.gpu);
        if (err != 0)
            perf_fatal(c,
                       "--device cuda: rank %d (local rank %d of %d in pod %s) is placed on GPU "
                       "%d of its pod's visible GPUs, which this process cannot use: %s; check "
                       "CUDA_VISIBLE_DEVICES and the pod's nvidia.com/gpu limit",
                       c->rank, pl.local_rank, pl.local_size, pl.pod, pl.gpu, o->error_string(err));
    }
    void *ds = NULL, *dr = NULL;
    int err = o->dev_alloc(&ds, alloc);
    if (err == 0)
        err = o->dev_alloc(&dr, alloc);
    if (err == 0)
        err = o->stream_create(&c->stream);
    if (err != 0)
        perf_fatal(c, "--device cuda: 2 x %zu bytes of device memory and a stream: %s", alloc,
                   o->error_string(err));
    c->gpu = o;
    c->dsbuf = ds;
    c->drbuf = dr;
    int dev = -1;
    if (o->ptr_device(ds, &dev) == 1)
        printf("# rank %d: buffers on GPU %d (%s)\n", c->rank, dev,
               o->device_name ? o->device_name(dev) : "?");
}

void perf_device_close(struct ctx *c)
{
    if (c->gpu == NULL)
        return;
    const colli_gpu_ops_t *o = c->gpu;
    (void)o->stream_destroy(c->stream);
    (void)o->dev_free(c->dsbuf);
    (void)o->dev_free(c->drbuf);
    c->gpu = NULL;
}

static void gpu_check(struct ctx *c, int err, const char *what)
{
    if (err != 0)
        perf_fatal(c, "--device cuda: %s: %s", what, c->gpu->error_string(err));
}

/* The device pointer of host pointer p (inside sbuf or rbuf). */
void *perf_device_ptr(struct ctx *c, const void *p)
{
    const unsigned char *q = p;
    if (c->gpu == NULL)
        return (void *)(uintptr_t)p;
    if (q >= c->rbuf && q <= c->rbuf + c->alloc)
        return c->drbuf + (q - c->rbuf);
    return c->dsbuf + (q - c->sbuf);
}

void perf_device_upload(struct ctx *c, size_t sbytes, size_t rbytes)
{
    if (c->gpu == NULL)
        return;
    gpu_check(c, c->gpu->memcpy_async(c->dsbuf, c->sbuf, sbytes, c->stream), "copy to device");
    gpu_check(c, c->gpu->memcpy_async(c->drbuf, c->rbuf, rbytes, c->stream), "copy to device");
    gpu_check(c, c->gpu->stream_sync(c->stream), "stream sync");
}

void perf_device_download(struct ctx *c, size_t rbytes)
{
    if (c->gpu == NULL)
        return;
    gpu_check(c, c->gpu->memcpy_async(c->rbuf, c->drbuf, rbytes, c->stream), "copy to host");
    gpu_check(c, c->gpu->stream_sync(c->stream), "stream sync");
}

void perf_device_sync(struct ctx *c)
{
    if (c->gpu != NULL)
        gpu_check(c, c->gpu->stream_sync(c->stream), "stream sync");
}
