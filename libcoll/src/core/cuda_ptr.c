/* Device pointers passed to a host-only path: a clear error instead of a crash. When the process
 * has the CUDA driver loaded at communicator creation (it uses CUDA), the communicator keeps the
 * driver's cuPointerGetAttribute (dlopen with RTLD_NOLOAD: a process without CUDA loads nothing
 * and pays nothing) and every buffer of a call is asked whether it is device memory. Managed
 * memory is host-accessible and passes. */
#include <dlfcn.h>
#include <stdio.h>

#include "colli.h"

/* From the CUDA driver API (cuda.h), which the library does not include. */
#define CU_POINTER_ATTRIBUTE_MEMORY_TYPE 2
#define CU_POINTER_ATTRIBUTE_IS_MANAGED  8
#define CU_MEMORYTYPE_DEVICE             2

void colli_cuda_ptr_init(struct coll_comm *comm)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (h == NULL)
        return;
    void *f = dlsym(h, "cuPointerGetAttribute");
    if (f == NULL) {
        dlclose(h);
        return;
    }
    comm->cuda_lib = h;
    *(void **)&comm->cu_ptr_attr = f;
    coll_info(INIT, "the CUDA driver is loaded in this process: device buffers are detected");
}

void colli_cuda_ptr_fini(struct coll_comm *comm)
{
    if (comm->cuda_lib != NULL)
        dlclose(comm->cuda_lib);
    comm->cuda_lib = NULL;
    comm->cu_ptr_attr = NULL;
}

bool colli_is_device_ptr(const struct coll_comm *comm, const void *p)
{
    if (comm->cu_ptr_attr == NULL || p == NULL)
        return false;
    unsigned int type = 0, managed = 0;
    if (comm->cu_ptr_attr(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (unsigned long long)p) != 0)
        return false; /* not known to CUDA: host memory */
    if (type != CU_MEMORYTYPE_DEVICE)
        return false;
    if (comm->cu_ptr_attr(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, (unsigned long long)p) == 0 &&
        managed)
        return false;
    return true;
}

coll_result_t colli_check_host_buffer(const struct coll_comm *comm, const char *fn,
                                      const char *what, const void *p)
{
    if (!colli_is_device_ptr(comm, p))
        return COLL_SUCCESS;
    return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                     "%s: %s %p is CUDA device memory, but the GPU plugin that moves device "
                     "buffers (libcoll_cuda.so.0, built when CMake finds nvcc) is not loaded in "
                     "this process (see the INFO log of communicator creation): install a CUDA "
                     "build of kcoll, or copy the data to host memory (cudaMemcpy) and pass host "
                     "buffers with a NULL stream",
                     fn, what, p);
}
