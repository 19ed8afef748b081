/* The registry of coll_mem_alloc allocations (see memreg.h): a mutex-guarded list. */
#include <pthread.h>
#include <stdlib.h>

#include "base/memreg.h"

typedef struct mem_alloc {
    struct mem_alloc *next;
    void *base;
    colli_mem_ref_t ref;
} mem_alloc_t;

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static mem_alloc_t *mem_list;

bool colli_mem_register(void *base, const colli_mem_ref_t *ref)
{
    mem_alloc_t *a = calloc(1, sizeof(*a));
    if (a == NULL)
        return false;
    a->base = base;
    a->ref = *ref;
    a->ref.off = 0;
    pthread_mutex_lock(&mem_lock);
    a->next = mem_list;
    mem_list = a;
    pthread_mutex_unlock(&mem_lock);
    return true;
}

bool colli_mem_unregister(void *base, colli_mem_ref_t *ref)
{
    pthread_mutex_lock(&mem_lock);
    mem_alloc_t **pp = &mem_list;
    while (*pp != NULL && (*pp)->base != base)
        pp = &(*pp)->next;
    mem_alloc_t *a = *pp;
    if (a != NULL)
        *pp = a->next;
    pthread_mutex_unlock(&mem_lock);
    if (a == NULL)
        return false;
    *ref = a->ref;
    free(a);
    return true;
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
