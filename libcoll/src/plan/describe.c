/* Describing operations for messages: a fingerprint, an op, the ranks it waits on. */
#include <stdio.h>
#include <stdlib.h>

#include "plan/op.h"

void colli_fp_desc(const colli_fp_t *fp, char *buf, size_t len)
{
    const int coll = fp->coll & ~(COLLI_COLL_DIRECT | COLLI_COLL_DEV);
    const char *name = colli_coll_name(coll);
    const bool direct = (fp->coll & COLLI_COLL_DIRECT) != 0, dev = (fp->coll & COLLI_COLL_DEV) != 0;
    const char *path = direct && dev ? " (device buffers, single-copy path)"
                       : direct      ? " (single-copy path)"
                       : dev         ? " (device buffers)"
                                     : "";
    switch (coll) {
    case COLLI_COLL_ALL_REDUCE:
    case COLLI_COLL_REDUCE_SCATTER:
        snprintf(buf, len, "%s(count %llu, %s, %s)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), coll_op_name(fp->op), path);
        break;
    case COLLI_COLL_REDUCE:
        snprintf(buf, len, "%s(count %llu, %s, %s, root %d)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), coll_op_name(fp->op), fp->root, path);
        break;
    case COLLI_COLL_BROADCAST:
        snprintf(buf, len, "%s(count %llu, %s, root %d)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), fp->root, path);
        break;
    case COLLI_COLL_SEND_RECV: /* root: the tag (coll_send_tagged), shown when not 0 */
        if (fp->root != 0) {
            snprintf(buf, len, "%s(count %llu, %s, tag %d)%s", name, (unsigned long long)fp->count,
                     coll_datatype_name(fp->dtype), fp->root, path);
            break;
        }
        /* fall through */
    default:
        snprintf(buf, len, "%s(count %llu, %s)%s", name, (unsigned long long)fp->count,
                 coll_datatype_name(fp->dtype), path);
        break;
    }
}

const char *colli_op_desc(const colli_op_t *op, char *buf, size_t len)
{
    if (op == NULL)
        return "an operation";
    if (op->nfps == 0)
        return op->what;
    colli_fp_desc(&op->fps[0], buf, len);
    return buf;
}

unsigned long long colli_op_seq(const colli_op_t *op)
{
    return op != NULL && op->nfps > 0 ? (unsigned long long)op->fps[0].seq : 0ULL;
}

/* Ranks this rank's unfinished lanes wait on, as a bitmap and as "1 3 ...". */
void colli_op_waits(const colli_op_t *op, uint8_t *mask, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    if (mask == NULL) {
        uint8_t *own = calloc((size_t)op->comm->nranks, 1);
        if (own != NULL)
            colli_op_waits(op, own, buf, len);
        free(own);
        return;
    }
    for (int i = 0; i < op->nlanes; i++) {
        const colli_lane_t *l = &op->lanes[i];
        if (l->done == l->n || mask[l->peer])
            continue;
        mask[l->peer] = 1;
        int n = snprintf(buf + used, len - used, "%s%d", used ? " " : "", l->peer);
        if (n > 0 && (size_t)n < len - used)
            used += (size_t)n;
    }
}
