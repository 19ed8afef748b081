/* NVIDIA NCCL's environment plugin (libnccl-env.so) asks the agent at NCCL's init
 * ("nccl_init", proto/nccl_ipc.h): it says which NCCL version its process loaded, and gets this
 * pod's pins back, or a refusal when its version disagrees with the topology's pin or with
 * rank 0's. Rank 0 never waits for another rank (frameworks call ncclGetUniqueId on rank 0
 * before any other rank loads NCCL); every other rank compares itself, as it arrives, with the
 * version rank 0 recorded in the Communicator's status. A refusal is this rank's failure:
 * VersionsConsistent=False, phase Failed and one Event through health.c. */
#define _GNU_SOURCE
#include "annotations.h"
#include "kube.h"
#include "nccl_ipc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define COMM_PATH       "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators/%s"
#define LISTED_RANKS    64    /* ranks recorded in status.ncclMembers (and every refused one) */
#define RECORD_TIMEOUT  10000 /* ms for the status patch that records a rank */
#define DEFAULT_WAIT_MS 30000

int agent_nccl_pins(agent_ctx_t *ctx, const json_t *spec, const char *where,
                    agent_condition_t *cond)
{
    const char *pin = json_string_value(json_object_get(spec, "ncclVersion"));
    const char *policy = json_string_value(json_object_get(spec, "ncclVersionPolicy"));
    int v[3];
    if ((json_object_get(spec, "ncclVersion") && !pin) ||
        (pin && (strlen(pin) >= sizeof(ctx->nccl_version_pin) ||
                 colli_proto_nccl_version_parse(pin, v) != 0)) ||
        (json_object_get(spec, "ncclVersionPolicy") && !colli_proto_nccl_policy_valid(policy))) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "TopologyInvalid");
        snprintf(cond->message, sizeof(cond->message),
                 "%s: ncclVersion must be NCCL's MAJOR.MINOR.PATCH (e.g. 2.28.9) and "
                 "ncclVersionPolicy Exact or SameMinor",
                 where);
        return -1;
    }
    snprintf(ctx->nccl_version_pin, sizeof(ctx->nccl_version_pin), "%s", pin ? pin : "");
    snprintf(ctx->nccl_policy, sizeof(ctx->nccl_policy), "%s",
             policy ? policy : COLLI_PROTO_NCCL_POLICY_EXACT);
    return 0;
}

void agent_nccl_conflicts(agent_ctx_t *ctx, const json_t *pod)
{
    const char *c = json_string_value(
        json_object_get(agent_json_path(pod, "metadata.annotations"), AGENT_ANN_NCCL_ENV_CONFLICT));
    agent_condition_t cond;
    if (!c || !c[0])
        return;
    memset(&cond, 0, sizeof(cond));
    snprintf(cond.type, sizeof(cond.type), "NcclEnvConflict");
    snprintf(cond.message, sizeof(cond.message),
             "%.700s: NCCL's environment plugin overrides NCCL_* for NCCL >= 2.28.7, but an older "
             "NCCL (reading %s/nccl.conf) and PyTorch's Gloo take these settings over the pins; "
             "remove them from the pod spec",
             c, "/var/run/kcoll");
    agent_add_warning(ctx, &cond);
}

int agent_nccl_write_conf(agent_ctx_t *ctx, const char *lib_dir)
{
    char path[4096], tmp[4200], body[1024];
    const char *slash = strrchr(lib_dir, '/');
    agent_facts_t f;
    FILE *out;
    int n, ok;
    pthread_mutex_lock(&ctx->mu);
    f = ctx->facts;
    pthread_mutex_unlock(&ctx->mu);
    if (agent_fmt(path, sizeof(path), "%.*s/nccl.conf", slash ? (int)(slash - lib_dir) : 1,
                  slash ? lib_dir : ".") < 0 ||
        agent_fmt(tmp, sizeof(tmp), "%s.tmp.%d", path, (int)getpid()) < 0)
        return -1;
    /* NCCL's own syntax: "=" before a name is an exact match (net1 would also match net10);
     * PreferIB leaves NCCL_NET to NCCL, which uses IB where it works */
    int ib = f.ib_device[0] && strcmp(f.transport, COLLI_PROTO_TRANSPORT_SOCKET) != 0;
    const char *net = strcmp(f.transport, COLLI_PROTO_TRANSPORT_SOCKET) == 0       ? "Socket"
                      : strcmp(f.transport, COLLI_PROTO_TRANSPORT_REQUIRE_IB) == 0 ? "IB"
                                                                                   : NULL;
    n = snprintf(body, sizeof(body),
                 "# written by coll-agent from CollectiveTopology %s for pod %s (rank %d); "
                 "variables set in the pod's env win over this file\n"
                 "NCCL_SOCKET_IFNAME==%s\n%s%s%s%s%s%s",
                 f.topology[0] ? f.topology : "(file)", f.pod, f.rank, f.ifname,
                 ib ? "NCCL_IB_HCA==" : "", ib ? f.ib_device : "", ib ? "\n" : "",
                 net ? "NCCL_NET=" : "", net ? net : "", net ? "\n" : "");
    if (n < 0 || (size_t)n >= sizeof(body))
        return -1;
    out = fopen(tmp, "w");
    if (!out) {
        agent_warn("AGENT-NCCL-CONF-FAIL", "cannot write %s: %s", tmp, strerror(errno));
        return -1;
    }
    ok = fputs(body, out) >= 0;
    ok = (fclose(out) == 0) && ok;
    if (!ok || rename(tmp, path) != 0) {
        agent_warn("AGENT-NCCL-CONF-FAIL", "cannot write %s: %s", path, strerror(errno));
        unlink(tmp);
        return -1;
    }
    agent_info("AGENT-NCCL-CONF", "wrote %s (NCCL_SOCKET_IFNAME==%s)", path, f.ifname);
    return 0;
}

/* A tag of this job's bootstrap (its secret, hashed): a record in the status of a Communicator
 * that an earlier job of the same name left behind is not this job's. */
static void job_stamp(const agent_facts_t *f, char out[17])
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(f->secret); i++)
        h = (h ^ f->secret[i]) * 1099511628211ull;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

/* status.ncclMembers.RANK = what this rank loaded (a merge patch of one key: no conflicts with
 * the other ranks' records). Best effort, bounded. */
static void record_member(agent_ctx_t *ctx, const agent_facts_t *f,
                          const colli_proto_nccl_init_t *in, const char *verdict)
{
    const char *version = in->version;
    char path[800], key[16], stamp[17];
    agent_kube_resp_t r;
    json_t *patch;
    if (!ctx->kube || !ctx->comm_name[0])
        return;
    job_stamp(f, stamp);
    snprintf(key, sizeof(key), "%d", f->rank);
    snprintf(path, sizeof(path), COMM_PATH "/status", f->ns, ctx->comm_name);
    patch = json_pack("{s{s{s{ss ss ss ss ss ss ss ss}}}}", "status", "ncclMembers", key, "pod",
                      f->pod, "node", f->node, "version", version, "interface", f->ifname,
                      "address", f->address, "verdict", verdict, "job", stamp, "gpu", in->gpu);
    if (!patch)
        return;
    if (agent_kube_request(ctx->kube, "PATCH", path, patch, "application/merge-patch+json",
                           agent_now_ms() + RECORD_TIMEOUT, &r) != 0 ||
        r.code != 200)
        agent_warn("AGENT-NCCL-RECORD-FAIL",
                   "recording NCCL %s of rank %d in Communicator %s: HTTP %ld %s", version, f->rank,
                   ctx->comm_name, r.code, r.message);
    else
        ctx->metrics.status_patches++;
    agent_kube_resp_free(&r);
    json_decref(patch);
}

typedef struct {
    char stamp[17];
    char version[32];
    char pod[254];
    char node[254];
} root_record_t;

static int on_comm(void *arg, const char *type, json_t *obj)
{
    root_record_t *w = arg;
    json_t *m = json_object_get(agent_json_path(obj, "status.ncclMembers"), "0");
    const char *job = json_string_value(json_object_get(m, "job"));
    const char *v = json_string_value(json_object_get(m, "version"));
    int parsed[3];
    if (strcmp(type, "DELETED") == 0 || !job || strcmp(job, w->stamp) != 0 || !v ||
        strlen(v) >= sizeof(w->version) || colli_proto_nccl_version_parse(v, parsed) != 0)
        return 0;
    snprintf(w->version, sizeof(w->version), "%s", v);
    agent_json_str(m, "pod", w->pod, sizeof(w->pod));
    agent_json_str(m, "node", w->node, sizeof(w->node));
    return 1;
}

/* Rank 0's recorded version (one watch of the Communicator, which starts with its current
 * state); 0 when found before deadline. */
static int root_version(agent_ctx_t *ctx, const agent_facts_t *f, int64_t deadline,
                        root_record_t *out)
{
    char path[600], fsel[300];
    agent_kube_resp_t r;
    int rc;
    memset(out, 0, sizeof(*out));
    job_stamp(f, out->stamp);
    snprintf(path, sizeof(path), "/apis/kcoll.io/v1alpha1/namespaces/%s/communicators", f->ns);
    snprintf(fsel, sizeof(fsel), "metadata.name=%s", ctx->comm_name);
    rc = agent_kube_watch(ctx->kube, path, fsel, deadline, on_comm, out, &r);
    agent_kube_resp_free(&r);
    return rc == 0 && out->version[0] ? 0 : -1;
}

/* This rank's refusal: the Communicator's condition, phase and Event, and the error reply. */
static json_t *refuse(agent_ctx_t *ctx, const agent_facts_t *f, const colli_proto_nccl_init_t *in,
                      const char *msg)
{
    colli_proto_report_t rep;
    memset(&rep, 0, sizeof(rep));
    rep.phase = COLLI_PROTO_PHASE_FAILED;
    rep.has_error = 1;
    rep.err_message = msg;
    rep.conds[COLLI_PROTO_COND_VERSIONS] =
        (colli_proto_condition_t){.type = colli_proto_cond_name(COLLI_PROTO_COND_VERSIONS),
                                  .status = COLLI_PROTO_STATUS_FALSE,
                                  .reason = "NcclVersionMismatch",
                                  .message = msg};
    agent_warn("AGENT-NCCL-VERSION-MISMATCH", "%s", msg);
    record_member(ctx, f, in, "Refused");
    if (ctx->health)
        agent_health_report(ctx->health, &rep);
    char stamp[17];
    job_stamp(f, stamp);
    agent_nccl_watch_refused(ctx, stamp);
    return colli_proto_error_reply(COLLI_PROTO_CODE_VERSION_MISMATCH, msg);
}

json_t *agent_nccl_init(agent_ctx_t *ctx, const json_t *req)
{
    colli_proto_nccl_init_t in;
    colli_proto_nccl_facts_t nf;
    agent_facts_t f;
    agent_condition_t fail;
    char err[256], msg[1024];
    int64_t wait = json_object_get(req, COLLI_PROTO_KEY_TIMEOUT_MS) ? colli_proto_hello_wait_ms(req)
                                                                    : DEFAULT_WAIT_MS;
    /* answered before the plugin's own deadline (the same timeout_ms) passes */
    int64_t deadline = agent_now_ms() + wait * 3 / 4;
    agent_state_t st;

    if (colli_proto_nccl_init_parse(req, &in, err, sizeof(err)) != 0)
        return colli_proto_error_reply(COLLI_PROTO_CODE_MALFORMED, err);
    st = agent_wait_facts(ctx, wait, &f, &fail);
    if (st == AGENT_STATE_FAILED)
        return colli_proto_error_reply(fail.type, fail.message);
    if (st != AGENT_STATE_READY)
        return colli_proto_error_reply(COLLI_PROTO_CODE_NOT_READY,
                                       "the agent is still resolving this pod's rank and network; "
                                       "read the agent's log (AGENT-* lines)");
    if (f.local_size > 1) { /* several ranks per pod: this NCCL process's own rank */
        agent_facts_t pod = f;
        if (in.local_rank < 0 || in.local_rank >= pod.local_size) {
            char said[32] = "sets no LOCAL_RANK";
            if (in.local_rank >= 0)
                snprintf(said, sizeof(said), "says LOCAL_RANK %d", in.local_rank);
            snprintf(msg, sizeof(msg),
                     "pod %s runs %d ranks (ranksPerPod, from %s) but this NCCL process (pid %d) "
                     "%s: start each with LOCAL_RANK 0..%d (torchrun sets it)",
                     pod.pod, pod.local_size, ctx->ranks_source[0] ? ctx->ranks_source : "its spec",
                     in.pid, said, pod.local_size - 1);
            return colli_proto_error_reply(in.local_rank < 0
                                               ? COLLI_PROTO_CODE_LOCAL_RANK_UNKNOWN
                                               : COLLI_PROTO_CODE_LOCAL_RANK_OUT_OF_RANGE,
                                           msg);
        }
        agent_rank_facts(&pod, in.local_rank, &f);
    }
    memset(&nf, 0, sizeof(nf));
    nf.rank = f.rank;
    nf.nranks = f.nranks;
    snprintf(nf.ifname, sizeof(nf.ifname), "%s", f.ifname);
    snprintf(nf.address, sizeof(nf.address), "%s", f.address);
    snprintf(nf.ib_device, sizeof(nf.ib_device), "%s", f.ib_device);
    snprintf(nf.transport, sizeof(nf.transport), "%s", f.transport);
    snprintf(nf.pod, sizeof(nf.pod), "%s", f.pod);
    snprintf(nf.node, sizeof(nf.node), "%s", f.node);
    snprintf(nf.topology, sizeof(nf.topology), "%s",
             f.topology[0] ? f.topology : (ctx->opt.topology_file ? ctx->opt.topology_file : ""));
    snprintf(nf.version_pin, sizeof(nf.version_pin), "%s", ctx->nccl_version_pin);
    snprintf(nf.policy, sizeof(nf.policy), "%s",
             ctx->nccl_policy[0] ? ctx->nccl_policy : COLLI_PROTO_NCCL_POLICY_EXACT);
    agent_info("AGENT-NCCL-INIT",
               "NCCL %s%s (host %s, pid %d, local rank %d, GPU %s, CUDA driver %d) in rank %d: "
               "interface %s, transport %s",
               in.version, in.suffix, in.host[0] ? in.host : "-", in.pid, in.local_rank,
               in.gpu[0] ? in.gpu : "-", in.cuda_driver, f.rank, f.ifname, f.transport);

    if (nf.version_pin[0]) {
        if (!colli_proto_nccl_versions_agree(in.version, nf.version_pin, nf.policy)) {
            snprintf(msg, sizeof(msg),
                     "NCCL version mismatch: rank %d (pod %s, node %s) loaded NCCL %s, but "
                     "CollectiveTopology %s pins NCCL %s (policy %s); run an image with NCCL %s "
                     "on this pod, or change spec.ncclVersion",
                     f.rank, f.pod, f.node, in.version, nf.topology, nf.version_pin, nf.policy,
                     nf.version_pin);
            return refuse(ctx, &f, &in, msg);
        }
        snprintf(nf.reference, sizeof(nf.reference), "%s (pinned by %s)", nf.version_pin,
                 nf.topology);
    }
    if (!ctx->kube)
        return colli_proto_nccl_init_reply(&nf);
    if (!nf.version_pin[0] && f.rank != 0) {
        root_record_t root;
        if (root_version(ctx, &f, deadline, &root) != 0) {
            /* rank 0 hands out NCCL's unique id only after its own init: its record missing
             * this long means its agent could not write it (see its AGENT-NCCL-RECORD-FAIL) */
            agent_warn("AGENT-NCCL-UNCHECKED",
                       "rank 0 recorded no NCCL version in Communicator %s within %lld ms; rank "
                       "%d's NCCL %s is not compared (pin spec.ncclVersion to check every rank "
                       "on its own)",
                       ctx->comm_name, (long long)wait, f.rank, in.version);
        } else if (!colli_proto_nccl_versions_agree(in.version, root.version, nf.policy)) {
            snprintf(msg, sizeof(msg),
                     "NCCL version mismatch: rank %d (pod %s, node %s) loaded NCCL %s, but rank 0 "
                     "(pod %s, node %s) runs NCCL %s (policy %s); these pods differ: run one NCCL "
                     "build on every pod of the job (the same image), or pin spec.ncclVersion in "
                     "CollectiveTopology %s",
                     f.rank, f.pod, f.node, in.version, root.pod, root.node, root.version,
                     nf.policy, f.topology);
            return refuse(ctx, &f, &in, msg);
        } else {
            snprintf(nf.reference, sizeof(nf.reference), "%s (rank 0, pod %s)", root.version,
                     root.pod);
        }
    }
    if (f.rank < LISTED_RANKS)
        record_member(ctx, &f, &in, "Accepted");
    char stamp[17];
    job_stamp(&f, stamp);
    agent_nccl_watch_start(ctx, stamp);
    agent_nccl_accepted(ctx, ctx->facts.local_size > 1 ? in.local_rank : -1);
    return colli_proto_nccl_init_reply(&nf);
}
