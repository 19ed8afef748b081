/*
 * coll-run's options: the usage text, reading and checking the command line, and finding the
 * program and (with --agent) coll-agent, because a path that cannot be run is a usage error too.
 */
#include <coll.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_run.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: coll-run -n N [--ifname SPEC] [--timeout SEC] [--agent[=PATH] [--pin-version V]\n"
        "                [--pods P --ranks-per-pod R [--gpus-per-pod G]]]\n"
        "                [--nnodes H --node-rank K [--id ID]] [--] program [args...]\n"
        "\n"
        "Start N ranks of program on this host. Each rank gets the parent's environment plus\n"
        "COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK and COLL_SOCKET_IFNAME; its\n"
        "stdout and stderr lines are forwarded with a \"[rank R] \" prefix. When a rank fails\n"
        "the others are stopped (SIGTERM, SIGKILL after %.0f s).\n"
        "\n"
        "  -n, --nranks N     number of ranks (1..%d)\n"
        "  --ifname SPEC      interface spec for the bootstrap and the ranks, COLL_SOCKET_IFNAME\n"
        "                     syntax (default: $COLL_SOCKET_IFNAME if set, else \"%s\")\n"
        "  --timeout SEC      stop every rank after SEC seconds and fail (exit %d)\n"
        "  --agent[=PATH]     serve every rank from its own coll-agent in standalone mode, as a\n"
        "                     pod's kcoll sidecar would: the ranks get COLL_AGENT_SOCKET (and\n"
        "                     COLL_LOCAL_RANK) instead of COLL_UNIQUE_ID/COLL_RANK/COLL_NRANKS "
        "and\n"
        "                     create their communicator with coll_comm_init_agent. PATH defaults\n"
        "                     to coll-agent next to coll-run, then ../k8s-agent/coll-agent (the\n"
        "                     build tree), then PATH. The agents' output is prefixed \"[agent R] "
        "\"\n"
        "  --pin-version V    with --agent: the libraryVersion the topology pins (default: this\n"
        "                     coll-run's library, %s; \"\" pins none)\n"
        "  --pods P --ranks-per-pod R\n"
        "                     with --agent: P \"pods\" of R ranks each (-n P*R, or leave -n out);\n"
        "                     one agent per pod serves its R ranks, which get LOCAL_RANK 0..R-1\n"
        "                     and LOCAL_WORLD_SIZE R as torchrun sets them (rank = pod*R + local)\n"
        "  --gpus-per-pod G   with --pods/--ranks-per-pod: each pod has G GPUs, as its\n"
        "                     nvidia.com/gpu limit would say; local rank r binds GPU r %% G\n"
        "  --nnodes H         the job spans H hosts, -n ranks on each (ranks K*n..K*n+n-1 on\n"
        "                     node K); node 0 makes the unique id, serves the bootstrap root\n"
        "                     and prints the command for the others. The interface is chosen\n"
        "                     automatically (the root's network first) unless --ifname or\n"
        "                     COLL_SOCKET_IFNAME says otherwise\n"
        "  --node-rank K      this host's place, 0..H-1 (default 0)\n"
        "  --id ID            on nodes 1..H-1: the unique id node 0 printed\n"
        "  -h, --help         this text\n"
        "\n"
        "Exit status: 0 when every rank exited 0; the first failing rank's exit status (128+N\n"
        "for signal N); %d on timeout; 128+N when coll-run got signal N; %d for bad usage;\n"
        "1 when the agents cannot be started.\n",
        KILL_GRACE_S, MAX_RANKS, DEFAULT_IFNAME, EXIT_TIMEOUT, coll_get_version_string(),
        EXIT_TIMEOUT, EXIT_USAGE);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;

    fputs("coll-run: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputs("\n\n", stderr);
    usage(stderr);
    exit(EXIT_USAGE);
}

static int parse_nranks(const char *s)
{
    char *end;
    long v;

    errno = 0;
    v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0')
        usage_error("-n: '%s' is not a number", s);
    if (v <= 0)
        usage_error("-n: the number of ranks must be at least 1, got %ld", v);
    if (v > MAX_RANKS)
        usage_error("-n: at most %d ranks, got %ld", MAX_RANKS, v);
    return (int)v;
}

static double parse_timeout(const char *s)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno != 0 || end == s || *end != '\0' || !isfinite(v) || v <= 0)
        usage_error("--timeout: '%s' is not a positive number of seconds", s);
    return v;
}

static int parse_count(const char *opt, const char *s, long lo, long hi)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < lo || v > hi)
        usage_error("%s: '%s' is not a whole number in %ld..%ld", opt, s, lo, hi);
    return (int)v;
}

/* Every option up to the program; -h prints the usage and exits here. */
static void parse_options(int argc, char **argv, struct run_opts *o)
{
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"ifname", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},
        {"agent", optional_argument, NULL, 'a'},
        {"pin-version", required_argument, NULL, 'p'},
        {"nnodes", required_argument, NULL, 'N'},
        {"node-rank", required_argument, NULL, 'K'},
        {"id", required_argument, NULL, 'I'},
        {"pods", required_argument, NULL, 'P'},
        {"ranks-per-pod", required_argument, NULL, 'R'},
        {"gpus-per-pod", required_argument, NULL, 'G'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt;

    opterr = 0;
    /* "+": stop at the first non-option, so the program's own options stay its own; ":" makes
     * a missing value report ':'. */
    while ((opt = getopt_long(argc, argv, "+:n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            o->nranks = parse_nranks(optarg);
            break;
        case 'i':
            if (*optarg == '\0')
                usage_error("--ifname: empty interface spec");
            o->ifname = optarg;
            break;
        case 't':
            o->timeout_s = parse_timeout(optarg);
            break;
        case 'a':
            o->agent_mode = true;
            if (optarg != NULL && *optarg == '\0')
                usage_error("--agent=: empty path (use --agent alone for the default)");
            o->agent_arg = optarg;
            break;
        case 'p':
            o->pin_version = optarg;
            break;
        case 'N':
            o->nnodes = parse_count("--nnodes", optarg, 1, MAX_RANKS);
            break;
        case 'K':
            o->node_rank = parse_count("--node-rank", optarg, 0, MAX_RANKS - 1);
            break;
        case 'P':
            o->npods = parse_count("--pods", optarg, 1, MAX_RANKS);
            break;
        case 'R':
            o->ranks_per_pod = parse_count("--ranks-per-pod", optarg, 1, 256);
            break;
        case 'G':
            o->gpus_per_pod = parse_count("--gpus-per-pod", optarg, 1, 256);
            break;
        case 'I':
            if (*optarg == '\0')
                usage_error("--id: empty unique id");
            o->join_id = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE);
        case ':':
            usage_error("option %s needs a value", argv[optind - 1]);
        default:
            if (optopt != 0)
                usage_error("unknown option -%c", optopt);
            usage_error("unknown option %s", argv[optind - 1]);
        }
    }
}

/* The half of a lookup failure message that says why: a name with a slash is not looked up. */
static const char *lookup_failure(const char *prog)
{
    return strchr(prog, '/') != NULL ? "cannot be run" : "not found in PATH";
}

static char *find_program(const char *prog)
{
    char *path = run_resolve_program(prog);
    int err = errno;

    if (path == NULL)
        usage_error("program '%s' %s: %s", prog, lookup_failure(prog), strerror(err));
    return path;
}

static char *find_agent(const char *given)
{
    char tried[PATH_MAX * 2 + 64] = "";
    char *path = run_find_agent(given, tried, sizeof(tried));
    int err = errno;

    if (path == NULL && given != NULL)
        usage_error("--agent: '%s' %s: %s", given, lookup_failure(given), strerror(err));
    if (path == NULL)
        usage_error("--agent: %s not found (looked at %s); build it (k8s-agent/) or give "
                    "its path with --agent=PATH",
                    AGENT_NAME, tried);
    return path;
}

void run_parse_args(int argc, char **argv, struct run_opts *o)
{
    memset(o, 0, sizeof(*o));
    parse_options(argc, argv, o);
    if ((o->npods > 0 || o->ranks_per_pod > 0) && !o->agent_mode)
        usage_error("--pods and --ranks-per-pod need --agent (one agent serves each pod's ranks)");
    if (o->gpus_per_pod > 0 && o->npods == 0 && o->ranks_per_pod == 0)
        usage_error("--gpus-per-pod needs --pods or --ranks-per-pod (and --agent)");
    if (o->npods > 0 || o->ranks_per_pod > 0) {
        long per = o->ranks_per_pod > 0 ? o->ranks_per_pod : 1;
        long pods = o->npods > 0 ? o->npods : (o->nranks > 0 ? o->nranks / per : 0);
        if (pods < 1 || (o->nranks > 0 && o->nranks != pods * per))
            usage_error("-n %d does not match --pods %ld x --ranks-per-pod %ld; give -n P*R or "
                        "leave it out",
                        o->nranks, pods, per);
        if (pods * per > MAX_RANKS)
            usage_error("--pods %ld x --ranks-per-pod %ld is more than %d ranks", pods, per,
                        MAX_RANKS);
        o->nranks = (int)(pods * per);
        o->npods = (int)pods;
        if (o->ranks_per_pod == 0)
            o->ranks_per_pod = 1;
    }
    if (o->nranks == 0)
        usage_error("missing -n N (the number of ranks)");
    if (o->pin_version != NULL && !o->agent_mode)
        usage_error("--pin-version needs --agent (it is the version the agents pin)");
    if (o->nnodes == 0)
        o->nnodes = 1;
    if (o->node_rank >= o->nnodes)
        usage_error("--node-rank %d: the nodes are 0..%d (--nnodes %d)", o->node_rank,
                    o->nnodes - 1, o->nnodes);
    if (o->nnodes > 1 && o->agent_mode)
        usage_error("--nnodes with --agent: each host's agents serve its own ranks only; start "
                    "multi-host jobs from a unique id (node 0 prints the --id for the others)");
    if ((long)o->nnodes * o->nranks > 1L << 20)
        usage_error("--nnodes %d x -n %d ranks is too many", o->nnodes, o->nranks);
    if (o->node_rank > 0 && o->join_id == NULL)
        usage_error("--node-rank %d needs --id ID: the unique id that node 0's coll-run printed",
                    o->node_rank);
    if (o->node_rank == 0 && o->join_id != NULL)
        usage_error("--id is for nodes 1..%d; node 0 makes the unique id and prints it",
                    o->nnodes - 1);
    if (optind >= argc)
        usage_error("missing the program to run");
    o->argv = &argv[optind];
    o->prog_path = find_program(o->argv[0]);
    if (o->agent_mode)
        o->agent_path = find_agent(o->agent_arg);

    /* An explicit --ifname wins over the environment; otherwise the user's setting is kept. */
    o->override_ifname = o->ifname != NULL || getenv(ENV_SOCKET_IFNAME) == NULL;
    /* one host: loopback by default; several: automatic (the root's network first) */
    if (o->ifname == NULL)
        o->ifname = !o->override_ifname ? getenv(ENV_SOCKET_IFNAME)
                    : o->nnodes > 1     ? ""
                                        : DEFAULT_IFNAME;
}
