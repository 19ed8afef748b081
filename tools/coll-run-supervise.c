/*
 * Supervising the ranks: the signal handlers and the event loop that forwards output and handles
 * exits, signals and timeouts (coll-run-reap.c stops the ranks and reaps them).
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "coll_run.h"

static volatile sig_atomic_t got_sigchld;
static volatile sig_atomic_t got_term_signal; /* last SIGINT/SIGTERM received, 0 if none */
static volatile sig_atomic_t term_signal_count;

static void on_signal(int sig)
{
    if (sig == SIGCHLD) {
        got_sigchld = 1;
    } else {
        got_term_signal = sig;
        term_signal_count++;
    }
}

void run_install_handlers(sigset_t *orig_mask)
{
    struct sigaction sa;
    sigset_t block;

    sigemptyset(&block);
    sigaddset(&block, SIGCHLD);
    sigaddset(&block, SIGINT);
    sigaddset(&block, SIGTERM);
    if (sigprocmask(SIG_BLOCK, &block, orig_mask) != 0) {
        run_msg("sigprocmask failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigfillset(&sa.sa_mask);
    sa.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) != 0 || sigaction(SIGINT, &sa, NULL) != 0 ||
        sigaction(SIGTERM, &sa, NULL) != 0) {
        run_msg("sigaction failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
    /* A closed stdout must not kill coll-run (and with it the bootstrap root). */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = SIG_IGN;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGPIPE, &sa, NULL) != 0) {
        run_msg("sigaction failed: %s", strerror(errno));
        exit(EXIT_FAILURE);
    }
}

static void handle_events(struct run *run, enum phase phase)
{
    char sname[96];

    if (got_sigchld) {
        got_sigchld = 0;
        run_reap(run);
    }
    if (got_term_signal != 0) {
        int sig = got_term_signal;

        got_term_signal = 0;
        run_signal_name(sig, sname, sizeof(sname));
        if (run->nrunning > 0 && (term_signal_count > 1 || run->killed_hard)) {
            run_msg("got %s again; killing the ranks with SIGKILL", sname);
            run_stop_all(run, SIGKILL, 128 + sig);
        } else if (run->nrunning > 0) {
            run_msg("got %s; forwarding it to %d running rank(s)", sname, run->nrunning);
            run_stop_all(run, sig, 128 + sig);
        } else {
            if (!run->stopping) {
                run->stopping = true;
                run->exit_code = 128 + sig;
            }
            if (run->nagents_running > 0 && run->agents_stopping && !run->agents_killed_hard) {
                run_msg("got %s; killing the agents with SIGKILL", sname);
                run_stop_agents(run, SIGKILL);
            }
        }
    }
    if (run->deadline > 0 && !run->stopping && run_now_s() >= run->deadline) {
        if (phase == PHASE_AGENTS) {
            run_msg("timeout: %g s passed while the agents were starting; stopping them",
                    run->timeout_s);
            run->stopping = true;
            run->exit_code = EXIT_TIMEOUT;
        } else if (run->nrunning > 0) {
            run_msg("timeout: %g s passed with %d rank(s) still running; stopping them",
                    run->timeout_s, run->nrunning);
            for (int i = 0; i < run->nranks; i++)
                if (run->ranks[i].running)
                    run_msg("  rank %d (pid %d) was still running", i, (int)run->ranks[i].pid);
            run_stop_all(run, SIGTERM, EXIT_TIMEOUT);
        }
    }
    if (run->stopping && !run->killed_hard && run->nrunning > 0 && run_now_s() >= run->kill_at) {
        run_msg("%d rank(s) still running %.0f s after SIGTERM; sending SIGKILL", run->nrunning,
                KILL_GRACE_S);
        run_stop_all(run, SIGKILL, run->exit_code);
    }
    /* The agents outlive their ranks, as a sidecar does, and are stopped once the ranks are
     * gone (or never start). */
    if (phase == PHASE_RUN && run->nagents_running > 0 && run->nrunning == 0 &&
        !run->agents_stopping)
        run_stop_agents(run, SIGTERM);
    if (run->agents_stopping && !run->agents_killed_hard && run->nagents_running > 0 &&
        run_now_s() >= run->agents_kill_at) {
        run_msg("%d agent(s) still running %.0f s after SIGTERM; sending SIGKILL",
                run->nagents_running, KILL_GRACE_S);
        run_stop_agents(run, SIGKILL);
    }
}

/* Milliseconds until the next timed event, -1 for none. */
static int next_timeout_ms(const struct run *run, enum phase phase)
{
    double next = 0, t = run_now_s();
    double ms;

#define CONSIDER(when)                                                                             \
    do {                                                                                           \
        double w_ = (when);                                                                        \
        if (w_ > 0 && (next == 0 || w_ < next))                                                    \
            next = w_;                                                                             \
    } while (0)
    if (run->nrunning == 0 && run->nagents_running == 0)
        CONSIDER(run->drain_until);
    else if (run->stopping && !run->killed_hard && run->nrunning > 0)
        CONSIDER(run->kill_at);
    else if (!run->stopping && run->deadline > 0)
        CONSIDER(run->deadline);
    if (run->agents_stopping && !run->agents_killed_hard && run->nagents_running > 0)
        CONSIDER(run->agents_kill_at);
    if (phase == PHASE_AGENTS)
        CONSIDER(t + AGENT_POLL_MS / 1000.0);
#undef CONSIDER
    if (next == 0)
        return -1;
    ms = (next - t) * 1000.0 + 1.0;
    if (ms < 0)
        return 0;
    if (ms > INT_MAX)
        return INT_MAX;
    return (int)ms;
}

/*
 * Forward output and handle signals and exits. PHASE_AGENTS returns when every agent's socket
 * exists, or the job is stopping (an agent died, a signal, --timeout, the start deadline);
 * PHASE_RUN returns when every process has exited and its output is forwarded.
 */
void run_event_loop(struct run *run, const sigset_t *orig_mask, enum phase phase)
{
    struct pollfd *pfds = run_xcalloc((size_t)run->nprocs * 2, sizeof(*pfds));
    struct stream **owners = run_xcalloc((size_t)run->nprocs * 2, sizeof(*owners));
    struct rank **owner_ranks = run_xcalloc((size_t)run->nprocs * 2, sizeof(*owner_ranks));
    double agents_deadline = run_now_s() + AGENT_START_S;

    for (;;) {
        nfds_t n = 0;
        int ms, rc;

        handle_events(run, phase);
        if (phase == PHASE_AGENTS) {
            if (run->stopping || run_agent_sockets_ready(run))
                break;
            if (run_now_s() >= agents_deadline) {
                for (int i = run->nranks; i < run->nprocs; i++) {
                    struct stat st;
                    const struct rank *a = &run->ranks[i];

                    if (stat(a->sock_path, &st) != 0 || !S_ISSOCK(st.st_mode))
                        run_msg("agent %d (pid %d) has not opened its socket %s after %.0f s",
                                a->rank, (int)a->pid, a->sock_path, AGENT_START_S);
                }
                run_msg("the agents did not start; stopping (their output is above, prefixed "
                        "\"[agent R] \")");
                run->stopping = true;
                run->exit_code = EXIT_FAILURE;
                break;
            }
        } else if (run->nrunning == 0 && run->nagents_running == 0 &&
                   run_now_s() >= run->drain_until) {
            break;
        }
        for (int i = 0; i < run->nprocs; i++) {
            struct rank *r = &run->ranks[i];
            struct stream *ss[2] = {&r->out, &r->err};

            for (int k = 0; k < 2; k++) {
                if (ss[k]->fd < 0)
                    continue;
                pfds[n].fd = ss[k]->fd;
                pfds[n].events = POLLIN;
                pfds[n].revents = 0;
                owners[n] = ss[k];
                owner_ranks[n] = r;
                n++;
            }
        }
        if (phase == PHASE_RUN && n == 0 && run->nrunning == 0 && run->nagents_running == 0)
            break;
        ms = next_timeout_ms(run, phase);
        if (ms >= 0) {
            struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};

            rc = ppoll(pfds, n, &ts, orig_mask);
        } else {
            rc = ppoll(pfds, n, NULL, orig_mask);
        }
        if (rc < 0) {
            if (errno == EINTR)
                continue;
            run_msg("poll failed: %s; killing the ranks", strerror(errno));
            run_stop_all(run, SIGKILL, EXIT_FAILURE);
            if (run->nagents_running > 0)
                run_stop_agents(run, SIGKILL);
            continue;
        }
        for (nfds_t j = 0; j < n; j++) {
            if (pfds[j].revents & (POLLIN | POLLHUP | POLLERR))
                run_read_stream(run, owner_ranks[j], owners[j], false);
            else if (pfds[j].revents & POLLNVAL)
                owners[j]->fd = -1;
        }
    }
    if (phase == PHASE_RUN) {
        /* Helpers of exited ranks may still hold a pipe open: forward what we have and stop. */
        for (int i = 0; i < run->nprocs; i++) {
            struct rank *r = &run->ranks[i];

            if (r->out.fd >= 0)
                run_close_stream(run, r, &r->out);
            if (r->err.fd >= 0)
                run_close_stream(run, r, &r->err);
        }
    }
    free(pfds);
    free(owners);
    free(owner_ranks);
}
