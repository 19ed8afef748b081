/*
 * A frame replayed on an authenticated connection (issue 21, finding 1). Each socket frame header
 * carries a MAC keyed with its connection's key over the header and the frame's number on the
 * connection. A test seam (COLL_TEST_FRAME_REPLAY=3 on rank 1) sends rank 1's third frame on each
 * connection as a copy of the second would arrive: authenticated for the position before. Rank 0
 * must refuse it with an error that says so, never reduce it into a result, and rank 1 must learn
 * why its peer stopped.
 * frame_replay      (exit 0: pass, 1: fail)
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll.h"

#define COUNT (256 * 1024) /* float32: 1 MiB a call, several frames each */

typedef struct {
    int code[2];   /* the first failing call's result, or 0 */
    int calls[2];  /* calls that returned COLL_SUCCESS */
    long wrong[2]; /* wrong elements in results reported as success */
    char msg[2][1024];
} shared_t;

static int failed;

static void check(int ok, const char *what)
{
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    failed |= !ok;
}

static void rank_main(shared_t *sh, coll_unique_id_t id, int rank)
{
    if (rank == 1)
        setenv("COLL_TEST_FRAME_REPLAY", "3", 1);
    coll_comm_t comm;
    coll_result_t rc = coll_comm_init_rank(&comm, 2, id, rank);
    float *s = malloc(COUNT * sizeof(float)), *r = malloc(COUNT * sizeof(float));
    for (int it = 0; rc == COLL_SUCCESS && it < 8; it++) {
        for (size_t i = 0; i < COUNT; i++)
            s[i] = (float)((i + (size_t)rank) % 7);
        rc = coll_all_reduce(s, r, COUNT, COLL_FLOAT32, COLL_SUM, comm, NULL);
        if (rc != COLL_SUCCESS)
            break;
        sh->calls[rank]++;
        for (size_t i = 0; i < COUNT; i++)
            sh->wrong[rank] += r[i] != (float)(i % 7 + (i + 1) % 7);
    }
    sh->code[rank] = rc;
    snprintf(sh->msg[rank], sizeof(sh->msg[rank]), "%s", rc ? coll_get_last_error() : "");
    if (rc == COLL_SUCCESS)
        coll_comm_destroy(comm);
    else if (comm != NULL)
        coll_comm_abort(comm);
    free(s);
    free(r);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    setenv("COLL_SOCKET_IFNAME", "lo", 1);
    setenv("COLL_SHM_DISABLE", "1", 1); /* frames over TCP */
    setenv("COLL_TIMEOUT", "20", 1);
    coll_unique_id_t id;
    if (coll_get_unique_id(&id) != COLL_SUCCESS) {
        printf("FAIL unique id: %s\n", coll_get_last_error());
        return 1;
    }
    shared_t *sh =
        mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED)
        return 1;
    memset(sh, 0, sizeof(*sh));
    pid_t pids[2];
    for (int r = 0; r < 2; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            rank_main(sh, id, r);
            _exit(0);
        }
    }
    for (int r = 0; r < 2; r++)
        waitpid(pids[r], NULL, 0);
    for (int r = 0; r < 2; r++)
        printf("rank %d: %d calls succeeded, then %s: %s\n", r, sh->calls[r],
               coll_get_error_string((coll_result_t)sh->code[r]), sh->msg[r]);
    check(sh->code[0] == COLL_ERR_NETWORK, "rank 0 failed with COLL_ERR_NETWORK");
    check(strstr(sh->msg[0], "failed authentication") != NULL &&
              strstr(sh->msg[0], "from rank 1") != NULL,
          "rank 0 says the frame from rank 1 failed authentication");
    check(sh->code[1] != COLL_SUCCESS && strstr(sh->msg[1], "failed authentication") != NULL,
          "rank 1 learns why (rank 0's abort notice)");
    check(sh->wrong[0] == 0 && sh->wrong[1] == 0, "no wrong result was reported as a success");
    check(sh->calls[0] < 8, "the replayed frame was not used");
    printf("%s\n", failed ? "FAILED" : "passed");
    return failed;
}
