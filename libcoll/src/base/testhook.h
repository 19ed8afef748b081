/* Test seams: settings only the test suite uses, read from COLL_TEST_* variables once per
 * communicator. They are not part of the user configuration (not in config.c's table, never
 * logged as parameters) and a build with -DCOLL_TEST_HOOKS=OFF ignores them entirely (the agent
 * image is built that way). */
#ifndef COLLI_TESTHOOK_H
#define COLLI_TESTHOOK_H

#include <stddef.h>

typedef struct colli_testhook {
    /* COLL_TEST_HOST_ID_SUFFIX: appended to the host identity, so that ranks of one machine
     * count as different hosts (a list is indexed by rank) */
    char host_id_suffix[256];
    /* COLL_TEST_CUDA_VERSIONS: "RUNTIME/DRIVER" as the bootstrap compares them (list: by rank) */
    char cuda_versions[256];
    /* COLL_TEST_DEV_FAIL_COPY: the N-th staging copy of the device path fails (0: never) */
    int dev_fail_copy;
    /* COLL_TEST_DEV_IPC_FALLBACK=1: every CUDA IPC call on device buffers brings its fallback in
     * its program, and a rank that cannot map does not turn CUDA IPC off for the later calls (so
     * each of them takes that fallback) */
    int dev_ipc_fallback;
    /* COLL_TEST_FRAME_REPLAY: frame N (from 2) of each socket connection is sent as a replay of
     * frame N-1 would arrive: its header authenticated for the position before (0: never) */
    int frame_replay;
    /* COLL_TEST_IB_VERBS_LIB: the verbs library to load instead of libibverbs.so.1 */
    char ib_verbs_lib[256];
    /* COLL_TEST_IB_QP_ERROR: at its N-th RDMA write (list: by rank; 0 never) a rank moves the
     * write's queue pair into the error state with ibv_modify_qp, as a failing HCA would */
    char ib_qp_error[128];
    /* COLL_TEST_FAIL_READY: "1" for a rank (list: by rank) makes its creation fail after the
     * exchange, before it opens its links, as a rank that runs out of ports or descriptors there */
    char fail_ready[64];
    /* COLL_TEST_BOOT_ID: the boot id in the host identity (list: by rank), so that ranks of one
     * machine count as different machines, kernels and all (the root's address check) */
    char boot_id[128];
} colli_testhook_t;

/* Read the COLL_TEST_* variables (all empty in a build without test hooks). A malformed value
 * is ignored with a WARN: these are not user settings. */
void colli_testhook_load(colli_testhook_t *t);

/* A per-rank test setting: "v" applies to every rank, "v0,v1,..." is indexed by rank. Returns the
 * rank's entry (its length in *len) or NULL when the list is empty or shorter. */
const char *colli_testhook_rank_entry(const char *list, int rank, size_t *len);

#endif
