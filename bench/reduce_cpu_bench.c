/*
 * reduce-cpu-bench: throughput of the CPU reduction kernels next to memcpy, single thread.
 * GB/s counts bytes read plus bytes written (sum: 2 inputs + 1 output; memcpy: 1 + 1), 10^9
 * bytes per GB, best of the repetitions.
 *
 * usage: reduce-cpu-bench [MiB per buffer (64)] [repetitions (10)]
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "coll_kernels.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Normal, finite values of each type, so that no slow path (subnormals, NaN) is measured. */
static void fill(unsigned char *p, size_t count, coll_datatype_t dt, unsigned seed)
{
    for (size_t i = 0; i < count; i++) {
        float v = 1.0f + (float)((i * 7u + seed) % 1000u) / 1024.0f;
        switch (dt) {
        case COLL_FLOAT32:
            memcpy(p + 4 * i, &v, 4);
            break;
        case COLL_INT32: {
            int32_t x = (int32_t)((i * 2654435761u + seed) & 0x7fffffu);
            memcpy(p + 4 * i, &x, 4);
            break;
        }
        case COLL_FLOAT16: {
            uint16_t h = colli_float_to_half(v);
            memcpy(p + 2 * i, &h, 2);
            break;
        }
        default: {
            uint16_t b = colli_float_to_bf16(v);
            memcpy(p + 2 * i, &b, 2);
            break;
        }
        }
    }
}

static double best_reduce(void *dst, const void *a, const void *b, size_t count, coll_datatype_t dt,
                          int reps)
{
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        colli_reduce(dst, a, b, count, dt, COLL_SUM);
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    return best;
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 10;
    if (mib == 0 || reps <= 0) {
        fprintf(stderr, "usage: %s [MiB per buffer] [repetitions]\n", argv[0]);
        return 2;
    }
    size_t bytes = mib << 20;
    unsigned char *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    if (!a || !b || !c) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    memset(a, 0, bytes);
    memset(b, 0, bytes);
    memset(c, 0, bytes);

    printf("reduce-cpu-bench: %zu MiB per buffer, best of %d, single thread, default kernels %s\n",
           mib, reps, colli_kernels_isa());
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t0 = now_s();
        memcpy(c, a, bytes);
        double t = now_s() - t0;
        best = t < best ? t : best;
    }
    printf("%-6s %-9s %-4s %12.2f GB/s\n", "libc", "memcpy", "", 2.0 * (double)bytes / best / 1e9);

    static const char *const isas[] = {"generic", "avx2"};
    static const struct {
        coll_datatype_t dt;
        const char *name;
        size_t size;
    } types[] = {{COLL_FLOAT32, "float32", 4},
                 {COLL_BFLOAT16, "bfloat16", 2},
                 {COLL_FLOAT16, "float16", 2},
                 {COLL_INT32, "int32", 4}};
    printf("%-6s %-9s %-4s %17s %17s\n", "isa", "datatype", "op", "c = a + b", "a = a + b");
    for (size_t i = 0; i < sizeof(isas) / sizeof(isas[0]); i++) {
        if (colli_kernels_select_isa(isas[i]) != 0)
            continue;
        for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
            size_t count = bytes / types[t].size;
            fill(a, count, types[t].dt, 1);
            fill(b, count, types[t].dt, 2);
            double oop = best_reduce(c, a, b, count, types[t].dt, reps);
            /* in place: the values grow but stay finite over a few repetitions */
            double inp = best_reduce(a, a, b, count, types[t].dt, reps);
            printf("%-6s %-9s %-4s %12.2f GB/s %12.2f GB/s\n", colli_kernels_isa(), types[t].name,
                   "sum", 3.0 * (double)bytes / oop / 1e9, 3.0 * (double)bytes / inp / 1e9);
        }
    }
    colli_kernels_select_isa(NULL);
    free(a);
    free(b);
    free(c);
    return 0;
}
