/*
 * The rendezvous through the Communicator (k8s-agent/rendezvous.c) as the API server answers
 * (fake_kube.h: the input after its first byte is the answers, cut at NUL bytes). Rank 0 creates
 * the Communicator and, on 409, reads and adopts or takes over the existing one; every other rank
 * watches it (k8s-agent/watch.c: a real HTTP stream of newline-separated events, bookmarks,
 * ERROR events, 410 Gone) until its spec names the root. The first byte picks the rank (bits
 * 0-2), whether the world size is known (bit 3) and whether the job's uid is (bit 4). Accepted
 * facts must be what the library accepts, with the spec's numbers unchanged.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_kube.h"
#include "fuzz.h"
#include "kube.h"

/* Is v the world size in pods of a Communicator in the answers (spec.pods, else spec.nranks; a
 * whole answer, or one line of a watch stream, as the object or the event's object)? */
static int said(const uint8_t *d, size_t n, long long v)
{
    size_t i = 0;
    while (i < n) {
        size_t e = i;
        while (e < n && d[e] != 0 && d[e] != '\n')
            e++;
        size_t s = i;
        if (e - s >= 4 && d[s + 3] == ' ' && d[s] >= '1' && d[s] <= '5')
            s += 4;
        json_t *o = json_loadb((const char *)d + s, e - s, 0, NULL);
        json_t *c = json_object_get(o, "object") ? json_object_get(o, "object") : o;
        json_t *spec = json_object_get(c, "spec");
        json_t *nr = json_object_get(spec, json_object_get(spec, "pods") ? "pods" : "nranks");
        int hit = json_is_integer(nr) && json_integer_value(nr) == v;
        json_decref(o);
        if (hit)
            return 1;
        i = e + 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    uint8_t sel = data[0];
    fake_kube_load(data + 1, size - 1);
    agent_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    pthread_mutex_init(&ctx.mu, NULL);
    pthread_cond_init(&ctx.cv, NULL);
    ctx.opt.root_port = 29500;
    agent_pod_info_t pi;
    memset(&pi, 0, sizeof(pi));
    agent_facts_t f;
    memset(&f, 0, sizeof(f));
    agent_condition_t cond;
    memset(&cond, 0, sizeof(cond));
    f.rank = sel & 7;
    pi.rank_known = 1;
    pi.nranks = (sel & 8) || f.rank == 0 ? 8 : 0;
    pi.completion_index = pi.jobset_global_index = -1;
    snprintf(pi.job_kind, sizeof(pi.job_kind), "Job");
    snprintf(pi.job_api_version, sizeof(pi.job_api_version), "batch/v1");
    snprintf(pi.job_name, sizeof(pi.job_name), "train");
    if (sel & 16) {
        snprintf(pi.job_uid, sizeof(pi.job_uid), "0f0e0d0c-uid");
        snprintf(pi.owner_name, sizeof(pi.owner_name), "train");
    }
    snprintf(f.job, sizeof(f.job), "train");
    snprintf(f.ns, sizeof(f.ns), "ml");
    snprintf(f.pod, sizeof(f.pod), "train-%d", f.rank);
    snprintf(f.node, sizeof(f.node), "node-a");
    snprintf(f.topology, sizeof(f.topology), "fabric");
    snprintf(f.transport, sizeof(f.transport), "Socket");
    snprintf(f.address, sizeof(f.address), "10.0.0.%d", f.rank + 1);
    snprintf(f.ifname, sizeof(f.ifname), "eth0");
    f.bootstrap_timeout_s = 30;
    f.timeout_s = 300;
    int64_t deadline = agent_now_ms() + 60000;
    if (agent_rendezvous(&ctx, deadline, &pi, &f, &cond) != 0) {
        if (getenv("FUZZ_VERBOSE"))
            fprintf(stderr, "%s: %s\n", cond.type, cond.message);
        if (cond.type[0] == '\0' || cond.message[0] == '\0')
            fuzz_fail("a failed rendezvous without a named condition");
        return 0;
    }
    /* what the agent answers a one-rank pod's hello (agent_local_hello) */
    ctx.facts = f;
    ctx.state = AGENT_STATE_READY;
    json_t *req = colli_proto_hello_request(1000, "0.1.0", 4242);
    json_t *reply = agent_local_hello(&ctx, req, agent_now_ms() + 1000);
    json_decref(req);
    colli_proto_facts_t back;
    char err[256] = "";
    if (reply == NULL || colli_proto_hello_decode(reply, &back, err, sizeof(err)) != 0) {
        fprintf(stderr, "library: %s\n", err);
        fuzz_fail("the library rejects the facts of a completed rendezvous");
    }
    json_decref(reply);
    if (pi.nranks > 0 && f.nranks != pi.nranks)
        fuzz_fail("the world size changed in the rendezvous");
    if (pi.nranks == 0 && !said(data + 1, size - 1, f.nranks))
        fuzz_fail("the world size learned is no Communicator's spec.nranks (wrapped to int?)");
    return 0;
}
