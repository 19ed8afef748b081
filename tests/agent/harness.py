"""Test harness for coll-agent: a throwaway CA, the fake API server, Indexed Job objects, and
coll-agent processes with fake downward-API env (python3 standard library only)."""
import base64
import copy
import http.client
import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
KUBE = os.path.join(FIXTURES, "kube")
RBAC_TEMPLATE = os.path.join(ROOT, "deploy", "helm", "kcoll", "templates", "rbac.yaml")
SKIP = 77
sys.path.insert(0, os.path.join(ROOT, "tests", "deploy"))
from jsonpatch import apply_patch  # noqa: E402


def chart_agent_rules(read_nodes=False):
    """The agent's RBAC rules exactly as the chart's rbac.yaml grants them: the namespaced
    ClusterRole (bound per namespace by RoleBindings) and the cluster-scoped one (bound by a
    ClusterRoleBinding). Rules inside a {{- if }} block count only with read_nodes."""
    roles, cur, rule, in_rules, cond = {}, None, None, False, []
    flow = re.compile(r'^\s*-?\s*(apiGroups|resources|verbs):\s*\[(.*)\]\s*$')
    with open(RBAC_TEMPLATE) as f:
        for line in f:
            s = line.strip()
            if s == "---" or s.startswith("kind:"):
                in_rules, cur = False, None
                continue
            m = re.match(r'^\s*name:\s*\{\{\s*\$fullname\s*\}\}-(agent[\w-]*)\s*$', line)
            if m and not in_rules and cur is None:
                cur = roles.setdefault(m.group(1), [])
                continue
            if line.startswith("rules:") and cur is not None:
                in_rules = True
                continue
            if not in_rules:
                continue
            if s.startswith("{{- if"):
                cond.append("readNodes" in s)
                continue
            if s.startswith("{{- end"):
                if cond:
                    cond.pop()
                    continue
                in_rules = False
                continue
            m = flow.match(line)
            if not m:
                continue
            vals = [v.strip().strip('"') for v in m.group(2).split(",") if v.strip()]
            if s.startswith("- "):
                rule = {}
                if all(cond) and (not cond or read_nodes):
                    cur.append(rule)
            rule[m.group(1)] = vals
    ns_rules, cl_rules = roles.get("agent", []), roles.get("agent-topologies", [])
    if len(ns_rules) < 4 or len(cl_rules) < 1:
        raise RuntimeError("could not read the agent's rules from %s (%s)" % (RBAC_TEMPLATE, roles))
    return {"userAgentPrefix": "coll-agent/", "namespaced": ns_rules, "cluster": cl_rules}


def skip(reason):
    print("SKIP: " + reason)
    sys.exit(SKIP)


def fixture(name):
    with open(os.path.join(KUBE, name)) as f:
        return json.load(f)


def make_certs(d):
    """CA + server certificate for 127.0.0.1/localhost, with openssl or GnuTLS certtool."""
    ca_key, ca_crt = os.path.join(d, "ca.key"), os.path.join(d, "ca.crt")
    key, crt = os.path.join(d, "server.key"), os.path.join(d, "server.crt")
    if shutil.which("openssl"):
        ext = os.path.join(d, "ext.cnf")
        with open(ext, "w") as f:
            f.write("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                    "basicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n")

        def run(*a):
            subprocess.run(["openssl"] + list(a), check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", ca_key, "-out", ca_crt, "-days", "2", "-subj",
            "/CN=kcoll-test-ca")
        run("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", key, "-out", os.path.join(d, "server.csr"), "-subj", "/CN=127.0.0.1")
        run("x509", "-req", "-in", os.path.join(d, "server.csr"), "-CA", ca_crt, "-CAkey",
            ca_key, "-CAcreateserial", "-out", crt, "-days", "2", "-extfile", ext)
    elif shutil.which("certtool"):
        def tmpl(name, text):
            p = os.path.join(d, name)
            with open(p, "w") as f:
                f.write(text)
            return p

        def run(*a):
            subprocess.run(["certtool"] + list(a), check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        run("--generate-privkey", "--key-type", "ecdsa", "--outfile", ca_key)
        run("--generate-self-signed", "--load-privkey", ca_key, "--template",
            tmpl("ca.tmpl", 'cn = "kcoll-test-ca"\nca\ncert_signing_key\nexpiration_days = 2\n'),
            "--outfile", ca_crt)
        run("--generate-privkey", "--key-type", "ecdsa", "--outfile", key)
        run("--generate-certificate", "--load-privkey", key, "--load-ca-certificate", ca_crt,
            "--load-ca-privkey", ca_key, "--template",
            tmpl("srv.tmpl", 'cn = "127.0.0.1"\nip_address = "127.0.0.1"\ndns_name = "localhost"'
                 '\ntls_www_server\nexpiration_days = 2\n'), "--outfile", crt)
    else:
        skip("neither openssl nor certtool is installed (needed for the test CA)")
    return ca_crt, crt, key


def find_kubectl():
    """Real kubectl v1.33 from PATH or .deps/bin, else None."""
    cands = [os.path.join(ROOT, ".deps", "bin", "kubectl")]
    w = shutil.which("kubectl")
    if w:
        cands.append(w)
    for c in cands:
        if not os.access(c, os.X_OK):
            continue
        try:
            out = subprocess.run([c, "version", "--client", "-o", "json"], capture_output=True,
                                 text=True, timeout=30).stdout
            v = json.loads(out)["clientVersion"]
            if v.get("major") == "1" and int(v.get("minor", "0").rstrip("+")) >= 33:
                return c
        except (OSError, ValueError, KeyError, subprocess.TimeoutExpired):
            continue
    return None


class Cluster:
    """The fake API server with a namespace, topologies and Indexed Jobs."""

    def __init__(self, agent_bin, token="token-v1", topologies=("topology-train.json",),
                 bookmark_interval=1.0, extra_objects=()):
        self.agent_bin = agent_bin
        self.dir = tempfile.mkdtemp(prefix="kcoll-agent-test-")
        self.ca, crt, key = make_certs(self.dir)
        objs = [fixture("namespace-team-a.json")] + [fixture(t) for t in topologies]
        objs += list(extra_objects)
        self.objfile = os.path.join(self.dir, "objects.json")
        with open(self.objfile, "w") as f:
            json.dump(objs, f)
        ports = os.path.join(self.dir, "ports")
        self.server_log = open(os.path.join(self.dir, "apiserver.log"), "w")
        self.server = subprocess.Popen(
            [sys.executable, os.path.join(FIXTURES, "fake_apiserver.py"), "--cert", crt, "--key",
             key, "--token", token, "--load", self.objfile, "--ports-file", ports,
             "--bookmark-interval", str(bookmark_interval)],
            stdout=self.server_log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.exists(ports):
            if time.time() > deadline or self.server.poll() is not None:
                raise RuntimeError("fake API server did not start: see " + self.server_log.name)
            time.sleep(0.05)
        with open(ports) as f:
            self.port, self.ctl_port = (int(x) for x in f.read().split())
        self.sa_dir = os.path.join(self.dir, "sa")
        os.makedirs(self.sa_dir)
        shutil.copy(self.ca, os.path.join(self.sa_dir, "ca.crt"))
        self.write_token(token)
        with open(os.path.join(self.sa_dir, "namespace"), "w") as f:
            f.write("team-a")
        self.agents = []
        # the agents may do exactly what the chart's RBAC grants them, nothing more
        self.control("/allow", chart_agent_rules())
        # the admission webhook (coll-agent webhook) annotates every pod before it is created,
        # reading its Job, JobSet and Namespace as its own client
        self.webhook_log = open(os.path.join(self.dir, "webhook.log"), "w+")
        env = {k: v for k, v in os.environ.items() if k != "KUBERNETES_SERVICE_HOST"}
        self.webhook = subprocess.Popen(
            [agent_bin, "webhook", "--listen", "127.0.0.1:0", "--cert", crt, "--key", key,
             "--agent-image", "registry.example.com/kcoll/kcoll-agent:0.1.0", "--lib-version",
             "0.1.0", "--kubeconfig", self.kubeconfig(token, "webhook-kubeconfig")],
            env=env, stdout=self.webhook_log, stderr=subprocess.STDOUT)
        self.webhook_port = None
        deadline = time.time() + 20
        while self.webhook_port is None:
            self.webhook_log.flush()
            with open(self.webhook_log.name) as f:
                m = re.search(r"AGENT-WEBHOOK-LISTEN .*port=(\d+)", f.read())
            if m:
                self.webhook_port = int(m.group(1))
            elif time.time() > deadline or self.webhook.poll() is not None:
                raise RuntimeError("coll-agent webhook did not start: see " + self.webhook_log.name)
            else:
                time.sleep(0.05)
        self.webhook_ctx = ssl.create_default_context(cafile=self.ca)

    # ---- control endpoint ----
    def control(self, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.ctl_port, path), data=data,
                                     method="POST" if data is not None else "GET")
        with urllib.request.urlopen(req, timeout=20) as r:
            return json.loads(r.read())

    def objects(self, resource):
        return self.control("/objects?resource=" + resource)

    def add(self, obj):
        self.control("/objects", obj)

    def kubectl_describe(self, name):
        """kubectl describe communicator NAME (None without kubectl)."""
        kubectl = find_kubectl()
        if not kubectl:
            return None
        env = dict(os.environ, KUBECONFIG=self.kubeconfig(), HOME=self.dir)
        return subprocess.run([kubectl, "describe", "communicator", name], capture_output=True,
                              text=True, env=env, timeout=60)

    def kubelet_ends(self, pod_name, terminated, limit=None):
        """What the kubelet writes when a pod's first container ends (the fake API server has no
        kubelet): its terminated state and the pod Failed (restartPolicy Never); limit: the
        container's memory limit, set in the spec for the test."""
        pod = [o for o in self.objects("pods") if o["metadata"]["name"] == pod_name][0]
        c = pod["spec"]["containers"][0]
        if limit:
            c.setdefault("resources", {}).setdefault("limits", {})["memory"] = limit
        st = pod.setdefault("status", {})
        st["phase"] = "Failed"
        st["containerStatuses"] = [{"name": c["name"], "ready": False, "restartCount": 0,
                                    "image": c.get("image", ""),
                                    "state": {"terminated": terminated}}]
        self.add(pod)

    def write_token(self, token):
        tmp = os.path.join(self.sa_dir, "token.tmp")
        with open(tmp, "w") as f:
            f.write(token + "\n")
        os.rename(tmp, os.path.join(self.sa_dir, "token"))

    def kubeconfig(self, token="token-v1", name="kubeconfig"):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write("""apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority: %s
contexts:
- name: fake
  context:
    cluster: fake
    user: agent
    namespace: team-a
current-context: fake
users:
- name: agent
  user:
    token: %s
""" % (self.port, self.ca, token))
        return path

    # ---- admission ----
    def admit(self, pod, conn=None):
        """The pod as the API server stores it after the webhook's namespace entry mutated it
        (the namespace opted in): the webhook's JSONPatch applied."""
        own = conn is None
        if own:
            conn = http.client.HTTPSConnection("127.0.0.1", self.webhook_port,
                                               context=self.webhook_ctx, timeout=30)
        review = {"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1",
                  "request": {"uid": str(uuid.uuid4()),
                              "kind": {"group": "", "version": "v1", "kind": "Pod"},
                              "resource": {"group": "", "version": "v1", "resource": "pods"},
                              "namespace": pod["metadata"].get("namespace", "team-a"),
                              "operation": "CREATE", "object": pod}}
        conn.request("POST", "/mutate/namespace", body=json.dumps(review),
                     headers={"Content-Type": "application/json"})
        resp = json.loads(conn.getresponse().read())["response"]
        if own:
            conn.close()
        if not resp.get("allowed"):
            raise RuntimeError("webhook refused pod %s: %s" % (pod["metadata"].get("name"),
                                                             resp.get("status")))
        if "patch" in resp:
            pod = apply_patch(pod, json.loads(base64.b64decode(resp["patch"])))
        return pod

    def add_pod(self, pod, conn=None):
        """Create a pod the way the API server does: through the admission webhook."""
        pod = self.admit(pod, conn)
        self.add(pod)
        return pod

    # ---- workload objects ----
    def add_job(self, name, n, pod_edit=None, job_edit=None, netstatus=None, create_pods=True):
        job = fixture("job-template.json")
        uid = str(uuid.uuid4())
        job["metadata"]["name"] = name
        job["metadata"]["uid"] = uid
        job["spec"]["completions"] = n
        job["spec"]["parallelism"] = n
        job["spec"]["template"]["spec"]["subdomain"] = name
        if job_edit:
            job_edit(job)
        self.add(job)
        pods = []
        conn = http.client.HTTPSConnection("127.0.0.1", self.webhook_port,
                                           context=self.webhook_ctx, timeout=30)
        ns_json = json.dumps(netstatus if netstatus is not None
                             else fixture("network-status-lo.json"))
        for i in range(n):
            p = fixture("pod-template.json")
            md = p["metadata"]
            md["name"] = "%s-%d-%s" % (name, i, uuid.uuid4().hex[:5])
            for k in list(md["labels"]):
                md["labels"][k] = {"JOBUID": uid, "INDEX": str(i), "JOB": name}.get(
                    md["labels"][k], md["labels"][k])
            md["annotations"]["batch.kubernetes.io/job-completion-index"] = str(i)
            md["annotations"]["k8s.v1.cni.cncf.io/network-status"] = ns_json
            md["ownerReferences"][0]["name"] = name
            md["ownerReferences"][0]["uid"] = uid
            p["spec"]["nodeName"] = "node-%d" % (i // 8)
            p["spec"]["hostname"] = "%s-%d" % (name, i)
            p["spec"]["subdomain"] = name
            if pod_edit:
                pod_edit(i, p)
            if create_pods:
                p = self.add_pod(p, conn)
            pods.append(p)
        conn.close()
        return uid, pods

    # ---- agents ----
    def start_agent(self, pod, extra_args=(), env=None, tag=None, kubeconfig=None):
        name = pod["metadata"]["name"] if isinstance(pod, dict) else pod
        tag = tag or name
        sock = os.path.join(self.dir, "s-%d.sock" % len(self.agents))
        log = open(os.path.join(self.dir, "agent-%s.log" % tag), "w")
        e = dict(os.environ)
        for k in ("KUBECONFIG", "RANK", "WORLD_SIZE", "COLL_RANK"):
            e.pop(k, None)
        e.update({"POD_NAME": name, "POD_NAMESPACE": "team-a"})
        args = [self.agent_bin, "--socket", sock, "--health-port", "0", "--min-shm-mb", "0",
                "--backoff-base-ms", "50", "--backoff-cap-ms", "1000",
                "--request-timeout-ms", "5000"]
        if kubeconfig:
            args += ["--kubeconfig", kubeconfig]
        else:
            e.update({"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                      "KUBERNETES_SERVICE_PORT": str(self.port)})
            args += ["--sa-dir", self.sa_dir]
        if env:
            e.update(env)
        proc = subprocess.Popen(args + list(extra_args), env=e, stdout=log,
                                stderr=subprocess.STDOUT)
        a = {"proc": proc, "sock": sock, "log": log.name, "pod": name}
        self.agents.append(a)
        return a

    def agent_log(self, a):
        with open(a["log"]) as f:
            return f.read()

    def stop_agents(self, agents=None):
        for a in agents or self.agents:
            if a["proc"].poll() is None:
                a["proc"].send_signal(signal.SIGTERM)
        for a in agents or self.agents:
            try:
                a["proc"].wait(timeout=15)
            except subprocess.TimeoutExpired:
                a["proc"].kill()
                a["proc"].wait()

    def close(self, keep=False):
        self.stop_agents()
        if self.webhook.poll() is None:
            self.webhook.terminate()
            try:
                self.webhook.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.webhook.kill()
        self.webhook_log.close()
        if self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
        self.server_log.close()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            print("test files kept in " + self.dir)


def hello(hello_bin, socks, check=None, timeout_ms=60000):
    args = [hello_bin, "--timeout-ms", str(timeout_ms)]
    if check is not None:
        args += ["--check", str(check)]
    r = subprocess.run(args + list(socks), capture_output=True, text=True,
                       timeout=timeout_ms / 1000 + 60)
    return r.returncode, r.stdout + r.stderr


def report(hello_bin, sock, phase, error=None, error_rank=None, ready_ranks=None,
           condition=None, transport=None):
    args = [hello_bin, "--report", phase]
    if transport:
        args += ["--transport", transport]
    if error:
        args += ["--error", error]
    if error_rank is not None:
        args += ["--error-rank", str(error_rank)]
    if ready_ranks is not None:
        args += ["--ready-ranks", str(ready_ranks)]
    if condition:
        args += ["--condition", condition]
    r = subprocess.run(args + [sock], capture_output=True, text=True, timeout=60)
    return r.returncode, r.stdout + r.stderr


def wait_for(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(0.1)
    raise AssertionError("timed out waiting for " + what)


def settled(fn, quiet=3.0, limit=60):
    """fn()'s value once it did not change for quiet seconds (at most limit seconds)."""
    deadline, last, since = time.time() + limit, None, time.time()
    while time.time() < deadline:
        cur = fn()
        if cur != last:
            last, since = cur, time.time()
        elif time.time() - since >= quiet:
            break
        time.sleep(0.2)
    return last


def parse_ok(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv)
