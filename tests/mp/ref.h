/*
 * Deterministic inputs and an independent reference for the conformance tests. Every rank can
 * regenerate every other rank's input from (seed, rank, index), so results are checked without
 * any communication. Element values are handled as bit patterns in a uint64_t (little endian).
 *
 * Values are chosen so that float results are exact whatever the summation order:
 *   integers: the full range (sum/prod wrap; the reference computes in unsigned arithmetic);
 *   floats, sum/avg: integers in [-8, 8] ([-1, 1] for float8); prod: {1, -1, 2, -2, 0.5, 0};
 *   (except float16 avg on a number of ranks that is no power of two: each input is multiplied
 *   by 1/nranks in float16 before the sum, so partial sums round; checked within n/256);
 * min/max: [-100, 100].
 */
#ifndef COLL_TEST_REF_H
#define COLL_TEST_REF_H

#include <stddef.h>
#include <stdint.h>
#include "coll.h"

typedef struct ref_gen {
    uint64_t seed;
    coll_datatype_t dt;
    coll_op_t op; /* selects the value class; COLL_SUM for non-reducing collectives */
} ref_gen_t;

/* Independent tables (not the library's). */
size_t ref_dt_size(coll_datatype_t dt);
const char *ref_dt_name(coll_datatype_t dt);
const char *ref_op_name(coll_op_t op);
int ref_dt_is_float(coll_datatype_t dt);
int ref_dt_is_fp8(coll_datatype_t dt);

/* IEEE conversions with round-to-nearest-even, written with double arithmetic. */
uint16_t ref_float_to_half(float f);
uint16_t ref_float_to_bf16(float f);
double ref_half_to_double(uint16_t h);
double ref_bf16_to_double(uint16_t b);
/* OCP float8 (E4M3, E5M2): nearest even, saturating at the largest finite value. */
uint8_t ref_float_to_fp8(coll_datatype_t dt, double v);
double ref_fp8_to_double(coll_datatype_t dt, uint8_t b);

/* Bit pattern of the input element idx of rank. */
uint64_t ref_input(const ref_gen_t *g, int rank, size_t idx);
/* Bit pattern of op over ranks 0..nranks-1 of ref_input(g, r, idx). */
uint64_t ref_reduced(const ref_gen_t *g, int nranks, size_t idx);

uint64_t ref_load(const void *buf, size_t i, size_t esz);
void ref_store(void *buf, size_t i, size_t esz, uint64_t bits);

/* buf[i] = ref_input(g, rank, first + i) for i < count. */
void ref_fill_input(void *buf, const ref_gen_t *g, int rank, size_t first, size_t count);

/*
 * Compare and report: each returns the number of mismatching elements and logs the first few
 * (index, expected, got) prefixed with `what`.
 */
size_t ref_check_input(const void *buf, const ref_gen_t *g, int rank, size_t first, size_t count,
                       const char *what);
size_t ref_check_reduced(const void *buf, const ref_gen_t *g, int nranks, size_t first,
                         size_t count, const char *what);
size_t ref_check_fill(const void *buf, size_t bytes, int fill, const char *what);

/* Human-readable value of a bit pattern ("-3", "0.5", "200") for messages. */
void ref_format(char *out, size_t len, coll_datatype_t dt, uint64_t bits);

#endif
