/* An operation is a small dataflow program: per peer, direction and stream a "lane" of units
 * (byte ranges) moved in order, where a unit may wait for a unit of another lane. Algorithms
 * build ops; transports move the bytes; the engine runs the loop with deadlines. A send unit
 * waits until its dependency (a receive) is processed; a receive unit that reduces may receive
 * into staging early, but applies its data only once its dependency (usually the send that reads
 * the same bytes) is complete, so nothing is overwritten while it is still being sent. */
#ifndef COLLI_OP_H
#define COLLI_OP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/comm.h"
#include "base/wire.h"

typedef struct colli_fp {
    uint8_t coll;
    uint8_t dtype;
    uint8_t op;
    int32_t root;
    uint64_t count;
    uint64_t seq;
} colli_fp_t;

typedef struct colli_dep {
    int32_t lane;
    int32_t unit;
} colli_dep_t;

#define COLLI_NO_DEP ((colli_dep_t){-1, -1})

enum { COLLI_UNIT_SEND = 0, COLLI_UNIT_RECV_COPY = 1, COLLI_UNIT_RECV_REDUCE = 2 };

typedef struct colli_unit {
    char *buf;       /* send: source; receive: destination */
    const char *src; /* REDUCE: buf = src OP received */
    size_t bytes;
    uint32_t msg_unit; /* index within its message (checked against the frame) */
    int32_t fp;        /* index into op->fps */
    colli_dep_t dep;
    uint8_t kind;
    uint8_t final_div; /* COLL_AVG: this reduction completes the sum: divide by nranks */
    uint32_t req;      /* 1 + index in op->recs of the request it belongs to; 0: none */
} colli_unit_t;

typedef struct colli_lane {
    int peer;
    int stream;
    bool send;
    uint8_t tp; /* slot of the transport that moves this lane (that of its peer) */
    colli_unit_t *units;
    int n, cap;
    int done; /* units completed (sent; received and processed) */
    /* transport's progress on units[done] */
    size_t hdr_off;
    size_t pay_off; /* payload bytes of units[done] sent, or received (and applied, shm) */
    bool staged;    /* REDUCE payload complete in staging, waiting for the dependency */
    colli_frame_t hdr;
    void *staging;
} colli_lane_t;

/* What a built op depends on besides its buffers: an op whose key is valid can run again for a
 * call with an equal key, with its units moved from the old buffers to the new ones. */
typedef struct colli_op_key {
    bool valid;
    int coll;
    size_t count;
    coll_datatype_t dt;
    coll_op_t redop;
    int root;
    const void *sendbuf;
    void *recvbuf;
} colli_op_key_t;

/* A request of a pending point-to-point op (coll_isend, coll_irecv): a message whose units carry
 * its index, done when none is left. */
typedef struct colli_req_rec {
    int32_t left;  /* units not complete yet; -1: the slot is free */
    uint32_t gen;  /* changes each time the slot is taken, so a stale handle is told apart */
    bool detached; /* its request was freed before it completed: the slot frees itself then */
} colli_req_rec_t;

typedef struct colli_op {
    struct coll_comm *comm;
    colli_lane_t *lanes;
    int nlanes, cap;
    int lanes_left;
    int tp_lanes[COLLI_MAX_TP]; /* lanes per transport slot */
    colli_fp_t *fps;
    int nfps, fpcap;
    int cur_fp;
    uint32_t *send_ctr; /* [nranks] units added per peer for the current message */
    uint32_t *recv_ctr;
    coll_datatype_t dt;
    coll_op_t redop;
    const char *what; /* "all_reduce", "group" */
    bool oom;
    /* requests (the pending point-to-point op alone): units added now belong to cur_req */
    colli_req_rec_t *recs;
    int nrecs, reccap;
    uint32_t cur_req;
    uint64_t completions; /* requests completed so far */
    colli_op_key_t key;   /* set by the caller when the op may be reused (colli_op_reuse) */
    /* One local copy (a root's own copy, an own block) done in pieces while the network is
     * busy, instead of before the first byte is sent. */
    char *lc_dst;
    const char *lc_src;
    size_t lc_bytes, lc_done;
} colli_op_t;

/* Defer memcpy(dst, src, bytes) into the op's idle time (at most one per op). */
void colli_op_local_copy(colli_op_t *op, void *dst, const void *src, size_t bytes);

/* Start an empty op. Its arrays come from comm->spare_op when the last op left them there, so a
 * call allocates nothing once the communicator has run a similar op. */
coll_result_t colli_op_init(colli_op_t *op, struct coll_comm *comm, const char *what,
                            coll_datatype_t dt, coll_op_t redop);
/* The op the last call built when its key equals key (buffers aside, but in place or not alike),
 * with its units moved to key's buffers, its lanes rewound and its message numbered seq; it
 * lives in comm (give it back with colli_op_free). NULL when there is no such op. */
colli_op_t *colli_op_reuse(struct coll_comm *comm, const colli_op_key_t *key, uint64_t seq);
/* Give the op (arrays, and the op itself when its key is valid) to comm->spare_op. */
void colli_op_free(colli_op_t *op);
/* Free op's arrays, never keeping them as comm->spare_op (an op that lives on its own). */
void colli_op_destroy(colli_op_t *op);
/* Free comm->spare_op (communicator teardown). */
void colli_op_cache_free(struct coll_comm *comm);

/* Add a message fingerprint and make it current; returns its index. */
int colli_op_add_fp(colli_op_t *op, int coll, coll_datatype_t dt, coll_op_t redop, int root,
                    uint64_t count, uint64_t seq);
/* Start a new message to (send) or from peer (p2p): unit numbering restarts at 0. */
void colli_op_reset_msg(colli_op_t *op, int peer, bool send);

/* Add units (split into chunk-size pieces by the caller). The returned dep names the unit. */
colli_dep_t colli_op_send(colli_op_t *op, int peer, const void *buf, size_t bytes, colli_dep_t dep);
colli_dep_t colli_op_recv(colli_op_t *op, int peer, void *dst, size_t bytes, colli_dep_t dep);
colli_dep_t colli_op_recv_reduce(colli_op_t *op, int peer, void *dst, const void *src, size_t bytes,
                                 colli_dep_t dep, bool final_div);

static inline bool colli_dep_done(const colli_op_t *op, colli_dep_t d)
{
    return d.lane < 0 || op->lanes[d.lane].done > d.unit;
}

/* A free request slot (its units counted by add_unit while cur_req is 1 + its index); -1 when
 * memory is short. */
int colli_op_req_new(colli_op_t *op);
/* Give the slot back (a completed request was read, or a detached one completed). */
void colli_op_req_release(colli_op_t *op, int idx);
/* After a run of a pending op (whose units depend on none): lanes whose units are all complete
 * start again at unit 0, completed units leave a lane once they are half of it, and fingerprints
 * no unit refers to any more are dropped, so that an op that is never idle as a
 * whole (a recv always posted ahead) does not grow. Detached requests that completed free their
 * slots. */
void colli_op_compact(colli_op_t *op);

/* Apply a staged REDUCE unit (the transport calls this when the payload is complete and the
 * dependency is satisfied), then mark it done. */
void colli_op_unit_done(colli_op_t *op, colli_lane_t *lane);
/* Mark units[done] complete: its data was applied already (a transport that reduces straight
 * from its own buffers). */
void colli_op_unit_complete(colli_op_t *op, colli_lane_t *lane);

/* Ranks the unfinished lanes of op wait on, as "1 3 ..." (also marks them in mask[nranks]; NULL:
 * a mask of its own, and "" if it cannot have one). */
void colli_op_waits(const colli_op_t *op, uint8_t *mask, char *buf, size_t len);

/* Describe the message of a unit for error messages: "all_reduce(count 1024, float32, sum)". */
void colli_fp_desc(const colli_fp_t *fp, char *buf, size_t len);
/* An op for messages: its first fingerprint's description (in buf), else op->what, or "an
 * operation" for NULL; and that fingerprint's sequence number (0 without one). */
const char *colli_op_desc(const colli_op_t *op, char *buf, size_t len);
unsigned long long colli_op_seq(const colli_op_t *op);

#endif
