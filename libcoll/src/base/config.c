/* Every tunable is one row: {name, default, doc, parser, offset}. Resolved once per
 * communicator into a read-only snapshot; each effective value is logged once with its source. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "base/config.h"
#include "base/envmap.h"
#include "base/error.h"
#include "base/spec.h"
#include "base/util.h"

typedef bool (*parse_fn)(const char *text, void *field, char *why, size_t whylen);

typedef struct {
    const char *name;
    const char *dflt;
    const char *doc;
    parse_fn parse;
    size_t offset;
    const char *nccl_dflt; /* the default under COLL_DEFAULTS_NCCL, where NCCL's differs */
} param_t;

/* coll_set_defaults: the process's defaults for what neither the environment nor the agent sets
 * (kcoll's libnccl.so.2 chooses NCCL's when it is loaded) */
static int defaults_profile = COLL_DEFAULTS_KCOLL;

coll_result_t coll_set_defaults(coll_defaults_t defaults)
{
    if (defaults != COLL_DEFAULTS_KCOLL && defaults != COLL_DEFAULTS_NCCL)
        return COLLI_ERR(CONFIG, COLL_ERR_INVALID_ARGUMENT,
                         "coll_set_defaults: %d is neither COLL_DEFAULTS_KCOLL nor "
                         "COLL_DEFAULTS_NCCL",
                         (int)defaults);
    __atomic_store_n(&defaults_profile, (int)defaults, __ATOMIC_RELEASE);
    return COLL_SUCCESS;
}

static bool parse_str(const char *t, void *f, char *why, size_t wl)
{
    char *dst = f;
    if (strlen(t) >= sizeof(((colli_config_t *)0)->socket_ifname)) {
        snprintf(why, wl, "longer than %zu characters",
                 sizeof(((colli_config_t *)0)->socket_ifname) - 1);
        return false;
    }
    snprintf(dst, sizeof(((colli_config_t *)0)->socket_ifname), "%s", t);
    return true;
}

static bool parse_policy(const char *t, void *f, char *why, size_t wl)
{
    int *pol = f;
    if (strcasecmp(t, "auto") == 0)
        *pol = COLLI_TP_AUTO;
    else if (strcasecmp(t, "Socket") == 0 || strcasecmp(t, "sockets") == 0)
        *pol = COLLI_TP_SOCKET;
    else if (strcasecmp(t, "PreferIB") == 0)
        *pol = COLLI_TP_PREFER_IB;
    else if (strcasecmp(t, "RequireIB") == 0)
        *pol = COLLI_TP_REQUIRE_IB;
    else {
        snprintf(why, wl, "use RequireIB, PreferIB, Socket or auto");
        return false;
    }
    return true;
}

static bool parse_gate(const char *t, void *f, char *why, size_t wl)
{
    int *g = f;
    if (strcasecmp(t, "auto") == 0)
        *g = COLLI_GATE_AUTO;
    else if (strcasecmp(t, "memop") == 0)
        *g = COLLI_GATE_MEMOP;
    else if (strcasecmp(t, "hostfunc") == 0)
        *g = COLLI_GATE_HOSTFUNC;
    else if (strcasecmp(t, "inline") == 0)
        *g = COLLI_GATE_INLINE;
    else {
        snprintf(why, wl, "use auto, inline, memop or hostfunc");
        return false;
    }
    return true;
}

static bool parse_family(const char *t, void *f, char *why, size_t wl)
{
    int *fam = f;
    if (*t == '\0' || strcasecmp(t, "any") == 0)
        *fam = AF_UNSPEC;
    else if (strcasecmp(t, "AF_INET") == 0 || strcasecmp(t, "inet") == 0 ||
             strcasecmp(t, "ipv4") == 0 || strcmp(t, "4") == 0)
        *fam = AF_INET;
    else if (strcasecmp(t, "AF_INET6") == 0 || strcasecmp(t, "inet6") == 0 ||
             strcasecmp(t, "ipv6") == 0 || strcmp(t, "6") == 0)
        *fam = AF_INET6;
    else {
        snprintf(why, wl, "use AF_INET, AF_INET6 or any");
        return false;
    }
    return true;
}

static bool parse_int_range(const char *t, int *out, long lo, long hi, char *why, size_t wl)
{
    long v;
    if (!colli_parse_long(t, lo, hi, &v)) {
        snprintf(why, wl, "expected an integer from %ld to %ld", lo, hi);
        return false;
    }
    *out = (int)v;
    return true;
}

static bool parse_hca(const char *t, void *f, char *why, size_t wl)
{
    return colli_ib_hca_check(t, why, wl) && parse_str(t, f, why, wl);
}

static bool parse_gid_index(const char *t, void *f, char *why, size_t wl)
{
    if (*t == '\0' || strcasecmp(t, "auto") == 0 || strcmp(t, "-1") == 0) {
        *(int *)f = -1;
        return true;
    }
    return parse_int_range(t, f, 0, 255, why, wl);
}

static bool parse_nqps(const char *t, void *f, char *why, size_t wl)
{
    return parse_int_range(t, f, 1, 8, why, wl);
}

static bool parse_ib_timeout(const char *t, void *f, char *why, size_t wl)
{
    return parse_int_range(t, f, 1, 31, why, wl);
}

static bool parse_streams(const char *t, void *f, char *why, size_t wl)
{
    return parse_int_range(t, f, 1, 16, why, wl);
}

static bool parse_spin(const char *t, void *f, char *why, size_t wl)
{
    return parse_int_range(t, f, 0, 1000000, why, wl);
}

static bool parse_bool(const char *t, void *f, char *why, size_t wl)
{
    int *b = f;
    if (strcmp(t, "1") == 0 || strcasecmp(t, "true") == 0 || strcasecmp(t, "yes") == 0 ||
        strcasecmp(t, "on") == 0)
        *b = 1;
    else if (*t == '\0' || strcmp(t, "0") == 0 || strcasecmp(t, "false") == 0 ||
             strcasecmp(t, "no") == 0 || strcasecmp(t, "off") == 0)
        *b = 0;
    else {
        snprintf(why, wl, "use 1 or 0");
        return false;
    }
    return true;
}

static bool parse_nslots(const char *t, void *f, char *why, size_t wl)
{
    return parse_int_range(t, f, 2, 1024, why, wl);
}

static bool parse_connecting(const char *t, void *f, char *why, size_t wl)
{
    return parse_int_range(t, f, 1, 4096, why, wl);
}

/* Bytes with an optional K/M/G suffix (binary). */
static bool parse_bytes_range(const char *t, size_t *out, size_t lo, size_t hi, char *why,
                              size_t wl)
{
    char *end = NULL;
    unsigned long long v = strtoull(t, &end, 10);
    if (end == t || t[0] == '-') {
        snprintf(why, wl, "expected a size in bytes such as 65536, 64K or 1M");
        return false;
    }
    unsigned long long mul = 1;
    if (*end == 'K' || *end == 'k')
        mul = 1ull << 10, end++;
    else if (*end == 'M' || *end == 'm')
        mul = 1ull << 20, end++;
    else if (*end == 'G' || *end == 'g')
        mul = 1ull << 30, end++;
    if (*end != '\0' || v > hi / mul || v * mul < lo) {
        snprintf(why, wl, "expected a size from %zu to %zu bytes (K/M/G suffixes allowed)", lo, hi);
        return false;
    }
    *out = (size_t)(v * mul);
    return true;
}

static bool parse_chunk(const char *t, void *f, char *why, size_t wl)
{
    return parse_bytes_range(t, f, 4096, 64u << 20, why, wl);
}

static bool parse_dev_chunk(const char *t, void *f, char *why, size_t wl)
{
    return parse_bytes_range(t, f, 4096, (size_t)1 << 30, why, wl);
}

static bool parse_slot(const char *t, void *f, char *why, size_t wl)
{
    if (!parse_bytes_range(t, f, 4096, 16u << 20, why, wl))
        return false;
    if (*(size_t *)f % 4096 != 0) {
        snprintf(why, wl, "expected a multiple of 4096 bytes");
        return false;
    }
    return true;
}

static bool parse_threshold(const char *t, void *f, char *why, size_t wl)
{
    return parse_bytes_range(t, f, 0, (size_t)1 << 40, why, wl);
}

/* An operation's deadline: 0 is none (INFINITY: waits are then bounded by abort and by peers
 * that go away, as in NCCL). */
static bool parse_op_timeout(const char *t, void *f, char *why, size_t wl)
{
    char *end = NULL;
    double v = strtod(t, &end);
    if (end == t || *end != '\0' || !(v >= 0) || v > 86400.0 * 365) {
        snprintf(why, wl, "expected a number of seconds, or 0 for no deadline");
        return false;
    }
    *(double *)f = v == 0 ? INFINITY : v;
    return true;
}

static bool parse_seconds(const char *t, void *f, char *why, size_t wl)
{
    char *end = NULL;
    double v = strtod(t, &end);
    if (end == t || *end != '\0' || !(v > 0) || v > 86400.0 * 365) {
        snprintf(why, wl, "expected a positive number of seconds");
        return false;
    }
    *(double *)f = v;
    return true;
}

#define OFF(field) offsetof(colli_config_t, field)
static const param_t params[] = {
    {"COLL_SOCKET_IFNAME", "",
     "interfaces for sockets: prefix list, ^ excludes, = exact (NCCL syntax); empty = first up "
     "non-loopback interface",
     parse_str, OFF(socket_ifname), NULL},
    {"COLL_SOCKET_FAMILY", "any", "address family: AF_INET, AF_INET6 or any", parse_family,
     OFF(socket_family), NULL},
    {"COLL_SOCKET_NSTREAMS", "1", "TCP connections per peer and direction", parse_streams,
     OFF(nstreams), NULL},
    {"COLL_CHUNK_SIZE", "512K", "pipeline unit in bytes", parse_chunk, OFF(chunk_size), NULL},
    {"COLL_SMALL_THRESHOLD", "64K",
     "all-reduce of at most this many bytes uses recursive doubling instead of the ring",
     parse_threshold, OFF(small_threshold), NULL},
    {"COLL_TIMEOUT", "300",
     "seconds without progress before an operation fails naming the peer; 0: no deadline (a "
     "WARN names the ranks waited on, at growing intervals), the default of kcoll's "
     "libnccl.so.2, as NCCL, whose programs bound their waits themselves (PyTorch's timeout)",
     parse_op_timeout, OFF(timeout), "0"},
    {"COLL_BOOTSTRAP_TIMEOUT", "120",
     "seconds for every rank to check in at initialisation (1800 under kcoll's libnccl.so.2: "
     "NCCL programs make ranks' communicators when each first needs one, minutes apart)",
     parse_seconds, OFF(bootstrap_timeout), "1800"},
    {"COLL_SPIN_US", "50", "microseconds of busy polling before blocking in poll()", parse_spin,
     OFF(spin_us), NULL},
    {"COLL_TRANSPORT", "auto",
     "transport policy between hosts: RequireIB, PreferIB (fall back to sockets with a warning), "
     "Socket, or auto",
     parse_policy, OFF(transport), NULL},
    {"COLL_IB_HCA", "",
     "InfiniBand devices and ports: mlx5_0:1,mlx5_1 ; a name is a prefix unless the list starts "
     "with =; ^ excludes the listed ones",
     parse_hca, OFF(ib_hca), NULL},
    {"COLL_IB_GID_INDEX", "auto",
     "RoCE GID index; auto: RoCE v2 before v1, an IPv4-mapped address before IPv6, never an "
     "all-zero entry",
     parse_gid_index, OFF(ib_gid_index), NULL},
    {"COLL_IB_NQPS", "2", "reliable-connected InfiniBand queue pairs per peer (1 to 8)", parse_nqps,
     OFF(ib_nqps), NULL},
    {"COLL_IB_TIMEOUT", "20",
     "InfiniBand ack timeout exponent: a QP retries after 4.096 us x 2^n, 7 times, before it "
     "fails",
     parse_ib_timeout, OFF(ib_timeout), NULL},
    {"COLL_SOCKET_MAX_CONNECTING", "16", "outgoing connections being set up at once",
     parse_connecting, OFF(max_connecting), NULL},
    {"COLL_SHM_DISABLE", "0",
     "1: ranks on one host talk over loopback sockets instead of shared memory", parse_bool,
     OFF(shm_disable), NULL},
    {"COLL_SHM_SLOT_SIZE", "64K",
     "bytes of one slot of a shared-memory ring (a multiple of 4096; 64 bytes of it are the "
     "slot header)",
     parse_slot, OFF(shm_slot_size), NULL},
    {"COLL_SHM_NSLOTS", "8", "slots per shared-memory ring (one ring per sender and receiver)",
     parse_nslots, OFF(shm_nslots), NULL},
    {"COLL_SHM_DIRECT_MIN", "256K",
     "collectives of at least this many bytes per rank on a one-host communicator read and write "
     "the peers' buffers directly (one copy instead of two through the rings): buffers from "
     "coll_mem_alloc are mapped, others reached with process_vm_readv/writev (COLL_SHM_CMA); "
     "0 = never",
     parse_threshold, OFF(shm_direct_min), NULL},
    {"COLL_SHM_CMA", "1",
     "1: the single-copy path also takes buffers not from coll_mem_alloc, reading and writing "
     "them with process_vm_readv/writev (cross-memory attach); 0: only coll_mem_alloc buffers",
     parse_bool, OFF(shm_cma), NULL},
    {"COLL_HIER_MIN", "64K",
     "all-reduce of at least this many bytes on a communicator of pods with several ranks each "
     "(the kcoll agent's ranksPerPod) is hierarchical: reduce-scatter inside each pod, "
     "all-reduce of each slice between the pods, all-gather inside each pod, so that only "
     "(pods-1)/pods of the data per local rank crosses pods; 0 = the flat ring",
     parse_threshold, OFF(hier_min), NULL},
    {"COLL_CUDA_PLUGIN", "",
     "the GPU plugin that moves device buffers (a path or a name); empty: libcoll_cuda.so.0 "
     "beside libcoll, loaded when the process uses CUDA",
     parse_str, OFF(cuda_plugin), NULL},
    {"COLL_CUDA_CHUNK_SIZE", "4M",
     "device buffers: bytes moved per pipeline step (each of three steps in flight has this "
     "much pinned host memory twice and device scratch once)",
     parse_dev_chunk, OFF(dev_chunk), NULL},
    {"COLL_CUDA_IPC", "1",
     "1: collectives on device buffers between ranks of one host read and write the peers' "
     "device memory through CUDA IPC (from COLL_SHM_DIRECT_MIN bytes, at most 8 ranks) when "
     "every rank can; 0: through host staging",
     parse_bool, OFF(dev_ipc), NULL},
    {"COLL_CUDA_IPC_BOUNCE", "256M",
     "CUDA IPC for buffers that cannot be exported (PyTorch's expandable segments, "
     "cudaMallocAsync pools): such a call is copied through device memory of kcoll's, grown as "
     "calls need up to this many bytes per communicator (the inputs and outputs of one call); "
     "larger calls, and all with 0, go through host staging",
     parse_threshold, OFF(dev_bounce), NULL},
    {"COLL_CUDA_GATE", "auto",
     "how a call on device buffers is ordered on the caller's stream: inline (its copies and "
     "kernels are enqueued on that stream when the call is made, between waits on words in "
     "pinned memory that the progress thread writes: cuStreamWaitValue32), memop (the stream "
     "waits on such a word while the progress thread runs the call on streams of its own), "
     "hostfunc (as memop, with a blocked host function: cudaLaunchHostFunc), auto (inline "
     "where the driver offers stream memory operations, else hostfunc)",
     parse_gate, OFF(dev_gate), NULL},
};
#define NPARAMS (sizeof(params) / sizeof(params[0]))
_Static_assert(NPARAMS <= sizeof(((colli_config_t *)0)->src) / sizeof(colli_source_t),
               "config source array too small");

/* The environment's value of parameter i: its COLL_* name, else its NCCL twin (in kcoll's
 * syntax); *src and *from say which. */
static const char *env_value(size_t i, colli_source_t *src, const char **from)
{
    const char *env = secure_getenv(params[i].name), *raw = NULL;
    *src = COLLI_SRC_ENV;
    *from = params[i].name;
    if (env != NULL)
        return env;
    const colli_env_alias_t *alias = colli_env_alias(params[i].name);
    const char *nccl = alias != NULL ? colli_env_nccl_value(alias, &raw) : NULL;
    if (nccl == NULL)
        return NULL;
    *src = COLLI_SRC_NCCL;
    *from = alias->nccl;
    return nccl;
}

coll_result_t colli_config_load(colli_config_t *cfg)
{
    colli_env_audit();
    memset(cfg, 0, sizeof(*cfg));
    const bool nccl = __atomic_load_n(&defaults_profile, __ATOMIC_ACQUIRE) == COLL_DEFAULTS_NCCL;
    for (size_t i = 0; i < NPARAMS; i++) {
        char why[160] = "";
        void *field = (char *)cfg + params[i].offset;
        const char *dflt =
            nccl && params[i].nccl_dflt != NULL ? params[i].nccl_dflt : params[i].dflt;
        if (!params[i].parse(dflt, field, why, sizeof(why)))
            return COLLI_ERR(CONFIG, COLL_ERR_INTERNAL, "bad built-in default for %s: %s",
                             params[i].name, why);
        cfg->src[i] = COLLI_SRC_DEFAULT;
        colli_source_t src;
        const char *from;
        const char *env = env_value(i, &src, &from);
        if (env == NULL)
            continue;
        if (!params[i].parse(env, field, why, sizeof(why)))
            return COLLI_ERR(CONFIG, COLL_ERR_INVALID_ARGUMENT,
                             "%s=\"%s\" is not valid%s%s: %s. Fix or unset the variable (%s).",
                             from, env, src == COLLI_SRC_NCCL ? " as " : "",
                             src == COLLI_SRC_NCCL ? params[i].name : "", why, params[i].doc);
        cfg->src[i] = src;
    }
    return COLL_SUCCESS;
}

colli_source_t colli_config_source(const colli_config_t *cfg, const char *name)
{
    for (size_t i = 0; i < NPARAMS; i++)
        if (strcmp(params[i].name, name) == 0)
            return cfg->src[i];
    return COLLI_SRC_DEFAULT;
}

const char *colli_config_param_name(size_t i)
{
    return i < NPARAMS ? params[i].name : NULL;
}

static void value_str(size_t i, const colli_config_t *cfg, char *buf, size_t len)
{
    const void *field = (const char *)cfg + params[i].offset;
    if (params[i].parse == parse_str || params[i].parse == parse_hca)
        snprintf(buf, len, "\"%s\"", (const char *)field);
    else if (params[i].parse == parse_policy) {
        static const char *pol[] = {"auto", "Socket", "PreferIB", "RequireIB"};
        snprintf(buf, len, "%s", pol[*(const int *)field]);
    } else if (params[i].parse == parse_family) {
        int f = *(const int *)field;
        snprintf(buf, len, "%s", f == AF_INET ? "AF_INET" : f == AF_INET6 ? "AF_INET6" : "any");
    } else if (params[i].parse == parse_chunk || params[i].parse == parse_threshold ||
               params[i].parse == parse_dev_chunk || params[i].parse == parse_slot)
        snprintf(buf, len, "%zu", *(const size_t *)field);
    else if (params[i].parse == parse_op_timeout && isinf(*(const double *)field))
        snprintf(buf, len, "0 (no deadline)");
    else if (params[i].parse == parse_seconds || params[i].parse == parse_op_timeout)
        snprintf(buf, len, "%g", *(const double *)field);
    else
        snprintf(buf, len, "%d", *(const int *)field);
}

void colli_config_log(const colli_config_t *cfg)
{
    static const char *srcs[] = {"default", "environment", "agent pin", "rank 0", NULL};
    for (size_t i = 0; i < NPARAMS; i++) {
        char v[300];
        value_str(i, cfg, v, sizeof(v));
        const colli_env_alias_t *alias = colli_env_alias(params[i].name);
        coll_info(CONFIG, "%s = %s (%s)", params[i].name, v,
                  cfg->src[i] == COLLI_SRC_NCCL && alias ? alias->nccl : srcs[cfg->src[i]]);
    }
}

coll_result_t colli_config_pin(colli_config_t *cfg, const char *name, const char *value,
                               colli_source_t src)
{
    for (size_t i = 0; i < NPARAMS; i++) {
        if (strcmp(params[i].name, name) != 0)
            continue;
        char why[160] = "";
        if (!params[i].parse(value, (char *)cfg + params[i].offset, why, sizeof(why)))
            return COLLI_ERR(CONFIG, COLL_ERR_INVALID_ARGUMENT,
                             "the agent pins %s=\"%s\", which is not valid: %s; fix the "
                             "CollectiveTopology",
                             name, value, why);
        cfg->src[i] = src;
        return COLL_SUCCESS;
    }
    return COLLI_ERR(CONFIG, COLL_ERR_INTERNAL, "unknown parameter %s", name);
}

coll_result_t colli_config_check_bound(const char *fn, double seconds)
{
    if (!(seconds >= 0)) /* NaN too */
        return COLLI_ERR(INIT, COLL_ERR_INVALID_ARGUMENT,
                         "%s: seconds=%g; pass 0 (no bound of its own) or more", fn, seconds);
    return COLL_SUCCESS;
}

void colli_config_bound_bootstrap(colli_config_t *cfg, double seconds)
{
    cfg->bootstrap_timeout = colli_config_bounded(cfg->bootstrap_timeout, seconds);
}
