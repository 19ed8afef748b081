/*
 * coll-perf's options (nccl-tests' flags plus -C/--collective and --json), their usage text,
 * and the names of the collectives, datatypes and reduction ops they take.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_perf.h"

const struct perf_kind perf_kinds[K_NUM] = {
    [K_ALL_REDUCE] = {"all_reduce", 1, 0, 1},
    [K_ALL_GATHER] = {"all_gather", 0, 0, 1},
    [K_REDUCE_SCATTER] = {"reduce_scatter", 1, 0, 1},
    [K_BROADCAST] = {"broadcast", 0, 1, 1},
    [K_REDUCE] = {"reduce", 1, 1, 1},
    [K_ALL_TO_ALL] = {"all_to_all", 0, 0, 0},
    [K_SENDRECV] = {"sendrecv", 0, 0, 0},
    [K_ISENDRECV] = {"isendrecv", 0, 0, 0},
};

const char *const perf_dt_names[COLL_NUM_DATATYPES] = {
    "int8",    "uint8",    "int32",   "uint32",  "int64",       "uint64",
    "float16", "bfloat16", "float32", "float64", "float8_e4m3", "float8_e5m2"};
const size_t perf_dt_sizes[COLL_NUM_DATATYPES] = {1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 1, 1};
const char *const perf_op_names[COLL_NUM_OPS] = {"sum", "prod", "min", "max", "avg"};

static int parse_size(const char *s, size_t *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || errno != 0 || v < 0)
        return -1;
    double mult = 1;
    switch (*end) {
    case 'k':
    case 'K':
        mult = 1024.0, end++;
        break;
    case 'm':
    case 'M':
        mult = 1024.0 * 1024, end++;
        break;
    case 'g':
    case 'G':
        mult = 1024.0 * 1024 * 1024, end++;
        break;
    default:
        break;
    }
    if (*end == 'B' || *end == 'b')
        end++;
    if (*end != '\0')
        return -1;
    *out = (size_t)(v * mult);
    return 0;
}

int perf_parse_int(const char *s, int minv, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < minv || v > 1000000000)
        return -1;
    *out = (int)v;
    return 0;
}

static int parse_mask(const char *s, const char *const *names, int n, const char *const *alias,
                      const int *alias_val, int *mask)
{
    if (strcmp(s, "all") == 0) {
        *mask = (1 << n) - 1;
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *mask = 1 << i;
            return 0;
        }
    for (int i = 0; alias != NULL && alias[i] != NULL; i++)
        if (strcmp(s, alias[i]) == 0) {
            *mask = 1 << alias_val[i];
            return 0;
        }
    return -1;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(
        f,
        "usage: coll-run -n N [--agent] %s [options]\n"
        "  -C, --collective NAME   all_reduce, all_gather, reduce_scatter, broadcast, reduce,\n"
        "                          all_to_all, sendrecv, isendrecv (sendrecv's exchange as\n"
        "                          non-blocking requests; host buffers) or all (default\n"
        "                          all_reduce)\n"
        "  -b, --minbytes SIZE     smallest total size, K/M/G suffixes (default 32M)\n"
        "  -e, --maxbytes SIZE     largest total size (default 32M)\n"
        "  -f, --stepfactor F      multiply the size by F each step (default 2)\n"
        "  -i, --stepbytes SIZE    add SIZE each step instead of multiplying\n"
        "  -d, --datatype T        int8 uint8 int32 uint32 int64 uint64 float16 bfloat16\n"
        "                          float32 float64 float8_e4m3 float8_e5m2 (fp8_e4m3, fp8_e5m2)\n"
        "                          or all (default float32)\n"
        "  -o, --op OP             sum prod min max avg or all (default sum)\n"
        "  -r, --root R            root of broadcast and reduce (default 0)\n"
        "  -w, --warmup_iters N    untimed iterations (default 5)\n"
        "  -n, --iters N           timed iterations (default 20)\n"
        "  -z, --placement P       out (out-of-place), in (in-place) or both (default)\n"
        "  -c, --check 0|1         check every result exactly (default 1), as nccl-tests' -c\n"
        "  -R, --registered 0|1    1: buffers from coll_mem_alloc, which ranks of one host\n"
        "                          read and write directly (as nccl-tests' -R); default 0\n"
        "      --device host|cuda  cuda: buffers in GPU memory, calls on a CUDA stream (the GPU\n"
        "                          plugin libcoll_cuda.so.0 or COLL_CUDA_PLUGIN); default host\n"
        "  -G, --cuda_graph N      with --device cuda: capture the timed iterations into a CUDA\n"
        "                          graph and launch it N times (as nccl-tests' -G); default 0\n"
        "      --json FILE         also write the rows as JSON to FILE ('-': stdout, no table)\n"
        "  -h, --help\n"
        "The communicator comes from COLL_UNIQUE_ID, COLL_RANK and COLL_NRANKS (coll-run sets\n"
        "them) or, when COLL_UNIQUE_ID is not set, from the kcoll agent at COLL_AGENT_SOCKET\n"
        "(coll_comm_init_agent: in a pod with the kcoll sidecar, or under coll-run --agent).\n",
        prog);
}

static void usage_exit(const char *prog) __attribute__((noreturn));
static void usage_exit(const char *prog)
{
    usage(stderr, prog);
    exit(2);
}

/* -c takes only 0 or 1; a collective's name there is most likely meant for -C, so say so. */
static void parse_check(const char *arg, const char *prog, int *check)
{
    if (strcmp(arg, "0") != 0 && strcmp(arg, "1") != 0) {
        int is_coll = 0;
        for (int i = 0; i < K_NUM; i++)
            is_coll |= strcmp(arg, perf_kinds[i].name) == 0;
        fprintf(stderr, "coll-perf: invalid value '%s' for -c/--check (0 or 1)%s%s\n", arg,
                is_coll ? "; the collective is -C/--collective " : "", is_coll ? arg : "");
        usage_exit(prog);
    }
    *check = strcmp(arg, "1") == 0;
}

static int parse_placement(const char *arg, struct opts *o)
{
    o->do_out = strcmp(arg, "out") == 0 || strcmp(arg, "oop") == 0 || strcmp(arg, "both") == 0;
    o->do_in = strcmp(arg, "in") == 0 || strcmp(arg, "ip") == 0 || strcmp(arg, "both") == 0;
    return !o->do_out && !o->do_in;
}

/* One option into o: nonzero when its value is bad. -c, -h and unknown options exit here. */
static int parse_option(int c, const char *arg, const char *prog, struct opts *o)
{
    static const char *const dt_alias[] = {"half", "fp16", "bf16", "float",    "fp32",     "double",
                                           "fp64", "char", "int",  "fp8_e4m3", "fp8_e5m2", NULL};
    static const int dt_alias_val[] = {6, 6, 7, 8, 8, 9, 9, 0, 2, 10, 11};
    const char *kind_names[K_NUM];
    for (int i = 0; i < K_NUM; i++)
        kind_names[i] = perf_kinds[i].name;
    switch (c) {
    case 'C':
        return parse_mask(arg, kind_names, K_NUM, NULL, NULL, &o->kind_mask);
    case 'b':
        return parse_size(arg, &o->minbytes);
    case 'e':
        return parse_size(arg, &o->maxbytes);
    case 'f':
        o->stepfactor = strtod(arg, NULL);
        return !(o->stepfactor > 1.0);
    case 'i':
        return parse_size(arg, &o->stepbytes) || o->stepbytes == 0;
    case 'd':
        return parse_mask(arg, perf_dt_names, COLL_NUM_DATATYPES, dt_alias, dt_alias_val,
                          &o->dt_mask);
    case 'o':
        return parse_mask(arg, perf_op_names, COLL_NUM_OPS, NULL, NULL, &o->op_mask);
    case 'r':
        return perf_parse_int(arg, 0, &o->root);
    case 'w':
        return perf_parse_int(arg, 0, &o->warmup);
    case 'n':
        return perf_parse_int(arg, 1, &o->iters);
    case 'z':
        return parse_placement(arg, o);
    case 'c':
        parse_check(arg, prog, &o->check);
        return 0;
    case 'R':
        o->registered = strcmp(arg, "1") == 0;
        return strcmp(arg, "0") != 0 && strcmp(arg, "1") != 0;
    case 'D':
        o->device = strcmp(arg, "cuda") == 0;
        return strcmp(arg, "host") != 0 && strcmp(arg, "cuda") != 0;
    case 'G':
        return perf_parse_int(arg, 0, &o->graph);
    case 'J':
        o->json = arg;
        return 0;
    case 'h':
        usage(stdout, prog);
        exit(0);
    default:
        usage_exit(prog);
    }
}

void perf_parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {{"collective", required_argument, NULL, 'C'},
                                             {"minbytes", required_argument, NULL, 'b'},
                                             {"maxbytes", required_argument, NULL, 'e'},
                                             {"stepfactor", required_argument, NULL, 'f'},
                                             {"stepbytes", required_argument, NULL, 'i'},
                                             {"datatype", required_argument, NULL, 'd'},
                                             {"op", required_argument, NULL, 'o'},
                                             {"root", required_argument, NULL, 'r'},
                                             {"warmup_iters", required_argument, NULL, 'w'},
                                             {"iters", required_argument, NULL, 'n'},
                                             {"placement", required_argument, NULL, 'z'},
                                             {"check", required_argument, NULL, 'c'},
                                             {"registered", required_argument, NULL, 'R'},
                                             {"device", required_argument, NULL, 'D'},
                                             {"cuda_graph", required_argument, NULL, 'G'},
                                             {"json", required_argument, NULL, 'J'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    *o = (struct opts){.kind_mask = 1 << K_ALL_REDUCE,
                       .dt_mask = 1 << COLL_FLOAT32,
                       .op_mask = 1 << COLL_SUM,
                       .minbytes = 32u << 20,
                       .maxbytes = 32u << 20,
                       .stepfactor = 2,
                       .warmup = 5,
                       .iters = 20,
                       .do_out = 1,
                       .do_in = 1,
                       .check = 1};
    int c;
    while ((c = getopt_long(argc, argv, "C:c:b:e:f:i:d:o:r:w:n:z:R:G:h", longopts, NULL)) != -1) {
        if (parse_option(c, optarg, argv[0], o)) {
            fprintf(stderr, "coll-perf: invalid value '%s' for -%c\n", optarg, c);
            usage_exit(argv[0]);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "coll-perf: unexpected argument '%s'\n", argv[optind]);
        exit(2);
    }
    if (o->graph > 0 && !o->device) {
        fprintf(stderr, "coll-perf: -G (CUDA graphs) needs --device cuda\n");
        exit(2);
    }
    if (o->minbytes > o->maxbytes) {
        fprintf(stderr, "coll-perf: -b (%zu) is larger than -e (%zu)\n", o->minbytes, o->maxbytes);
        exit(2);
    }
}
