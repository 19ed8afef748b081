/* What the device-path test programs (test_device.c, test_graph.c) share: the GPU plugin that
 * COLL_CUDA_PLUGIN names, and the skip when it cannot be used. */
#ifndef DEV_TEST_H
#define DEV_TEST_H

#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dh.h"
#include "gpu_plugin.h"

static inline const colli_gpu_ops_t *plugin(void)
{
    const char *lib = getenv("COLL_CUDA_PLUGIN"), *why = NULL;
    return lib != NULL ? colli_gpu_plugin_open(lib, &why) : NULL;
}

/* SKIPPED (dh_skip) unless the plugin loads and has a usable GPU. It is tried in a child: a
 * CUDA runtime must not start before the ranks fork. */
static inline void require_plugin(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        const colli_gpu_ops_t *o = plugin();
        char why[256] = "";
        _exit(o == NULL ? 3 : o->init(why, sizeof(why)) != 0 ? 4 : 0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
        dh_skip("cannot try the GPU plugin");
    if (WEXITSTATUS(st) == 3)
        dh_skip("COLL_CUDA_PLUGIN (%s) is not a loadable GPU plugin",
                getenv("COLL_CUDA_PLUGIN") ? getenv("COLL_CUDA_PLUGIN") : "unset");
    if (WEXITSTATUS(st) == 4)
        dh_skip("the GPU plugin %s has no usable GPU here", getenv("COLL_CUDA_PLUGIN"));
}

/* As NCCL asks (cudaSetDevice before creating a communicator): the GPU current first, so that
 * the library loads its kernels at creation, not at a first call whose stream a test holds. */
static inline coll_comm_t init(dh_ctx_t *ctx)
{
    const colli_gpu_ops_t *o = plugin();
    if (o != NULL && !CHECK(o->set_device(0) == 0, "rank %d: set GPU 0", ctx->rank))
        exit(1);
    coll_comm_t comm = NULL;
    coll_result_t rc = coll_comm_init_rank(&comm, ctx->nranks, ctx->id, ctx->rank);
    if (!CHECK_RC(rc, COLL_SUCCESS, coll_get_last_error(), "rank %d: init", ctx->rank))
        exit(1);
    return comm;
}

/* Run body on nranks forked ranks and wait for them (deadline_s at most): the job, to read and
 * free (dh_free), or NULL when it could not start. */
static inline dh_job_t *start_wait(const char *name, int nranks, void (*body)(dh_ctx_t *),
                                   double deadline_s)
{
    dh_opts_t opt = {.name = name, .nranks = nranks, .deadline_s = deadline_s, .body = body};
    dh_log("--- %s: %d ranks", name, nranks);
    dh_job_t *j = dh_start(&opt);
    if (j != NULL)
        dh_wait(j);
    return j;
}

#endif
