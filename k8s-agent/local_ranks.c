/* Several ranks per pod: the pod's processes (torchrun --nproc-per-node, vLLM, a launcher that
 * forks) each say hello with their local rank; the agent gives local rank lr of pod p the global
 * rank p * ranksPerPod + lr, refuses a local rank claimed twice or out of range, and fails the
 * pod's hellos, naming the local ranks that never came, when not all of them said hello within
 * the deadline. Claims belong to a generation: a hello with a higher restart count (torchrun's
 * TORCHELASTIC_RESTART_COUNT) starts a new one, so restarted workers are not duplicates. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "kube.h"

#define LOCAL_TIMEOUT_DEFAULT_S 60

void agent_rank_facts(const agent_facts_t *pod, int lr, agent_facts_t *out)
{
    int per = pod->local_size > 0 ? pod->local_size : 1;
    *out = *pod;
    out->pod_rank = pod->rank;
    out->npods = pod->nranks;
    out->local_size = per;
    out->local_rank = lr;
    out->rank = pod->rank * per + lr;
    out->nranks = pod->nranks * per;
    out->is_root = pod->is_root && lr == 0;
    /* pod->gpu is the number of GPUs the pod has: local rank lr binds GPU lr of them */
    out->gpu = pod->gpu > 0 ? lr % pod->gpu : -1;
}

int agent_local_rank_of(agent_ctx_t *ctx, int pid)
{
    int lr = -1, per = ctx->facts.local_size;
    if (pid <= 0)
        return -1;
    pthread_mutex_lock(&ctx->mu);
    for (int i = 0; i < per && i < AGENT_MAX_RANKS_PER_POD && lr < 0; i++)
        if (ctx->local.pid[i] == pid)
            lr = i;
    pthread_mutex_unlock(&ctx->mu);
    return lr;
}

/* "0-3,5,7-8" of the local ranks whose claim is (present ? taken : free), into buf. */
static void ranges(const agent_local_t *l, int n, int present, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int j = i, w;
        if ((l->pid[i] != 0) != present)
            continue;
        while (j + 1 < n && (l->pid[j + 1] != 0) == present)
            j++;
        w = j > i ? snprintf(buf + used, len - used, "%s%d-%d", used ? "," : "", i, j)
                  : snprintf(buf + used, len - used, "%s%d", used ? "," : "", i);
        if (w < 0 || (size_t)w >= len - used)
            return;
        used += (size_t)w;
        i = j;
    }
}

/* The pids of the claimed local ranks ("3 4 5 ..."), into buf. */
static void pids(const agent_local_t *l, int n, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++) {
        int w;
        if (l->pid[i] == 0)
            continue;
        w = snprintf(buf + used, len - used, "%s%d:%d", used ? " " : "", i, l->pid[i]);
        if (w < 0 || (size_t)w >= len - used)
            return;
        used += (size_t)w;
    }
}

/* An error reply that carries the facts of local rank lr: the process tells the root (as that
 * rank when own_rank, else as none); the one that hosts the root (host_root) also reports the
 * ranks that never said hello (missing_from: the local ranks whose slot is free, -1 none). */
static json_t *fail_reply(const char *code, const char *text, const agent_facts_t *pod, int lr,
                          int host_root, int own_rank, const agent_local_t *missing_from)
{
    agent_facts_t f;
    colli_proto_failure_t how;
    if (!pod)
        return colli_proto_error_reply(code, text);
    memset(&how, 0, sizeof(how));
    how.host_root = host_root;
    how.own_rank = own_rank;
    for (int i = 0; missing_from && i < pod->local_size && i < COLLI_PROTO_MAX_MISSING; i++)
        if (missing_from->pid[i] == 0)
            how.missing[how.nmissing++] = pod->rank * pod->local_size + i;
    agent_rank_facts(pod, lr, &f);
    return colli_proto_hello_failure(code, text, &f, &how, AGENT_VERSION);
}

json_t *agent_local_failed(const json_t *req, const agent_facts_t *pod, const char *code,
                           const char *msg)
{
    int lr = -1, lws = -1, restart = -1;
    char err[256];
    const int per = pod->local_size > 0 ? pod->local_size : 1;
    if (colli_proto_hello_local(req, &lr, &lws, &restart, err, sizeof(err)) != 0 || lr < 0 ||
        lr >= per)
        lr = 0; /* a process of no valid local rank still tells the root, as local rank 0 */
    return fail_reply(code, msg, pod, lr, pod->is_root && lr == 0, 1, NULL);
}

/* A process of the pod was refused (code, msg): while the pod's local ranks are not all there,
 * its hellos still waiting, and later ones, fail with the same message (those already answered
 * are bootstrapping: the refused process tells the root, which fails them). Once all are there
 * the job runs and only the refused process fails. Returns 1 when the pod's bootstrap failed. */
static int fail_generation(agent_ctx_t *ctx, int per, const char *code, const char *msg)
{
    agent_local_t *l = &ctx->local;
    int failed = 0;
    agent_error("AGENT-LOCAL-RANK", "%s", msg);
    pthread_mutex_lock(&ctx->mu);
    if (l->claimed < per && !l->failed[0]) {
        snprintf(l->failed, sizeof(l->failed), "%s", msg);
        snprintf(l->failed_code, sizeof(l->failed_code), "%s", code);
        pthread_cond_broadcast(&ctx->cv);
        failed = 1;
    }
    pthread_mutex_unlock(&ctx->mu);
    return failed; /* 1: the pod's bootstrap fails with it */
}

/* The pod's lowest claimed local rank (it hosts the root when local rank 0 of pod 0 is missing). */
static int lowest_claimed(const agent_local_t *l, int n)
{
    for (int i = 0; i < n; i++)
        if (l->pid[i] != 0)
            return i;
    return -1;
}

static int lowest_free(const agent_local_t *l, int n)
{
    for (int i = 0; i < n; i++)
        if (l->pid[i] == 0)
            return i;
    return 0;
}

/* The pod's local ranks failed (missing, claimed twice): the Communicator's status names rank
 * (the first missing one, the one claimed twice). */
static void report_pod_failure(agent_ctx_t *ctx, const agent_facts_t *pod, int rank,
                               const char *msg, const char *id)
{
    colli_proto_report_t rep;
    memset(&rep, 0, sizeof(rep));
    if (id != NULL)
        agent_error(id, "%s", msg);
    rep.phase = COLLI_PROTO_PHASE_FAILED;
    rep.has_error = 1;
    rep.has_err_rank = 1;
    rep.err_rank = rank;
    rep.err_pod = pod->pod;
    rep.err_node = pod->node;
    rep.err_message = msg;
    if (ctx->health)
        agent_health_report(ctx->health, &rep);
}

/* The generation's deadline passed with local ranks missing: the message every hello of this
 * generation gets (called under mu); the Communicator status is written by the caller. */
static void missing_message(agent_ctx_t *ctx, const agent_facts_t *pod, int timeout_s)
{
    agent_local_t *l = &ctx->local;
    int per = pod->local_size;
    char have[256], miss[256], who[512];
    ranges(l, per, 1, have, sizeof(have));
    ranges(l, per, 0, miss, sizeof(miss));
    pids(l, per, who, sizeof(who));
    snprintf(l->failed_code, sizeof(l->failed_code), "%s", COLLI_PROTO_CODE_LOCAL_RANKS_MISSING);
    snprintf(l->failed, sizeof(l->failed),
             "pod %s (pod rank %d of %d) started %d of its %d local ranks: local ranks %s said "
             "hello within %d s (local rank:pid %s), local ranks %s (global ranks from %d) did "
             "not. Start ranksPerPod=%d processes in the pod (torchrun --nproc-per-node %d), or "
             "set ranksPerPod to the number it starts",
             pod->pod, pod->rank, pod->nranks, l->claimed, per, have, timeout_s, who, miss,
             pod->rank * per, per, per);
}

json_t *agent_local_hello(agent_ctx_t *ctx, const json_t *req, int64_t deadline)
{
    agent_local_t *l = &ctx->local;
    agent_facts_t pod, f;
    char err[256], msg[1200];
    int lr, lws, restart, per, pid = 0, lowest, timeout_s, newly_failed = 0, first_missing;
    agent_local_t snap; /* the claims when the reply is built (outside mu) */
    char code[32];
    const json_t *jp = json_object_get(req, COLLI_PROTO_KEY_PID);
    int64_t local_deadline;

    if (colli_proto_hello_local(req, &lr, &lws, &restart, err, sizeof(err)) != 0)
        return colli_proto_error_reply(COLLI_PROTO_CODE_MALFORMED, err);
    if (json_is_integer(jp) && json_integer_value(jp) > 0 && json_integer_value(jp) < (1 << 30))
        pid = (int)json_integer_value(jp);
    pthread_mutex_lock(&ctx->mu);
    pod = ctx->facts;
    pthread_mutex_unlock(&ctx->mu);
    per = pod.local_size > 0 ? pod.local_size : 1;
    if (per > AGENT_MAX_RANKS_PER_POD) /* the pipelines never resolve more; never index past */
        return colli_proto_error_reply(COLLI_PROTO_CODE_INTERNAL, "ranksPerPod out of range");
    pod.local_size = per;
    if (lr < 0 && per > 1) {
        snprintf(msg, sizeof(msg),
                 "pod %s runs %d ranks (ranksPerPod %d, from %s) but the process with pid %d "
                 "said no local rank: start each process with LOCAL_RANK=0..%d (torchrun sets "
                 "it); one process that drives all the pod's GPUs needs ranksPerPod 1 "
                 "(annotation kcoll.io/ranks-per-pod: \"1\", or the topology's spec.ranksPerPod)",
                 pod.pod, per, per, ctx->ranks_source[0] ? ctx->ranks_source : "?", pid, per - 1);
        return colli_proto_error_reply(COLLI_PROTO_CODE_LOCAL_RANK_UNKNOWN, msg);
    }
    if (lr < 0)
        lr = 0;
    if (lr >= per) {
        snprintf(msg, sizeof(msg),
                 "pod %s (pod rank %d of %d): the process with pid %d says LOCAL_RANK %d, but the "
                 "pod runs %d local ranks (ranksPerPod %d from %s: local ranks 0..%d). Start "
                 "exactly %d processes per pod (torchrun --nproc-per-node %d), or set ranksPerPod",
                 pod.pod, pod.rank, pod.nranks, pid, lr, per, per,
                 ctx->ranks_source[0] ? ctx->ranks_source : "?", per - 1, per, per);
        fail_generation(ctx, per, COLLI_PROTO_CODE_LOCAL_RANK_OUT_OF_RANGE, msg);
        return fail_reply(COLLI_PROTO_CODE_LOCAL_RANK_OUT_OF_RANGE, msg, &pod, 0, 0, 0, NULL);
    }
    if (lws >= 0 && lws != per) {
        snprintf(msg, sizeof(msg),
                 "pod %s: the process with pid %d (LOCAL_RANK %d) was started with "
                 "LOCAL_WORLD_SIZE %d, but the pod's ranksPerPod is %d. Start %d processes per "
                 "pod (torchrun --nproc-per-node %d), or set ranksPerPod to %d",
                 pod.pod, pid, lr, lws, per, per, per, lws);
        fail_generation(ctx, per, COLLI_PROTO_CODE_LOCAL_WORLD_MISMATCH, msg);
        return fail_reply(COLLI_PROTO_CODE_LOCAL_WORLD_MISMATCH, msg, &pod, lr, 0, 1, NULL);
    }
    agent_rank_facts(&pod, lr, &f);
    if (per == 1) /* one rank per pod: no registry (a tool's hello is no duplicate) */
        return colli_proto_hello_reply(&f, AGENT_VERSION);

    timeout_s = ctx->opt.local_timeout_s > 0 ? ctx->opt.local_timeout_s : LOCAL_TIMEOUT_DEFAULT_S;
    if (pod.bootstrap_timeout_s > 0 && timeout_s > pod.bootstrap_timeout_s)
        timeout_s = pod.bootstrap_timeout_s;
    pthread_mutex_lock(&ctx->mu);
    if (restart > l->restart) { /* the launcher restarted the pod's workers: a new generation */
        agent_info("AGENT-LOCAL-RESTART",
                   "pid %d (local rank %d) is from restart %d; the pod's earlier claims (restart "
                   "%d) are dropped",
                   pid, lr, restart, l->restart);
        memset(l, 0, sizeof(*l));
        l->restart = restart;
    }
    if (l->failed[0]) {
        snprintf(msg, sizeof(msg), "%s", l->failed);
        snprintf(code, sizeof(code), "%s", l->failed_code);
        lowest = lr == lowest_claimed(l, per);
        snap = *l;
        pthread_mutex_unlock(&ctx->mu);
        return fail_reply(code, msg, &pod, lr, pod.is_root && lowest, 1, lowest ? &snap : NULL);
    }
    if (l->pid[lr] != 0 && l->pid[lr] != (pid ? pid : -1)) {
        snprintf(msg, sizeof(msg),
                 "two processes in pod %s claim LOCAL_RANK %d (global rank %d): pid %d said hello "
                 "first, pid %d second. Give every process of the pod a distinct LOCAL_RANK "
                 "0..%d (torchrun does), or stop the stray process",
                 pod.pod, lr, f.rank, l->pid[lr], pid, per - 1);
        pthread_mutex_unlock(&ctx->mu);
        /* the Communicator says so when the pod's bootstrap fails with it (a stray process
         * after the pod started is refused alone) */
        if (fail_generation(ctx, per, COLLI_PROTO_CODE_LOCAL_RANK_DUPLICATE, msg))
            report_pod_failure(ctx, &pod, f.rank, msg, NULL); /* logged by fail_generation */
        return fail_reply(COLLI_PROTO_CODE_LOCAL_RANK_DUPLICATE, msg, &pod, lr, 0, 0, NULL);
    }
    if (l->pid[lr] == 0) {
        l->pid[lr] = pid ? pid : -1;
        l->claimed++;
        if (l->first_ms == 0)
            l->first_ms = agent_now_ms();
        pthread_cond_broadcast(&ctx->cv);
        agent_info("AGENT-LOCAL-HELLO",
                   "local rank %d (pid %d) is rank %d of %d; %d of %d local "
                   "ranks said hello",
                   lr, pid, f.rank, f.nranks, l->claimed, per);
    }
    local_deadline = l->first_ms + (int64_t)timeout_s * 1000;
    while (l->claimed < per && !l->failed[0] && !ctx->stop &&
           agent_remaining_ms(deadline < local_deadline ? deadline : local_deadline) > 0)
        agent_wait_step(ctx, deadline < local_deadline ? deadline : local_deadline);
    if (l->claimed == per) {
        pthread_mutex_unlock(&ctx->mu);
        return colli_proto_hello_reply(&f, AGENT_VERSION);
    }
    if (!l->failed[0] && agent_remaining_ms(local_deadline) <= 0) {
        missing_message(ctx, &pod, timeout_s);
        newly_failed = 1;
    }
    lowest = lr == lowest_claimed(l, per);
    if (!l->failed[0]) {
        char miss[256];
        int claimed = l->claimed;
        ranges(l, per, 0, miss, sizeof(miss));
        pthread_mutex_unlock(&ctx->mu);
        snprintf(msg, sizeof(msg),
                 "pod %s: local ranks %s have not said hello yet (%d of %d did); this hello's "
                 "deadline passed first",
                 pod.pod, miss, claimed, per);
        return colli_proto_error_reply(COLLI_PROTO_CODE_NOT_READY, msg);
    }
    snprintf(msg, sizeof(msg), "%s", l->failed);
    snprintf(code, sizeof(code), "%s", l->failed_code);
    first_missing = lowest_free(l, per);
    snap = *l;
    pthread_mutex_unlock(&ctx->mu);
    if (newly_failed) /* the Communicator names the first local rank missing */
        report_pod_failure(ctx, &pod, pod.rank * per + first_missing, msg,
                           "AGENT-LOCAL-RANKS-MISSING");
    return fail_reply(code, msg, &pod, lr, pod.is_root && lowest, 1, lowest ? &snap : NULL);
}
