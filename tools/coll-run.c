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
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "coll_run.h"

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

/* Without --agent: the job's unique id, so the bootstrap root thread lives in coll-run. */
static bool make_unique_id(const char *ifname, char *id_str, size_t len)
{
    coll_unique_id_t id;
    coll_result_t res;

    res = coll_get_unique_id_ifname(&id, ifname);
    if (res != COLL_SUCCESS) {
        run_msg("cannot create a unique id on interface spec '%s': %s: %s", ifname,
                coll_get_error_string(res), coll_get_last_error());
        return false;
    }
    res = coll_unique_id_to_string(&id, id_str, len);
    if (res != COLL_SUCCESS) {
        run_msg("cannot format the unique id: %s: %s", coll_get_error_string(res),
                coll_get_last_error());
        return false;
    }
    return true;
}

/* Node 0 of a multi-host job: the one command to run on every other host. */
static void print_join(const struct run_opts *o, const char *id_str)
{
    char args[1024] = "";
    size_t used = 0;
    for (char **a = o->argv; *a != NULL && used < sizeof(args); a++) {
        int w = snprintf(args + used, sizeof(args) - used, " %s", *a);
        if (w < 0)
            break;
        used += (size_t)w;
    }
    run_msg("node 0 of %d serves the bootstrap root for %d ranks (%d per node); on node K "
            "(1..%d) run:",
            o->nnodes, o->nnodes * o->nranks, o->nranks, o->nnodes - 1);
    run_msg("  coll-run --nnodes %d --node-rank K --id %s -n %d%s", o->nnodes, id_str, o->nranks,
            args);
}

/* The job takes over the resolved paths; nothing is allocated or started yet. */
static void init_run(struct run *run, const struct run_opts *o)
{
    memset(run, 0, sizeof(*run));
    run->nranks = o->nranks;
    run->ranks_per_pod = o->ranks_per_pod > 0 ? o->ranks_per_pod : 1;
    run->npods = o->nranks / run->ranks_per_pod;
    run->local_env = o->ranks_per_pod > 0;
    run->gpus_per_pod = o->gpus_per_pod;
    run->nprocs = o->agent_mode ? o->nranks + run->npods : o->nranks;
    run->timeout_s = o->timeout_s;
    run->argv = o->argv;
    run->prog_path = o->prog_path;
    run->agent_mode = o->agent_mode;
    run->agent_path = o->agent_path;
}

/* Before any fork: a forked child of a multi-threaded process may not allocate. */
static void prepare_ranks(struct run *run, const struct run_opts *o, const char *id_str)
{
    const int first = o->node_rank * o->nranks, world = o->nnodes * o->nranks;
    for (int i = 0; i < run->nranks; i++) {
        struct rank *r = &run->ranks[i];

        r->rank = run->agent_mode ? i : first + i;
        r->out.fd = -1;
        r->err.fd = -1;
        r->envp = run->agent_mode
                      ? run_build_agent_rank_env(
                            i, run->ranks[run->nranks + i / run->ranks_per_pod].sock_path,
                            i % run->ranks_per_pod, run->local_env ? run->ranks_per_pod : 0)
                      : run_build_env(first + i, world, i, id_str, o->ifname, o->override_ifname);
    }
}

/* What the ranks are given before they start; false (message printed) when that fails. */
static bool prepare_job(struct run *run, const struct run_opts *o)
{
    char id_str[COLL_UNIQUE_ID_STRLEN] = "";

    run->ranks = run_xcalloc((size_t)run->nprocs, sizeof(*run->ranks));
    if (run->agent_mode) {
        /* No unique id here: rank 0 hosts the bootstrap root at the endpoint its agent serves. */
        run_write_topology(run, o->ifname,
                           o->pin_version != NULL ? o->pin_version : coll_get_version_string());
        run_prepare_agents(run);
    } else if (o->join_id != NULL) {
        /* another host's ranks: the id node 0 printed (its coll-run serves the root) */
        coll_unique_id_t check;
        if (coll_unique_id_from_string(&check, o->join_id) != COLL_SUCCESS) {
            run_msg("--id: %s", coll_get_last_error());
            return false;
        }
        snprintf(id_str, sizeof(id_str), "%s", o->join_id);
    } else if (!make_unique_id(o->ifname, id_str, sizeof(id_str))) {
        return false;
    } else if (o->nnodes > 1) {
        print_join(o, id_str);
    }
    prepare_ranks(run, o, id_str);
    return true;
}

/* --agent: no rank starts before every agent serves its socket, as in a pod. */
static void start_agents(struct run *run, const sigset_t *orig_mask)
{
    for (int i = run->nranks; i < run->nprocs && !run->stopping; i++) {
        int err = run_start_rank(run, &run->ranks[i], orig_mask);

        if (err != 0) {
            if (err > 0)
                run_msg("cannot execute '%s' for agent %d: %s", run->agent_path, i - run->nranks,
                        strerror(err));
            run->stopping = true;
            run->exit_code = EXIT_FAILURE;
        }
    }
    if (!run->stopping)
        run_event_loop(run, orig_mask, PHASE_AGENTS);
}

static void start_ranks(struct run *run, const sigset_t *orig_mask)
{
    for (int i = 0; i < run->nranks && !run->stopping; i++) {
        int err = run_start_rank(run, &run->ranks[i], orig_mask);

        run->ranks_launched = true;
        if (err != 0) {
            if (err > 0)
                run_msg("cannot execute '%s' for rank %d: %s", run->prog_path, i, strerror(err));
            /* Ranks already started would wait for the missing one until their timeout. */
            run_stop_all(run, SIGTERM, err > 0 ? EXIT_USAGE : EXIT_FAILURE);
            break;
        }
    }
}

static void free_run(struct run *run)
{
    for (int i = 0; i < run->nprocs; i++) {
        struct rank *r = &run->ranks[i];

        run_free_env(r->envp);
        if (r->argv != NULL)
            free(r->argv[4]);
        free(r->argv);
        free(r->sock_path);
    }
    free(run->ranks);
    free(run->prog_path);
    free(run->agent_path);
    free(run->topo_path);
}

int main(int argc, char **argv)
{
    struct run_opts o;
    struct run run;
    sigset_t orig_mask;

    run_parse_args(argc, argv, &o);
    init_run(&run, &o);
    check_fd_limit(run.nprocs);
    /* Before the library starts its bootstrap thread, so that the thread inherits the mask. */
    run_install_handlers(&orig_mask);
    if (!prepare_job(&run, &o)) {
        free_run(&run);
        return EXIT_FAILURE;
    }
    if (run.timeout_s > 0)
        run.deadline = run_now_s() + run.timeout_s;
    if (run.agent_mode)
        start_agents(&run, &orig_mask);
    start_ranks(&run, &orig_mask);
    run_event_loop(&run, &orig_mask, PHASE_RUN);

    if (!run.stopping) {
        /* Normal end: every rank exited on its own; a non-zero status would have stopped us. */
        run.exit_code = EXIT_SUCCESS;
    }
    run_remove_tmp_dir(&run);
    free_run(&run);
    if (fflush(stdout) != 0 && !run.stdout_broken)
        run_msg("cannot flush stdout: %s", strerror(errno));
    return run.exit_code;
}
