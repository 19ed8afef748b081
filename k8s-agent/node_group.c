/* Topology group of this pod's node: the value of the CollectiveTopology's spec.topologyKey
 * label (a switch or rack label) on the pod's Node, read with one GET of that Node. The library
 * orders its rings by (group, host, rank) so that ring neighbours share a switch. Never fatal:
 * without a group the ranks keep their host order, and the reason is a warning condition and a
 * log line that say what to fix. */
#include <stdio.h>
#include <string.h>

#include "agent.h"
#include "kube.h"

static void group_warning(agent_ctx_t *ctx, const char *type, const char *msg)
{
    agent_condition_t c;
    memset(&c, 0, sizeof(c));
    snprintf(c.type, sizeof(c.type), "%s", type);
    snprintf(c.message, sizeof(c.message), "%s", msg);
    agent_add_warning(ctx, &c); /* logged and emitted as a pod Event */
}

void agent_node_group(agent_ctx_t *ctx, int64_t deadline, const char *topology_key,
                      agent_facts_t *f)
{
    char path[600], msg[900];
    agent_kube_resp_t r;
    const json_t *labels, *v;

    f->group[0] = '\0';
    if (!topology_key[0])
        return;
    if (!f->node[0]) {
        snprintf(msg, sizeof(msg),
                 "CollectiveTopology %s names topologyKey %s but the pod has no node yet; ring "
                 "order falls back to hosts",
                 f->topology, topology_key);
        group_warning(ctx, "NodeGroupUnknown", msg);
        return;
    }
    snprintf(path, sizeof(path), "/api/v1/nodes/%s", f->node);
    if (agent_kube_request(ctx->kube, "GET", path, NULL, NULL, deadline, &r) != 0 ||
        r.code != 200) {
        snprintf(msg, sizeof(msg),
                 "cannot read Node %s for its %s label (HTTP %ld %s): ring order falls back to "
                 "hosts. The agent's ServiceAccount needs get on nodes (Helm value "
                 "rbac.readNodes=true) when a CollectiveTopology sets topologyKey",
                 f->node, topology_key, r.code, r.message);
        group_warning(ctx, "NodeGroupUnknown", msg);
        agent_kube_resp_free(&r);
        return;
    }
    labels = agent_json_path(r.body, "metadata.labels");
    v = json_object_get(labels, topology_key);
    if (!json_is_string(v) || json_string_length(v) == 0) {
        snprintf(msg, sizeof(msg),
                 "Node %s has no label %s (CollectiveTopology %s topologyKey): its ranks form a "
                 "group of their own; label the node (kubectl label node %s %s=RACK)",
                 f->node, topology_key, f->topology, f->node, topology_key);
        group_warning(ctx, "NodeGroupLabelMissing", msg);
    } else if (json_string_length(v) >= sizeof(f->group)) {
        snprintf(msg, sizeof(msg),
                 "Node %s label %s is longer than %zu characters, which a label value cannot "
                 "be; ignored",
                 f->node, topology_key, sizeof(f->group) - 1);
        group_warning(ctx, "NodeGroupLabelInvalid", msg);
    } else {
        snprintf(f->group, sizeof(f->group), "%s", json_string_value(v));
        agent_info("AGENT-NODE-GROUP", "node %s is in topology group %s=%s", f->node, topology_key,
                   f->group);
    }
    agent_kube_resp_free(&r);
}
