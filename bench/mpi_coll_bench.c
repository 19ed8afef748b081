/*
 * mpi_coll_bench: the collectives that coll-perf measures, through MPI, timed the same way and
 * printed in coll-perf's table layout (out-of-place columns; the in-place columns read N/A) so
 * that bench/run.sh reads both with one parser.
 *
 * Sizes follow nccl-tests: "size" is the total buffer (nranks * per-rank count for all_gather,
 * reduce_scatter and all_to_all). Data type float32, reduction sum. Bus bandwidth uses the same
 * factors as coll-perf: all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n;
 * broadcast, reduce, sendrecv 1.
 *
 * Built by bench/run.sh with mpicc.openmpi (not part of the CMake build):
 *   mpirun -n 4 mpi_coll_bench -C all_reduce -b 8 -e 64M -f 2 -w 5 -n 20
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind {
    K_ALL_REDUCE,
    K_ALL_GATHER,
    K_REDUCE_SCATTER,
    K_BROADCAST,
    K_REDUCE,
    K_ALL_TO_ALL,
    K_SENDRECV,
    K_NUM
};
static const char *const kind_names[K_NUM] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv"};

static int parse_size(const char *s, size_t *out)
{
    char *end;
    double v = strtod(s, &end);
    double mult = 1;
    if (end == s || v < 0)
        return -1;
    if (*end == 'k' || *end == 'K')
        mult = 1024.0, end++;
    else if (*end == 'm' || *end == 'M')
        mult = 1024.0 * 1024, end++;
    else if (*end == 'g' || *end == 'G')
        mult = 1024.0 * 1024 * 1024, end++;
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

static void check(int rc, const char *what)
{
    if (rc != MPI_SUCCESS) {
        char msg[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(rc, msg, &len);
        fprintf(stderr, "mpi_coll_bench: %s failed: %s\n", what, msg);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

static void run_once(enum kind k, float *sb, float *rb, int count, int root, int rank, int n)
{
    switch (k) {
    case K_ALL_REDUCE:
        check(MPI_Allreduce(sb, rb, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
        break;
    case K_ALL_GATHER:
        check(MPI_Allgather(sb, count, MPI_FLOAT, rb, count, MPI_FLOAT, MPI_COMM_WORLD),
              "MPI_Allgather");
        break;
    case K_REDUCE_SCATTER:
        check(MPI_Reduce_scatter_block(sb, rb, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
              "MPI_Reduce_scatter_block");
        break;
    case K_BROADCAST:
        check(MPI_Bcast(rank == root ? sb : rb, count, MPI_FLOAT, root, MPI_COMM_WORLD),
              "MPI_Bcast");
        break;
    case K_REDUCE:
        check(MPI_Reduce(sb, rb, count, MPI_FLOAT, MPI_SUM, root, MPI_COMM_WORLD), "MPI_Reduce");
        break;
    case K_ALL_TO_ALL:
        check(MPI_Alltoall(sb, count, MPI_FLOAT, rb, count, MPI_FLOAT, MPI_COMM_WORLD),
              "MPI_Alltoall");
        break;
    default:
        check(MPI_Sendrecv(sb, count, MPI_FLOAT, (rank + 1) % n, 0, rb, count, MPI_FLOAT,
                           (rank + n - 1) % n, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
              "MPI_Sendrecv");
        break;
    }
}

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: mpirun -n N %s [-C all_reduce|all_gather|reduce_scatter|broadcast|reduce|"
            "all_to_all|sendrecv|all] [-b SIZE] [-e SIZE] [-f FACTOR] [-w WARMUP] [-n ITERS] "
            "[-r ROOT]\n",
            prog);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    int kind_mask = 1 << K_ALL_REDUCE, warmup = 5, iters = 20, root = 0, bad = 0;
    size_t minbytes = 32u << 20, maxbytes = 32u << 20;
    double factor = 2;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (a[0] != '-' || a[1] == '\0' || a[2] != '\0' || v == NULL) {
            bad = 1;
            break;
        }
        i++;
        switch (a[1]) {
        case 'C': /* coll-perf's flag; -c kept as an alias */
        case 'c':
            kind_mask = strcmp(v, "all") == 0 ? (1 << K_NUM) - 1 : 0;
            for (int k = 0; k < K_NUM; k++)
                if (strcmp(v, kind_names[k]) == 0)
                    kind_mask = 1 << k;
            bad = kind_mask == 0;
            break;
        case 'b':
            bad = parse_size(v, &minbytes);
            break;
        case 'e':
            bad = parse_size(v, &maxbytes);
            break;
        case 'f':
            factor = atof(v);
            bad = !(factor > 1);
            break;
        case 'w':
            warmup = atoi(v);
            bad = warmup < 0;
            break;
        case 'n':
            iters = atoi(v);
            bad = iters < 1;
            break;
        case 'r':
            root = atoi(v);
            bad = root < 0 || root >= n;
            break;
        default:
            bad = 1;
            break;
        }
        if (bad)
            break;
    }
    if (bad || minbytes > maxbytes) {
        if (rank == 0)
            usage(argv[0]);
        MPI_Finalize();
        return 2;
    }

    float *sb = malloc(maxbytes + 64), *rb = malloc(maxbytes + 64);
    if (sb == NULL || rb == NULL) {
        fprintf(stderr, "mpi_coll_bench: cannot allocate 2 x %zu bytes\n", maxbytes);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    for (size_t i = 0; i < maxbytes / sizeof(float) + 16; i++)
        sb[i] = (float)((i * 7 + (size_t)rank * 3) % 5) - 2, rb[i] = 0;

    if (rank == 0) {
        char ver[MPI_MAX_LIBRARY_VERSION_STRING];
        int len = 0;
        MPI_Get_library_version(ver, &len);
        char *nl = strchr(ver, '\n');
        if (nl != NULL)
            *nl = '\0';
        printf("# mpi_coll_bench: %s, nranks %d\n# warmup iters: %d iters: %d\n", ver, n, warmup,
               iters);
    }
    for (int k = 0; k < K_NUM; k++) {
        if (!(kind_mask & (1 << k)))
            continue;
        if (rank == 0)
            printf("#\n# Collective: %s\n# %10s %12s %8s %6s %6s %9s %7s %7s %6s\n", kind_names[k],
                   "size", "count", "type", "redop", "root", "time(us)", "algbw", "busbw",
                   "#wrong");
        for (size_t bytes = minbytes;;) {
            size_t count = bytes / sizeof(float), total = count * sizeof(float);
            if (k == K_ALL_GATHER || k == K_REDUCE_SCATTER || k == K_ALL_TO_ALL) {
                count /= (size_t)n;
                total = count * (size_t)n * sizeof(float);
            }
            double factor_bus = 1;
            if (k == K_ALL_REDUCE)
                factor_bus = 2.0 * (n - 1) / n;
            else if (k == K_ALL_GATHER || k == K_REDUCE_SCATTER || k == K_ALL_TO_ALL)
                factor_bus = (double)(n - 1) / n;
            for (int i = 0; i < warmup; i++)
                run_once(k, sb, rb, (int)count, root, rank, n);
            check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
            double t0 = MPI_Wtime();
            for (int i = 0; i < iters; i++)
                run_once(k, sb, rb, (int)count, root, rank, n);
            double mine = (MPI_Wtime() - t0) / iters, worst = 0;
            check(MPI_Allreduce(&mine, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD),
                  "MPI_Allreduce");
            double algbw = worst > 0 ? (double)total / 1e9 / worst : 0;
            if (rank == 0) {
                printf("  %10zu %12zu %8s %6s %6d %9.2f %7.3f %7.3f %6s %9s %7s %7s %6s\n", total,
                       count, "float32",
                       (k == K_ALL_REDUCE || k == K_REDUCE_SCATTER || k == K_REDUCE) ? "sum"
                                                                                     : "none",
                       (k == K_BROADCAST || k == K_REDUCE) ? root : -1, worst * 1e6, algbw,
                       algbw * factor_bus, "N/A", "N/A", "N/A", "N/A", "N/A");
                fflush(stdout);
            }
            size_t next = (size_t)((double)bytes * factor);
            if (bytes >= maxbytes)
                break;
            bytes = next > bytes ? next : bytes + 1;
            if (bytes > maxbytes)
                break;
        }
    }
    free(sb);
    free(rb);
    MPI_Finalize();
    return 0;
}
