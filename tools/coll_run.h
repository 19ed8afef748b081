/*
 * coll-run's internals, shared by its files: coll-run.c (setting up and running the job, main),
 * coll-run-opts.c (options, usage), coll-run-spawn.c (finding the program, the ranks'
 * environments, fork and exec), coll-run-supervise.c (signals, the event loop),
 * coll-run-reap.c (stopping and reaping ranks), coll-run-output.c (messages, the "[rank R] "
 * prefixed forwarding) and coll-run-agent.c (--agent: the standalone topology and the coll-agent
 * processes).
 */
#ifndef COLL_RUN_H
#define COLL_RUN_H

#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define EXIT_USAGE        2
#define EXIT_TIMEOUT      124
#define MAX_RANKS         4096
#define LINE_MAX_BYTES    65536 /* a longer line is forwarded in pieces of this size */
#define KILL_GRACE_S      2.0   /* SIGTERM, then SIGKILL after this long */
#define DRAIN_GRACE_S     1.0   /* after the last rank exited, wait this long for its helpers */
#define READ_CHUNK        65536
#define ENV_LOCAL_RANK    "COLL_LOCAL_RANK"
#define ENV_SOCKET_IFNAME "COLL_SOCKET_IFNAME"
#define DEFAULT_IFNAME    "lo"
#define ENV_AGENT_SOCKET  "COLL_AGENT_SOCKET"
#define ENV_POD_LOCAL     "LOCAL_RANK" /* torchrun's: a rank's place in its pod (agent hello) */
#define ENV_POD_LOCAL_WS  "LOCAL_WORLD_SIZE"
#define ENV_RESTART_COUNT "TORCHELASTIC_RESTART_COUNT"
#define ENV_BOOT_TIMEOUT  "COLL_BOOTSTRAP_TIMEOUT"
#define ENV_TIMEOUT       "COLL_TIMEOUT"
#define AGENT_NAME        "coll-agent"
#define AGENT_START_S     30.0 /* every agent's socket must exist within this long */
#define AGENT_POLL_MS     20   /* how often to look for the sockets meanwhile */
#define DEFAULT_BOOT_S    120  /* the library's defaults, pinned unless the environment says */
#define DEFAULT_TIMEOUT_S 300

/* What the command line asks for, checked; the paths are malloc'd and the job takes them over. */
struct run_opts {
    int nranks;           /* ranks on this host */
    int nnodes;           /* hosts of the job (--nnodes, 1: this one only) */
    int node_rank;        /* this host's place (--node-rank): its ranks are node_rank*nranks.. */
    const char *join_id;  /* --id: the unique id node 0 printed (nodes > 0) */
    double timeout_s;     /* 0: none */
    const char *ifname;   /* the interface spec the ranks and the bootstrap use */
    bool override_ifname; /* the ranks get ifname instead of the user's COLL_SOCKET_IFNAME */
    bool agent_mode;
    const char *agent_arg;   /* --agent=PATH, NULL for the default places */
    const char *pin_version; /* --pin-version, NULL when not given */
    int npods;               /* --pods P (with --agent): one agent per pod, 0 = one per rank */
    int ranks_per_pod;       /* --ranks-per-pod R: nranks = P x R; 0 = not given */
    int gpus_per_pod;        /* --gpus-per-pod G: each pod's GPUs; 0 = none given */
    char **argv;             /* the program and its arguments */
    char *prog_path;         /* resolved path of the program */
    char *agent_path;        /* resolved coll-agent, with --agent */
};

/* One output stream (stdout or stderr) of one rank. */
struct stream {
    int fd;     /* read end of the pipe, -1 once closed */
    int out_fd; /* where its lines go: 1 or 2 */
    size_t len;
    char buf[LINE_MAX_BYTES];
};

/* A rank, or (with --agent) the coll-agent that serves it. */
struct rank {
    int rank;
    bool is_agent;
    pid_t pid; /* also its process group id */
    bool running;
    bool signalled_by_us; /* coll-run sent it SIGTERM/SIGKILL */
    bool exec_failed;     /* already reported; its exit status 127 says nothing new */
    int status;           /* wait status once reaped */
    char **envp;
    char **argv;     /* agents only: their own command line */
    char *sock_path; /* agents only: the socket the rank is given */
    struct stream out, err;
};

struct run {
    int nranks;
    int nprocs;         /* nranks, plus npods agents with --agent */
    struct rank *ranks; /* ranks[0..nranks), then the agents: ranks[nranks + p] serves pod p */
    int npods;          /* --agent: pods (one agent each); rank r is local rank r % per of pod */
    int ranks_per_pod;  /* r / per; 1 without --ranks-per-pod */
    int gpus_per_pod;   /* the topology's gpusPerPod; 0 = none */
    bool local_env;     /* --ranks-per-pod given: ranks get LOCAL_RANK and LOCAL_WORLD_SIZE */
    char *prog_path;    /* resolved path of the program */
    char **argv;        /* program argv (argv[0] as the user wrote it) */
    double timeout_s;   /* 0: none */

    int nrunning;
    bool stopping;    /* termination started: failure, timeout or signal */
    bool killed_hard; /* SIGKILL already sent */
    double kill_at;   /* when to send SIGKILL (monotonic seconds) */
    double deadline;  /* --timeout deadline, 0 when none */
    double drain_until;
    int exit_code;      /* decided by the first event that stops the job */
    bool stdout_broken; /* our stdout is a closed pipe: drop rank stdout */
    bool stderr_broken;

    /* --agent */
    bool agent_mode;
    char *agent_path; /* resolved coll-agent */
    char *tmp_dir;    /* topology and sockets, removed at the end */
    char *topo_path;
    bool ranks_launched;
    int nagents_running;
    bool agents_stopping; /* SIGTERM sent to the agents */
    bool agents_killed_hard;
    double agents_kill_at;
};

/* Which part of the job the event loop runs. */
enum phase {
    PHASE_AGENTS, /* --agent: the agents are starting; the ranks are not yet */
    PHASE_RUN,    /* the ranks run (and then the agents are stopped) */
};

/* coll-run-opts.c: exits with the usage text on a bad command line, and after -h */
void run_parse_args(int argc, char **argv, struct run_opts *o);

/* coll-run-output.c: messages and helpers that exit on failure */
void run_msg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void run_close_fd(int fd);
double run_now_s(void);
const char *run_signal_name(int sig, char *buf, size_t len);
void *run_xcalloc(size_t n, size_t size);
char *run_xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* coll-run-output.c: forwarding a rank's output with its prefix */
void run_read_stream(struct run *run, struct rank *r, struct stream *s, bool drain);
void run_close_stream(struct run *run, struct rank *r, struct stream *s);

/* coll-run-spawn.c */
char *run_resolve_program(const char *prog);
char **run_build_env(int rank, int nranks, int local_rank, const char *id_str, const char *ifname,
                     bool override_ifname);
char **run_build_agent_rank_env(int rank, const char *sock_path, int local_rank, int local_size);
char **run_build_agent_env(void);
void run_free_env(char **envp);
int run_start_rank(struct run *run, struct rank *r, const sigset_t *orig_mask);

/* coll-run-supervise.c */
void run_install_handlers(sigset_t *orig_mask);
void run_event_loop(struct run *run, const sigset_t *orig_mask, enum phase phase);

/* coll-run-reap.c */
void run_stop_all(struct run *run, int sig, int exit_code);
void run_stop_agents(struct run *run, int sig);
void run_reap(struct run *run);

/* coll-run-agent.c */
char *run_find_agent(const char *given, char *tried, size_t tried_len);
void run_write_topology(struct run *run, const char *spec, const char *pin_version);
void run_prepare_agents(struct run *run);
bool run_agent_sockets_ready(struct run *run);
void run_remove_tmp_dir(struct run *run);

#endif /* COLL_RUN_H */
