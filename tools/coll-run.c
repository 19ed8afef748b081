/*
 * coll-run: start N local ranks of a program, each with the environment a kcoll rank needs
 * (COLL_UNIQUE_ID, COLL_RANK, COLL_NRANKS, COLL_LOCAL_RANK, COLL_SOCKET_IFNAME), forward their
 * output line by line with a "[rank R] " prefix, and stop every rank as soon as one fails.
 *
 * coll-run creates the unique id itself, so the bootstrap root thread lives in this process:
 * coll-run stays alive, forwarding output, until every rank has exited.
 *
 * With --agent, coll-run serves each rank the way a pod's kcoll sidecar would: it writes a
 * standalone topology (a free root port, a fresh random secret, the interface, the pinned library
 * version) into a private temporary directory, starts one `coll-agent --topology` per rank, waits
 * until every agent's socket exists and then starts the ranks with COLL_AGENT_SOCKET instead of
 * COLL_UNIQUE_ID (the ranks call coll_comm_init_agent; rank 0 hosts the bootstrap root). The
 * agents' output is forwarded with an "[agent R] " prefix; they are stopped (SIGTERM, then
 * SIGKILL) and the directory is removed once the ranks are done.
 *
 * Signals: SIGCHLD, SIGINT and SIGTERM are blocked before the library starts its thread (so only
 * the main thread ever sees them) and are unblocked only inside ppoll(), which makes the event
 * loop free of wake-up races. Every rank runs in its own process group so that a kill reaches
 * the shell pipelines and helpers it started too.
 */
#include <coll.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "coll_run.h"

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: coll-run -n N [--ifname SPEC] [--timeout SEC] [--agent[=PATH] [--pin-version V]]\n"
        "                [--] program [args...]\n"
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

/* ---- argument parsing ---- */

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

/* ---- main ---- */

static void check_fd_limit(int nprocs)
{
    struct rlimit rl;
    rlim_t need = (rlim_t)nprocs * 2 + 64;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        run_msg("getrlimit(RLIMIT_NOFILE) failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    if (rl.rlim_cur >= need)
        return;
    if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < need) {
        run_msg("%d processes need about %lu open files but the hard limit is %lu; raise it "
                "(ulimit -Hn)",
                nprocs, (unsigned long)need, (unsigned long)rl.rlim_max);
        exit(EXIT_FAILURE);
    }
    rl.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) {
        run_msg("cannot raise the open-files limit to %lu: %s", (unsigned long)need,
                strerror(errno));
        exit(EXIT_FAILURE);
    }
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"nranks", required_argument, NULL, 'n'},
        {"ifname", required_argument, NULL, 'i'},
        {"timeout", required_argument, NULL, 't'},
        {"agent", optional_argument, NULL, 'a'},
        {"pin-version", required_argument, NULL, 'p'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct run run;
    const char *ifname = NULL, *agent_arg = NULL, *pin_version = NULL;
    bool override_ifname;
    coll_unique_id_t id;
    char id_str[COLL_UNIQUE_ID_STRLEN];
    coll_result_t res;
    sigset_t orig_mask;
    int opt;

    memset(&run, 0, sizeof(run));
    opterr = 0;
    /* "+": stop at the first non-option, so the program's own options stay its own; ":" makes
     * a missing value report ':'. */
    while ((opt = getopt_long(argc, argv, "+:n:h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'n':
            run.nranks = parse_nranks(optarg);
            break;
        case 'i':
            if (*optarg == '\0')
                usage_error("--ifname: empty interface spec");
            ifname = optarg;
            break;
        case 't':
            run.timeout_s = parse_timeout(optarg);
            break;
        case 'a':
            run.agent_mode = true;
            if (optarg != NULL && *optarg == '\0')
                usage_error("--agent=: empty path (use --agent alone for the default)");
            agent_arg = optarg;
            break;
        case 'p':
            pin_version = optarg;
            break;
        case 'h':
            usage(stdout);
            return fflush(stdout) == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
        case ':':
            usage_error("option %s needs a value", argv[optind - 1]);
        default:
            if (optopt != 0)
                usage_error("unknown option -%c", optopt);
            usage_error("unknown option %s", argv[optind - 1]);
        }
    }
    if (run.nranks == 0)
        usage_error("missing -n N (the number of ranks)");
    if (pin_version != NULL && !run.agent_mode)
        usage_error("--pin-version needs --agent (it is the version the agents pin)");
    if (optind >= argc)
        usage_error("missing the program to run");
    run.argv = &argv[optind];
    run.prog_path = run_resolve_program(run.argv[0]);
    if (run.prog_path == NULL)
        usage_error("program '%s' %s: %s", run.argv[0],
                    strchr(run.argv[0], '/') != NULL ? "cannot be run" : "not found in PATH",
                    strerror(errno));
    if (run.agent_mode) {
        char tried[PATH_MAX * 2 + 64] = "";

        run.agent_path = run_find_agent(agent_arg, tried, sizeof(tried));
        if (run.agent_path == NULL && agent_arg != NULL)
            usage_error("--agent: '%s' %s: %s", agent_arg,
                        strchr(agent_arg, '/') != NULL ? "cannot be run" : "not found in PATH",
                        strerror(errno));
        if (run.agent_path == NULL)
            usage_error("--agent: %s not found (looked at %s); build it (k8s-agent/) or give "
                        "its path with --agent=PATH",
                        AGENT_NAME, tried);
    }

    /* An explicit --ifname wins over the environment; otherwise the user's setting is kept. */
    override_ifname = ifname != NULL || getenv(ENV_SOCKET_IFNAME) == NULL;
    if (ifname == NULL)
        ifname = override_ifname ? DEFAULT_IFNAME : getenv(ENV_SOCKET_IFNAME);

    run.nprocs = run.agent_mode ? 2 * run.nranks : run.nranks;
    check_fd_limit(run.nprocs);
    /* Before the library starts its bootstrap thread, so that the thread inherits the mask. */
    run_install_handlers(&orig_mask);

    run.ranks = run_xcalloc((size_t)run.nprocs, sizeof(*run.ranks));
    if (run.agent_mode) {
        /* No unique id here: rank 0 hosts the bootstrap root at the endpoint its agent serves. */
        run_write_topology(&run, ifname,
                           pin_version != NULL ? pin_version : coll_get_version_string());
        run_prepare_agents(&run);
    } else {
        res = coll_get_unique_id_ifname(&id, ifname);
        if (res != COLL_SUCCESS) {
            run_msg("cannot create a unique id on interface spec '%s': %s: %s", ifname,
                    coll_get_error_string(res), coll_get_last_error());
            return EXIT_FAILURE;
        }
        res = coll_unique_id_to_string(&id, id_str, sizeof(id_str));
        if (res != COLL_SUCCESS) {
            run_msg("cannot format the unique id: %s: %s", coll_get_error_string(res),
                    coll_get_last_error());
            return EXIT_FAILURE;
        }
    }
    for (int i = 0; i < run.nranks; i++) {
        run.ranks[i].rank = i;
        run.ranks[i].out.fd = -1;
        run.ranks[i].err.fd = -1;
        run.ranks[i].envp = run.agent_mode
                                ? run_build_agent_rank_env(i, run.ranks[run.nranks + i].sock_path)
                                : run_build_env(i, run.nranks, id_str, ifname, override_ifname);
    }
    if (run.timeout_s > 0)
        run.deadline = run_now_s() + run.timeout_s;

    if (run.agent_mode) {
        for (int i = run.nranks; i < run.nprocs && !run.stopping; i++) {
            int err = run_start_rank(&run, &run.ranks[i], &orig_mask);

            if (err != 0) {
                if (err > 0)
                    run_msg("cannot execute '%s' for agent %d: %s", run.agent_path, i - run.nranks,
                            strerror(err));
                run.stopping = true;
                run.exit_code = EXIT_FAILURE;
            }
        }
        if (!run.stopping)
            run_event_loop(&run, &orig_mask, PHASE_AGENTS);
    }
    for (int i = 0; i < run.nranks && !run.stopping; i++) {
        int err = run_start_rank(&run, &run.ranks[i], &orig_mask);

        run.ranks_launched = true;
        if (err != 0) {
            if (err > 0)
                run_msg("cannot execute '%s' for rank %d: %s", run.prog_path, i, strerror(err));
            /* Ranks already started would wait for the missing one until their timeout. */
            run_stop_all(&run, SIGTERM, err > 0 ? EXIT_USAGE : EXIT_FAILURE);
            break;
        }
    }

    run_event_loop(&run, &orig_mask, PHASE_RUN);

    if (!run.stopping) {
        /* Normal end: every rank exited on its own; a non-zero status would have stopped us. */
        run.exit_code = EXIT_SUCCESS;
    }
    run_remove_tmp_dir(&run);
    for (int i = 0; i < run.nprocs; i++) {
        struct rank *r = &run.ranks[i];

        run_free_env(r->envp);
        if (r->argv != NULL)
            free(r->argv[4]);
        free(r->argv);
        free(r->sock_path);
    }
    free(run.ranks);
    free(run.prog_path);
    free(run.agent_path);
    free(run.topo_path);
    if (fflush(stdout) != 0 && !run.stdout_broken)
        run_msg("cannot flush stdout: %s", strerror(errno));
    return run.exit_code;
}
