#!/usr/bin/env python3
"""Checks the CRDs in deploy/crds/: structural-schema rules of apiextensions.k8s.io/v1, names,
printer columns and subresources; then validates the documented examples (accepted, defaults
applied, nothing pruned) and invalid objects (rejected, for the right reason) with ajv.

YAML is read with the real kubectl (offline); JSON-schema validation is ajv from npm
(tests/deploy/setup-node.sh installs it). Missing tools: exit 77 with the reason.
"""
import copy
import glob
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploytools import (REPO, Checker, ajv_validate, crd_schema, need_ajv,  # noqa: E402
                         need_tool, yaml_file_objects)

t = Checker("crd_test")
CRD_DIR = os.path.join(REPO, "deploy", "crds")
CHART_CRD_DIR = os.path.join(REPO, "deploy", "helm", "kcoll", "crds")
EXAMPLES = os.path.join(REPO, "deploy", "examples")

OPENAPI_KEYS = {
    "type", "format", "title", "description", "default", "maximum", "exclusiveMaximum",
    "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
    "multipleOf", "enum", "maxProperties", "minProperties", "required", "items", "allOf",
    "oneOf", "anyOf", "not", "properties", "additionalProperties", "nullable", "example",
    "externalDocs", "uniqueItems",
}
KUBE_KEYS = {
    "x-kubernetes-preserve-unknown-fields", "x-kubernetes-int-or-string",
    "x-kubernetes-embedded-resource", "x-kubernetes-list-type", "x-kubernetes-list-map-keys",
    "x-kubernetes-map-type", "x-kubernetes-validations",
}
# Inside allOf/anyOf/oneOf/not only value validations are allowed (structural schema rule).
JUNCTOR_FORBIDDEN = {"type", "default", "description", "nullable", "additionalProperties",
                     "title"} | KUBE_KEYS
TYPES = {"object", "array", "string", "integer", "number", "boolean"}


def structural(node, path, in_junctor=False, root=False):
    """apiextensions.k8s.io/v1 structural-schema rules (the subset a hand-written CRD can break)."""
    if not isinstance(node, dict):
        t.check(False, "%s: schema is not an object" % path)
        return
    unknown = set(node) - OPENAPI_KEYS - KUBE_KEYS
    t.check(not unknown, "%s: unknown schema keywords %s" % (path, sorted(unknown)))
    t.check(node.get("uniqueItems") is not True, "%s: uniqueItems: true is forbidden" % path)
    if in_junctor:
        bad = set(node) & JUNCTOR_FORBIDDEN
        t.check(not bad, "%s: %s not allowed inside a junctor" % (path, sorted(bad)))
    else:
        free = node.get("x-kubernetes-int-or-string") or \
            node.get("x-kubernetes-preserve-unknown-fields")
        t.check(free or node.get("type") in TYPES, "%s: type must be set (%r)"
                % (path, node.get("type")))
    ap = node.get("additionalProperties")
    t.check(ap is not False, "%s: additionalProperties: false is forbidden" % path)
    t.check(not (ap is not None and "properties" in node),
            "%s: properties and additionalProperties are exclusive" % path)
    if node.get("type") == "object" and not in_junctor and path != "$.metadata" and \
            not node.get("x-kubernetes-preserve-unknown-fields"):
        t.check("properties" in node or isinstance(ap, dict),
                "%s: object without properties would prune everything" % path)
    if node.get("type") == "array" and not in_junctor:
        t.check(isinstance(node.get("items"), dict), "%s: array needs one items schema" % path)
    if node.get("x-kubernetes-list-type") == "map":
        keys = node.get("x-kubernetes-list-map-keys") or []
        items = node.get("items", {})
        t.check(keys and all(k in items.get("required", []) or
                             "default" in items.get("properties", {}).get(k, {}) for k in keys),
                "%s: list-map keys must be required or defaulted" % path)
    if "enum" in node and "type" in node:
        py = {"string": str, "integer": int, "boolean": bool}.get(node["type"])
        if py:
            t.check(all(isinstance(v, py) for v in node["enum"]),
                    "%s: enum values are %s" % (path, node["type"]))
    if "pattern" in node:
        import re
        try:
            re.compile(node["pattern"])
            t.check(True, "pattern compiles")
        except re.error as e:
            t.check(False, "%s: pattern does not compile: %s" % (path, e))
    if root:
        meta = node.get("properties", {}).get("metadata", {})
        t.check(set(meta) <= {"type"}, "$.metadata: only type: object at the root (%s)" % meta)
    for k, sub in node.get("properties", {}).items():
        if not in_junctor and not root and path.endswith(".metadata"):
            continue
        structural(sub, "%s.%s" % (path, k), in_junctor)
        if not in_junctor and path.count(".") >= 1 and k not in ("apiVersion", "kind"):
            t.check("description" in sub or path.startswith("$.status.conditions") or
                    ".conditions" in path or ".matchExpressions" in path or
                    k in ("matchLabels", "matchExpressions", "metadata", "type", "status",
                          "observedGeneration", "pod", "node", "rank", "time", "message",
                          "reason", "lastTransitionTime"),
                    "%s.%s: field has a description" % (path, k))
    if isinstance(ap, dict):
        structural(ap, path + ".*", in_junctor)
    if isinstance(node.get("items"), dict):
        structural(node["items"], path + "[]", in_junctor)
    for j in ("allOf", "anyOf", "oneOf"):
        for i, sub in enumerate(node.get(j, [])):
            structural(sub, "%s.%s[%d]" % (path, j, i), True)
    if "not" in node:
        structural(node["not"], path + ".not", True)


def schema_at(schema, json_path):
    node = schema
    for part in json_path.lstrip(".").split("."):
        node = node.get("properties", {}).get(part)
        if node is None:
            return None
    return node


def pruned_fields(schema, obj, path="$"):
    """Fields of obj that the schema does not declare: the API server would drop them silently."""
    out = []
    if isinstance(obj, dict) and schema.get("type") == "object":
        props = schema.get("properties")
        ap = schema.get("additionalProperties")
        for k, v in obj.items():
            if path == "$" and k == "metadata":
                continue
            if props is not None and k in props:
                out += pruned_fields(props[k], v, "%s.%s" % (path, k))
            elif isinstance(ap, dict):
                out += pruned_fields(ap, v, "%s.%s" % (path, k))
            elif not schema.get("x-kubernetes-preserve-unknown-fields"):
                out.append("%s.%s" % (path, k))
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(obj):
            out += pruned_fields(schema["items"], v, "%s[%d]" % (path, i))
    return out


def check_crd(crd, kind, scope, plural, short):
    name = "%s.kcoll.io" % plural
    spec = crd["spec"]
    t.check(crd.get("apiVersion") == "apiextensions.k8s.io/v1", kind + ": apiextensions v1")
    t.check(crd["metadata"]["name"] == name, kind + ": metadata.name is plural.group")
    t.check(spec["group"] == "kcoll.io" and spec["scope"] == scope, kind + ": group and scope")
    n = spec["names"]
    t.check(n["kind"] == kind and n["plural"] == plural and n["singular"] == kind.lower() and
            n["listKind"] == kind + "List", kind + ": names")
    t.check(short in n.get("shortNames", []), kind + ": short name " + short)
    t.check("kcoll" in n.get("categories", []), kind + ": category kcoll")
    vers = spec["versions"]
    t.check([v["name"] for v in vers] == ["v1alpha1"] and vers[0]["served"] and
            vers[0]["storage"], kind + ": v1alpha1 served and stored")
    t.check(vers[0].get("subresources", {}).get("status") == {}, kind + ": status subresource")
    schema = crd_schema(crd)
    structural(schema, "$", root=True)
    t.check("status" in schema.get("properties", {}), kind + ": schema has status")
    cols = vers[0].get("additionalPrinterColumns", [])
    t.check(len(cols) >= 3 and cols[-1]["jsonPath"] == ".metadata.creationTimestamp",
            kind + ": printer columns end with Age")
    for col in cols[:-1]:
        node = schema_at(schema, col["jsonPath"])
        t.check(node is not None, "%s: printer column %s path %s exists in the schema"
                % (kind, col["name"], col["jsonPath"]))
        if node is not None:
            t.check(node.get("type") == col["type"], "%s: printer column %s type %s matches"
                    % (kind, col["name"], col["type"]))
    return schema


def set_path(obj, dotted, value):
    parts = dotted.split(".")
    for p in parts[:-1]:
        obj = obj[int(p)] if isinstance(obj, list) else obj.setdefault(p, {})
    last = parts[-1]
    if value is DELETE:
        del obj[last]
    elif isinstance(obj, list):
        obj[int(last)] = value
    else:
        obj[last] = value


DELETE = object()


def main():
    kubectl = need_tool("kubectl", "reads the YAML")
    node = need_ajv()

    crds = {}
    for path in sorted(glob.glob(os.path.join(CRD_DIR, "*.yaml"))):
        objs = yaml_file_objects(kubectl, path)
        t.check(len(objs) == 1 and objs[0].get("kind") == "CustomResourceDefinition",
                "%s holds one CRD" % os.path.basename(path))
        crds[objs[0]["spec"]["names"]["kind"]] = objs[0]
    t.check(sorted(crds) == ["CollectiveTopology", "Communicator"], "two CRDs (%s)" % sorted(crds))
    if sorted(crds) != ["CollectiveTopology", "Communicator"]:
        t.done()

    # the chart ships the same files (helm installs crds/ before templates)
    for path in sorted(glob.glob(os.path.join(CRD_DIR, "*.yaml"))):
        twin = os.path.join(CHART_CRD_DIR, os.path.basename(path))
        same = os.path.isfile(twin) and open(twin, "rb").read() == open(path, "rb").read()
        t.check(same, "chart crds/%s is identical to deploy/crds/ (cp deploy/crds/*.yaml "
                "deploy/helm/kcoll/crds/)" % os.path.basename(path))

    schemas = {
        "CollectiveTopology": check_crd(crds["CollectiveTopology"], "CollectiveTopology",
                                        "Cluster", "collectivetopologies", "ctopo"),
        "Communicator": check_crd(crds["Communicator"], "Communicator", "Namespaced",
                                  "communicators", "comm"),
    }
    t.check("namespace" not in json.dumps(schemas["CollectiveTopology"]["properties"]["spec"]
                                          ["required"]), "topology spec requires no namespace")

    # --- docs/crds.md documents every field of both schemas
    with open(os.path.join(REPO, "docs", "crds.md")) as f:
        doc = f.read()

    def fields(node, prefix):
        for k, sub in node.get("properties", {}).items():
            yield prefix + k
            yield from fields(sub, prefix + k + ".")
            if isinstance(sub.get("items"), dict):
                yield from fields(sub["items"], prefix + k + "[].")

    for kind, schema in schemas.items():
        for top in ("spec", "status"):
            for f in fields(schema["properties"][top], ""):
                leaf = f.split(".")[-1].replace("[]", "")
                if ".matchExpressions" in f or ".matchLabels" in f:
                    continue
                t.check("`%s`" % f.replace("[]", "") in doc or "`%s[]`" % f.replace("[]", "")
                        in doc or "`%s`" % leaf in doc,
                        "docs/crds.md documents %s %s.%s" % (kind, top, f))

    # --- documented examples: accepted, nothing pruned
    examples = {}
    for path in sorted(glob.glob(os.path.join(EXAMPLES, "*.yaml"))):
        for obj in yaml_file_objects(kubectl, path):
            if obj.get("apiVersion") == "kcoll.io/v1alpha1":
                examples["%s/%s" % (os.path.basename(path), obj["metadata"]["name"])] = obj
    t.check(sum(o["kind"] == "CollectiveTopology" for o in examples.values()) >= 2 and
            sum(o["kind"] == "Communicator" for o in examples.values()) >= 1,
            "examples of both kinds exist (%s)" % sorted(examples))
    cases = []
    for ex_id, obj in examples.items():
        cases.append({"id": "example:" + ex_id, "schema": obj["kind"], "object": obj})
        pr = pruned_fields(schemas[obj["kind"]], obj)
        t.check(not pr, "example %s: every field is in the schema (would prune %s)" % (ex_id, pr))
        if obj["kind"] == "CollectiveTopology":
            t.check("namespace" not in obj["metadata"], "example %s: cluster scoped" % ex_id)

    # --- what the agent writes today (k8s-agent/rendezvous.c, k8s-agent/health.c)
    agent_written = {
        "apiVersion": "kcoll.io/v1alpha1", "kind": "Communicator",
        "metadata": {"name": "job-a", "namespace": "ns", "labels": {"kcoll.io/job": "job-a"}},
        "spec": {"jobName": "job-a", "jobKind": "Pod", "nranks": 2,
                 "rootEndpoint": "[fd00::1]:41000", "secretName": "kcoll-job-a",
                 "rootPod": "job-a-0", "rootNode": "n1", "topology": "default",
                 "transport": "Socket", "libraryVersion": "0.1.0",
                 "bootstrapTimeoutSeconds": 300, "timeoutSeconds": 1800},
        "status": {"phase": "Failed", "readyRanks": 1, "unhealthyCount": 1,
                   "conditions": [{"type": "Healthy", "status": "False", "reason": "False",
                                   "message": "rank 1 died",
                                   "lastTransitionTime": "2026-11-21T10:00:00Z"}],
                   "unhealthyMembers": [{"rank": 1, "pod": "job-a-1", "node": "n2",
                                         "message": "peer closed", "time":
                                         "2026-11-21T10:00:00Z"}],
                   "lastError": {"rank": 1, "pod": "job-a-1", "node": "n2",
                                 "message": "peer closed", "time": "2026-11-21T10:00:00Z"}}}
    cases.append({"id": "agent-written", "schema": "Communicator", "object": agent_written})
    t.check(not pruned_fields(schemas["Communicator"], agent_written),
            "agent-written Communicator: nothing pruned (%s)"
            % pruned_fields(schemas["Communicator"], agent_written))

    minimal = next(o for k, o in examples.items() if k.startswith("collectivetopology-minimal"))
    rdma = next(o for k, o in examples.items() if k.startswith("collectivetopology-rdma"))
    comm = next(o for o in examples.values() if o["kind"] == "Communicator")

    # --- invalid objects: (id, base, path, value, words expected in an error)
    bad = [
        ("transport enum", rdma, "spec.transport", "IB", ["transport", "allowed"]),
        ("network missing", rdma, "spec.network", DELETE, ["network"]),
        ("libraryVersion missing", rdma, "spec.libraryVersion", DELETE, ["libraryVersion"]),
        ("attachment and interface", rdma, "spec.network.interface", "eth0", ["oneOf"]),
        ("network empty", rdma, "spec.network", {}, ["oneOf"]),
        ("attachment pattern", rdma, "spec.network.attachment", "Train/RDMA_net",
         ["attachment", "pattern"]),
        ("attachment three parts", rdma, "spec.network.attachment", "a/b/c", ["pattern"]),
        ("interface too long", minimal, "spec.network", {"interface": "enp1s0f0np0-long1"},
         ["interface"]),
        ("interface with slash", minimal, "spec.network", {"interface": "eth/0"}, ["interface"]),
        ("libraryVersion pattern", rdma, "spec.libraryVersion", "latest",
         ["libraryVersion", "pattern"]),
        ("bootstrap timeout 0", rdma, "spec.bootstrapTimeoutSeconds", 0,
         ["bootstrapTimeoutSeconds", ">= 1"]),
        ("timeout too large", rdma, "spec.timeoutSeconds", 10 ** 7, ["timeoutSeconds"]),
        ("timeout string", rdma, "spec.timeoutSeconds", "60", ["timeoutSeconds", "integer"]),
        ("ibHCAs duplicate", rdma, "spec.ibHCAs", ["mlx5_0", "mlx5_0"], ["duplicate"]),
        ("ibHCA pattern", rdma, "spec.ibHCAs", ["mlx5_0:port"], ["ibHCAs"]),
        ("selector operator", rdma, "spec.podSelector.matchExpressions.0.operator", "Equals",
         ["operator"]),
        ("selector key missing", rdma, "spec.podSelector.matchExpressions.0.key", DELETE,
         ["key"]),
        ("topologyKey pattern", rdma, "spec.topologyKey", "bad key!", ["topologyKey"]),
        ("spec missing", rdma, "spec", DELETE, ["spec"]),
        ("nranks 0", comm, "spec.nranks", 0, ["nranks"]),
        ("jobName missing", comm, "spec.jobName", DELETE, ["jobName"]),
        ("phase enum", comm, "status.phase", "Running", ["phase", "allowed"]),
        ("condition type", comm, "status.conditions.0.type", "Happy", ["type"]),
        ("condition status", comm, "status.conditions.0.status", "yes", ["status"]),
        ("condition duplicate", comm, "status.conditions.1.type", "VersionsConsistent",
         ["duplicate"]),
        ("condition time format", comm, "status.conditions.0.lastTransitionTime", "yesterday",
         ["date-time"]),
        ("members over bound", comm, "status.unhealthyMembers",
         [{"rank": i, "pod": "p-%d" % i, "message": "down"} for i in range(33)],
         ["unhealthyMembers", "32"]),
        ("member duplicate rank", comm, "status.unhealthyMembers",
         [{"rank": 3, "message": "a"}, {"rank": 3, "message": "b"}], ["duplicate"]),
        ("member rank negative", comm, "status.unhealthyMembers.0.rank", -2, ["rank"]),
        ("lastError message missing", comm, "status.lastError.message", DELETE, ["message"]),
        ("readyRanks negative", comm, "status.readyRanks", -1, ["readyRanks"]),
        ("rootEndpoint pattern", comm, "spec.rootEndpoint", "no-port", ["rootEndpoint"]),
        ("secretName pattern", comm, "spec.secretName", "other-secret", ["secretName"]),
        ("message too long", comm, "status.lastError.message", "x" * 5000, ["message"]),
    ]
    for case_id, base, path, value, _ in bad:
        obj = copy.deepcopy(base)
        set_path(obj, path, value)
        cases.append({"id": "bad:" + case_id, "schema": obj["kind"], "object": obj})

    results = ajv_validate(node, schemas, cases)
    for k, v in results.items():
        if k.startswith("schema:"):
            t.check(False, "%s: %s" % (k, v["errors"]))
    for c in cases:
        r = results.get(c["id"], {})
        if c["id"].startswith("bad:"):
            continue
        t.check(r.get("valid") is True, "%s accepted (%s)" % (c["id"], r.get("errors")))
    for case_id, _, path, _, words in bad:
        r = results.get("bad:" + case_id, {})
        text = " ".join(r.get("errors", []))
        t.check(r.get("valid") is False, "invalid '%s' rejected" % case_id)
        t.check(all(w in text for w in words),
                "invalid '%s' rejected for the right reason %s (%s)" % (case_id, words, text))

    # --- defaults, as the API server applies them
    d = results.get("example:collectivetopology-minimal.yaml/default", {}).get("object", {})
    spec = d.get("spec", {})
    t.check(spec.get("transport") == "PreferIB", "default transport PreferIB (%s)" % spec)
    t.check(spec.get("bootstrapTimeoutSeconds") == 300, "default bootstrapTimeoutSeconds 300")
    t.check(spec.get("timeoutSeconds") == 1800, "default timeoutSeconds 1800")
    d = results.get("agent-written", {}).get("object", {})
    t.check(d.get("spec", {}).get("jobKind") == "Pod", "explicit values are not overwritten")
    t.done()


if __name__ == "__main__":
    main()
