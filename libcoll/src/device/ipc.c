/* CUDA IPC between the ranks of one host: a collective on device buffers reads and writes the
 * peers' device buffers directly (device to device, no host staging), as the single-copy path of
 * host buffers does with their memory (algo/direct.c). Taken when every rank of the
 * communicator is reached over shared memory, the call moves at least COLL_SHM_DIRECT_MIN bytes
 * per rank, there are at most COLLI_GPU_MAX_SRCS ranks (one GPU reduction reads every input),
 * and every rank can export its buffers and open its peers' (else the chunk pipeline runs it; a
 * rank whose buffers cannot be exported copies the call through a buffer of its own that can,
 * the bounce buffer, up to COLL_CUDA_IPC_BOUNCE):
 *   1. every rank sends every peer a descriptor of its buffers (IPC handle of the allocation,
 *      offset, size, allocation id); all reach the same verdict from the same descriptors;
 *   2. each opens its peers' allocations (cached per peer and allocation id) and says whether it
 *      could; one rank that could not sends every rank back to the pipeline (told once at INFO);
 *   3. each does its share on its slot stream: all_reduce / reduce reduce its slice of every
 *      input with one GPU reduction and write it to every output (the root's); reduce_scatter
 *      reduces its block; all_gather, broadcast and all_to_all copy its part to every output;
 *   4. a barrier: no rank returns (opens its gate) while a peer may still read its inputs or
 *      write its outputs. A rank whose copies or kernels fail fails the communicator before the
 *      barrier, so the others fail in it naming that rank instead of returning short results.
 * Every message of the four steps carries the call's fingerprint ("device buffers"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "device/device_int.h"

#define IPC_MAGIC 0x4b434950u /* "KCIP" */

typedef struct ipc_buf {
    uint8_t handle[COLLI_GPU_IPC_HANDLE];
    uint64_t off, size, id, addr;
    uint32_t used, pad;
} ipc_buf_t;

typedef struct ipc_desc {
    uint32_t magic, ok;
    int32_t pid;
    int32_t device;   /* the GPU the sender's buffers are on */
    ipc_buf_t buf[2]; /* send, receive */
} ipc_desc_t;

_Static_assert(sizeof(ipc_desc_t) % 8 == 0, "a whole number of elements of any datatype");

typedef struct ipc_call {
    struct coll_comm *comm;
    struct colli_dev *d;
    dev_job_t *j;
    const colli_coll_args_t *a;
    void *stream;
    int n, r;
    size_t e;
    char *sp[COLLI_GPU_MAX_SRCS], *rp[COLLI_GPU_MAX_SRCS]; /* every rank's buffers, here */
    int err;
    const char *what;
    colli_gpu_list_t *lists; /* inline: the work goes into these two lists, else on stream */
} ipc_call_t;

/* From facts every rank shares, so that every rank takes step 1 for the same calls (a rank
 * that ran the pipeline while another exchanged descriptors would pair unlike messages). */
bool colli_dev_ipc_eligible(const struct coll_comm *comm, const colli_coll_args_t *a)
{
    if (comm->nranks < 2 || comm->nranks > COLLI_GPU_MAX_SRCS || comm->cfg.shm_direct_min == 0 ||
        a->count * coll_datatype_size(a->dt) < comm->cfg.shm_direct_min)
        return false;
    return comm->all_local;
}

/* Does this rank say no in step 1 whatever its buffers (COLL_CUDA_IPC=0; one hardware queue,
 * CUDA_DEVICE_MAX_CONNECTIONS=1, where the pipeline must run inline; an in-place all_to_all,
 * which CUDA IPC does not do)? Then it knows the pipeline runs the call before the exchange. */
bool colli_dev_ipc_declines(const struct coll_comm *comm, const colli_coll_args_t *a)
{
    return !comm->cfg.dev_ipc || comm->dev->one_queue || comm->dev->ops->ipc_export == NULL ||
           __atomic_load_n(&comm->dev->ipc_broken, __ATOMIC_ACQUIRE) ||
           (a->coll == COLLI_COLL_ALL_TO_ALL && a->sendbuf == a->recvbuf);
}

static bool export_all(const struct coll_comm *comm, dev_job_t *j)
{
    const colli_coll_args_t *a = j->ctx;
    size_t len[2];
    colli_buffer_sizes(a, comm->nranks, comm->rank, len);
    const void *ptr[2] = {a->sendbuf, a->recvbuf};
    for (int i = 0; i < 2; i++) {
        struct dev_export *x = &j->xp[i];
        if (len[i] > 0 &&
            comm->dev->ops->ipc_export(ptr[i], x->handle, &x->off, &x->size, &x->id) != 0)
            return false;
    }
    j->exported = true; /* the exchange sends these: no export on its thread */
    return true;
}

bool colli_dev_ipc_exportable(const struct coll_comm *comm, dev_job_t *j, bool may_bounce)
{
    if (export_all(comm, j))
        return true;
    struct colli_dev *d = comm->dev;
    colli_coll_args_t *a = j->ctx;
    size_t off[2], want = 0;
    const size_t bytes = colli_dev_ipc_span(comm, a, off);
    /* the limit is held against what any rank's buffers of this call may take, so that every
     * rank (all configured alike) decides alike: a rank that declined while its peers bounced
     * would have them learn it only at the exchange */
    size_t most[2] = {0, 0}, len[2];
    for (int q = 0; q < comm->nranks; q++) {
        colli_buffer_sizes(a, comm->nranks, q, len);
        most[0] = len[0] > most[0] ? len[0] : most[0];
        most[1] = len[1] > most[1] ? len[1] : most[1];
    }
    const size_t cap = comm->cfg.dev_bounce, bound = ((most[0] + 63) & ~(size_t)63) + most[1];
    const int err = !may_bounce || bound > cap
                        ? 1
                        : colli_dev_grow(d, &d->bounce, &d->bounce_cap, bytes, &want, true);
    if (err == 0) {
        j->user_in = a->sendbuf;
        j->user_out = a->recvbuf;
        j->bounced = true;
        a->sendbuf = (char *)d->bounce + off[0];
        a->recvbuf = (char *)d->bounce + off[1];
        if (export_all(comm, j)) {
            if (!d->bounce_told)
                coll_info(COLL,
                          "rank %d: device buffers that cannot be exported for CUDA IPC (%s): "
                          "copied through kcoll's device memory, %zu bytes so far, at most "
                          "COLL_CUDA_IPC_BOUNCE=%zu per communicator (said once)",
                          comm->rank, j->what, d->bounce_cap, cap);
            d->bounce_told = true;
            return true;
        }
        colli_dev_ipc_unbounce(j);
    } else if (may_bounce && !d->bounce_told) {
        coll_info(COLL,
                  "rank %d: %s: its device buffers cannot be exported for CUDA IPC, and %zu "
                  "bytes through kcoll's device memory %s: through host staging (said once)",
                  comm->rank, j->what, bound,
                  bound > cap ? "exceed COLL_CUDA_IPC_BOUNCE" : "could not be allocated");
        d->bounce_told = true;
    }
    return false;
}

void colli_dev_ipc_unbounce(dev_job_t *j)
{
    if (!j->bounced)
        return;
    colli_coll_args_t *a = j->ctx;
    a->sendbuf = j->user_in;
    a->recvbuf = j->user_out;
    j->bounced = false;
    j->exported = false;
}

/* A bounced call's copy of its inputs into the bounce buffer (in), or of its outputs back. */
static void bounce_copy(const struct coll_comm *comm, dev_job_t *j, void *stream, bool in)
{
    if (!j->bounced || j->bad != NULL || j->truncated || (in && j->scaled))
        return; /* a PreMulSum's scale wrote its input into the bounce buffer (inline.c) */
    const colli_coll_args_t *a = j->ctx;
    size_t len[2];
    colli_buffer_sizes(a, comm->nranks, comm->rank, len);
    const colli_gpu_ops_t *o = comm->dev->ops;
    int err = 0;
    if (in && len[0] > 0)
        err = o->memcpy_async((void *)a->sendbuf, j->user_in, len[0], stream);
    else if (!in && len[1] > 0)
        err = o->memcpy_async(j->user_out, a->recvbuf, len[1], stream);
    if (err != 0) {
        j->bad = in ? "copying the inputs into kcoll's device memory (CUDA IPC)"
                    : "copying the results out of kcoll's device memory (CUDA IPC)";
        j->bad_why = o->error_string(err);
    }
}

static void describe(ipc_call_t *c, ipc_desc_t *me)
{
    const colli_gpu_ops_t *o = c->d->ops;
    const colli_coll_args_t *a = c->a;
    size_t len[2];
    colli_buffer_sizes(a, c->n, c->r, len);
    memset(me, 0, sizeof(*me));
    me->magic = IPC_MAGIC;
    me->pid = (int32_t)getpid();
    me->device = c->d->device;
    /* no when this rank declined at the call (it runs the pipeline after the exchange) */
    me->ok = !c->j->declined && !colli_dev_ipc_declines(c->comm, a);
    const void *ptr[2] = {a->sendbuf, a->recvbuf};
    for (int i = 0; i < 2 && me->ok; i++) {
        ipc_buf_t *b = &me->buf[i];
        if (len[i] == 0)
            continue;
        size_t off = 0, size = 0;
        const struct dev_export *x = c->j->exported ? &c->j->xp[i] : NULL;
        int err = 0;
        if (x != NULL) {
            memcpy(b->handle, x->handle, sizeof(b->handle));
            off = x->off;
            size = x->size;
            b->id = x->id;
        } else {
            err = o->ipc_export(ptr[i], b->handle, &off, &size, &b->id);
        }
        if (err != 0 && !c->d->ipc_told) {
            coll_info(COLL,
                      "rank %d: cannot export device buffer %p for CUDA IPC (%s): device "
                      "buffers between the ranks of this host go through host staging",
                      c->r, ptr[i], o->error_string(err));
            c->d->ipc_told = true;
        }
        me->ok = err == 0;
        b->used = 1;
        b->off = off;
        b->size = size;
        b->addr = (uint64_t)(uintptr_t)ptr[i];
    }
}

/* Add mapping p to those the caller's thread closes (under d->mu): false when out of memory. */
static bool dead_push(struct colli_dev *d, void *p)
{
    if (d->ipc_ndead == d->ipc_dead_cap) {
        const int cap = d->ipc_dead_cap > 0 ? 2 * d->ipc_dead_cap : DEV_IPC_MAPS;
        void **grown = realloc(d->ipc_dead, (size_t)cap * sizeof(grown[0]));
        if (grown == NULL)
            return false;
        d->ipc_dead = grown;
        d->ipc_dead_cap = cap;
    }
    d->ipc_dead[d->ipc_ndead++] = p;
    return true;
}

/* Rank q's allocation mapped here: cached per process and allocation id. 0, or why not in *why.
 * The least recently used mapping makes room; it is closed later on the caller's thread
 * (colli_dev_ipc_close_dead). None of this call's mappings is evicted: a call maps at most
 * 2 (COLLI_GPU_MAX_SRCS - 1) < DEV_IPC_MAPS, each used last. */
static int open_peer(struct colli_dev *d, const ipc_desc_t *q, const ipc_buf_t *b, char **base,
                     const char **why)
{
    struct dev_ipc_map *lru = &d->ipc_maps[0];
    for (int i = 0; i < DEV_IPC_MAPS; i++) {
        struct dev_ipc_map *m = &d->ipc_maps[i];
        if (m->base != NULL && m->pid == q->pid && m->id == b->id) {
            m->used = ++d->ipc_clock;
            *base = m->base;
            return 0;
        }
        if (m->base == NULL || (lru->base != NULL && m->used < lru->used))
            lru = m;
    }
    if (lru->base != NULL) {
        pthread_mutex_lock(&d->mu);
        const bool room = dead_push(d, lru->base);
        pthread_mutex_unlock(&d->mu);
        if (!room) {
            *why = "out of memory listing an evicted mapping to close";
            return 1;
        }
        lru->base = NULL;
    }
    void *p = NULL;
    int err = d->ops->ipc_open(b->handle, &p);
    if (err != 0) {
        *why = d->ops->error_string(err);
        return err;
    }
    *lru = (struct dev_ipc_map){.pid = q->pid, .id = b->id, .base = p, .used = ++d->ipc_clock};
    *base = p;
    return 0;
}

/* Every rank's buffers in this process; 0, the plugin's error, or -1 - q when rank q's
 * descriptor cannot describe its buffer (a bug or hostile bytes). */
static int map_all(ipc_call_t *c, const ipc_desc_t *descs)
{
    const int self = (int)getpid();
    for (int q = 0; q < c->n; q++) {
        size_t len[2];
        colli_buffer_sizes(c->a, c->n, q, len);
        char **slot[2] = {&c->sp[q], &c->rp[q]};
        for (int i = 0; i < 2; i++) {
            const ipc_buf_t *b = &descs[q].buf[i];
            *slot[i] = NULL;
            if (len[i] == 0)
                continue;
            if (!b->used || b->off > b->size || len[i] > b->size - b->off)
                return -1 - q; /* a descriptor that cannot describe this call's buffer */
            if (q != c->r && descs[q].pid == self && descs[q].device != c->d->device) {
                /* one process, two GPUs (ncclCommInitAll): a kernel here cannot read the other
                 * GPU's memory without peer access, which is not kcoll's to turn on */
                if (!c->d->ipc_told)
                    coll_info(COLL,
                              "rank %d (GPU %d): rank %d of this process is on GPU %d: device "
                              "buffers between them go through host staging",
                              c->r, c->d->device, q, descs[q].device);
                c->d->ipc_told = true;
                return 1;
            }
            if (q == c->r || descs[q].pid == self) {
                *slot[i] = (char *)(uintptr_t)b->addr; /* one address space */
                continue;
            }
            char *base = NULL;
            const char *why = "";
            int err = open_peer(c->d, &descs[q], b, &base, &why);
            if (err != 0) {
                if (!c->d->ipc_told)
                    coll_info(COLL,
                              "rank %d: cannot open rank %d's device buffer for CUDA IPC "
                              "(%s): device buffers between the ranks of this host go through "
                              "host staging",
                              c->r, q, why);
                c->d->ipc_told = true;
                return err;
            }
            *slot[i] = base + b->off;
        }
    }
    return 0;
}

static void ipc_copy(ipc_call_t *c, void *dst, const void *src, size_t bytes)
{
    if (c->err != 0 || bytes == 0 || dst == src)
        return;
    if (colli_dev_inject(c->comm, c->d)) {
        c->err = -1;
        c->what = "copying between the ranks' device buffers (CUDA IPC)";
        return;
    }
    if (c->lists != NULL) { /* all_reduce: after the reduction of the slice, the second list */
        colli_gpu_list_t *l = &c->lists[c->a->coll == COLLI_COLL_ALL_REDUCE ? 1 : 0];
        l->ops[l->n++] = (colli_gpu_list_op_t){.dst = dst, .srcs = {src}, .count = bytes};
        return;
    }
    int err = c->d->ops->memcpy_async(dst, src, bytes, c->stream);
    if (err != 0) {
        c->err = err;
        c->what = "copying between the ranks' device buffers (CUDA IPC)";
    }
}

/* dst = every rank's input at byte off, in rank order (count elements). */
static void ipc_reduce(ipc_call_t *c, void *dst, size_t off, size_t count)
{
    if (c->err != 0 || count == 0)
        return;
    const void *srcs[COLLI_GPU_MAX_SRCS];
    for (int q = 0; q < c->n; q++)
        srcs[q] = c->sp[q] + off;
    const uint32_t div = c->a->op == COLL_AVG ? (uint32_t)c->n : 0;
    if (c->lists != NULL) {
        colli_gpu_list_op_t *o = &c->lists[0].ops[c->lists[0].n++];
        *o = (colli_gpu_list_op_t){.dst = dst, .count = count, .nsrcs = c->n, .divisor = div};
        memcpy(o->srcs, srcs, (size_t)c->n * sizeof(srcs[0]));
        return;
    }
    int err = c->d->ops->reduce(dst, srcs, c->n, count, c->a->dt, c->a->op, div, c->stream);
    if (err != 0) {
        c->err = err;
        c->what = "reducing the ranks' device buffers on the GPU (CUDA IPC)";
    }
}

/* Step 3: this rank's share. */
static void work(ipc_call_t *c)
{
    const colli_coll_args_t *a = c->a;
    const int n = c->n, r = c->r;
    const size_t e = c->e, b = a->count * e;
    const size_t lo = colli_slice_lo(a->count, n, r) * e,
                 hi = colli_slice_lo(a->count, n, r + 1) * e;
    switch (a->coll) {
    case COLLI_COLL_ALL_REDUCE:
        ipc_reduce(c, c->rp[r] + lo, lo, (hi - lo) / e);
        for (int q = 0; q < n; q++)
            if (q != r)
                ipc_copy(c, c->rp[q] + lo, c->rp[r] + lo, hi - lo);
        break;
    case COLLI_COLL_REDUCE:
        ipc_reduce(c, c->rp[a->root] + lo, lo, (hi - lo) / e);
        break;
    case COLLI_COLL_REDUCE_SCATTER:
        ipc_reduce(c, c->rp[r], (size_t)r * b, a->count);
        break;
    case COLLI_COLL_ALL_GATHER:
        for (int q = 0; q < n; q++)
            ipc_copy(c, c->rp[q] + (size_t)r * b, c->sp[r], b);
        break;
    case COLLI_COLL_BROADCAST:
        for (int q = 0; q < n; q++)
            ipc_copy(c, c->rp[q] + lo, c->sp[a->root] + lo, hi - lo);
        break;
    default: /* all_to_all, not in place */
        for (int i = 0; i < n; i++) {
            const int q = (r + i) % n; /* spread the writers over the peers */
            ipc_copy(c, c->rp[q] + (size_t)r * b, c->sp[r] + (size_t)q * b, b);
        }
        break;
    }
    if (c->err == 0 && c->lists == NULL) {
        int err = colli_dev_wait(c->comm, c->d, c->stream);
        if (err != 0) {
            c->err = err;
            c->what = "waiting for the GPU's copies and kernels (CUDA IPC)";
        }
    }
}

/* An all_gather of one word per rank: true when every rank's word is 1. */
static bool agree(ipc_call_t *c, uint64_t mine, coll_result_t *status)
{
    uint64_t words[COLLI_GPU_MAX_SRCS];
    words[c->r] = mine;
    *status = colli_dev_net(c->comm, c->a, COLLI_COLL_ALL_GATHER, &words[c->r], words,
                            sizeof(uint64_t) / c->e);
    bool all = *status == COLL_SUCCESS;
    for (int q = 0; q < c->n && all; q++)
        all = words[q] == 1;
    return all;
}

/* Steps 1 and 2 for job j: 0 when every rank mapped every buffer (c ready for step 3), 1 when
 * the pipeline runs the call (every rank alike), -1 when the communicator failed (*status). */
static int negotiate(ipc_call_t *c, coll_result_t *status)
{
    struct coll_comm *comm = c->comm;
    ipc_desc_t descs[COLLI_GPU_MAX_SRCS];
    describe(c, &descs[c->r]);
    *status = colli_dev_net(comm, c->a, COLLI_COLL_ALL_GATHER, &descs[c->r], descs,
                            sizeof(ipc_desc_t) / c->e);
    if (*status != COLL_SUCCESS)
        return -1;
    int bad = -1;
    for (int q = 0; q < c->n && bad < 0; q++)
        if (descs[q].magic != IPC_MAGIC)
            bad = q;
    for (int q = 0; q < c->n && bad < 0; q++)
        if (!descs[q].ok)
            return 1; /* the same verdict on every rank */
    const int mapped = bad < 0 ? map_all(c, descs) : -1 - bad;
    if (mapped < 0) {
        char who[200], msg[400];
        colli_member_desc(comm, -1 - mapped, who, sizeof(who));
        snprintf(msg, sizeof(msg),
                 "%s sent a corrupt CUDA IPC descriptor for %s #%llu: the peer runs another "
                 "kcoll build or its memory is corrupt (COLL_CUDA_IPC=0 avoids this path)",
                 who, c->j->what, (unsigned long long)c->j->seq);
        colli_set_last_error(msg);
        colli_comm_fail(comm, COLL_ERR_REMOTE, msg);
        *status = COLL_ERR_REMOTE;
        return -1;
    }
    if (!agree(c, mapped == 0 ? 1 : 0, status)) {
        if (*status != COLL_SUCCESS)
            return -1;
        /* a rank could not map: the pipeline, and for the later calls too (every rank sets
         * this at this call), so that they run it inline, knowing before the exchange (a test
         * keeps CUDA IPC on, so that every call takes the fallback in its program) */
        if (!comm->test.dev_ipc_fallback)
            __atomic_store_n(&c->d->ipc_broken, true, __ATOMIC_RELEASE);
        return 1;
    }
    __atomic_store_n(&c->d->ipc_proven, true, __ATOMIC_RELEASE);
    if (!c->d->ipc_announced)
        coll_info(COLL,
                  "device buffers of the %d ranks on this host: collectives from %zu bytes "
                  "read and write the peers' device memory through CUDA IPC (said once)",
                  c->n, comm->cfg.shm_direct_min);
    c->d->ipc_announced = true;
    return 0;
}

static ipc_call_t call_of(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream)
{
    const colli_coll_args_t *a = j->ctx;
    return (ipc_call_t){.comm = comm,
                        .d = d,
                        .j = j,
                        .a = a,
                        .stream = stream,
                        .n = comm->nranks,
                        .r = comm->rank,
                        .e = coll_datatype_size(a->dt)};
}

/* Step 3's failure (a copy or kernel; injected: err -1). */
static void work_failed(ipc_call_t *c)
{
    colli_dev_fail(c->comm, c->d, c->j, c->what,
                   c->err < 0 ? "injected failure (COLL_TEST_DEV_FAIL_COPY)"
                              : colli_dev_strerror(c->d, c->err));
}

bool colli_dev_ipc_try(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                       coll_result_t *status)
{
    *status = COLL_SUCCESS;
    if (!colli_dev_ipc_eligible(comm, j->ctx))
        return false;
    ipc_call_t c = call_of(comm, d, j, stream);
    const int how = negotiate(&c, status);
    if (how != 0)
        return how < 0;
    work(&c);
    if (c.err != 0) {
        work_failed(&c);
        *status = COLL_ERR_CUDA;
        return true;
    }
    (void)agree(&c, 1, status); /* step 4: the barrier */
    return true;
}

/* ---- inline ----
 * The program on the caller's stream, enqueued at the call after its start and a PreMulSum's
 * scale (inline.c):
 *   PRE=1, wait NET1>=1, copy the lists to the device, the list kernel on lists 0 and 1, MID=1,
 *   wait NET2>=1, [fallback: the list kernel on list 2].
 * The host side: wait PRE (the inputs are final: the peers may read them from now on), the
 * exchange, the lists filled (step 3), NET1, wait MID, the barrier, NET2.
 *
 * When a rank cannot map (a driver or container that refuses peer mappings, a rank that set
 * COLL_CUDA_IPC=0 when this one did not), the call runs as the pipeline, every rank alike, and
 * no copy or kernel may be enqueued on another stream while this one waits: it could be queued
 * behind it (the hardware queues, inline.c). So until every rank has mapped every buffer of a
 * call once (ipc_proven), a call brings its fallback in its program (j->fb): the lists then copy
 * the inputs to pinned staging (list 0) and, after NET2, the staged outputs back (list 2); in
 * between the progress thread runs the pipeline's network steps with the CPU's copies and
 * reductions (colli_dev_pipe_cpu), whose messages are those of a rank that declined at the call
 * and runs the pipeline on the GPU. A call without it (a rank that could map every buffer before
 * cannot now) runs the pipeline on the slot streams while its stream waits for NET2: a stall
 * there ends at COLL_TIMEOUT with an error (wait.c). */
void colli_dev_ipc_emit(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream)
{
    const colli_gpu_ops_t *o = d->ops;
    const colli_coll_args_t *a = j->ctx;
    int err = 0;
    bounce_copy(comm, j, stream, true);
    if (colli_dev_emit_word(d, j, stream, false, W_PRE, 1) &&
        colli_dev_emit_word(d, j, stream, true, W_NET1, 1)) {
        err = o->memcpy_async(d->lists_d, d->lists_h, (j->fb ? 3 : 2) * sizeof(colli_gpu_list_t),
                              stream);
        for (int i = 0; i < 2 && err == 0; i++)
            err = o->reduce_list(&d->lists_d[i], (int)a->dt, (int)a->op, stream);
    }
    if (err == 0 && colli_dev_emit_word(d, j, stream, false, W_MID, 1) &&
        colli_dev_emit_word(d, j, stream, true, W_NET2, 1) && j->fb)
        err = o->reduce_list(&d->lists_d[2], (int)a->dt, (int)a->op, stream);
    if (err != 0 && j->bad == NULL) {
        j->bad = "enqueueing the CUDA IPC kernels";
        j->bad_why = o->error_string(err);
    }
    bounce_copy(comm, j, stream, false);
}

void colli_dev_ipc_declined_host(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    ipc_call_t c = call_of(comm, d, j, j->stream);
    coll_result_t status = COLL_SUCCESS;
    if (negotiate(&c, &status) == 1) /* this rank said no: 1, unless the communicator failed */
        colli_dev_pipe_host(comm, d, j);
}

size_t colli_dev_ipc_span(const struct coll_comm *comm, const colli_coll_args_t *a, size_t off[2])
{
    size_t len[2], o[2];
    off = off != NULL ? off : o;
    colli_buffer_sizes(a, comm->nranks, comm->rank, len);
    const uintptr_t s = (uintptr_t)a->sendbuf, t = (uintptr_t)a->recvbuf;
    if (len[0] > 0 && len[1] > 0 && s < t + len[1] && t < s + len[0]) {
        /* in place (the inputs within the outputs, or the outputs within the inputs): one
         * region laid out as the caller's */
        const uintptr_t lo = s < t ? s : t, hi = s + len[0] > t + len[1] ? s + len[0] : t + len[1];
        off[0] = s - lo;
        off[1] = t - lo;
        return hi - lo;
    }
    off[0] = 0;
    off[1] = (len[0] + 63) & ~(size_t)63;
    return off[1] + len[1];
}

/* The fallback's lists (j->fb, a rank could not map): list 0 copies the inputs to staging (at
 * *in), list 2 the staged outputs (at *out) back. */
static void fallback_lists(const struct coll_comm *comm, dev_job_t *j, char **in, char **out)
{
    const colli_coll_args_t *a = j->ctx;
    size_t len[2], off[2];
    colli_buffer_sizes(a, comm->nranks, comm->rank, len);
    (void)colli_dev_ipc_span(comm, a, off);
    *in = j->staging + off[0];
    *out = j->staging + off[1];
    colli_gpu_list_t *l = comm->dev->lists_h;
    if (len[0] > 0)
        l[0].ops[l[0].n++] =
            (colli_gpu_list_op_t){.dst = *in, .srcs = {a->sendbuf}, .count = len[0]};
    if (len[1] > 0)
        l[2].ops[l[2].n++] =
            (colli_gpu_list_op_t){.dst = a->recvbuf, .srcs = {*out}, .count = len[1]};
}

void colli_dev_ipc_host(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    volatile uint32_t *w = j->words;
    memset(d->lists_h, 0, DEV_LISTS * sizeof(colli_gpu_list_t)); /* until the verdict: nothing */
    int err = colli_dev_wait_word(comm, d, j, W_PRE, 1);
    if (err != 0) {
        if (err != COLLI_DEV_ABORTED)
            colli_dev_fail(comm, d, j, "scaling the input of a PreMulSum",
                           colli_dev_strerror(d, err));
        return;
    }
    ipc_call_t c = call_of(comm, d, j, j->stream);
    coll_result_t status = COLL_SUCCESS;
    const int how = negotiate(&c, &status);
    if (how < 0)
        return; /* the communicator failed: inline.c releases the stream */
    char *in = NULL, *out = NULL;
    if (how == 0) {
        c.lists = d->lists_h;
        work(&c);
        if (c.err != 0) {
            memset(d->lists_h, 0, DEV_LISTS * sizeof(colli_gpu_list_t));
            work_failed(&c);
            return;
        }
    } else if (j->fb) {
        fallback_lists(comm, j, &in, &out);
    }
    __atomic_store_n(&w[W_NET1], 1, __ATOMIC_RELEASE);
    err = colli_dev_wait_word(comm, d, j, W_MID, 1);
    if (err != 0) {
        if (err != COLLI_DEV_ABORTED)
            colli_dev_fail(comm, d, j,
                           how == 0 ? "reading and writing the ranks' device buffers (CUDA IPC)"
                           : j->fb  ? "copying the inputs to host staging"
                                    : "waiting for the call's stream",
                           colli_dev_strerror(d, err));
        return;
    }
    if (how == 0)
        (void)agree(&c, 1, &status); /* step 4: the barrier */
    else if (j->fb)
        (void)colli_dev_pipe_cpu(comm, d, j, in, out);
    else
        colli_dev_pipe_slots(comm, d, j);
    /* NET2: inline.c releases it */
}

int colli_dev_ipc_close_dead(struct colli_dev *d, bool busy_too)
{
    pthread_mutex_lock(&d->mu);
    const int n = busy_too || d->done == d->submitted ? d->ipc_ndead : 0;
    void **dead = d->ipc_dead; /* all of them, or none */
    if (n > 0) {
        d->ipc_dead = NULL;
        d->ipc_ndead = d->ipc_dead_cap = 0;
    }
    pthread_mutex_unlock(&d->mu);
    if (n == 0)
        return 0;
    const colli_gpu_ops_t *o = d->ops;
    int prev = -1, first = o->get_device(&prev);
    if (first == 0 && prev != d->device)
        first = o->set_device(d->device);
    for (int i = 0; i < n; i++) {
        int err = o->ipc_close(dead[i]);
        first = first != 0 ? first : err;
    }
    if (prev >= 0 && prev != d->device)
        (void)o->set_device(prev);
    free(dead);
    return first;
}

void colli_dev_ipc_free(struct colli_dev *d)
{
    (void)colli_dev_ipc_close_dead(d, true);
    pthread_mutex_lock(&d->mu);
    for (int i = 0; i < DEV_IPC_MAPS; i++)
        if (d->ipc_maps[i].base != NULL)
            (void)dead_push(d, d->ipc_maps[i].base); /* out of memory: open until the end */
    pthread_mutex_unlock(&d->mu);
    memset(d->ipc_maps, 0, sizeof(d->ipc_maps));
    (void)colli_dev_ipc_close_dead(d, true);
    free(d->ipc_dead);
    d->ipc_dead = NULL;
}
