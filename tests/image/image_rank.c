/*
 * image_rank: one rank of a training pod, on the host, against the libcoll build that the agent
 * image's sidecar copied into the pod's shared directory. It is linked without a run path, so
 * only LD_LIBRARY_PATH (the shared directory) can supply libcoll.so.0; it prints the file it
 * loaded, creates its communicator through the agent (COLL_AGENT_SOCKET) and checks an
 * all_reduce.
 *
 * Output, one line each:
 *   loaded /path/libcoll.so.0 version V
 *   init ok rank=R nranks=N            | init failed result=... msg=...   (exit 3)
 *   all_reduce ok count=N              | WRONG i=I got=G want=W           (exit 1)
 */
#define _GNU_SOURCE
#include <coll.h>

#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNT 4099 /* odd, so the last chunk of the ring is short */

int main(void)
{
    coll_comm_t comm;
    coll_result_t r;
    Dl_info info;
    void *sym = dlsym(RTLD_DEFAULT, "coll_all_reduce");
    int rank = -1, nranks = 0, bad = 0;
    int32_t *buf;

    if (sym == NULL || dladdr(sym, &info) == 0 || info.dli_fname == NULL) {
        printf("cannot tell which libcoll is loaded: %s\n", dlerror());
        return 2;
    }
    printf("loaded %s version %s\n", info.dli_fname, coll_get_version_string());
    fflush(stdout);

    r = coll_comm_init_agent(&comm);
    if (r != COLL_SUCCESS) {
        printf("init failed result=%d msg=%s\n", (int)r, coll_get_last_error());
        return 3;
    }
    if (coll_comm_user_rank(comm, &rank) != COLL_SUCCESS ||
        coll_comm_count(comm, &nranks) != COLL_SUCCESS) {
        printf("rank/count failed: %s\n", coll_get_last_error());
        return 3;
    }
    printf("init ok rank=%d nranks=%d\n", rank, nranks);
    fflush(stdout);

    buf = malloc(COUNT * sizeof(*buf));
    if (buf == NULL)
        return 2;
    for (int i = 0; i < COUNT; i++)
        buf[i] = (rank + 1) * (i % 13 + 1);
    r = coll_all_reduce(buf, buf, COUNT, COLL_INT32, COLL_SUM, comm, NULL);
    if (r != COLL_SUCCESS) {
        printf("all_reduce failed result=%d msg=%s\n", (int)r, coll_get_last_error());
        free(buf);
        return 4;
    }
    for (int i = 0; i < COUNT && !bad; i++) {
        int32_t want = nranks * (nranks + 1) / 2 * (i % 13 + 1);
        if (buf[i] != want) {
            printf("WRONG i=%d got=%d want=%d\n", i, (int)buf[i], (int)want);
            bad = 1;
        }
    }
    if (!bad)
        printf("all_reduce ok count=%d\n", COUNT);
    free(buf);
    (void)coll_comm_destroy(comm);
    return bad;
}
