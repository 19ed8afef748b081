/*
 * coll-perf's internals, shared by its files: coll-perf.c (the communicator, the header and the
 * sweep over collectives, types, ops and sizes), coll-perf-opts.c (options and usage),
 * coll-perf-buffers.c (input patterns, expected values, filling and checking the buffers) and
 * coll-perf-measure.c (one timed measurement and the table and JSON output).
 */
#ifndef COLL_PERF_H
#define COLL_PERF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "coll.h"

enum kind {
    K_ALL_REDUCE,
    K_ALL_GATHER,
    K_REDUCE_SCATTER,
    K_BROADCAST,
    K_REDUCE,
    K_ALL_TO_ALL,
    K_SENDRECV,
    K_ISENDRECV, /* the same ring exchange as coll_isend + coll_irecv requests (host buffers) */
    K_NUM
};

struct perf_kind {
    const char *name;
    int has_op;
    int has_root;
    int inplace_ok; /* coll.h defines an in-place form */
};

extern const struct perf_kind perf_kinds[K_NUM];
extern const char *const perf_dt_names[COLL_NUM_DATATYPES];
extern const size_t perf_dt_sizes[COLL_NUM_DATATYPES];
extern const char *const perf_op_names[COLL_NUM_OPS];

struct opts {
    int kind_mask;
    int dt_mask;
    int op_mask;
    size_t minbytes, maxbytes, stepbytes;
    double stepfactor;
    int root, warmup, iters;
    int do_out, do_in;
    int check;
    int registered; /* -R 1: buffers from coll_mem_alloc (the single-copy path on one host) */
    int device;     /* --device cuda: buffers in GPU memory (coll-perf-device.c) */
    int graph;      /* -G N: the timed calls captured into a CUDA graph, launched N times */
    const char *json;
};

struct result {
    double time_us, algbw, busbw;
    int64_t wrong; /* -1: not checked */
    int done;
};

/* The periods of the input patterns (coll-perf-buffers.c). */
#define PERIOD_REDUCE 40 /* lcm of the periods 5 and 8 of the reduction pattern */
#define PERIOD_MOVE   101

struct pattern {
    unsigned char in[PERIOD_MOVE * 8];  /* input table of one rank */
    unsigned char exp[PERIOD_MOVE * 8]; /* expected-value table */
};

struct shape {
    size_t count;      /* count passed to the call */
    size_t send_elems; /* elements in the send buffer */
    size_t recv_elems;
    size_t bytes; /* reported size (nccl-tests: the larger of send and receive) */
};

struct ctx {
    coll_comm_t comm;
    int rank, nranks;
    const struct opts *o;
    unsigned char *sbuf, *rbuf; /* out-of-place buffers; in place uses rbuf alone */
    size_t alloc;               /* bytes of each */
    /* --device cuda: the GPU plugin, device copies of sbuf and rbuf, the stream of the calls */
    const struct colli_gpu_ops *gpu;
    unsigned char *dsbuf, *drbuf;
    void *stream;
    const char *agent_socket; /* non-NULL: the communicator came from coll_comm_init_agent */
    int master;               /* the communicator came from MASTER_ADDR (coll_comm_init_env) */
    /* The communicator is kept here only so that a fatal error can abort it, which tells the
     * other ranks at once instead of leaving them to time out; rank -1 until it is known. */
    coll_comm_t fatal_comm;
    int fatal_rank;
};

/* coll-perf.c */
void perf_fatal(const struct ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define CHECK(c, call)                                                                             \
    do {                                                                                           \
        coll_result_t rc_ = (call);                                                                \
        if (rc_ != COLL_SUCCESS)                                                                   \
            perf_fatal((c), "%s failed at %s:%d: %s: %s", #call, __FILE__, __LINE__,               \
                       coll_get_error_string(rc_), coll_get_last_error());                         \
    } while (0)

/* coll-perf-opts.c */
void perf_parse_args(int argc, char **argv, struct opts *o);
int perf_parse_int(const char *s, int minv, int *out);

/* coll-perf-buffers.c */
void perf_prepare(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                  coll_op_t op, int inplace, struct pattern *pt, void **send, void **recv);
int64_t perf_verify(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                    struct pattern *pt, const void *recv);

/* coll-perf-device.c: a no-op (host pointers, NULL stream) without --device cuda */
void perf_device_open(struct ctx *c, size_t alloc);
void perf_device_close(struct ctx *c);
void *perf_device_ptr(struct ctx *c, const void *p);
void perf_device_upload(struct ctx *c, size_t sbytes, size_t rbytes);
void perf_device_download(struct ctx *c, size_t rbytes);
void perf_device_sync(struct ctx *c);

/* coll-perf-measure.c */
struct shape perf_shape_of(enum kind k, size_t bytes, size_t ts, int nranks);
void perf_measure(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                  coll_op_t op, int inplace, struct result *res);
void perf_print_table_header(const char *coll);
void perf_print_result(const struct result *r);
void perf_json_string(FILE *f, const char *s);
void perf_json_row(FILE *f, int *first, const char *coll, int nranks, const struct shape *s,
                   const char *type, const char *op, int root, const char *placement,
                   const struct result *r);

#endif /* COLL_PERF_H */
