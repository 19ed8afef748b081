/*
 * What the sidecar reads about its own pod and the topology that selects it, as the API server
 * answers (fake_kube.h: the input is the answers, cut at NUL bytes): the Pod (labels, the
 * webhook's annotations kcoll.io/world-size, job-uid, namespace-labels and their *-error twins,
 * Indexed Job and JobSet rank conventions, ownerReferences, the Multus network-status annotation
 * and its deprecated spelling), then the CollectiveTopology list (namespace and pod selectors,
 * pins, spec.network against the network-status), then the Node (its topology label).
 * k8s-agent/pod_facts.c, topology.c, node_group.c; and why a rank ended, from that Pod and
 * Node (cause.c); and the first answer read as a Communicator's status.ncclPods (nccl_pods.c). A
 * rejection names its condition; accepted facts are consistent and say what the objects say (no int
 * wrapped on the way).
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_kube.h"
#include "fuzz.h"
#include "health_state.h"
#include "kube.h"
#include "pod_ranks.h" /* agent_name_ok */

static void named(const agent_condition_t *c)
{
    if (c->type[0] == '\0' || c->message[0] == '\0')
        fuzz_fail("a failure without a named condition");
}

/* The topology that matched, from the list answer (the second); NULL when its name is not unique
 * (the API server never lists two objects of one name). */
static json_t *matched_spec(const uint8_t *data, size_t size, const char *name)
{
    const uint8_t *nul = memchr(data, 0, size);
    if (nul == NULL)
        return NULL;
    const uint8_t *s = nul + 1, *end = memchr(s, 0, size - (size_t)(s - data));
    size_t n = end ? (size_t)(end - s) : size - (size_t)(s - data);
    if (n >= 4 && s[3] == ' ') {
        s += 4;
        n -= 4;
    }
    json_t *list = json_loadb((const char *)s, n, 0, NULL), *it, *spec = NULL;
    size_t i;
    int found = 0;
    json_array_foreach(json_object_get(list, "items"), i, it)
    {
        const char *nm = json_string_value(agent_json_path(it, "metadata.name"));
        if (nm && strcmp(nm, name) == 0 && found++ == 0)
            spec = json_incref(json_object_get(it, "spec"));
    }
    json_decref(list);
    if (found > 1) {
        json_decref(spec);
        return NULL;
    }
    return spec;
}

/* The k-th answer (from 0) as JSON, its "NNN " status cut off; NULL if none or not JSON. */
static json_t *answer_json(const uint8_t *data, size_t size, int k)
{
    const uint8_t *s = data, *end = data + size;
    for (int i = 0; i < k; i++) {
        const uint8_t *nul = memchr(s, 0, (size_t)(end - s));
        if (nul == NULL)
            return NULL;
        s = nul + 1;
    }
    const uint8_t *nul = memchr(s, 0, (size_t)(end - s));
    size_t n = nul ? (size_t)(nul - s) : (size_t)(end - s);
    if (n >= 4 && s[0] >= '0' && s[0] <= '9' && s[1] >= '0' && s[1] <= '9' && s[2] >= '0' &&
        s[2] <= '9' && s[3] == ' ') {
        s += 4;
        n -= 4;
    }
    return json_loadb((const char *)s, n, 0, NULL);
}

/* Why a rank ended, from the same Pod (first answer) and a Node (third), as the writer agent
 * reads a blamed rank's (k8s-agent/cause.c): an answer in range, text exactly when it says so,
 * bounded. */
static void cause_of(const uint8_t *data, size_t size)
{
    char out[MAX_CAUSE];
    json_t *pod = answer_json(data, size, 0), *node = answer_json(data, size, 2);
    for (int mode = 0; mode < 3; mode++) { /* the pod, a silent peer's, no pod */
        memset(out, 'x', sizeof(out));
        int r =
            agent_pod_cause("p", mode == 2 ? NULL : pod, 1795953600LL, mode == 1, out, sizeof(out));
        if (r < 0 || r > 2 || memchr(out, 0, sizeof(out)) == NULL || (r == 0) != (out[0] == 0))
            fuzz_fail("a pod's cause out of range, unterminated, or text that disagrees");
    }
    /* the same Pod as the agent's own (spec.nccl: native): did its ranks end? */
    char key[160];
    memset(out, 'x', sizeof(out));
    memset(key, 'x', sizeof(key));
    int own = agent_own_end("p", pod, 1795953600LL, out, sizeof(out), key, sizeof(key));
    if ((own != 0 && own != 1) || memchr(out, 0, sizeof(out)) == NULL ||
        memchr(key, 0, sizeof(key)) == NULL || (own == 1 && (!out[0] || !key[0])))
        fuzz_fail("the own pod's end out of range, unterminated, or said without a text or key");
    /* the same Pod as the next one of the ring's: did it leave while it ran? */
    for (int deleted = 0; deleted < 2; deleted++) {
        memset(out, 'x', sizeof(out));
        int left = agent_pod_leaving("p", pod, deleted, out, sizeof(out));
        if ((left != 0 && left != 1) || memchr(out, 0, sizeof(out)) == NULL ||
            (left == 0) != (out[0] == 0))
            fuzz_fail("a pod's leaving out of range, unterminated, or text that disagrees");
    }
    memset(out, 'x', sizeof(out));
    int r = agent_node_cause("n", node, out, sizeof(out));
    if ((r != 0 && r != 1) || memchr(out, 0, sizeof(out)) == NULL || (r == 0) != (out[0] == 0))
        fuzz_fail("a node's cause out of range, unterminated, or text that disagrees");
    json_decref(pod);
    json_decref(node);
}

/* The same first answer as a Communicator (spec.nccl: native, nccl_pods.c): the next pod's
 * record, when a pod started, and whether a job runs again after a failure. Names that come out
 * are DNS-1123 names; no more pods counted than recorded. */
static void nccl_pods(const uint8_t *data, size_t size)
{
    json_t *comm = answer_json(data, size, 0);
    const char *stamp = "0123456789abcdef";
    size_t recorded = json_object_size(agent_json_path(comm, "status.ncclPods"));
    char pod[254], node[254];
    for (int q = 0; q < 3; q++) {
        memset(pod, 'x', sizeof(pod));
        memset(node, 'x', sizeof(node));
        int r = agent_nccl_pods_entry(comm, stamp, q, pod, sizeof(pod), node, sizeof(node));
        if ((r != 0 && r != 1) ||
            (r == 1 &&
             (!memchr(pod, 0, sizeof(pod)) || !memchr(node, 0, sizeof(node)) ||
              !agent_name_ok(pod, 1) || (strcmp(node, "?") != 0 && !agent_name_ok(node, 1)))))
            fuzz_fail("a next pod's record out of range, unterminated, or not a name");
        (void)agent_nccl_pods_since(comm, stamp, q);
    }
    int member = agent_nccl_pods_member(comm, "t-1");
    if (member != 0 && member != 1)
        fuzz_fail("a member out of range");
    int only = agent_nccl_pods_refused_only(comm);
    if (only != 0 && only != 1)
        fuzz_fail("refused_only out of range");
    for (int64_t t = -1; t < 2000000000; t += 1000000000) {
        int n = agent_nccl_pods_started(comm, stamp, t, 2);
        if (n < 0 || (size_t)n > recorded)
            fuzz_fail("more pods started than recorded");
    }
    char out[MAX_CAUSE];
    memset(out, 'x', sizeof(out));
    int lost = agent_node_lost("p", comm, out, sizeof(out));
    if ((lost != 0 && lost != 1) || !memchr(out, 0, sizeof(out)) || (lost == 0) != (out[0] == 0))
        fuzz_fail("a node's loss out of range, unterminated, or text that disagrees");
    json_decref(comm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cause_of(data, size);
    nccl_pods(data, size);
    fake_kube_load(data, size);
    agent_ctx_t ctx;
    memset(&ctx, 0, sizeof(ctx));
    agent_pod_info_t pi;
    agent_facts_t f;
    agent_condition_t cond;
    memset(&f, 0, sizeof(f));
    memset(&cond, 0, sizeof(cond));
    int64_t deadline = agent_now_ms() + 60000;
    if (agent_pod_read(&ctx, deadline, &pi, &f, &cond) != 0) {
        named(&cond);
        agent_pod_info_free(&pi);
        return 0;
    }
    if (f.rank < 0 || (pi.rank_known && pi.nranks > 0 && f.rank >= pi.nranks))
        fuzz_fail("pod read accepted a rank outside the world");
    if (pi.network_status != NULL && !json_is_array(pi.network_status))
        fuzz_fail("a network-status that is not an array was kept");
    if (pi.rank_known || pi.jobset_global_index >= 0) {
        if (agent_pod_world_size(&pi, &f, &cond) != 0) {
            named(&cond);
        } else if (pi.nranks <= 0 || f.rank < 0 || f.rank >= pi.nranks) {
            fuzz_fail("world size accepted a rank outside the world");
        }
    }
    memset(&cond, 0, sizeof(cond));
    if (agent_topology_resolve(&ctx, deadline, &pi, &f, &cond) != 0) {
        named(&cond);
    } else {
        if (!colli_proto_transport_valid(f.transport) || f.bootstrap_timeout_s <= 0 ||
            f.timeout_s <= 0 || f.ifname[0] == '\0')
            fuzz_fail("a resolved topology with an invalid transport, timeout or interface");
        json_t *spec = matched_spec(data, size, f.topology);
        json_t *bt = json_object_get(spec, "bootstrapTimeoutSeconds");
        json_t *ct = json_object_get(spec, "timeoutSeconds");
        if ((json_is_integer(bt) && json_integer_value(bt) != f.bootstrap_timeout_s) ||
            (json_is_integer(ct) && json_integer_value(ct) != f.timeout_s))
            fuzz_fail("the facts' timeouts are not the topology's (wrapped to int?)");
        json_decref(spec);
    }
    agent_pod_info_free(&pi);
    return 0;
}
