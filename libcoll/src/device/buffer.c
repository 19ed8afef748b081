/* Where a buffer lives: the GPU plugin answers when one is loaded; without one, the CUDA driver
 * (when the process has it loaded) tells device memory apart, so that a device pointer passed
 * to a host-only build gets a clear error instead of a crash. Managed memory is device memory:
 * read by the CPU at once, it could be read before the kernels queued ahead of the call ran. */
#include "base/error.h"
#include "device/cuda_driver.h"
#include "device/device.h"
#include "device/device_int.h"

colli_buf_kind_t colli_dev_locate(const struct coll_comm *comm, const void *p, int *device)
{
    *device = -1;
    if (p == NULL)
        return COLLI_BUF_HOST;
    if (comm->dev != NULL)
        return comm->dev->ops->ptr_device(p, device) == 1 ? COLLI_BUF_DEVICE : COLLI_BUF_HOST;
    if (comm->cuda != NULL && colli_cuda_driver_is_device(comm->cuda, p))
        return COLLI_BUF_FOREIGN;
    return COLLI_BUF_HOST;
}

coll_result_t colli_dev_refuse_foreign(const char *fn, const char *what, const void *p)
{
    return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                     "%s: %s %p is CUDA device memory, but the GPU plugin that moves device "
                     "buffers (libcoll_cuda.so.0, built when CMake finds nvcc) is not loaded in "
                     "this process (see the INFO log of communicator creation): install a CUDA "
                     "build of kcoll, or copy the data to host memory (cudaMemcpy) and pass host "
                     "buffers with a NULL stream",
                     fn, what, p);
}
