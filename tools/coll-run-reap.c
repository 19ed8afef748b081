/*
 * Stopping every rank (and, with --agent, the agents) and reaping them: what each exit says, and
 * whether it stops the job.
 */
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "coll_run.h"

static void signal_rank(struct rank *r, int sig)
{
    if (!r->running)
        return;
    /* The whole process group: shells and the helpers they started. */
    if (kill(-r->pid, sig) != 0 && kill(r->pid, sig) != 0 && errno != ESRCH)
        run_msg("cannot send signal %d to %s %d (pid %d): %s", sig, r->is_agent ? "agent" : "rank",
                r->rank, (int)r->pid, strerror(errno));
    r->signalled_by_us = true;
}

/* Begin stopping every running rank with sig; SIGKILL follows after the grace period. */
void run_stop_all(struct run *run, int sig, int exit_code)
{
    if (!run->stopping) {
        run->stopping = true;
        run->exit_code = exit_code;
        run->kill_at = run_now_s() + KILL_GRACE_S;
    }
    for (int i = 0; i < run->nranks; i++)
        signal_rank(&run->ranks[i], sig);
    if (sig == SIGKILL)
        run->killed_hard = true;
}

/* Stop the agents (SIGTERM, SIGKILL after the grace period); they served their ranks. */
void run_stop_agents(struct run *run, int sig)
{
    if (!run->agents_stopping) {
        run->agents_stopping = true;
        run->agents_kill_at = run_now_s() + KILL_GRACE_S;
    }
    for (int i = run->nranks; i < run->nprocs; i++)
        signal_rank(&run->ranks[i], sig);
    if (sig == SIGKILL)
        run->agents_killed_hard = true;
}

static void report_agent_exit(struct run *run, struct rank *a)
{
    char sname[96], how[160];
    int st = a->status;

    if (a->exec_failed)
        return;
    if (WIFEXITED(st))
        snprintf(how, sizeof(how), "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        snprintf(how, sizeof(how), "was killed by signal %s",
                 run_signal_name(WTERMSIG(st), sname, sizeof(sname)));
    else
        snprintf(how, sizeof(how), "ended (wait status 0x%x)", (unsigned)st);
    if (run->agents_stopping) {
        /* Stopped by us: only an unclean end is worth a line. */
        if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
            run_msg("agent %d (pid %d) %s", a->rank, (int)a->pid, how);
        return;
    }
    if (!run->ranks_launched) {
        /* Its rank could never start: fail the job now rather than at the deadline. */
        run_msg("agent %d (pid %d) %s before its rank started (its output is above, prefixed "
                "\"[agent %d] \"); stopping",
                a->rank, (int)a->pid, how, a->rank);
        if (!run->stopping) {
            run->stopping = true;
            run->exit_code = EXIT_FAILURE;
        }
        return;
    }
    /* Like a sidecar that went away: a rank that still needs it fails and is named. */
    run_msg("agent %d (pid %d) %s while the ranks were running", a->rank, (int)a->pid, how);
}

static void report_exit(struct run *run, struct rank *r)
{
    char sname[96];
    int st = r->status;

    if (r->is_agent) {
        report_agent_exit(run, r);
        return;
    }
    if (r->exec_failed)
        return;
    if (WIFEXITED(st)) {
        int code = WEXITSTATUS(st);

        if (code == 0)
            return;
        if (!run->stopping) {
            run_msg("rank %d (pid %d) exited with status %d; stopping the other ranks", r->rank,
                    (int)r->pid, code);
            run_stop_all(run, SIGTERM, code);
        } else {
            run_msg("rank %d (pid %d) exited with status %d", r->rank, (int)r->pid, code);
        }
    } else if (WIFSIGNALED(st)) {
        int sig = WTERMSIG(st);
        const char *core = WCOREDUMP(st) ? ", core dumped" : "";

        run_signal_name(sig, sname, sizeof(sname));
        if (!run->stopping) {
            run_msg("rank %d (pid %d) was killed by signal %s%s; stopping the other ranks", r->rank,
                    (int)r->pid, sname, core);
            run_stop_all(run, SIGTERM, 128 + sig);
        } else if (r->signalled_by_us && (sig == SIGTERM || sig == SIGKILL || sig == SIGINT)) {
            run_msg("rank %d (pid %d) stopped by %s from coll-run", r->rank, (int)r->pid, sname);
        } else {
            run_msg("rank %d (pid %d) was killed by signal %s%s", r->rank, (int)r->pid, sname,
                    core);
        }
    }
}

void run_reap(struct run *run)
{
    for (int i = 0; i < run->nprocs; i++) {
        struct rank *r = &run->ranks[i];
        pid_t p;

        if (!r->running)
            continue;
        do {
            p = waitpid(r->pid, &r->status, WNOHANG);
        } while (p < 0 && errno == EINTR);
        if (p == 0)
            continue;
        if (p < 0) {
            run_msg("waitpid for %s %d (pid %d) failed: %s", r->is_agent ? "agent" : "rank",
                    r->rank, (int)r->pid, strerror(errno));
            r->status = W_EXITCODE(EXIT_FAILURE, 0);
        }
        r->running = false;
        if (r->is_agent)
            run->nagents_running--;
        else
            run->nrunning--;
        /* Forward what it wrote before it exited, so its last words come before our verdict. */
        run_read_stream(run, r, &r->out, true);
        run_read_stream(run, r, &r->err, true);
        report_exit(run, r);
    }
    if (run->nrunning == 0 && run->nagents_running == 0)
        run->drain_until = run_now_s() + DRAIN_GRACE_S;
}
