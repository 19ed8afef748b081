/*
 * coll-perf: kcoll's benchmark, in the style of nccl-tests.
 *
 * Run one process per rank under coll-run (which sets COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS):
 *   coll-run -n 4 coll-perf -C all_reduce -b 8 -e 64M -f 2 -d float32 -o sum -c 1
 * or, as in a pod, with the rank, world size and root from the kcoll agent (COLL_AGENT_SOCKET,
 * coll_comm_init_agent), which coll-run --agent sets up:
 *   coll-run -n 4 --agent coll-perf -C all_reduce -b 8 -e 64M -f 2 -c 1
 *
 * Flags follow nccl-tests where nccl-tests has them (-b -e -f -i -n -w -c -d -o -r -z); nccl-tests
 * has one binary per collective, so the collective is coll-perf's own -C/--collective.
 *
 * Sizes follow nccl-tests: "size" is the total buffer (for all_gather, reduce_scatter and
 * all_to_all nranks * the per-rank count), "count" the count passed to the call. Bus bandwidth
 * uses nccl-tests' factors so that figures are comparable between libraries and rank counts.
 *
 * Every result is checked (unless --check 0) against a value computed here, independently of the
 * library, from each rank's known input pattern: small integers whose sums, products, minima,
 * maxima and averages are exact in every datatype, so the check is bit-exact.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* environ */
#endif
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "coll.h"

enum kind {
    K_ALL_REDUCE,
    K_ALL_GATHER,
    K_REDUCE_SCATTER,
    K_BROADCAST,
    K_REDUCE,
    K_ALL_TO_ALL,
    K_SENDRECV,
    K_NUM
};

static const struct {
    const char *name;
    int has_op;
    int has_root;
    int inplace_ok; /* coll.h defines an in-place form */
} kinds[K_NUM] = {
    [K_ALL_REDUCE] = {"all_reduce", 1, 0, 1},
    [K_ALL_GATHER] = {"all_gather", 0, 0, 1},
    [K_REDUCE_SCATTER] = {"reduce_scatter", 1, 0, 1},
    [K_BROADCAST] = {"broadcast", 0, 1, 1},
    [K_REDUCE] = {"reduce", 1, 1, 1},
    [K_ALL_TO_ALL] = {"all_to_all", 0, 0, 0},
    [K_SENDRECV] = {"sendrecv", 0, 0, 0},
};

static const char *const dt_names[COLL_NUM_DATATYPES] = {"int8",    "uint8",  "int32",   "uint32",
                                                         "int64",   "uint64", "float16", "bfloat16",
                                                         "float32", "float64"};
static const size_t dt_sizes[COLL_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};
static const char *const op_names[COLL_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};

struct opts {
    int kind_mask;
    int dt_mask;
    int op_mask;
    size_t minbytes, maxbytes, stepbytes;
    double stepfactor;
    int root, warmup, iters;
    int do_out, do_in;
    int check;
    const char *json;
};

struct result {
    double time_us, algbw, busbw;
    int64_t wrong; /* -1: not checked */
    int done;
};

/* The communicator is kept here only so that a fatal error can abort it, which tells the other
 * ranks at once instead of leaving them to time out. */
static coll_comm_t g_comm;
static int g_rank = -1;

static void fatal(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "coll-perf[rank %d]: ", g_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    if (g_comm != NULL)
        coll_comm_abort(g_comm);
    exit(1);
}

#define CHECK(call)                                                                                \
    do {                                                                                           \
        coll_result_t rc_ = (call);                                                                \
        if (rc_ != COLL_SUCCESS)                                                                   \
            fatal("%s failed at %s:%d: %s: %s", #call, __FILE__, __LINE__,                         \
                  coll_get_error_string(rc_), coll_get_last_error());                              \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- datatype helpers (independent of the library's kernels) ---- */

static int dt_is_float(coll_datatype_t dt)
{
    return dt >= COLL_FLOAT16;
}

static int dt_is_unsigned(coll_datatype_t dt)
{
    return dt == COLL_UINT8 || dt == COLL_UINT32 || dt == COLL_UINT64;
}

static uint16_t f32_to_bf16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x40);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static uint16_t f32_to_f16(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u)
        return sign | (ax > 0x7f800000u ? 0x7e00 : 0x7c00);
    if (ax >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return sign | 0x7c00;
    if (ax < 0x38800000u) /* below 2^-14: subnormal half, exact scaling then one rounding */
        return sign | (uint16_t)lrintf(fabsf(f) * 16777216.0f);
    uint32_t h = ((((ax >> 23) - 127 + 15) << 10) | ((ax & 0x7fffffu) >> 13));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
        h++;
    return sign | (uint16_t)h;
}

/* Store an integer (which fits the type) or, for float types, a double, as element i. */
static void store_int(void *buf, size_t i, coll_datatype_t dt, int64_t v)
{
    char *p = (char *)buf + i * dt_sizes[dt];
    switch (dt) {
    case COLL_INT8:
    case COLL_UINT8: {
        uint8_t b = (uint8_t)v;
        memcpy(p, &b, 1);
        break;
    }
    case COLL_INT32:
    case COLL_UINT32: {
        uint32_t w = (uint32_t)v;
        memcpy(p, &w, 4);
        break;
    }
    case COLL_INT64:
    case COLL_UINT64: {
        uint64_t w = (uint64_t)v;
        memcpy(p, &w, 8);
        break;
    }
    default:
        break;
    }
}

static void store_float(void *buf, size_t i, coll_datatype_t dt, double d)
{
    char *p = (char *)buf + i * dt_sizes[dt];
    if (dt == COLL_FLOAT16) {
        uint16_t h = f32_to_f16((float)d);
        memcpy(p, &h, 2);
    } else if (dt == COLL_BFLOAT16) {
        uint16_t h = f32_to_bf16((float)d);
        memcpy(p, &h, 2);
    } else if (dt == COLL_FLOAT32) {
        float f = (float)d;
        memcpy(p, &f, 4);
    } else {
        memcpy(p, &d, 8);
    }
}

/* ---- input patterns ----
 * Reductions: values in -2..2 (0..4 for unsigned types); prod: 1 and 2 (and -1 for signed types),
 * with 2 on at most one rank in eight per element, so results stay exact in float16 and bfloat16
 * up to 120 ranks. Data movement: 0..100, different per source rank and position. Each pattern is
 * periodic in the element index, so inputs and expected values come from small tables. */
#define PERIOD_REDUCE 40 /* lcm of the periods 5 and 8 below */
#define PERIOD_MOVE   101

static int64_t val_reduce(coll_op_t op, coll_datatype_t dt, int rank, size_t idx)
{
    if (op == COLL_PROD) {
        if ((idx + (size_t)rank) % 8 == 0)
            return 2;
        return (!dt_is_unsigned(dt) && (idx * 3 + (size_t)rank) % 5 == 0) ? -1 : 1;
    }
    return (int64_t)((idx * 7 + (size_t)rank * 3) % 5) - (dt_is_unsigned(dt) ? 0 : 2);
}

static int64_t val_move(int rank, size_t idx)
{
    return (int64_t)(((size_t)rank * 31 + idx * 7) % PERIOD_MOVE);
}

static void store_val(void *buf, size_t i, coll_datatype_t dt, int64_t v)
{
    if (dt_is_float(dt))
        store_float(buf, i, dt, (double)v);
    else
        store_int(buf, i, dt, v);
}

/* The reduction over nranks ranks of element idx, exactly as coll.h defines it. */
static void expected_reduce(void *out, size_t i, coll_datatype_t dt, coll_op_t op, int nranks,
                            size_t idx)
{
    if (dt_is_float(dt)) {
        double acc = (double)val_reduce(op, dt, 0, idx);
        for (int s = 1; s < nranks; s++) {
            double v = (double)val_reduce(op, dt, s, idx);
            if (op == COLL_SUM || op == COLL_AVG)
                acc += v;
            else if (op == COLL_PROD)
                acc *= v;
            else if (op == COLL_MIN)
                acc = v < acc ? v : acc;
            else
                acc = v > acc ? v : acc;
        }
        if (op != COLL_AVG)
            store_float(out, i, dt, acc);
        else if (dt == COLL_FLOAT64)
            store_float(out, i, dt, acc / (double)nranks);
        else /* float32 quotient (the half types too), then one rounding to the type */
            store_float(out, i, dt, (double)((float)acc / (float)nranks));
        return;
    }
    uint64_t acc = (uint64_t)val_reduce(op, dt, 0, idx);
    for (int s = 1; s < nranks; s++) {
        int64_t v = val_reduce(op, dt, s, idx);
        if (op == COLL_SUM || op == COLL_AVG)
            acc += (uint64_t)v;
        else if (op == COLL_PROD)
            acc *= (uint64_t)v;
        else if (op == COLL_MIN)
            acc = v < (int64_t)acc ? (uint64_t)v : acc;
        else
            acc = v > (int64_t)acc ? (uint64_t)v : acc;
    }
    if (op == COLL_AVG) { /* wrapped sum in the type, then C division */
        int bits = (int)dt_sizes[dt] * 8;
        uint64_t mask = bits == 64 ? ~0ull : ((1ull << bits) - 1);
        uint64_t u = acc & mask;
        if (dt_is_unsigned(dt)) {
            acc = u / (uint64_t)nranks;
        } else {
            int64_t sv = (bits < 64 && (u >> (bits - 1))) ? (int64_t)(u | ~mask) : (int64_t)u;
            acc = (uint64_t)(sv / nranks);
        }
    }
    store_int(out, i, dt, (int64_t)acc);
}

/* Fill n elements of buf with pattern values for positions base.. of a table of `period`
 * prepared values. */
static void fill_from_table(void *buf, size_t n, const void *table, size_t period, size_t base,
                            size_t ts)
{
    char *p = buf;
    const char *t = table;
    size_t j = base % period;
    for (size_t k = 0; k < n; k++) {
        memcpy(p + k * ts, t + j * ts, ts);
        if (++j == period)
            j = 0;
    }
}

static int64_t count_wrong(const void *buf, size_t n, const void *table, size_t period, size_t base,
                           size_t ts)
{
    const char *p = buf;
    const char *t = table;
    size_t j = base % period;
    int64_t wrong = 0;
    for (size_t k = 0; k < n; k++) {
        wrong += memcmp(p + k * ts, t + j * ts, ts) != 0;
        if (++j == period)
            j = 0;
    }
    return wrong;
}

struct pattern {
    unsigned char in[PERIOD_MOVE * 8];  /* input table of one rank */
    unsigned char exp[PERIOD_MOVE * 8]; /* expected-value table */
};

static void make_reduce_tables(struct pattern *pt, coll_datatype_t dt, coll_op_t op, int rank,
                               int nranks)
{
    for (size_t j = 0; j < PERIOD_REDUCE; j++) {
        store_val(pt->in, j, dt, val_reduce(op, dt, rank, j));
        expected_reduce(pt->exp, j, dt, op, nranks, j);
    }
}

static void make_move_table(unsigned char *table, coll_datatype_t dt, int src)
{
    for (size_t j = 0; j < PERIOD_MOVE; j++)
        store_val(table, j, dt, val_move(src, j));
}

/* ---- one measurement ---- */

struct shape {
    size_t count;      /* count passed to the call */
    size_t send_elems; /* elements in the send buffer */
    size_t recv_elems;
    size_t bytes; /* reported size (nccl-tests: the larger of send and receive) */
};

static struct shape shape_of(enum kind k, size_t bytes, size_t ts, int nranks)
{
    struct shape s;
    size_t count = bytes / ts;
    size_t per = count / (size_t)nranks;
    switch (k) {
    case K_ALL_GATHER:
        s = (struct shape){per, per, per * nranks, per * nranks * ts};
        break;
    case K_REDUCE_SCATTER:
        s = (struct shape){per, per * nranks, per, per * nranks * ts};
        break;
    case K_ALL_TO_ALL:
        s = (struct shape){per, per * nranks, per * nranks, per * nranks * ts};
        break;
    default:
        s = (struct shape){count, count, count, count * ts};
        break;
    }
    return s;
}

static double bus_factor(enum kind k, int n)
{
    switch (k) {
    case K_ALL_REDUCE:
        return 2.0 * (n - 1) / n;
    case K_ALL_GATHER:
    case K_REDUCE_SCATTER:
    case K_ALL_TO_ALL:
        return (double)(n - 1) / n;
    default:
        return 1.0;
    }
}

struct ctx {
    coll_comm_t comm;
    int rank, nranks;
    const struct opts *o;
    unsigned char *sbuf, *rbuf; /* out-of-place buffers; in place uses rbuf alone */
};

static void barrier(struct ctx *c)
{
    int32_t x = 1, y = 0;
    CHECK(coll_all_reduce(&x, &y, 1, COLL_INT32, COLL_SUM, c->comm, NULL));
    if (y != c->nranks)
        fatal("barrier all_reduce returned %d, expected %d", (int)y, c->nranks);
}

static void run_once(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                     coll_op_t op, const void *send, void *recv)
{
    int next = (c->rank + 1) % c->nranks, prev = (c->rank + c->nranks - 1) % c->nranks;
    switch (k) {
    case K_ALL_REDUCE:
        CHECK(coll_all_reduce(send, recv, s->count, dt, op, c->comm, NULL));
        break;
    case K_ALL_GATHER:
        CHECK(coll_all_gather(send, recv, s->count, dt, c->comm, NULL));
        break;
    case K_REDUCE_SCATTER:
        CHECK(coll_reduce_scatter(send, recv, s->count, dt, op, c->comm, NULL));
        break;
    case K_BROADCAST:
        CHECK(coll_broadcast(send, recv, s->count, dt, c->o->root, c->comm, NULL));
        break;
    case K_REDUCE:
        CHECK(coll_reduce(send, recv, s->count, dt, op, c->o->root, c->comm, NULL));
        break;
    case K_ALL_TO_ALL:
        CHECK(coll_all_to_all(send, recv, s->count, dt, c->comm, NULL));
        break;
    default:
        CHECK(coll_group_start());
        CHECK(coll_send(send, s->count, dt, next, c->comm, NULL));
        CHECK(coll_recv(recv, s->count, dt, prev, c->comm, NULL));
        CHECK(coll_group_end());
        break;
    }
}

/* Fill the send side with this rank's input, the receive side with a marker that no pattern
 * value has, and point send/recv at the right places for the placement. */
static void prepare(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                    coll_op_t op, int inplace, struct pattern *pt, void **send, void **recv)
{
    size_t ts = dt_sizes[dt];
    int reduces = kinds[k].has_op;
    if (reduces)
        make_reduce_tables(pt, dt, op, c->rank, c->nranks);
    else
        make_move_table(pt->in, dt, k == K_BROADCAST ? c->o->root : c->rank);
    size_t period = reduces ? PERIOD_REDUCE : PERIOD_MOVE;
    unsigned char *sb = inplace ? c->rbuf : c->sbuf;
    unsigned char *rb = c->rbuf;
    size_t in_off = 0; /* where the input starts, in elements of the in-place buffer */
    if (inplace && k == K_ALL_GATHER)
        in_off = (size_t)c->rank * s->count;
    size_t total = s->send_elems > s->recv_elems ? s->send_elems : s->recv_elems;
    memset(rb, 0xee, total * ts);
    if (k == K_BROADCAST && c->rank != c->o->root) /* only the root's input may reach anyone */
        memset(sb, 0xee, s->send_elems * ts);
    else
        fill_from_table(sb + in_off * ts, s->send_elems, pt->in, period, 0, ts);
    *send = sb + in_off * ts;
    *recv = rb;
    if (inplace && k == K_REDUCE_SCATTER)
        *recv = rb + (size_t)c->rank * s->count * ts;
}

static int64_t verify(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                      struct pattern *pt, const void *recv)
{
    size_t ts = dt_sizes[dt];
    const unsigned char *r = recv;
    int64_t wrong = 0;
    unsigned char table[PERIOD_MOVE * 8];
    switch (k) {
    case K_ALL_REDUCE:
        return count_wrong(r, s->count, pt->exp, PERIOD_REDUCE, 0, ts);
    case K_REDUCE_SCATTER:
        return count_wrong(r, s->count, pt->exp, PERIOD_REDUCE, (size_t)c->rank * s->count, ts);
    case K_REDUCE:
        if (c->rank != c->o->root)
            return 0;
        return count_wrong(r, s->count, pt->exp, PERIOD_REDUCE, 0, ts);
    case K_BROADCAST:
        return count_wrong(r, s->count, pt->in, PERIOD_MOVE, 0, ts);
    case K_ALL_GATHER:
        for (int src = 0; src < c->nranks; src++) {
            make_move_table(table, dt, src);
            wrong +=
                count_wrong(r + (size_t)src * s->count * ts, s->count, table, PERIOD_MOVE, 0, ts);
        }
        return wrong;
    case K_ALL_TO_ALL:
        for (int src = 0; src < c->nranks; src++) {
            make_move_table(table, dt, src);
            wrong += count_wrong(r + (size_t)src * s->count * ts, s->count, table, PERIOD_MOVE,
                                 (size_t)c->rank * s->count, ts);
        }
        return wrong;
    default:
        make_move_table(table, dt, (c->rank + c->nranks - 1) % c->nranks);
        return count_wrong(r, s->count, table, PERIOD_MOVE, 0, ts);
    }
}

static void measure(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                    coll_op_t op, int inplace, struct result *res)
{
    struct pattern pt;
    void *send, *recv;
    prepare(c, k, s, dt, op, inplace, &pt, &send, &recv);
    barrier(c);
    int64_t wrong = -1;
    run_once(c, k, s, dt, op, send, recv);
    if (c->o->check) {
        int64_t mine = verify(c, k, s, dt, &pt, recv);
        CHECK(coll_all_reduce(&mine, &wrong, 1, COLL_INT64, COLL_SUM, c->comm, NULL));
    }
    for (int i = 0; i < c->o->warmup; i++)
        run_once(c, k, s, dt, op, send, recv);
    barrier(c);
    double t0 = now_s();
    for (int i = 0; i < c->o->iters; i++)
        run_once(c, k, s, dt, op, send, recv);
    double mine = (now_s() - t0) / (c->o->iters > 0 ? c->o->iters : 1), worst = 0;
    CHECK(coll_all_reduce(&mine, &worst, 1, COLL_FLOAT64, COLL_MAX, c->comm, NULL));
    res->time_us = worst * 1e6;
    res->algbw = worst > 0 ? (double)s->bytes / 1e9 / worst : 0;
    res->busbw = res->algbw * bus_factor(k, c->nranks);
    res->wrong = wrong;
    res->done = 1;
}

/* ---- output ---- */

static void print_table_header(const char *coll)
{
    printf("#\n# Collective: %s\n#\n", coll);
    printf("# %10s %12s %8s %6s %6s  %30s  %30s\n", "", "", "", "", "",
           "------------ out-of-place ----", "-------------- in-place ------");
    printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type",
           "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
    printf("# %10s %12s %8s %6s %6s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "", "",
           "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void print_result(const struct result *r)
{
    if (!r->done) {
        printf(" %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
        return;
    }
    printf(" %9.2f %7.3f %7.3f", r->time_us, r->algbw, r->busbw);
    if (r->wrong < 0)
        printf(" %6s", "N/A");
    else
        printf(" %6" PRId64, r->wrong);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned)(unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void json_row(FILE *f, int *first, const char *coll, int nranks, const struct shape *s,
                     const char *type, const char *op, int root, const char *placement,
                     const struct result *r)
{
    if (!r->done)
        return;
    fprintf(f,
            "%s\n  {\"collective\": \"%s\", \"nranks\": %d, \"size\": %zu, \"count\": %zu, "
            "\"type\": \"%s\", \"op\": \"%s\", \"root\": %d, \"placement\": \"%s\", "
            "\"time_us\": %.3f, \"algbw_gbs\": %.6f, \"busbw_gbs\": %.6f, \"wrong\": ",
            *first ? "" : ",", coll, nranks, s->bytes, s->count, type, op, root, placement,
            r->time_us, r->algbw, r->busbw);
    if (r->wrong < 0)
        fprintf(f, "null}");
    else
        fprintf(f, "%" PRId64 "}", r->wrong);
    *first = 0;
}

/* ---- arguments and environment ---- */

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || v < 0)
        return -1;
    double mult = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1024.0, end++;
        break;
    case 'm':
    case 'M':
        mult = 1024.0 * 1024, end++;
        break;
    case 'g':
    case 'G':
        mult = 1024.0 * 1024 * 1024, end++;
        break;
    default:
        break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

static int parse_int(const char *s, int minv, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < minv || v > 1000000000)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_mask(const char *s, const char *const *names, int n, const char *const *alias,
                      const int *alias_val, int *mask)
{
    if (strcmp(s, "all") == 0) {
        *mask = (1 << n) - 1;
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *mask = 1 << i;
            return 0;
        }
    for (int i = 0; alias != NULL && alias[i] != NULL; i++)
        if (strcmp(s, alias[i]) == 0) {
            *mask = 1 << alias_val[i];
            return 0;
        }
    return -1;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(
        f,
        "usage: coll-run -n N [--agent] %s [options]\n"
        "  -C, --collective NAME   all_reduce, all_gather, reduce_scatter, broadcast, reduce,\n"
        "                          all_to_all, sendrecv or all (default all_reduce)\n"
        "  -b, --minbytes SIZE     smallest total size, K/M/G suffixes (default 32M)\n"
        "  -e, --maxbytes SIZE     largest total size (default 32M)\n"
        "  -f, --stepfactor F      multiply the size by F each step (default 2)\n"
        "  -i, --stepbytes SIZE    add SIZE each step instead of multiplying\n"
        "  -d, --datatype T        int8 uint8 int32 uint32 int64 uint64 float16 bfloat16\n"
        "                          float32 float64 or all (default float32)\n"
        "  -o, --op OP             sum prod min max avg or all (default sum)\n"
        "  -r, --root R            root of broadcast and reduce (default 0)\n"
        "  -w, --warmup_iters N    untimed iterations (default 5)\n"
        "  -n, --iters N           timed iterations (default 20)\n"
        "  -z, --placement P       out (out-of-place), in (in-place) or both (default)\n"
        "  -c, --check 0|1         check every result exactly (default 1), as nccl-tests' -c\n"
        "      --json FILE         also write the rows as JSON to FILE ('-': stdout, no table)\n"
        "  -h, --help\n"
        "The communicator comes from COLL_UNIQUE_ID, COLL_RANK and COLL_NRANKS (coll-run sets\n"
        "them) or, when COLL_UNIQUE_ID is not set, from the kcoll agent at COLL_AGENT_SOCKET\n"
        "(coll_comm_init_agent: in a pod with the kcoll sidecar, or under coll-run --agent).\n",
        prog);
}

static void parse_args(int argc, char **argv, struct opts *o)
{
    static const char *const dt_alias[] = {"half",   "fp16", "bf16", "float", "fp32",
                                           "double", "fp64", "char", "int",   NULL};
    static const int dt_alias_val[] = {6, 6, 7, 8, 8, 9, 9, 0, 2};
    static const struct option longopts[] = {{"collective", required_argument, NULL, 'C'},
                                             {"minbytes", required_argument, NULL, 'b'},
                                             {"maxbytes", required_argument, NULL, 'e'},
                                             {"stepfactor", required_argument, NULL, 'f'},
                                             {"stepbytes", required_argument, NULL, 'i'},
                                             {"datatype", required_argument, NULL, 'd'},
                                             {"op", required_argument, NULL, 'o'},
                                             {"root", required_argument, NULL, 'r'},
                                             {"warmup_iters", required_argument, NULL, 'w'},
                                             {"iters", required_argument, NULL, 'n'},
                                             {"placement", required_argument, NULL, 'z'},
                                             {"check", required_argument, NULL, 'c'},
                                             {"json", required_argument, NULL, 'J'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *kind_names[K_NUM];
    for (int i = 0; i < K_NUM; i++)
        kind_names[i] = kinds[i].name;
    *o = (struct opts){.kind_mask = 1 << K_ALL_REDUCE,
                       .dt_mask = 1 << COLL_FLOAT32,
                       .op_mask = 1 << COLL_SUM,
                       .minbytes = 32u << 20,
                       .maxbytes = 32u << 20,
                       .stepfactor = 2,
                       .warmup = 5,
                       .iters = 20,
                       .do_out = 1,
                       .do_in = 1,
                       .check = 1};
    int c, bad = 0;
    while ((c = getopt_long(argc, argv, "C:c:b:e:f:i:d:o:r:w:n:z:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'C':
            bad = parse_mask(optarg, kind_names, K_NUM, NULL, NULL, &o->kind_mask);
            break;
        case 'b':
            bad = parse_size(optarg, &o->minbytes);
            break;
        case 'e':
            bad = parse_size(optarg, &o->maxbytes);
            break;
        case 'f':
            o->stepfactor = strtod(optarg, NULL);
            bad = !(o->stepfactor > 1.0);
            break;
        case 'i':
            bad = parse_size(optarg, &o->stepbytes) || o->stepbytes == 0;
            break;
        case 'd':
            bad = parse_mask(optarg, dt_names, COLL_NUM_DATATYPES, dt_alias, dt_alias_val,
                             &o->dt_mask);
            break;
        case 'o':
            bad = parse_mask(optarg, op_names, COLL_NUM_OPS, NULL, NULL, &o->op_mask);
            break;
        case 'r':
            bad = parse_int(optarg, 0, &o->root);
            break;
        case 'w':
            bad = parse_int(optarg, 0, &o->warmup);
            break;
        case 'n':
            bad = parse_int(optarg, 1, &o->iters);
            break;
        case 'z':
            o->do_out = strcmp(optarg, "out") == 0 || strcmp(optarg, "oop") == 0 ||
                        strcmp(optarg, "both") == 0;
            o->do_in = strcmp(optarg, "in") == 0 || strcmp(optarg, "ip") == 0 ||
                       strcmp(optarg, "both") == 0;
            bad = !o->do_out && !o->do_in;
            break;
        case 'c':
            if (strcmp(optarg, "0") != 0 && strcmp(optarg, "1") != 0) {
                int is_coll = 0;
                for (int i = 0; i < K_NUM; i++)
                    is_coll |= strcmp(optarg, kind_names[i]) == 0;
                fprintf(stderr, "coll-perf: invalid value '%s' for -c/--check (0 or 1)%s%s\n",
                        optarg, is_coll ? "; the collective is -C/--collective " : "",
                        is_coll ? optarg : "");
                usage(stderr, argv[0]);
                exit(2);
            }
            o->check = strcmp(optarg, "1") == 0;
            break;
        case 'J':
            o->json = optarg;
            break;
        case 'h':
            usage(stdout, argv[0]);
            exit(0);
        default:
            usage(stderr, argv[0]);
            exit(2);
        }
        if (bad) {
            fprintf(stderr, "coll-perf: invalid value '%s' for -%c\n", optarg, c);
            usage(stderr, argv[0]);
            exit(2);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "coll-perf: unexpected argument '%s'\n", argv[optind]);
        exit(2);
    }
    if (o->minbytes > o->maxbytes) {
        fprintf(stderr, "coll-perf: -b (%zu) is larger than -e (%zu)\n", o->minbytes, o->maxbytes);
        exit(2);
    }
}

static const char *need_env(const char *name)
{
    const char *v = getenv(name);
    if (v == NULL || *v == '\0') {
        fprintf(stderr,
                "coll-perf: %s is not set: run under coll-run (or coll-run --agent), set "
                "COLL_UNIQUE_ID/COLL_RANK/COLL_NRANKS, or set COLL_AGENT_SOCKET to the kcoll "
                "agent's socket\n",
                name);
        exit(2);
    }
    return v;
}

/* Where the communicator came from, for the header. */
static const char *g_agent_socket; /* non-NULL: coll_comm_init_agent */

struct rank_info {
    char host[56];
    int32_t pid;
    int32_t rank;
};

static void print_header(struct ctx *c, int argc, char **argv)
{
    struct rank_info mine = {.pid = (int32_t)getpid(), .rank = c->rank};
    gethostname(mine.host, sizeof(mine.host) - 1);
    struct rank_info *all = calloc((size_t)c->nranks, sizeof(*all));
    if (all == NULL)
        fatal("out of memory");
    CHECK(coll_all_gather(&mine, all, sizeof(mine), COLL_UINT8, c->comm, NULL));
    int version = 0;
    CHECK(coll_get_version(&version));
    if (c->rank == 0 && !(c->o->json && strcmp(c->o->json, "-") == 0)) {
        printf("# coll-perf:");
        for (int i = 1; i < argc; i++)
            printf(" %s", argv[i]);
        printf("\n# kcoll %s (version code %d, header %d), nranks %d, host %s\n",
               coll_get_version_string(), version, COLL_VERSION, c->nranks, mine.host);
        if (g_agent_socket != NULL)
            printf("# communicator: coll_comm_init_agent; rank, world size (%d), root and pins "
                   "supplied by the kcoll agent at %s (rank 0's)\n",
                   c->nranks, g_agent_socket);
        else
            printf("# communicator: coll_comm_init_rank from COLL_UNIQUE_ID, COLL_RANK, "
                   "COLL_NRANKS\n");
        printf("# minBytes %zu maxBytes %zu step: %g(%s) warmup iters: %d iters: %d check: %d "
               "placement: %s\n",
               c->o->minbytes, c->o->maxbytes,
               c->o->stepbytes ? (double)c->o->stepbytes : c->o->stepfactor,
               c->o->stepbytes ? "bytes" : "factor", c->o->warmup, c->o->iters, c->o->check,
               c->o->do_out && c->o->do_in ? "both" : (c->o->do_out ? "out" : "in"));
        for (char **e = environ; *e != NULL; e++) {
            if (strncmp(*e, "COLL_", 5) != 0)
                continue;
            if (strncmp(*e, "COLL_UNIQUE_ID=", 15) == 0)
                printf("# env: COLL_UNIQUE_ID=(set)\n");
            else
                printf("# env: %s\n", *e);
        }
        for (int i = 0; i < c->nranks; i++)
            printf("#  Rank %3d Pid %7d on %s\n", (int)all[i].rank, (int)all[i].pid, all[i].host);
        fflush(stdout);
    }
    free(all);
}

int main(int argc, char **argv)
{
    struct opts o;
    parse_args(argc, argv, &o);

    struct ctx c = {.o = &o};
    const char *id_str = getenv(COLL_ENV_UNIQUE_ID);
    const char *agent_sock = getenv("COLL_AGENT_SOCKET");
    if ((id_str == NULL || *id_str == '\0') && agent_sock != NULL && *agent_sock != '\0') {
        /* As in a pod: rank, world size, root endpoint and pins come from the agent. */
        g_agent_socket = agent_sock;
        CHECK(coll_comm_init_agent(&c.comm));
        g_comm = c.comm;
        CHECK(coll_comm_count(c.comm, &c.nranks));
        CHECK(coll_comm_user_rank(c.comm, &c.rank));
        g_rank = c.rank;
    } else {
        id_str = need_env(COLL_ENV_UNIQUE_ID);
        if (parse_int(need_env(COLL_ENV_RANK), 0, &c.rank) ||
            parse_int(need_env(COLL_ENV_NRANKS), 1, &c.nranks) || c.rank >= c.nranks) {
            fprintf(stderr,
                    "coll-perf: COLL_RANK=%s / COLL_NRANKS=%s are not a valid rank and size\n",
                    getenv(COLL_ENV_RANK), getenv(COLL_ENV_NRANKS));
            return 2;
        }
        g_rank = c.rank;
        if (o.root >= c.nranks) {
            fprintf(stderr, "coll-perf: root %d is not a rank of %d\n", o.root, c.nranks);
            return 2;
        }
        coll_unique_id_t id;
        CHECK(coll_unique_id_from_string(&id, id_str));
        CHECK(coll_comm_init_rank(&c.comm, c.nranks, id, c.rank));
        g_comm = c.comm;
        int n = 0, r = -1;
        CHECK(coll_comm_count(c.comm, &n));
        CHECK(coll_comm_user_rank(c.comm, &r));
        if (n != c.nranks || r != c.rank)
            fatal("communicator reports rank %d of %d, the environment says %d of %d", r, n, c.rank,
                  c.nranks);
    }
    if (o.root >= c.nranks) /* the agent's world size is known only now; every rank agrees */
        fatal("root %d is not a rank of %d", o.root, c.nranks);

    size_t alloc = o.maxbytes + 64;
    c.sbuf = malloc(alloc);
    c.rbuf = malloc(alloc);
    if (c.sbuf == NULL || c.rbuf == NULL)
        fatal("cannot allocate 2 x %zu bytes", alloc);

    FILE *json = NULL;
    int json_first = 1;
    int table = !(o.json && strcmp(o.json, "-") == 0);
    if (c.rank == 0 && o.json != NULL) {
        json = table ? fopen(o.json, "w") : stdout;
        if (json == NULL)
            fatal("cannot open %s: %s", o.json, strerror(errno));
        char host[64] = "";
        gethostname(host, sizeof(host) - 1);
        fprintf(json, "{\"tool\": \"coll-perf\", \"version\": ");
        json_string(json, coll_get_version_string());
        fprintf(json, ", \"nranks\": %d, \"host\": ", c.nranks);
        json_string(json, host);
        fprintf(json, ", \"warmup\": %d, \"iters\": %d, \"check\": %d, \"rows\": [", o.warmup,
                o.iters, o.check);
    }
    print_header(&c, argc, argv);

    int64_t total_wrong = 0;
    double bw_sum = 0;
    int bw_rows = 0;
    for (int k = 0; k < K_NUM; k++) {
        if (!(o.kind_mask & (1 << k)))
            continue;
        if (c.rank == 0 && table)
            print_table_header(kinds[k].name);
        for (int dt = 0; dt < COLL_NUM_DATATYPES; dt++) {
            if (!(o.dt_mask & (1 << dt)))
                continue;
            for (int op = 0; op < COLL_NUM_OPS; op++) {
                if (kinds[k].has_op ? !(o.op_mask & (1 << op)) : op != 0)
                    continue;
                size_t bytes = o.minbytes;
                for (;;) {
                    struct shape s = shape_of(k, bytes, dt_sizes[dt], c.nranks);
                    struct result out = {0}, in = {0};
                    if (o.do_out)
                        measure(&c, k, &s, dt, op, 0, &out);
                    if (o.do_in && kinds[k].inplace_ok)
                        measure(&c, k, &s, dt, op, 1, &in);
                    const char *opname = kinds[k].has_op ? op_names[op] : "none";
                    int root = kinds[k].has_root ? o.root : -1;
                    if (c.rank == 0 && table) {
                        printf("  %10zu %12zu %8s %6s %6d", s.bytes, s.count, dt_names[dt], opname,
                               root);
                        print_result(&out);
                        print_result(&in);
                        printf("\n");
                        fflush(stdout);
                    }
                    if (json != NULL) {
                        json_row(json, &json_first, kinds[k].name, c.nranks, &s, dt_names[dt],
                                 opname, root, "out", &out);
                        json_row(json, &json_first, kinds[k].name, c.nranks, &s, dt_names[dt],
                                 opname, root, "in", &in);
                    }
                    const struct result *rs[2] = {&out, &in};
                    for (int j = 0; j < 2; j++) {
                        if (!rs[j]->done)
                            continue;
                        total_wrong += rs[j]->wrong > 0 ? rs[j]->wrong : 0;
                        bw_sum += rs[j]->busbw;
                        bw_rows++;
                    }
                    if (bytes >= o.maxbytes)
                        break;
                    size_t next =
                        o.stepbytes ? bytes + o.stepbytes : (size_t)((double)bytes * o.stepfactor);
                    bytes = next > bytes ? next : bytes + 1;
                    if (bytes > o.maxbytes)
                        break;
                }
            }
        }
    }

    if (json != NULL) {
        fprintf(json, "\n]}\n");
        if (json != stdout)
            fclose(json);
    }
    if (c.rank == 0 && table) {
        printf("# Out of bounds values : %" PRId64 " %s\n", total_wrong,
               total_wrong ? "FAILED" : (o.check ? "OK" : "(not checked)"));
        printf("# Avg bus bandwidth    : %g\n#\n", bw_rows ? bw_sum / bw_rows : 0.0);
    }
    free(c.sbuf);
    free(c.rbuf);
    g_comm = NULL;
    CHECK(coll_comm_destroy(c.comm));
    return total_wrong > 0 ? 1 : 0;
}
