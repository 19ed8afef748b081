/* Member records: what each rank tells the others at bootstrap (versions, host identity, data
 * listener, capabilities, tuning, the names its coll-agent gave it), in memory and on the wire. */
#ifndef COLLI_MEMBER_H
#define COLLI_MEMBER_H

#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/wire.h"

typedef struct colli_member {
    int rank;
    int nranks;
    uint32_t proto;
    char version[32];
    char hostname[64];
    char host_id[96]; /* hostname + boot id + IPC namespace: ranks sharing it share a host */
    int pid;
    struct sockaddr_storage addr; /* data listener */
    char ifname[32];
    int prefix;    /* the data address's network (prefix length), 0 = unknown */
    int how;       /* how its interface was chosen (COLLI_NETIF_*), 0 = unknown */
    uint32_t caps; /* capability bits of the transports this rank offers (transport.h) */
    /* rank 0's tuning is adopted by every rank */
    uint32_t nstreams;
    uint64_t chunk_size;
    uint64_t small_threshold;
    uint64_t direct_min; /* single-copy collectives from this many bytes per rank, 0 = never */
    /* From the rank's coll-agent ("" without one): names for errors and the Communicator status,
     * and the topology group (switch/rack) its node belongs to, for ring order. */
    char pod[128];
    char node[128];
    char group[64];
    /* several ranks per pod: its place in its pod (local_size 0 = not known) and GPU (-1 none) */
    int local_rank;
    int local_size;
    int gpu;
    uint64_t hier_min; /* hierarchical all-reduce from this many bytes, 0 = never (tuning) */
    /* CUDA runtime and driver versions (CUDART_VERSION form: 12040 = 12.4), 0 without CUDA */
    uint32_t cuda_runtime;
    uint32_t cuda_driver;
} colli_member_t;

void colli_member_to_wire(const colli_member_t *m, colli_wire_member_t *w);
coll_result_t colli_member_from_wire(const colli_wire_member_t *w, colli_member_t *m);
/* Fill hostname, host_id and pid of this process. */
void colli_member_fill_host(colli_member_t *m);

#endif
