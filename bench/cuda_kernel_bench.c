/*
 * cuda-kernel-bench: speed of kcoll's CUDA reduction kernels (kernels/cuda/reduce.cu) against the
 * device-to-device copy of the same device, measured in the same run (issue 5's kernel target:
 * the two-input float32 and bfloat16 sum kernels at >= 90% of the copy's bandwidth).
 *
 *   cuda-kernel-bench [-b SIZE] [-e SIZE] [-f F] [-n ITERS] [-w WARMUP] [-s NSRCS] [-d TYPE]
 *                     [-o OP] [--json FILE]
 *
 * SIZE is the bytes of one operand (K/M/G suffixes; default 64M to 1G, factor 4). Bandwidth
 * counts every byte read and written: a copy moves 2 x SIZE, a reduction of n inputs
 * (n + 1) x SIZE. For each size it prints the copy by cudaMemcpyAsync and by the kernels'
 * colli_cuda_copy, then the reduction, and the reduction's share of the faster copy. Without a
 * usable GPU it prints "SKIPPED: <reason>" and exits 77. COLL_TEST_CUDA_DEVICE picks the device.
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "reduce_cuda.h"

#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "cuda-kernel-bench: %s failed: %s\n", #call,                           \
                    cudaGetErrorString(err_));                                                     \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static const char *const dt_names[COLL_NUM_DATATYPES] = {"int8",    "uint8",  "int32",   "uint32",
                                                         "int64",   "uint64", "float16", "bfloat16",
                                                         "float32", "float64"};
static const char *const op_names[COLL_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};
static const size_t dt_sizes[COLL_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8};

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static int parse_size(const char *s, size_t *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    switch (*end) {
    case 'K':
    case 'k':
        v <<= 10;
        end++;
        break;
    case 'M':
    case 'm':
        v <<= 20;
        end++;
        break;
    case 'G':
    case 'g':
        v <<= 30;
        end++;
        break;
    default:
        break;
    }
    if (*end != '\0' || v == 0)
        return -1;
    *out = (size_t)v;
    return 0;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cuda-kernel-bench [-b SIZE] [-e SIZE] [-f F] [-n ITERS] [-w WARMUP]\n"
            "                         [-s NSRCS] [-d TYPE] [-o OP] [--json FILE]\n"
            "  SIZE: bytes of one operand (K/M/G), default 64M .. 1G, factor 4\n"
            "  NSRCS: inputs of the reduction, 1..%d (default 2); TYPE default float32,\n"
            "  OP default sum; --json FILE: also write the rows as JSON\n",
            COLLI_CUDA_MAX_SRCS);
}

/* Milliseconds per call of one of the timed operations. */
enum { T_MEMCPY, T_KCOPY, T_REDUCE };
static double timed(int what, void *dst, const void *const *srcs, int nsrcs, size_t bytes,
                    coll_datatype_t dt, coll_op_t op, int sm, cudaStream_t st, int warm, int iters)
{
    cudaEvent_t t0, t1;
    CUDA_OK(cudaEventCreate(&t0));
    CUDA_OK(cudaEventCreate(&t1));
    size_t count = bytes / dt_sizes[dt];
    for (int i = 0; i < warm + iters; i++) {
        if (i == warm)
            CUDA_OK(cudaEventRecord(t0, st));
        int err = 0;
        if (what == T_MEMCPY)
            err = cudaMemcpyAsync(dst, srcs[0], bytes, cudaMemcpyDeviceToDevice, st);
        else if (what == T_KCOPY)
            err = colli_cuda_copy(dst, srcs[0], bytes, sm, st);
        else
            err = colli_cuda_reduce(dst, srcs, nsrcs, count, dt, op,
                                    op == COLL_AVG ? (uint32_t)nsrcs : 0, sm, st);
        if (err != 0) {
            fprintf(stderr, "cuda-kernel-bench: launch failed: %s\n", colli_cuda_error_string(err));
            exit(1);
        }
    }
    CUDA_OK(cudaEventRecord(t1, st));
    CUDA_OK(cudaEventSynchronize(t1));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, t0, t1));
    CUDA_OK(cudaEventDestroy(t0));
    CUDA_OK(cudaEventDestroy(t1));
    return (double)ms / iters;
}

int main(int argc, char **argv)
{
    size_t minb = (size_t)64 << 20, maxb = (size_t)1 << 30;
    double factor = 4;
    int iters = 20, warm = 5, nsrcs = 2;
    coll_datatype_t dt = COLL_FLOAT32;
    coll_op_t op = COLL_SUM;
    const char *json = NULL;
    for (int i = 1; i < argc; i += 2) { /* each option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = v == NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (bad) {
        } else if (strcmp(a, "-b") == 0) {
            bad = parse_size(v, &minb);
        } else if (strcmp(a, "-e") == 0) {
            bad = parse_size(v, &maxb);
        } else if (strcmp(a, "-f") == 0) {
            factor = atof(v);
            bad = !(factor > 1);
        } else if (strcmp(a, "-n") == 0) {
            iters = atoi(v);
            bad = iters < 1;
        } else if (strcmp(a, "-w") == 0) {
            warm = atoi(v);
            bad = warm < 0;
        } else if (strcmp(a, "-s") == 0) {
            nsrcs = atoi(v);
            bad = nsrcs < 1 || nsrcs > COLLI_CUDA_MAX_SRCS;
        } else if (strcmp(a, "-d") == 0) {
            int k = lookup(v, dt_names, COLL_NUM_DATATYPES);
            bad = k < 0;
            dt = (coll_datatype_t)(k < 0 ? 0 : k);
        } else if (strcmp(a, "-o") == 0) {
            int k = lookup(v, op_names, COLL_NUM_OPS);
            bad = k < 0;
            op = (coll_op_t)(k < 0 ? 0 : k);
        } else if (strcmp(a, "--json") == 0) {
            json = v;
        } else {
            bad = 1;
        }
        if (bad || minb > maxb) {
            fprintf(stderr, "cuda-kernel-bench: invalid argument '%s%s%s'\n", a, v ? " " : "",
                    v ? v : "");
            usage(stderr);
            return 2;
        }
    }
    int ndev = 0, device = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        printf("SKIPPED: no usable CUDA device (%s)\n",
               err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found 0");
        return 77;
    }
    const char *env = getenv("COLL_TEST_CUDA_DEVICE");
    if (env != NULL)
        device = atoi(env);
    CUDA_OK(cudaSetDevice(device));
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, device));
    int sm = 0;
    if (colli_cuda_sm_count(device, &sm) != 0) {
        fprintf(stderr, "cuda-kernel-bench: cannot read the multiprocessor count\n");
        return 1;
    }
    size_t e = dt_sizes[dt];
    maxb = maxb / e * e;
    void *bufs[COLLI_CUDA_MAX_SRCS + 1];
    for (int i = 0; i <= nsrcs; i++) {
        CUDA_OK(cudaMalloc(&bufs[i], maxb));
        CUDA_OK(cudaMemset(bufs[i], 0x11 * (i + 1), maxb)); /* finite values for every type */
    }
    const void *srcs[COLLI_CUDA_MAX_SRCS];
    for (int i = 0; i < nsrcs; i++)
        srcs[i] = bufs[i + 1];
    cudaStream_t st;
    CUDA_OK(cudaStreamCreate(&st));
    FILE *js = NULL;
    if (json != NULL && (js = fopen(json, "w")) == NULL) {
        perror(json);
        return 1;
    }
    printf("# cuda-kernel-bench: %s (sm_%d%d, %d SMs, %.1f GiB), %d input(s) of %s, %s; %d "
           "warm-up + %d timed calls; GB/s = bytes read + written / time\n",
           prop.name, prop.major, prop.minor, sm, (double)prop.totalGlobalMem / (1u << 30), nsrcs,
           dt_names[dt], op_names[op], warm, iters);
    printf("# %12s %14s %14s %14s %9s\n", "bytes", "memcpy D2D", "kernel copy", "reduce",
           "reduce/copy");
    if (js)
        fprintf(js,
                "{\"device\": \"%s\", \"nsrcs\": %d, \"type\": \"%s\", \"op\": \"%s\", "
                "\"rows\": [",
                prop.name, nsrcs, dt_names[dt], op_names[op]);
    int first = 1;
    for (size_t b = minb; b <= maxb;) {
        size_t bytes = b / e * e;
        double ms_m = timed(T_MEMCPY, bufs[0], srcs, nsrcs, bytes, dt, op, sm, st, warm, iters);
        double ms_k = timed(T_KCOPY, bufs[0], srcs, nsrcs, bytes, dt, op, sm, st, warm, iters);
        double ms_r = timed(T_REDUCE, bufs[0], srcs, nsrcs, bytes, dt, op, sm, st, warm, iters);
        double bw_m = 2.0 * (double)bytes / ms_m / 1e6, bw_k = 2.0 * (double)bytes / ms_k / 1e6;
        double bw_r = (double)(nsrcs + 1) * (double)bytes / ms_r / 1e6;
        double best = bw_m > bw_k ? bw_m : bw_k;
        printf("  %12zu %10.1f GB/s %9.1f GB/s %9.1f GB/s %8.1f%%\n", bytes, bw_m, bw_k, bw_r,
               100.0 * bw_r / best);
        if (js) {
            fprintf(js,
                    "%s\n {\"bytes\": %zu, \"memcpy_gbs\": %.2f, \"kernel_copy_gbs\": %.2f, "
                    "\"reduce_gbs\": %.2f, \"reduce_of_copy\": %.4f}",
                    first ? "" : ",", bytes, bw_m, bw_k, bw_r, bw_r / best);
            first = 0;
        }
        size_t next = (size_t)((double)b * factor);
        if (next <= b || b == maxb)
            break;
        b = next > maxb ? maxb : next;
    }
    if (js) {
        fprintf(js, "\n]}\n");
        fclose(js);
    }
    for (int i = 0; i <= nsrcs; i++)
        CUDA_OK(cudaFree(bufs[i]));
    CUDA_OK(cudaStreamDestroy(st));
    return 0;
}
