/* Standalone mode: the facts come from a JSON or YAML topology file instead of the cluster; the
 * same socket, checks and conditions. */
#define _GNU_SOURCE
#include "agent.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fatal condition; with f (this rank's facts, root endpoint and secret known) the processes it
 * serves tell the job's other ranks through the bootstrap root, which fails them within seconds. */
__attribute__((format(printf, 4, 0))) static int
vfail(agent_ctx_t *ctx, const agent_facts_t *f, const char *type, const char *fmt, va_list ap)
{
    agent_condition_t c;
    memset(&c, 0, sizeof(c));
    c.fatal = 1;
    snprintf(c.type, sizeof(c.type), "%s", type);
    vsnprintf(c.message, sizeof(c.message), fmt, ap);
    if (f != NULL)
        agent_set_failed_known(ctx, &c, f);
    else
        agent_set_failed(ctx, &c);
    return -1;
}

static int fail(agent_ctx_t *ctx, const char *type, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(agent_ctx_t *ctx, const char *type, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(ctx, NULL, type, fmt, ap);
    va_end(ap);
    return -1;
}

static int fail_known(agent_ctx_t *ctx, const agent_facts_t *f, const char *type, const char *fmt,
                      ...) __attribute__((format(printf, 4, 5)));
static int fail_known(agent_ctx_t *ctx, const agent_facts_t *f, const char *type, const char *fmt,
                      ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail(ctx, f, type, fmt, ap);
    va_end(ap);
    return -1;
}

/* A deterministic secret for files that set none: every rank derives the same one (FNV-1a over
 * the file). Not secret; the agent warns. */
static void derive_secret(const char *data, size_t len, unsigned char out[16])
{
    uint64_t h1 = 0xcbf29ce484222325ULL, h2 = 0x84222325cbf29ce4ULL;
    for (size_t i = 0; i < len; i++) {
        h1 = (h1 ^ (unsigned char)data[i]) * 0x100000001b3ULL;
        h2 = (h2 ^ (unsigned char)data[len - 1 - i]) * 0x100000001b3ULL;
    }
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(h1 >> (8 * i));
        out[8 + i] = (unsigned char)(h2 >> (8 * i));
    }
}

/* An int field (a number or a decimal string), def when absent; INT_MIN when it does not fit an
 * int (never wrapped into another value: the checks after it then name the field). */
static int int_field(const json_t *o, const char *key, int def)
{
    json_t *v = json_object_get(o, key);
    if (json_is_integer(v))
        return json_integer_value(v) >= INT_MIN && json_integer_value(v) <= INT_MAX
                   ? (int)json_integer_value(v)
                   : INT_MIN;
    if (json_is_string(v)) {
        char *end;
        errno = 0;
        long x = strtol(json_string_value(v), &end, 10);
        if (!*end)
            return errno == 0 && x >= INT_MIN && x <= INT_MAX ? (int)x : INT_MIN;
    }
    return def;
}

int agent_standalone_run(agent_ctx_t *ctx)
{
    const char *path = ctx->opt.topology_file, *s;
    char *data = NULL, err[256], have[768];
    size_t len = 0, i;
    json_t *root, *ranks, *me = NULL, *r0 = NULL, *it;
    agent_facts_t f;
    agent_condition_t fatal;
    int rank = ctx->opt.standalone_rank, rc = -1, chk, per, pods;

    memset(&f, 0, sizeof(f));
    memset(&fatal, 0, sizeof(fatal));
    if (rank < 0 && (s = secure_getenv("COLL_RANK")))
        rank = atoi(s);
    if (agent_read_file(path, &data, &len, 16 << 20) != 0)
        return fail(ctx, "TopologyFileUnreadable", "cannot read %s: %s", path, strerror(errno));
    root = agent_yaml_load(data, len, err, sizeof(err));
    if (!root) {
        free(data);
        return fail(ctx, "TopologyFileInvalid", "%s: %s", path, err);
    }
    /* several ranks per pod: "pods" lists the pods ({podRank, address, interface, ...}) and
     * --rank N is the pod's index; else "ranks" lists one-rank pods */
    per = int_field(root, "ranksPerPod", 1);
    ranks = json_object_get(root, "pods");
    pods = ranks != NULL;
    if (!pods)
        ranks = json_object_get(root, "ranks");
    if (!json_is_array(ranks) || json_array_size(ranks) == 0) {
        fail(ctx, "TopologyFileInvalid",
             "%s: \"ranks\" (or \"pods\") must be a non-empty list of {rank (podRank), "
             "address, interface}",
             path);
        goto out;
    }
    if (per < 1 || per > AGENT_MAX_RANKS_PER_POD) {
        fail(ctx, "TopologyFileInvalid", "%s: \"ranksPerPod\" must be 1..%d", path,
             AGENT_MAX_RANKS_PER_POD);
        goto out;
    }
    if (rank < 0) {
        fail(ctx, "RankUnknown", "standalone mode needs --rank N (or COLL_RANK)");
        goto out;
    }
    json_array_foreach(ranks, i, it)
    {
        int rr = int_field(it, pods ? "podRank" : "rank", (int)i);
        if (rr == rank)
            me = it;
        if (rr == 0)
            r0 = it;
    }
    /* f counts pods; the ranks are pods x ranksPerPod */
    f.nranks =
        pods ? (int)json_array_size(ranks) : int_field(root, "nranks", (int)json_array_size(ranks));
    if (pods && json_object_get(root, "nranks") &&
        int_field(root, "nranks", -1) != f.nranks * per) {
        fail(ctx, "TopologyFileInvalid",
             "%s: \"nranks\" is %d but %d pods x ranksPerPod %d are %d ranks; drop \"nranks\" "
             "or make it agree",
             path, int_field(root, "nranks", -1), f.nranks, per, f.nranks * per);
        goto out;
    }
    if (!me || !r0 || rank >= f.nranks) {
        fail(ctx, "RankOutOfRange", "%s has no entry for %s %d (or for %s 0) among %d %s", path,
             pods ? "pod" : "rank", rank, pods ? "pod" : "rank", f.nranks, pods ? "pods" : "ranks");
        goto out;
    }
    f.local_size = per;
    snprintf(ctx->ranks_source, sizeof(ctx->ranks_source), "ranksPerPod in %s", path);
    f.gpu = int_field(root, "gpusPerPod", 0);
    if (ctx->opt.local_timeout_s == 0)
        ctx->opt.local_timeout_s = int_field(root, "localRanksTimeoutSeconds", 0);
    f.rank = rank;
    f.is_root = rank == 0;
    agent_json_str(me, "interface", f.ifname, sizeof(f.ifname));
    agent_json_str(me, "address", f.address, sizeof(f.address));
    agent_json_str(me, "ibDevice", f.ib_device, sizeof(f.ib_device));
    agent_json_str(me, "pod", f.pod, sizeof(f.pod));
    agent_json_str(me, "node", f.node, sizeof(f.node));
    if (!f.node[0])
        agent_json_str(me, "host", f.node, sizeof(f.node));
    /* the topology group (switch/rack) of this rank's node: rings are ordered by it */
    agent_json_str(me, "group", f.group, sizeof(f.group));
    if (!f.pod[0])
        snprintf(f.pod, sizeof(f.pod), "%s-%d", pods ? "pod" : "rank", rank);
    agent_json_str(root, "job", f.job, sizeof(f.job));
    if (!f.job[0])
        snprintf(f.job, sizeof(f.job), "standalone");
    snprintf(f.ns, sizeof(f.ns), "standalone");
    agent_json_str(root, "transport", f.transport, sizeof(f.transport));
    if (!f.transport[0])
        snprintf(f.transport, sizeof(f.transport), "%s", COLLI_PROTO_TRANSPORT_SOCKET);
    if (!colli_proto_transport_valid(f.transport)) {
        fail(ctx, "TopologyFileInvalid", "%s: transport must be RequireIB, PreferIB or Socket",
             path);
        goto out;
    }
    agent_json_str(root, "libraryVersion", f.library_version, sizeof(f.library_version));
    if (agent_nccl_pins(ctx, root, path, &fatal) != 0) {
        agent_set_failed(ctx, &fatal);
        goto out;
    }
    f.bootstrap_timeout_s = int_field(root, "bootstrapTimeoutSeconds", 300);
    f.timeout_s = int_field(root, "timeoutSeconds", 1800);
    if (f.bootstrap_timeout_s <= 0 || f.timeout_s <= 0) {
        fail(ctx, "TopologyFileInvalid",
             "%s: bootstrapTimeoutSeconds and timeoutSeconds must be positive whole seconds", path);
        goto out;
    }
    /* root endpoint: explicit, else rank 0's address and "port" */
    agent_json_str(json_object_get(root, "root"), "host", f.root_host, sizeof(f.root_host));
    f.root_port = int_field(json_object_get(root, "root"), "port", int_field(root, "port", 0));
    if (!f.root_host[0])
        agent_json_str(r0, "address", f.root_host, sizeof(f.root_host));
    if (!f.root_host[0] || f.root_port <= 0 || f.root_port > 65535) {
        fail(ctx, "TopologyFileInvalid",
             "%s: set \"port\" (and rank 0's \"address\") for the "
             "bootstrap root",
             path);
        goto out;
    }
    s = json_string_value(json_object_get(root, "secret"));
    if (s) {
        if (colli_proto_hex_decode(s, f.secret, sizeof(f.secret)) != 0) {
            fail(ctx, "TopologyFileInvalid", "%s: \"secret\" must be 32 hex digits", path);
            goto out;
        }
    } else {
        derive_secret(data, len, f.secret);
        agent_warn("AGENT-STANDALONE-NO-SECRET",
                   "%s sets no \"secret\": derived one from the file's bytes (anyone who can read "
                   "the file can join); set 32 random hex digits",
                   path);
    }
    /* the pinned interface and address must exist here */
    if (!f.ifname[0] && f.address[0] &&
        agent_interface_for_address(f.address, f.ifname, sizeof(f.ifname)) != 0)
        f.ifname[0] = '\0';
    if (!f.node[0] && gethostname(f.node, sizeof(f.node) - 1) != 0)
        snprintf(f.node, sizeof(f.node), "?");
    if (!f.ifname[0]) {
        agent_list_interfaces(have, sizeof(have));
        fail_known(ctx, &f, COLLI_PROTO_CODE_INTERFACE_MISSING,
                   "%s %d (%s on %s): no interface given and address \"%s\" is on no interface "
                   "here (this machine has: %s); fix its \"address\" or \"interface\" in the "
                   "standalone topology %s (coll-run: --ifname)",
                   pods ? "pod" : "rank", rank, f.pod, f.node, f.address, have, path);
        goto out;
    }
    chk = agent_check_interface(f.ifname, f.address, f.address[0] ? NULL : f.address,
                                sizeof(f.address));
    if (chk != 0) {
        agent_list_interfaces(have, sizeof(have));
        fail_known(ctx, &f,
                   chk == 1 ? COLLI_PROTO_CODE_INTERFACE_MISSING : COLLI_PROTO_CODE_ADDRESS_MISSING,
                   "%s %d (%s on %s) pins interface %s%s%s, which %s on this machine (it has: "
                   "%s); fix its \"interface\" in the standalone topology %s (coll-run: --ifname)",
                   pods ? "pod" : "rank", rank, f.pod, f.node, f.ifname,
                   chk == 2 ? " address " : "", chk == 2 ? f.address : "",
                   chk == 1 ? "does not exist" : "does not carry that address", have, path);
        goto out;
    }
    if (agent_preflight(ctx, &f, &fatal) != 0) {
        agent_set_failed_known(ctx, &fatal, &f);
        goto out;
    }
    agent_check_root_network(ctx, &f);
    if (per == 1)
        agent_info("AGENT-STANDALONE", "rank %d of %d from %s: interface %s address %s root %s:%d",
                   f.rank, f.nranks, path, f.ifname, f.address, f.root_host, f.root_port);
    else
        agent_info("AGENT-STANDALONE",
                   "pod %d of %d (ranks %d..%d of %d, %d per pod) from %s: interface %s address "
                   "%s root %s:%d",
                   f.rank, f.nranks, f.rank * per, f.rank * per + per - 1, f.nranks * per, per,
                   path, f.ifname, f.address, f.root_host, f.root_port);
    agent_set_ready(ctx, &f);
    rc = 0;
out:
    json_decref(root);
    free(data);
    return rc;
}
