/* On-the-wire structures (little-endian, fixed layout). Every connection starts with a hello
 * authenticated with the unique id's secret; every data frame carries the communicator tag, the
 * sequence number and the collective's fingerprint, so a frame from a stranger, from another
 * communicator or from a different collective is rejected instead of being reduced. */
#ifndef COLLI_WIRE_H
#define COLLI_WIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "coll.h"

/* Wire-protocol version: bumped whenever a wire struct or exchange changes (3: the challenge
 * handshake, base/handshake.h; 4: the root's reachability probes, bootstrap/reach.c; 5: a
 * send/recv's frames carry its tag in `root`, where they carried -1). */
#define COLLI_PROTO_VERSION 5u

#define COLLI_HELLO_MAGIC 0x4c48434bu /* "KCHL" */
#define COLLI_FRAME_MAGIC 0x4d52464bu /* "KFRM" */

enum colli_hello_kind {
    COLLI_HELLO_BOOTSTRAP = 1, /* rank -> root: a member record follows */
    COLLI_HELLO_DATA = 2,      /* rank -> rank: data frames follow (one direction) */
    COLLI_HELLO_ABORT = 3,     /* rank -> rank: a u32 length and an abort reason follow;
                                * `stream` carries 1 + the rank blamed (0: none) */
    COLLI_HELLO_BOOT_ERROR =
        4,                  /* rank -> root: the rank cannot start; a record-sized text follows */
    COLLI_HELLO_STUCK = 5,  /* rank -> rank: timed out; u32 length + the ranks it waits on */
    COLLI_HELLO_STATUS = 6, /* answer to STUCK: the ranks the sender waits on ("" = idle) */
    COLLI_HELLO_LINK = 7,   /* lower -> higher local rank: the shared-memory liveness link */
    COLLI_HELLO_IB = 8,     /* lower -> higher rank: InfiniBand connection records, then the link */
};

typedef struct colli_hello {
    uint32_t magic;
    uint16_t proto;
    uint8_t kind;
    uint8_t reserved0;
    uint64_t comm_tag;
    int32_t from_rank;
    int32_t to_rank;
    uint32_t stream;
    uint32_t nranks;
    uint8_t nonce[16];
    uint8_t mac[16]; /* SipHash-128 over everything before it, keyed with the secret */
} colli_hello_t;
_Static_assert(sizeof(colli_hello_t) == 64, "hello is 64 bytes");

enum colli_frame_type { COLLI_FRAME_DATA = 1 };

/* Collective kinds carried in frames (and used in error messages). */
enum colli_coll_kind {
    COLLI_COLL_ALL_REDUCE = 1,
    COLLI_COLL_BROADCAST = 2,
    COLLI_COLL_REDUCE = 3,
    COLLI_COLL_ALL_GATHER = 4,
    COLLI_COLL_REDUCE_SCATTER = 5,
    COLLI_COLL_ALL_TO_ALL = 6,
    COLLI_COLL_SEND_RECV = 7,
    /* flag on a collective's code: the messages of its single-copy path (algo/direct.c) */
    COLLI_COLL_DIRECT = 0x40,
    /* flag: the messages of a step of a call on device buffers (core/device_pipe.c) */
    COLLI_COLL_DEV = 0x80,
};

typedef struct colli_frame {
    uint32_t magic;
    uint8_t type;
    uint8_t coll;
    uint8_t dtype;
    uint8_t op;
    int32_t root;
    uint32_t unit; /* index of this unit within its message */
    uint64_t seq;
    uint64_t count;
    uint64_t tag;
    uint32_t len;      /* payload bytes of the unit */
    uint32_t reserved; /* sockets: 0; shared memory: index of the slot-sized fragment */
} colli_frame_t;
_Static_assert(sizeof(colli_frame_t) == 48, "frame header is 48 bytes");

/* Member record sent to the root at bootstrap and broadcast back as the table. The version
 * fields come first so that a root of any version can report a version mismatch. */
typedef struct colli_wire_member {
    uint32_t proto;
    char version[32];
    int32_t rank;
    int32_t nranks;
    int32_t pid;
    char hostname[64];
    char host_id[96];
    char ifname[32];
    uint16_t family;
    uint16_t port;
    uint8_t addr[16];
    uint32_t nstreams;
    uint64_t chunk_size;
    uint64_t small_threshold;
    uint32_t caps; /* COLLI_CAP_*; zero from builds before shared memory */
    /* wire protocol 2: the names the rank's coll-agent gave it ("" without an agent) */
    char pod[128];
    char node[128];
    char group[64];        /* topology group (switch/rack label value) of its node */
    uint32_t cuda_runtime; /* CUDA runtime of a CUDA build (CUDART_VERSION form), else 0 */
    uint32_t cuda_driver;  /* the driver's cuDriverGetVersion in a CUDA build, else 0 */
    uint8_t prefix; /* prefix length of the address's network on its interface, 0 = unknown */
    uint8_t how;    /* how the interface was chosen (COLLI_NETIF_* of base/netif.h), 0 = unknown */
    uint8_t reserved0[2];
    uint64_t direct_min; /* COLL_SHM_DIRECT_MIN: single-copy from this many bytes, 0 = never */
    /* several ranks per pod (zero from builds before them: local rank 0 of an unknown count) */
    int32_t local_rank;  /* the rank's place in its pod */
    uint16_t local_size; /* ranks in its pod; 0 = not known */
    int16_t gpu;         /* GPU ordinal it binds among its visible GPUs, -1 = none */
    uint64_t hier_min;   /* COLL_HIER_MIN (rank 0's is adopted); 0 from builds before it */
} colli_wire_member_t;
_Static_assert(sizeof(colli_wire_member_t) == 640, "member record size");
/* Size of a wire protocol 1 member record: a root reads that much from an old rank, enough to
 * report the version mismatch. */
#define COLLI_WIRE_MEMBER_V1_SIZE 320u

/* Root -> rank reply header: status (a coll_result_t), then msg_len bytes of message, then on
 * success nranks member records. The mac proves the root knows the secret. */
typedef struct colli_root_reply {
    uint32_t magic;
    uint32_t status;
    uint32_t nranks;
    uint32_t msg_len;
    uint8_t mac[16]; /* colli_reply_mac (base/handshake.h); protocol 1 and 2: SipHash-128(secret,
                      * the rank's hello nonce || "root") */
} colli_root_reply_t;
_Static_assert(sizeof(colli_root_reply_t) == 32, "root reply size");

/* Wire protocol 4: the root's answer may first be a probe request (status COLLI_ROOT_PROBE,
 * nranks = the number of colli_wire_probe_t that follow, no message; its MAC covers a digest of
 * them). The rank connects to each address from its data address within a few seconds and
 * answers with a colli_wire_probe_result_t per entry and a MAC by the connection key over them
 * (colli_probe_result_mac), then reads the root's final answer. */
#define COLLI_ROOT_PROBE 0x50524f42u /* "BORP" */
#define COLLI_PROBE_MAX  4096u       /* entries in one request */
#define COLLI_PROBE_SECS 3.0         /* each probe's connect deadline */
typedef struct colli_wire_probe {
    int32_t rank; /* the rank whose data address this is */
    uint16_t family;
    uint16_t port;
    uint8_t addr[16];
} colli_wire_probe_t;
_Static_assert(sizeof(colli_wire_probe_t) == 24, "probe entry size");
typedef struct colli_wire_probe_result {
    int32_t rank;
    int32_t err; /* 0 reached (or refused: the host answered), else the errno; ETIMEDOUT */
} colli_wire_probe_result_t;
_Static_assert(sizeof(colli_wire_probe_result_t) == 8, "probe result size");

/* The tag every frame and hello of a communicator carries: derived from its secret. */
uint64_t colli_comm_tag(const uint8_t secret[16]);

/* Fill nonce and mac. */
coll_result_t colli_hello_make(colli_hello_t *h, const uint8_t secret[16], uint8_t kind, int from,
                               int to, uint32_t stream, uint32_t nranks);
/* Check magic, protocol, tag and mac; on failure *why says what was wrong. */
bool colli_hello_verify(const colli_hello_t *h, const uint8_t secret[16], const char **why);
/* As colli_hello_verify; check_proto false accepts any wire-protocol version (the bootstrap
 * root does, so that it can name the ranks of another version instead of dropping them). */
bool colli_hello_verify_ex(const colli_hello_t *h, const uint8_t secret[16], bool check_proto,
                           const char **why);

/* "all_reduce", "send/recv", ... for a colli_coll_kind (flags cleared by the caller). */
const char *colli_coll_name(int coll);

#endif
