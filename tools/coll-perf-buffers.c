/*
 * coll-perf's buffers: the input pattern each rank fills in, the result every rank must see
 * (computed here from the patterns, independently of the library's kernels), and the exact
 * check of the receive buffer.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "coll_perf.h"

/* ---- datatype helpers (independent of the library's kernels) ---- */

static int dt_is_float(coll_datatype_t dt)
{
    return dt >= COLL_FLOAT16;
}

static int dt_is_fp8(coll_datatype_t dt)
{
    return dt == COLL_FLOAT8_E4M3 || dt == COLL_FLOAT8_E5M2;
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

/* OCP float8 (E4M3: 3 mantissa bits, bias 7, largest 448; E5M2: 2, 15, 57344), nearest even,
 * saturating; the patterns below only produce exact values. */
static uint8_t f64_to_fp8(double d, coll_datatype_t dt)
{
    int e4 = dt == COLL_FLOAT8_E4M3;
    int mbits = e4 ? 3 : 2, bias = e4 ? 7 : 15;
    uint8_t sign = signbit(d) ? 0x80 : 0;
    double a = fabs(d), maxv = e4 ? 448.0 : 57344.0;
    if (isnan(d))
        return sign | (e4 ? 0x7f : 0x7e);
    if (a == 0)
        return sign;
    int e;
    frexp(a, &e); /* a in [2^(e-1), 2^e) */
    int ue = e - 1 < 1 - bias ? 1 - bias : e - 1;
    double q = rint(ldexp(a, mbits - ue)); /* units of the spacing at exponent ue */
    if (ldexp(q, ue - mbits) > maxv)
        return sign | (e4 ? 0x7e : 0x7b);
    if (q >= (double)(2 << mbits)) { /* rounding carried into the next exponent */
        q /= 2;
        ue++;
    }
    if (q < (double)(1 << mbits)) /* subnormal */
        return sign | (uint8_t)q;
    return sign | (uint8_t)(((ue + bias) << mbits) | ((int)q - (1 << mbits)));
}

/* Store an integer (which fits the type) or, for float types, a double, as element i. */
static void store_int(void *buf, size_t i, coll_datatype_t dt, int64_t v)
{
    char *p = (char *)buf + i * perf_dt_sizes[dt];
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
    char *p = (char *)buf + i * perf_dt_sizes[dt];
    if (dt == COLL_FLOAT16) {
        uint16_t h = f32_to_f16((float)d);
        memcpy(p, &h, 2);
    } else if (dt == COLL_BFLOAT16) {
        uint16_t h = f32_to_bf16((float)d);
        memcpy(p, &h, 2);
    } else if (dt_is_fp8(dt)) {
        uint8_t b = f64_to_fp8(d, dt);
        memcpy(p, &b, 1);
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
 * up to 120 ranks; float8 sums use -1..1 (exact in E4M3 up to 16 ranks, in E5M2 up to 8). Data
 * movement: 0..100, different per source rank and position. Each pattern is periodic in the element
 * index, so inputs and expected values come from small tables. */

static int64_t val_reduce(coll_op_t op, coll_datatype_t dt, int rank, size_t idx)
{
    if (op == COLL_PROD) {
        if ((idx + (size_t)rank) % 8 == 0)
            return 2;
        return (!dt_is_unsigned(dt) && (idx * 3 + (size_t)rank) % 5 == 0) ? -1 : 1;
    }
    int64_t v = (int64_t)((idx * 7 + (size_t)rank * 3) % 5) - (dt_is_unsigned(dt) ? 0 : 2);
    if (dt_is_fp8(dt))
        v = v > 1 ? 1 : (v < -1 ? -1 : v);
    return v;
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
        else /* float32 quotient (the half and float8 types too), then one rounding to the type */
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
        int bits = (int)perf_dt_sizes[dt] * 8;
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

/* Fill the send side with this rank's input, the receive side with a marker that no pattern
 * value has, and point send/recv at the right places for the placement. */
void perf_prepare(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                  coll_op_t op, int inplace, struct pattern *pt, void **send, void **recv)
{
    size_t ts = perf_dt_sizes[dt];
    int reduces = perf_kinds[k].has_op;
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

int64_t perf_verify(struct ctx *c, enum kind k, const struct shape *s, coll_datatype_t dt,
                    struct pattern *pt, const void *recv)
{
    size_t ts = perf_dt_sizes[dt];
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
