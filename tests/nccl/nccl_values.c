/* nccl_test's inputs and the reference its checks compare with. */
#define _GNU_SOURCE
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fp8_ref.h"
#include "half_ref.h"
#include "nccl_test.h"

/* ---- values: small integers, exact in every datatype and under every operator ---- */

int is_fp8(ncclDataType_t dt)
{
    return dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
}

/* float8: 1 and 2 only, so that every partial sum (up to 8) and product (up to 16) of 4 ranks is
 * exact in E5M2's two mantissa bits */
double input_of(ncclDataType_t dt, int r, size_t i)
{
    return (double)(1 + (r + i) % (is_fp8(dt) ? 2 : 3));
}

size_t dt_size(ncclDataType_t dt)
{
    static const size_t sz[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
    return (int)dt < 12 ? sz[dt] : 0;
}

void put(ncclDataType_t dt, void *buf, size_t i, double v)
{
    switch (dt) {
    case ncclInt8:
        ((int8_t *)buf)[i] = (int8_t)v;
        break;
    case ncclUint8:
        ((uint8_t *)buf)[i] = (uint8_t)v;
        break;
    case ncclInt32:
        ((int32_t *)buf)[i] = (int32_t)v;
        break;
    case ncclUint32:
        ((uint32_t *)buf)[i] = (uint32_t)v;
        break;
    case ncclInt64:
        ((int64_t *)buf)[i] = (int64_t)v;
        break;
    case ncclUint64:
        ((uint64_t *)buf)[i] = (uint64_t)v;
        break;
    case ncclFloat16:
        ((uint16_t *)buf)[i] = ref_f2h((float)v);
        break;
    case ncclFloat32:
        ((float *)buf)[i] = (float)v;
        break;
    case ncclFloat64:
        ((double *)buf)[i] = v;
        break;
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        ((uint8_t *)buf)[i] = (uint8_t)fp8_ref_round(dt == ncclFloat8e4m3, v);
        break;
    case ncclBfloat16: {
        float f = (float)v; /* small integers: the upper half of a float is exact */
        uint32_t b;
        memcpy(&b, &f, 4);
        ((uint16_t *)buf)[i] = (uint16_t)(b >> 16);
        break;
    }
    default:
        break;
    }
}

double get(ncclDataType_t dt, const void *buf, size_t i)
{
    switch (dt) {
    case ncclInt8:
        return ((const int8_t *)buf)[i];
    case ncclUint8:
        return ((const uint8_t *)buf)[i];
    case ncclInt32:
        return ((const int32_t *)buf)[i];
    case ncclUint32:
        return ((const uint32_t *)buf)[i];
    case ncclInt64:
        return (double)((const int64_t *)buf)[i];
    case ncclUint64:
        return (double)((const uint64_t *)buf)[i];
    case ncclFloat16:
        return (double)ref_h2f(((const uint16_t *)buf)[i]);
    case ncclFloat32:
        return ((const float *)buf)[i];
    case ncclFloat64:
        return ((const double *)buf)[i];
    case ncclFloat8e4m3:
    case ncclFloat8e5m2:
        return fp8_ref_value(dt == ncclFloat8e4m3, ((const uint8_t *)buf)[i]);
    case ncclBfloat16: {
        uint32_t b = (uint32_t)((const uint16_t *)buf)[i] << 16;
        float f;
        memcpy(&f, &b, 4);
        return f;
    }
    default:
        return -1;
    }
}

int is_float(ncclDataType_t dt)
{
    return dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 || dt == ncclBfloat16 ||
           is_fp8(dt);
}

/* the reduction of element i over ranks [0, n) */
double reduced(ncclRedOp_t op, ncclDataType_t dt, int n, size_t i)
{
    double acc = input_of(dt, 0, i);
    for (int r = 1; r < n; r++) {
        double v = input_of(dt, r, i);
        acc = op == ncclProd  ? acc * v
              : op == ncclMax ? (v > acc ? v : acc)
              : op == ncclMin ? (v < acc ? v : acc)
                              : acc + v;
    }
    if (op == ncclAvg)
        acc = is_float(dt) ? acc / n : (double)((long long)acc / n);
    return acc;
}

int close_enough(ncclDataType_t dt, double got, double want)
{
    /* float8: an average is rounded to 3 (E4M3) or 2 (E5M2) mantissa bits: half a unit in the
     * last place is 2^-4 or 2^-3 of the value */
    double tol = is_fp8(dt)                                ? 0.125
                 : dt == ncclFloat16 || dt == ncclBfloat16 ? 1e-2
                 : is_float(dt)                            ? 1e-6
                                                           : 0;
    double d = got - want;
    return (d < 0 ? -d : d) <= tol * (want < 0 ? -want : want);
}

const char *dt_name(ncclDataType_t dt)
{
    static const char *n[] = {"int8",    "uint8",    "int32",      "uint32",
                              "int64",   "uint64",   "float16",    "float32",
                              "float64", "bfloat16", "float8e4m3", "float8e5m2"};
    return (int)dt < 12 ? n[dt] : "?";
}

const char *op_name(ncclRedOp_t op)
{
    static const char *n[] = {"sum", "prod", "max", "min", "avg"};
    return (int)op < 5 ? n[op] : "?";
}
