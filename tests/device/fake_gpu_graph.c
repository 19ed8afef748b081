/* The fake GPU's callbacks (host functions, graph releases: no plugin call may come from them)
 * and CUDA graphs: a capture records copies of the work enqueued on its stream, in
 * order; a launch enqueues them again (fake_gpu.c). What the library keeps with a graph
 * (graph_keep, a user object on CUDA) is released when the graph is destroyed, as CUDA does
 * once the graph and its executable graphs are gone (here one object is both). */
#include "fake_gpu_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Set while a host function or a graph's release runs: CUDA forbids API calls there ("must not
 * make any CUDA API calls"; a driver may deadlock or fail them), and FAKE_API aborts on one. */
static _Thread_local const char *in_callback;

void fake_callback_run(const char *what, void (*fn)(void *), void *arg)
{
    /* "host functions without a mandated order (such as in independent streams) execute in
     * undefined order and may be serialized" (cudaLaunchHostFunc): they are, here */
    static pthread_mutex_t serial = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&serial);
    in_callback = what;
    fn(arg);
    in_callback = NULL;
    pthread_mutex_unlock(&serial);
}

void fake_api_check(const char *fn)
{
    if (in_callback == NULL)
        return;
    fprintf(stderr, "fake GPU: %s called from %s, where CUDA forbids API calls\n", fn, in_callback);
    abort();
}

struct fgraph {
    size_t n, cap;
    task_t *items;
    struct kept {
        void (*release)(void *);
        void *arg;
    } * kept;
    size_t nkept, kept_cap;
};

static fgraph_t *fgraph_new(void)
{
    return calloc(1, sizeof(fgraph_t));
}

/* Room for one more of elem bytes in the array *p of *cap (n used). */
static bool room(void **p, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return true;
    const size_t want = *cap != 0 ? *cap * 2 : 16;
    void *q = realloc(*p, want * elem);
    if (q == NULL)
        return false;
    *p = q;
    *cap = want;
    return true;
}

bool fgraph_record(fgraph_t *g, const task_t *t)
{
    if (!room((void **)&g->items, &g->cap, g->n, sizeof(*t)))
        return false;
    g->items[g->n++] = *t;
    return true;
}

static bool fgraph_keep(fgraph_t *g, void (*release)(void *), void *arg)
{
    if (!room((void **)&g->kept, &g->kept_cap, g->nkept, sizeof(g->kept[0])))
        return false;
    g->kept[g->nkept++] = (struct kept){release, arg};
    return true;
}

static void fgraph_free(fgraph_t *g)
{
    if (g == NULL)
        return;
    for (size_t i = 0; i < g->nkept; i++)
        fake_callback_run("a graph's user object release", g->kept[i].release, g->kept[i].arg);
    free(g->kept);
    free(g->items);
    free(g);
}

int fake_capture(void *stream, int begin, void **exec)
{
    FAKE_API();
    fstream_t *s = fake_stream_of(stream);
    fgraph_t *g = begin ? fgraph_new() : NULL;
    if (s == NULL || (begin && g == NULL)) {
        fgraph_free(g);
        return 2;
    }
    pthread_mutex_lock(&s->mu);
    int err = (begin != 0) == s->capturing ? 1 : !begin && s->invalidated ? 901 : 0;
    if (err != 1) {
        s->capturing = begin != 0;
        s->invalidated = false;
        fgraph_t *done = s->graph;
        s->graph = g;
        g = begin ? NULL : done;
    }
    pthread_mutex_unlock(&s->mu);
    if (err == 0 && exec != NULL && g != NULL) {
        *exec = g; /* the executable graph is the graph */
        g = NULL;
    }
    fgraph_free(g); /* discarded: what was kept with it is released */
    return err;
}

int fake_graph_keep(void *stream, void (*release)(void *), void *arg)
{
    FAKE_API();
    fstream_t *s = fake_stream_of(stream);
    if (s == NULL) {
        release(arg);
        return 2;
    }
    pthread_mutex_lock(&s->mu);
    const int err = !s->capturing || s->invalidated        ? 901
                    : !fgraph_keep(s->graph, release, arg) ? 2
                                                           : 0;
    pthread_mutex_unlock(&s->mu);
    if (err != 0)
        release(arg);
    return err;
}

int fake_graph_launch(void *exec, void *stream)
{
    FAKE_API();
    const fgraph_t *g = exec;
    int err = g == NULL ? 1 : 0;
    for (size_t i = 0; g != NULL && i < g->n && err == 0; i++)
        err = fake_enqueue(stream, &g->items[i]);
    return err;
}

int fake_graph_destroy(void *exec)
{
    FAKE_API();
    fgraph_free(exec);
    return exec == NULL ? 1 : 0;
}
