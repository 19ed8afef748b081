/* coll-agent: the kcoll sidecar. Modes: kube (default), standalone (--topology FILE) and
 * webhook (`coll-agent webhook ...`, when built). */
#define _GNU_SOURCE
#include "agent.h"
#include "kube.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef AGENT_HAVE_WEBHOOK
int agent_webhook_main(int argc, char **argv);
#endif

static void usage(FILE *to)
{
    fprintf(to, "usage: coll-agent [options]            sidecar: resolve this pod's facts from the "
                "Kubernetes API\n"
                "       coll-agent --topology FILE --rank N   standalone: facts from a JSON/YAML "
                "file\n"
                "       coll-agent webhook [...]         admission webhook (when built)\n"
                "options:\n"
                "  --socket PATH            library socket (default $COLL_AGENT_SOCKET or "
                "/var/run/kcoll/agent.sock)\n"
                "  --kubeconfig PATH        use a kubeconfig (default: in-cluster when "
                "KUBERNETES_SERVICE_HOST is set,\n"
                "                           else $KUBECONFIG, else ~/.kube/config)\n"
                "  --sa-dir DIR             service-account dir (default "
                "/var/run/secrets/kubernetes.io/serviceaccount)\n"
                "  --health-addr ADDR       bind address of /healthz /readyz /metrics (default "
                "$POD_IP, the pod's\n"
                "                           address kubelet probes; without it 127.0.0.1)\n"
                "  --health-port N          their port (default 9470; 0 = off)\n"
                "  --root-port N            bootstrap root port published by rank 0 (default 0: a "
                "free port)\n"
                "  --rendezvous-timeout S   overrides the topology's bootstrapTimeoutSeconds\n"
                "  --request-timeout-ms N   per API attempt (default 10000)\n"
                "  --backoff-base-ms N      retry back-off base (default 200)\n"
                "  --backoff-cap-ms N       retry back-off cap (default 5000)\n"
                "  --min-shm-mb N           warn when /dev/shm is smaller (default 256; 0 = off)\n"
                "  --shm-path P --ib-dev-dir P   paths checked (default /dev/shm, "
                "/dev/infiniband)\n"
                "  --topology FILE --rank N standalone mode (rank also from COLL_RANK)\n"
                "  --lib-src DIR            libcoll.so*, libcoll_cuda.so*, kcoll-nccl/ (default "
                "$COLL_AGENT_LIB_SRC or "
                "/opt/kcoll/lib)\n"
                "  --lib-dir DIR            copy them here before the socket opens (default "
                "$COLL_AGENT_LIB_DIR; unset = no copy)\n"
                "  --exit-after-ready       exit 0 once facts are resolved (tests), 1 on a fatal "
                "condition\n"
                "  --local-ranks-timeout S  a pod's local ranks all say hello within S of the "
                "first (default 60,\n"
                "                           at most bootstrapTimeoutSeconds)\n"
                "  --ipc-allow-uid LIST     uids besides the agent's own that may use the socket "
                "(checked with\n"
                "                           SO_PEERCRED; default $COLL_AGENT_IPC_ALLOW_UIDS, "
                "comma-separated)\n"
                "  --log-level debug|info|warn|error\n"
                "  --version --help\n");
}

enum {
    OPT_SOCKET = 256,
    OPT_TOPOLOGY,
    OPT_RANK,
    OPT_KUBECONFIG,
    OPT_SA_DIR,
    OPT_HEALTH_ADDR,
    OPT_HEALTH_PORT,
    OPT_ROOT_PORT,
    OPT_RDV_TIMEOUT,
    OPT_REQ_TIMEOUT,
    OPT_BACKOFF_BASE,
    OPT_BACKOFF_CAP,
    OPT_MIN_SHM,
    OPT_SHM_PATH,
    OPT_IB_DIR,
    OPT_EXIT_READY,
    OPT_LIB_SRC,
    OPT_LIB_DIR,
    OPT_LOG_LEVEL,
    OPT_LOCAL_TIMEOUT,
    OPT_IPC_ALLOW,
    OPT_VERSION,
    OPT_HELP
};

static int parse_int(const char *s, const char *name, int lo, int hi, int *out)
{
    char *end;
    long v;
    errno = 0;
    v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        fprintf(stderr, "coll-agent: %s must be an integer in [%d, %d], got \"%s\"\n", name, lo, hi,
                s);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int parse_args(int argc, char **argv, agent_options_t *o)
{
    static const struct option opts[] = {
        {"socket", required_argument, 0, OPT_SOCKET},
        {"topology", required_argument, 0, OPT_TOPOLOGY},
        {"rank", required_argument, 0, OPT_RANK},
        {"kubeconfig", required_argument, 0, OPT_KUBECONFIG},
        {"sa-dir", required_argument, 0, OPT_SA_DIR},
        {"health-addr", required_argument, 0, OPT_HEALTH_ADDR},
        {"health-port", required_argument, 0, OPT_HEALTH_PORT},
        {"root-port", required_argument, 0, OPT_ROOT_PORT},
        {"rendezvous-timeout", required_argument, 0, OPT_RDV_TIMEOUT},
        {"request-timeout-ms", required_argument, 0, OPT_REQ_TIMEOUT},
        {"backoff-base-ms", required_argument, 0, OPT_BACKOFF_BASE},
        {"backoff-cap-ms", required_argument, 0, OPT_BACKOFF_CAP},
        {"min-shm-mb", required_argument, 0, OPT_MIN_SHM},
        {"shm-path", required_argument, 0, OPT_SHM_PATH},
        {"ib-dev-dir", required_argument, 0, OPT_IB_DIR},
        {"exit-after-ready", no_argument, 0, OPT_EXIT_READY},
        {"lib-src", required_argument, 0, OPT_LIB_SRC},
        {"lib-dir", required_argument, 0, OPT_LIB_DIR},
        {"log-level", required_argument, 0, OPT_LOG_LEVEL},
        {"local-ranks-timeout", required_argument, 0, OPT_LOCAL_TIMEOUT},
        {"ipc-allow-uid", required_argument, 0, OPT_IPC_ALLOW},
        {"version", no_argument, 0, OPT_VERSION},
        {"help", no_argument, 0, OPT_HELP},
        {0, 0, 0, 0}};
    const char *env_sock = secure_getenv("COLL_AGENT_SOCKET");
    const char *env_src = secure_getenv("COLL_AGENT_LIB_SRC");
    const char *env_dir = secure_getenv("COLL_AGENT_LIB_DIR");
    const char *env_ip = secure_getenv("POD_IP");
    const char *env_uids = secure_getenv("COLL_AGENT_IPC_ALLOW_UIDS");
    int c, v;
    memset(o, 0, sizeof(*o));
    o->lib_src = env_src && env_src[0] ? env_src : "/opt/kcoll/lib";
    o->lib_dir = env_dir && env_dir[0] ? env_dir : NULL;
    o->socket_path = env_sock && env_sock[0] ? env_sock : "/var/run/kcoll/agent.sock";
    o->standalone_rank = -1;
    o->health_port = 9470;
    /* the pod's IP (the webhook passes status.podIP): what kubelet's probes reach, and not every
     * address of the pod; outside a pod only this host */
    o->health_addr = env_ip && env_ip[0] ? env_ip : "127.0.0.1";
    o->ipc_allow_uids = env_uids && env_uids[0] ? env_uids : NULL;
    o->request_timeout_ms = 10000;
    o->backoff_base_ms = 200;
    o->backoff_cap_ms = 5000;
    o->min_shm_bytes = 256LL << 20;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case OPT_SOCKET:
            o->socket_path = optarg;
            break;
        case OPT_TOPOLOGY:
            o->topology_file = optarg;
            break;
        case OPT_RANK:
            if (parse_int(optarg, "--rank", 0, 1 << 24, &o->standalone_rank))
                return -1;
            break;
        case OPT_KUBECONFIG:
            o->kubeconfig = optarg;
            break;
        case OPT_SA_DIR:
            o->sa_dir = optarg;
            break;
        case OPT_HEALTH_ADDR:
            o->health_addr = optarg;
            break;
        case OPT_HEALTH_PORT:
            if (parse_int(optarg, "--health-port", 0, 65535, &o->health_port))
                return -1;
            break;
        case OPT_ROOT_PORT:
            if (parse_int(optarg, "--root-port", 0, 65535, &o->root_port))
                return -1;
            break;
        case OPT_RDV_TIMEOUT:
            if (parse_int(optarg, "--rendezvous-timeout", 1, 86400, &o->rendezvous_timeout_s))
                return -1;
            break;
        case OPT_REQ_TIMEOUT:
            if (parse_int(optarg, "--request-timeout-ms", 100, 600000, &o->request_timeout_ms))
                return -1;
            break;
        case OPT_BACKOFF_BASE:
            if (parse_int(optarg, "--backoff-base-ms", 1, 60000, &o->backoff_base_ms))
                return -1;
            break;
        case OPT_BACKOFF_CAP:
            if (parse_int(optarg, "--backoff-cap-ms", 1, 600000, &o->backoff_cap_ms))
                return -1;
            break;
        case OPT_MIN_SHM:
            if (parse_int(optarg, "--min-shm-mb", 0, 1 << 20, &v))
                return -1;
            o->min_shm_bytes = (int64_t)v << 20;
            break;
        case OPT_SHM_PATH:
            o->shm_path = optarg;
            break;
        case OPT_IB_DIR:
            o->ib_dev_dir = optarg;
            break;
        case OPT_EXIT_READY:
            o->exit_after_ready = 1;
            break;
        case OPT_LIB_SRC:
            o->lib_src = optarg;
            break;
        case OPT_LIB_DIR:
            o->lib_dir = optarg;
            break;
        case OPT_LOG_LEVEL:
            o->log_level = optarg;
            break;
        case OPT_LOCAL_TIMEOUT:
            if (parse_int(optarg, "--local-ranks-timeout", 1, 86400, &o->local_timeout_s))
                return -1;
            break;
        case OPT_IPC_ALLOW:
            o->ipc_allow_uids = optarg;
            break;
        case OPT_VERSION:
            printf("coll-agent %s (protocol v%d)\n", AGENT_VERSION, COLLI_PROTO_IPC_VERSION);
            exit(0);
        case OPT_HELP:
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "coll-agent: unexpected argument \"%s\"\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    return 0;
}

/* Credentials: --kubeconfig, else in-cluster, else $KUBECONFIG / ~/.kube/config. */
static int open_kube(agent_ctx_t *ctx, agent_kube_creds_t *creds)
{
    char err[1024], path[1024], ua[400];
    const char *kc = ctx->opt.kubeconfig, *pod = secure_getenv("POD_NAME");
    const char *ns = secure_getenv("POD_NAMESPACE");
    agent_kube_config_t cfg;
    int rc;
    if (!kc && secure_getenv("KUBERNETES_SERVICE_HOST")) {
        rc = agent_creds_in_cluster(ctx->opt.sa_dir, creds, err, sizeof(err));
    } else {
        if (!kc && (kc = secure_getenv("KUBECONFIG")) && kc[0]) {
            const char *colon = strchr(kc, ':');
            snprintf(path, sizeof(path), "%.*s", colon ? (int)(colon - kc) : (int)strlen(kc), kc);
            kc = path;
        } else if (!kc) {
            const char *home = secure_getenv("HOME");
            snprintf(path, sizeof(path), "%s/.kube/config", home ? home : "");
            kc = path;
        }
        rc = agent_creds_kubeconfig(kc, creds, err, sizeof(err));
    }
    if (rc != 0) {
        agent_condition_t c = {.fatal = 1};
        snprintf(c.type, sizeof(c.type), "CredentialsMissing");
        snprintf(c.message, sizeof(c.message), "%s%s", err,
                 secure_getenv("KUBERNETES_SERVICE_HOST")
                     ? ""
                     : " (not in a pod: KUBERNETES_SERVICE_HOST is unset; without a cluster run "
                       "coll-agent --topology FILE --rank N)");
        agent_set_failed(ctx, &c);
        return -1;
    }
    snprintf(ua, sizeof(ua), "coll-agent/%s (%s/%s)", AGENT_VERSION, ns ? ns : "-",
             pod ? pod : "-");
    cfg.request_timeout_ms = ctx->opt.request_timeout_ms;
    cfg.backoff_base_ms = ctx->opt.backoff_base_ms;
    cfg.backoff_cap_ms = ctx->opt.backoff_cap_ms;
    cfg.user_agent = ua;
    if (agent_kube_open(creds, &cfg, &ctx->kube) != 0) {
        agent_condition_t c = {.fatal = 1};
        snprintf(c.type, sizeof(c.type), "Internal");
        snprintf(c.message, sizeof(c.message), "cannot initialise the HTTP client");
        agent_set_failed(ctx, &c);
        return -1;
    }
    agent_info("AGENT-KUBE-CONFIG", "API server %s (%s)", creds->server,
               creds->in_cluster ? "in-cluster service account" : kc);
    return 0;
}

static void *pipeline(void *arg)
{
    agent_ctx_t *ctx = arg;
    static agent_kube_creds_t creds;
    if (ctx->state == AGENT_STATE_FAILED)
        return NULL; /* the library could not be delivered: nothing to serve */
    if (ctx->opt.topology_file)
        agent_standalone_run(ctx);
    else if (open_kube(ctx, &creds) == 0)
        agent_kube_run(ctx);
    if (ctx->state == AGENT_STATE_READY && ctx->opt.lib_dir)
        agent_nccl_write_conf(ctx, ctx->opt.lib_dir);
    return NULL;
}

int main(int argc, char **argv)
{
    static agent_ctx_t ctx;
    agent_ipc_t *ipc = NULL;
    agent_http_t *http = NULL;
    pthread_t pipe_thread;
    sigset_t sigs;
    int exit_code = 0;

    if (argc > 1 && strcmp(argv[1], "webhook") == 0) {
#ifdef AGENT_HAVE_WEBHOOK
        return agent_webhook_main(argc - 1, argv + 1);
#else
        fprintf(stderr, "coll-agent: webhook mode is not built into this binary (build with "
                        "k8s-agent/webhook/ present)\n");
        return 2;
#endif
    }
    if (parse_args(argc, argv, &ctx.opt) != 0)
        return 2;
    agent_log_init(ctx.opt.log_level, secure_getenv("POD_NAME"));
    ctx.start_ms = agent_now_ms();
    pthread_mutex_init(&ctx.mu, NULL);
    pthread_cond_init(&ctx.cv, NULL);

    /* signals are taken by sigtimedwait in this thread only */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    agent_info("AGENT-START", "coll-agent %s mode=%s socket=%s", AGENT_VERSION,
               ctx.opt.topology_file ? "standalone" : "kube", ctx.opt.socket_path);
    if (agent_health_start(&ctx, &ctx.health) != 0) {
        agent_error("AGENT-START-FAIL", "cannot start the health writer thread");
        return 1;
    }
    if (ctx.opt.lib_dir) {
        agent_condition_t lc;
        if (agent_copy_library(ctx.opt.lib_src, ctx.opt.lib_dir, &lc) != 0)
            agent_set_failed(&ctx, &lc);
    }
    if (agent_ipc_start(&ctx, ctx.opt.socket_path, &ipc) != 0)
        return 1;
    if (agent_http_start(&ctx, &http) != 0)
        return 1;
    if (pthread_create(&pipe_thread, NULL, pipeline, &ctx) != 0) {
        agent_error("AGENT-START-FAIL", "cannot start the pipeline thread");
        return 1;
    }
    pthread_detach(pipe_thread);

    for (;;) {
        struct timespec ts = {0, 200 * 1000 * 1000};
        int sig = sigtimedwait(&sigs, NULL, &ts);
        agent_state_t st;
        if (sig > 0) {
            agent_info("AGENT-STOP", "signal %d: shutting down", sig);
            break;
        }
        pthread_mutex_lock(&ctx.mu);
        st = ctx.state;
        pthread_mutex_unlock(&ctx.mu);
        if (ctx.opt.exit_after_ready && st != AGENT_STATE_STARTING) {
            exit_code = st == AGENT_STATE_READY ? 0 : 1;
            break;
        }
    }
    ctx.stop = 1;
    pthread_mutex_lock(&ctx.mu);
    pthread_cond_broadcast(&ctx.cv);
    pthread_mutex_unlock(&ctx.mu);
    agent_ipc_stop(ipc);
    agent_http_stop(http);
    agent_nccl_watch_stop(&ctx); /* an end of this pod's ranks, before the last flush */
    {
        agent_health_t *h = ctx.health;
        ctx.health = NULL;
        agent_health_stop(h); /* flushes queued Events and status */
    }
    return exit_code;
}
