/* Hierarchical all-reduce for jobs whose pods run several ranks each (the kcoll agent's
 * ranksPerPod: rank = pod x L + local rank). Three rings, pipelined in chunk-size pieces like
 * ring.c, in one op:
 *   1. reduce-scatter inside the pod (L local ranks, shared memory on one host): local rank l
 *      ends with segment (l+1) % L of the buffer, summed over its pod;
 *   2. all-reduce of that segment between the pods, on the "rail" of the ranks with the same
 *      local rank (P ranks, one per pod): each rail carries 1/L of the data, so a rank sends
 *      2(P-1)/P x S/L bytes across pods instead of a flat ring's 2(N-1)/N x S on a pod boundary;
 *   3. all-gather inside the pod.
 * A piece waits for the one unit that last wrote it (the rail's pieces are the local segment's
 * pieces, split among the pods at piece boundaries), so the phases overlap piece by piece. */
#include <stdlib.h>
#include <string.h>

#include "algo/algos.h"

bool colli_hier_layout(const struct coll_comm *comm, int *per, int *pods)
{
    const colli_member_t *m = comm->members;
    const int n = comm->nranks, l = m[0].local_size;
    if (l < 2 || n % l != 0 || n / l < 2)
        return false;
    for (int r = 0; r < n; r++) {
        const colli_member_t *first = &m[r - r % l];
        if (m[r].local_size != l || m[r].local_rank != r % l || m[r].pod[0] == '\0' ||
            (r % l != 0 && strcmp(m[r].pod, first->pod) != 0))
            return false;
    }
    *per = l;
    *pods = n / l;
    return true;
}

/* The count elements split into n segments, the first count % n one longer. */
static size_t seg_off(size_t count, size_t n, size_t i)
{
    size_t base = count / n, rem = count % n;
    return i * base + (i < rem ? i : rem);
}

static size_t seg_len(size_t count, size_t n, size_t i)
{
    return count / n + (i < count % n ? 1 : 0);
}

static size_t npieces(size_t len, size_t chunk)
{
    return (len + chunk - 1) / chunk;
}

static size_t piece_len(size_t len, size_t chunk, size_t k)
{
    return len - k * chunk < chunk ? len - k * chunk : chunk;
}

typedef struct {
    colli_op_t *op;
    const char *in;
    char *out;
    size_t count, esize, chunk;
    size_t per, pods, l, p; /* L, P, this rank's local rank and pod */
    int next, prev;         /* in the pod's ring */
    int rnext, rprev;       /* on the rail */
    bool avg;
} hier_t;

/* Piece k of segment seg of the pod level: its offset and length in elements. */
static void piece(const hier_t *h, size_t seg, size_t k, size_t *at, size_t *len)
{
    const size_t sl = seg_len(h->count, h->per, seg);
    *at = seg_off(h->count, h->per, seg) + k * h->chunk;
    *len = piece_len(sl, h->chunk, k);
}

/* 1: reduce-scatter in the pod; dep[k] ends as the unit that completed piece k of segment
 * (l+1) % L. cur/nxt are scratch arrays of the largest segment's pieces. */
static void pod_reduce_scatter(hier_t *h, colli_dep_t *cur, colli_dep_t *nxt, colli_dep_t *dep)
{
    const size_t n = h->per;
    for (size_t step = 0; step + 1 < n; step++) {
        size_t seg = (h->l + n - step % n) % n;
        for (size_t k = 0; k < npieces(seg_len(h->count, n, seg), h->chunk); k++) {
            size_t at, len;
            piece(h, seg, k, &at, &len);
            colli_op_send(h->op, h->next, (step == 0 ? h->in : h->out) + at * h->esize,
                          len * h->esize, step == 0 ? COLLI_NO_DEP : cur[k]);
        }
        seg = (h->l + 2 * n - step - 1) % n;
        for (size_t k = 0; k < npieces(seg_len(h->count, n, seg), h->chunk); k++) {
            size_t at, len;
            piece(h, seg, k, &at, &len);
            nxt[k] =
                colli_op_recv_reduce(h->op, h->prev, h->out + at * h->esize, h->in + at * h->esize,
                                     len * h->esize, COLLI_NO_DEP, false);
        }
        colli_dep_t *t = cur;
        cur = nxt;
        nxt = t;
    }
    const size_t own = (h->l + 1) % n;
    for (size_t k = 0; k < npieces(seg_len(h->count, n, own), h->chunk); k++)
        dep[k] = cur[k];
}

/* Pieces [lo, hi) of the own segment form the rail's part j (of P, split at piece bounds). */
static void rail_part(size_t npc, size_t pods, size_t j, size_t *lo, size_t *hi)
{
    *lo = seg_off(npc, pods, j);
    *hi = *lo + seg_len(npc, pods, j);
}

/* 2: all-reduce of the own segment on the rail, in place; dep[k] is updated to the unit that
 * last wrote piece k. */
static void rail_all_reduce(hier_t *h, colli_dep_t *dep)
{
    const size_t n = h->pods, own = (h->l + 1) % h->per;
    const size_t npc = npieces(seg_len(h->count, h->per, own), h->chunk);
    /* reduce-scatter: step s sends part p-s, reduces part p-s-1 (the last step completes the
     * sum: divided by nranks for an average) */
    for (size_t step = 0; step + 1 < n; step++) {
        size_t lo, hi;
        rail_part(npc, n, (h->p + n - step) % n, &lo, &hi);
        for (size_t k = lo; k < hi; k++) {
            size_t at, len;
            piece(h, own, k, &at, &len);
            colli_op_send(h->op, h->rnext, h->out + at * h->esize, len * h->esize, dep[k]);
        }
        rail_part(npc, n, (h->p + 2 * n - step - 1) % n, &lo, &hi);
        for (size_t k = lo; k < hi; k++) {
            size_t at, len;
            piece(h, own, k, &at, &len);
            dep[k] = colli_op_recv_reduce(h->op, h->rprev, h->out + at * h->esize,
                                          h->out + at * h->esize, len * h->esize, dep[k],
                                          h->avg && step + 2 == n);
        }
    }
    /* all-gather: step s sends part p+1-s (complete), receives part p-s */
    for (size_t step = 0; step + 1 < n; step++) {
        size_t lo, hi;
        rail_part(npc, n, (h->p + 1 + n - step) % n, &lo, &hi);
        for (size_t k = lo; k < hi; k++) {
            size_t at, len;
            piece(h, own, k, &at, &len);
            colli_op_send(h->op, h->rnext, h->out + at * h->esize, len * h->esize, dep[k]);
        }
        rail_part(npc, n, (h->p + n - step) % n, &lo, &hi);
        for (size_t k = lo; k < hi; k++) {
            size_t at, len;
            piece(h, own, k, &at, &len);
            dep[k] = colli_op_recv(h->op, h->rprev, h->out + at * h->esize, len * h->esize,
                                   COLLI_NO_DEP);
        }
    }
}

/* 3: all-gather in the pod: step s sends segment l+1-s (the own one first, once the rail is
 * done with each piece), receives segment l-s. */
static void pod_all_gather(hier_t *h, colli_dep_t *cur, colli_dep_t *nxt, const colli_dep_t *dep)
{
    const size_t n = h->per;
    for (size_t step = 0; step + 1 < n; step++) {
        size_t seg = (h->l + 1 + n - step) % n;
        for (size_t k = 0; k < npieces(seg_len(h->count, n, seg), h->chunk); k++) {
            size_t at, len;
            piece(h, seg, k, &at, &len);
            colli_op_send(h->op, h->next, h->out + at * h->esize, len * h->esize,
                          step == 0 ? dep[k] : cur[k]);
        }
        seg = (h->l + n - step) % n;
        for (size_t k = 0; k < npieces(seg_len(h->count, n, seg), h->chunk); k++) {
            size_t at, len;
            piece(h, seg, k, &at, &len);
            nxt[k] =
                colli_op_recv(h->op, h->prev, h->out + at * h->esize, len * h->esize, COLLI_NO_DEP);
        }
        colli_dep_t *t = cur;
        cur = nxt;
        nxt = t;
    }
}

coll_result_t colli_hier_all_reduce(colli_op_t *op, const colli_coll_args_t *a, int per, int pods)
{
    const struct coll_comm *comm = op->comm;
    hier_t h = {.op = op,
                .in = a->sendbuf,
                .out = a->recvbuf,
                .count = a->count,
                .esize = coll_datatype_size(a->dt),
                .per = (size_t)per,
                .pods = (size_t)pods,
                .l = (size_t)(comm->rank % per),
                .p = (size_t)(comm->rank / per),
                .avg = a->op == COLL_AVG};
    h.chunk = colli_chunk_elems(comm, h.esize);
    const int base = (int)(h.p * h.per);
    h.next = base + (int)((h.l + 1) % h.per);
    h.prev = base + (int)((h.l + h.per - 1) % h.per);
    h.rnext = (int)(((h.p + 1) % h.pods) * h.per + h.l);
    h.rprev = (int)(((h.p + h.pods - 1) % h.pods) * h.per + h.l);
    const size_t most = npieces(seg_len(h.count, h.per, 0), h.chunk) + 1;
    colli_dep_t *cur = malloc(most * sizeof(*cur)), *nxt = malloc(most * sizeof(*nxt));
    colli_dep_t *dep = malloc(most * sizeof(*dep));
    if (cur == NULL || nxt == NULL || dep == NULL) {
        free(cur);
        free(nxt);
        free(dep);
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory building a hierarchical all_reduce");
    }
    for (size_t i = 0; i < most; i++)
        cur[i] = nxt[i] = dep[i] = COLLI_NO_DEP;
    pod_reduce_scatter(&h, cur, nxt, dep);
    rail_all_reduce(&h, dep);
    pod_all_gather(&h, cur, nxt, dep);
    free(cur);
    free(nxt);
    free(dep);
    return COLL_SUCCESS;
}
