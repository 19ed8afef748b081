/* The fake GPU's hardware queues (FAKE_GPU_CONNECTIONS=N), as CUDA_DEVICE_MAX_CONNECTIONS: a GPU
 * feeds its streams through N queues, each run in the order work was enqueued, so a stream
 * sharing a queue with one that waits (a stream memory operation's wait, a host function) cannot
 * start work enqueued after that wait until it ends, even though the two streams are
 * independent. The fake's streams are threads: a task waits here until every blocking task that
 * another stream of its queue enqueued earlier has finished. Unset: no queues (streams never
 * wait for each other), as with as many queues as streams. */
#include <pthread.h>
#include <stdlib.h>

#include "fake_gpu_queues.h"

#define MAXBLOCKING 1024
#define MAXDEVICES  16 /* queues of devices from here on are shared */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;    /* a blocking task finished */
    int made[MAXDEVICES]; /* streams given a queue, per GPU */
    uint64_t tickets;
    struct {
        uint64_t ticket; /* 0: free */
        int q;
        const void *stream;
    } blocking[MAXBLOCKING];
} fq = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

int fq_queue_new(int device)
{
    const char *e = getenv("FAKE_GPU_CONNECTIONS");
    const int n = e != NULL ? atoi(e) : 0;
    if (n <= 0)
        return -1;
    const int g = device >= 0 && device < MAXDEVICES ? device : MAXDEVICES - 1;
    pthread_mutex_lock(&fq.mu);
    const int q = g * n + fq.made[g]++ % n; /* each GPU has n queues of its own */
    pthread_mutex_unlock(&fq.mu);
    return q;
}

uint64_t fq_enqueue(int q, const void *stream, bool blocking)
{
    pthread_mutex_lock(&fq.mu);
    const uint64_t t = ++fq.tickets;
    for (int i = 0; q >= 0 && blocking && i < MAXBLOCKING; i++)
        if (fq.blocking[i].ticket == 0) {
            fq.blocking[i].ticket = t;
            fq.blocking[i].q = q;
            fq.blocking[i].stream = stream;
            break;
        }
    pthread_mutex_unlock(&fq.mu);
    return t;
}

static bool held(int q, const void *stream, uint64_t ticket)
{
    for (int i = 0; i < MAXBLOCKING; i++)
        if (fq.blocking[i].ticket != 0 && fq.blocking[i].ticket < ticket && fq.blocking[i].q == q &&
            fq.blocking[i].stream != stream)
            return true;
    return false;
}

void fq_before_run(int q, const void *stream, uint64_t ticket)
{
    if (q < 0)
        return;
    pthread_mutex_lock(&fq.mu);
    while (held(q, stream, ticket))
        pthread_cond_wait(&fq.cv, &fq.mu);
    pthread_mutex_unlock(&fq.mu);
}

void fq_done(int q, uint64_t ticket)
{
    if (q < 0)
        return;
    pthread_mutex_lock(&fq.mu);
    for (int i = 0; i < MAXBLOCKING; i++)
        if (fq.blocking[i].ticket == ticket)
            fq.blocking[i].ticket = 0;
    pthread_cond_broadcast(&fq.cv);
    pthread_mutex_unlock(&fq.mu);
}
