/* CUDA graphs: a call made on a stream that captures a graph (torch.cuda.graph, torch.compile's
 * "reduce-overhead" mode, vLLM's CUDA graphs, cupy.cuda.Graph) is put into the graph, and each
 * replay of the graph runs it, with no API call of the user's to wake kcoll.
 *
 * At the capture the call's inline program (inline.c) goes into the graph as it would go onto
 * a stream, preceded by a host function (a host node) and on DEV_WORDS words of its own; the
 * call's job stays as the template of its replays, kept with the graph (graph_keep: a CUDA user
 * object, released when the graph and its executable graphs are gone). At each replay the host
 * function posts a copy of the template to the progress thread, which runs the network between
 * the program's words as for any inline call:
 *
 *   graph:  [host node: post a copy] ARR=1, wait GO>=1, ... (the program), END=1
 *
 * The words take the same values at every replay, so the host node zeroes them before it posts,
 * once the last replay's job is over (the progress thread stores into them until it saw END).
 * A replay comes after the last one on its stream, whose program ended with END: only the
 * progress thread's last look at END can be left, a fraction of a millisecond, which the host
 * node waits for (COLL_TIMEOUT at most).
 *
 * Order: the progress thread runs jobs in the order they are posted. A replay is posted when
 * its stream reaches it, not when it is launched, so once a communicator has captured a call,
 * its other calls are posted by a host function on their streams as well (colli_dev_graph_defer;
 * NCCL does the same): every rank then runs calls and replays in the order its streams reach
 * them, as NCCL asks of graphs (the same order on every rank).
 *
 * Lifetime: the graph can outlive the communicator (destroyed, or aborted). The home (one per
 * communicator, shared by its captured calls and its jobs still to be posted) then says there is
 * none: a replay releases every wait of its program, which runs to its end and computes nothing
 * (the buffers it names are kept until the process ends: device.c, fini). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/util.h"
#include "device/device_int.h"

enum { RELEASED = 0x7fffffff, CHUNK_BLOCKS = 256 };

struct dev_home {
    pthread_mutex_t mu;
    int refs;               /* the communicator, each captured call, each job to be posted */
    struct coll_comm *comm; /* NULL once fini began to close */
    const colli_gpu_ops_t *ops;
    colli_gpu_list_t *lists_h; /* CUDA IPC's lists (device.c), emptied by a replay after fini */
    /* the captured calls' words: chunks of pinned memory of CHUNK_BLOCKS blocks, and the free
     * blocks; freed by fini when it drops the home last, else kept until the process ends
     * (a release runs on a runtime thread, which must not free pinned memory) */
    void **chunks;
    int nchunks;
    volatile uint32_t **free_blocks;
    int nfree, free_cap;
};

struct dev_captured {
    struct dev_home *home;
    dev_job_t *tmpl; /* NULL: the capture failed after the host node was put in the graph */
    volatile uint32_t *words;
    int refs; /* the graph, a replay's job in flight (home->mu; atomic reads) */
    double timeout;
};

/* Release every wait of a program on words w (no progress thread will run it), with CUDA IPC's
 * lists empty. */
static void pass(volatile uint32_t *w, colli_gpu_list_t *lists)
{
    if (lists != NULL)
        memset(lists, 0, DEV_LISTS * sizeof(colli_gpu_list_t));
    __atomic_store_n(&w[W_GO], RELEASED, __ATOMIC_RELEASE);
    __atomic_store_n(&w[W_NET1], RELEASED, __ATOMIC_RELEASE);
    __atomic_store_n(&w[W_NET2], RELEASED, __ATOMIC_RELEASE);
}

/* Drop a reference to h (h->mu held; unlocked, and h freed when it was the last). Pinned chunks
 * are freed only by the caller's thread (free_chunks). */
static void home_unref(struct dev_home *h, bool free_chunks)
{
    const bool last = --h->refs == 0;
    pthread_mutex_unlock(&h->mu);
    if (!last)
        return;
    for (int i = 0; i < h->nchunks && free_chunks; i++)
        (void)h->ops->host_free(h->chunks[i]);
    free(h->chunks);
    free((void *)h->free_blocks);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

static struct dev_home *home_of(struct coll_comm *comm, struct colli_dev *d)
{
    if (d->home != NULL)
        return d->home;
    struct dev_home *h = calloc(1, sizeof(*h));
    if (h == NULL)
        return NULL;
    pthread_mutex_init(&h->mu, NULL);
    h->refs = 1;
    h->comm = comm;
    h->ops = d->ops;
    d->home = h;
    return h;
}

/* DEV_WORDS zeroed words for a captured call (caller's thread), or NULL with *err. */
static volatile uint32_t *words_get(struct dev_home *h, int *err)
{
    pthread_mutex_lock(&h->mu);
    volatile uint32_t *w = h->nfree > 0 ? h->free_blocks[--h->nfree] : NULL;
    pthread_mutex_unlock(&h->mu);
    if (w != NULL) {
        memset((void *)w, 0, DEV_WORDS * sizeof(uint32_t));
        return w;
    }
    void *m = NULL;
    *err = h->ops->host_alloc(&m, CHUNK_BLOCKS * DEV_WORDS * sizeof(uint32_t));
    if (*err != 0)
        return NULL;
    memset(m, 0, CHUNK_BLOCKS * DEV_WORDS * sizeof(uint32_t));
    pthread_mutex_lock(&h->mu); /* a release may push a block meanwhile */
    void **chunks = realloc(h->chunks, (size_t)(h->nchunks + 1) * sizeof(void *));
    volatile uint32_t **blocks =
        realloc((void *)h->free_blocks, (size_t)(h->free_cap + CHUNK_BLOCKS) * sizeof(void *));
    if (chunks != NULL)
        h->chunks = chunks;
    if (blocks != NULL)
        h->free_blocks = blocks;
    if (chunks == NULL || blocks == NULL) {
        pthread_mutex_unlock(&h->mu);
        (void)h->ops->host_free(m);
        *err = 2; /* out of memory, as CUDA numbers it */
        return NULL;
    }
    h->free_cap += CHUNK_BLOCKS;
    h->chunks[h->nchunks++] = m;
    for (int i = 1; i < CHUNK_BLOCKS; i++)
        h->free_blocks[h->nfree++] = (volatile uint32_t *)m + (size_t)i * DEV_WORDS;
    pthread_mutex_unlock(&h->mu);
    return m;
}

/* Drop a reference to captured call c (h->mu held; unlocked): the last frees it. */
static void captured_unref(struct dev_captured *c)
{
    struct dev_home *h = c->home;
    if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) > 0) {
        pthread_mutex_unlock(&h->mu);
        return;
    }
    h->free_blocks[h->nfree++] = c->words; /* room: every block came from a chunk */
    if (c->tmpl != NULL)
        colli_dev_job_free(c->tmpl);
    free(c);
    home_unref(h, false);
}

/* The graph and its executable graphs are gone (a runtime thread). */
static void release(void *arg)
{
    struct dev_captured *c = arg;
    pthread_mutex_lock(&c->home->mu);
    captured_unref(c);
}

/* A replay's job: a copy of the template t. */
static dev_job_t *job_copy(const dev_job_t *t)
{
    const size_t bytes = sizeof(*t) + (size_t)t->nregions * sizeof(t->regions[0]);
    dev_job_t *j = malloc(bytes);
    void *ctx = malloc(t->ctx_size > 0 ? t->ctx_size : 1);
    if (j == NULL || ctx == NULL) {
        free(j);
        free(ctx);
        return NULL;
    }
    memcpy(j, t, bytes);
    memcpy(ctx, t->ctx, t->ctx_size);
    j->ctx = ctx;
    j->next = NULL;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->started = j->finished = 0;
    j->refs = 1;
    j->stream = NULL; /* a graph may be launched on any stream */
    return j;
}

/* The host node of a captured call: post a copy of its template (a runtime thread). */
static void replay(void *arg)
{
    struct dev_captured *c = arg;
    struct dev_home *h = c->home;
    /* the last replay's job is over: the progress thread no longer looks at the words */
    const double end = colli_now() + c->timeout;
    while (__atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) > 1 && colli_now() < end) {
        struct timespec nap = {0, 20000};
        nanosleep(&nap, NULL);
    }
    pthread_mutex_lock(&h->mu);
    struct coll_comm *comm = h->comm;
    const bool late = __atomic_load_n(&c->refs, __ATOMIC_ACQUIRE) > 1;
    dev_job_t *j = comm != NULL && c->tmpl != NULL && !late ? job_copy(c->tmpl) : NULL;
    if (j == NULL) {
        pass(c->words, comm == NULL ? h->lists_h : NULL);
        if (comm != NULL && c->tmpl != NULL) {
            char msg[400];
            snprintf(msg, sizeof(msg),
                     late ? "rank %d: a replay of a CUDA graph reached its %s #%llu while the "
                            "last replay of that call was still running after COLL_TIMEOUT: "
                            "the GPU or a peer is stuck (check the other ranks' errors)"
                          : "rank %d: out of memory posting a CUDA graph's replay of its %s "
                            "#%llu",
                     comm->rank, c->tmpl->what, (unsigned long long)c->tmpl->seq);
            colli_comm_fail(comm, COLL_ERR_CUDA, msg);
        }
        pthread_mutex_unlock(&h->mu);
        return;
    }
    memset((void *)c->words, 0, DEV_WORDS * sizeof(uint32_t));
    __atomic_add_fetch(&c->refs, 1, __ATOMIC_ACQ_REL);
    j->gc = c;
    colli_dev_post(comm->dev, j, true);
    pthread_mutex_unlock(&h->mu);
}

void colli_dev_graph_done(dev_job_t *j)
{
    if (j->gc == NULL)
        return;
    pthread_mutex_lock(&j->gc->home->mu);
    captured_unref(j->gc);
}

int colli_dev_graph_capture(struct coll_comm *comm, struct colli_dev *d, dev_job_t *j, void *stream,
                            uint64_t seq)
{
    struct dev_home *h = home_of(comm, d);
    int err = 2;
    volatile uint32_t *w = h != NULL ? words_get(h, &err) : NULL;
    struct dev_captured *c = w != NULL ? calloc(1, sizeof(*c)) : NULL;
    if (c == NULL) {
        if (w != NULL) {
            pthread_mutex_lock(&h->mu);
            h->free_blocks[h->nfree++] = w;
            pthread_mutex_unlock(&h->mu);
        }
        return err != 0 ? err : 2;
    }
    c->home = h;
    c->words = w;
    c->refs = 1;
    c->timeout = comm->cfg.timeout;
    pthread_mutex_lock(&h->mu);
    h->refs++;
    pthread_mutex_unlock(&h->mu);
    /* kept with the graph from here on (released with it, or now on an error) */
    if ((err = d->ops->graph_keep(stream, release, c)) != 0 ||
        (err = d->ops->host_func(stream, replay, c)) != 0)
        return err;
    j->words = w;
    j->wv = 1;
    if ((err = colli_dev_inline_emit(comm, d, j, stream, seq)) != 0)
        return err;
    pthread_mutex_lock(&h->mu);
    c->tmpl = j;
    pthread_mutex_unlock(&h->mu);
    d->graphs = true;
    return 0;
}

/* The host function before a call's program once graphs exist: post it (a runtime thread). */
static void post_deferred(void *arg)
{
    dev_job_t *j = arg;
    struct dev_home *h = j->home;
    pthread_mutex_lock(&h->mu);
    if (h->comm != NULL) {
        colli_dev_post(h->comm->dev, j, false);
    } else { /* destroyed meanwhile: its words and lists were kept (fini) */
        pass(j->words, h->lists_h);
        colli_dev_job_free(j);
    }
    home_unref(h, false);
}

int colli_dev_graph_defer(struct colli_dev *d, dev_job_t *j, void *stream)
{
    struct dev_home *h = d->home;
    pthread_mutex_lock(&h->mu);
    h->refs++;
    pthread_mutex_unlock(&h->mu);
    /* counted before it can be posted (done never passes submitted) */
    pthread_mutex_lock(&d->mu);
    d->submitted++;
    pthread_mutex_unlock(&d->mu);
    j->deferred = true;
    j->home = h;
    const int err = d->ops->host_func(stream, post_deferred, j);
    if (err == 0)
        return 0;
    j->deferred = false;
    pthread_mutex_lock(&d->mu);
    d->submitted--;
    pthread_mutex_unlock(&d->mu);
    pthread_mutex_lock(&h->mu);
    home_unref(h, false); /* the communicator holds it too: not the last */
    return err;
}

bool colli_dev_graphs_held(struct colli_dev *d)
{
    struct dev_home *h = d->home;
    if (h == NULL)
        return false;
    pthread_mutex_lock(&h->mu);
    const bool held = h->refs > 1;
    pthread_mutex_unlock(&h->mu);
    return held;
}

void colli_dev_emitted(dev_job_t *j)
{
    __atomic_store_n(&j->emitted, 1, __ATOMIC_RELEASE);
}

bool colli_dev_graph_fini(struct colli_dev *d)
{
    struct dev_home *h = d->home;
    if (h == NULL)
        return false;
    d->home = NULL;
    pthread_mutex_lock(&h->mu);
    h->comm = NULL;
    h->lists_h = d->lists_h; /* made after the home, maybe */
    const bool held = h->refs > 1;
    home_unref(h, true);
    return held;
}
