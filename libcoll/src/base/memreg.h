/* The registry of coll_mem_alloc allocations: process-wide state the API requires (any
 * communicator must recognise such a pointer, to map it from a peer), guarded by a mutex. */
#ifndef COLLI_MEMREG_H
#define COLLI_MEMREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where [p, p + len) of a coll_mem_alloc allocation lies, for peers to map it. */
typedef struct colli_mem_ref {
    uint64_t id;   /* random, unique per allocation */
    uint64_t ino;  /* inode of its memfd (checked by the peer that opens it) */
    uint64_t size; /* bytes mapped */
    uint64_t off;  /* offset of p in the allocation */
    int32_t fd;    /* this process's descriptor of the memfd */
} colli_mem_ref_t;

/* Remember an allocation at base (ref->off unused); false when out of memory. */
bool colli_mem_register(void *base, const colli_mem_ref_t *ref);
/* Forget the allocation at base; false when there is none (*ref gets it otherwise). */
bool colli_mem_unregister(void *base, colli_mem_ref_t *ref);
/* true when [p, p + len) lies inside one live allocation. */
bool colli_mem_find(const void *p, size_t len, colli_mem_ref_t *ref);

#endif
