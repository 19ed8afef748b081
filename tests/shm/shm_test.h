/* Shared by the cases of test_shm (tests/shm/test_shm.c and shm_*.c): the private /dev/shm and
 * the check that nothing is left in it, the loop of checked collectives that a rank is killed (or
 * an HCA error injected) in, and the log switches. */
#ifndef KCOLL_TESTS_SHM_TEST_H
#define KCOLL_TESTS_SHM_TEST_H

#include <stddef.h>

#include "dh.h"

#define MARGIN 3.0 /* seconds: survivors of a kill must fail well before COLL_TIMEOUT (10 s) */

/* A loop of checked collectives (loop_body) and who is killed in it (kill_case). */
typedef struct targs {
    const char *name; /* the case, for the log and the /dev/shm check */
    int victim;
    size_t count;       /* elements per call (float32) */
    int a2a;            /* all_to_alls instead of all_reduces */
    int shared;         /* buffers from coll_mem_alloc */
    int rings;          /* COLL_SHM_DIRECT_MIN=0: the rings, even for large malloc buffers */
    const char *hosts;  /* COLL_TEST_HOST_ID_SUFFIX, NULL: one host */
    const char *inject; /* FAKE_VERBS_INJECT for the victim (tests/ib/fake_verbs.c) */
} targs_t;

/* As root: a private tmpfs on /dev/shm for this test; otherwise remember its kcoll entries. */
void private_dev_shm(void);
/* Fail for every kcoll entry in /dev/shm that was not there before. */
void check_no_segments(const char *what);
/* Count this rank as done, then wait until `want` ranks are. */
void wait_done(dh_ctx_t *ctx, long want, double max_s);
/* The input element i of rank `rank` (small integers: exact float sums). */
float value(size_t i, int rank);
/* Elements of r[0..n) that are not the sum of every rank's value(i, rank). */
long wrong_sums(const float *r, size_t n, int nranks);
/* Loop checked all_reduces (or all_to_alls) until one fails or 60 s passed (arg: targs_t). */
void loop_body(dh_ctx_t *ctx);
/* Run loop_body on nranks ranks, SIGKILL the victim after 3 iterations, check the survivors. */
void kill_case(targs_t *a, int nranks);
/* COLL_DEBUG=INFO for one subsystem in the ranks started from now on; debug_off undoes it. */
void debug_on(const char *subsys);
void debug_off(void);

/* The cases that live in their own files. */
void test_kill_direct(void); /* shm_direct.c */
void test_kill_cma(void);
void test_direct(void);
void test_sweep(void);       /* shm_sweep.c */
void test_ib_wc_error(void); /* shm_ib.c */
void test_ib_port_down(void);
void test_ib_qp_error(void);
void test_ib_lazy(void);
void test_ib_fork(void);
void test_ib_efa(void);

#endif
