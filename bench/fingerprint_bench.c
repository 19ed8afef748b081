/* Cost of the collective fingerprint that every data frame carries (issue: consistency checks
 * "cheap enough to be always on"). Each frame header holds the collective kind, datatype, op,
 * root, count and sequence number, and the receiver compares the whole header with what it
 * expects (colli_frame_fill + colli_frame_matches, exactly as the transports do). A header that
 * carried only what framing needs anyway (magic, unit index, sequence, tag, length) is the
 * baseline; the difference is the fingerprint's price per frame, printed next to the frames a
 * collective exchanges so that it can be set against measured latencies (docs/benchmarks.md).
 *
 *   fingerprint-bench [-n FRAMES]       (default 50 M; prints ns per frame, best of 5 runs) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "plan/op.h"
#include "plan/frame.h"

/* The baseline header: framing without a fingerprint (filled out of line, as the library fills
 * its headers, so that only the extra fields make the difference). */
typedef struct {
    uint32_t magic;
    uint32_t unit;
    uint64_t seq;
    uint64_t tag;
    uint32_t len;
    uint32_t pad;
} plain_hdr_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* volatile sinks keep the compiler from dropping the loops */
static volatile uint64_t sink;

static double run_fingerprint(struct coll_comm *comm, colli_op_t *op, colli_unit_t *u, long n)
{
    colli_frame_t want, got;
    uint64_t ok = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        op->fps[0].seq = (uint64_t)i;
        colli_frame_fill(comm, op, u, &got);  /* sender */
        colli_frame_fill(comm, op, u, &want); /* receiver: what it expects */
        __asm__ volatile("" : : "r"(&got), "r"(&want) : "memory");
        ok += colli_frame_matches(&got, &want);
    }
    double t = now_s() - t0;
    sink += ok;
    if (ok != (uint64_t)n) {
        fprintf(stderr, "fingerprint-bench: %llu of %ld headers matched\n", (unsigned long long)ok,
                n);
        exit(1);
    }
    return t;
}

__attribute__((noinline)) static void plain_fill(uint64_t tag, uint64_t seq, uint32_t unit,
                                                 uint32_t len, plain_hdr_t *h)
{
    memset(h, 0, sizeof(*h));
    h->magic = COLLI_FRAME_MAGIC;
    h->unit = unit;
    h->seq = seq;
    h->tag = tag;
    h->len = len;
}

static double run_plain(uint64_t tag, long n)
{
    plain_hdr_t want, got;
    uint64_t ok = 0;
    double t0 = now_s();
    for (long i = 0; i < n; i++) {
        plain_fill(tag, (uint64_t)i, 3, 8, &got);
        plain_fill(tag, (uint64_t)i, 3, 8, &want);
        __asm__ volatile("" : : "r"(&got), "r"(&want) : "memory");
        ok += memcmp(&got, &want, offsetof(plain_hdr_t, pad)) == 0;
    }
    double t = now_s() - t0;
    sink += ok;
    if (ok != (uint64_t)n) {
        fprintf(stderr, "fingerprint-bench: baseline headers did not match\n");
        exit(1);
    }
    return t;
}

int main(int argc, char **argv)
{
    long n = 50000000;
    int c;
    while ((c = getopt(argc, argv, "n:h")) != -1) {
        if (c == 'n' && atol(optarg) > 0) {
            n = atol(optarg);
        } else {
            fprintf(stderr, "usage: %s [-n FRAMES]\n", argv[0]);
            return c == 'h' ? 0 : 2;
        }
    }
    struct coll_comm comm;
    memset(&comm, 0, sizeof(comm));
    comm.tag = 0x1234567890abcdefULL;
    colli_fp_t fp = {.coll = COLLI_COLL_ALL_REDUCE,
                     .dtype = (uint8_t)COLL_FLOAT32,
                     .op = (uint8_t)COLL_SUM,
                     .root = -1,
                     .count = 2,
                     .seq = 0};
    colli_op_t op;
    memset(&op, 0, sizeof(op));
    op.fps = &fp;
    op.nfps = 1;
    colli_unit_t u = {.bytes = 8, .msg_unit = 3, .fp = 0};

    double best_fp = 1e30, best_plain = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double a = run_fingerprint(&comm, &op, &u, n), b = run_plain(comm.tag, n);
        best_fp = a < best_fp ? a : best_fp;
        best_plain = b < best_plain ? b : best_plain;
    }
    double fp_ns = best_fp / (double)n * 1e9, plain_ns = best_plain / (double)n * 1e9;
    double extra = fp_ns - plain_ns;
    printf("frames per run            %ld (best of 5 runs)\n", n);
    printf("header with fingerprint   %.2f ns per frame (fill on both sides + compare, %zu B)\n",
           fp_ns, sizeof(colli_frame_t));
    printf("framing-only header       %.2f ns per frame (%zu B)\n", plain_ns,
           offsetof(plain_hdr_t, pad));
    printf("fingerprint cost          %.2f ns per frame, %zu header bytes\n", extra,
           sizeof(colli_frame_t) - offsetof(plain_hdr_t, pad));
    /* a 2-rank 8-byte all_reduce (recursive doubling) sends and receives one frame per rank */
    printf("8-byte all_reduce, 2 ranks: 2 frames per rank = %.3f us per call\n",
           2.0 * extra / 1000.0);
    return 0;
}
