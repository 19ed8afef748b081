#!/usr/bin/env python3
"""End-to-end test of `coll-agent webhook` (here the coll-webhook driver) over real HTTPS.

Starts the server with a throwaway CA and serving certificate made by openssl, POSTs the
AdmissionReview fixtures of tests/fixtures/admission/, applies every JSONPatch it gets back with an
RFC 6902 applier and checks the patched pod; then checks idempotence, malformed and oversized
bodies, concurrency, and that a rotated certificate is served to new connections.

usage: webhook_test.py PATH/TO/coll-webhook
"""
import base64
import concurrent.futures
import copy
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
from deploytools import REPO, Checker, skip  # noqa: E402
from jsonpatch import apply_patch  # noqa: E402

FIXTURES = os.path.join(REPO, "tests", "fixtures", "admission")
IMAGE = "registry.example.com/kcoll/kcoll-agent:0.1.0"
LIBV = "0.1.0"
LIB = "/var/run/kcoll/lib"
SOCK = "/var/run/kcoll/agent.sock"
MAX_BODY = 4 << 20
# annotations the webhook owns (k8s-agent/annotations.h)
FACT_KEYS = {"kcoll.io/world-size", "kcoll.io/world-size-error", "kcoll.io/job-uid",
             "kcoll.io/job-uid-error", "kcoll.io/namespace-labels",
             "kcoll.io/namespace-labels-error"}

t = Checker("webhook_test")


def openssl(*args):
    subprocess.run(["openssl"] + list(args), check=True, capture_output=True)


def make_pki(d, tag):
    """CA and a server certificate for 127.0.0.1/localhost signed by it; returns paths."""
    ca_key, ca_crt = os.path.join(d, tag + "-ca.key"), os.path.join(d, tag + "-ca.crt")
    key, csr, crt = (os.path.join(d, tag + s) for s in (".key", ".csr", ".crt"))
    ext = os.path.join(d, tag + ".ext")
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", ca_key, "-out", ca_crt, "-days", "2", "-subj", "/CN=kcoll-test-ca-" + tag)
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
            "-keyout", key, "-out", csr, "-subj", "/CN=webhook-" + tag)
    with open(ext, "w") as f:
        f.write("subjectAltName=DNS:localhost,IP:127.0.0.1\n"
                "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", csr, "-CA", ca_crt, "-CAkey", ca_key, "-CAcreateserial",
            "-out", crt, "-days", "2", "-extfile", ext)
    return {"ca": ca_crt, "crt": crt, "key": key, "cn": "webhook-" + tag}


def install_secret_dir(secret_dir, pki, version):
    """Lays out files the way the kubelet updates a Secret volume: ..data -> ..<version>/,
    tls.crt -> ..data/tls.crt, and an atomic rename of the ..data link."""
    vdir = os.path.join(secret_dir, "..v%d" % version)
    os.makedirs(vdir)
    for src, name in ((pki["crt"], "tls.crt"), (pki["key"], "tls.key")):
        with open(src, "rb") as fi, open(os.path.join(vdir, name), "wb") as fo:
            fo.write(fi.read())
    tmp_link = os.path.join(secret_dir, "..data_tmp")
    os.symlink(os.path.basename(vdir), tmp_link)
    os.replace(tmp_link, os.path.join(secret_dir, "..data"))
    for name in ("tls.crt", "tls.key"):
        link = os.path.join(secret_dir, name)
        if not os.path.islink(link):
            os.symlink(os.path.join("..data", name), link)


def ctx_for(ca):
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = True
    return ctx


class Server:
    def __init__(self, binary, cert, key, logpath, extra=()):
        self.log = open(logpath, "w+")
        self.proc = subprocess.Popen(
            [binary, "--listen", "127.0.0.1:0", "--cert", cert, "--key", key,
             "--agent-image", IMAGE, "--lib-version", LIBV] + list(extra),
            stdout=self.log, stderr=subprocess.STDOUT)
        self.port = None
        deadline = time.time() + 15
        while time.time() < deadline and self.proc.poll() is None:
            text = self.logtext()
            for line in text.splitlines():
                if "AGENT-WEBHOOK-LISTEN" in line and "port=" in line:
                    self.port = int(line.split("port=")[1].split()[0])
            if self.port:
                break
            time.sleep(0.05)
        if not self.port:
            raise AssertionError("webhook did not start:\n" + self.logtext())

    def logtext(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return -999


def post(port, ctx, path, body, headers=None, conn=None):
    own = conn is None
    if own:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=20)
    h = {"Content-Type": "application/json", "Accept": "application/json"}
    h.update(headers or {})
    conn.request("POST", path, body=body, headers=h)
    resp = conn.getresponse()
    data = resp.read()
    if own:
        conn.close()
    return resp.status, resp.getheader("Content-Type"), data


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as f:
        return f.read()


def review(port, ctx, name_or_doc, path="/mutate"):
    """POSTs a review; returns (http status, parsed response body)."""
    body = fixture(name_or_doc) if isinstance(name_or_doc, str) else \
        json.dumps(name_or_doc).encode()
    status, ctype, data = post(port, ctx, path, body)
    try:
        doc = json.loads(data)
    except ValueError:
        doc = {"unparsed": data.decode("utf-8", "replace")}
    return status, ctype, doc


def decoded_patch(resp):
    r = resp.get("response", {})
    if "patch" not in r:
        return None
    return json.loads(base64.b64decode(r["patch"], validate=True))


def env_map(container):
    return {e["name"]: e for e in container.get("env", [])}


SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def projects_token(vol):
    return any("serviceAccountToken" in src
               for src in vol.get("projected", {}).get("sources", []))


def without_token_mounts(c, token_vols):
    c = copy.deepcopy(c)
    if "volumeMounts" in c:
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] not in token_vols]
    return c


def check_identity(label, pod, out, side):
    """Issue 21 finding 7: a pod that names no ServiceAccount (or default) runs as kcoll-agent,
    no automounted token, the token volumes out of every container, a projected token of the
    agent's account in the sidecar only; the sidecar admits the containers' uids."""
    spec, ospec = pod["spec"], out["spec"]
    t.check(ospec.get("serviceAccountName") == "kcoll-agent" and
            ospec.get("serviceAccount", "kcoll-agent") == "kcoll-agent",
            label + ": the pod runs as ServiceAccount kcoll-agent (%s)"
            % ospec.get("serviceAccountName"))
    t.check(ospec.get("automountServiceAccountToken") is False,
            label + ": automountServiceAccountToken false")
    vols = {v["name"]: v for v in ospec.get("volumes", [])}
    tok = vols.get("kcoll-agent-token", {})
    t.check(projects_token(tok) and [v for v in vols.values() if projects_token(v)] == [tok],
            label + ": one projected token volume, kcoll-agent-token (%s)" % sorted(vols))
    holders = [c["name"] for c in ospec.get("initContainers", []) + ospec.get("containers", [])
               if any(m.get("mountPath", "").rstrip("/") == SA_DIR or
                      m["name"] == "kcoll-agent-token" for m in c.get("volumeMounts", []))]
    t.check(holders == ["kcoll-agent"],
            label + ": only the sidecar mounts an API token (%s)" % holders)
    t.check({"name": "kcoll-agent-token", "mountPath": SA_DIR, "readOnly": True}
            in side.get("volumeMounts", []), label + ": sidecar token at " + SA_DIR)
    se = env_map(side)
    t.check(se.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") ==
            "status.podIP", label + ": sidecar POD_IP from status.podIP (health port bind)")
    want = []
    for c in spec.get("initContainers", []) + spec.get("containers", []):
        u = c.get("securityContext", {}).get("runAsUser",
                                             spec.get("securityContext", {}).get("runAsUser"))
        nonroot = c.get("securityContext", {}).get(
            "runAsNonRoot", spec.get("securityContext", {}).get("runAsNonRoot"))
        u = u if u is not None else (None if nonroot else 0)
        if u is not None and str(u) not in want:
            want.append(str(u))
    t.check(se.get("COLL_AGENT_IPC_ALLOW_UIDS", {}).get("value", "") == ",".join(want),
            label + ": sidecar admits the containers' uids %s (%s)"
            % (want, se.get("COLL_AGENT_IPC_ALLOW_UIDS")))


def check_injected(label, req_doc, resp):
    """Checks one allowed+patched answer; returns the patched pod."""
    r = resp.get("response", {})
    t.check(resp.get("apiVersion") == "admission.k8s.io/v1" and
            resp.get("kind") == "AdmissionReview", label + ": reply is an AdmissionReview v1")
    t.check(r.get("uid") == req_doc["request"]["uid"], label + ": uid echoed")
    t.check(r.get("allowed") is True, label + ": allowed")
    t.check(r.get("patchType") == "JSONPatch", label + ": patchType JSONPatch")
    patch = decoded_patch(resp)
    if not t.check(isinstance(patch, list) and patch, label + ": patch present"):
        return None
    pod = req_doc["request"]["object"]
    try:
        out = apply_patch(pod, patch)
    except Exception as e:  # noqa: BLE001 - report any applier failure as a test failure
        t.check(False, label + ": patch applies (%s): %s" % (e, json.dumps(patch)[:2000]))
        return None

    ann = out["metadata"].get("annotations", {})
    t.check(ann.get("kcoll.io/injected") == "true", label + ": kcoll.io/injected annotation")
    t.check(ann.get("kcoll.io/lib-version") == LIBV, label + ": kcoll.io/lib-version annotation")
    for k, v in (pod["metadata"].get("annotations") or {}).items():
        if k in FACT_KEYS:
            continue  # the webhook's own: replaced or removed (checked in api_facts)
        t.check(ann.get(k) == v, label + ": existing annotation %s kept" % k)
    t.check(any("kcoll.io~1injected" in op["path"] for op in patch) or
            any(op["path"] == "/metadata/annotations" for op in patch),
            label + ": '/' in the annotation key escaped as ~1")

    vols = {v["name"]: v for v in out["spec"].get("volumes", [])}
    t.check(vols.get("kcoll-run") == {"name": "kcoll-run", "emptyDir": {}},
            label + ": emptyDir volume kcoll-run")
    token_vols = {v["name"] for v in pod["spec"].get("volumes", []) if projects_token(v)}
    for v in pod["spec"].get("volumes", []):
        if v["name"] in token_vols:
            t.check(v["name"] not in vols, label + ": token volume %s removed" % v["name"])
        else:
            t.check(vols.get(v["name"]) == v, label + ": volume %s kept" % v["name"])

    inits = out["spec"].get("initContainers", [])
    side = inits[0] if inits else {}
    t.check(side.get("name") == "kcoll-agent", label + ": sidecar is the first init container")
    t.check(side.get("restartPolicy") == "Always", label + ": native sidecar (restartPolicy Always)")
    t.check(side.get("image") == IMAGE, label + ": sidecar image from --agent-image")
    t.check(side.get("imagePullPolicy") == "IfNotPresent", label + ": pull policy")
    t.check(side.get("command") == ["coll-agent"] and "args" not in side,
            label + ": sidecar runs coll-agent (its default mode is the sidecar)")
    res = side.get("resources", {})
    t.check(res.get("requests") == {"cpu": "50m", "memory": "64Mi"},
            label + ": sidecar resource requests")
    t.check(res.get("limits") == {"memory": "256Mi"}, label + ": sidecar memory limit")
    t.check({"name": "kcoll-run", "mountPath": "/var/run/kcoll"} in side.get("volumeMounts", []),
            label + ": sidecar mounts /var/run/kcoll read-write")
    probe = side.get("startupProbe", {}).get("exec", {}).get("command")
    t.check(probe == ["test", "-S", SOCK], label + ": startupProbe waits for the agent socket")
    sc = side.get("securityContext", {})
    t.check(sc.get("allowPrivilegeEscalation") is False and sc.get("runAsNonRoot") is True and
            sc.get("readOnlyRootFilesystem") is True and
            sc.get("capabilities") == {"drop": ["ALL"]}, label + ": sidecar securityContext")
    se = env_map(side)
    for name, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"),
                       ("NODE_NAME", "spec.nodeName")):
        t.check(se.get(name, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == path,
                label + ": sidecar env %s from %s" % (name, path))
    t.check(se.get("COLL_AGENT_SOCKET", {}).get("value") == SOCK, label + ": sidecar socket env")
    t.check(se.get("COLL_LIB_VERSION", {}).get("value") == LIBV, label + ": sidecar lib version")
    t.check(se.get("COLL_AGENT_LIB_DIR", {}).get("value") == LIB, label + ": sidecar lib dir")
    t.check(inits[1:] == [without_token_mounts(c, token_vols)
                          for c in pod["spec"].get("initContainers", [])],
            label + ": other init containers kept, in order, untouched but for the API token")
    check_identity(label, pod, out, side)

    for i, (before, after) in enumerate(zip(pod["spec"]["containers"],
                                            out["spec"]["containers"])):
        cl = "%s: container %s" % (label, before["name"])
        e = env_map(after)
        orig = env_map(before)
        for name, path in (("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace"),
                           ("NODE_NAME", "spec.nodeName")):
            if name in orig:
                t.check(e[name] == orig[name], cl + ": user's %s kept" % name)
            else:
                t.check(e.get(name, {}).get("valueFrom", {}).get("fieldRef", {})
                        .get("fieldPath") == path, cl + ": env %s from %s" % (name, path))
        t.check(e.get("COLL_AGENT_SOCKET", {}).get("value") == SOCK, cl + ": COLL_AGENT_SOCKET")
        ld_before = orig.get("LD_LIBRARY_PATH")
        ld_after = e.get("LD_LIBRARY_PATH", {})
        if ld_before is None:
            t.check(ld_after.get("value") == LIB, cl + ": LD_LIBRARY_PATH set to " + LIB)
        elif "valueFrom" in ld_before:
            t.check(ld_after == ld_before, cl + ": LD_LIBRARY_PATH from valueFrom untouched")
        else:
            t.check(ld_after.get("value") == LIB + ":" + ld_before["value"],
                    cl + ": LD_LIBRARY_PATH prepended (%r)" % ld_after.get("value"))
        names = [x["name"] for x in after.get("env", [])]
        t.check(len(names) == len(set(names)), cl + ": no duplicate env names")
        # kept in place; only the two list variables kcoll prepends to may change their value
        after_env = env_map(after)
        t.check(after.get("env", [])[:len(before.get("env", []))] ==
                [dict(x, value=after_env[x["name"]]["value"])
                 if x["name"] in ("LD_LIBRARY_PATH", "LD_PRELOAD") and "value" in x else x
                 for x in before.get("env", [])],
                cl + ": existing env entries kept in place")
        t.check({"name": "kcoll-run", "mountPath": "/var/run/kcoll", "readOnly": True}
                in after.get("volumeMounts", []), cl + ": mounts /var/run/kcoll read-only")
        kept = without_token_mounts(before, token_vols).get("volumeMounts", [])
        t.check(after.get("volumeMounts", [])[:len(kept)] == kept,
                cl + ": existing mounts kept, the API token's removed")
        t.check({k: v for k, v in after.items() if k not in ("env", "volumeMounts")} ==
                {k: v for k, v in before.items() if k not in ("env", "volumeMounts")},
                cl + ": nothing else changed")
        del i
    ident = ("initContainers", "volumes", "containers", "serviceAccountName", "serviceAccount",
             "automountServiceAccountToken")
    t.check({k: v for k, v in out["spec"].items() if k not in ident} ==
            {k: v for k, v in pod["spec"].items() if k not in ident},
            label + ": rest of the pod spec unchanged")
    return out


def as_review(pod, uid):
    return {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
            "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                        "resource": {"group": "", "version": "v1", "resource": "pods"},
                        "namespace": pod["metadata"].get("namespace", "default"),
                        "operation": "CREATE", "object": pod}}


def expect_no_patch(port, ctx, label, name_or_doc, path="/mutate"):
    status, _, resp = review(port, ctx, name_or_doc, path)
    r = resp.get("response", {})
    t.check(status == 200 and r.get("allowed") is True, label + ": allowed (%d %s)" % (status, r))
    t.check("patch" not in r and "patchType" not in r, label + ": no patch")
    return r


def expect_denied(port, ctx, label, name, code, words):
    status, _, resp = review(port, ctx, name)
    r = resp.get("response", {})
    doc = json.loads(fixture(name))
    t.check(status == 200, label + ": HTTP 200 with an AdmissionReview (%d)" % status)
    t.check(r.get("uid") == doc["request"]["uid"], label + ": uid echoed")
    t.check(r.get("allowed") is False, label + ": allowed=false")
    st = r.get("status", {})
    t.check(st.get("code") == code, label + ": status code %d (%r)" % (code, st.get("code")))
    msg = st.get("message", "")
    t.check(all(w in msg for w in words), label + ": message names %s (%r)" % (words, msg))
    t.check("patch" not in r, label + ": no patch")


def expect_400(port, ctx, label, body, words=()):
    status, ctype, data = post(port, ctx, "/mutate", body)
    t.check(status == 400, label + ": HTTP 400 (%d)" % status)
    try:
        doc = json.loads(data)
    except ValueError:
        doc = {}
    t.check(doc.get("kind") == "Status" and doc.get("code") == 400 and doc.get("message"),
            label + ": Status object with a message (%r)" % data[:300])
    t.check(all(w in doc.get("message", "") for w in words),
            label + ": message mentions %s" % (words,))


def raw_tls(port, ctx):
    s = socket.create_connection(("127.0.0.1", port), timeout=20)
    return ctx.wrap_socket(s, server_hostname="127.0.0.1")


def read_http(sock):
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            break
        if not chunk:
            break
        data += chunk
        if b"\r\n\r\n" in data:
            head, _, rest = data.partition(b"\r\n\r\n")
            cl = [ln for ln in head.split(b"\r\n") if ln.lower().startswith(b"content-length:")]
            if cl and len(rest) >= int(cl[0].split(b":")[1]):
                break
    return data


def peer_cn(port, ctx):
    with raw_tls(port, ctx) as s:
        cert = s.getpeercert()
    return dict(x[0] for x in cert["subject"]).get("commonName")


def api_facts(binary, tmp):
    """The webhook reads the owner Job and the Namespace from the fake API server fixture (as
    its own ServiceAccount) and writes them into the pod; a 403 becomes an error annotation and
    an admission warning, and the pod is still injected."""
    pki = make_pki(tmp, "api")
    ports = os.path.join(tmp, "api.ports")
    objs = os.path.join(tmp, "api-objects.json")
    with open(objs, "w") as f:
        json.dump([
            {"apiVersion": "v1", "kind": "Namespace",
             "metadata": {"name": "team-a", "labels": {"kubernetes.io/metadata.name": "team-a",
                                                       "team": "ml"}}},
            {"apiVersion": "batch/v1", "kind": "Job",
             "metadata": {"name": "train", "namespace": "team-a", "uid": "job-uid-1"},
             "spec": {"completions": 8, "parallelism": 8, "completionMode": "Indexed"}},
            # kcoll as NCCL for the pods labelled app=vllm in namespaces labelled team=ml
            {"apiVersion": "kcoll.io/v1alpha1", "kind": "CollectiveTopology",
             "metadata": {"name": "vllm-nccl"},
             "spec": {"namespaceSelector": {"matchLabels": {"team": "ml"}},
                      "podSelector": {"matchLabels": {"app": "vllm"}},
                      "network": {"interface": "eth0"}, "libraryVersion": "0.1.0",
                      "nccl": "kcoll"}}], f)
    api_log = open(os.path.join(tmp, "api.log"), "w")
    api = subprocess.Popen([sys.executable, os.path.join(REPO, "tests", "fixtures",
                                                         "fake_apiserver.py"),
                            "--cert", pki["crt"], "--key", pki["key"], "--token", "wh-token",
                            "--load", objs, "--ports-file", ports],
                           stdout=api_log, stderr=subprocess.STDOUT)
    srv = None
    try:
        deadline = time.time() + 20
        while not os.path.exists(ports) and time.time() < deadline and api.poll() is None:
            time.sleep(0.05)
        if not t.check(os.path.exists(ports), "api facts: fake API server started"):
            return
        api_port, ctl_port = (int(x) for x in open(ports).read().split())
        kc = os.path.join(tmp, "webhook.kubeconfig")
        with open(kc, "w") as f:
            f.write("apiVersion: v1\nkind: Config\nclusters:\n- name: f\n  cluster:\n"
                    "    server: https://127.0.0.1:%d\n    certificate-authority: %s\n"
                    "contexts:\n- name: f\n  context: {cluster: f, user: w}\n"
                    "current-context: f\nusers:\n- name: w\n  user: {token: wh-token}\n"
                    % (api_port, pki["ca"]))
        srv = Server(binary, pki["crt"], pki["key"], os.path.join(tmp, "webhook-api.log"),
                     extra=["--kubeconfig", kc, "--api-timeout-ms", "3000"])
        ctx = ctx_for(pki["ca"])
        pod = json.loads(fixture("pod-minimal.json"))["request"]["object"]
        pod["metadata"]["namespace"] = "team-a"
        pod["metadata"]["labels"] = {"kcoll.io/inject": "true"}
        pod["metadata"]["annotations"] = {"kcoll.io/world-size": "1000",
                                          "kcoll.io/job-uid": "forged"}
        pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                               "name": "train", "uid": "job-uid-1",
                                               "controller": True}]
        st, _, resp = review(srv.port, ctx, as_review(pod, "facts-1"))
        out = check_injected("api facts", as_review(pod, "facts-1"), resp) or {}
        ann = out.get("metadata", {}).get("annotations", {})
        t.check(ann.get("kcoll.io/world-size") == "8",
                "api facts: world size from the Job's completions, forged value replaced (%s)"
                % ann)
        t.check("kcoll.io/job-uid" not in ann, "api facts: forged job uid removed")
        t.check(json.loads(ann.get("kcoll.io/namespace-labels", "null")) ==
                {"kubernetes.io/metadata.name": "team-a", "team": "ml"},
                "api facts: namespace labels as JSON")
        # the webhook's ServiceAccount may not read Jobs: 403 -> error annotation + warning
        req = urllib_post(ctl_port, "/deny", {"rules": [{"verb": "get", "resource": "jobs"}]})
        t.check(req.get("ok") is True, "api facts: 403 configured")
        st, _, resp = review(srv.port, ctx, as_review(pod, "facts-2"))
        r = resp.get("response", {})
        out = check_injected("api facts 403", as_review(pod, "facts-2"), resp) or {}
        ann = out.get("metadata", {}).get("annotations", {})
        t.check(r.get("allowed") is True, "api facts 403: the pod is still admitted")
        t.check(ann.get("kcoll.io/world-size-error", "").startswith("Forbidden: reading Job "
                                                                   "team-a/train") and
                "kcoll.io/world-size" not in ann,
                "api facts 403: world-size-error, no (forged) world size (%s)" % ann)
        t.check(any("403" in w and "kcoll.io/world-size-error" in w
                    for w in r.get("warnings", [])),
                "api facts 403: admission warning (%s)" % r.get("warnings"))
        counts = urllib_get(ctl_port, "/counts")
        ua = [k for k in counts if k.startswith("coll-agent-webhook/")]
        t.check(ua and counts[ua[0]]["verbs"] == {"get": 4, "list": 2},
                "api facts: per review 2 GETs (Namespace, Job) and the list of "
                "CollectiveTopologies, nothing else (%s)" % counts)
        for ann in ("kcoll.io/nccl",):
            t.check(ann not in out.get("metadata", {}).get("annotations", {}),
                    "api facts: no topology says nccl: kcoll for this pod, no %s" % ann)
        t.check(all("LD_PRELOAD" not in env_map(c) for c in out["spec"]["containers"]),
                "api facts: no LD_PRELOAD without the opt-in")

        # spec.nccl: kcoll in the topology that selects the pod: every container preloads the
        # sidecar's libnccl.so.2, before a preload of its own
        pod["metadata"]["labels"]["app"] = "vllm"
        pod["spec"]["containers"][0].setdefault("env", []).append(
            {"name": "LD_PRELOAD", "value": "/opt/own.so"})
        st, _, resp = review(srv.port, ctx, as_review(pod, "nccl-1"))
        out = check_injected("kcoll nccl", as_review(pod, "nccl-1"), resp) or {}
        ann = out.get("metadata", {}).get("annotations", {})
        t.check(ann.get("kcoll.io/nccl") == "kcoll", "kcoll nccl: annotation (%s)" % ann)
        envs = [env_map(c) for c in out.get("spec", {}).get("containers", [])
                if c.get("name") != "kcoll-agent"]
        t.check(envs and envs[0].get("LD_PRELOAD", {}).get("value") ==
                "/var/run/kcoll/nccl/libnccl.so.2:/var/run/kcoll/nccl/libnccl-alias.so:"
                "/opt/own.so",
                "kcoll nccl: LD_PRELOAD puts kcoll's libnccl.so.2 and its alias first (%s)" %
                (envs[0].get("LD_PRELOAD") if envs else None))
        t.check(all(e.get("LD_PRELOAD", {}).get("value", "").startswith(
            "/var/run/kcoll/nccl/libnccl.so.2") for e in envs),
                "kcoll nccl: every container preloads it")
        t.check(all(e.get("LD_LIBRARY_PATH", {}).get("value", "").startswith(
            "/var/run/kcoll/lib") for e in envs), "kcoll nccl: LD_LIBRARY_PATH still set")
        # the same topology in a namespace without team=ml: not selected
        pod["metadata"]["namespace"] = "team-b"
        st, _, resp = review(srv.port, ctx, as_review(pod, "nccl-2"))
        out = check_injected("kcoll nccl other ns", as_review(pod, "nccl-2"), resp) or {}
        envs = [env_map(c) for c in out.get("spec", {}).get("containers", [])]
        t.check(envs and envs[0].get("LD_PRELOAD", {}).get("value") == "/opt/own.so",
                "kcoll nccl: a namespace the topology does not select keeps its own LD_PRELOAD")
    finally:
        if srv is not None:
            srv.stop()
        api.terminate()
        api.wait(timeout=10)
        api_log.close()


def urllib_post(port, path, body):
    import urllib.request
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path),
                                 data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.loads(r.read())


def urllib_get(port, path):
    import urllib.request
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=20) as r:
        return json.loads(r.read())


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    binary = sys.argv[1]
    if not os.access(binary, os.X_OK):
        skip("webhook binary %s not built" % binary)
    try:
        subprocess.run(["openssl", "version"], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        skip("openssl not found (apt-get install openssl) to make a throwaway CA")

    tmp = tempfile.mkdtemp(prefix="kcoll-webhook-test-")
    pki1 = make_pki(tmp, "one")
    pki2 = make_pki(tmp, "two")
    pki3 = make_pki(tmp, "three")
    secret_dir = os.path.join(tmp, "secret")
    os.makedirs(secret_dir)
    install_secret_dir(secret_dir, pki1, 1)

    # --- bad command lines and bad certificates never start a server
    def run_bad(args, want_rc, words, label):
        res = subprocess.run([binary] + args, capture_output=True, text=True, timeout=20)
        t.check(res.returncode == want_rc, label + ": exit %d (%d)" % (want_rc, res.returncode))
        t.check(all(w in res.stderr for w in words), label + ": says %s (%r)"
                % (words, res.stderr[-400:]))

    base = ["--listen", "127.0.0.1:0", "--agent-image", IMAGE, "--lib-version", LIBV]
    run_bad(["--listen", "127.0.0.1:0"], 2, ["required"], "missing flags")
    run_bad(base + ["--cert", pki1["crt"], "--key", pki1["key"], "--listen", "nope"], 2,
            ["--listen"], "bad --listen")
    run_bad(base + ["--cert", pki1["crt"], "--key", pki1["key"], "--sidecar-cpu-request",
                    "lots"], 2, ["quantity"], "bad quantity")
    run_bad(base + ["--cert", os.path.join(tmp, "missing.crt"), "--key", pki1["key"]], 1,
            ["AGENT-WEBHOOK-CERT-LOAD-FAIL", "missing.crt"], "missing certificate")
    run_bad(base + ["--cert", pki1["crt"], "--key", pki2["key"]], 1,
            ["does not belong"], "key of another certificate")
    run_bad(base + ["--cert", pki1["key"], "--key", pki1["key"]], 1,
            ["no PEM certificate"], "key given as certificate")

    srv = Server(binary, os.path.join(secret_dir, "tls.crt"), os.path.join(secret_dir, "tls.key"),
                 os.path.join(tmp, "webhook.log"))
    port = srv.port
    ctx1 = ctx_for(pki1["ca"])
    try:
        # --- health and routing
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx1, timeout=20)
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        t.check(r.status == 200 and r.read() == b"ok\n", "GET /healthz is ok")
        conn.request("GET", "/mutate")
        r = conn.getresponse()
        r.read()
        t.check(r.status == 405, "GET /mutate is 405 (%d)" % r.status)
        conn.close()
        status, _, _ = post(port, ctx1, "/elsewhere", b"{}")
        t.check(status == 404, "unknown path is 404 (%d)" % status)
        t.check(peer_cn(port, ctx1) == pki1["cn"], "serves the first certificate")

        # --- opted-in pod with initContainers, volumes, env, LD_LIBRARY_PATH
        req = json.loads(fixture("pod-opted-in.json"))
        status, ctype, resp = review(port, ctx1, "pod-opted-in.json")
        t.check(status == 200 and ctype == "application/json", "opted-in: HTTP 200 JSON")
        patch = decoded_patch(resp) or []
        paths = [op["path"] for op in patch]
        t.check("/spec/volumes/-" in paths and "/spec/initContainers/0" in paths and
                "/spec/containers/0/env/-" in paths and "/spec/containers/1/env" in paths,
                "opted-in: appends to existing arrays, adds missing ones whole (%s)" % paths)
        t.check("/metadata/annotations/kcoll.io~1injected" in paths,
                "opted-in: annotation path escaped (%s)" % paths)
        patched = check_injected("opted-in", req, resp)

        # idempotence: the patched pod comes back (reinvocation, or a second webhook entry)
        if patched is not None:
            expect_no_patch(port, ctx1, "second pass (pod entry)", as_review(patched, "again-1"))
            expect_no_patch(port, ctx1, "second pass (namespace entry)",
                            as_review(patched, "again-2"), "/mutate/namespace")
            # even without the annotation the sidecar is not added twice
            stripped = copy.deepcopy(patched)
            del stripped["metadata"]["annotations"]["kcoll.io/injected"]
            st, _, rs = review(port, ctx1, as_review(stripped, "again-3"))
            t.check(rs.get("response", {}).get("allowed") is False and
                    "kcoll-" in rs["response"].get("status", {}).get("message", ""),
                    "injected pod without annotation is refused, not injected twice")

        # --- minimal pod: nothing to append to
        req = json.loads(fixture("pod-minimal.json"))
        status, _, resp = review(port, ctx1, "pod-minimal.json")
        patch = decoded_patch(resp) or []
        paths = [op["path"] for op in patch]
        t.check(set(paths) == {"/metadata/annotations", "/spec/volumes", "/spec/initContainers",
                               "/spec/containers/0/env", "/spec/containers/0/volumeMounts",
                               "/spec/serviceAccountName", "/spec/automountServiceAccountToken",
                               "/spec/volumes/-"},
                "minimal: whole arrays/objects added (%s)" % paths)
        t.check(all(op["op"] == "add" for op in patch), "minimal: only add operations")
        patched = check_injected("minimal", req, resp)
        if patched is not None:
            expect_no_patch(port, ctx1, "minimal second pass", as_review(patched, "again-4"))

        # --- opt-in rules
        expect_no_patch(port, ctx1, "not opted in (pod entry)", "pod-not-opted-in.json")
        req = json.loads(fixture("pod-not-opted-in.json"))
        st, _, resp = review(port, ctx1, "pod-not-opted-in.json", "/mutate/namespace")
        check_injected("namespace opted in", req, resp)
        expect_no_patch(port, ctx1, "pod opts out in an opted-in namespace", "pod-opted-out.json",
                        "/mutate/namespace")
        expect_no_patch(port, ctx1, "pod label false (pod entry)", "pod-opted-out.json")
        expect_no_patch(port, ctx1, "already injected", "pod-already-injected.json")
        expect_no_patch(port, ctx1, "already injected (namespace)", "pod-already-injected.json",
                        "/mutate/namespace")
        expect_no_patch(port, ctx1, "pod UPDATE", "pod-update.json")
        expect_no_patch(port, ctx1, "ConfigMap", "configmap-create.json")

        # --- LD_LIBRARY_PATH from valueFrom: left alone, with a warning
        req = json.loads(fixture("pod-ld-path-valuefrom.json"))
        status, _, resp = review(port, ctx1, "pod-ld-path-valuefrom.json")
        check_injected("LD_LIBRARY_PATH valueFrom", req, resp)
        warns = resp.get("response", {}).get("warnings", [])
        t.check(any("LD_LIBRARY_PATH" in w and "trainer" in w for w in warns),
                "LD_LIBRARY_PATH valueFrom: warning names container (%s)" % warns)

        # --- refusals with the uid known
        expect_denied(port, ctx1, "volume name taken", "pod-volume-conflict.json", 403,
                      ["kcoll-run"])
        expect_denied(port, ctx1, "v1beta1 review", "malformed-v1beta1.json", 400,
                      ["v1beta1", "admission.k8s.io/v1"])
        expect_denied(port, ctx1, "wrong kind", "malformed-wrong-kind.json", 400,
                      ["AdmissionRequest"])
        expect_denied(port, ctx1, "object missing", "malformed-no-object.json", 400,
                      ["request.object"])
        expect_denied(port, ctx1, "containers not an array", "malformed-containers-not-array.json",
                      403, ["spec.containers"])

        # --- malformed bodies without a uid: HTTP 400 + Status
        expect_400(port, ctx1, "not JSON", fixture("malformed-not-json.txt"), ["not valid JSON"])
        expect_400(port, ctx1, "truncated JSON", fixture("malformed-truncated.json"),
                   ["not valid JSON"])
        expect_400(port, ctx1, "JSON array", fixture("malformed-array.json"), ["JSON object"])
        expect_400(port, ctx1, "missing uid", fixture("malformed-missing-uid.json"),
                   ["request.uid"])
        expect_400(port, ctx1, "no request", fixture("malformed-no-request.json"), ["request"])
        expect_400(port, ctx1, "empty body", b"", ["not valid JSON"])
        expect_400(port, ctx1, "binary junk", bytes(range(256)) * 4, ["not valid JSON"])
        expect_400(port, ctx1, "deep nesting", b"[" * 100000 + b"]" * 100000)

        # --- oversized bodies: refused before the body is read (Content-Length) or when the
        # chunked upload passes the limit; the server stays up
        with raw_tls(port, ctx1) as s:
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Content-Length: %d\r\n\r\n{\"kind\":" % (MAX_BODY + 1))
            data = read_http(s)
        t.check(data.startswith(b"HTTP/1.1 413"), "Content-Length over limit: 413 before the "
                "body (%r)" % data[:60])
        t.check(b"over the limit" in data, "413 carries a message")
        with raw_tls(port, ctx1) as s:
            s.sendall(b"POST /mutate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            chunk = b"x" * (1 << 20)
            for _ in range(5):
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            s.sendall(b"0\r\n\r\n")
            data = read_http(s)
        t.check(data.startswith(b"HTTP/1.1 413"), "chunked body over limit: 413 (%r)" % data[:60])
        big = json.loads(fixture("pod-minimal.json"))
        big["request"]["object"]["metadata"]["annotations"] = {"pad": "y" * (3 << 20)}
        status, _, resp = review(port, ctx1, big)
        t.check(status == 200 and resp.get("response", {}).get("allowed") is True,
                "3 MiB review under the limit is served (%d)" % status)

        # --- garbage on the TLS port: plaintext HTTP and random bytes
        for junk in (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", os.urandom(4096)):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            try:
                s.sendall(junk)
                s.recv(1024)
            except OSError:
                pass
            s.close()
        t.check(srv.proc.poll() is None, "server survives plaintext and junk on the TLS port")

        # --- keep-alive and concurrency
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx1, timeout=20)
        ok = 0
        for _ in range(20):
            st, _, data = post(port, ctx1, "/mutate", fixture("pod-opted-in.json"), conn=conn)
            ok += st == 200
        conn.close()
        t.check(ok == 20, "20 reviews on one keep-alive connection")

        def one(i):
            name = ("pod-opted-in.json", "pod-minimal.json", "malformed-not-json.txt")[i % 3]
            st, _, data = post(port, ctx1, "/mutate", fixture(name))
            return st == (400 if name.endswith(".txt") else 200)

        with concurrent.futures.ThreadPoolExecutor(16) as ex:
            results = list(ex.map(one, range(96)))
        t.check(all(results), "96 concurrent reviews answered correctly (%d ok)" % sum(results))

        # --- certificate rotation, the kubelet way (atomic swap of the ..data link)
        install_secret_dir(secret_dir, pki2, 2)
        ctx2 = ctx_for(pki2["ca"])
        t.check(peer_cn(port, ctx2) == pki2["cn"], "rotated certificate served to new connections")
        try:
            peer_cn(port, ctx1)
            t.check(False, "old CA no longer verifies after rotation")
        except ssl.SSLError:
            t.check(True, "old CA no longer verifies after rotation")
        st, _, resp = review(port, ctx2, "pod-minimal.json")
        t.check(st == 200 and resp["response"].get("patch"), "reviews work after rotation")

        # a half-updated pair (new key, old certificate) is refused; the old pair stays
        with open(pki3["key"], "rb") as fi, open(os.path.join(tmp, "tmpkey"), "wb") as fo:
            fo.write(fi.read())
        vdir = os.path.realpath(os.path.join(secret_dir, "..data"))
        os.replace(os.path.join(tmp, "tmpkey"), os.path.join(vdir, "tls.key"))
        t.check(peer_cn(port, ctx2) == pki2["cn"], "mismatched key: previous pair still served")
        t.check("AGENT-WEBHOOK-CERT-RELOAD-FAIL" in srv.logtext(),
                "mismatched key: reload failure logged")
        # the certificate catches up (written in place, not renamed)
        with open(pki3["crt"], "rb") as fi, open(os.path.join(vdir, "tls.crt"), "wb") as fo:
            fo.write(fi.read())
        t.check(peer_cn(port, ctx_for(pki3["ca"])) == pki3["cn"],
                "pair complete again: new certificate served")
        t.check(srv.logtext().count("AGENT-WEBHOOK-CERT-RELOADED") == 2,
                "two reloads logged")
        t.check(srv.proc.poll() is None, "server still running")
    finally:
        rc = srv.stop()
    t.check(rc == 0, "SIGTERM: clean exit 0 (%d)" % rc)
    api_facts(binary, tmp)
    log = srv.logtext()
    t.check("AGENT-WEBHOOK-INJECT" in log and "AGENT-WEBHOOK-BAD-REVIEW" in log and
            "AGENT-WEBHOOK-STOP" in log, "log lines carry stable IDs")
    t.check("ERROR: AddressSanitizer" not in log and "runtime error:" not in log,
            "no sanitizer reports in the server log")
    if t.failures:
        print("---- server log (tail) ----")
        print(log[-6000:])
    t.done()


if __name__ == "__main__":
    main()
