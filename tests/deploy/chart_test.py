#!/usr/bin/env python3
"""Tests the Helm chart deploy/helm/kcoll with the real helm (v4) and kubectl binaries, offline.

helm lint --strict and helm template with default values and with every option switched; the
rendered manifests are parsed (kubectl, offline) and checked against what the values asked for;
the TLS material the chart generates is checked with openssl; the default CollectiveTopology is
validated against the CRD schema (ajv, when installed); invalid values are rejected by
values.schema.json; NOTES.txt is rendered by a client-side dry-run install.
"""
import base64
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploytools import (REPO, Checker, ajv_validate, crd_schema, find_tool,  # noqa: E402
                         need_tool, run, yaml_file_objects, yaml_to_objects)

t = Checker("chart_test")
CHART = os.path.join(REPO, "deploy", "helm", "kcoll")
NS = "kcoll-system"
APP_VERSION = "0.1.0"


def helm_env():
    env = dict(os.environ)
    # never touch a real cluster or the user's helm state
    tmp = tempfile.mkdtemp(prefix="kcoll-helm-")
    env.update(KUBECONFIG=os.path.join(tmp, "none"), HELM_CACHE_HOME=tmp,
               HELM_CONFIG_HOME=tmp, HELM_DATA_HOME=tmp)
    return env


ENV = None
HELM = KUBECTL = None


def template(sets=(), release="t", ns=NS, include_crds=True, expect_fail=False):
    cmd = [HELM, "template", release, CHART, "-n", ns]
    if include_crds:
        cmd.append("--include-crds")
    for s in sets:
        cmd += ["--set", s]
    res = run(cmd, check=False, env=ENV)
    if expect_fail:
        return res
    if res.returncode != 0:
        t.check(False, "helm template %s renders (%s)" % (list(sets), res.stderr.strip()[-800:]))
        return []
    return yaml_to_objects(KUBECTL, res.stdout)


def lint(sets=()):
    cmd = [HELM, "lint", "--strict", CHART]
    for s in sets:
        cmd += ["--set", s]
    res = run(cmd, check=False, env=ENV)
    t.check(res.returncode == 0, "helm lint --strict %s (%s)" % (list(sets), res.stdout[-600:]))


def by_kind(objs):
    out = {}
    for o in objs:
        out.setdefault(o["kind"], []).append(o)
    return out


def one(objs, kind, name=None):
    found = [o for o in objs if o["kind"] == kind and
             (name is None or o["metadata"]["name"] == name)]
    t.check(len(found) == 1, "exactly one %s %s (%d)" % (kind, name or "", len(found)))
    return found[0] if found else {}


def args_of(dep):
    c = dep["spec"]["template"]["spec"]["containers"][0]
    out = {}
    for a in c.get("args", [])[1:]:
        k, _, v = a.partition("=")
        out[k] = v
    return out


CLUSTER_SCOPED = {"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
                  "MutatingWebhookConfiguration", "CollectiveTopology"}


def common_checks(label, objs):
    for o in objs:
        meta = o.get("metadata", {})
        if o["kind"] in CLUSTER_SCOPED:
            t.check("namespace" not in meta, "%s: %s %s is cluster scoped" %
                    (label, o["kind"], meta.get("name")))
        elif o["kind"] != "RoleBinding":
            t.check(meta.get("namespace") == NS, "%s: %s %s in the release namespace" %
                    (label, o["kind"], meta.get("name")))
        if o["kind"] != "CustomResourceDefinition":
            t.check(meta.get("labels", {}).get("app.kubernetes.io/part-of") == "kcoll",
                    "%s: %s %s labelled part-of kcoll" % (label, o["kind"], meta.get("name")))


def openssl_ok(*args, stdin=None):
    res = subprocess.run(["openssl"] + list(args), input=stdin, capture_output=True)
    return res.returncode == 0, res.stdout.decode(errors="replace") + \
        res.stderr.decode(errors="replace")


def check_generated_tls(label, objs):
    secret = one(objs, "Secret", "t-kcoll-webhook-tls")
    mwc = one(objs, "MutatingWebhookConfiguration")
    data = secret.get("data", {})
    t.check(secret.get("type") == "kubernetes.io/tls", label + ": Secret type kubernetes.io/tls")
    t.check(set(data) == {"ca.crt", "tls.crt", "tls.key"}, label + ": Secret has ca/tls crt/key")
    for wh in mwc.get("webhooks", []):
        t.check(wh["clientConfig"].get("caBundle") == data.get("ca.crt"),
                label + ": %s caBundle is the Secret's CA" % wh["name"])
    t.check("cert-manager.io/inject-ca-from" not in mwc["metadata"].get("annotations", {}),
            label + ": no cert-manager annotation")
    if find_tool("openssl") is None:
        return
    tmp = tempfile.mkdtemp(prefix="kcoll-chart-tls-")
    paths = {}
    for k in data:
        paths[k] = os.path.join(tmp, k)
        with open(paths[k], "wb") as f:
            f.write(base64.b64decode(data[k]))
    ok, out = openssl_ok("verify", "-CAfile", paths["ca.crt"], paths["tls.crt"])
    t.check(ok, label + ": serving certificate verifies against the CA (%s)" % out.strip())
    ok, out = openssl_ok("x509", "-in", paths["tls.crt"], "-noout", "-ext", "subjectAltName")
    svc = "t-kcoll-webhook"
    for name in (svc, "%s.%s" % (svc, NS), "%s.%s.svc" % (svc, NS),
                 "%s.%s.svc.cluster.local" % (svc, NS)):
        sans = [x.strip() for x in out.split("\n", 1)[-1].split(",")]
        t.check("DNS:" + name in sans, label + ": SAN %s (%s)" % (name, sans))
    _, pub_crt = openssl_ok("x509", "-in", paths["tls.crt"], "-noout", "-pubkey")
    _, pub_key = openssl_ok("pkey", "-in", paths["tls.key"], "-pubout")
    t.check(pub_crt.strip() == pub_key.strip() and "PUBLIC KEY" in pub_crt,
            label + ": key belongs to the certificate")


AGENT_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "watch"]},
    {"apiGroups": ["kcoll.io"], "resources": ["communicators"],
     "verbs": ["create", "watch", "patch"]},
    {"apiGroups": ["kcoll.io"], "resources": ["communicators/status"], "verbs": ["patch"]},
    {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create", "get"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "patch"]},
]
TOPOLOGY_RULE = {"apiGroups": ["kcoll.io"], "resources": ["collectivetopologies"],
                 "verbs": ["get", "list", "watch"]}
NODE_RULE = {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}
WEBHOOK_RULES = [
    {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get"]},
    {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get"]},
    {"apiGroups": ["kcoll.io"], "resources": ["collectivetopologies"], "verbs": ["list"]},
]


def topology_rules(objs):
    return [r for r in objs if r["kind"] == "ClusterRole" and
            r["metadata"]["name"] == "t-kcoll-agent-topologies"][0].get("rules")


def check_defaults(objs, schemas, node):
    label = "defaults"
    kinds = by_kind(objs)
    common_checks(label, objs)
    t.check(sorted(o["metadata"]["name"] for o in kinds.get("CustomResourceDefinition", [])) ==
            ["collectivetopologies.kcoll.io", "communicators.kcoll.io"],
            label + ": --include-crds renders both CRDs")
    t.check("RoleBinding" not in kinds and
            [b["metadata"]["name"] for b in kinds.get("ClusterRoleBinding", [])] ==
            ["t-kcoll-webhook"], label + ": no agent bindings without agent namespaces; the "
            "webhook's ClusterRoleBinding only")
    t.check("Certificate" not in kinds and "Issuer" not in kinds,
            label + ": no cert-manager objects")
    dep = one(objs, "Deployment", "t-kcoll-webhook")
    pod = dep.get("spec", {}).get("template", {}).get("spec", {})
    c = pod.get("containers", [{}])[0]
    a = args_of(dep)
    image = "ghcr.io/kcoll/kcoll-agent:" + APP_VERSION
    t.check(c.get("image") == image, label + ": webhook image pinned to appVersion")
    t.check(c.get("command") == ["coll-agent"] and c.get("args", [None])[0] == "webhook",
            label + ": runs coll-agent webhook")
    t.check(a.get("--agent-image") == image and a.get("--lib-version") == APP_VERSION,
            label + ": sidecar image and library version passed (%s)" % a)
    t.check(a.get("--listen") == ":8443" and a.get("--cert") == "/etc/kcoll/webhook/tls.crt" and
            a.get("--key") == "/etc/kcoll/webhook/tls.key", label + ": listen/cert/key flags")
    t.check(a.get("--sidecar-cpu-request") == "50m" and a.get("--sidecar-memory-request") ==
            "64Mi" and a.get("--sidecar-cpu-limit") == "" and
            a.get("--sidecar-memory-limit") == "256Mi", label + ": sidecar resources (%s)" % a)
    t.check(a.get("--max-body") == "4194304", label + ": max body")
    t.check(a.get("--api-timeout-ms") == "5000",
            label + ": API reads get half the webhook timeout (%s)" % a.get("--api-timeout-ms"))
    t.check(a.get("--agent-service-account") == "kcoll-agent",
            label + ": the webhook runs injected pods as the agent's ServiceAccount (%s)" % a)
    t.check(set(a) == {"--listen", "--cert", "--key", "--agent-image", "--lib-version",
                       "--image-pull-policy", "--sidecar-cpu-request", "--sidecar-memory-request",
                       "--sidecar-cpu-limit", "--sidecar-memory-limit", "--max-body",
                       "--api-timeout-ms", "--agent-service-account"},
            label + ": only flags coll-agent webhook knows (%s)" % sorted(a))
    t.check(dep["spec"]["replicas"] == 2, label + ": 2 webhook replicas")
    for probe in ("readinessProbe", "livenessProbe"):
        hg = c.get(probe, {}).get("httpGet", {})
        t.check(hg.get("scheme") == "HTTPS" and hg.get("path") in ("/healthz", "/readyz"),
                label + ": %s over HTTPS" % probe)
    sc = c.get("securityContext", {})
    t.check(sc.get("readOnlyRootFilesystem") is True and
            sc.get("allowPrivilegeEscalation") is False and
            sc.get("capabilities") == {"drop": ["ALL"]}, label + ": container securityContext")
    t.check(pod.get("securityContext", {}).get("runAsNonRoot") is True,
            label + ": webhook runs as non-root")
    t.check(pod.get("automountServiceAccountToken") is True,
            label + ": webhook pod mounts its API token (Job/JobSet/Namespace reads)")
    sa = one(objs, "ServiceAccount", pod.get("serviceAccountName"))
    t.check(sa.get("automountServiceAccountToken") is True,
            label + ": webhook ServiceAccount with token")
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    t.check(vols.get("tls", {}).get("secret", {}).get("secretName") == "t-kcoll-webhook-tls",
            label + ": TLS Secret mounted")
    sa_bindings = [b for b in kinds.get("RoleBinding", []) + kinds.get("ClusterRoleBinding", [])
                   if any(x.get("name") == sa.get("metadata", {}).get("name")
                          for x in b.get("subjects", []))]
    t.check([(b["kind"], b["roleRef"]["name"], b["subjects"]) for b in sa_bindings] ==
            [("ClusterRoleBinding", "t-kcoll-webhook",
              [{"kind": "ServiceAccount", "name": "t-kcoll-webhook", "namespace": NS}])],
            label + ": webhook ServiceAccount bound to the webhook ClusterRole only (%s)"
            % sa_bindings)

    svc = one(objs, "Service", "t-kcoll-webhook")
    port = svc.get("spec", {}).get("ports", [{}])[0]
    t.check(port.get("port") == 443 and port.get("targetPort") == "https",
            label + ": Service 443 -> https")
    labels = dep["spec"]["template"]["metadata"]["labels"]
    t.check(all(labels.get(k) == v for k, v in svc["spec"]["selector"].items()),
            label + ": Service selects the webhook pods")
    t.check(dep["spec"]["selector"]["matchLabels"] == svc["spec"]["selector"],
            label + ": Deployment selector = Service selector")
    pdb = one(objs, "PodDisruptionBudget")
    t.check(pdb.get("spec", {}).get("minAvailable") == 1, label + ": PDB minAvailable 1")

    mwc = one(objs, "MutatingWebhookConfiguration")
    whs = {w["name"]: w for w in mwc.get("webhooks", [])}
    t.check(sorted(whs) == ["namespace.inject.kcoll.io", "pod.inject.kcoll.io"],
            label + ": two webhook entries (%s)" % sorted(whs))
    for name, path, ns_op, obj_op, obj_vals in (
            ("namespace.inject.kcoll.io", "/mutate/namespace", "In", "NotIn", ["false"]),
            ("pod.inject.kcoll.io", "/mutate", "NotIn", "In", ["true"])):
        w = whs.get(name, {})
        cc = w.get("clientConfig", {}).get("service", {})
        t.check(cc == {"name": "t-kcoll-webhook", "namespace": NS, "path": path, "port": 443},
                label + ": %s calls %s" % (name, path))
        t.check(w.get("admissionReviewVersions") == ["v1"] and w.get("sideEffects") == "None",
                label + ": %s speaks v1, no side effects" % name)
        t.check(w.get("failurePolicy") == "Fail" and w.get("timeoutSeconds") == 10,
                label + ": %s failurePolicy Fail, timeout 10" % name)
        t.check(w.get("rules") == [{"apiGroups": [""], "apiVersions": ["v1"],
                                    "operations": ["CREATE"], "resources": ["pods"],
                                    "scope": "Namespaced"}], label + ": %s: pod CREATE only" % name)
        exprs = w.get("namespaceSelector", {}).get("matchExpressions", [])
        t.check({"key": "kcoll.io/inject", "operator": ns_op, "values": ["true"]} in exprs,
                label + ": %s namespaceSelector %s true" % (name, ns_op))
        excl = [e for e in exprs if e["key"] == "kubernetes.io/metadata.name"]
        t.check(excl and excl[0]["operator"] == "NotIn" and NS in excl[0]["values"] and
                "kube-system" in excl[0]["values"],
                label + ": %s excludes the release namespace and kube-system" % name)
        t.check(w.get("objectSelector", {}).get("matchExpressions") ==
                [{"key": "kcoll.io/inject", "operator": obj_op, "values": obj_vals}],
                label + ": %s objectSelector" % name)
    check_generated_tls(label, objs)

    # RBAC: exactly these rules, nothing more
    roles = {r["metadata"]["name"]: r for r in kinds.get("ClusterRole", [])}
    agent = roles.get("t-kcoll-agent", {}).get("rules")
    # (issue #6: read its pod, read CollectiveTopologies, create/watch/patch Communicators and
    # create Events, nothing more)
    t.check(agent == AGENT_RULES,
            label + ": agent ClusterRole rules are exactly %s (%s)" % (AGENT_RULES, agent))
    topo = roles.get("t-kcoll-agent-topologies", {}).get("rules")
    t.check(topo == [TOPOLOGY_RULE],
            label + ": topology ClusterRole rules exact, no Node read (%s)" % topo)
    hook = roles.get("t-kcoll-webhook", {}).get("rules")
    t.check(hook == WEBHOOK_RULES, label + ": webhook ClusterRole rules exact (%s)" % hook)
    t.check(sorted(roles) == ["t-kcoll-agent", "t-kcoll-agent-topologies", "t-kcoll-webhook"],
            label + ": three ClusterRoles (%s)" % sorted(roles))
    for r in roles.values():
        for rule in r.get("rules", []):
            # the agent's one Secret rule: create the job's, get it (no list, watch, patch,
            # update or delete of Secrets anywhere)
            agent_secret = (r["metadata"]["name"] == "t-kcoll-agent" and
                            rule == {"apiGroups": [""], "resources": ["secrets"],
                                     "verbs": ["create", "get"]})
            t.check("*" not in rule.get("verbs", []) and "*" not in rule.get("resources", []) and
                    ("secrets" not in rule.get("resources", []) or agent_secret) and
                    "update" not in rule.get("verbs", []),
                    label + ": no wildcard, secret or update rule in %s" % r["metadata"]["name"])

    # default topology
    topo_obj = one(objs, "CollectiveTopology", "default")
    spec = topo_obj.get("spec", {})
    t.check(spec.get("libraryVersion") == APP_VERSION, label + ": topology pins appVersion")
    t.check(spec.get("network") == {"interface": "eth0"} and spec.get("transport") == "PreferIB",
            label + ": topology network eth0, PreferIB")
    t.check(spec.get("podSelector") == {"matchExpressions": [
        {"key": "kcoll.io/topology", "operator": "DoesNotExist"}]},
        label + ": default topology leaves pods that name a topology alone")
    if node and schemas:
        res = ajv_validate(node, schemas, [{"id": "default-topology",
                                            "schema": "CollectiveTopology", "object": topo_obj}])
        r = res.get("default-topology", {})
        t.check(r.get("valid") is True, label + ": default topology valid per CRD schema (%s)"
                % r.get("errors"))


def webhook_with_chart(binary, objs):
    """Runs the real webhook binary with the arguments and the TLS Secret the chart rendered, and
    calls it the way the API server does: trusting caBundle, by the Service's DNS name."""
    label = "chart+binary"
    dep = one(objs, "Deployment")
    secret = one(objs, "Secret")
    mwc = one(objs, "MutatingWebhookConfiguration")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    tmp = tempfile.mkdtemp(prefix="kcoll-chart-webhook-")
    for k in ("tls.crt", "tls.key"):
        with open(os.path.join(tmp, k), "wb") as f:
            f.write(base64.b64decode(secret["data"][k]))
    ca = os.path.join(tmp, "ca.crt")
    with open(ca, "wb") as f:
        f.write(base64.b64decode(mwc["webhooks"][0]["clientConfig"]["caBundle"]))
    args = []
    for a in c["args"][1:]:
        if a.startswith("--cert="):
            a = "--cert=" + os.path.join(tmp, "tls.crt")
        elif a.startswith("--key="):
            a = "--key=" + os.path.join(tmp, "tls.key")
        elif a.startswith("--listen="):
            a = "--listen=127.0.0.1:0"
        args.append(a)
    log = open(os.path.join(tmp, "log"), "w+")
    proc = subprocess.Popen([binary] + args, stdout=log, stderr=subprocess.STDOUT)
    port = None
    for _ in range(200):
        with open(log.name) as f:
            for line in f:
                if "AGENT-WEBHOOK-LISTEN" in line:
                    port = int(line.split("port=")[1].split()[0])
        if port or proc.poll() is not None:
            break
        time.sleep(0.05)
    if not t.check(port is not None, label + ": webhook starts with the chart's arguments and "
                   "generated certificate (%s)" % open(log.name).read()[-500:]):
        proc.kill()
        return
    try:
        svc = mwc["webhooks"][0]["clientConfig"]["service"]
        ctx = ssl.create_default_context(cafile=ca)
        # connect to 127.0.0.1 but verify the name the API server uses
        host = "%s.%s.svc" % (svc["name"], svc["namespace"])
        conn = http.client.HTTPSConnection(host, port, context=ctx, timeout=20)
        conn.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                                    server_hostname=host)
        with open(os.path.join(REPO, "tests", "fixtures", "admission", "pod-minimal.json"),
                  "rb") as f:
            body = f.read()
        conn.request("POST", svc["path"], body=body,
                     headers={"Content-Type": "application/json"})
        r = conn.getresponse()
        resp = json.loads(r.read())
        patch = json.loads(base64.b64decode(resp["response"]["patch"]))
        side = [op for op in patch if op["path"] == "/spec/initContainers"][0]["value"][0]
        t.check(side["image"] == c["image"], label + ": sidecar image is the chart's image")
        t.check(side["resources"] == {"requests": {"cpu": "50m", "memory": "64Mi"},
                                      "limits": {"memory": "256Mi"}},
                label + ": sidecar resources from chart values (%s)" % side["resources"])
        t.check({"name": "COLL_LIB_VERSION", "value": APP_VERSION} in side["env"],
                label + ": library version from the chart")
        t.check(r.status == 200 and resp["response"]["allowed"] is True,
                label + ": review over TLS verified by caBundle and the Service DNS name")
    except (OSError, ssl.SSLError, ValueError, KeyError, IndexError) as e:
        t.check(False, label + ": review through the chart's TLS setup failed: %r" % e)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()


def main():
    global ENV, HELM, KUBECTL
    HELM = need_tool("helm", "renders and lints the chart")
    KUBECTL = need_tool("kubectl", "parses the rendered YAML")
    ENV = helm_env()
    ver = run([HELM, "version", "--short"], env=ENV).stdout.strip()
    print("helm " + ver)

    # CRD schemas for validating rendered custom resources (needs ajv; optional here)
    node, schemas = None, None
    if find_tool("node") and os.path.isfile(os.path.join(REPO, ".deps", "node_modules", "ajv",
                                                         "package.json")):
        node = find_tool("node")
        schemas = {}
        for f in os.listdir(os.path.join(CHART, "crds")):
            crd = yaml_file_objects(KUBECTL, os.path.join(CHART, "crds", f))[0]
            schemas[crd["spec"]["names"]["kind"]] = crd_schema(crd)
    else:
        print("note: ajv not installed (tests/deploy/setup-node.sh); rendered topologies are "
              "not schema-checked here (crd_test does that)")

    chart_meta = yaml_file_objects(KUBECTL, os.path.join(CHART, "Chart.yaml")) \
        if False else None  # Chart.yaml has no kind; read the fields with helm show
    del chart_meta
    show = run([HELM, "show", "chart", CHART], env=ENV).stdout
    t.check("appVersion: %s" % APP_VERSION in show and "apiVersion: v2" in show,
            "Chart.yaml: apiVersion v2, appVersion %s" % APP_VERSION)
    t.check("kubeVersion: '>=1.29.0-0'" in show or 'kubeVersion: ">=1.29.0-0"' in show or
            "kubeVersion: '>=1.29.0-0'" in show.replace('"', "'"),
            "Chart.yaml: kubeVersion >= 1.29 (native sidecars)")

    # --- lint with defaults and with options switched
    lint()
    option_sets = {
        "cert-manager": ["webhook.tls.certManager.enabled=true"],
        "cert-manager-clusterissuer": ["webhook.tls.certManager.enabled=true",
                                       "webhook.tls.certManager.issuerRef.name=corp-ca",
                                       "webhook.tls.certManager.issuerRef.kind=ClusterIssuer"],
        "no-topology": ["defaultTopology.enabled=false"],
        "custom-image": ["image.repository=registry.example.com/ml/kcoll-agent",
                         "image.tag=0.1.0-cuda12.4", "image.pullPolicy=Always"],
        "digest": ["image.digest=sha256:" + "ab" * 32],
        "new-version": ["image.tag=0.2.0", "libraryVersion=0.2.0"],
        "rbac": ["rbac.agentNamespaces={train,eval}",
                 "rbac.agentServiceAccounts[0].namespace=research",
                 "rbac.agentServiceAccounts[0].name=trainer",
                 "rbac.agentServiceAccounts[1].namespace=train",
                 "rbac.agentServiceAccounts[1].name=runner"],
        "no-rbac": ["rbac.create=false", "rbac.agentNamespaces={train}"],
        "webhook-options": ["webhook.failurePolicy=Ignore", "webhook.replicaCount=1",
                            "webhook.timeoutSeconds=5", "webhook.reinvocationPolicy=IfNeeded",
                            "webhook.excludeNamespaces={monitoring}", "webhook.debug=true",
                            "webhook.port=9443", "webhook.maxBodyBytes=1048576",
                            "sidecar.resources.limits.cpu=1",
                            "sidecar.resources.requests.memory=128Mi"],
        "rdma-topology": ["defaultTopology.network.interface=",
                          "defaultTopology.network.attachment=train/rdma-net",
                          "defaultTopology.transport=RequireIB",
                          "defaultTopology.ibHCAs={mlx5_0,mlx5_1}",
                          "defaultTopology.topologyKey=network.example.com/rack",
                          "defaultTopology.bootstrapTimeoutSeconds=600",
                          "defaultTopology.namespaceSelector.matchLabels.team=ml",
                          "defaultTopology.name=rdma"],
    }
    for name, sets in option_sets.items():
        lint(sets)

    # --- defaults
    objs = template()
    check_defaults(objs, schemas, node)
    if len(sys.argv) > 1 and os.access(sys.argv[1], os.X_OK):
        webhook_with_chart(sys.argv[1], objs)
    else:
        print("note: no webhook binary given; chart+binary check not run")
    rendered_without_crds = template(include_crds=False)
    t.check(not any(o["kind"] == "CustomResourceDefinition" for o in rendered_without_crds),
            "CRDs come from crds/ (only with --include-crds), not from templates")

    # --- cert-manager
    objs = template(option_sets["cert-manager"])
    kinds = by_kind(objs)
    common_checks("cert-manager", objs)
    t.check("Secret" not in kinds, "cert-manager: chart makes no Secret")
    cert = one(objs, "Certificate", "t-kcoll-webhook")
    iss = one(objs, "Issuer", "t-kcoll-selfsigned")
    t.check(iss.get("spec") == {"selfSigned": {}}, "cert-manager: self-signed Issuer")
    cs = cert.get("spec", {})
    t.check(cs.get("secretName") == "t-kcoll-webhook-tls", "cert-manager: Certificate -> Secret")
    t.check(cs.get("issuerRef") == {"name": "t-kcoll-selfsigned", "kind": "Issuer",
                                    "group": "cert-manager.io"}, "cert-manager: issuerRef")
    t.check("t-kcoll-webhook.%s.svc" % NS in cs.get("dnsNames", []),
            "cert-manager: service DNS name in the certificate")
    mwc = one(objs, "MutatingWebhookConfiguration")
    t.check(mwc["metadata"].get("annotations", {}).get("cert-manager.io/inject-ca-from") ==
            "%s/t-kcoll-webhook" % NS, "cert-manager: inject-ca-from annotation")
    t.check(all("caBundle" not in w["clientConfig"] for w in mwc["webhooks"]),
            "cert-manager: no caBundle from the chart")
    dep = one(objs, "Deployment")
    vols = {v["name"]: v for v in dep["spec"]["template"]["spec"]["volumes"]}
    t.check(vols["tls"]["secret"]["secretName"] == cs.get("secretName"),
            "cert-manager: webhook mounts the Certificate's Secret")
    objs = template(option_sets["cert-manager-clusterissuer"])
    t.check(not any(o["kind"] == "Issuer" for o in objs), "ClusterIssuer: no Issuer made")
    cert = one(objs, "Certificate")
    t.check(cert.get("spec", {}).get("issuerRef") == {"name": "corp-ca", "kind": "ClusterIssuer",
                                                      "group": "cert-manager.io"},
            "ClusterIssuer: issuerRef")

    # --- default topology off
    objs = template(option_sets["no-topology"])
    t.check(not any(o["kind"] == "CollectiveTopology" for o in objs),
            "defaultTopology.enabled=false: no CollectiveTopology")

    # --- images and versions
    objs = template(option_sets["custom-image"])
    dep = one(objs, "Deployment")
    c = dep["spec"]["template"]["spec"]["containers"][0]
    img = "registry.example.com/ml/kcoll-agent:0.1.0-cuda12.4"
    t.check(c["image"] == img and args_of(dep).get("--agent-image") == img and
            c["imagePullPolicy"] == "Always" and args_of(dep).get("--image-pull-policy") ==
            "Always", "custom image: webhook and sidecar image, pull policy")
    objs = template(option_sets["digest"])
    img = "ghcr.io/kcoll/kcoll-agent@sha256:" + "ab" * 32
    t.check(args_of(one(objs, "Deployment")).get("--agent-image") == img,
            "digest: image pinned by digest")
    objs = template(option_sets["new-version"])
    t.check(args_of(one(objs, "Deployment")).get("--lib-version") == "0.2.0" and
            one(objs, "CollectiveTopology")["spec"]["libraryVersion"] == "0.2.0",
            "libraryVersion 0.2.0 pinned in webhook and topology")
    res = template(["image.tag=0.2.0"], expect_fail=True)
    t.check(res.returncode != 0 and "libraryVersion" in res.stderr,
            "image tag 0.2.0 with library 0.1.0 refused (%s)" % res.stderr.strip()[-300:])

    # --- RBAC bindings
    objs = template(option_sets["rbac"])
    rbs = {o["metadata"]["namespace"]: o for o in objs if o["kind"] == "RoleBinding"}
    t.check(sorted(rbs) == ["eval", "research", "train"],
            "rbac: RoleBindings in train, eval, research (%s)" % sorted(rbs))
    # issue 21 finding 7: the agent role (which reads the jobs' Secrets) is bound to the agent's
    # own ServiceAccount, never to every ServiceAccount of a namespace
    t.check(rbs.get("train", {}).get("subjects") ==
            [{"kind": "ServiceAccount", "name": "kcoll-agent", "namespace": "train"},
             {"kind": "ServiceAccount", "name": "runner", "namespace": "train"}],
            "rbac: train binds the agent's ServiceAccount and runner (%s)"
            % rbs.get("train", {}).get("subjects"))
    t.check(rbs.get("eval", {}).get("subjects") ==
            [{"kind": "ServiceAccount", "name": "kcoll-agent", "namespace": "eval"}],
            "rbac: eval binds the agent's ServiceAccount only")
    groups = [s for o in objs if o["kind"] in ("RoleBinding", "ClusterRoleBinding")
              for s in o.get("subjects", []) if s.get("kind") != "ServiceAccount"]
    t.check(not groups, "rbac: no Group or User subject in any binding (%s)" % groups)
    sas = {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in objs
           if o["kind"] == "ServiceAccount" and o["metadata"]["name"] == "kcoll-agent"}
    t.check(sorted(sas) == [("eval", "kcoll-agent"), ("train", "kcoll-agent")] and
            all(o.get("automountServiceAccountToken") is False for o in sas.values()),
            "rbac: the agent's ServiceAccount in train and eval, no automounted token (%s)"
            % sorted(sas))
    objs2 = template(option_sets["rbac"] + ["rbac.agentServiceAccountName=gpu-agent"])
    rb2 = [o for o in objs2 if o["kind"] == "RoleBinding" and o["metadata"]["namespace"] == "eval"]
    t.check(rb2 and rb2[0]["subjects"] == [{"kind": "ServiceAccount", "name": "gpu-agent",
                                           "namespace": "eval"}] and
            args_of(one(objs2, "Deployment")).get("--agent-service-account") == "gpu-agent",
            "rbac: agentServiceAccountName names the account, its binding and the webhook flag")
    t.check(rbs.get("research", {}).get("subjects") ==
            [{"kind": "ServiceAccount", "name": "trainer", "namespace": "research"}],
            "rbac: research binds only trainer")
    t.check(all(rb["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": "t-kcoll-agent"} for rb in rbs.values()),
            "rbac: RoleBindings grant the agent role")
    crb = one(objs, "ClusterRoleBinding", "t-kcoll-agent-topologies")
    t.check(len(crb.get("subjects", [])) == 4 and
            crb.get("roleRef", {}).get("name") == "t-kcoll-agent-topologies",
            "rbac: topology read bound cluster-wide for every agent subject")
    objs = template(option_sets["no-rbac"])
    t.check(not any(o["kind"] in ("ClusterRole", "ClusterRoleBinding", "RoleBinding")
                    for o in objs), "rbac.create=false: no RBAC objects")

    # --- webhook options
    objs = template(option_sets["webhook-options"])
    kinds = by_kind(objs)
    t.check("PodDisruptionBudget" not in kinds, "one replica: no PDB")
    mwc = one(objs, "MutatingWebhookConfiguration")
    for w in mwc.get("webhooks", []):
        t.check(w["failurePolicy"] == "Ignore" and w["timeoutSeconds"] == 5 and
                w["reinvocationPolicy"] == "IfNeeded", "options: %s policy/timeout" % w["name"])
        excl = [e for e in w["namespaceSelector"]["matchExpressions"]
                if e["key"] == "kubernetes.io/metadata.name"][0]["values"]
        t.check(excl == [NS, "monitoring"], "options: excluded namespaces %s" % excl)
    dep = one(objs, "Deployment")
    a = args_of(dep)
    c = dep["spec"]["template"]["spec"]["containers"][0]
    t.check(a.get("--sidecar-cpu-limit") == "1" and a.get("--sidecar-memory-request") == "128Mi",
            "options: sidecar resources passed (%s)" % a)
    t.check(a.get("--listen") == ":9443" and c["ports"][0]["containerPort"] == 9443,
            "options: webhook port")
    t.check(a.get("--max-body") == "1048576", "options: max body")
    t.check(a.get("--api-timeout-ms") == "2500", "options: API read budget follows timeoutSeconds")
    t.check({"name": "COLL_DEBUG", "value": "DEBUG"} in c.get("env", []), "options: debug env")

    objs = template(option_sets["rdma-topology"])
    topo = one(objs, "CollectiveTopology", "rdma")
    spec = topo.get("spec", {})
    t.check(spec.get("network") == {"attachment": "train/rdma-net"} and
            spec.get("transport") == "RequireIB" and spec.get("ibHCAs") == ["mlx5_0", "mlx5_1"] and
            spec.get("topologyKey") == "network.example.com/rack" and
            spec.get("bootstrapTimeoutSeconds") == 600 and
            spec.get("namespaceSelector") == {"matchLabels": {"team": "ml"}},
            "rdma topology rendered as asked (%s)" % spec)
    if node and schemas:
        r = ajv_validate(node, schemas, [{"id": "x", "schema": "CollectiveTopology",
                                          "object": topo}])["x"]
        t.check(r["valid"], "rdma topology valid per CRD schema (%s)" % r["errors"])

    # --- the one exception: get on Nodes, only where a topology names topologyKey
    t.check(topology_rules(objs) == [TOPOLOGY_RULE, NODE_RULE],
            "readNodes: default topology with topologyKey grants nodes get (%s)"
            % topology_rules(objs))
    t.check(NODE_RULE not in one(objs, "ClusterRole", "t-kcoll-agent")["rules"],
            "readNodes: never in the namespaced agent role")
    objs = template(option_sets["rdma-topology"] + ["rbac.readNodes=false"])
    t.check(topology_rules(objs) == [TOPOLOGY_RULE], "readNodes=false: no Node read")
    objs = template(["rbac.readNodes=true"])
    t.check(topology_rules(objs) == [TOPOLOGY_RULE, NODE_RULE],
            "readNodes=true without topologyKey: Node read granted")
    objs = template(option_sets["rdma-topology"] + ["defaultTopology.enabled=false"])
    t.check(topology_rules(objs) == [TOPOLOGY_RULE],
            "readNodes unset, default topology off: no Node read")

    # --- release named like the chart
    objs = template(release="kcoll")
    t.check(any(o["kind"] == "Deployment" and o["metadata"]["name"] == "kcoll-webhook"
                for o in objs), "release 'kcoll': objects named kcoll-*")

    # --- invalid values are refused by values.schema.json (or by the chart)
    invalid = [
        (["defaultTopology.transport=Bogus"], "transport"),
        (["webhook.failurePolicy=Maybe"], "failurePolicy"),
        (["webhook.replicaCount=0"], "replicaCount"),
        (["webhook.port=80"], "port"),
        (["image.repository="], "repository"),
        (["image.pullPolicy=Sometimes"], "pullPolicy"),
        (["image.digest=md5:abc"], "digest"),
        (["libraryVersion=latest"], "libraryVersion"),
        (["defaultTopology.network.attachment=Bad Name"], "attachment"),
        (["defaultTopology.network.interface=an-interface-name-too-long"], "interface"),
        (["defaultTopology.bootstrapTimeoutSeconds=0"], "bootstrapTimeoutSeconds"),
        (["defaultTopology.ibHCAs={mlx5_0,mlx5_0}"], "ibHCAs"),
        (["sidecar.resources.requests.cpu=lots"], "cpu"),
        (["rbac.agentNamespaces={Not_A_Namespace}"], "agentNamespaces"),
        (["rbac.agentServiceAccounts[0].name=x"], "namespace"),
        (["rbac.readNodes=sometimes"], "readNodes"),
        (["webhok.replicaCount=2"], "webhok"),
        (["webhook.tls.certManager.issuerRef.kind=Vault"], "kind"),
        (["defaultTopology.network.attachment=train/rdma"], "not both"),
        (["defaultTopology.network.interface="], "attachment"),
    ]
    for sets, word in invalid:
        res = template(sets, expect_fail=True)
        t.check(res.returncode != 0, "invalid %s refused" % sets)
        t.check(word in res.stderr, "invalid %s: error names %s (%s)" %
                (sets, word, res.stderr.strip()[-300:]))

    # --- NOTES.txt (client-side dry run: no cluster)
    res = run([HELM, "install", "t", CHART, "-n", NS, "--dry-run=client"], env=ENV, check=False)
    t.check(res.returncode == 0, "helm install --dry-run=client works offline (%s)"
            % res.stderr[-300:])
    notes = res.stdout.split("NOTES:", 1)[-1]
    t.check("kubectl label namespace NAMESPACE kcoll.io/inject=true" in notes,
            "NOTES: how to opt a namespace in")
    t.check("kubectl describe communicator JOB" in notes, "NOTES: how to inspect a job")
    t.check("WARNING: no namespace has the agent role" in notes,
            "NOTES: warns when no namespace has the agent role")
    res = run([HELM, "install", "t", CHART, "-n", NS, "--dry-run=client", "--set",
               "rbac.agentNamespaces={train}"], env=ENV, check=False)
    t.check("agent role is granted in: train" in res.stdout, "NOTES: lists agent namespaces")
    t.done()


if __name__ == "__main__":
    main()
