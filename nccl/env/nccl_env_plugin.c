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

typedef struct {
    pthread_mutex_t mu;
    _Atomic int active; /* the pins apply (init succeeded with an agent) */
    colli_proto_nccl_facts_t facts;
    char value[NPIN][80]; /* NCCL's syntax: "=net1", "=mlx5_0", "IB" ("" = not pinned) */
    char why[NPIN][1024]; /* the reason a pin wins, for the override warning */
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

/* NCCL_NET from the transport policy: 0 with plugin.value set, -1 with msg when RequireIB finds
 * no usable InfiniBand. */
static int choose_net(const colli_proto_nccl_facts_t *f, char *msg, size_t msglen)
{
    colli_ib_probe_t probe;
    char hca[72] = "";
    if (strcmp(f->transport, COLLI_PROTO_TRANSPORT_SOCKET) == 0) {
        snprintf(plugin.value[PIN_NET], sizeof(plugin.value[PIN_NET]), "Socket");
        snprintf(plugin.why[PIN_NET], sizeof(plugin.why[PIN_NET]),
                 "CollectiveTopology %s pins transport Socket", f->topology);
        return 0;
    }
    if (f->ib_device[0])
        snprintf(hca, sizeof(hca), "=%s", f->ib_device);
    colli_ib_probe(secure_getenv("COLL_TEST_IB_VERBS_LIB"), hca, &probe);
    if (probe.usable) {
        snprintf(plugin.value[PIN_NET], sizeof(plugin.value[PIN_NET]), "IB");
        snprintf(plugin.why[PIN_NET], sizeof(plugin.why[PIN_NET]),
                 "CollectiveTopology %s pins transport %s and InfiniBand works here (%s)",
                 f->topology, f->transport, probe.devices);
        if (f->ib_device[0]) {
            snprintf(plugin.value[PIN_IB_HCA], sizeof(plugin.value[PIN_IB_HCA]), "=%s",
                     f->ib_device);
            snprintf(plugin.why[PIN_IB_HCA], sizeof(plugin.why[PIN_IB_HCA]),
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
        "rank %d (pod %s): InfiniBand is not usable (%s); NCCL uses sockets (transport "
        "PreferIB)",
        f->rank, f->pod, probe.reason);
    snprintf(plugin.value[PIN_NET], sizeof(plugin.value[PIN_NET]), "Socket");
    snprintf(plugin.why[PIN_NET], sizeof(plugin.why[PIN_NET]),
             "CollectiveTopology %s prefers InfiniBand, which is not usable here", f->topology);
    return 0;
}

/* Asks the agent; returns NCCL's result (KCOLL_NCCL_SUCCESS also when it passes everything
 * through). */
static kcoll_nccl_result_t start(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix)
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

    memset(plugin.value, 0, sizeof(plugin.value));
    memset(plugin.why, 0, sizeof(plugin.why));
    snprintf(plugin.value[PIN_IFNAME], sizeof(plugin.value[PIN_IFNAME]), "=%s", f.ifname);
    snprintf(plugin.why[PIN_IFNAME], sizeof(plugin.why[PIN_IFNAME]),
             "CollectiveTopology %s pins the network whose interface in pod %s is %s (%s)",
             f.topology, f.pod, f.ifname, f.address);
    if (choose_net(&f, msg, sizeof(msg)) != 0) {
        say("WARN", "%s", msg);
        if (colli_agent_report(sock, 2000, COLLI_PROTO_PHASE_FAILED, msg) != COLL_SUCCESS)
            say("WARN", "could not report this to the agent: %s", colli_agent_last_error());
        return KCOLL_NCCL_SYSTEM_ERROR;
    }
    plugin.facts = f;
    if (info_wanted())
        say("INFO",
            "rank %d of %d (pod %s): NCCL %s%s%s; NCCL_SOCKET_IFNAME=%s NCCL_NET=%s%s%s from "
            "CollectiveTopology %s",
            f.rank, f.nranks, f.pod, in.version, f.reference[0] ? " agrees with " : "", f.reference,
            plugin.value[PIN_IFNAME], plugin.value[PIN_NET],
            plugin.value[PIN_IB_HCA][0] ? " NCCL_IB_HCA=" : "", plugin.value[PIN_IB_HCA],
            f.topology);
    return KCOLL_NCCL_SUCCESS;
}

static kcoll_nccl_result_t plugin_init(uint8_t major, uint8_t minor, uint8_t patch,
                                       const char *suffix)
{
    kcoll_nccl_result_t res;
    pthread_mutex_lock(&plugin.mu);
    atomic_store(&plugin.active, 0);
    for (int i = 0; i < NPIN; i++)
        atomic_store(&plugin.warned[i], 0);
    res = start(major, minor, patch, suffix);
    if (res == KCOLL_NCCL_SUCCESS && plugin.value[PIN_IFNAME][0])
        atomic_store(&plugin.active, 1);
    pthread_mutex_unlock(&plugin.mu);
    return res;
}

static kcoll_nccl_result_t plugin_finalize(void)
{
    pthread_mutex_lock(&plugin.mu);
    atomic_store(&plugin.active, 0);
    memset(plugin.value, 0, sizeof(plugin.value));
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

static const char *plugin_get_env(const char *name)
{
    const char *user;
    if (!name)
        return NULL;
    user = getenv(name);
    if (!atomic_load(&plugin.active))
        return user;
    for (int i = 0; i < NPIN; i++) {
        if (strcmp(name, pin_names[i]) != 0 || !plugin.value[i][0])
            continue;
        /* InfiniBand through a net plugin the user chose (SHARP's IBext, a vendor's): kept, as
         * it is InfiniBand too; only "Socket" contradicts an IB pin */
        if (i == PIN_NET && user && strcmp(plugin.value[i], "IB") == 0 &&
            strcasecmp(user, "Socket") != 0)
            return user;
        if (user && !same_setting(i, user, plugin.value[i]) &&
            atomic_exchange(&plugin.warned[i], 1) == 0)
            say("WARN", "%s=%s in the environment is overridden with %s: %s", name, user,
                plugin.value[i], plugin.why[i]);
        return plugin.value[i];
    }
    return user;
}

NCCL_ENV_EXPORT const kcoll_nccl_env_v1_t ncclEnvPlugin_v1 = {
    .name = "kcoll",
    .init = plugin_init,
    .finalize = plugin_finalize,
    .getEnv = plugin_get_env,
};
