/*
 * Multi-process test harness: the parent forks one child per rank, then creates a unique id
 * (which starts the bootstrap root thread in the parent) and hands it to the children through
 * shared memory; each child joins the communicator and runs a test body; the parent waits with
 * a deadline, kills everything that hangs and sums the per-rank pass/fail counts that the
 * children leave in shared memory.
 *
 * Only the public API (coll.h) is used.
 */
#ifndef COLL_TEST_HARNESS_H
#define COLL_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "coll.h"

#define MP_MAX_RANKS 16
/* Bytes of MAP_SHARED memory every run offers to its bodies and its parent hook. */
#define MP_SHARED_BYTES (64 * 1024)

typedef struct mp_ctx {
    int rank;
    int nranks;
    coll_comm_t comm; /* NULL with manual_init; a body that frees it sets it to NULL */
    coll_unique_id_t id;
    void *shared; /* MP_SHARED_BYTES, zeroed, common to all ranks and the parent */
    void *arg;
    int fatal; /* set by the body: the harness aborts the communicator instead of destroying it */
} mp_ctx_t;

typedef struct mp_parent {
    int nranks;
    const pid_t *pids;
    const int *exited; /* exited[r] != 0 once rank r was reaped */
    void *shared;
    void *arg;
} mp_parent_t;

typedef struct mp_opts {
    const char *name; /* printed in failure messages */
    int nranks;
    double deadline_s;       /* the parent kills every rank still running after this */
    int manual_init;         /* the body calls coll_comm_init_rank itself (ctx->id) */
    int no_id;               /* no unique id (and no root thread): ctx->id is all zero */
    int expect_sigkill_rank; /* this rank is expected to die by SIGKILL; -1 for none */
    void (*body)(mp_ctx_t *ctx);
    void (*parent_poll)(mp_parent_t *p); /* optional, called every few ms while ranks run */
    void (*parent_done)(mp_parent_t *p); /* optional, called once after every rank was reaped */
    void *arg;
} mp_opts_t;

/* Per-process counters (a child starts at zero; the parent adds the children's counts). */
extern int mp_rank; /* -1 in the parent */
extern long mp_passed;
extern long mp_failed;

/* Call first in main(): line-buffered output, COLL_SOCKET_IFNAME=lo unless set. */
void mp_init(void);
/* Print "N passed, M failed" and return the exit code (0, or 1 on any failure). */
int mp_finish(void);
/* Run one multi-process test; returns the number of failures it added. */
long mp_run(const mp_opts_t *opts);

void mp_check(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define CHECK(cond, ...) mp_check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)
/* Record a failure / a pass without a condition. */
void mp_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mp_pass(void);
void mp_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The enum name of a result code ("COLL_ERR_TIMEOUT"), from the header's X-macro. */
const char *mp_result_name(coll_result_t rc);
/* Checks rc == expected; on mismatch prints both names and coll_get_last_error(). */
#define CHECK_RC(rc, expected, ...) mp_check_rc((rc), (expected), __FILE__, __LINE__, __VA_ARGS__)
int mp_check_rc(coll_result_t rc, coll_result_t expected, const char *file, int line,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* Monotonic seconds (CLOCK_MONOTONIC: comparable between processes of one machine). */
double mp_now(void);
void mp_sleep(double seconds);
/* Case-insensitive substring test. */
int mp_contains(const char *haystack, const char *needle);
/* Does msg name rank r ("rank 2", "ranks 1, 2", "rank=2", "ranks [0,2]")? */
int mp_mentions_rank(const char *msg, int r);
/* Integer environment variable, or def when unset or malformed. */
int mp_env_int(const char *name, int def);

/* Shared-memory helpers for bodies (sequentially consistent). */
static inline long mp_load(const long *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
static inline void mp_store(long *p, long v)
{
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
static inline long mp_add(long *p, long v)
{
    return __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST);
}
static inline double mp_load_d(const double *p)
{
    double v;
    __atomic_load(p, &v, __ATOMIC_SEQ_CST);
    return v;
}
static inline void mp_store_d(double *p, double v)
{
    __atomic_store(p, &v, __ATOMIC_SEQ_CST);
}

/* Buffers with guard bytes on both sides, to catch writes outside the result range. */
#define MP_GUARD_BYTES 256
typedef struct mp_buf {
    unsigned char *base; /* allocation */
    unsigned char *p;    /* user area */
    size_t bytes;
    int shared; /* base came from coll_mem_alloc (MP_MEM, see mp_buf_alloc) */
    int device; /* base came from the GPU plugin (MP_MEM=fakegpu) */
} mp_buf_t;
/* Allocate bytes (may be 0) with guards; the user area is filled with `fill`. With MP_MEM=coll
 * the allocation comes from coll_mem_alloc (the single-copy path); MP_MEM=coll-odd: on odd
 * ranks only, so that some ranks' buffers cannot be shared. */
void *mp_buf_alloc(mp_buf_t *b, size_t bytes, int fill);
/* MP_MEM=fakegpu: buffers are device memory of the fake GPU plugin that COLL_CUDA_PLUGIN names
 * (host-accessible, so the checks read them directly); calls on them run on the default stream,
 * and mp_dev_sync waits for it before a result is checked. A no-op otherwise. */
void mp_dev_sync(void);
/* 1 when both guards are intact (prints the first damaged byte otherwise). */
int mp_buf_guards_ok(const mp_buf_t *b, const char *what);
void mp_buf_free(mp_buf_t *b);

#endif
