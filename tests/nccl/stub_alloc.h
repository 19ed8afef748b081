/* What the stand-ins for the CUDA runtime (cudart_stub.c) and driver (cuda_stub.c) share: the
 * current GPU the test sets (stub_set_device; the driver's -1: no context current), and the
 * "device" allocations they hand out (host memory), which the test asks about (stub_owns,
 * stub_freed). Included by one source file of each stand-in. */
#ifndef STUB_ALLOC_H
#define STUB_ALLOC_H

#include <stdlib.h>

#define EXPORT __attribute__((visibility("default")))

static int current = 0;
static void *given[16];
static int freed;

EXPORT void stub_set_device(int device)
{
    current = device;
}

/* 1 when p came from this stand-in's allocation and was not freed */
EXPORT int stub_owns(const void *p)
{
    for (int i = 0; i < 16; i++)
        if (given[i] != NULL && given[i] == p)
            return 1;
    return 0;
}

/* the number of frees */
EXPORT int stub_freed(void)
{
    return freed;
}

/* bytes of zeroed memory, recorded; NULL when 16 are out or memory is short */
static void *stub_alloc(size_t bytes)
{
    for (int i = 0; i < 16; i++)
        if (given[i] == NULL)
            return given[i] = calloc(1, bytes ? bytes : 1);
    return NULL;
}

/* 0, or -1 when p is not one of the allocations */
static int stub_free(void *p)
{
    for (int i = 0; i < 16; i++)
        if (given[i] != NULL && given[i] == p) {
            free(p);
            given[i] = NULL;
            freed++;
            return 0;
        }
    return -1;
}

#endif
