/*
 * libnccl-env.so: NVIDIA NCCL's environment plugin (NCCL >= 2.28.7 looks it up on the library
 * path or at NCCL_ENV_PLUGIN and calls it for every NCCL_* variable it reads). At init it tells
 * the pod's kcoll agent which NCCL version this process loaded (proto/nccl_ipc.h) and learns
 * this pod's pins; getEnv then answers NCCL_SOCKET_IFNAME, NCCL_IB_HCA and NCCL_NET from them
 * and passes every other name through to the environment. A refused version, an unusable
 * InfiniBand under RequireIB, or an agent that does not answer fail NCCL's init (NCCL returns
 * the code from ncclGetUniqueId / ncclCommInitRank) after one line on stderr that says why.
 *
 * NCCL's plugin ABI has no context argument, so the pins live in one static object written once
 * by init (under its mutex) and read by getEnv; finalize turns the pins off.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "bootstrap/agent_client.h"
#include "nccl_env_abi.h"
#include "nccl_ipc.h"
#include "transport/ib/ib_probe.h"

#define DEFAULT_TIMEOUT_MS 60000
#define PREFIX             "NCCL env plugin (kcoll)"

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

typedef struct {
    pthread_mutex_t mu;         /* one init or finalize at a time */
    const pins_t *_Atomic pins; /* the pins that apply; NULL: none (no agent, not init) */
    pins_t *published;          /* every set published, newest first (under mu) */
    _Atomic int warned[NPIN];
} plugin_state_t;

static plugin_state_t plugin = {.mu = PTHREAD_MUTEX_INITIALIZER};

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
    pthread_mutex_unlock(&plugin.mu);
    return res;
}

static kcoll_nccl_result_t plugin_finalize(void)
{
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
