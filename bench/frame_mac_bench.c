/* Cost of authenticating socket frame headers (issue 21, finding 1). Every frame header sent over
 * a socket carries a SipHash-64 MAC keyed with its connection's key over the header and the
 * frame's number on the connection (colli_frame_mac); the sender computes it once per frame and
 * the receiver once more. This measures the two (ns per frame, best of 5 runs) and prints what
 * they add to a 64 MiB all_reduce of 2 ranks over sockets: the frames each rank sends and
 * receives, at the default chunk size, times that cost, against the time of the call at the
 * bandwidth given (the measured socket busbw, default 2.5 GB/s).
 *
 *   frame-mac-bench [-n FRAMES] [-b GB/s]      (default 20 M frames) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/handshake.h"

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    long frames = 20 * 1000 * 1000;
    double gbps = 2.5;
    int c;
    while ((c = getopt(argc, argv, "n:b:")) != -1) {
        if (c == 'n')
            frames = atol(optarg);
        else if (c == 'b')
            gbps = atof(optarg);
        else
            return 2;
    }
    uint8_t key[16];
    for (int i = 0; i < 16; i++)
        key[i] = (uint8_t)(i * 29 + 7);
    colli_frame_t f;
    memset(&f, 0, sizeof(f));
    f.magic = COLLI_FRAME_MAGIC;
    f.type = COLLI_FRAME_DATA;
    f.coll = COLLI_COLL_ALL_REDUCE;
    f.count = 16u << 20;
    f.len = 512u << 10;
    double best = 1e9;
    uint64_t sink = 0;
    for (int run = 0; run < 5; run++) {
        double t0 = now_s();
        for (long i = 0; i < frames; i++) {
            f.seq = (uint64_t)i;
            sink ^= colli_frame_mac(key, &f, (uint64_t)i);
        }
        double ns = (now_s() - t0) * 1e9 / (double)frames;
        if (ns < best)
            best = ns;
    }
    /* a 2-rank ring all_reduce of 64 MiB in units of COLL_CHUNK_SIZE (512 KiB by default): each
     * rank sends and receives 2 (n-1)/n of the data, so 128 frames each way */
    const double bytes = 64.0 * 1024 * 1024, chunk = 512.0 * 1024;
    const double per_rank = 2.0 * bytes / 2.0 / chunk; /* frames sent (= received) per rank */
    const double added_us = per_rank * 2.0 * best / 1000.0;
    const double call_us = bytes / (gbps * 1e9) * 1e6; /* 2 ranks: busbw = algbw */
    printf("colli_frame_mac: %.1f ns per frame (best of 5 x %ld; checksum %llx)\n", best, frames,
           (unsigned long long)sink);
    printf("64 MiB all_reduce, 2 ranks, 512 KiB units: %.0f frames sent and %.0f received per rank "
           "-> %.1f us of MACs, against %.0f us for the call at %.2f GB/s busbw: %.4f %%\n",
           per_rank, per_rank, added_us, call_us, gbps, 100.0 * added_us / call_us);
    printf("8 B all_reduce, 2 ranks: 1 frame each way per rank -> %.2f us per call\n",
           2.0 * best / 1000.0);
    return 0;
}
