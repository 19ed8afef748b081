/*
 * Diagnostics test harness (tests/diag): a forked "root holder" process creates the unique id
 * over loopback and keeps the bootstrap root (a thread) alive, with its log captured like a
 * rank's; the parent stays single-threaded and forks one process per rank with stdout and stderr
 * captured through a pipe, and lets the test drive the job from the parent: pump output, read
 * per-rank results from shared memory, stop or kill ranks, connect to their ports. Ranks are either
 * forked bodies (mode body) or exec'd programs (mode exec: they print one DIAG-RESULT line that the
 * parent parses).
 *
 * Each rank leaves its result (the code of the call under test, its message and when it
 * returned) in shared memory, so that the assertions live in the parent and every test prints
 * one closing "N passed, M failed" line.
 */
#ifndef DIAG_DH_H
#define DIAG_DH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "coll.h"

#define DH_MAX_RANKS  64
#define DH_MSG_BYTES  2048
#define DH_USER_LONGS 256

typedef struct dh_out {
    int rc;       /* code of the call under test (coll_result_t); -1 before the rank got there */
    int done;     /* the rank filled this record */
    double t0;    /* dh_now() when that call started (dh_begin) */
    double t;     /* dh_now() when that call returned */
    long iters;   /* loop bodies: completed iterations */
    long checked; /* loop bodies: results verified */
    long bad;     /* loop bodies: wrong elements seen */
    char what[64];
    char msg[DH_MSG_BYTES];
} dh_out_t;

typedef struct dh_shared {
    long passed[DH_MAX_RANKS];
    long failed[DH_MAX_RANKS];
    long reported[DH_MAX_RANKS];
    dh_out_t out[DH_MAX_RANKS];
    long user[DH_USER_LONGS]; /* free for tests (use dh_load / dh_store) */
    double t_event;           /* e.g. when a rank was stopped */
} dh_shared_t;

typedef struct dh_ctx {
    int rank;
    int nranks;
    coll_unique_id_t id;
    dh_shared_t *sh;
    void *arg;
} dh_ctx_t;

typedef struct dh_job dh_job_t;

typedef struct dh_opts {
    const char *name;
    int nranks;
    double deadline_s;  /* every rank still running after this is killed (a hang) */
    const char *ifname; /* interface spec for the unique id ("lo" when NULL) */
    int root_dead;      /* kill the root's holder process before the ranks start */
    int root_forked;    /* the holder forks a child that outlives it (a DataLoader worker) */
    void (*body)(dh_ctx_t *ctx);
    /* exec mode (body == NULL): argv for rank r; COLL_UNIQUE_ID, COLL_RANK and COLL_NRANKS are
     * set in the environment of the exec'd program. */
    char *const *(*argv_for)(int rank, void *arg);
    void *arg;
    int quiet; /* do not echo the ranks' output */
    /* called after the unique id exists and before any rank starts */
    void (*before_ranks)(dh_job_t *j, void *arg);
} dh_opts_t;

/* Counters of this process (a forked rank starts at zero; the parent adds the ranks' counts). */
extern long dh_passed, dh_failed;
extern int dh_rank; /* -1 in the parent */

void dh_init(void);
/* Print "N passed, M failed" and return the exit code. */
int dh_finish(void);
/* Print the reason and exit 77 (SKIPPED). */
void dh_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Start a job; NULL (after recording a failure) when the id or a fork failed. */
dh_job_t *dh_start(const dh_opts_t *o);
/* Read the ranks' output and reap exited ranks for up to `seconds`; returns ranks still
 * running. */
int dh_pump(dh_job_t *j, double seconds);
/* Pump until every rank exited or the deadline passed (then kill the rest, a failure); add the
 * ranks' counters; report ranks that crashed. Returns the number of failures the job added. */
long dh_wait(dh_job_t *j);
void dh_free(dh_job_t *j);
/* Pump until the output of rank (-1: the root holder) contains needle, or seconds passed;
 * returns 1 when found. */
int dh_wait_output(dh_job_t *j, int rank, const char *needle, double seconds);

dh_shared_t *dh_shared(dh_job_t *j);
pid_t dh_pid(dh_job_t *j, int rank);
int dh_exited(dh_job_t *j, int rank);
/* Everything rank r wrote to stdout and stderr so far (rank -1: the root holder). */
const char *dh_output(dh_job_t *j, int rank);
/* The id string of the job. */
const char *dh_id_string(dh_job_t *j);
/* The port of the bootstrap root in the unique id (kcoll1:ADDR:PORT:SECRET), -1 if none. */
int dh_id_port(dh_job_t *j);
double dh_t_start(dh_job_t *j); /* when the unique id was created */
/* Mark a rank whose death by this signal is expected (not a failure). */
void dh_expect_signal(dh_job_t *j, int rank, int sig);
/* Parse "DIAG-RESULT rank=R rc=C t=T msg=..." lines of exec'd ranks into the shared records. */
void dh_parse_results(dh_job_t *j);

/* Child side: note the start of the call under test, then record its result (message =
 * coll_get_last_error()) in record `slot` (normally ctx->rank). */
void dh_begin(dh_ctx_t *ctx, int slot);
void dh_record_slot(dh_ctx_t *ctx, int slot, const char *what, coll_result_t rc);
void dh_record(dh_ctx_t *ctx, const char *what, coll_result_t rc);

/* ---- checks ---- */
int dh_check(int ok, const char *file, int line, const char *expr, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
#define CHECK(cond, ...) dh_check(!!(cond), __FILE__, __LINE__, #cond, __VA_ARGS__)
void dh_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void dh_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
const char *dh_rc_name(int rc);
/* rc == expected, printing both names and msg on failure. */
#define CHECK_RC(rc, expected, msg, ...)                                                           \
    dh_check_rc((rc), (expected), (msg), __FILE__, __LINE__, __VA_ARGS__)
int dh_check_rc(int rc, int expected, const char *msg, const char *file, int line, const char *fmt,
                ...) __attribute__((format(printf, 6, 7)));
/* msg contains needle (case-sensitive), printing msg on failure. */
#define CHECK_HAS(msg, needle, ...) dh_check_has((msg), (needle), __FILE__, __LINE__, __VA_ARGS__)
int dh_check_has(const char *msg, const char *needle, const char *file, int line, const char *fmt,
                 ...) __attribute__((format(printf, 5, 6)));

/* ---- helpers ---- */
double dh_now(void);
void dh_sleep(double seconds);
int dh_contains(const char *haystack, const char *needle);
/* Lines of text containing every one of the needles (NULL-terminated list). */
int dh_count_lines(const char *text, const char *needle, const char *needle2);
/* Does msg name rank r as "rank r" (not "rank r0")? */
int dh_names_rank(const char *msg, int r);
/* setenv in a forked rank (the library reads its environment at init). */
void dh_setenv(const char *name, const char *value);

static inline long dh_load(const long *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}
static inline void dh_store(long *p, long v)
{
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}
static inline long dh_add(long *p, long v)
{
    return __atomic_add_fetch(p, v, __ATOMIC_SEQ_CST);
}

#endif
