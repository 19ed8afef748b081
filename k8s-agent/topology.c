/* The CollectiveTopology that selects this pod (exactly one, or a named condition) and the
 * resolution of its pinned network to an interface and address verified inside the pod. */
#define _GNU_SOURCE
#include "annotations.h"
#include "kube.h"
#include "pod_ranks.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOPO_PATH     "/apis/kcoll.io/v1alpha1/collectivetopologies"
#define NS_NAME_LABEL "kubernetes.io/metadata.name"

static int value_in(const json_t *values, const char *v)
{
    size_t i;
    json_t *it;
    json_array_foreach(values, i, it)
    {
        if (json_is_string(it) && v && strcmp(json_string_value(it), v) == 0)
            return 1;
    }
    return 0;
}

int agent_selector_matches(const json_t *selector, const json_t *labels, char *err, size_t errlen)
{
    const char *key;
    json_t *val, *exprs, *e;
    size_t i;
    if (!selector || json_is_null(selector))
        return 1;
    if (!json_is_object(selector)) {
        snprintf(err, errlen, "selector is not an object");
        return -1;
    }
    json_object_foreach(json_object_get(selector, "matchLabels"), key, val)
    {
        const char *have = json_string_value(json_object_get(labels, key));
        if (!json_is_string(val)) {
            snprintf(err, errlen, "matchLabels[%s] is not a string", key);
            return -1;
        }
        if (!have || strcmp(have, json_string_value(val)) != 0)
            return 0;
    }
    exprs = json_object_get(selector, "matchExpressions");
    json_array_foreach(exprs, i, e)
    {
        const char *k = json_string_value(json_object_get(e, "key"));
        const char *op = json_string_value(json_object_get(e, "operator"));
        json_t *values = json_object_get(e, "values");
        const char *have;
        if (!k || !op) {
            snprintf(err, errlen, "matchExpressions[%zu] needs key and operator", i);
            return -1;
        }
        have = json_string_value(json_object_get(labels, k));
        if (strcmp(op, "In") == 0) {
            if (!have || !value_in(values, have))
                return 0;
        } else if (strcmp(op, "NotIn") == 0) {
            if (have && value_in(values, have))
                return 0;
        } else if (strcmp(op, "Exists") == 0) {
            if (!have)
                return 0;
        } else if (strcmp(op, "DoesNotExist") == 0) {
            if (have)
                return 0;
        } else {
            snprintf(err, errlen, "matchExpressions[%zu]: unknown operator \"%s\"", i, op);
            return -1;
        }
    }
    return 1;
}

/* Does the selector use label keys other than kubernetes.io/metadata.name (which every
 * namespace carries, so it can be evaluated without reading the Namespace)? */
static int needs_namespace_labels(const json_t *sel)
{
    const char *key;
    json_t *val, *e;
    size_t i;
    json_object_foreach(json_object_get(sel, "matchLabels"), key, val)
    {
        if (strcmp(key, NS_NAME_LABEL) != 0)
            return 1;
    }
    json_array_foreach(json_object_get(sel, "matchExpressions"), i, e)
    {
        const char *k = json_string_value(json_object_get(e, "key"));
        if (!k || strcmp(k, NS_NAME_LABEL) != 0)
            return 1;
    }
    return 0;
}

/* The Namespace's labels, which the webhook copied into the pod (the agent may not read
 * Namespaces). */
static int ns_labels(const agent_pod_info_t *pi, const char *topo, const char *ns, json_t **labels,
                     agent_condition_t *cond)
{
    const json_t *ann = agent_json_path(pi->pod, "metadata.annotations");
    const char *v = json_string_value(json_object_get(ann, AGENT_ANN_NAMESPACE_LABELS));
    const char *err = json_string_value(json_object_get(ann, AGENT_ANN_NAMESPACE_LABELS_ERROR));
    json_error_t jerr;
    json_t *l;
    const char *key;
    json_t *val;
    if (*labels)
        return 0;
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "NamespaceLabelsUnknown");
    if (!v) {
        snprintf(cond->message, sizeof(cond->message),
                 "CollectiveTopology %s has a namespaceSelector on labels of namespace %s, which "
                 "the kcoll webhook records in the pod annotation %s when it injects the agent; "
                 "the pod has none (%s). Recreate the pod once the webhook can read Namespaces, "
                 "or select on kubernetes.io/metadata.name only",
                 topo, ns, AGENT_ANN_NAMESPACE_LABELS,
                 err && err[0] ? err : "was it created while the webhook was down?");
        return -1;
    }
    l = json_loads(v, 0, &jerr);
    if (!json_is_object(l)) {
        json_decref(l);
        snprintf(cond->message, sizeof(cond->message),
                 "pod annotation %s is not a JSON object of labels (%s); the kcoll webhook "
                 "writes it: recreate the pod",
                 AGENT_ANN_NAMESPACE_LABELS, jerr.text);
        return -1;
    }
    json_object_foreach(l, key, val)
    {
        if (!json_is_string(val)) {
            /* key belongs to l: the message first */
            snprintf(cond->message, sizeof(cond->message),
                     "pod annotation %s: label %s is not a string; recreate the pod",
                     AGENT_ANN_NAMESPACE_LABELS, key);
            json_decref(l);
            return -1;
        }
    }
    /* every Namespace carries its name label (since Kubernetes 1.21) */
    if (json_object_set_new(l, NS_NAME_LABEL, json_string(ns)) != 0) {
        json_decref(l);
        snprintf(cond->message, sizeof(cond->message), "out of memory");
        return -1;
    }
    memset(cond, 0, sizeof(*cond));
    *labels = l;
    return 0;
}

static int invalid(agent_condition_t *cond, const char *topo, const char *what)
{
    cond->fatal = 1;
    snprintf(cond->type, sizeof(cond->type), "TopologyInvalid");
    snprintf(cond->message, sizeof(cond->message), "CollectiveTopology %s: %s", topo, what);
    return -1;
}

/* Pick the network-status entry for the pinned attachment. */
static json_t *find_attachment(const agent_pod_info_t *pi, const char *ns, const char *want,
                               char *seen, size_t seen_len)
{
    char full[300];
    size_t i, off = 0;
    json_t *it;
    if (strchr(want, '/'))
        snprintf(full, sizeof(full), "%s", want);
    else
        snprintf(full, sizeof(full), "%s/%s", ns, want);
    seen[0] = '\0';
    json_array_foreach(pi->network_status, i, it)
    {
        const char *n = json_string_value(json_object_get(it, "name"));
        if (!n)
            continue;
        if (strcmp(n, full) == 0)
            return it;
        if (off < seen_len) {
            int w = snprintf(seen + off, seen_len - off, "%s%s", off ? ", " : "", n);
            if (w > 0)
                off += (size_t)w;
        }
    }
    return NULL;
}

static int resolve_network(const json_t *spec, const agent_pod_info_t *pi, agent_facts_t *f,
                           agent_condition_t *cond)
{
    json_t *net = json_object_get(spec, "network");
    const char *att = json_string_value(json_object_get(net, "attachment"));
    const char *ifn = json_string_value(json_object_get(net, "interface"));
    char have[768], seen[512];
    int rc;

    f->address[0] = f->ifname[0] = '\0';
    if (att && att[0]) {
        json_t *e, *ips;
        if (!pi->network_status) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "%s", COLLI_PROTO_CODE_NETWORK_STATUS_MISSING);
            snprintf(cond->message, sizeof(cond->message),
                     "topology %s pins attachment %s but the pod has no "
                     "k8s.v1.cni.cncf.io/network-status annotation: is Multus installed, and does "
                     "the pod request the network (annotation k8s.v1.cni.cncf.io/networks: %s)?",
                     f->topology, att, att);
            return -1;
        }
        e = find_attachment(pi, f->ns, att, seen, sizeof(seen));
        if (!e) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "%s", COLLI_PROTO_CODE_NETWORK_NOT_ATTACHED);
            snprintf(cond->message, sizeof(cond->message),
                     "topology %s pins network attachment %s, which is not attached to the pod "
                     "(attached: %s); add it to the pod's k8s.v1.cni.cncf.io/networks annotation",
                     f->topology, att, seen[0] ? seen : "none");
            return -1;
        }
        agent_json_str(e, "interface", f->ifname, sizeof(f->ifname));
        ips = json_object_get(e, "ips");
        if (json_is_string(json_array_get(ips, 0)))
            snprintf(f->address, sizeof(f->address), "%s",
                     json_string_value(json_array_get(ips, 0)));
        agent_json_str(agent_json_path(e, "device-info.pci"), "rdma-device", f->ib_device,
                       sizeof(f->ib_device));
        if (!f->ifname[0] || !f->address[0]) {
            cond->fatal = 1;
            snprintf(cond->type, sizeof(cond->type), "%s",
                     COLLI_PROTO_CODE_NETWORK_STATUS_INCOMPLETE);
            snprintf(cond->message, sizeof(cond->message),
                     "attachment %s in the pod's network-status has no interface or no IP: check "
                     "the NetworkAttachmentDefinition's IPAM",
                     att);
            return -1;
        }
    } else if (ifn && ifn[0]) {
        snprintf(f->ifname, sizeof(f->ifname), "%s", ifn);
    } else {
        /* no pin: the pod's default network (Multus default entry, else the pod IP) */
        json_t *it;
        size_t i;
        json_array_foreach(pi->network_status, i, it)
        {
            if (json_is_true(json_object_get(it, "default"))) {
                agent_json_str(it, "interface", f->ifname, sizeof(f->ifname));
                if (json_is_string(json_array_get(json_object_get(it, "ips"), 0)))
                    snprintf(f->address, sizeof(f->address), "%s",
                             json_string_value(json_array_get(json_object_get(it, "ips"), 0)));
            }
        }
        if (!f->ifname[0]) {
            agent_json_str(agent_json_path(pi->pod, "status"), "podIP", f->address,
                           sizeof(f->address));
            if (!f->address[0] ||
                agent_interface_for_address(f->address, f->ifname, sizeof(f->ifname)) != 0) {
                agent_list_interfaces(have, sizeof(have));
                cond->fatal = 1;
                snprintf(cond->type, sizeof(cond->type), "%s", COLLI_PROTO_CODE_INTERFACE_MISSING);
                snprintf(cond->message, sizeof(cond->message),
                         "topology %s pins no network and the pod IP \"%s\" is on no interface "
                         "of this pod (it has: %s); pin spec.network",
                         f->topology, f->address, have);
                return -1;
            }
        }
    }
    rc = agent_check_interface(f->ifname, f->address, f->address[0] ? NULL : f->address,
                               sizeof(f->address));
    if (rc != 0) {
        agent_list_interfaces(have, sizeof(have));
        cond->fatal = 1;
        if (rc == 1) {
            snprintf(cond->type, sizeof(cond->type), "%s", COLLI_PROTO_CODE_INTERFACE_MISSING);
            snprintf(cond->message, sizeof(cond->message),
                     "pod %s (node %s): the pinned network's interface %s does not exist in this "
                     "pod (it has: %s); fix spec.network of CollectiveTopology %s or attach the "
                     "network",
                     f->pod, f->node[0] ? f->node : "?", f->ifname, have, f->topology);
        } else {
            snprintf(cond->type, sizeof(cond->type), "%s", COLLI_PROTO_CODE_ADDRESS_MISSING);
            snprintf(cond->message, sizeof(cond->message),
                     "pod %s (node %s): interface %s of this pod does not carry address %s%s (it "
                     "has: %s)",
                     f->pod, f->node[0] ? f->node : "?", f->ifname,
                     f->address[0] ? f->address : "(any IP)",
                     f->address[0] ? " reported by Multus" : "", have);
        }
        return -1;
    }
    return 0;
}

/* Several ranks per pod: spec.ranksPerPod, else what the pod says (pod_ranks.h). */
static int ranks_per_pod(const char *name, const json_t *spec, agent_pod_info_t *pi,
                         agent_facts_t *f, agent_condition_t *cond)
{
    json_t *rpp = json_object_get(spec, "ranksPerPod");
    agent_pod_ranks_t pr;
    int topo = 0;
    if (rpp) {
        if (!json_is_integer(rpp) || json_integer_value(rpp) < 1 ||
            json_integer_value(rpp) > AGENT_MAX_PER_POD)
            return invalid(cond, name, "spec.ranksPerPod must be an integer 1..256");
        topo = (int)json_integer_value(rpp);
    }
    if (agent_pod_ranks_read(pi->pod, &pr) != 0 && topo == 0) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "RanksPerPodInvalid");
        snprintf(cond->message, sizeof(cond->message),
                 "cannot tell how many ranks pod %s runs: %s. Fix it, or set spec.ranksPerPod "
                 "in CollectiveTopology %s",
                 f->pod, pr.error, name);
        return -1;
    }
    f->local_size =
        agent_pod_ranks_choose(topo, name, &pr, pi->ranks_source, sizeof(pi->ranks_source));
    f->gpu = pr.gpus; /* the pod's GPUs: local rank r binds GPU r of them */
    if (pr.nproc > 0 && pr.nproc != f->local_size) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "RanksPerPodMismatch");
        snprintf(cond->message, sizeof(cond->message),
                 "pod %s starts %d processes (%s) but %s says ranksPerPod %d; make them agree",
                 f->pod, pr.nproc, pr.nproc_where, pi->ranks_source, f->local_size);
        return -1;
    }
    return 0;
}

static int apply_pins(const char *name, const json_t *spec, agent_pod_info_t *pi, agent_facts_t *f,
                      agent_condition_t *cond)
{
    const char *t = json_string_value(json_object_get(spec, "transport"));
    json_t *bt = json_object_get(spec, "bootstrapTimeoutSeconds");
    json_t *ct = json_object_get(spec, "timeoutSeconds");
    json_t *hcas = json_object_get(spec, "ibHCAs");

    snprintf(f->topology, sizeof(f->topology), "%s", name);
    if (!t)
        t = COLLI_PROTO_TRANSPORT_PREFER_IB;
    if (!colli_proto_transport_valid(t))
        return invalid(cond, name, "spec.transport must be RequireIB, PreferIB or Socket");
    snprintf(f->transport, sizeof(f->transport), "%s", t);
    agent_json_str(spec, "libraryVersion", f->library_version, sizeof(f->library_version));
    agent_json_str(spec, "topologyKey", pi->topology_key, sizeof(pi->topology_key));
    if ((json_is_integer(bt) &&
         (json_integer_value(bt) <= 0 || json_integer_value(bt) > INT_MAX)) ||
        (json_is_integer(ct) && (json_integer_value(ct) <= 0 || json_integer_value(ct) > INT_MAX)))
        return invalid(cond, name, "timeouts must be positive (and below 2^31 seconds)");
    f->bootstrap_timeout_s = json_is_integer(bt) ? (int)json_integer_value(bt) : 300;
    f->timeout_s = json_is_integer(ct) ? (int)json_integer_value(ct) : 1800;
    (void)hcas; /* applied after the network is resolved */
    return ranks_per_pod(name, spec, pi, f, cond);
}

int agent_topology_resolve(agent_ctx_t *ctx, int64_t deadline, agent_pod_info_t *pi,
                           agent_facts_t *f, agent_condition_t *cond)
{
    agent_kube_resp_t r;
    json_t *items, *it, *nslabels = NULL, *match = NULL;
    const json_t *podlabels = agent_json_path(pi->pod, "metadata.labels");
    char names[512] = "", all[512] = "", err[256];
    size_t i, noff = 0, aoff = 0;
    int nmatch = 0, rc = -1;

    if (agent_kube_request(ctx->kube, "GET", TOPO_PATH, NULL, NULL, deadline, &r) != 0 ||
        r.code != 200) {
        agent_condition_from_resp(cond, "listing CollectiveTopologies", &r);
        agent_kube_resp_free(&r);
        return -1;
    }
    items = json_object_get(r.body, "items");
    json_array_foreach(items, i, it)
    {
        const char *name = json_string_value(agent_json_path(it, "metadata.name"));
        json_t *spec = json_object_get(it, "spec");
        json_t *nsel = json_object_get(spec, "namespaceSelector");
        int m;
        if (!name)
            continue;
        if (aoff < sizeof(all)) {
            int w = snprintf(all + aoff, sizeof(all) - aoff, "%s%s", aoff ? ", " : "", name);
            if (w > 0)
                aoff += (size_t)w;
        }
        if (nsel && !json_is_null(nsel)) {
            json_t *l;
            if (needs_namespace_labels(nsel)) {
                if (ns_labels(pi, name, f->ns, &nslabels, cond) != 0)
                    goto done;
                l = json_incref(nslabels);
            } else {
                l = json_pack("{ss}", NS_NAME_LABEL, f->ns);
            }
            m = agent_selector_matches(nsel, l, err, sizeof(err));
            json_decref(l);
            if (m < 0) {
                invalid(cond, name, err);
                goto done;
            }
            if (!m)
                continue;
        }
        m = agent_selector_matches(json_object_get(spec, "podSelector"), podlabels, err,
                                   sizeof(err));
        if (m < 0) {
            invalid(cond, name, err);
            goto done;
        }
        if (!m)
            continue;
        nmatch++;
        match = it;
        if (noff < sizeof(names)) {
            int w = snprintf(names + noff, sizeof(names) - noff, "%s%s", noff ? ", " : "", name);
            if (w > 0)
                noff += (size_t)w;
        }
    }
    if (nmatch == 0) {
        json_t *none = podlabels ? NULL : json_object();
        char *l = json_dumps(podlabels ? podlabels : none, JSON_COMPACT | JSON_SORT_KEYS);
        json_decref(none);
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "TopologyNotFound");
        snprintf(cond->message, sizeof(cond->message),
                 "no CollectiveTopology selects pod %s/%s (labels %s; existing topologies: %s); "
                 "create one whose namespaceSelector and podSelector match the pod",
                 f->ns, f->pod, l ? l : "{}", all[0] ? all : "none");
        free(l);
        goto done;
    }
    if (nmatch > 1) {
        cond->fatal = 1;
        snprintf(cond->type, sizeof(cond->type), "TopologyAmbiguous");
        snprintf(cond->message, sizeof(cond->message),
                 "pod %s/%s is selected by %d CollectiveTopologies (%s); make their selectors "
                 "disjoint so that exactly one applies",
                 f->ns, f->pod, nmatch, names);
        goto done;
    }
    if (apply_pins(names, json_object_get(match, "spec"), pi, f, cond) != 0 ||
        agent_nccl_pins(ctx, json_object_get(match, "spec"), names, cond) != 0)
        goto done;
    agent_nccl_conflicts(ctx, pi->pod);
    if (resolve_network(json_object_get(match, "spec"), pi, f, cond) != 0)
        goto done;
    if (!f->ib_device[0]) {
        json_t *hca = json_array_get(agent_json_path(match, "spec.ibHCAs"), 0);
        if (json_is_string(hca))
            snprintf(f->ib_device, sizeof(f->ib_device), "%s", json_string_value(hca));
    }
    agent_node_group(ctx, deadline, pi->topology_key, f);
    agent_info("AGENT-TOPOLOGY-RESOLVED",
               "topology %s: transport=%s version=%s interface=%s address=%s ib=%s ranksPerPod=%d "
               "(%s) gpus=%d",
               f->topology, f->transport, f->library_version[0] ? f->library_version : "(unpinned)",
               f->ifname, f->address, f->ib_device[0] ? f->ib_device : "-", f->local_size,
               pi->ranks_source, f->gpu);
    snprintf(ctx->ranks_source, sizeof(ctx->ranks_source), "%s", pi->ranks_source);
    if (ctx->opt.local_timeout_s == 0) {
        json_t *lt = agent_json_path(match, "spec.localRanksTimeoutSeconds");
        if (json_is_integer(lt) && json_integer_value(lt) > 0 && json_integer_value(lt) <= 86400)
            ctx->opt.local_timeout_s = (int)json_integer_value(lt);
    }
    rc = 0;
done:
    json_decref(nslabels);
    agent_kube_resp_free(&r);
    return rc;
}
