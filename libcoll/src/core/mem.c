/* coll_mem_alloc: host memory backed by a memfd, so that ranks of the same host can map it (they
 * open /proc/<pid>/fd/<fd> of the owner) and collectives can copy once, straight between the
 * ranks' buffers. Live allocations are kept in base/memreg.c, where every layer finds them. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/memreg.h"
#include "base/util.h"

coll_result_t coll_mem_alloc(void **ptr, size_t size)
{
    if (ptr == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT, "coll_mem_alloc: ptr is NULL");
    *ptr = NULL;
    long pg = sysconf(_SC_PAGESIZE);
    size_t page = pg > 0 ? (size_t)pg : 4096;
    if (size == 0 || size > (SIZE_MAX >> 1) - page)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "coll_mem_alloc: size %zu is %s; ask for 1 byte to 2^62 bytes", size,
                         size == 0 ? "zero" : "too large");
    size_t len = (size + page - 1) / page * page;
    colli_mem_ref_t ref = {0};
    coll_result_t status = colli_random_bytes(&ref.id, sizeof(ref.id));
    if (status != COLL_SUCCESS)
        return status;
    int fd = memfd_create("kcoll-mem", MFD_CLOEXEC);
    struct stat st;
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM,
                         "coll_mem_alloc of %zu bytes: memfd_create/ftruncate failed: %s (the "
                         "memory counts against the container's memory limit; raise it or use "
                         "malloc'd buffers, which take the single-copy path only through "
                         "process_vm_readv/writev or the rings)",
                         size, strerror(e));
    }
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        int e = errno;
        close(fd);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "coll_mem_alloc of %zu bytes: mmap failed: %s",
                         size, strerror(e));
    }
    ref.fd = fd;
    ref.ino = (uint64_t)st.st_ino;
    ref.size = len;
    if (!colli_mem_register(p, &ref)) {
        munmap(p, len);
        close(fd);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "coll_mem_alloc: out of memory");
    }
    *ptr = p;
    return COLL_SUCCESS;
}

coll_result_t coll_mem_free(void *ptr)
{
    if (ptr == NULL)
        return COLL_SUCCESS;
    colli_mem_ref_t ref;
    if (!colli_mem_unregister(ptr, &ref))
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "coll_mem_free: %p is not a pointer coll_mem_alloc returned (or it was "
                         "freed already)",
                         ptr);
    munmap(ptr, ref.size);
    close(ref.fd);
    return COLL_SUCCESS;
}
