/* The pending op of send/recv requests does not grow while requests keep coming: two ranks (one
 * thread each) exchange 20000 messages through coll_isend/coll_irecv with a recv always posted
 * ahead of the one waited on, so the op is never idle as a whole; its units, fingerprints and
 * request slots must stay bounded (before compaction moved completed units out of a lane that
 * never finishes, they grew by one per message), and every message must arrive in order. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "algo/algos.h"
#include "base/comm.h"

enum { N = 20000, AHEAD = 3 };

static coll_unique_id_t id;
static int failures;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void fail(int rank, const char *what, coll_result_t rc)
{
    pthread_mutex_lock(&lock);
    fprintf(stderr, "FAIL rank %d: %s: %s: %s\n", rank, what, coll_get_error_string(rc),
            coll_get_last_error());
    failures++;
    pthread_mutex_unlock(&lock);
}

static void *rank_main(void *arg)
{
    const int rank = (int)(long)arg, peer = 1 - rank;
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, 2, id, rank);
    if (rc != COLL_SUCCESS) {
        fail(rank, "coll_comm_init_rank", rc);
        return NULL;
    }
    int got[AHEAD + 1] = {0};
    coll_request_t recv[AHEAD + 1] = {NULL};
    int max_units = 0, max_fps = 0, max_slots = 0, wrong = 0;
    for (int k = 0; k < AHEAD && rc == COLL_SUCCESS; k++)
        rc = coll_irecv(&got[k], 1, COLL_INT32, peer, 0, comm, &recv[k]);
    for (int k = 0; k < N && rc == COLL_SUCCESS; k++) {
        const int slot = k % (AHEAD + 1), next = (k + AHEAD) % (AHEAD + 1);
        coll_request_t send = NULL;
        const int v = k * 2 + rank;
        if ((rc = coll_isend(&v, 1, COLL_INT32, peer, 0, comm, &send)) != COLL_SUCCESS)
            break;
        if (k + AHEAD < N && (rc = coll_irecv(&got[next], 1, COLL_INT32, peer, 0, comm,
                                              &recv[next])) != COLL_SUCCESS)
            break;
        if ((rc = coll_wait(recv[slot])) != COLL_SUCCESS || (rc = coll_wait(send)) != COLL_SUCCESS)
            break;
        wrong += got[slot] != k * 2 + peer;
        coll_request_free(recv[slot]);
        coll_request_free(send);
        recv[slot] = NULL;
        struct coll_comm *c = NULL;
        if (colli_comm_lookup(comm, &c) == COLL_SUCCESS) {
            int units, fps, slots;
            colli_p2p_footprint(c, &units, &fps, &slots);
            max_units = units > max_units ? units : max_units;
            max_fps = fps > max_fps ? fps : max_fps;
            max_slots = slots > max_slots ? slots : max_slots;
        }
    }
    if (rc != COLL_SUCCESS)
        fail(rank, "the exchange", rc);
    pthread_mutex_lock(&lock);
    printf("rank %d: %d messages each way, %d out of order; at most %d units, %d fingerprints, "
           "%d request slots\n",
           rank, N, wrong, max_units, max_fps, max_slots);
    if (wrong != 0 || max_units > 256 || max_fps > 256 || max_slots > 16) {
        fprintf(stderr, "FAIL rank %d: wrong data or a pending op that grows\n", rank);
        failures++;
    }
    pthread_mutex_unlock(&lock);
    (void)coll_comm_destroy(comm);
    return NULL;
}

int main(void)
{
    coll_result_t rc = coll_get_unique_id(&id);
    if (rc != COLL_SUCCESS) {
        fail(-1, "coll_get_unique_id", rc);
        return 1;
    }
    pthread_t t[2];
    for (long r = 0; r < 2; r++)
        if (pthread_create(&t[r], NULL, rank_main, (void *)r) != 0) {
            fprintf(stderr, "FAIL: pthread_create\n");
            return 1;
        }
    for (int r = 0; r < 2; r++)
        pthread_join(t[r], NULL);
    printf("%s\n", failures ? "FAILED" : "passed");
    return failures ? 1 : 0;
}
