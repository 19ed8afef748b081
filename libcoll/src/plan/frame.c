/* Data frame headers: filling, and the errors for headers that do not match (see frame.h). */
#include <stdio.h>

#include "base/error.h"
#include "plan/frame.h"

void colli_frame_fill(const struct coll_comm *comm, const colli_op_t *op, const colli_unit_t *u,
                      colli_frame_t *f)
{
    const colli_fp_t *fp = &op->fps[u->fp];
    memset(f, 0, sizeof(*f));
    f->magic = COLLI_FRAME_MAGIC;
    f->type = COLLI_FRAME_DATA;
    f->coll = fp->coll;
    f->dtype = fp->dtype;
    f->op = fp->op;
    f->root = fp->root;
    f->unit = u->msg_unit;
    f->seq = fp->seq;
    f->count = fp->count;
    f->tag = comm->tag;
    f->len = (uint32_t)u->bytes;
}

coll_result_t colli_frame_error(struct coll_comm *comm, const colli_op_t *op, int peer,
                                const colli_unit_t *u, const colli_frame_t *f)
{
    const colli_fp_t *mine = &op->fps[u->fp];
    char who[200], md[160], td[160];
    colli_member_desc(comm, peer, who, sizeof(who));
    if (f->magic != COLLI_FRAME_MAGIC || f->tag != comm->tag || f->type != COLLI_FRAME_DATA)
        return COLLI_ERR(NET, COLL_ERR_REMOTE,
                         "corrupt frame from %s (magic 0x%08x, tag %s): the stream is out of "
                         "step; this is a bug or memory corruption, please report it",
                         who, f->magic, f->tag == comm->tag ? "ok" : "wrong");
    colli_fp_t theirs = {.coll = f->coll,
                         .dtype = f->dtype,
                         .op = f->op,
                         .root = f->root,
                         .count = f->count,
                         .seq = f->seq};
    colli_fp_desc(mine, md, sizeof(md));
    colli_fp_desc(&theirs, td, sizeof(td));
    bool p2p = mine->coll == COLLI_COLL_SEND_RECV;
    /* a send/recv's root is its tag (coll_send_tagged) */
    if (f->coll != mine->coll || f->dtype != mine->dtype || f->count != mine->count ||
        f->root != mine->root || (!p2p && f->op != mine->op) || f->seq != mine->seq) {
        if (p2p)
            return COLLI_ERR(
                COLL, COLL_ERR_MISMATCH,
                "send/recv mismatch: rank %d posted recv #%llu as %s but %s sent "
                "message #%llu as %s. Count, datatype and tag of each send must "
                "match the matching recv%s",
                comm->rank, (unsigned long long)mine->seq, md, who, (unsigned long long)f->seq, td,
                f->root == mine->root ? "."
                                      : ": the messages between two ranks are matched in the order "
                                        "they are issued, as NCCL matches them; a tag checks the "
                                        "match but does not choose the message. Post the receives "
                                        "in the order of the sends.");
        return COLLI_ERR(COLL, COLL_ERR_MISMATCH,
                         "collective mismatch: rank %d called %s as collective #%llu but %s "
                         "called %s as collective #%llu. Every rank must call the same "
                         "collectives in the same order with the same count, datatype, op and "
                         "root.",
                         comm->rank, md, (unsigned long long)mine->seq, who, td,
                         (unsigned long long)f->seq);
    }
    return COLLI_ERR(COLL, COLL_ERR_MISMATCH,
                     "%s #%llu: %s sent unit %u of %u bytes where rank %d expected unit %u of "
                     "%zu bytes: the ranks run different algorithms; give every rank the same "
                     "COLL_* settings",
                     md, (unsigned long long)mine->seq, who, f->unit, f->len, comm->rank,
                     u->msg_unit, u->bytes);
}
