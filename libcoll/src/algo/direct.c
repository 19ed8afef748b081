/* Single-copy collectives on one host. When every peer is reached over shared memory, a
 * collective of at least COLL_SHM_DIRECT_MIN bytes skips the rings: each rank reads its peers'
 * inputs and writes their outputs directly, each rank working on its own slice, so every byte
 * is copied once instead of twice. A peer's buffer is reached in one of two ways:
 *   - from coll_mem_alloc (a memfd): mapped here through /proc/<pid>/fd (cached), then plain
 *     loads and stores;
 *   - any other memory (malloc, the stack): cross-memory attach, process_vm_readv/writev between
 *     the buffer and a block of this process (COLL_SHM_CMA=0 turns this off). Whether the
 *     kernel lets this rank do that (ptrace permission: one user, Yama, seccomp) is probed once
 *     per communicator, the first time a call needs it, and agreed by every rank.
 * Three steps:
 *   1. descriptors: every rank sends every peer where its buffers are, and whether it can take
 *      this path; that message carries the call's fingerprint with COLLI_COLL_DIRECT, so ranks
 *      that call different collectives fail with the usual mismatch error;
 *   2. if every rank can (the same answer on every rank: each has all descriptors), each rank
 *      copies or reduces its slice; otherwise every rank runs the ring algorithms as usual;
 *   3. a barrier (a token to and from every peer): nobody returns while a peer may still read
 *      its inputs or write its outputs.
 * A dead peer cannot hurt the survivors: the mappings stay valid, a read or write of its memory
 * fails with ESRCH, and step 3 fails naming it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "algo/algos.h"
#include "base/memreg.h"
#include "engine/engine.h"
#include "transport/transport.h"
#include "coll_kernels.h"

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

/* DIRECT_BLOCK: the unit of work on mapped buffers (stays in L1/L2); CMA_BLOCK: on buffers
 * reached with process_vm_readv/writev, larger so that a system call's fixed cost stays small */
enum { DIRECT_MAPS = 8, DIRECT_BLOCK = 32 * 1024, CMA_BLOCK = 256 * 1024 };
enum { DESC_READY = 1u };
enum { BUF_NONE = 0, BUF_MEMFD = 1, BUF_CMA = 2 };
enum { CMA_UNKNOWN = 0, CMA_OK = 1, CMA_NO = -1 };
/* what a rank reports in the probe round (above PROBE_ERRNO: the errno of its failed probe) */
enum { PROBE_OK = 1, PROBE_OFF = 2, PROBE_ERRNO = 1000 };
#define DESC_MAGIC 0x6b636f6c6c444952ull /* "kcollDIR" */

typedef struct direct_buf {
    uint64_t id, ino, size, off; /* BUF_MEMFD: the coll_mem_alloc allocation */
    uint64_t addr;               /* BUF_CMA: the buffer's address in its process */
    int32_t fd;
    int32_t kind; /* BUF_* */
} direct_buf_t;

/* What a rank tells its peers in step 1. */
typedef struct direct_desc {
    uint64_t magic;
    uint64_t pidns; /* inode of /proc/self/ns/pid: the pids below mean the same process */
    uint32_t uid;
    int32_t pid;
    uint32_t flags; /* DESC_READY: this rank can take the path */
    uint32_t pad;
    uint64_t probe_addr; /* where the sender's colli_direct.probe word is: the CMA probe */
    direct_buf_t buf[2]; /* send, recv */
} direct_desc_t;

/* Rank q's send or recv buffer as this process reaches it: p is a pointer here, or (cma) the
 * address in q's process. */
typedef struct direct_ref {
    char *p;
    bool cma;
} direct_ref_t;

typedef struct direct_map {
    uint64_t id;
    char *base;
    size_t size;
    uint64_t last; /* LRU clock */
} direct_map_t;

struct colli_direct {
    direct_map_t *maps;    /* [nranks][DIRECT_MAPS] peers' allocations mapped here */
    direct_desc_t *descs;  /* [nranks] */
    direct_ref_t *sp, *rp; /* [nranks] every rank's send and recv buffer */
    uint64_t *probes;      /* [nranks] the probe round's answers */
    const char **src;      /* [nranks] one block of every input, readable here */
    char *tmp;             /* CMA_BLOCK bytes: one reduced block */
    char *stage;           /* [nranks][CMA_BLOCK] blocks read from peers (allocated on use) */
    size_t block;          /* this call's unit of work: DIRECT_BLOCK or CMA_BLOCK */
    uint64_t clock;
    uint64_t pidns; /* this process's, with its pid and effective uid: fixed for its life */
    int32_t pid;
    uint32_t uid;
    uint64_t probe; /* DESC_MAGIC: what the peers read and write back to probe CMA */
    int cma;        /* CMA_*: agreed by every rank */
    bool announced, announced_cma, told_ring; /* the INFO lines, once each */
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
    free(d->probes);
    free(d->src);
    free(d->tmp);
    free(d->stage);
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
            d->probes = calloc(n, sizeof(*d->probes));
            d->src = calloc(n, sizeof(*d->src));
            d->tmp = aligned_alloc(64, CMA_BLOCK);
            d->probe = DESC_MAGIC;
            d->pid = (int32_t)getpid();
            d->uid = (uint32_t)geteuid();
            struct stat st;
            if (stat("/proc/self/ns/pid", &st) == 0)
                d->pidns = (uint64_t)st.st_ino;
        }
        if (d == NULL || !d->maps || !d->descs || !d->sp || !d->rp || !d->probes || !d->src ||
            !d->tmp) {
            colli_direct_fini(comm);
            return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory for the single-copy path");
        }
    }
    *out = comm->direct;
    return COLL_SUCCESS;
}

/* Every rank decides this alike: the arguments, rank 0's threshold and the transports agree. */
static bool direct_eligible(const struct coll_comm *comm, const colli_coll_args_t *a)
{
    if (comm->nranks < 2 || comm->cfg.shm_direct_min == 0 || a->coll < COLLI_COLL_ALL_REDUCE ||
        a->coll > COLLI_COLL_ALL_TO_ALL ||
        a->count * coll_datatype_size(a->dt) < comm->cfg.shm_direct_min)
        return false;
    return comm->all_local;
}

static void describe_self(const struct coll_comm *comm, const struct colli_direct *d,
                          const colli_coll_args_t *a, direct_desc_t *me)
{
    size_t len[2];
    colli_buffer_sizes(a, comm->nranks, comm->rank, len);
    const void *ptr[2] = {a->sendbuf, a->recvbuf};
    memset(me, 0, sizeof(*me));
    me->magic = DESC_MAGIC;
    me->pidns = d->pidns;
    me->uid = d->uid;
    me->pid = d->pid;
    me->probe_addr = (uint64_t)(uintptr_t)&d->probe;
    bool ready = d->pidns != 0 && prctl(PR_GET_DUMPABLE) == 1 &&
                 !(a->coll == COLLI_COLL_ALL_TO_ALL && a->sendbuf == a->recvbuf);
    const bool cma = comm->cfg.shm_cma && d->cma != CMA_NO;
    for (int i = 0; i < 2; i++) {
        if (len[i] == 0)
            continue;
        colli_mem_ref_t ref;
        if (colli_mem_find(ptr[i], len[i], &ref))
            me->buf[i] = (direct_buf_t){.id = ref.id,
                                        .ino = ref.ino,
                                        .size = ref.size,
                                        .off = ref.off,
                                        .fd = ref.fd,
                                        .kind = BUF_MEMFD};
        else if (cma)
            me->buf[i] = (direct_buf_t){
                .addr = (uint64_t)(uintptr_t)ptr[i], .size = len[i], .kind = BUF_CMA};
        else
            ready = false;
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
    colli_args_fp(&op, a, COLLI_COLL_DIRECT, seq);
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

/* A peer's descriptor that cannot describe this call's buffer (a bug or hostile bytes). */
static coll_result_t corrupt_desc(struct coll_comm *comm, int q, const direct_buf_t *b, size_t need)
{
    char who[200];
    colli_member_desc(comm, q, who, sizeof(who));
    return COLLI_ERR(SHM, COLL_ERR_REMOTE,
                     "%s sent a corrupt single-copy descriptor: buffer kind %d, %llu bytes "
                     "(offset %llu), where this call needs %zu bytes of it; the peer runs "
                     "another kcoll build or its memory is corrupt",
                     who, (int)b->kind, (unsigned long long)b->size, (unsigned long long)b->off,
                     need);
}

/* Map (or find mapped) the allocation a peer described; *out points at its buffer. */
static coll_result_t map_peer(struct coll_comm *comm, struct colli_direct *d, int q,
                              const direct_buf_t *b, size_t need, char **out)
{
    if (b->size == 0 || b->off > b->size || need > b->size - b->off)
        return corrupt_desc(comm, q, b, need);
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
        char who[200];
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

/* tmp[0, m) = src[0] OP src[1] OP ... in rank order (AVG divides at the end); m elements. */
static void reduce_block(char *tmp, const char *const *src, size_t m, int n, coll_datatype_t dt,
                         coll_op_t op)
{
    if (n == 2 && op == COLL_AVG)
        colli_reduce_div(tmp, src[0], src[1], m, dt, 2);
    else
        colli_reduce(tmp, src[0], src[1], m, dt, op);
    for (int q = 2; q < n; q++) {
        if (q == n - 1 && op == COLL_AVG)
            colli_reduce_div(tmp, tmp, src[q], m, dt, (uint32_t)n);
        else
            colli_reduce(tmp, tmp, src[q], m, dt, op);
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

/* Move m bytes between local memory here and address remote in rank q's process. */
static coll_result_t cma_move(struct coll_comm *comm, const struct colli_direct *d, int q,
                              bool write, char *local, char *remote, size_t m)
{
    const pid_t pid = (pid_t)d->descs[q].pid;
    while (m > 0) {
        struct iovec l = {.iov_base = local, .iov_len = m}, r = {.iov_base = remote, .iov_len = m};
        ssize_t k = write ? process_vm_writev(pid, &l, 1, &r, 1, 0)
                          : process_vm_readv(pid, &l, 1, &r, 1, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {
            const int e = k < 0 ? errno : EFAULT;
            /* a peer that failed first may have exited since: its abort notice says why */
            coll_result_t notice = colli_tp_poll_notices(comm);
            if (notice != COLL_SUCCESS)
                return notice;
            char who[200];
            colli_member_desc(comm, q, who, sizeof(who));
            if (e == ESRCH) {
                colli_comm_blame(comm, q);
                return COLLI_ERR(SHM, COLL_ERR_REMOTE,
                                 "%s exited while rank %d was reading or writing its buffers "
                                 "on the single-copy path (process_vm_%s: %s); see its log for "
                                 "why",
                                 who, comm->rank, write ? "writev" : "readv", strerror(e));
            }
            return COLLI_ERR(SHM, COLL_ERR_SYSTEM,
                             "rank %d cannot %s %zu bytes at 0x%llx in the buffer of %s "
                             "(process_vm_%s: %s); set COLL_SHM_CMA=0 to keep buffers not "
                             "from coll_mem_alloc on the two-copy path",
                             comm->rank, write ? "write" : "read", m,
                             (unsigned long long)(uintptr_t)remote, who, write ? "writev" : "readv",
                             strerror(e));
        }
        local += k;
        remote += k;
        m -= (size_t)k;
    }
    return COLL_SUCCESS;
}

/* *out = m readable bytes at byte off of rank q's buffer b: the buffer itself, or a copy in
 * q's stage block. */
static coll_result_t get_in(struct coll_comm *comm, struct colli_direct *d, int q,
                            const direct_ref_t *b, size_t off, size_t m, const char **out)
{
    if (!b->cma) {
        *out = b->p + off;
        return COLL_SUCCESS;
    }
    char *dst = d->stage + (size_t)q * CMA_BLOCK;
    *out = dst;
    return cma_move(comm, d, q, false, dst, b->p + off, m);
}

/* Rank q's buffer b at byte off = src[0, m). hot: its lines were just read here. */
static coll_result_t put_out(struct coll_comm *comm, struct colli_direct *d, int q,
                             const direct_ref_t *b, size_t off, const char *src, size_t m, bool hot)
{
    if (b->cma)
        return cma_move(comm, d, q, true, (char *)src, b->p + off, m);
    if (hot)
        memcpy(b->p + off, src, m);
    else
        copy_out(b->p + off, src, m);
    return COLL_SUCCESS;
}

/* all_reduce and reduce: the slice [lo, hi) of count, reduced from every input into the
 * outputs (every rank's, or the root's). */
static coll_result_t work_reduce(struct coll_comm *comm, struct colli_direct *d,
                                 const colli_coll_args_t *a)
{
    const int n = comm->nranks, r = comm->rank;
    const size_t e = coll_datatype_size(a->dt), be = d->block / e;
    const size_t lo = colli_slice_lo(a->count, n, r), hi = colli_slice_lo(a->count, n, r + 1);
    const char **src = d->src;
    coll_result_t status = COLL_SUCCESS;
    for (size_t b = lo; b < hi && status == COLL_SUCCESS; b += be) {
        const size_t m = hi - b < be ? hi - b : be;
        for (int q = 0; q < n && status == COLL_SUCCESS; q++)
            status = get_in(comm, d, q, &d->sp[q], b * e, m * e, &src[q]);
        if (status != COLL_SUCCESS)
            break;
        reduce_block(d->tmp, src, m, n, a->dt, a->op);
        for (int q = 0; q < n && status == COLL_SUCCESS; q++)
            if (a->coll == COLLI_COLL_ALL_REDUCE || q == a->root)
                status =
                    put_out(comm, d, q, &d->rp[q], b * e, d->tmp, m * e, d->rp[q].p == d->sp[q].p);
    }
    return status;
}

/* Step 2: this rank's share of the work, on every rank's buffers (d->sp, d->rp). */
static coll_result_t direct_work(struct coll_comm *comm, struct colli_direct *d,
                                 const colli_coll_args_t *a)
{
    const int n = comm->nranks, r = comm->rank;
    const size_t e = coll_datatype_size(a->dt), be = d->block / e, blk = a->count * e;
    const direct_ref_t *sp = d->sp, *rp = d->rp;
    coll_result_t status = COLL_SUCCESS;
    switch (a->coll) {
    case COLLI_COLL_ALL_REDUCE:
    case COLLI_COLL_REDUCE:
        status = work_reduce(comm, d, a);
        break;
    case COLLI_COLL_REDUCE_SCATTER: {
        const char **src = d->src;
        const size_t at = (size_t)r * blk; /* this rank's block of every input */
        for (size_t b = 0; b < a->count && status == COLL_SUCCESS; b += be) {
            const size_t m = a->count - b < be ? a->count - b : be;
            for (int q = 0; q < n && status == COLL_SUCCESS; q++)
                status = get_in(comm, d, q, &sp[q], at + b * e, m * e, &src[q]);
            if (status != COLL_SUCCESS)
                break;
            reduce_block(d->tmp, src, m, n, a->dt, a->op);
            status = put_out(comm, d, r, &rp[r], b * e, d->tmp, m * e, rp[r].p == sp[r].p + at);
        }
        break;
    }
    case COLLI_COLL_ALL_GATHER:
        for (size_t b = 0; b < blk && status == COLL_SUCCESS; b += d->block) {
            const size_t m = blk - b < d->block ? blk - b : d->block;
            for (int q = 0; q < n && status == COLL_SUCCESS; q++)
                if (q != r || rp[r].p + (size_t)r * blk != sp[r].p) /* not in place */
                    status =
                        put_out(comm, d, q, &rp[q], (size_t)r * blk + b, sp[r].p + b, m, false);
        }
        break;
    case COLLI_COLL_BROADCAST: {
        const size_t lo = colli_slice_lo(blk, n, r), hi = colli_slice_lo(blk, n, r + 1);
        for (size_t b = lo; b < hi && status == COLL_SUCCESS; b += d->block) {
            const size_t m = hi - b < d->block ? hi - b : d->block;
            const char *src;
            status = get_in(comm, d, a->root, &sp[a->root], b, m, &src);
            for (int q = 0; q < n && status == COLL_SUCCESS; q++)
                if (q != a->root || rp[q].p != sp[q].p) /* the root's own, in place */
                    status = put_out(comm, d, q, &rp[q], b, src, m, false);
        }
        break;
    }
    case COLLI_COLL_ALL_TO_ALL:
        for (int i = 0; i < n && status == COLL_SUCCESS; i++) {
            int q = (r + i) % n; /* spread the writers over the peers */
            status =
                put_out(comm, d, q, &rp[q], (size_t)r * blk, sp[r].p + (size_t)q * blk, blk, false);
        }
        break;
    default:
        break;
    }
#if defined(__x86_64__)
    _mm_sfence(); /* the streamed stores are visible before the barrier's messages */
#endif
    return status;
}

/* Can this rank read and write rank q's memory? Read its probe word, write it back. */
static int cma_probe(const struct colli_direct *d, int q)
{
    uint64_t v = 0;
    struct iovec l = {.iov_base = &v, .iov_len = sizeof(v)},
                 r = {.iov_base = (void *)(uintptr_t)d->descs[q].probe_addr, .iov_len = sizeof(v)};
    const pid_t pid = (pid_t)d->descs[q].pid;
    ssize_t k = process_vm_readv(pid, &l, 1, &r, 1, 0);
    if (k != (ssize_t)sizeof(v))
        return k < 0 ? errno : EFAULT;
    if (v != DESC_MAGIC)
        return EPROTO;
    k = process_vm_writev(pid, &l, 1, &r, 1, 0);
    if (k != (ssize_t)sizeof(v))
        return k < 0 ? errno : EFAULT;
    return 0;
}

/* The first call that needs cross-memory attach: every rank probes every peer, and all agree. */
static coll_result_t cma_agree(struct coll_comm *comm, struct colli_direct *d,
                               const colli_coll_args_t *a, uint64_t seq)
{
    const int n = comm->nranks, r = comm->rank;
    uint64_t mine = comm->cfg.shm_cma ? PROBE_OK : PROBE_OFF;
    for (int q = 0; q < n && mine == PROBE_OK; q++) {
        int e = q == r ? 0 : cma_probe(d, q);
        if (e != 0) {
            mine = PROBE_ERRNO + (uint64_t)e;
            coll_info(SHM, "process_vm_readv/writev into rank %d (pid %d) failed: %s", q,
                      d->descs[q].pid, strerror(e));
        }
    }
    d->probes[r] = mine;
    coll_result_t status = exchange(comm, a, seq, &mine, d->probes, sizeof(mine));
    if (status != COLL_SUCCESS)
        return status;
    d->cma = CMA_OK;
    for (int q = 0; q < n && d->cma == CMA_OK; q++) {
        if (d->probes[q] == PROBE_OK)
            continue;
        d->cma = CMA_NO;
        if (d->probes[q] == PROBE_OFF)
            coll_info(SHM,
                      "rank %d has COLL_SHM_CMA=0: buffers not from coll_mem_alloc take "
                      "the two-copy ring path",
                      q);
        else
            coll_info(SHM,
                      "rank %d cannot read its peers' memory (process_vm_readv: %s; ptrace "
                      "permission: one user, Yama ptrace_scope, seccomp): buffers not from "
                      "coll_mem_alloc take the two-copy ring path; coll_mem_alloc buffers still "
                      "copy once",
                      q, strerror((int)(d->probes[q] - PROBE_ERRNO)));
    }
    return COLL_SUCCESS;
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
    bool cma = false;
    for (int q = 0; q < n; q++) {
        const direct_desc_t *dq = &d->descs[q];
        if (dq->magic != DESC_MAGIC || !(dq->flags & DESC_READY) || dq->pidns != d->pidns ||
            dq->uid != d->descs[r].uid) {
            if (!d->told_ring)
                coll_info(SHM,
                          "%s #%llu: rank %d's buffers cannot be shared (not from "
                          "coll_mem_alloc with COLL_SHM_CMA=0 or cross-memory attach refused, "
                          "in place all_to_all, a non-dumpable process, or another PID "
                          "namespace or user): two-copy ring path (said once)",
                          colli_coll_name(a->coll), (unsigned long long)seq, q);
            d->told_ring = true;
            return COLL_SUCCESS;
        }
        cma = cma || dq->buf[0].kind == BUF_CMA || dq->buf[1].kind == BUF_CMA;
    }
    if (cma && d->cma == CMA_UNKNOWN && (status = cma_agree(comm, d, a, seq)) != COLL_SUCCESS)
        return status;
    if (cma && d->cma != CMA_OK)
        return COLL_SUCCESS; /* agreed by every rank just now: the rings */
    if (cma && d->stage == NULL && (d->stage = aligned_alloc(64, (size_t)n * CMA_BLOCK)) == NULL)
        return COLLI_ERR(COLL, COLL_ERR_SYSTEM, "out of memory for the single-copy path");
    d->block = cma ? CMA_BLOCK : DIRECT_BLOCK;
    for (int q = 0; q < n; q++) {
        size_t len[2];
        colli_buffer_sizes(a, comm->nranks, q, len);
        direct_ref_t *slot[2] = {&d->sp[q], &d->rp[q]};
        for (int i = 0; i < 2; i++) {
            const direct_buf_t *b = &d->descs[q].buf[i];
            *slot[i] = (direct_ref_t){0};
            if (len[i] == 0)
                continue;
            if (q == r)
                slot[i]->p = (char *)(i == 0 ? a->sendbuf : a->recvbuf);
            else if (b->kind == BUF_CMA && b->size >= len[i])
                *slot[i] = (direct_ref_t){.p = (char *)(uintptr_t)b->addr, .cma = true};
            else if (b->kind != BUF_MEMFD)
                return corrupt_desc(comm, q, b, len[i]);
            else if ((status = map_peer(comm, d, q, b, len[i], &slot[i]->p)) != COLL_SUCCESS)
                return status;
        }
    }
    if (cma && !d->announced_cma)
        coll_info(SHM,
                  "single-copy path through cross-memory attach: collectives from %zu bytes "
                  "read and write the peers' buffers directly, those not from coll_mem_alloc "
                  "with process_vm_readv/writev (said once)",
                  comm->cfg.shm_direct_min);
    else if (!cma && !d->announced)
        coll_info(SHM,
                  "single-copy path: every rank's buffers come from coll_mem_alloc; "
                  "collectives from %zu bytes read and write the peers' buffers directly "
                  "(said once)",
                  comm->cfg.shm_direct_min);
    d->announced_cma = d->announced_cma || cma;
    d->announced = d->announced || !cma;
    status = direct_work(comm, d, a);
    if (status != COLL_SUCCESS)
        return status;
    /* the descriptors are spent: their array receives the peers' tokens */
    uint64_t token = seq;
    _Static_assert(sizeof(direct_desc_t) >= sizeof(token), "a token fits a descriptor's slot");
    status = exchange(comm, a, seq, &token, d->descs, sizeof(token));
    *done = status == COLL_SUCCESS;
    return status;
}
