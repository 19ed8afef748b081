/* A fake GPU plugin (libcoll/src/device/gpu_plugin.h) for testing the device-buffer path without
 * a GPU, loaded through COLL_CUDA_PLUGIN: one device, "fake GPU 0" (FAKE_GPU_DEVICES=N: N, one
 * memory, an allocation belongs to its thread's current device), whose memory is host memory
 * only this plugin hands out (so ptr_device tells it from other memory), and streams that are
 * threads running their work in order: copies, kernels, host functions (which block their
 * stream while they run, as CUDA's do), stream memory operations (stores, and waits that poll)
 * and delays. The default stream (NULL) is one more, and
 * cudaStreamPerThread (0x2) one per thread. Order and errors behave as on CUDA;
 * timing and bandwidth do not.
 *
 * Device memory is a shared mapping of a memfd, so that IPC works between processes: a handle
 * names the process and the descriptor, which a peer opens through /proc/<pid>/fd
 * (FAKE_GPU_NO_IPC=1 makes opening fail, as a driver that refuses peer mappings;
 * FAKE_GPU_NO_EXPORT=1 exporting the program's allocations (not libcoll's), as for memory
 * PyTorch's expandable segments map;
 * FAKE_GPU_BAD_EXPORT=1 describes allocations as too small, as corrupt bytes would). reduce
 * computes with the CPU reference kernels, input by input, as the CUDA kernels do.
 *
 * Kernels load lazily, as CUDA's do by default (CUDA_MODULE_LOADING=LAZY): the first launch of
 * a kernel (reduce, delay) on a device whose kernels load_kernels has not loaded loads them, and
 * a load (that one, or load_kernels) waits until every stream of its device is idle, as a load that
 * synchronises the context does; a stream still busy after SYNC_MAX_S is a deadlock on a GPU,
 * and the fake aborts saying so. CUDA_MODULE_LOADING=EAGER
 * loads them up front. A thread has a context once it set a device, allocated device memory or
 * made a stream (what load_kernels(only_if_current) asks).
 *
 * A stream can capture a graph (capture, for tests; fake_gpu_graph.c): work enqueued on it is
 * recorded, not run, and graph_launch enqueues it again; a synchronisation of a capturing
 * stream fails and invalidates the capture, as on CUDA.
 *
 * A plugin call made from a host function or from a graph's release (a user object's
 * destructor on CUDA), where CUDA forbids API calls, aborts the process naming the call. Host
 * functions of all streams run one at a time, as CUDA may run them: one that blocks holds every
 * other stream's host functions of the process.
 *
 * Error codes: 1 invalid value (a copy that leaves the device range it starts in), 2 out of
 * memory, 3 no device (FAKE_GPU_NO_DEVICE=1 makes init fail, as on a machine without a GPU),
 * 700 a kernel given another GPU's memory, 900 a synchronisation of a capturing stream, 901 a
 * capture so invalidated, at its end. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "coll_kernels.h"
#include "fake_gpu_int.h"
#include "fake_gpu_math.h"
#include "fake_gpu_queues.h"
#include "gpu_plugin.h"

#define EXPORT     __attribute__((visibility("default")))
#define MAXALLOC   4096
#define MAXSTREAMS 256
/* ipc_close synchronises the device; a stream still busy after this long would be a deadlock */
#define SYNC_MAX_S 10.0
#define MAXDEV     64

static struct {
    pthread_mutex_t mu; /* the allocation table and the default stream */
    struct {
        char *p;
        size_t bytes;
        int fd;        /* the memfd behind it (peers open it through /proc): allocated here */
        bool imported; /* a peer's allocation opened with ipc_open */
        bool kcoll;    /* allocated by libcoll (exportable even with FAKE_GPU_NO_EXPORT=1) */
        uint64_t id;   /* allocations made here so far, at its allocation */
        int device;    /* the current device of the thread that allocated it */
    } dev[MAXALLOC];
    uint64_t allocs;
    fstream_t *legacy[MAXDEV];      /* each device's default stream */
    fstream_t *streams[MAXSTREAMS]; /* every stream made here, the default one too */
    int nstreams;
    bool loaded[MAXDEV]; /* the kernels are loaded on this device */
} fg = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* The calling thread's current device (FAKE_GPU_DEVICES, default 1, devices exist), and
 * whether it has a context (set a device, allocated device memory or made a stream). */
static _Thread_local int cur_device;
static _Thread_local bool has_ctx;

static void *stream_main(void *arg)
{
    fstream_t *s = arg;
    pthread_mutex_lock(&s->mu);
    for (;;) {
        while (s->head == NULL && !s->stop)
            pthread_cond_wait(&s->cv, &s->mu);
        task_t *t = s->head;
        if (t == NULL)
            break;
        s->head = t->next;
        if (s->head == NULL)
            s->tail = NULL;
        s->running = 1;
        pthread_mutex_unlock(&s->mu);
        fq_before_run(s->queue, s, t->ticket);
        if (t->kind == T_COPY) {
            memmove(t->dst, t->src, t->bytes);
        } else if (t->kind == T_FUNC) {
            fake_callback_run("a host function", t->fn, t->arg);
        } else if (t->kind == T_REDUCE) {
            fake_run_reduce(t->dst, t->srcs, t->nsrcs, t->count, t->dt, t->op, t->divisor);
        } else if (t->kind == T_LIST) { /* read when it runs, as the kernel does */
            fake_run_list(t->src, t->dt, t->op);
        } else if (t->kind == T_SCALE) {
            colli_scale(t->dst, t->srcs[0], t->count, (coll_datatype_t)t->dt,
                        t->src != NULL ? t->src : t->scalar);
        } else if (t->kind == T_GATE) {
            /* as cuStreamWriteValue32 then cuStreamWaitValue32(GEQ): the stream polls */
            if (t->arrived != NULL)
                __atomic_store_n(t->arrived, t->value, __ATOMIC_RELEASE);
            struct timespec ts = {0, 20000};
            while (t->release != NULL &&
                   (int32_t)(__atomic_load_n(t->release, __ATOMIC_ACQUIRE) - t->value) < 0)
                nanosleep(&ts, NULL);
        } else {
            struct timespec ts = {(time_t)(t->us / 1000000u), (long)(t->us % 1000000u) * 1000L};
            while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
                ;
        }
        fq_done(s->queue, t->ticket);
        free(t);
        pthread_mutex_lock(&s->mu);
        s->running = 0;
        pthread_cond_broadcast(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static fstream_t *stream_new(void)
{
    fstream_t *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->device = cur_device;
    s->queue = fq_queue_new(s->device);
    if (pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

/* Add s (made) to, or remove it from, the streams that a device-wide sync waits for (fg.mu
 * held); false when the table is full. */
static bool stream_list_locked(fstream_t *s, bool add)
{
    for (int i = 0; i < fg.nstreams; i++)
        if (fg.streams[i] == s) {
            if (!add)
                fg.streams[i] = fg.streams[--fg.nstreams];
            return true;
        }
    if (!add || fg.nstreams == MAXSTREAMS)
        return !add;
    fg.streams[fg.nstreams++] = s;
    return true;
}

fstream_t *fake_stream_of(void *stream)
{
    /* cudaStreamPerThread: the calling thread's own default stream of its device */
    static _Thread_local fstream_t *per_thread[MAXDEV];
    if (stream != NULL && stream != FAKE_STREAM_PER_THREAD)
        return stream;
    pthread_mutex_lock(&fg.mu);
    fstream_t **l = stream == NULL ? &fg.legacy[cur_device] : &per_thread[cur_device];
    if (*l == NULL && (*l = stream_new()) != NULL)
        (void)stream_list_locked(*l, true);
    fstream_t *s = *l;
    pthread_mutex_unlock(&fg.mu);
    return s;
}

/* Wait until every stream of the current device is idle, as a synchronisation of its context
 * does (other GPUs' contexts go on); false after max_s. (Streams are not destroyed while this
 * runs: the library destroys its own only at fini, on the thread that closes.) */
static bool device_idle(double max_s)
{
    fstream_t *all[MAXSTREAMS];
    int n = 0;
    pthread_mutex_lock(&fg.mu);
    for (int i = 0; i < fg.nstreams; i++)
        if (fg.streams[i]->device == cur_device)
            all[n++] = fg.streams[i];
    pthread_mutex_unlock(&fg.mu);
    struct timespec end;
    clock_gettime(CLOCK_REALTIME, &end);
    end.tv_sec += (time_t)max_s;
    bool idle = true;
    for (int i = 0; i < n && idle; i++) {
        pthread_mutex_lock(&all[i]->mu);
        while ((all[i]->head != NULL || all[i]->running) && idle)
            idle = pthread_cond_timedwait(&all[i]->cv, &all[i]->mu, &end) != ETIMEDOUT;
        pthread_mutex_unlock(&all[i]->mu);
    }
    return idle;
}

int fake_enqueue(void *stream, const task_t *t)
{
    fstream_t *s = fake_stream_of(stream);
    task_t *c = malloc(sizeof(*c));
    if (s == NULL || c == NULL) {
        free(c);
        return 2;
    }
    *c = *t;
    c->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->capturing) {
        const bool kept = !s->invalidated && fgraph_record(s->graph, c);
        s->invalidated |= !kept;
        pthread_mutex_unlock(&s->mu);
        free(c);
        return kept ? 0 : 901; /* cudaErrorStreamCaptureInvalidated */
    }
    c->ticket =
        fq_enqueue(s->queue, s, (t->kind == T_GATE && t->release != NULL) || t->kind == T_FUNC);
    if (s->tail != NULL)
        s->tail->next = c;
    else
        s->head = c;
    s->tail = c;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

/* The allocation [p, p + bytes) lies in, or -1. */
static int find(const void *p, size_t *left)
{
    const char *c = p;
    int found = -1;
    pthread_mutex_lock(&fg.mu);
    for (int i = 0; i < MAXALLOC && found < 0; i++)
        if (fg.dev[i].p != NULL && c >= fg.dev[i].p && c < fg.dev[i].p + fg.dev[i].bytes) {
            found = i;
            *left = (size_t)(fg.dev[i].p + fg.dev[i].bytes - c);
        }
    pthread_mutex_unlock(&fg.mu);
    return found;
}

static int fake_init(char *why, size_t len)
{
    FAKE_API();
    const char *e = getenv("FAKE_GPU_NO_DEVICE");
    if (e != NULL && strcmp(e, "1") == 0) {
        snprintf(why, len, "no GPU: fakeErrorNoDevice (FAKE_GPU_NO_DEVICE=1)");
        return 3;
    }
    return 0;
}

static int fake_ptr_device(const void *p, int *device)
{
    FAKE_API();
    size_t left;
    int i = find(p, &left);
    if (i < 0)
        return 0;
    pthread_mutex_lock(&fg.mu);
    *device = fg.dev[i].device;
    pthread_mutex_unlock(&fg.mu);
    return 1;
}

static int fake_set_device(int device)
{
    FAKE_API();
    const char *e = getenv("FAKE_GPU_DEVICES");
    if (device < 0 || device >= (e != NULL ? atoi(e) : 1) || device >= MAXDEV)
        return 1;
    cur_device = device;
    has_ctx = true;
    return 0;
}

static int fake_get_device(int *device)
{
    FAKE_API();
    *device = has_ctx ? cur_device : -1; /* as the CUDA plugin: no context, no device */
    return 0;
}

/* Table slot for a mapping, or -1 when full. */
static int add_range(char *m, size_t bytes, int fd, bool imported, bool kcoll)
{
    pthread_mutex_lock(&fg.mu);
    int slot = -1;
    for (int i = 0; i < MAXALLOC && slot < 0; i++)
        if (fg.dev[i].p == NULL)
            slot = i;
    if (slot >= 0) {
        fg.dev[slot].p = m;
        fg.dev[slot].bytes = bytes;
        fg.dev[slot].fd = fd;
        fg.dev[slot].imported = imported;
        fg.dev[slot].kcoll = kcoll;
        fg.dev[slot].id = ++fg.allocs;
        fg.dev[slot].device = cur_device;
    }
    pthread_mutex_unlock(&fg.mu);
    return slot;
}

/* Device memory is a shared mapping of a memfd, so that another process can open it (IPC). */
static int fake_dev_alloc(void **p, size_t bytes)
{
    FAKE_API();
    if (bytes == 0)
        bytes = 1;
    has_ctx = true;
    int fd = memfd_create("fake-gpu", MFD_CLOEXEC);
    if (fd < 0)
        return 2;
    char *m = ftruncate(fd, (off_t)bytes) == 0
                  ? mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                  : MAP_FAILED;
    Dl_info caller;
    const bool kcoll = dladdr(__builtin_return_address(0), &caller) != 0 &&
                       caller.dli_fname != NULL && strstr(caller.dli_fname, "libcoll") != NULL;
    if (m == MAP_FAILED || add_range(m, bytes, fd, false, kcoll) < 0) {
        if (m != MAP_FAILED)
            munmap(m, bytes);
        close(fd);
        return 2;
    }
    *p = m;
    return 0;
}

/* Remove the mapping at p made here (imported false) or opened (true); 1 when there is none. */
static int drop_range(void *p, bool imported)
{
    int fd = -1;
    size_t bytes = 0;
    bool found = false;
    pthread_mutex_lock(&fg.mu);
    for (int i = 0; i < MAXALLOC && !found; i++)
        if (p != NULL && fg.dev[i].p == p && fg.dev[i].imported == imported) {
            fg.dev[i].p = NULL;
            fd = fg.dev[i].fd;
            bytes = fg.dev[i].bytes;
            found = true;
        }
    pthread_mutex_unlock(&fg.mu);
    if (!found)
        return 1;
    munmap(p, bytes);
    if (fd >= 0)
        close(fd);
    return 0;
}

static int fake_dev_free(void *p)
{
    FAKE_API();
    return p == NULL ? 0 : drop_range(p, false);
}

typedef struct {
    char magic[8]; /* "fakeipc" */
    int32_t pid, fd;
    uint64_t bytes;
} fake_handle_t;

static int fake_ipc_export(const void *p, void *handle, size_t *offset, size_t *size, uint64_t *id)
{
    FAKE_API();
    fake_handle_t h = {.magic = "fakeipc", .pid = (int32_t)getpid(), .fd = -1};
    const char *c = p;
    bool kcoll = false;
    pthread_mutex_lock(&fg.mu);
    for (int i = 0; i < MAXALLOC && h.fd < 0; i++)
        if (fg.dev[i].p != NULL && !fg.dev[i].imported && c >= fg.dev[i].p &&
            c < fg.dev[i].p + fg.dev[i].bytes) {
            h.fd = fg.dev[i].fd;
            h.bytes = fg.dev[i].bytes;
            *offset = (size_t)(c - fg.dev[i].p);
            *size = fg.dev[i].bytes;
            *id = fg.dev[i].id;
            kcoll = fg.dev[i].kcoll;
        }
    pthread_mutex_unlock(&fg.mu);
    const char *no = getenv("FAKE_GPU_NO_EXPORT"); /* memory that cannot be shared (VMM) */
    if (h.fd < 0 || (no != NULL && strcmp(no, "1") == 0 && !kcoll))
        return h.fd < 0 ? 1 : 801;
    const char *bad = getenv("FAKE_GPU_BAD_EXPORT"); /* a descriptor that cannot be right */
    if (bad != NULL && strcmp(bad, "1") == 0)
        *size = *offset;
    memset(handle, 0, COLLI_GPU_IPC_HANDLE);
    memcpy(handle, &h, sizeof(h));
    return 0;
}

/* FAKE_GPU_NO_IPC=1: opening fails, as where the driver refuses peer mappings. */
static int fake_ipc_open(const void *handle, void **base)
{
    FAKE_API();
    fake_handle_t h;
    memcpy(&h, handle, sizeof(h));
    const char *no = getenv("FAKE_GPU_NO_IPC");
    if (memcmp(h.magic, "fakeipc", 8) != 0 || h.pid == (int32_t)getpid() ||
        (no != NULL && strcmp(no, "1") == 0))
        return 1;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return 1;
    char *m = mmap(NULL, (size_t)h.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return 2;
    if (add_range(m, (size_t)h.bytes, -1, true, false) < 0) {
        munmap(m, (size_t)h.bytes);
        return 2;
    }
    *base = m;
    return 0;
}

/* Whether the driver's close waits for the device is not documented; the fake assumes it does,
 * as cudaFree does: it waits until every stream is idle. Called on a thread that a stream's host
 * function waits for (the library's progress thread, with a gate on the caller's stream), that
 * would deadlock on a GPU: the fake says so and aborts instead of hanging. */
static int fake_ipc_close(void *base)
{
    FAKE_API();
    if (!device_idle(SYNC_MAX_S)) {
        fprintf(stderr,
                "fake GPU: ipc_close synchronises the device, and a stream was still busy after "
                "%.0f s: on a GPU this close would deadlock if a stream waits for the closing "
                "thread\n",
                SYNC_MAX_S);
        abort();
    }
    return drop_range(base, true);
}

/* FAKE_GPU_PINNED_MAX=N: an allocation of more than N bytes fails, as under a memlock limit. */
static int fake_host_alloc(void **p, size_t bytes)
{
    FAKE_API();
    const char *max = getenv("FAKE_GPU_PINNED_MAX");
    *p = max == NULL || bytes <= strtoull(max, NULL, 10) ? malloc(bytes ? bytes : 1) : NULL;
    return *p == NULL ? 2 : 0;
}

static int fake_host_free(void *p)
{
    FAKE_API();
    free(p);
    return 0;
}

static void stream_free(fstream_t *s);

static int fake_stream_create(void **stream)
{
    FAKE_API();
    has_ctx = true;
    fstream_t *s = stream_new();
    pthread_mutex_lock(&fg.mu);
    bool listed = s != NULL && stream_list_locked(s, true);
    pthread_mutex_unlock(&fg.mu);
    if (s != NULL && !listed) {
        stream_free(s);
        s = NULL;
    }
    *stream = s;
    return s == NULL ? 2 : 0;
}

static int fake_stream_sync(void *stream)
{
    FAKE_API();
    fstream_t *s = fake_stream_of(stream);
    if (s == NULL)
        return 2;
    pthread_mutex_lock(&s->mu);
    const bool capturing = s->capturing;
    s->invalidated |= capturing; /* as a synchronisation of a capturing stream does */
    while (!capturing && (s->head != NULL || s->running))
        pthread_cond_wait(&s->cv, &s->mu);
    pthread_mutex_unlock(&s->mu);
    return capturing ? 900 : 0;
}

/* A state of the stream, read under its lock: whether work is left (busy), else whether it
 * captures. */
static int stream_state(void *stream, bool busy, int *out)
{
    fstream_t *s = fake_stream_of(stream);
    if (s == NULL)
        return 2;
    pthread_mutex_lock(&s->mu);
    *out = busy ? s->head != NULL || s->running : s->capturing;
    pthread_mutex_unlock(&s->mu);
    return 0;
}

static int fake_stream_query(void *stream, int *busy)
{
    FAKE_API();
    return stream_state(stream, true, busy);
}

static int fake_stream_capturing(void *stream, int *capturing)
{
    FAKE_API();
    return stream_state(stream, false, capturing);
}

static int fake_stream_destroy(void *stream)
{
    FAKE_API();
    fstream_t *s = stream;
    if (s == NULL)
        return 1;
    pthread_mutex_lock(&fg.mu);
    (void)stream_list_locked(s, false);
    pthread_mutex_unlock(&fg.mu);
    stream_free(s);
    return 0;
}

/* Run what is queued on s, then end its thread and free it. */
static void stream_free(fstream_t *s)
{
    (void)fake_stream_sync(s);
    pthread_mutex_lock(&s->mu);
    s->stop = 1;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}

/* A device range must stay inside its allocation, as cudaMemcpy checks. */
static int check_range(const void *p, size_t bytes)
{
    size_t left;
    return find(p, &left) >= 0 && bytes > left ? 1 : 0;
}

static int fake_memcpy_async(void *dst, const void *src, size_t bytes, void *stream)
{
    FAKE_API();
    if (bytes == 0)
        return 0;
    if (dst == NULL || src == NULL || check_range(dst, bytes) || check_range(src, bytes))
        return 1;
    task_t t = {.kind = T_COPY, .dst = dst, .src = src, .bytes = bytes};
    return fake_enqueue(stream, &t);
}

static int fake_host_func(void *stream, void (*fn)(void *), void *arg)
{
    FAKE_API();
    task_t t = {.kind = T_FUNC, .fn = fn, .arg = arg};
    return fn == NULL ? 1 : fake_enqueue(stream, &t);
}

/* FAKE_GPU_NO_MEMOP=1: a driver without stream memory operations (the host_func fallback) */
static int fake_gate_words(void *stream, volatile uint32_t *arrived, volatile uint32_t *release,
                           uint32_t value)
{
    FAKE_API();
    const char *no = getenv("FAKE_GPU_NO_MEMOP");
    task_t t = {.kind = T_GATE, .arrived = arrived, .release = release, .value = value};
    return no != NULL && strcmp(no, "1") == 0 ? 801 /* cudaErrorNotSupported */
                                              : fake_enqueue(stream, &t);
}

/* One stream memory operation: a gate's store (arrived) or its wait (release) alone. */
static int fake_word_write(void *stream, volatile uint32_t *word, uint32_t value)
{
    FAKE_API();
    return fake_gate_words(stream, word, NULL, value);
}

static int fake_word_wait(void *stream, volatile uint32_t *word, uint32_t value)
{
    FAKE_API();
    return fake_gate_words(stream, NULL, word, value);
}

/* The kernels on the current device: loaded now (load_kernels), or at their first launch, which
 * waits for every stream as CUDA's lazy loading may (see the top). */
static bool kernels_loaded(void)
{
    const char *mode = getenv("CUDA_MODULE_LOADING");
    if (mode != NULL && strcmp(mode, "EAGER") == 0)
        return true;
    pthread_mutex_lock(&fg.mu);
    bool loaded = fg.loaded[cur_device];
    pthread_mutex_unlock(&fg.mu);
    return loaded;
}

static void set_loaded(void)
{
    pthread_mutex_lock(&fg.mu);
    fg.loaded[cur_device] = true;
    pthread_mutex_unlock(&fg.mu);
}

/* Load the kernels on the current device (what): a load waits for every stream. */
static void load(const char *what)
{
    if (kernels_loaded())
        return;
    if (!device_idle(SYNC_MAX_S)) {
        fprintf(stderr,
                "fake GPU: %s on GPU %d loads the kernels, which waits for every stream of that "
                "GPU, and a "
                "stream was still busy after %.0f s: on a GPU this would deadlock if a stream "
                "waits for the loading thread\n",
                what, cur_device, SYNC_MAX_S);
        abort();
    }
    set_loaded();
}

/* FAKE_GPU_NO_KERNELS=1: no kernel for this GPU (a plugin built for another architecture). */
static int fake_load_kernels(int only_if_current, int *loaded)
{
    FAKE_API();
    *loaded = 0;
    if (only_if_current && !has_ctx)
        return 0;
    const char *none = getenv("FAKE_GPU_NO_KERNELS");
    if (none != NULL && strcmp(none, "1") == 0)
        return 209; /* cudaErrorNoKernelImageForDevice */
    has_ctx = true;
    load("load_kernels");
    *loaded = 1;
    return 0;
}

static int fake_delay(void *stream, unsigned us)
{
    FAKE_API();
    load("the first launch of the delay kernel (lazy loading)");
    task_t t = {.kind = T_DELAY, .us = us};
    return fake_enqueue(stream, &t);
}

/* [p, p + bytes) lies in one allocation of the current device: a kernel reads no other GPU's
 * memory (no peer access: an access there faults, 700, as on a GPU). */
static int on_gpu(const void *p, size_t bytes)
{
    size_t left;
    const int i = find(p, &left);
    pthread_mutex_lock(&fg.mu);
    const bool here = i >= 0 && fg.dev[i].device == cur_device;
    pthread_mutex_unlock(&fg.mu);
    return i < 0 || left < bytes ? 1 : here ? 0 : 700;
}

static int fake_reduce_list(const colli_gpu_list_t *list, int dt, int op, void *stream)
{
    FAKE_API();
    if (dt < 0 || dt >= COLL_NUM_DATATYPES || op < 0 || op >= COLL_NUM_OPS)
        return 1;
    load("the first launch of the list kernel (lazy loading)");
    task_t t = {.kind = T_LIST, .src = list, .dt = dt, .op = op};
    const int err = on_gpu(list, sizeof(*list));
    return err != 0 ? err : fake_enqueue(stream, &t);
}

static int fake_reduce(void *dst, const void *const *srcs, int nsrcs, size_t count, int dt, int op,
                       uint32_t divisor, void *stream)
{
    FAKE_API();
    if (nsrcs < 1 || nsrcs > COLLI_GPU_MAX_SRCS || dt < 0 || dt >= COLL_NUM_DATATYPES || op < 0 ||
        op >= COLL_NUM_OPS)
        return 1;
    if (count == 0)
        return 0;
    load("the first launch of the reduce kernel (lazy loading)");
    const size_t bytes = count * fake_elt_size((coll_datatype_t)dt);
    int err = on_gpu(dst, bytes);
    task_t t = {.kind = T_REDUCE,
                .dst = dst,
                .nsrcs = nsrcs,
                .count = count,
                .dt = dt,
                .op = op,
                .divisor = divisor};
    for (int i = 0; i < nsrcs && err == 0; i++) {
        err = on_gpu(srcs[i], bytes);
        t.srcs[i] = srcs[i];
    }
    return err != 0 ? err : fake_enqueue(stream, &t);
}

/* PreMulSum's scaling, as the CUDA kernel does it: colli_scale, ordered on the stream. */
static int fake_scale(void *dst, const void *src, size_t count, int dt, const void *scalar,
                      int on_device, void *stream)
{
    FAKE_API();
    if (dt < 0 || dt >= COLL_NUM_DATATYPES || scalar == NULL)
        return 1;
    if (count == 0)
        return 0;
    load("the first launch of the scale kernel (lazy loading)");
    const size_t bytes = count * fake_elt_size((coll_datatype_t)dt);
    int err = on_gpu(dst, bytes);
    if (err != 0 || (err = on_gpu(src, bytes)) != 0)
        return err;
    if (on_device && (err = on_gpu(scalar, fake_elt_size((coll_datatype_t)dt))) != 0)
        return err;
    task_t t = {.kind = T_SCALE, .dst = dst, .count = count, .dt = dt};
    t.srcs[0] = src;
    if (on_device)
        t.src = scalar; /* read when the task runs, as the kernel reads it */
    else
        memcpy(t.scalar, scalar, fake_elt_size((coll_datatype_t)dt));
    return fake_enqueue(stream, &t);
}

static const char *fake_device_name(int device)
{
    FAKE_API();
    return device == 0 ? "fake GPU 0" : "fake GPU";
}

static const colli_gpu_ops_t ops = {
    .struct_size = sizeof(colli_gpu_ops_t),
    .version = COLLI_GPU_PLUGIN_VERSION,
    .name = "fake",
    .init = fake_init,
    .ptr_device = fake_ptr_device,
    .set_device = fake_set_device,
    .get_device = fake_get_device,
    .dev_alloc = fake_dev_alloc,
    .dev_free = fake_dev_free,
    .host_alloc = fake_host_alloc,
    .host_free = fake_host_free,
    .stream_create = fake_stream_create,
    .stream_destroy = fake_stream_destroy,
    .memcpy_async = fake_memcpy_async,
    .stream_sync = fake_stream_sync,
    .host_func = fake_host_func,
    .delay = fake_delay,
    .error_string = fake_error_string,
    .device_name = fake_device_name,
    .reduce = fake_reduce,
    .ipc_export = fake_ipc_export,
    .ipc_open = fake_ipc_open,
    .ipc_close = fake_ipc_close,
    .gate_words = fake_gate_words,
    .load_kernels = fake_load_kernels,
    .scale = fake_scale,
    .stream_capturing = fake_stream_capturing,
    .capture = fake_capture,
    .stream_query = fake_stream_query,
    .word_write = fake_word_write,
    .word_wait = fake_word_wait,
    .reduce_list = fake_reduce_list,
    .graph_keep = fake_graph_keep,
    .graph_launch = fake_graph_launch,
    .graph_destroy = fake_graph_destroy,
};

EXPORT const colli_gpu_ops_t *colli_gpu_plugin_v1(void)
{
    return &ops;
}
