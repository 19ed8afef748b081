/*
 * Starting a rank (or an agent): finding the program like execvp, building its environment
 * before the fork, and fork + exec with its output on pipes and its own process group.
 */
#include <coll.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "coll_run.h"

extern char **environ;

/* Find program like execvp would; returns a malloc'd path or NULL (errno set). */
char *run_resolve_program(const char *prog)
{
    const char *path, *p;
    struct stat st;
    int saved = ENOENT;

    if (strchr(prog, '/') != NULL) {
        if (stat(prog, &st) != 0)
            return NULL;
        if (S_ISDIR(st.st_mode)) {
            errno = EISDIR;
            return NULL;
        }
        if (access(prog, X_OK) != 0)
            return NULL;
        return run_xasprintf("%s", prog);
    }
    path = getenv("PATH");
    if (path == NULL || *path == '\0')
        path = "/usr/local/bin:/usr/bin:/bin";
    for (p = path;; p++) {
        const char *colon = strchr(p, ':');
        size_t dirlen = colon != NULL ? (size_t)(colon - p) : strlen(p);
        char *cand = dirlen == 0 ? run_xasprintf("./%s", prog)
                                 : run_xasprintf("%.*s/%s", (int)dirlen, p, prog);

        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode)) {
            if (access(cand, X_OK) == 0)
                return cand;
            saved = EACCES;
        }
        free(cand);
        if (colon == NULL)
            break;
        p = colon;
    }
    errno = saved;
    return NULL;
}

/* ---- child environment ---- */

static bool env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);

    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static bool env_is_any(const char *entry, const char *const *names)
{
    for (; *names != NULL; names++)
        if (env_is(entry, *names))
            return true;
    return false;
}

/*
 * The parent's environment without the variables named in drop, plus the nadd entries of add
 * (taken over: freed with the rest by run_free_env). Built here, before fork, because a forked
 * child of a multi-threaded process may not allocate.
 */
static char **make_env(const char *const *drop, char **add, size_t nadd)
{
    size_t n = 0, k = 0;
    char **envp;

    while (environ[n] != NULL)
        n++;
    envp = run_xcalloc(n + nadd + 2, sizeof(*envp));
    /* envp[0] holds the number of owned entries at the end, hidden before the array proper. */
    envp[k++] = (char *)(uintptr_t)nadd;
    for (size_t i = 0; i < n; i++)
        if (!env_is_any(environ[i], drop))
            envp[k++] = environ[i];
    for (size_t i = 0; i < nadd; i++)
        envp[k++] = add[i];
    envp[k] = NULL;
    return envp + 1;
}

void run_free_env(char **envp)
{
    size_t n = 0, own;

    if (envp == NULL)
        return;
    own = (size_t)(uintptr_t)envp[-1];
    while (envp[n] != NULL)
        n++;
    for (size_t k = n - own; k < n; k++)
        free(envp[k]);
    free(envp - 1);
}

/* A rank's environment: its variables replace any inherited ones. A user's COLL_SOCKET_IFNAME is
 * kept unless --ifname (or the default) replaces it. */
char **run_build_env(int rank, int nranks, int local_rank, const char *id_str, const char *ifname,
                     bool override_ifname)
{
    static const char *const drop[] = {COLL_ENV_UNIQUE_ID, COLL_ENV_RANK,     COLL_ENV_NRANKS,
                                       ENV_LOCAL_RANK,     ENV_SOCKET_IFNAME, NULL};
    static const char *const drop_keep_ifname[] = {COLL_ENV_UNIQUE_ID, COLL_ENV_RANK,
                                                   COLL_ENV_NRANKS, ENV_LOCAL_RANK, NULL};
    char *add[5];
    size_t nadd = 0;

    add[nadd++] = run_xasprintf("%s=%s", COLL_ENV_UNIQUE_ID, id_str);
    add[nadd++] = run_xasprintf("%s=%d", COLL_ENV_RANK, rank);
    add[nadd++] = run_xasprintf("%s=%d", COLL_ENV_NRANKS, nranks);
    add[nadd++] = run_xasprintf("%s=%d", ENV_LOCAL_RANK, local_rank);
    if (override_ifname)
        add[nadd++] = run_xasprintf("%s=%s", ENV_SOCKET_IFNAME, ifname);
    return make_env(override_ifname ? drop : drop_keep_ifname, add, nadd);
}

/* With --agent: the rank learns rank, world size and root from its agent, as in a pod. */
char **run_build_agent_rank_env(int rank, const char *sock_path, int local_rank, int local_size)
{
    static const char *const drop[] = {COLL_ENV_UNIQUE_ID, COLL_ENV_RANK,     COLL_ENV_NRANKS,
                                       ENV_LOCAL_RANK,     ENV_AGENT_SOCKET,  ENV_POD_LOCAL,
                                       ENV_POD_LOCAL_WS,   ENV_RESTART_COUNT, NULL};
    char *add[4];
    size_t nadd = 0;

    add[nadd++] = run_xasprintf("%s=%s", ENV_AGENT_SOCKET, sock_path);
    add[nadd++] = run_xasprintf("%s=%d", ENV_LOCAL_RANK, rank);
    if (local_size > 0) { /* several ranks per pod: the process's place in it, as torchrun */
        add[nadd++] = run_xasprintf("%s=%d", ENV_POD_LOCAL, local_rank);
        add[nadd++] = run_xasprintf("%s=%d", ENV_POD_LOCAL_WS, local_size);
    }
    return make_env(drop, add, nadd);
}

/* The agents: no library copy (that is for pods), rank and socket come from the command line. */
char **run_build_agent_env(void)
{
    static const char *const drop[] = {"COLL_AGENT_LIB_DIR", COLL_ENV_RANK, ENV_AGENT_SOCKET, NULL};

    return make_env(drop, NULL, 0);
}

/* ---- starting ranks ---- */

/* A close-on-exec pipe; with nonblock, a read end that never blocks. */
static int open_pipe(int fds[2], bool nonblock)
{
    fds[0] = fds[1] = -1;
    if (pipe2(fds, O_CLOEXEC) != 0)
        return -1;
    if (nonblock && fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) {
        int saved = errno;

        run_close_fd(fds[0]);
        run_close_fd(fds[1]);
        fds[0] = fds[1] = -1;
        errno = saved;
        return -1;
    }
    return 0;
}

/*
 * Runs in the forked child: async-signal-safe calls only. On failure the errno goes to the
 * parent through errpipe (close-on-exec, so a successful exec closes it with nothing written).
 */
static void __attribute__((noreturn))
child_exec(const struct run *run, const struct rank *r, int out_w, int err_w, int errpipe,
           const sigset_t *orig_mask, pid_t parent)
{
    struct sigaction dfl;
    int err, devnull;

    /* If coll-run itself is killed (SIGKILL from ctest or timeout), take the rank with it. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
        goto fail;
    if (getppid() != parent) {
        errno = ESRCH;
        goto fail;
    }

    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    /* Ignored signals stay ignored across exec; the ranks get the default dispositions. */
    if (sigaction(SIGPIPE, &dfl, NULL) != 0 || sigaction(SIGINT, &dfl, NULL) != 0 ||
        sigaction(SIGTERM, &dfl, NULL) != 0 || sigaction(SIGCHLD, &dfl, NULL) != 0)
        goto fail;
    if (setpgid(0, 0) != 0)
        goto fail;
    devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0)
        goto fail;
    if (dup2(devnull, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
        goto fail;
    if (devnull > 2)
        close(devnull);
    if (sigprocmask(SIG_SETMASK, orig_mask, NULL) != 0)
        goto fail;
    if (r->is_agent)
        execve(run->agent_path, r->argv, r->envp);
    else
        execve(run->prog_path, run->argv, r->envp);
fail:
    err = errno;
    while (write(errpipe, &err, sizeof(err)) < 0 && errno == EINTR)
        ;
    _exit(127);
}

/* Returns 0, or the errno of a failed exec / -1 for a failed fork (message already printed). */
int run_start_rank(struct run *run, struct rank *r, const sigset_t *orig_mask)
{
    int outp[2] = {-1, -1}, errp[2] = {-1, -1}, ep[2] = {-1, -1};
    int child_err = 0;
    pid_t parent = getpid();
    ssize_t n;
    pid_t pid;

    if (open_pipe(outp, true) != 0 || open_pipe(errp, true) != 0 || open_pipe(ep, false) != 0) {
        run_msg("cannot create pipes for %s %d: %s (raise the open-files limit, ulimit -n)",
                r->is_agent ? "agent" : "rank", r->rank, strerror(errno));
        goto err_close;
    }
    pid = fork();
    if (pid < 0) {
        run_msg("fork for %s %d failed: %s", r->is_agent ? "agent" : "rank", r->rank,
                strerror(errno));
        goto err_close;
    }
    if (pid == 0)
        child_exec(run, r, outp[1], errp[1], ep[1], orig_mask, parent);

    /* Also from the parent, so that a kill of the group cannot race the child's setpgid. */
    if (setpgid(pid, pid) != 0 && errno != EACCES && errno != ESRCH)
        run_msg("setpgid for %s %d failed: %s", r->is_agent ? "agent" : "rank", r->rank,
                strerror(errno));
    r->pid = pid;
    r->running = true;
    if (r->is_agent)
        run->nagents_running++;
    else
        run->nrunning++;
    r->out.fd = outp[0];
    r->out.out_fd = 1;
    r->err.fd = errp[0];
    r->err.out_fd = 2;
    run_close_fd(outp[1]);
    run_close_fd(errp[1]);
    run_close_fd(ep[1]);
    do {
        n = read(ep[0], &child_err, sizeof(child_err));
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        run_msg("reading %s %d's exec status failed: %s", r->is_agent ? "agent" : "rank", r->rank,
                strerror(errno));
        child_err = EIO;
    }
    run_close_fd(ep[0]);
    if (n > 0) {
        r->exec_failed = true;
        return child_err != 0 ? child_err : EIO;
    }
    return 0;

err_close:
    for (int k = 0; k < 2; k++) {
        run_close_fd(outp[k]);
        run_close_fd(errp[k]);
        run_close_fd(ep[k]);
    }
    return -1;
}
