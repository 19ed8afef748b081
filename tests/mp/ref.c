#define _GNU_SOURCE
#include "ref.h"
#include "harness.h"
#include "fp8_ref.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t ref_dt_size(coll_datatype_t dt)
{
    switch (dt) {
    case COLL_INT8:
    case COLL_UINT8:
    case COLL_FLOAT8_E4M3:
    case COLL_FLOAT8_E5M2:
        return 1;
    case COLL_FLOAT16:
    case COLL_BFLOAT16:
        return 2;
    case COLL_INT32:
    case COLL_UINT32:
    case COLL_FLOAT32:
        return 4;
    case COLL_INT64:
    case COLL_UINT64:
    case COLL_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

const char *ref_dt_name(coll_datatype_t dt)
{
    static const char *const names[] = {"int8",    "uint8",   "int32",       "uint32",
                                        "int64",   "uint64",  "float16",     "bfloat16",
                                        "float32", "float64", "float8_e4m3", "float8_e5m2"};
    return (unsigned)dt < COLL_NUM_DATATYPES ? names[dt] : "invalid";
}

const char *ref_op_name(coll_op_t op)
{
    static const char *const names[] = {"sum", "prod", "min", "max", "avg"};
    return (unsigned)op < COLL_NUM_OPS ? names[op] : "invalid";
}

int ref_dt_is_float(coll_datatype_t dt)
{
    return dt == COLL_FLOAT16 || dt == COLL_BFLOAT16 || dt == COLL_FLOAT32 || dt == COLL_FLOAT64 ||
           ref_dt_is_fp8(dt);
}

int ref_dt_is_fp8(coll_datatype_t dt)
{
    return dt == COLL_FLOAT8_E4M3 || dt == COLL_FLOAT8_E5M2;
}

static int dt_is_signed(coll_datatype_t dt)
{
    return dt == COLL_INT8 || dt == COLL_INT32 || dt == COLL_INT64;
}

/* ---- float16 / bfloat16 ---- */

/*
 * Round a finite double to a binary format with `mant` stored mantissa bits, minimum normal
 * exponent emin and maximum finite value maxv, nearest-even; returns the rounded value
 * (infinity on overflow). Done on the value grid, independently of bit tricks.
 */
static double round_to_format(double x, int mant, int emin, double maxv)
{
    if (x == 0 || isnan(x) || isinf(x))
        return x;
    double ax = fabs(x);
    int e;
    frexp(ax, &e); /* ax = f * 2^e, f in [0.5, 1) -> unbiased exponent e-1 */
    int ue = e - 1;
    if (ue < emin)
        ue = emin;
    double ulp = ldexp(1.0, ue - mant);
    double q = ax / ulp;     /* exact: scaling by a power of two */
    double r = nearbyint(q); /* default rounding mode: to nearest, ties to even */
    double v = r * ulp;
    /* overflow: beyond the largest finite value (the rounding may also carry into it) */
    if (v > maxv)
        v = INFINITY;
    return x < 0 ? -v : v;
}

/* Encode a value that is exactly representable (or +-inf/nan) in a format. */
static uint32_t encode_exact(double v, int mant, int ebits)
{
    int bias = (1 << (ebits - 1)) - 1;
    uint32_t sign = signbit(v) ? 1u : 0u;
    uint32_t out;
    double av = fabs(v);
    if (isnan(v)) {
        out = ((1u << ebits) - 1) << mant | (1u << (mant - 1));
    } else if (isinf(v)) {
        out = ((1u << ebits) - 1) << mant;
    } else if (av == 0) {
        out = 0;
    } else {
        int e;
        double f = frexp(av, &e); /* av = f * 2^e */
        int ue = e - 1;
        if (ue < 1 - bias) { /* subnormal */
            double m = ldexp(av, (bias - 1) + mant);
            out = (uint32_t)m;
        } else {
            double m = ldexp(f * 2 - 1, mant);
            out = ((uint32_t)(ue + bias) << mant) | (uint32_t)m;
        }
    }
    return out | (sign << (mant + ebits));
}

uint16_t ref_float_to_half(float f)
{
    double v = round_to_format((double)f, 10, -14, 65504.0);
    return (uint16_t)encode_exact(v, 10, 5);
}

uint16_t ref_float_to_bf16(float f)
{
    /* largest finite bfloat16: (2 - 2^-7) * 2^127 */
    double v = round_to_format((double)f, 7, -126, ldexp(2.0 - ldexp(1.0, -7), 127));
    return (uint16_t)encode_exact(v, 7, 8);
}

/* OCP float8, saturating: beyond the largest finite value (E4M3: 448, E5M2: 57344) the result is
 * that value; NaN is S.1111.111 (E4M3) or S.11111.10 (E5M2). */
uint8_t ref_float_to_fp8(coll_datatype_t dt, double v)
{
    return (uint8_t)fp8_ref_round(dt == COLL_FLOAT8_E4M3, v);
}

double ref_fp8_to_double(coll_datatype_t dt, uint8_t b)
{
    return fp8_ref_value(dt == COLL_FLOAT8_E4M3, b);
}

double ref_half_to_double(uint16_t h)
{
    int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double v;
    if (e == 0)
        v = ldexp((double)m, -24);
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexp((double)(1024 + m), e - 25);
    return s ? -v : v;
}

double ref_bf16_to_double(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return (double)f;
}

/* Small-value caches: most encodings are of small integers or halves. */
#define CACHE_LO (-512)
#define CACHE_HI 512
static uint16_t half_cache[2 * (CACHE_HI - CACHE_LO) + 1];
static uint16_t bf16_cache[2 * (CACHE_HI - CACHE_LO) + 1];
static int cache_ready;

static void cache_init(void)
{
    if (cache_ready)
        return;
    for (int k = 0; k <= 2 * (CACHE_HI - CACHE_LO); k++) {
        double v = (double)CACHE_LO + k * 0.5;
        half_cache[k] = ref_float_to_half((float)v);
        bf16_cache[k] = ref_float_to_bf16((float)v);
    }
    cache_ready = 1;
}

static uint64_t encode_float(coll_datatype_t dt, double v)
{
    if (dt == COLL_FLOAT64) {
        uint64_t b;
        memcpy(&b, &v, 8);
        return b;
    }
    if (dt == COLL_FLOAT32) {
        float f = (float)v;
        uint32_t b;
        memcpy(&b, &f, 4);
        return b;
    }
    if (ref_dt_is_fp8(dt))
        return ref_float_to_fp8(dt, v);
    double twice = v * 2;
    if (v != 0 && twice == floor(twice) && v >= CACHE_LO && v <= CACHE_HI) {
        cache_init();
        size_t k = (size_t)(twice - 2.0 * CACHE_LO);
        return dt == COLL_FLOAT16 ? half_cache[k] : bf16_cache[k];
    }
    return dt == COLL_FLOAT16 ? ref_float_to_half((float)v) : ref_float_to_bf16((float)v);
}

/* ---- inputs ---- */

static inline uint64_t mix(uint64_t seed, uint64_t rank, uint64_t idx)
{
    uint64_t z = seed ^ (rank * 0x9E3779B97F4A7C15ull) ^ (idx * 0xD1B54A32D192ED03ull);
    z ^= z >> 31;
    z *= 0xBF58476D1CE4E5B9ull;
    z ^= z >> 27;
    z *= 0x94D049BB133111EBull;
    z ^= z >> 31;
    return z;
}

static const double prod_values[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, 2, -2, 0.5, 0};

static inline double input_fvalue(const ref_gen_t *g, int rank, size_t idx)
{
    uint64_t h = mix(g->seed, (uint64_t)rank, idx);
    switch (g->op) {
    case COLL_PROD:
        return prod_values[h & 15];
    case COLL_MIN:
    case COLL_MAX:
        return (double)(int)(h % 201) - 100;
    default: /* sum, avg: float8 sums stay exact over 8 ranks only with |x| <= 1 */
        if (ref_dt_is_fp8(g->dt))
            return (double)(int)(h % 3) - 1;
        return (double)(int)(h % 17) - 8;
    }
}

static inline uint64_t width_mask(size_t esz)
{
    return esz == 8 ? ~0ull : ((1ull << (esz * 8)) - 1);
}

static inline uint64_t input_ibits(const ref_gen_t *g, int rank, size_t idx, size_t esz)
{
    return mix(g->seed, (uint64_t)rank, idx) & width_mask(esz);
}

static uint64_t raw_input(const ref_gen_t *g, int rank, size_t idx)
{
    if (ref_dt_is_float(g->dt))
        return encode_float(g->dt, input_fvalue(g, rank, idx));
    return input_ibits(g, rank, idx, ref_dt_size(g->dt));
}

static inline int64_t sext(uint64_t v, size_t esz)
{
    if (esz == 8)
        return (int64_t)v;
    unsigned bits = (unsigned)esz * 8;
    uint64_t sign = 1ull << (bits - 1);
    v &= width_mask(esz);
    return (int64_t)((v ^ sign) - sign);
}

/* float16 avg: kcoll multiplies each input by 1/nranks rounded to float16 (the product in float32,
 * rounded once) and sums, as NVIDIA NCCL does; the exact sum of those products. */
static double half_avg(const ref_gen_t *g, int nranks, size_t idx)
{
    const float h = (float)ref_half_to_double(ref_float_to_half(1.0f / (float)nranks));
    double acc = 0;
    for (int r = 0; r < nranks; r++)
        acc += ref_half_to_double(ref_float_to_half((float)input_fvalue(g, r, idx) * h));
    return acc;
}

/* Whether a float16 avg over nranks rounds its partial sums (1/nranks is no power of two), so
 * that the result depends on the order of the sum: within half_avg_tolerance of the reference. */
static int half_avg_inexact(const ref_gen_t *g, int nranks)
{
    return g->dt == COLL_FLOAT16 && g->op == COLL_AVG && (nranks & (nranks - 1)) != 0;
}

/* Every partial sum is below 8 + a little in magnitude (inputs in [-8, 8] times about 1/n), so
 * each of the n-1 additions rounds by at most half an ulp at 8 (2^-8), and the reference itself
 * is rounded once more. */
static double half_avg_tolerance(int nranks)
{
    return nranks / 256.0;
}

static uint64_t raw_reduced(const ref_gen_t *g, int nranks, size_t idx)
{
    if (g->dt == COLL_FLOAT16 && g->op == COLL_AVG)
        return encode_float(g->dt, half_avg(g, nranks, idx));
    if (ref_dt_is_float(g->dt)) {
        double acc = input_fvalue(g, 0, idx);
        for (int r = 1; r < nranks; r++) {
            double b = input_fvalue(g, r, idx);
            switch (g->op) {
            case COLL_SUM:
            case COLL_AVG:
                acc += b; /* exact: small integers */
                break;
            case COLL_PROD:
                acc *= b; /* exact: powers of two up to 2^7 */
                break;
            case COLL_MIN:
                acc = b < acc ? b : acc;
                break;
            case COLL_MAX:
                acc = b > acc ? b : acc;
                break;
            default:
                break;
            }
        }
        if (g->op == COLL_AVG) {
            if (g->dt == COLL_FLOAT64) {
                acc = acc / (double)nranks;
            } else {
                /* float32 and the half types: quotient computed in float32 */
                float q = (float)acc / (float)nranks;
                if (g->dt == COLL_FLOAT32) {
                    uint32_t b;
                    memcpy(&b, &q, 4);
                    return b;
                }
                if (ref_dt_is_fp8(g->dt))
                    return ref_float_to_fp8(g->dt, q);
                return g->dt == COLL_FLOAT16 ? ref_float_to_half(q) : ref_float_to_bf16(q);
            }
        }
        return encode_float(g->dt, acc);
    }
    size_t esz = ref_dt_size(g->dt);
    uint64_t mask = width_mask(esz);
    int sgn = dt_is_signed(g->dt);
    uint64_t acc = input_ibits(g, 0, idx, esz);
    for (int r = 1; r < nranks; r++) {
        uint64_t b = input_ibits(g, r, idx, esz);
        switch (g->op) {
        case COLL_SUM:
        case COLL_AVG:
            acc = (acc + b) & mask;
            break;
        case COLL_PROD:
            acc = (acc * b) & mask;
            break;
        case COLL_MIN:
            if (sgn ? sext(b, esz) < sext(acc, esz) : b < acc)
                acc = b;
            break;
        case COLL_MAX:
            if (sgn ? sext(b, esz) > sext(acc, esz) : b > acc)
                acc = b;
            break;
        default:
            break;
        }
    }
    if (g->op == COLL_AVG) {
        if (sgn)
            acc = (uint64_t)(sext(acc, esz) / (int64_t)nranks) & mask;
        else
            acc = acc / (uint64_t)nranks;
    }
    return acc;
}

/*
 * Inputs repeat with a prime period (REF_PERIOD elements, not a power of two nor a likely chunk
 * size), so that multi-megabyte buffers are generated and checked from small tables instead of
 * hashing every element on every rank. Tables are per (seed, dtype, op) and built on first use.
 */
#define REF_PERIOD 65521u

static struct {
    ref_gen_t key;
    int valid;
    unsigned char *input[MP_MAX_RANKS]; /* one period of elements, in memory layout */
    unsigned char *reduced;
    int reduced_n;
} tab;

static void tab_reset(const ref_gen_t *g)
{
    if (tab.valid && tab.key.seed == g->seed && tab.key.dt == g->dt && tab.key.op == g->op)
        return;
    for (int r = 0; r < MP_MAX_RANKS; r++) {
        free(tab.input[r]);
        tab.input[r] = NULL;
    }
    free(tab.reduced);
    tab.reduced = NULL;
    tab.reduced_n = 0;
    tab.key = *g;
    tab.valid = 1;
}

static const unsigned char *input_table(const ref_gen_t *g, int rank)
{
    tab_reset(g);
    if (!tab.input[rank]) {
        size_t esz = ref_dt_size(g->dt);
        unsigned char *t = malloc(REF_PERIOD * esz);
        if (!t)
            abort();
        for (size_t i = 0; i < REF_PERIOD; i++)
            ref_store(t, i, esz, raw_input(g, rank, i));
        tab.input[rank] = t;
    }
    return tab.input[rank];
}

static const unsigned char *reduced_table(const ref_gen_t *g, int nranks)
{
    tab_reset(g);
    if (!tab.reduced || tab.reduced_n != nranks) {
        free(tab.reduced);
        size_t esz = ref_dt_size(g->dt);
        unsigned char *t = malloc(REF_PERIOD * esz);
        if (!t)
            abort();
        for (size_t i = 0; i < REF_PERIOD; i++)
            ref_store(t, i, esz, raw_reduced(g, nranks, i));
        tab.reduced = t;
        tab.reduced_n = nranks;
    }
    return tab.reduced;
}

uint64_t ref_input(const ref_gen_t *g, int rank, size_t idx)
{
    return raw_input(g, rank, idx % REF_PERIOD);
}

uint64_t ref_reduced(const ref_gen_t *g, int nranks, size_t idx)
{
    return raw_reduced(g, nranks, idx % REF_PERIOD);
}

/* Tables pay off only for buffers much longer than... a table. */
#define TABLE_MIN_COUNT 16384

/* ---- buffers ---- */

uint64_t ref_load(const void *buf, size_t i, size_t esz)
{
    const unsigned char *p = (const unsigned char *)buf + i * esz;
    switch (esz) {
    case 1:
        return p[0];
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        return v;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        return v;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        return v;
    }
    }
}

void ref_store(void *buf, size_t i, size_t esz, uint64_t bits)
{
    unsigned char *p = (unsigned char *)buf + i * esz;
    switch (esz) {
    case 1:
        p[0] = (unsigned char)bits;
        break;
    case 2: {
        uint16_t v = (uint16_t)bits;
        memcpy(p, &v, 2);
        break;
    }
    case 4: {
        uint32_t v = (uint32_t)bits;
        memcpy(p, &v, 4);
        break;
    }
    default:
        memcpy(p, &bits, 8);
        break;
    }
}

void ref_fill_input(void *buf, const ref_gen_t *g, int rank, size_t first, size_t count)
{
    size_t esz = ref_dt_size(g->dt);
    if (count < TABLE_MIN_COUNT) {
        for (size_t i = 0; i < count; i++)
            ref_store(buf, i, esz, ref_input(g, rank, first + i));
        return;
    }
    const unsigned char *t = input_table(g, rank);
    unsigned char *out = buf;
    size_t k = first % REF_PERIOD;
    while (count > 0) {
        size_t n = REF_PERIOD - k < count ? REF_PERIOD - k : count;
        memcpy(out, t + k * esz, n * esz);
        out += n * esz;
        count -= n;
        k = 0;
    }
}

void ref_format(char *out, size_t len, coll_datatype_t dt, uint64_t bits)
{
    size_t esz = ref_dt_size(dt);
    switch (dt) {
    case COLL_FLOAT16:
        snprintf(out, len, "0x%04" PRIx64 " (%g)", bits, ref_half_to_double((uint16_t)bits));
        break;
    case COLL_BFLOAT16:
        snprintf(out, len, "0x%04" PRIx64 " (%g)", bits, ref_bf16_to_double((uint16_t)bits));
        break;
    case COLL_FLOAT8_E4M3:
    case COLL_FLOAT8_E5M2:
        snprintf(out, len, "0x%02" PRIx64 " (%g)", bits, ref_fp8_to_double(dt, (uint8_t)bits));
        break;
    case COLL_FLOAT32: {
        float f;
        uint32_t b = (uint32_t)bits;
        memcpy(&f, &b, 4);
        snprintf(out, len, "0x%08" PRIx32 " (%g)", b, (double)f);
        break;
    }
    case COLL_FLOAT64: {
        double d;
        memcpy(&d, &bits, 8);
        snprintf(out, len, "0x%016" PRIx64 " (%g)", bits, d);
        break;
    }
    default:
        if (dt_is_signed(dt))
            snprintf(out, len, "%" PRId64, sext(bits, esz));
        else
            snprintf(out, len, "%" PRIu64, bits);
        break;
    }
}

#define MAX_REPORTED 3

static void report_mismatch(const char *what, coll_datatype_t dt, size_t idx, uint64_t exp,
                            uint64_t got)
{
    char e[64], g[64];
    ref_format(e, sizeof(e), dt, exp);
    ref_format(g, sizeof(g), dt, got);
    mp_log("  %s: element %zu: expected %s, got %s", what, idx, e, g);
}

/* Either a table image t (compared a period-chunk at a time, element by element only where a
 * chunk differs) or, for short buffers, direct computation (rank >= 0: the inputs of rank;
 * otherwise the reduction over nranks). */
static size_t check_table(const void *buf, const ref_gen_t *g, const unsigned char *t, int rank,
                          int nranks, size_t first, size_t count, const char *what)
{
    coll_datatype_t dt = g->dt;
    size_t esz = ref_dt_size(dt), bad = 0;
    size_t k = first % REF_PERIOD, i = 0;
    while (i < count) {
        size_t n = count - i;
        if (t) {
            if (n > REF_PERIOD - k)
                n = REF_PERIOD - k;
            if (memcmp((const unsigned char *)buf + i * esz, t + k * esz, n * esz) == 0) {
                i += n;
                k = 0;
                continue;
            }
        }
        for (size_t e = 0; e < n; e++, i++) {
            uint64_t exp = t           ? ref_load(t, k, esz)
                           : rank >= 0 ? raw_input(g, rank, k)
                                       : raw_reduced(g, nranks, k);
            uint64_t got = ref_load(buf, i, esz);
            if (exp != got && rank < 0 && half_avg_inexact(g, nranks) &&
                fabs(ref_half_to_double((uint16_t)got) - ref_half_to_double((uint16_t)exp)) <=
                    half_avg_tolerance(nranks))
                exp = got;
            if (exp != got && bad++ < MAX_REPORTED)
                report_mismatch(what, dt, i, exp, got);
            if (++k == REF_PERIOD)
                k = 0;
        }
    }
    if (bad > MAX_REPORTED)
        mp_log("  %s: %zu of %zu elements differ", what, bad, count);
    return bad;
}

size_t ref_check_input(const void *buf, const ref_gen_t *g, int rank, size_t first, size_t count,
                       const char *what)
{
    const unsigned char *t = count >= TABLE_MIN_COUNT ? input_table(g, rank) : NULL;
    return check_table(buf, g, t, rank, 0, first, count, what);
}

size_t ref_check_reduced(const void *buf, const ref_gen_t *g, int nranks, size_t first,
                         size_t count, const char *what)
{
    const unsigned char *t = count >= TABLE_MIN_COUNT ? reduced_table(g, nranks) : NULL;
    return check_table(buf, g, t, -1, nranks, first, count, what);
}

size_t ref_check_fill(const void *buf, size_t bytes, int fill, const char *what)
{
    const unsigned char *p = buf;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < bytes; i++) {
        if (p[i] != (unsigned char)fill) {
            if (bad++ == 0)
                first = i;
        }
    }
    if (bad)
        mp_log("  %s: %zu of %zu bytes that must stay untouched were written (first at byte %zu: "
               "0x%02x)",
               what, bad, bytes, first, p[first]);
    return bad;
}
