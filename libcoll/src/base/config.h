/* Configuration: every tunable is one row of config.c's table, resolved once per communicator
 * into a read-only snapshot (agent pin > COLL_* environment > default), each value logged once
 * at INFO with its source. */
#ifndef COLLI_CONFIG_H
#define COLLI_CONFIG_H

#include <stddef.h>

#include "coll.h"

typedef enum {
    COLLI_SRC_DEFAULT = 0,
    COLLI_SRC_ENV = 1,
    COLLI_SRC_AGENT = 2,
    COLLI_SRC_ROOT = 3, /* adopted from rank 0 so that every rank runs the same algorithms */
    COLLI_SRC_NCCL = 4, /* the NCCL twin of an unset COLL_* name (base/envmap.h) */
} colli_source_t;

typedef enum {
    COLLI_TP_AUTO = 0,       /* every transport decides for itself (InfiniBand: only on request) */
    COLLI_TP_SOCKET = 1,     /* sockets only between hosts */
    COLLI_TP_PREFER_IB = 2,  /* InfiniBand, else sockets with one WARN saying why */
    COLLI_TP_REQUIRE_IB = 3, /* InfiniBand or fail, saying why */
} colli_transport_policy_t;

/* How a device call holds the caller's stream until it is over (COLL_CUDA_GATE). */
enum { COLLI_GATE_AUTO = 0, COLLI_GATE_MEMOP = 1, COLLI_GATE_HOSTFUNC = 2, COLLI_GATE_INLINE = 3 };

typedef struct colli_config {
    char socket_ifname[256]; /* NCCL syntax: prefix list, ^exclude, =exact; "" = automatic */
    int socket_family;       /* AF_UNSPEC, AF_INET or AF_INET6 */
    int nstreams;            /* sockets per peer and direction */
    size_t chunk_size;       /* pipeline unit in bytes */
    size_t small_threshold;  /* all-reduce at or below this many bytes uses recursive doubling */
    double timeout;          /* seconds without progress before a collective fails */
    double bootstrap_timeout;
    int spin_us;            /* busy-poll before blocking */
    int max_connecting;     /* outgoing connects in flight at once */
    int transport;          /* colli_transport_policy_t */
    char ib_hca[256];       /* COLL_IB_HCA: NCCL syntax */
    int ib_gid_index;       /* COLL_IB_GID_INDEX: RoCE GID index, -1 = automatic */
    int ib_nqps;            /* COLL_IB_NQPS: reliable-connected QPs per peer */
    int ib_timeout;         /* COLL_IB_TIMEOUT: QP ack timeout exponent (4.096 us x 2^n) */
    char cuda_plugin[256];  /* COLL_CUDA_PLUGIN: the GPU plugin ("" = default) */
    size_t dev_chunk;       /* COLL_CUDA_CHUNK_SIZE: device pipeline step in bytes */
    int dev_ipc;            /* COLL_CUDA_IPC: 1 = device buffers of one host via IPC */
    size_t dev_bounce;      /* COLL_CUDA_IPC_BOUNCE: device memory for unexportable buffers */
    int dev_gate;           /* COLL_CUDA_GATE: COLLI_GATE_* */
    int shm_disable;        /* COLL_SHM_DISABLE: 1 = sockets between local ranks too */
    size_t shm_slot_size;   /* bytes of one shared-memory ring slot (header line included) */
    int shm_nslots;         /* slots per ring */
    size_t shm_direct_min;  /* COLL_SHM_DIRECT_MIN: single-copy from this many bytes */
    int shm_cma;            /* COLL_SHM_CMA: 1 = single copy on malloc buffers too */
    size_t hier_min;        /* COLL_HIER_MIN: hierarchical all-reduce from this many bytes */
    colli_source_t src[32]; /* source of each parameter, indexed like the table */
} colli_config_t;

/* Resolve every parameter (COLL_* environment > its NCCL twin > default) into *cfg. Fails on
 * malformed values, naming the variable. The first call audits the environment (envmap.h). */
coll_result_t colli_config_load(colli_config_t *cfg);

/* A caller's bound on a creation (coll_comm_init_rank_timeout, coll_get_unique_id_timeout):
 * checked (fn names the call: 0 or more, not NaN), then applied where shorter than
 * cfg->bootstrap_timeout (0: none). */
coll_result_t colli_config_check_bound(const char *fn, double seconds);
void colli_config_bound_bootstrap(colli_config_t *cfg, double seconds);
/* timeout, or the caller's bound where that is > 0 and shorter */
static inline double colli_config_bounded(double timeout, double bound)
{
    return bound > 0 && bound < timeout ? bound : timeout;
}
/* Where the value of the parameter called name came from. */
colli_source_t colli_config_source(const colli_config_t *cfg, const char *name);
/* The environment name of parameter i, NULL past the last one. */
const char *colli_config_param_name(size_t i);
/* Log each effective value at INFO with its source (once per communicator). */
void colli_config_log(const colli_config_t *cfg);
/* Override one parameter (by its environment name) with a pinned value and record the source. */
coll_result_t colli_config_pin(colli_config_t *cfg, const char *name, const char *value,
                               colli_source_t src);

#endif
