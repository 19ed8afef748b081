/* Shared by the kernel tests (tests/unit/test_reduce_cpu.c, tests/gpu/test_cuda_kernels.c):
 * pass/fail counting (check.h), deterministic random numbers, datatype tables, raw element bits and
 * the NaN rules both kernels follow (min/max select an input bit for bit; arithmetic that yields a
 * NaN yields a quiet NaN, sign and payload unspecified). Header-only: each test is one file. */
#ifndef KCOLL_TESTS_KERNEL_CHECK_H
#define KCOLL_TESTS_KERNEL_CHECK_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "coll_kernels.h"

#include "check.h"

/* ---- deterministic random numbers (xorshift64*) ---- */
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return rng * 0x2545f4914f6cdd1dull;
}

/* ---- datatypes ---- */
static const char *const dt_name[COLL_NUM_DATATYPES] = {
    "int8",    "uint8",    "int32",   "uint32",  "int64",       "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3", "float8_e5m2"};
static const size_t dt_size[COLL_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};

static int is_int(int dt)
{
    return dt <= COLL_UINT64;
}

/* Raw bits of element i (sz bytes), zero-extended; the machine is little-endian. */
static uint64_t ld_bits(const unsigned char *p, size_t i, size_t sz)
{
    uint64_t v = 0;
    memcpy(&v, p + i * sz, sz);
    return v;
}

static int is_nan_bits(int dt, uint64_t v)
{
    switch (dt) {
    case COLL_FLOAT16:
        return (v & 0x7fffu) > 0x7c00u;
    case COLL_BFLOAT16:
        return (v & 0x7fffu) > 0x7f80u;
    case COLL_FLOAT32:
        return (v & 0x7fffffffu) > 0x7f800000u;
    case COLL_FLOAT64:
        return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    case COLL_FLOAT8_E4M3:
        return (v & 0x7fu) == 0x7fu;
    case COLL_FLOAT8_E5M2:
        return (v & 0x7fu) > 0x7cu;
    default:
        return 0;
    }
}

static int is_quiet_nan_bits(int dt, uint64_t v)
{
    switch (dt) {
    case COLL_FLOAT16:
        return (v & 0x7e00u) == 0x7e00u;
    case COLL_BFLOAT16:
        return (v & 0x7fc0u) == 0x7fc0u;
    case COLL_FLOAT32:
        return (v & 0x7fc00000u) == 0x7fc00000u;
    case COLL_FLOAT64:
        return (v & 0x7ff8000000000000ull) == 0x7ff8000000000000ull;
    case COLL_FLOAT8_E4M3: /* one NaN only */
        return (v & 0x7fu) == 0x7fu;
    case COLL_FLOAT8_E5M2:
        return (v & 0x7eu) == 0x7eu;
    default:
        return 0;
    }
}

/* Is got an acceptable result where expected was computed: bit for bit, except that an
 * arithmetic NaN (selecting == 0: not min/max) may be any quiet NaN. */
static int same_result(int dt, int selecting, uint64_t expected, uint64_t got)
{
    if (expected == got)
        return 1;
    if (!selecting && is_nan_bits(dt, expected))
        return is_nan_bits(dt, got) && is_quiet_nan_bits(dt, got);
    return 0;
}

#endif
