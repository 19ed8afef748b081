/* The nccl_test program's shared parts (nccl_test.c: the harness and driver; nccl_values.c: the
 * inputs and the reference; nccl_conformance.c, nccl_comm_cases.c, nccl_life_cases.c and
 * nccl_group_cases.c: the cases). */
#ifndef KCOLL_NCCL_TEST_H
#define KCOLL_NCCL_TEST_H

#include <nccl.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu_plugin.h"

#define MAX_RANKS 8

typedef struct {
    ncclUniqueId id;
    volatile int id_ready;
    long passed[MAX_RANKS], failed[MAX_RANKS];
    volatile int stage[MAX_RANKS]; /* abort and shrink cases: where each rank is */
} shared_t;

/* The process's rank and the job (one rank per forked process; the parent has rank -1). */
extern shared_t *sh;
extern int rank_, nranks_;
extern long passed, failed;
/* NCCL_TEST_MEM=fakegpu: the fake GPU plugin whose device memory the buffers are (else NULL) */
extern const colli_gpu_ops_t *gpu;

/* ---- harness (nccl_test.c) ---- */
void check(int ok, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define CHECK(cond, ...) check(!!(cond), __LINE__, __VA_ARGS__)
/* the call is made once; its result checked (after the default stream's device work) */
void check_ok(ncclResult_t rc, int line, const char *what);
#define CHECK_OK(call, what) check_ok((call), __LINE__, what)
/* rc is want, and ncclGetLastError says `says` */
void expect(ncclResult_t rc, ncclResult_t want, const char *what, const char *says);
void gpu_open(void);
void *buf_alloc(size_t bytes);
void buf_free(void *p);
void sync_dev(void);
/* NCCL_TEST_GRAPH=1: every device call is captured into a graph, launched by sync_dev */
int graph_capturing(void);
void publish(void);
double now(void);
ncclComm_t init_comm(void);

/* ---- values (nccl_values.c): small integers, exact in every datatype and operator ---- */
int is_fp8(ncclDataType_t dt);
double input_of(ncclDataType_t dt, int r, size_t i);
size_t dt_size(ncclDataType_t dt);
void put(ncclDataType_t dt, void *buf, size_t i, double v);
double get(ncclDataType_t dt, const void *buf, size_t i);
int is_float(ncclDataType_t dt);
double reduced(ncclRedOp_t op, ncclDataType_t dt, int n, size_t i);
int close_enough(ncclDataType_t dt, double got, double want);
const char *dt_name(ncclDataType_t dt);
const char *op_name(ncclRedOp_t op);

/* ---- cases ---- */
void case_conformance(void); /* nccl_conformance.c */
void case_split(void);       /* nccl_comm_cases.c */
void case_many(void);        /* nccl_life_cases.c */
void case_initfail(void);
void case_forkdeath(void);
void case_deadroot(void);
void case_forkuse(void);
void case_nonblocking(void);
void case_errors(void);
void case_abort(void);
void case_initall(int n);
void case_shrink(void);
void case_graph(void); /* fake GPU only */
void case_group(void); /* nccl_group_cases.c */
void case_initall_split(int n);

#endif
