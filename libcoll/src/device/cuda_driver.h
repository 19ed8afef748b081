/* The CUDA driver (libcuda.so.1), reached only here and only through dlopen: libcoll never links
 * CUDA. Two uses: asking whether a buffer is device memory (only when the process already
 * loaded the driver: a process without CUDA loads nothing and pays nothing) and reporting the
 * driver's version for the bootstrap's version check (CUDA builds). */
#ifndef COLLI_CUDA_DRIVER_H
#define COLLI_CUDA_DRIVER_H

#include <stdbool.h>
#include <stdint.h>

#include "base/testhook.h"

typedef struct colli_cuda_driver {
    void *lib;
    int (*pointer_get_attribute)(void *data, int attribute, unsigned long long ptr);
    int (*driver_get_version)(int *version);
} colli_cuda_driver_t;

/* Open the driver and look up its entry points (either may be NULL; callers check).
 * only_if_loaded: only when this process has it loaded already. false when there is no driver
 * (or it has neither entry point). */
bool colli_cuda_driver_open(colli_cuda_driver_t *drv, bool only_if_loaded);
void colli_cuda_driver_close(colli_cuda_driver_t *drv);

/* Is p device memory (managed memory too: the CPU may read it only in stream order)? */
bool colli_cuda_driver_is_device(const colli_cuda_driver_t *drv, const void *p);

/* This process's CUDA runtime (the toolkit of a CUDA build) and driver versions in
 * CUDART_VERSION form (12040 = 12.4), 0 where there is none; COLL_TEST_CUDA_VERSIONS overrides
 * them in tests (a list is indexed by rank). */
void colli_cuda_versions(const colli_testhook_t *test, int rank, uint32_t *runtime,
                         uint32_t *driver);

#endif
