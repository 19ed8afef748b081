/* The fields of a caller's ncclConfig_t beyond `blocking` (comm.c reads that one): each one a
 * caller sets is answered, as the NCCL_* knobs of the environment are (libcoll's envmap.c):
 * netName names the network, so a name kcoll has not is refused and IB/Socket are compared
 * with the process's choice (a WARN where they differ); the GPU-kernel and resource knobs get
 * one INFO line each, once per process, saying that kcoll does not apply them. */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl_compat.h"

/* The level kcoll logs at (COLL_DEBUG, else NCCL_DEBUG): 0 none, 1 WARN (the default), 2 INFO
 * and more. */
static int log_level(void)
{
    const char *v = getenv("COLL_DEBUG");
    if (v == NULL || *v == '\0')
        v = getenv("NCCL_DEBUG");
    if (v == NULL || *v == '\0')
        return 1;
    if (strcasecmp(v, "NONE") == 0 || strcasecmp(v, "OFF") == 0)
        return 0;
    return strcasecmp(v, "INFO") == 0 || strcasecmp(v, "TRACE") == 0 || strcasecmp(v, "DEBUG") == 0
               ? 2
               : 1;
}

/* A field within the caller's config (callers built against older headers pass less). */
#define HAS(config, field)                                                                         \
    ((config)->size >= offsetof(ncclConfig_t, field) + sizeof((config)->field))

typedef struct {
    size_t offset; /* an int field of ncclConfig_t */
    const char *name;
    const char *why;
} knob_t;

static const char kernels[] = "kcoll's GPU kernels are its own (no CTAs, channels or NVLS to size)";
static const knob_t knobs[] = {
    {offsetof(ncclConfig_t, cgaClusterSize), "cgaClusterSize", kernels},
    {offsetof(ncclConfig_t, minCTAs), "minCTAs", kernels},
    {offsetof(ncclConfig_t, maxCTAs), "maxCTAs", kernels},
    {offsetof(ncclConfig_t, CTAPolicy), "CTAPolicy", kernels},
    {offsetof(ncclConfig_t, nvlsCTAs), "nvlsCTAs", kernels},
    {offsetof(ncclConfig_t, nChannelsPerNetPeer), "nChannelsPerNetPeer", kernels},
    {offsetof(ncclConfig_t, nvlinkCentricSched), "nvlinkCentricSched", kernels},
    {offsetof(ncclConfig_t, splitShare), "splitShare",
     "a communicator made by ncclCommSplit has connections of its own"},
    {offsetof(ncclConfig_t, shrinkShare), "shrinkShare",
     "a communicator made by ncclCommShrink has connections of its own"},
    {offsetof(ncclConfig_t, trafficClass), "trafficClass",
     "kcoll's InfiniBand transport does not set a traffic class"},
    {offsetof(ncclConfig_t, collnetEnable), "collnetEnable",
     "kcoll has no CollNet (in-network reduction); its own algorithms run"},
};
#define NKNOBS (sizeof(knobs) / sizeof(knobs[0]))

/* one INFO line per field and process: the first communicator that sets it */
static int told[NKNOBS + 1]; /* the last: commName */

static void info_once(int *flag, const char *fn, const char *field, long long value,
                      const char *why)
{
    if (log_level() < 2 || __atomic_exchange_n(flag, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    char line[400];
    snprintf(line, sizeof(line),
             "kcoll NCCL INFO %s: config.%s = %lld is not applied (%s); said once per process", fn,
             field, value, why);
    coll_log_text(line);
}

/* netName: IB or Socket (NCCL's built-in networks, any case). kcoll picks one network for the
 * whole process from COLL_TRANSPORT, else NCCL_NET (or the kcoll agent's pin), not per
 * communicator; a name that asks for something else is said. */
static ncclResult_t check_net(const char *net, const char *fn)
{
    const bool ib = strcasecmp(net, "IB") == 0;
    if (!ib && strcasecmp(net, "Socket") != 0)
        return nccl_error(ncclInvalidArgument,
                          "%s: config.netName is \"%.64s\", a network kcoll does not have: it "
                          "offers \"IB\" (InfiniBand) and \"Socket\"; set one of them, or leave "
                          "netName unset",
                          fn, net);
    /* the variable that decides, as libcoll resolves it: COLL_TRANSPORT wins over NCCL_NET */
    const char *coll = getenv("COLL_TRANSPORT"), *env = getenv("NCCL_NET");
    const bool by_coll = coll != NULL && *coll != '\0';
    const char *want = by_coll ? (ib ? "RequireIB" : "Socket") : (ib ? "IB" : "Socket");
    const char *now = by_coll ? coll : env != NULL && *env != '\0' ? env : "(unset)";
    if (strcasecmp(now, want) == 0 || log_level() < 1)
        return ncclSuccess;
    char line[600];
    snprintf(line, sizeof(line),
             "kcoll NCCL WARN %s: config.netName = \"%s\" is not applied per communicator: kcoll "
             "takes one network for the whole process from COLL_TRANSPORT, else NCCL_NET (here "
             "%s=%s; under the kcoll agent, its pin), and this communicator uses that; set %s=%s "
             "in the environment to %s",
             fn, net, by_coll ? "COLL_TRANSPORT" : "NCCL_NET", now,
             by_coll ? "COLL_TRANSPORT" : "NCCL_NET", want,
             ib ? "require InfiniBand (a node without it then fails saying why)"
                : "use sockets only");
    coll_log_text(line);
    return ncclSuccess;
}

ncclResult_t nccl_config_audit(const ncclConfig_t *config, const char *fn)
{
    if (HAS(config, netName) && config->netName != NCCL_CONFIG_UNDEF_PTR) {
        ncclResult_t rc = check_net(config->netName, fn);
        if (rc != ncclSuccess)
            return rc;
    }
    for (size_t i = 0; i < NKNOBS; i++) {
        int v;
        if (config->size < knobs[i].offset + sizeof(v))
            continue;
        memcpy(&v, (const char *)config + knobs[i].offset, sizeof(v));
        /* collnetEnable = 0 asks for what kcoll does anyway */
        if (v != NCCL_CONFIG_UNDEF_INT &&
            !(knobs[i].offset == offsetof(ncclConfig_t, collnetEnable) && v == 0))
            info_once(&told[i], fn, knobs[i].name, v, knobs[i].why);
    }
    if (HAS(config, commName) && config->commName != NCCL_CONFIG_UNDEF_PTR && log_level() >= 2 &&
        __atomic_exchange_n(&told[NKNOBS], 1, __ATOMIC_ACQ_REL) == 0) {
        char line[400];
        snprintf(line, sizeof(line),
                 "kcoll NCCL INFO %s: config.commName = \"%.64s\" is not used: kcoll's messages "
                 "name a communicator's ranks by pod and node; said once per process",
                 fn, config->commName);
        coll_log_text(line);
    }
    return ncclSuccess;
}
