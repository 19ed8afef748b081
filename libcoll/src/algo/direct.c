/* Single-copy collectives on one host. When every rank's buffers come from coll_mem_alloc (a
 * memfd each peer can map through /proc/<pid>/fd) and every peer is reached over shared memory,
 * a collective of at least COLL_SHM_DIRECT_MIN bytes skips the rings: each rank maps its peers'
 * buffers (cached), reads their inputs and writes their outputs directly, each rank working on its
 * own slice, so every byte is copied once instead of twice. Three steps:
 *   1. descriptors: every rank sends every peer where its buffers are, and whether it can take
 *      this path; that message carries the call's fingerprint with COLLI_COLL_DIRECT, so ranks
 *      that call different collectives fail with the usual mismatch error;
 *   2. if every rank can (the same answer on every rank: each has all descriptors), each rank
 *      copies or reduces its slice; otherwise every rank runs the ring algorithms as usual;
 *   3. a barrier (a token to and from every peer): nobody returns while a peer may still read
 *      its inputs or write its outputs.
 * A dead peer cannot hurt the survivors: the mappings stay valid, and step 3 fails naming it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "algo/algos.h"
#include "coll_kernels.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

enum { DIRECT_MAPS = 8, DIRECT_BLOCK = 32 * 1024 };
enum { DESC_READY = 1u };
#define DESC_MAGIC 0x6b636f6c6c444952ull /* "kcollDIR" */

typedef struct direct_buf {
    uint64_t id, ino, size, off;
    int32_t fd;
    int32_t used;
} direct_buf_t;

/* What a rank tells its peers in step 1. */
typedef struct direct_desc {
    uint64_t magic;
    uint64_t pidns; /* inode of /proc/self/ns/pid: the pids below mean the same process */
    uint32_t uid;
    int32_t pid;
    uint32_t flags; /* DESC_READY: this rank can take the path */
    uint32_t pad;
    direct_buf_t buf[2]; /* send, recv */
} direct_desc_t;

typedef struct direct_map {
    uint64_t id;
    char *base;
    size_t size;
    uint64_t last; /* LRU clock */
} direct_map_t;

struct colli_direct {
    direct_map_t *maps;   /* [nranks][DIRECT_MAPS] peers' allocations mapped here */
    direct_desc_t *descs; /* [nranks] */
    char **sp, **rp;      /* [nranks] every rank's send and recv buffer, in this process */
    char *tmp;            /* DIRECT_BLOCK bytes: one reduced block */
    uint64_t clock;
    uint64_t pidns;
    bool announced, told_ring; /* the INFO lines, once each */
};

void colli_direct_fini(struct coll_comm *comm)
{
    struct colli_direct *d = comm->direct;
    if (d == NULL)
        return;
    for (int i = 0; d->maps != NULL && i < comm->nranks * DIRECT_MAPS; i++)
        if (d->maps[i].base != NULL)
            munmap(d->maps[i].base, d->maps[i].size);
    free(d->maps);
    free(d->descs);
    free(d->sp);
    free(d->rp);
    free(d->tmp);
    free(d);
    comm->direct = NULL;
}

static coll_result_t direct_state(struct coll_comm *comm, struct colli_direct **out)
{
    if (comm->direct == NULL) {
        const size_t n = (size_t)comm->nranks;
        struct colli_direct *d = calloc(1, sizeof(*d));
        if (d != NULL) {
            comm->direct = d;
            d->maps = calloc(n * DIRECT_MAPS, sizeof(*d->maps));
            d->descs = calloc(n, sizeof(*d->descs));
            d->sp = calloc(n, sizeof(*d->sp));
            d->rp = calloc(n, sizeof(*d->rp));
            d->tmp = aligned_alloc(64, DIRECT_BLOCK);
            struct stat st;
            if (stat("/proc/self/ns/pid", &st) == 0)
                d->pidns = (uint64_t)st.st_ino;
        }
        if (d == NULL || !d->maps || !d->descs || !d->sp || !d->rp || !d->tmp) {
            colli_direct_fini(comm);
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory for the single-copy path");
        }
    }
    *out = comm->direct;
    return COLL_SUCCESS;
}

/* Bytes of the send and recv buffers of rank q in this call (0: not used by q). */
static void buffer_sizes(const struct coll_comm *comm, const colli_coll_args_t *a, int q,
                         size_t len[2])
{
    const size_t n = (size_t)comm->nranks, b = a->count * coll_datatype_size(a->dt);
    len[0] = a->coll == COLLI_COLL_BROADCAST && q != a->root ? 0 : b;
    len[1] = a->coll == COLLI_COLL_REDUCE && q != a->root ? 0 : b;
    if (a->coll == COLLI_COLL_REDUCE_SCATTER || a->coll == COLLI_COLL_ALL_TO_ALL)
        len[0] *= n;
    if (a->coll == COLLI_COLL_ALL_GATHER || a->coll == COLLI_COLL_ALL_TO_ALL)
        len[1] *= n;
}

/* Every rank decides this alike: the arguments, rank 0's threshold and the transports agree. */
static bool direct_eligible(const struct coll_comm *comm, const colli_coll_args_t *a)
{
    if (comm->nranks < 2 || comm->cfg.shm_direct_min == 0 || a->coll < COLLI_COLL_ALL_REDUCE ||
        a->coll > COLLI_COLL_ALL_TO_ALL ||
        a->count * coll_datatype_size(a->dt) < comm->cfg.shm_direct_min)
        return false;
    for (int p = 0; p < comm->nranks; p++)
        if (p != comm->rank && comm->peer_tp[p] != COLLI_TPI_SHM)
            return false;
    return true;
}

static void describe_self(const struct coll_comm *comm, const struct colli_direct *d,
                          const colli_coll_args_t *a, direct_desc_t *me)
{
    size_t len[2];
    buffer_sizes(comm, a, comm->rank, len);
    const void *ptr[2] = {a->sendbuf, a->recvbuf};
    memset(me, 0, sizeof(*me));
    me->magic = DESC_MAGIC;
    me->pidns = d->pidns;
    me->uid = (uint32_t)geteuid();
    me->pid = (int32_t)getpid();
    bool ready = d->pidns != 0 && prctl(PR_GET_DUMPABLE) == 1 &&
                 !(a->coll == COLLI_COLL_ALL_TO_ALL && a->sendbuf == a->recvbuf);
    for (int i = 0; i < 2; i++) {
        if (len[i] == 0)
            continue;
        colli_mem_ref_t ref;
        if (!colli_mem_find(ptr[i], len[i], &ref)) {
            ready = false;
            continue;
        }
        me->buf[i] = (direct_buf_t){.id = ref.id,
                                    .ino = ref.ino,
                                    .size = ref.size,
                                    .off = ref.off,
                                    .fd = ref.fd,
                                    .used = 1};
    }
    me->flags = ready ? DESC_READY : 0;
}

/* One message to and from every peer, fingerprinted as this call's single-copy path. */
static coll_result_t exchange(struct coll_comm *comm, const colli_coll_args_t *a, uint64_t seq,
                              const void *mine, void *theirs, size_t bytes)
{
    colli_op_t op;
    coll_result_t status = colli_op_init(&op, comm, colli_coll_name(a->coll), a->dt, a->op);
    if (status != COLL_SUCCESS)
        return status;
    colli_op_add_fp(&op, a->coll | COLLI_COLL_DIRECT, a->dt, a->op, a->root, a->count, seq);
    for (int p = 0; p < comm->nranks; p++) {
        if (p == comm->rank)
            continue;
        colli_op_send(&op, p, mine, bytes, COLLI_NO_DEP);
        colli_op_recv(&op, p, (char *)theirs + (size_t)p * bytes, bytes, COLLI_NO_DEP);
    }
    status = colli_op_run(&op);
    colli_op_free(&op);
    return status;
}

/* Map (or find mapped) the allocation a peer described; *out points at its buffer. */
static coll_result_t map_peer(struct coll_comm *comm, struct colli_direct *d, int q,
                              const direct_buf_t *b, size_t need, char **out)
{
    char who[200];
    if (b->size == 0 || b->off > b->size || need > b->size - b->off) {
        colli_member_desc(comm, q, who, sizeof(who));
        return COLLI_ERR(SHM, COLL_ERR_REMOTE,
                         "%s described a buffer of %llu bytes at offset %llu of its allocation "
                         "of %llu bytes, where this call needs %zu bytes: corrupt descriptor",
                         who, (unsigned long long)need, (unsigned long long)b->off,
                         (unsigned long long)b->size, need);
    }
    direct_map_t *m = &d->maps[(size_t)q * DIRECT_MAPS], *victim = &m[0];
    for (int i = 0; i < DIRECT_MAPS; i++) {
        if (m[i].base != NULL && m[i].id == b->id && m[i].size == b->size) {
            m[i].last = ++d->clock;
            *out = m[i].base + b->off;
            return COLL_SUCCESS;
        }
        if (victim->base != NULL && (m[i].base == NULL || m[i].last < victim->last))
            victim = &m[i];
    }
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", d->descs[q].pid, b->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    const char *why = NULL;
    int e = 0;
    void *p = MAP_FAILED;
    if (fd < 0) {
        why = "open";
        e = errno;
    } else if (fstat(fd, &st) != 0) {
        why = "fstat";
        e = errno;
    } else if ((uint64_t)st.st_ino != b->ino || (uint64_t)st.st_size < b->size) {
        why = "check of";
        e = ESTALE;
    } else if ((p = mmap(NULL, b->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) == MAP_FAILED) {
        why = "mmap of";
        e = errno;
    }
    if (fd >= 0)
        close(fd);
    if (why != NULL) {
        colli_member_desc(comm, q, who, sizeof(who));
        return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                         "rank %d cannot map the coll_mem_alloc buffer of %s (%s %s: %s); the "
                         "ranks of a host must see each other's /proc (one PID namespace, one "
                         "user); set COLL_SHM_DIRECT_MIN=0 (on rank 0) to use the two-copy path",
                         comm->rank, who, why, path, strerror(e));
    }
    if (victim->base != NULL)
        munmap(victim->base, victim->size);
    *victim = (direct_map_t){.id = b->id, .base = p, .size = b->size, .last = ++d->clock};
    *out = (char *)p + b->off;
    return COLL_SUCCESS;
}

/* tmp[0, m) = src[0][off..] OP src[1][off..] OP ... in rank order (AVG divides at the end). */
static void reduce_block(char *tmp, char *const *src, size_t off, size_t m, int n,
                         coll_datatype_t dt, coll_op_t op)
{
    if (n == 2 && op == COLL_AVG)
        colli_reduce_div(tmp, src[0] + off, src[1] + off, m, dt, 2);
    else
        colli_reduce(tmp, src[0] + off, src[1] + off, m, dt, op);
    for (int q = 2; q < n; q++) {
        if (q == n - 1 && op == COLL_AVG)
            colli_reduce_div(tmp, tmp, src[q] + off, m, dt, (uint32_t)n);
        else
            colli_reduce(tmp, tmp, src[q] + off, m, dt, op);
    }
}

/* memcpy into a peer's output with non-temporal stores: the destination is not read, so its
 * lines need not be fetched first (a third of the memory traffic of a plain copy). */
static void copy_out(char *dst, const char *src, size_t n)
{
#if defined(__x86_64__)
    size_t head = (size_t)(-(uintptr_t)dst & 15u);
    if (n >= 4096 && head < n) {
        memcpy(dst, src, head);
        dst += head;
        src += head;
        n -= head;
        size_t i = 0;
        for (; i + 64 <= n; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(src + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(src + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(src + i + 32));
            __m128i d = _mm_loadu_si128((const __m128i *)(src + i + 48));
            _mm_stream_si128((__m128i *)(dst + i), a);
            _mm_stream_si128((__m128i *)(dst + i + 16), b);
            _mm_stream_si128((__m128i *)(dst + i + 32), c);
            _mm_stream_si128((__m128i *)(dst + i + 48), d);
        }
        memcpy(dst + i, src + i, n - i);
        return;
    }
#endif
    memcpy(dst, src, n);
}

/* First element of rank r's slice when count elements are split over n ranks. */
static size_t slice_lo(size_t count, int n, int r)
{
    size_t q = count / (size_t)n, rem = count % (size_t)n;
    return q * (size_t)r + ((size_t)r < rem ? (size_t)r : rem);
}

/* Step 2: this rank's share of the work, on every rank's buffers (d->sp, d->rp). */
static void direct_work(struct coll_comm *comm, struct colli_direct *d, const colli_coll_args_t *a)
{
    const int n = comm->nranks, r = comm->rank;
    const size_t e = coll_datatype_size(a->dt), be = DIRECT_BLOCK / e, blk = a->count * e;
    char **sp = d->sp, **rp = d->rp;
    switch (a->coll) {
    case COLLI_COLL_ALL_REDUCE:
    case COLLI_COLL_REDUCE: {
        const size_t lo = slice_lo(a->count, n, r), hi = slice_lo(a->count, n, r + 1);
        for (size_t b = lo; b < hi; b += be) {
            size_t m = hi - b < be ? hi - b : be;
            reduce_block(d->tmp, sp, b * e, m, n, a->dt, a->op);
            for (int q = 0; q < n; q++) {
                if (a->coll != COLLI_COLL_ALL_REDUCE && q != a->root)
                    continue;
                if (rp[q] == sp[q]) /* in place: these lines were just read, write in cache */
                    memcpy(rp[q] + b * e, d->tmp, m * e);
                else
                    copy_out(rp[q] + b * e, d->tmp, m * e);
            }
        }
        break;
    }
    case COLLI_COLL_REDUCE_SCATTER: {
        for (int q = 0; q < n; q++)
            sp[q] += (size_t)r * blk; /* this rank's block of every input */
        for (size_t b = 0; b < a->count; b += be) {
            size_t m = a->count - b < be ? a->count - b : be;
            reduce_block(d->tmp, sp, b * e, m, n, a->dt, a->op);
            if (rp[r] == sp[r])
                memcpy(rp[r] + b * e, d->tmp, m * e);
            else
                copy_out(rp[r] + b * e, d->tmp, m * e);
        }
        break;
    }
    case COLLI_COLL_ALL_GATHER:
        for (size_t b = 0; b < blk; b += DIRECT_BLOCK) {
            size_t m = blk - b < DIRECT_BLOCK ? blk - b : DIRECT_BLOCK;
            for (int q = 0; q < n; q++) {
                char *dst = rp[q] + (size_t)r * blk + b;
                if (dst != sp[r] + b)
                    copy_out(dst, sp[r] + b, m);
            }
        }
        break;
    case COLLI_COLL_BROADCAST: {
        const size_t lo = slice_lo(blk, n, r), hi = slice_lo(blk, n, r + 1);
        for (size_t b = lo; b < hi; b += DIRECT_BLOCK) {
            size_t m = hi - b < DIRECT_BLOCK ? hi - b : DIRECT_BLOCK;
            for (int q = 0; q < n; q++)
                if (rp[q] + b != sp[a->root] + b)
                    copy_out(rp[q] + b, sp[a->root] + b, m);
        }
        break;
    }
    case COLLI_COLL_ALL_TO_ALL:
        for (int i = 0; i < n; i++) {
            int q = (r + i) % n; /* spread the writers over the peers */
            copy_out(rp[q] + (size_t)r * blk, sp[r] + (size_t)q * blk, blk);
        }
        break;
    default:
        break;
    }
#if defined(__x86_64__)
    _mm_sfence(); /* the streamed stores are visible before the barrier's messages */
#endif
}

coll_result_t colli_direct_try(struct coll_comm *comm, const colli_coll_args_t *a, uint64_t seq,
                               bool *done)
{
    *done = false;
    if (!direct_eligible(comm, a))
        return COLL_SUCCESS;
    struct colli_direct *d = NULL;
    coll_result_t status = direct_state(comm, &d);
    if (status != COLL_SUCCESS)
        return status;
    const int n = comm->nranks, r = comm->rank;
    describe_self(comm, d, a, &d->descs[r]);
    status = exchange(comm, a, seq, &d->descs[r], d->descs, sizeof(direct_desc_t));
    if (status != COLL_SUCCESS)
        return status;
    for (int q = 0; q < n; q++) {
        const direct_desc_t *dq = &d->descs[q];
        if (dq->magic != DESC_MAGIC || !(dq->flags & DESC_READY) || dq->pidns != d->pidns ||
            dq->uid != d->descs[r].uid) {
            if (!d->told_ring)
                coll_info(SHM,
                          "%s #%llu: rank %d's buffers cannot be shared (not from "
                          "coll_mem_alloc, in place all_to_all, or another PID namespace "
                          "or user): two-copy ring path (said once)",
                          colli_coll_name(a->coll), (unsigned long long)seq, q);
            d->told_ring = true;
            return COLL_SUCCESS;
        }
    }
    for (int q = 0; q < n; q++) {
        size_t len[2];
        buffer_sizes(comm, a, q, len);
        char **slot[2] = {&d->sp[q], &d->rp[q]};
        for (int i = 0; i < 2; i++) {
            *slot[i] = NULL;
            if (len[i] == 0)
                continue;
            if (q == r)
                *slot[i] = (char *)(i == 0 ? a->sendbuf : a->recvbuf);
            else if ((status = map_peer(comm, d, q, &d->descs[q].buf[i], len[i], slot[i])) !=
                     COLL_SUCCESS)
                return status;
        }
    }
    if (!d->announced) {
        coll_info(SHM,
                  "single-copy path: every rank's buffers come from coll_mem_alloc; "
                  "collectives from %zu bytes read and write the peers' buffers directly",
                  comm->cfg.shm_direct_min);
        d->announced = true;
    }
    direct_work(comm, d, a);
    /* the descriptors are spent: their array receives the peers' tokens */
    uint64_t token = seq;
    _Static_assert(sizeof(direct_desc_t) >= sizeof(token), "a token fits a descriptor's slot");
    status = exchange(comm, a, seq, &token, d->descs, sizeof(token));
    *done = status == COLL_SUCCESS;
    return status;
}
