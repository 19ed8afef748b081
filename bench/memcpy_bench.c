/* memcpy-bench: single-core memcpy bandwidth, the yardstick of issue 4's shared-memory target.
 * Copies a SIZE-byte buffer of non-zero data (this VM moves zero pages about twice as fast,
 * which would flatter the yardstick) into another, best of REPS runs; GB/s = bytes copied per
 * second / 10^9 (not read + written).
 *   memcpy-bench [MiB (64)] [reps (10)]        prints: memcpy <MiB> MiB: <GB/s> GB/s */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long mib = argc > 1 ? atol(argv[1]) : 64, reps = argc > 2 ? atol(argv[2]) : 10;
    if (mib < 1 || mib > 4096 || reps < 1 || reps > 1000) {
        fprintf(stderr, "usage: %s [MiB 1..4096 (64)] [reps 1..1000 (10)]\n", argv[0]);
        return 2;
    }
    size_t n = (size_t)mib << 20;
    unsigned char *src = malloc(n), *dst = malloc(n);
    if (src == NULL || dst == NULL) {
        fprintf(stderr, "memcpy-bench: out of memory for 2 x %ld MiB\n", mib);
        return 1;
    }
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 131u + 7u) | 1u;
    memset(dst, 1, n); /* fault the pages in outside the timed runs */
    double best = 1e30;
    for (long r = 0; r < reps; r++) {
        double t0 = now_s();
        memcpy(dst, src, n);
        double t = now_s() - t0;
        best = t < best ? t : best;
        src[r % n] ^= dst[(r * 4099) % n]; /* keep the copies observable */
    }
    printf("memcpy %ld MiB: %.2f GB/s\n", mib, (double)n / best / 1e9);
    free(src);
    free(dst);
    return 0;
}
