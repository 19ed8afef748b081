/* The chunk pipeline of a collective on device buffers: enqueued whole on the caller's stream
 * when the call is made (inline, the default: see the inline section below), or run by the
 * progress thread on the slot streams (a held gate; device.c). The call is cut into steps of
 * at most COLL_CUDA_CHUNK_SIZE bytes; each step
 *   pre   copies its part of the inputs from the device to pinned host memory (hs),
 *   net1  moves it between the ranks with a host-buffer collective on that memory,
 *   mid   copies what arrived to the device and, for reductions, reduces it there with the GPU
 *         kernels (the plugin's reduce), then copies this rank's reduced piece back to hs,
 *   net2  (all_reduce, reduce) all-gathers the reduced pieces,
 *   post  copies the results into the caller's output.
 * The copies and kernels of a step run on the stream of one of DEV_SLOTS slots (its own pinned
 * buffers and device scratch), so while the network moves step k, the GPU copies in step k + 1
 * and reduces step k - 1: the host waits on a slot's stream only right before the network
 * needs that slot's bytes.
 *
 * Reductions are a reduce-scatter written as an all_to_all (every rank gets every peer's part
 * of its own piece) followed by one n-input reduction on the GPU, and for all_reduce an
 * all_gather of the reduced pieces: per rank 2 (n - 1) / n of the data cross the network, as
 * with a ring. Inputs are reduced in rank order, so every rank's piece is reduced as the CUDA
 * kernels reduce n inputs (reduce_cuda.h). reduce runs as all_reduce whose root alone copies the
 * result out (its traffic is that of all_reduce).
 *
 * Every network step carries the call's own fingerprint, marked "device buffers", so ranks that
 * call different collectives (or one on host buffers) fail with a mismatch naming both calls. */
#include <stdio.h>
#include <string.h>

#include "coll_kernels.h"
#include "device/device_int.h"

typedef struct pipe {
    struct coll_comm *comm;
    struct colli_dev *d;
    dev_job_t *j;
    const colli_gpu_ops_t *o;
    const colli_coll_args_t *a;
    int n, r;
    size_t e;        /* element size */
    size_t walk;     /* elements the steps walk: the count, or the per-rank count */
    size_t step_max; /* elements of one step along walk */
    bool reduces;    /* all_reduce, reduce: net2 and post */
    int err;         /* first failure of a copy or kernel (plugin error code) */
    const char *what;
    bool injected;
    const char *in;       /* the inputs (the call's sendbuf; cpu: host memory) */
    char *out;            /* the outputs (recvbuf) */
    bool cpu;             /* CUDA IPC's fallback: the CPU copies and reduces (colli_dev_pipe_cpu) */
    bool inl;             /* inline: every copy and kernel on the caller's stream, at the call */
    void *ustream;        /* ... that stream */
    volatile uint32_t *w; /* ... the call's words */
} pipe_t;

typedef struct chunk {
    size_t k;     /* step number */
    size_t o, cc; /* elements [o, o + cc) along walk */
    size_t p;     /* elements of one rank's piece */
    struct dev_slot *s;
} chunk_t;

/* Where step c's copies and kernels go. */
static void *stream_of(const pipe_t *p, const chunk_t *c)
{
    return p->inl ? p->ustream : c->s->stream;
}

static void fail_at(pipe_t *p, int err, const char *what)
{
    if (p->err == 0 && !p->injected) {
        p->err = err;
        p->what = what;
    }
}

/* An asynchronous copy of step c on its slot's stream; a failure is remembered, and no later
 * copy or kernel of the call is enqueued. */
static void copy(pipe_t *p, const chunk_t *c, void *dst, const void *src, size_t bytes,
                 const char *what)
{
    if (p->err != 0 || p->injected || p->j->truncated || bytes == 0)
        return;
    if (p->cpu) {
        memmove(dst, src, bytes);
        return;
    }
    if (colli_dev_inject(p->comm, p->d)) {
        p->injected = true;
        p->what = what;
        return;
    }
    int err = p->o->memcpy_async(dst, src, bytes, stream_of(p, c));
    if (err != 0)
        fail_at(p, err, what);
}

/* dst = srcs[0] OP ... OP srcs[m - 1] (count elements; input i at base + i * stride bytes), in
 * calls of at most COLLI_GPU_MAX_SRCS inputs chained through dst; COLL_AVG divides at the end. */
static void reduce(pipe_t *p, const chunk_t *c, void *dst, const char *base, size_t stride, int m,
                   size_t count)
{
    const void *srcs[COLLI_GPU_MAX_SRCS];
    for (int i = 0; i < m && p->err == 0 && !p->injected && !p->j->truncated && count > 0;) {
        int k = 0;
        if (i > 0)
            srcs[k++] = dst; /* the partial result so far */
        while (k < COLLI_GPU_MAX_SRCS && i < m)
            srcs[k++] = base + (size_t)i++ * stride;
        const uint32_t div = p->a->op == COLL_AVG && i == m ? (uint32_t)p->n : 0;
        int err = p->o->reduce(dst, srcs, k, count, p->a->dt, p->a->op, div, stream_of(p, c));
        if (err != 0)
            fail_at(p, err, "reducing on the GPU");
    }
}

/* As reduce, on the CPU (colli_dev_pipe_cpu): the n ranks' inputs at base + i * stride, reduced
 * in rank order as the GPU's chained reductions are (coll_kernels.h: bit for bit the same); n is
 * at least 2 (CUDA IPC's calls), so COLL_AVG divides at the last step. */
static void cpu_reduce(pipe_t *p, void *dst, const char *base, size_t stride, size_t count)
{
    const coll_datatype_t dt = p->a->dt;
    const bool avg = p->a->op == COLL_AVG;
    memmove(dst, base, count * p->e);
    for (int i = 1; i < p->n; i++) {
        const char *x = base + (size_t)i * stride;
        if (avg && i == p->n - 1)
            colli_reduce_div(dst, dst, x, count, dt, (uint32_t)p->n);
        else
            colli_reduce(dst, dst, x, count, dt, p->a->op);
    }
}

static bool sync_slot(pipe_t *p, const chunk_t *c)
{
    int err = colli_dev_wait(p->comm, p->d, c->s->stream);
    if (err != 0)
        fail_at(p, err, "waiting for the GPU's copies and kernels");
    return p->err == 0 && !p->injected;
}

coll_result_t colli_dev_net(struct coll_comm *comm, const colli_coll_args_t *outer, int coll,
                            const void *sb, void *rb, size_t count)
{
    colli_coll_args_t s = {.coll = coll,
                           .sendbuf = sb,
                           .recvbuf = rb,
                           .count = count,
                           .dt = outer->dt,
                           .op = outer->op,
                           .root = outer->root,
                           .outer = outer};
    return colli_run_collective(comm, &s);
}

static coll_result_t net(pipe_t *p, int coll, const void *sb, void *rb, size_t count)
{
    return colli_dev_net(p->comm, p->a, coll, sb, rb, count);
}

static chunk_t chunk_of(const pipe_t *p, size_t k)
{
    chunk_t c = {.k = k, .o = k * p->step_max, .s = &p->d->slots[k % DEV_SLOTS]};
    c.cc = p->walk - c.o < p->step_max ? p->walk - c.o : p->step_max;
    c.p = p->reduces ? (c.cc + (size_t)p->n - 1) / (size_t)p->n : c.cc;
    return c;
}

static void pre(pipe_t *p, const chunk_t *c)
{
    const colli_coll_args_t *a = p->a;
    const char *in = p->in;
    const size_t e = p->e, m = c->cc * e;
    const char *what = "copying the inputs to host staging";
    switch (a->coll) {
    case COLLI_COLL_ALL_REDUCE:
    case COLLI_COLL_REDUCE:
        copy(p, c, c->s->hs, in + c->o * e, m, what);
        break;
    case COLLI_COLL_BROADCAST:
        if (p->r == a->root)
            copy(p, c, c->s->hs, in + c->o * e, m, what);
        break;
    case COLLI_COLL_ALL_GATHER:
        copy(p, c, c->s->hs + (size_t)p->r * m, in + c->o * e, m, what);
        break;
    default: /* reduce_scatter, all_to_all: this step's part of every rank's block */
        for (int q = 0; q < p->n; q++)
            copy(p, c, c->s->hs + (size_t)q * m, in + ((size_t)q * a->count + c->o) * e, m, what);
        break;
    }
}

static coll_result_t net1(pipe_t *p, const chunk_t *c)
{
    char *hs = c->s->hs, *hr = c->s->hr;
    const size_t e = p->e;
    switch (p->a->coll) {
    case COLLI_COLL_ALL_REDUCE:
    case COLLI_COLL_REDUCE:
        /* n pieces of p elements: the last ones are padded (their results are not used) */
        memset(hs + c->cc * e, 0, ((size_t)p->n * c->p - c->cc) * e);
        return net(p, COLLI_COLL_ALL_TO_ALL, hs, hr, c->p);
    case COLLI_COLL_BROADCAST:
        return net(p, COLLI_COLL_BROADCAST, hs, hs, c->cc);
    case COLLI_COLL_ALL_GATHER:
        return net(p, COLLI_COLL_ALL_GATHER, hs + (size_t)p->r * c->cc * e, hs, c->cc);
    default:
        return net(p, COLLI_COLL_ALL_TO_ALL, hs, hr, c->cc);
    }
}

static void mid(pipe_t *p, const chunk_t *c)
{
    const colli_coll_args_t *a = p->a;
    const int n = p->n, r = p->r;
    const size_t e = p->e, m = c->cc * e;
    char *out = p->out;
    const char *back = "copying the results back";
    switch (a->coll) {
    case COLLI_COLL_ALL_REDUCE:
    case COLLI_COLL_REDUCE: {
        /* this rank's piece: the valid part of [r p, (r + 1) p) of the step */
        const size_t lo = (size_t)r * c->p < c->cc ? (size_t)r * c->p : c->cc;
        const size_t v = c->cc - lo < c->p ? c->cc - lo : c->p;
        if (p->cpu) {
            cpu_reduce(p, c->s->hs + lo * e, c->s->hr, c->p * e, v);
            break;
        }
        copy(p, c, c->s->ds, c->s->hr, (size_t)n * c->p * e,
             "copying the peers' pieces to the GPU");
        reduce(p, c, c->s->ds, c->s->ds, c->p * e, n, v);
        copy(p, c, c->s->hs + lo * e, c->s->ds, v * e, "copying the reduced piece to host staging");
        break;
    }
    case COLLI_COLL_REDUCE_SCATTER:
        if (p->cpu) {
            cpu_reduce(p, out + c->o * e, c->s->hr, m, c->cc);
            break;
        }
        copy(p, c, c->s->ds, c->s->hr, (size_t)n * m, "copying the peers' blocks to the GPU");
        reduce(p, c, out + c->o * e, c->s->ds, m, n, c->cc);
        break;
    case COLLI_COLL_BROADCAST:
        if (r != a->root || p->out != p->in)
            copy(p, c, out + c->o * e, c->s->hs, m, back);
        break;
    case COLLI_COLL_ALL_GATHER:
        for (int q = 0; q < n; q++)
            if (q != r || out + ((size_t)r * a->count + c->o) * e != p->in + c->o * e)
                copy(p, c, out + ((size_t)q * a->count + c->o) * e, c->s->hs + (size_t)q * m, m,
                     back);
        break;
    default: /* all_to_all */
        for (int q = 0; q < n; q++)
            copy(p, c, out + ((size_t)q * a->count + c->o) * e, c->s->hr + (size_t)q * m, m, back);
        break;
    }
}

static coll_result_t net2(pipe_t *p, const chunk_t *c)
{
    char *hs = c->s->hs;
    return net(p, COLLI_COLL_ALL_GATHER, hs + (size_t)p->r * c->p * p->e, hs, c->p);
}

static void post(pipe_t *p, const chunk_t *c)
{
    if (p->a->coll == COLLI_COLL_ALL_REDUCE || p->r == p->a->root)
        copy(p, c, p->out + c->o * p->e, c->s->hs, c->cc * p->e, "copying the results back");
}

static void setup(pipe_t *p)
{
    const colli_coll_args_t *a = p->a;
    const size_t chunk = p->comm->cfg.dev_chunk, n = (size_t)p->n, e = p->e;
    p->reduces = a->coll == COLLI_COLL_ALL_REDUCE || a->coll == COLLI_COLL_REDUCE;
    p->walk = a->count;
    /* one rank's part of a step, a multiple of 64 bytes where it can be */
    size_t piece = chunk / (n * e);
    if (piece > 64 / e)
        piece -= piece % (64 / e);
    if (piece == 0)
        piece = 1;
    p->step_max = a->coll == COLLI_COLL_BROADCAST ? (chunk / e ? chunk / e : 1)
                  : p->reduces                    ? piece * n
                                                  : piece;
}

/* The pipeline of job j's collective; false when a step would outgrow the slot buffers (cannot
 * be: colli_dev_slot_bytes covers every step). */
static bool pipe_init(pipe_t *p, struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    *p = (pipe_t){.comm = comm, .d = d, .j = j, .o = d->ops, .a = j->ctx};
    p->in = p->a->sendbuf;
    p->out = p->a->recvbuf;
    p->n = comm->nranks;
    p->r = comm->rank;
    p->e = coll_datatype_size(p->a->dt);
    setup(p);
    const size_t need =
        (p->reduces || p->a->coll == COLLI_COLL_BROADCAST ? p->step_max : p->step_max * p->n) *
        p->e;
    return need <= d->slot_bytes;
}

static size_t steps_of(const pipe_t *p)
{
    return (p->walk + p->step_max - 1) / p->step_max;
}

void colli_dev_pipe_run(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    coll_result_t status = COLL_SUCCESS;
    if (colli_dev_ipc_try(comm, d, j, d->slots[0].stream, &status))
        return; /* ran through CUDA IPC, or failed the communicator */
    colli_dev_pipe_slots(comm, d, j);
}

void colli_dev_pipe_slots(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    pipe_t p;
    if (!pipe_init(&p, comm, d, j)) {
        colli_dev_fail(comm, d, j, "planning the pipeline", "a step outgrows the slot buffers");
        return;
    }
    coll_result_t status = COLL_SUCCESS;
    const size_t steps = steps_of(&p);
    if (steps > 0) {
        chunk_t c0 = chunk_of(&p, 0);
        pre(&p, &c0);
    }
    for (size_t k = 0; k < steps && status == COLL_SUCCESS; k++) {
        chunk_t c = chunk_of(&p, k);
        if (k + 1 < steps) {
            chunk_t next = chunk_of(&p, k + 1);
            pre(&p, &next); /* its slot's last step (k - 2) has been enqueued to the end */
        }
        if (!sync_slot(&p, &c) || (status = net1(&p, &c)) != COLL_SUCCESS)
            break;
        mid(&p, &c);
        if (p.reduces && k > 0) {
            chunk_t prev = chunk_of(&p, k - 1);
            if (!sync_slot(&p, &prev) || (status = net2(&p, &prev)) != COLL_SUCCESS)
                break;
            post(&p, &prev);
        }
    }
    if (status == COLL_SUCCESS && p.reduces && steps > 0 && p.err == 0 && !p.injected) {
        chunk_t last = chunk_of(&p, steps - 1);
        if (sync_slot(&p, &last) && (status = net2(&p, &last)) == COLL_SUCCESS)
            post(&p, &last);
    }
    /* no copy or kernel of this call may outlive it: the slots are reused by the next (after a
     * stall the communicator fails, and none comes) */
    for (int i = 0; i < DEV_SLOTS && p.err != COLLI_DEV_STALLED; i++) {
        int err = colli_dev_wait(comm, d, d->slots[i].stream);
        if (err != 0)
            fail_at(&p, err, "waiting for the GPU's copies and kernels");
    }
    if (status != COLL_SUCCESS)
        return; /* the network step failed the communicator, as on host buffers */
    if (p.injected)
        colli_dev_fail(comm, d, j, p.what, "injected failure (COLL_TEST_DEV_FAIL_COPY)");
    else if (p.err != 0)
        colli_dev_fail(comm, d, j, p.what, colli_dev_strerror(d, p.err));
}

coll_result_t colli_dev_pipe_cpu(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j,
                                 const void *in, void *out)
{
    pipe_t p;
    if (!pipe_init(&p, comm, d, j))
        return colli_dev_fail(comm, d, j, "planning the pipeline",
                              "a step outgrows the slot buffers");
    p.cpu = true;
    p.in = in;
    p.out = out;
    /* the order of the network steps is the pipeline's (colli_dev_pipe_slots), and a step's slot
     * is the same: net2(k - 1) still reads its slot after net1(k) */
    coll_result_t status = COLL_SUCCESS;
    const size_t steps = steps_of(&p);
    for (size_t k = 0; k < steps && status == COLL_SUCCESS; k++) {
        chunk_t c = chunk_of(&p, k);
        pre(&p, &c);
        if ((status = net1(&p, &c)) != COLL_SUCCESS)
            break;
        mid(&p, &c);
        if (p.reduces && k > 0) {
            chunk_t prev = chunk_of(&p, k - 1);
            if ((status = net2(&p, &prev)) == COLL_SUCCESS)
                post(&p, &prev);
        }
    }
    if (status == COLL_SUCCESS && p.reduces && steps > 0) {
        chunk_t last = chunk_of(&p, steps - 1);
        if ((status = net2(&p, &last)) == COLL_SUCCESS)
            post(&p, &last);
    }
    return status; /* a network step failed the communicator, as on host buffers */
}

/* ---- inline (COLL_CUDA_GATE=inline) ----
 * The same steps as one program on the caller's stream, enqueued by the caller's thread when
 * the call is made (after the call's start, device.c), so that no copy or kernel of the call is
 * enqueued later behind a wait on that stream: a stream held by a gate may hold every stream of
 * its hardware queue (CUDA_DEVICE_MAX_CONNECTIONS). Between them, the stream stores and waits on
 * the call's words (steps so far), and the progress thread runs the network:
 *   stream: pre(0) PRE=1, then for each step k: pre(k+1) PRE=k+2, wait NET1>=k+1, mid(k) MID=k+1,
 *           wait NET2>=k, post(k-1); at the end wait NET2>=steps, post(last)
 *   host:   for each step k: wait PRE>=k+1, net1(k) NET1=k+1, wait MID>=k, net2(k-1) NET2=k;
 *           at the end wait MID>=steps, net2(last) NET2=steps
 * (MID, NET2 and post only for all_reduce and reduce). A slot is rewritten by pre(k+3) only
 * after the stream waited for the network to be done with step k, and the network rewrites it
 * only after the stream stored a word that comes after mid(k) and post(k). */

/* One word operation of the program (colli_dev_emit_word). */
static bool word(pipe_t *p, bool wait, int w, size_t v)
{
    return colli_dev_emit_word(p->d, p->j, p->ustream, wait, w, (uint32_t)v);
}

void colli_dev_pipe_emit(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream)
{
    pipe_t p;
    if (!pipe_init(&p, comm, d, j)) {
        j->bad = "planning the pipeline";
        j->bad_why = "a step outgrows the slot buffers";
        return;
    }
    p.inl = true;
    p.ustream = stream;
    p.w = j->words;
    const size_t steps = steps_of(&p);
    j->steps = steps;
    if (steps > 0) {
        chunk_t c0 = chunk_of(&p, 0);
        pre(&p, &c0);
        (void)word(&p, false, W_PRE, 1);
    }
    for (size_t k = 0; k < steps && !j->truncated; k++) {
        chunk_t c = chunk_of(&p, k);
        if (k + 1 < steps) {
            chunk_t next = chunk_of(&p, k + 1);
            pre(&p, &next);
            (void)word(&p, false, W_PRE, k + 2);
        }
        if (!word(&p, true, W_NET1, k + 1))
            break;
        mid(&p, &c);
        if (p.reduces && word(&p, false, W_MID, k + 1) && k > 0 && word(&p, true, W_NET2, k)) {
            chunk_t prev = chunk_of(&p, k - 1);
            post(&p, &prev);
        }
    }
    if (p.reduces && steps > 0 && word(&p, true, W_NET2, steps)) {
        chunk_t last = chunk_of(&p, steps - 1);
        post(&p, &last);
    }
    if ((p.injected || p.err != 0) && j->bad == NULL) {
        j->bad = p.what;
        j->bad_why = p.injected ? "injected failure (COLL_TEST_DEV_FAIL_COPY)"
                                : colli_dev_strerror(d, p.err);
    }
}

static void store(pipe_t *p, int w, size_t v)
{
    __atomic_store_n(&p->w[w], (uint32_t)v, __ATOMIC_RELEASE);
}

void colli_dev_pipe_host(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j)
{
    pipe_t p;
    (void)pipe_init(&p, comm, d, j); /* checked by emit */
    p.inl = true;
    p.ustream = j->stream;
    p.w = j->words;
    const size_t steps = j->steps;
    const char *in = "waiting for the copies of the inputs to host staging";
    const char *red = "waiting for the GPU's reduction";
    coll_result_t status = COLL_SUCCESS;
    int err = 0;
    const char *what = in;
    for (size_t k = 0; k < steps && err == 0 && status == COLL_SUCCESS; k++) {
        chunk_t c = chunk_of(&p, k);
        what = in;
        if ((err = colli_dev_wait_word(comm, d, j, W_PRE, (uint32_t)(k + 1))) != 0 ||
            (status = net1(&p, &c)) != COLL_SUCCESS)
            break;
        store(&p, W_NET1, k + 1);
        if (!p.reduces || k == 0)
            continue;
        chunk_t prev = chunk_of(&p, k - 1);
        what = red;
        if ((err = colli_dev_wait_word(comm, d, j, W_MID, (uint32_t)k)) == 0 &&
            (status = net2(&p, &prev)) == COLL_SUCCESS)
            store(&p, W_NET2, k);
    }
    if (err == 0 && status == COLL_SUCCESS && p.reduces && steps > 0) {
        chunk_t last = chunk_of(&p, steps - 1);
        what = red;
        if ((err = colli_dev_wait_word(comm, d, j, W_MID, (uint32_t)steps)) == 0 &&
            (status = net2(&p, &last)) == COLL_SUCCESS)
            store(&p, W_NET2, steps);
    }
    /* a network step failed the communicator as on host buffers; an abort fails it too */
    if (err != 0 && err != COLLI_DEV_ABORTED)
        colli_dev_fail(comm, d, j, what, colli_dev_strerror(d, err));
}

size_t colli_dev_slot_bytes(const struct coll_comm *comm)
{
    /* a step is at most COLL_CUDA_CHUNK_SIZE bytes, or one element per rank when that is more */
    const size_t one = 8 * (size_t)comm->nranks, b = comm->cfg.dev_chunk;
    return ((b > one ? b : one) + 4095) & ~(size_t)4095;
}
