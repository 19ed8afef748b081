/*
 * libnccl-env.so: NVIDIA NCCL's environment plugin (NCCL >= 2.28.7 looks it up on the library
 * path or at NCCL_ENV_PLUGIN and calls it for every NCCL_* variable it reads). At init it tells
 * the pod's kcoll agent which NCCL version this process loaded (proto/nccl_ipc.h) and learns
 * this pod's pins; getEnv then answers NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_NET from them
 * and passes every other name through to the environment. A refused version, an unusable
 * InfiniBand under RequireIB, or an agent that does not answer fail NCCL's init (NCCL returns
 * the code from ncclGetUniqueId / ncclCommInitRank) after one line on stderr that says why.
 *
 * NVIDIA NCCL does not notice that a peer's process ended. Once pinned, a thread asks the agent
 * every COLL_NCCL_ENDED_POLL_MS (2 s) whether a rank of the job ended ("nccl_ended"; the agent
 * learns it from the Communicator) and says so on stderr, naming the rank, its pod, node and why;
 * with COLL_NCCL_ON_RANK_END=exit it then ends its process with SIGTERM, where NCCL would wait
 * until the framework's timeout.
 *
 * NCCL's plugin ABI has no context argument, so the pins live in one static object written once
 * by init (under its mutex) and read by getEnv; finalize turns the pins off and stops the thread.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "bootstrap/agent_client.h"
#include "nccl_env_abi.h"
#include "nccl_ipc.h"
#include "transport/ib/ib_probe.h"

#define DEFAULT_TIMEOUT_MS 60000
#define PREFIX             "NCCL env plugin (kcoll)"
#define ENDED_POLL_MS      2000 /* COLL_NCCL_ENDED_POLL_MS: how often the agent is asked */
#define ENDED_ASK_MS       2000 /* one question's deadline */
#define ENDED_TOLD         8    /* ends said, remembered so that each is said once */

enum { PIN_IFNAME = 0, PIN_IB_HCA, PIN_NET, NPIN };

static const char *const pin_names[NPIN] = {"NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_NET"};

/* What the agent's answer pins. An init builds them aside and publishes them whole; published
 * pins are not changed or freed before finalize, since NCCL may keep a value getEnv returned: a
 * second init (two NCCL copies in one process) that pins something else publishes a new set and
 * leaves the old one to its readers (a few KiB, only when the pins change). */
typedef struct pins {
    struct pins *older; /* the set published before this one (freed at finalize) */
    colli_proto_nccl_facts_t facts;
    char value[NPIN][80]; /* NCCL's syntax: "=net1", "=mlx5_0", "IB" ("" = not pinned) */
    char why[NPIN][1024]; /* the reason a pin wins, for the override warning */
} pins_t;

/* The thread that asks whether a rank of the job ended (under ended_mu). */
typedef struct {
    int started, stop;
    pthread_t thread;
    long long since; /* epoch s of the first init */
    int poll_ms;
    int exit_on_end; /* COLL_NCCL_ON_RANK_END=exit */
    char sock[108];
    colli_proto_nccl_facts_t me;
} ended_watch_t;

typedef struct {
    pthread_mutex_t mu;         /* one init or finalize at a time */
    const pins_t *_Atomic pins; /* the pins that apply; NULL: none (no agent, not init) */
    pins_t *published;          /* every set published, newest first (under mu) */
    _Atomic int warned[NPIN];
    pthread_mutex_t ended_mu;
    pthread_cond_t ended_cv;
    ended_watch_t ended;
} plugin_state_t;

static plugin_state_t plugin = {.mu = PTHREAD_MUTEX_INITIALIZER,
                                .ended_mu = PTHREAD_MUTEX_INITIALIZER,
                                .ended_cv = PTHREAD_COND_INITIALIZER};

static void say(const char *level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(const char *level, const char *fmt, ...)
{
    char line[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s: %s\n", PREFIX, level, line);
}

/* NCCL_DEBUG=INFO (or TRACE) asks for the INFO line. */
static int info_wanted(void)
{
    const char *d = getenv("NCCL_DEBUG");
    return d && (strcasecmp(d, "INFO") == 0 || strcasecmp(d, "TRACE") == 0);
}

static int env_timeout_ms(void)
{
    const char *t = secure_getenv("COLL_NCCL_ENV_TIMEOUT_MS");
    char *end;
    long v;
    if (!t || !*t)
        return DEFAULT_TIMEOUT_MS;
    v = strtol(t, &end, 10);
    if (*end || v <= 0 || v > 3600000) {
        say("WARN", "COLL_NCCL_ENV_TIMEOUT_MS=%s is not 1..3600000 ms; using %d", t,
            DEFAULT_TIMEOUT_MS);
        return DEFAULT_TIMEOUT_MS;
    }
    return (int)v;
}

/* The launcher's LOCAL_RANK (torchrun, the training operator), -1 when unknown. */
static int env_local_rank(void)
{
    const char *v = getenv("LOCAL_RANK");
    char *end;
    long r;
    if (!v || !*v)
        return -1;
    r = strtol(v, &end, 10);
    return *end || r < 0 || r > 65535 ? -1 : (int)r;
}

/* The CUDA driver version when libcuda is already loaded in the process (never loads it):
 * among the global symbols, else by its SONAME (NCCL and the CUDA runtime load it privately). */
static int cuda_driver_version(void)
{
    int (*get)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cuDriverGetVersion");
    void *h = get ? NULL : dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    int v = 0;
    if (h)
        get = (int (*)(int *))dlsym(h, "cuDriverGetVersion");
    if (!get || get(&v) != 0)
        v = 0;
    if (h)
        (void)dlclose(h);
    return v;
}

/* NCCL_NET from the transport policy: 0 with p->value set, -1 with msg when RequireIB finds
 * no usable InfiniBand. */
static int choose_net(const colli_proto_nccl_facts_t *f, pins_t *p, char *msg, size_t msglen)
{
    colli_ib_probe_t probe;
    char hca[72] = "";
    if (strcmp(f->transport, COLLI_PROTO_TRANSPORT_SOCKET) == 0) {
        snprintf(p->value[PIN_NET], sizeof(p->value[PIN_NET]), "Socket");
        snprintf(p->why[PIN_NET], sizeof(p->why[PIN_NET]),
                 "CollectiveTopology %s pins transport Socket", f->topology);
        return 0;
    }
    if (f->ib_device[0])
        snprintf(hca, sizeof(hca), "=%s", f->ib_device);
    colli_ib_probe(secure_getenv("COLL_TEST_IB_VERBS_LIB"), hca, &probe);
    if (probe.no_rc) { /* EFA: NCCL_NET=IB would leave NCCL no network */
        snprintf(probe.reason, sizeof(probe.reason),
                 "the active RDMA ports (%s) report no InfiniBand or Ethernet link layer (as AWS "
                 "EFA's do), and NCCL's IB transport skips such ports: a net plugin such as "
                 "aws-ofi-nccl drives them",
                 probe.devices);
    }
    if (probe.usable) {
        snprintf(p->value[PIN_NET], sizeof(p->value[PIN_NET]), "IB");
        snprintf(p->why[PIN_NET], sizeof(p->why[PIN_NET]),
                 "CollectiveTopology %s pins transport %s and InfiniBand works here (%s)",
                 f->topology, f->transport, probe.devices);
        if (f->ib_device[0]) {
            snprintf(p->value[PIN_IB_HCA], sizeof(p->value[PIN_IB_HCA]), "=%s", f->ib_device);
            snprintf(p->why[PIN_IB_HCA], sizeof(p->why[PIN_IB_HCA]),
                     "CollectiveTopology %s pins RDMA device %s for pod %s", f->topology,
                     f->ib_device, f->pod);
        }
        return 0;
    }
    if (strcmp(f->transport, COLLI_PROTO_TRANSPORT_REQUIRE_IB) == 0) {
        snprintf(msg, msglen,
                 "rank %d (pod %s, node %s): CollectiveTopology %s requires InfiniBand "
                 "(transport RequireIB), but it is not usable here: %s; give the pod an RDMA "
                 "device (device plugin resource, IPC_LOCK) or set the topology's transport to "
                 "PreferIB or Socket",
                 f->rank, f->pod, f->node, f->topology, probe.reason);
        return -1;
    }
    say("WARN",
        "rank %d (pod %s): InfiniBand is not usable here (%s); under transport PreferIB NCCL "
        "picks its network itself (a net plugin if one is installed, else sockets) and "
        "NCCL_NET=IB is answered with Socket",
        f->rank, f->pod, probe.reason);
    snprintf(p->value[PIN_NET], sizeof(p->value[PIN_NET]), "Socket");
    snprintf(p->why[PIN_NET], sizeof(p->why[PIN_NET]),
             "CollectiveTopology %s prefers InfiniBand, which is not usable here", f->topology);
    return 0;
}

/* Asks the agent and fills *p (zeroed by the caller); returns NCCL's result (KCOLL_NCCL_SUCCESS
 * also when it passes everything through: then nothing is pinned). */
static kcoll_nccl_result_t start(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix,
                                 pins_t *p)
{
    const char *sock = secure_getenv(COLL_ENV_AGENT_SOCKET);
    const char *on_no_agent = secure_getenv("COLL_NCCL_ENV_ON_NO_AGENT");
    colli_proto_nccl_init_t in;
    colli_proto_nccl_facts_t f;
    json_t *req, *reply = NULL;
    const char *gpus;
    char err[256], msg[1024];
    coll_result_t status;
    int timeout_ms = env_timeout_ms();

    if (!sock || !sock[0]) {
        if (info_wanted())
            say("INFO", "%s is not set (not in a kcoll pod): NCCL's environment is used as it is",
                COLL_ENV_AGENT_SOCKET);
        return KCOLL_NCCL_SUCCESS;
    }
    memset(&in, 0, sizeof(in));
    snprintf(in.version, sizeof(in.version), "%u.%u.%u", major, minor, patch);
    snprintf(in.suffix, sizeof(in.suffix), "%s", suffix ? suffix : "");
    if (gethostname(in.host, sizeof(in.host) - 1) != 0)
        in.host[0] = '\0';
    in.pid = (int)getpid();
    in.cuda_driver = cuda_driver_version();
    in.local_rank = env_local_rank();
    gpus = getenv("CUDA_VISIBLE_DEVICES");
    if (!gpus)
        gpus = getenv("NVIDIA_VISIBLE_DEVICES");
    snprintf(in.gpu, sizeof(in.gpu), "%s", gpus ? gpus : "");
    req = colli_proto_nccl_init_request(&in, timeout_ms);
    if (!req) {
        say("WARN", "cannot build the request to the kcoll agent (out of memory?)");
        return KCOLL_NCCL_SYSTEM_ERROR;
    }
    status = colli_agent_request(sock, timeout_ms, req, COLLI_PROTO_TYPE_NCCL_INIT, &reply);
    json_decref(req);
    if (status == COLL_ERR_SYSTEM && on_no_agent && strcmp(on_no_agent, "passthrough") == 0) {
        say("WARN",
            "%s; COLL_NCCL_ENV_ON_NO_AGENT=passthrough: NCCL runs with its own environment "
            "and nothing is pinned or checked",
            colli_agent_last_error());
        return KCOLL_NCCL_SUCCESS;
    }
    if (status != COLL_SUCCESS) {
        say("WARN", "NCCL %s cannot start in this pod: %s", in.version, colli_agent_last_error());
        return status == COLL_ERR_SYSTEM || status == COLL_ERR_TIMEOUT ? KCOLL_NCCL_SYSTEM_ERROR
                                                                       : KCOLL_NCCL_INVALID_USAGE;
    }
    if (colli_proto_nccl_init_decode(reply, &f, err, sizeof(err)) != 0) {
        json_decref(reply);
        say("WARN",
            "the kcoll agent at %s answered an unusable reply (%s); is the sidecar's image "
            "the chart's (kubectl logs POD -c coll-agent)?",
            sock, err);
        return KCOLL_NCCL_SYSTEM_ERROR;
    }
    json_decref(reply);

    snprintf(p->value[PIN_IFNAME], sizeof(p->value[PIN_IFNAME]), "=%s", f.ifname);
    snprintf(p->why[PIN_IFNAME], sizeof(p->why[PIN_IFNAME]),
             "CollectiveTopology %s pins the network whose interface in pod %s is %s (%s)",
             f.topology, f.pod, f.ifname, f.address);
    if (choose_net(&f, p, msg, sizeof(msg)) != 0) {
        say("WARN", "%s", msg);
        if (colli_agent_report(sock, 2000, COLLI_PROTO_PHASE_FAILED, msg) != COLL_SUCCESS)
            say("WARN", "could not report this to the agent: %s", colli_agent_last_error());
        return KCOLL_NCCL_SYSTEM_ERROR;
    }
    p->facts = f;
    if (info_wanted())
        say("INFO",
            "rank %d of %d (pod %s): NCCL %s%s%s; NCCL_SOCKET_IFNAME=%s NCCL_NET=%s%s%s%s from "
            "CollectiveTopology %s",
            f.rank, f.nranks, f.pod, in.version, f.reference[0] ? " agrees with " : "", f.reference,
            p->value[PIN_IFNAME], p->value[PIN_NET],
            strcmp(f.transport, COLLI_PROTO_TRANSPORT_PREFER_IB) == 0
                ? " (PreferIB: only over an NCCL_NET of IB or Socket; unset is NCCL's choice)"
                : "",
            p->value[PIN_IB_HCA][0] ? " NCCL_IB_HCA=" : "", p->value[PIN_IB_HCA], f.topology);
    return KCOLL_NCCL_SUCCESS;
}

/* A positive integer setting, or def (with one WARN when it is malformed). */
static int env_ms(const char *name, int def, int max)
{
    const char *t = secure_getenv(name);
    char *end;
    long v;
    if (!t || !*t)
        return def;
    v = strtol(t, &end, 10);
    if (*end || v <= 0 || v > max) {
        say("WARN", "%s=%s is not 1..%d ms; using %d", name, t, max, def);
        return def;
    }
    return (int)v;
}

/* Wait up to ms for a stop (ended_mu held); nonzero when stopped. */
static int ended_wait(int ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    while (!plugin.ended.stop)
        if (pthread_cond_timedwait(&plugin.ended_cv, &plugin.ended_mu, &ts) != 0)
            break;
    return plugin.ended.stop;
}

/* One question to the agent: say each new end; 1 when the process is to end, -1 when this agent
 * does not know the question (an older one: stop asking). */
static int ended_ask(const ended_watch_t *w, char told[ENDED_TOLD][254], int *ntold)
{
    colli_proto_nccl_ended_t e[COLLI_PROTO_NCCL_MAX_ENDED];
    json_t *req = colli_proto_nccl_ended_request(w->since), *reply = NULL;
    char err[256];
    int n = 0, end = 0;
    if (!req)
        return 0;
    coll_result_t st =
        colli_agent_request(w->sock, ENDED_ASK_MS, req, COLLI_PROTO_TYPE_NCCL_ENDED, &reply);
    json_decref(req);
    if (st == COLL_ERR_INVALID_USAGE) {
        if (info_wanted())
            say("INFO", "the kcoll agent does not answer which ranks ended (%s): not asked again",
                colli_agent_last_error());
        return -1;
    }
    if (st != COLL_SUCCESS) /* the agent restarts, or is busy: asked again later */
        return 0;
    if (colli_proto_nccl_ended_decode(reply, e, COLLI_PROTO_NCCL_MAX_ENDED, &n, err, sizeof(err)) !=
        0) {
        say("WARN", "the kcoll agent's answer of which ranks ended is unusable (%s)", err);
        n = 0;
    }
    json_decref(reply);
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int k = 0; k < *ntold; k++)
            seen |= strcmp(told[k], e[i].pod) == 0;
        if (seen)
            continue;
        if (*ntold < ENDED_TOLD)
            snprintf(told[(*ntold)++], 254, "%s", e[i].pod);
        say("WARN",
            "%s. NVIDIA NCCL is not told: this process (rank %d, pod %s) waits for that rank in "
            "its next collective (or its init) until the framework's timeout (PyTorch's default "
            "for NCCL: 10 minutes). %s",
            e[i].what, w->me.rank, w->me.pod,
            w->exit_on_end ? "COLL_NCCL_ON_RANK_END=exit: this process ends now (SIGTERM)"
                           : "COLL_NCCL_ON_RANK_END=exit ends it at once instead; kubectl "
                             "describe communicator shows the job's failures");
        end |= w->exit_on_end;
    }
    return end;
}

static void *ended_loop(void *arg)
{
    (void)arg;
    char told[ENDED_TOLD][254];
    int ntold = 0;
    pthread_mutex_lock(&plugin.ended_mu);
    ended_watch_t w = plugin.ended; /* fixed once started */
    while (!ended_wait(w.poll_ms)) {
        pthread_mutex_unlock(&plugin.ended_mu);
        int r = ended_ask(&w, told, &ntold);
        if (r == 1) {
            fflush(stderr);
            if (kill(getpid(), SIGTERM) != 0)
                say("WARN", "cannot send SIGTERM to this process; it waits on");
        }
        pthread_mutex_lock(&plugin.ended_mu);
        if (r != 0)
            break;
    }
    pthread_mutex_unlock(&plugin.ended_mu);
    return NULL;
}

/* A forked child (a DataLoader worker) has no such thread: it must not join it. */
static void ended_after_fork(void)
{
    pthread_mutex_init(&plugin.ended_mu, NULL);
    pthread_cond_init(&plugin.ended_cv, NULL);
    plugin.ended.started = 0;
}

/* Start asking after the first pinned init (once per process). */
static void ended_atfork_register(void)
{
    (void)pthread_atfork(NULL, NULL, ended_after_fork);
}

static void ended_start(const colli_proto_nccl_facts_t *me)
{
    static pthread_once_t atfork = PTHREAD_ONCE_INIT;
    const char *sock = secure_getenv(COLL_ENV_AGENT_SOCKET);
    const char *on = secure_getenv("COLL_NCCL_ON_RANK_END");
    pthread_mutex_lock(&plugin.ended_mu);
    ended_watch_t *w = &plugin.ended;
    if (w->started || !sock || strlen(sock) >= sizeof(w->sock)) {
        pthread_mutex_unlock(&plugin.ended_mu);
        return;
    }
    memset(w, 0, sizeof(*w));
    snprintf(w->sock, sizeof(w->sock), "%s", sock);
    w->me = *me;
    w->since = (long long)time(NULL);
    w->poll_ms = env_ms("COLL_NCCL_ENDED_POLL_MS", ENDED_POLL_MS, 600000);
    if (on && *on && strcasecmp(on, "exit") != 0 && strcasecmp(on, "wait") != 0)
        say("WARN", "COLL_NCCL_ON_RANK_END=%s is neither exit nor wait; this process waits", on);
    w->exit_on_end = on && strcasecmp(on, "exit") == 0;
    (void)pthread_once(&atfork, ended_atfork_register);
    if (pthread_create(&w->thread, NULL, ended_loop, NULL) == 0)
        w->started = 1;
    else
        say("WARN", "cannot start the thread that asks whether a rank of the job ended");
    pthread_mutex_unlock(&plugin.ended_mu);
}

static void ended_stop(void)
{
    pthread_mutex_lock(&plugin.ended_mu);
    int started = plugin.ended.started;
    plugin.ended.stop = 1;
    plugin.ended.started = 0;
    pthread_cond_broadcast(&plugin.ended_cv);
    pthread_t t = plugin.ended.thread;
    pthread_mutex_unlock(&plugin.ended_mu);
    if (started)
        pthread_join(t, NULL);
}

static kcoll_nccl_result_t plugin_init(uint8_t major, uint8_t minor, uint8_t patch,
                                       const char *suffix)
{
    pins_t *fresh = calloc(1, sizeof(*fresh)); /* too large for NCCL's thread stack */
    if (fresh == NULL) {
        say("WARN", "out of memory for the pins; NCCL's init fails");
        return KCOLL_NCCL_SYSTEM_ERROR;
    }
    pthread_mutex_lock(&plugin.mu);
    kcoll_nccl_result_t res = start(major, minor, patch, suffix, fresh);
    const pins_t *cur = atomic_load(&plugin.pins);
    if (res != KCOLL_NCCL_SUCCESS || !fresh->value[PIN_IFNAME][0]) {
        atomic_store(&plugin.pins, NULL);
        free(fresh);
    } else if (cur != NULL && memcmp(cur->value, fresh->value, sizeof(fresh->value)) == 0) {
        free(fresh); /* the same pins stand, and readers kept them throughout */
    } else {
        for (int i = 0; i < NPIN; i++)
            atomic_store(&plugin.warned[i], 0);
        fresh->older = plugin.published; /* cur, if any, stays for its readers */
        plugin.published = fresh;
        atomic_store(&plugin.pins, fresh);
    }
    const pins_t *now = atomic_load(&plugin.pins);
    if (now != NULL)
        ended_start(&now->facts);
    pthread_mutex_unlock(&plugin.mu);
    return res;
}

static kcoll_nccl_result_t plugin_finalize(void)
{
    ended_stop(); /* NCCL may unload the plugin next */
    pthread_mutex_lock(&plugin.mu);
    atomic_store(&plugin.pins, NULL);
    /* NCCL is done with its environment (it unloads the plugin next) */
    while (plugin.published != NULL) {
        pins_t *p = plugin.published;
        plugin.published = p->older;
        free(p);
    }
    pthread_mutex_unlock(&plugin.mu);
    return KCOLL_NCCL_SUCCESS;
}

/* Does the user's value say the same as the pin ("net1" and "=net1" name one interface)? */
static int same_setting(int pin, const char *user, const char *value)
{
    if (pin == PIN_NET)
        return strcasecmp(user, value) == 0;
    return strcmp(user, value) == 0 || strcmp(user, value + 1) == 0;
}

/* Is NCCL_NET the user's (or, unset, NCCL's own choice)? A net plugin the user named for
 * InfiniBand (SHARP's IBext, a vendor's) is kept under an IB pin: only "Socket" contradicts it.
 * Under PreferIB only a contradiction is answered ("IB" where it does not work, "Socket" where
 * it does): unset stays unset, so NCCL takes an installed net plugin (SHARP, aws-ofi-nccl, TCPX)
 * before IB before sockets, as it does on its own. */
static int net_left_to_user(const pins_t *p, const char *user)
{
    const int named =
        user != NULL && (strcasecmp(user, "IB") == 0 || strcasecmp(user, "Socket") == 0);
    if (strcmp(p->facts.transport, COLLI_PROTO_TRANSPORT_PREFER_IB) == 0 && !named)
        return 1;
    return user != NULL && strcmp(p->value[PIN_NET], "IB") == 0 && strcasecmp(user, "Socket") != 0;
}

static const char *plugin_get_env(const char *name)
{
    const char *user;
    if (!name)
        return NULL;
    user = getenv(name);
    const pins_t *p = atomic_load(&plugin.pins);
    if (p == NULL)
        return user;
    for (int i = 0; i < NPIN; i++) {
        if (strcmp(name, pin_names[i]) != 0 || !p->value[i][0])
            continue;
        if (i == PIN_NET && net_left_to_user(p, user))
            return user;
        if (user && !same_setting(i, user, p->value[i]) &&
            atomic_exchange(&plugin.warned[i], 1) == 0)
            say("WARN", "%s=%s in the environment is overridden with %s: %s", name, user,
                p->value[i], p->why[i]);
        return p->value[i];
    }
    return user;
}

NCCL_ENV_EXPORT const kcoll_nccl_env_v1_t ncclEnvPlugin_v1 = {
    .name = "kcoll",
    .init = plugin_init,
    .finalize = plugin_finalize,
    .getEnv = plugin_get_env,
};
