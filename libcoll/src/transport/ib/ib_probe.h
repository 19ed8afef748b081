/* InfiniBand detection for the transport policy: libibverbs is reached only through dlopen, so
 * the library loads and runs where it is absent. */
#ifndef COLLI_IB_PROBE_H
#define COLLI_IB_PROBE_H

#include "core/colli.h"

typedef struct colli_ib_probe {
    bool usable;       /* a device with an active port matches the HCA list */
    char reason[512];  /* why not, when !usable */
    char devices[256]; /* "mlx5_0:1, mlx5_1:1" active ports found */
} colli_ib_probe_t;

/* Probe libibverbs.so.1, the devices and their ports. hca_spec: COLL_IB_HCA syntax ("" = all). */
void colli_ib_probe(const char *hca_spec, colli_ib_probe_t *out);

/* Does device:port match an NCCL-style HCA list ("mlx5_0:1,mlx5_1", "^mlx5_2", "=mlx5_0")? */
bool colli_ib_hca_match(const char *spec, const char *dev, int port);

#endif
