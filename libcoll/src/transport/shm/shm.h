/* Shared-memory transport internals.
 *
 * Ranks with the same host identity move data through lock-free single-producer/single-consumer
 * rings in POSIX shared memory: one segment per ordered pair (sender -> receiver), created by the
 * sender on its first send to that peer, announced over the pair's link, mapped by the receiver,
 * which then unlinks the name at once (so nothing is left in /dev/shm once both sides mapped it).
 *
 * A ring is nslots slots; a slot is one 64-byte header line (the 48-byte data frame header, its
 * fragment index, and the slot's `ready` word) followed by up to `cap` payload bytes; a unit
 * larger than cap travels as several fragments, each with the full frame header, all checked by
 * the receiver. The sender fills a slot and then publishes it with a release store of its write
 * position + 1 into `ready`; the receiver polls `ready` of its next slot (acquire), applies the
 * payload straight from the slot (a reduction reads it in place: no staging copy), and releases
 * the slot with a release store of `tail` (slots consumed) on its own cache line. Payloads of at
 * most 8 bytes sit in the header line itself, so a small message is one cache-line transfer.
 *
 * Each pair of local ranks also keeps one TCP connection, the link (opened by the lower rank at
 * communicator creation, authenticated like every kcoll connection). It carries one-byte
 * messages: 'N' (a new segment from me to you exists: map it), 'W' (wake up) and 'B' (goodbye:
 * a clean destroy; a link that ends without it means the peer died or aborted). A rank that
 * stops spinning sets its sleep flag in the rings it waits on and sleeps in poll() on its links
 * together with the socket transport's descriptors; the other side sends 'W' when it sees the
 * flag (Dekker-style: both sides store, fence, then load). The link also ends when the peer
 * process dies, which shared memory by itself would never tell. */
#ifndef COLLI_SHM_H
#define COLLI_SHM_H

#include <stdatomic.h>

#include "base/handshake.h"
#include "transport/transport.h"

#define SHM_SEG_MAGIC   0x4d48534bu /* "KSHM" */
#define SHM_SEG_VERSION 2u   /* 2: the creator holds an OFD read lock on it (the sweep's sign) */
#define SHM_SLOTS_OFF   4096 /* the slots start on the second page */
#define SHM_SLOT_HDR    64   /* header line of a slot */
#define SHM_INLINE_MAX  8    /* payloads up to this size live in the header line */

typedef struct shm_seg {
    /* line 0: written by the sender before it announces the segment, read-only afterwards */
    uint32_t magic;
    uint32_t version;
    uint64_t tag;
    int32_t from;
    int32_t to;
    uint32_t nslots;
    uint32_t slot_bytes; /* stride: header line + payload capacity */
    uint64_t seg_bytes;
    uint8_t mac[16]; /* SipHash-128(secret, the 40 bytes above) */
    uint8_t pad0[8];
    /* line 1: slots consumed; written by the receiver only */
    _Alignas(64) _Atomic uint64_t tail;
    /* line 2: the receiver sleeps until a slot is published (it sets, the sender clears) */
    _Alignas(64) _Atomic uint32_t rd_sleep;
    /* line 3: the sender sleeps until a slot is released (it sets, the receiver clears) */
    _Alignas(64) _Atomic uint32_t wr_sleep;
} shm_seg_t;
_Static_assert(sizeof(shm_seg_t) <= SHM_SLOTS_OFF, "segment header fits its page");

typedef struct shm_slot {
    colli_frame_t frame;    /* frame.reserved: index of this fragment within the unit */
    _Atomic uint64_t ready; /* write position + 1 once frame and payload are complete */
} shm_slot_t;
_Static_assert(sizeof(shm_slot_t) == 56, "slot header is 56 bytes + 8 inline payload bytes");

/* This rank's view of one ring. */
typedef struct shm_ring {
    shm_seg_t *seg; /* NULL: not created (out) or not mapped yet (in) */
    char *slots;
    size_t map_bytes;
    uint32_t nslots;
    uint32_t slot_bytes;
    uint32_t cap;       /* payload bytes per slot */
    uint64_t pos;       /* next slot to write (out) or to read (in) */
    uint64_t tail_seen; /* out: the receiver's tail as last read */
    bool named;         /* out: created by us; its name may exist until the receiver maps it */
    int lock_fd;        /* out: the segment's descriptor, holding an OFD read lock while we live */
    bool armed;         /* our sleep flag in this ring is set */
} shm_ring_t;

/* The link: TCP connect, the handshake (hello sent, challenge awaited, response sent), ready. */
enum { LINK_NONE = 0, LINK_CONNECTING, LINK_HANDSHAKE, LINK_READY, LINK_CLOSED };

typedef struct shm_peer {
    int fd; /* the link */
    uint8_t link;
    bool gone;    /* the link ended: the peer died, aborted or destroyed its communicator */
    bool bye;     /* it said goodbye first: a clean destroy */
    int gone_err; /* errno of the failure, 0 for end of stream */
    double since; /* first connect attempt */
    double retry_at;
    int pfd;       /* index of the link in the current wait's poll set, or -1 */
    colli_hs_t hs; /* the link's handshake (the lower rank connects) */
    shm_ring_t out, in;
} shm_peer_t;

typedef struct shm_state {
    int tp;            /* this transport's slot in the communicator */
    shm_peer_t *peers; /* [nranks]; only local peers are used */
    struct sockaddr_storage bind_addr;
    uint32_t nslots;
    uint32_t cap;
    bool leaving; /* the communicator is being destroyed: announced segments are not mapped */
} shm_state_t;

static inline shm_slot_t *shm_slot(const shm_ring_t *r, uint64_t pos)
{
    return (shm_slot_t *)(r->slots + (size_t)(pos % r->nslots) * r->slot_bytes);
}

static inline char *shm_payload(shm_slot_t *s, size_t frag)
{
    return (char *)s + (frag <= SHM_INLINE_MAX ? sizeof(shm_slot_t) : SHM_SLOT_HDR);
}

/* /kcoll-<tag>-<from>-<to> */
void shm_seg_name(const struct coll_comm *comm, int from, int to, char *buf, size_t len);
/* A connecting link became writable: finish the connect and send the hello. */
coll_result_t shm_link_connected(struct coll_comm *comm, shm_state_t *st, int peer);
/* Create, size and map the segment to peer and announce it over the link. */
coll_result_t shm_ring_create(struct coll_comm *comm, shm_state_t *st, int peer);
/* Read the link without blocking: map announced segments; notice the end of the link. */
coll_result_t shm_link_read(struct coll_comm *comm, shm_state_t *st, int peer);
/* Wake the peer (one byte on the link); a full or broken link is left to shm_link_read. */
void shm_link_wake(shm_peer_t *pp);
/* The error for a lane that waits on a peer whose link ended (an abort notice first). */
coll_result_t shm_gone_error(struct coll_comm *comm, const shm_state_t *st, colli_op_t *op,
                             int peer, const char *what);

coll_result_t shm_progress(struct coll_comm *comm, int tp, colli_op_t *op, bool *progressed);
bool shm_wait_arm(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set);
coll_result_t shm_wait_done(struct coll_comm *comm, int tp, colli_op_t *op, colli_pollset_t *set);

#endif
