/* coll_mem_alloc: host memory backed by a memfd, so that ranks of the same host can map it (they
 * open /proc/<pid>/fd/<fd> of the owner) and collectives can copy once, straight between the
 * ranks' buffers. The registry of live allocations is process-wide state the API requires (a
 * pointer must be recognised by any communicator); a mutex guards it. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "colli.h"

typedef struct mem_alloc {
    struct mem_alloc *next;
    char *base;
    colli_mem_ref_t ref; /* off unused */
} mem_alloc_t;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_alloc_t *mem_list;

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
    mem_alloc_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "coll_mem_alloc: out of memory");
    coll_result_t status = colli_random_bytes(&a->ref.id, sizeof(a->ref.id));
    if (status != COLL_SUCCESS) {
        free(a);
        return status;
    }
    int fd = memfd_create("kcoll-mem", MFD_CLOEXEC);
    struct stat st;
    if (fd < 0 || ftruncate(fd, (off_t)len) != 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        free(a);
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
        free(a);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "coll_mem_alloc of %zu bytes: mmap failed: %s",
                         size, strerror(e));
    }
    a->base = p;
    a->ref.fd = fd;
    a->ref.ino = (uint64_t)st.st_ino;
    a->ref.size = len;
    pthread_mutex_lock(&mem_lock);
    a->next = mem_list;
    mem_list = a;
    pthread_mutex_unlock(&mem_lock);
    *ptr = p;
    return COLL_SUCCESS;
}

coll_result_t coll_mem_free(void *ptr)
{
    if (ptr == NULL)
        return COLL_SUCCESS;
    pthread_mutex_lock(&mem_lock);
    mem_alloc_t **pp = &mem_list;
    while (*pp != NULL && (*pp)->base != ptr)
        pp = &(*pp)->next;
    mem_alloc_t *a = *pp;
    if (a != NULL)
        *pp = a->next;
    pthread_mutex_unlock(&mem_lock);
    if (a == NULL)
        return COLLI_ERR(COLL, COLL_ERR_INVALID_ARGUMENT,
                         "coll_mem_free: %p is not a pointer coll_mem_alloc returned (or it was "
                         "freed already)",
                         ptr);
    munmap(a->base, a->ref.size);
    close(a->ref.fd);
    free(a);
    return COLL_SUCCESS;
}

bool colli_mem_find(const void *p, size_t len, colli_mem_ref_t *ref)
{
    bool found = false;
    uintptr_t x = (uintptr_t)p;
    pthread_mutex_lock(&mem_lock);
    for (const mem_alloc_t *a = mem_list; a != NULL && !found; a = a->next) {
        uintptr_t b = (uintptr_t)a->base;
        if (x >= b && x - b <= a->ref.size && len <= a->ref.size - (x - b)) {
            *ref = a->ref;
            ref->off = x - b;
            found = true;
        }
    }
    pthread_mutex_unlock(&mem_lock);
    return found;
}
