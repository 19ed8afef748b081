#!/usr/bin/env python3
"""Writes the seed inputs of the fuzz targets whose inputs are made of several parts (the agent's
API answers, the fake peers' scripts) into tests/fuzz/corpus/<target>/. Crash reproducers found
later are added by hand beside them. Run from anywhere: python3 tests/fuzz/seeds.py"""
import copy
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures")


def j(o):
    return json.dumps(o, separators=(",", ":")).encode()


def load(*p):
    with open(os.path.join(FIX, *p), "rb") as f:
        return json.loads(f.read())


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def parts(*chunks):
    return b"\0".join(chunks)


# ---- pod: Pod, CollectiveTopology list, Node ----
netstatus = load("kube", "network-status-lo.json")
pod = json.loads(json.dumps(load("kube", "pod-template.json"))
                 .replace("JOBUID", "0f0e-uid").replace("JOB", "train").replace("INDEX", "1")
                 .replace("node-N", "node-a"))
pod["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"] = json.dumps(netstatus)
pod["metadata"]["annotations"]["kcoll.io/world-size"] = "4"
pod["metadata"]["annotations"]["kcoll.io/namespace-labels"] = json.dumps(
    {"kubernetes.io/metadata.name": "ml", "team": "a"})
pod.setdefault("status", {})["podIP"] = "127.0.0.1"
topo = load("kube", "topology-train.json")
topo["spec"]["network"] = {"attachment": "team-a/lo-net"}
topo["spec"]["namespaceSelector"] = {"matchLabels": {"team": "a"}}
topo["spec"]["topologyKey"] = "topology.kubernetes.io/zone"
node = {"kind": "Node", "metadata": {"name": "node-a",
                                     "labels": {"topology.kubernetes.io/zone": "rack-1"}}}
tlist = {"kind": "CollectiveTopologyList", "items": [topo]}
write("pod", "indexed-job", parts(j(pod), j(tlist), j(node)))
p2 = copy.deepcopy(pod)
p2["metadata"]["labels"] = {"kcoll.io/rank": "2", "kcoll.io/world-size": "4", "kcoll.io/job": "t"}
write("pod", "rank-labels", parts(j(p2), j(tlist), j(node)))
p3 = copy.deepcopy(pod)
a = p3["metadata"]["annotations"]
del a["batch.kubernetes.io/job-completion-index"]
p3["metadata"]["labels"] = {"jobset.sigs.k8s.io/jobset-name": "js",
                            "jobset.sigs.k8s.io/global-replicas": "2",
                            "batch.kubernetes.io/job-completion-index": "1"}
a["jobset.sigs.k8s.io/job-global-index"] = "1"
a["jobset.sigs.k8s.io/global-replicas"] = "2"
a["batch.kubernetes.io/job-completion-index"] = "1"
a["kcoll.io/job-uid"] = "js-uid"
a["k8s.v1.cni.cncf.io/networks-status"] = a.pop("k8s.v1.cni.cncf.io/network-status")
write("pod", "jobset-deprecated-netstatus", parts(j(p3), j(tlist), j(node)))
# why a rank ended (cause.c): a container OOMKilled and one restarted, a disruption, a NotReady
# node beside the topology-key label
p5 = copy.deepcopy(pod)
p5["metadata"]["deletionTimestamp"] = "2026-11-29T12:06:30Z"
p5["spec"]["containers"][0]["resources"] = {"limits": {"memory": "8Gi"}}
p5["status"].update({"phase": "Running", "reason": "Evicted", "message": "low on memory",
                     "conditions": [{"type": "Ready", "status": "False"},
                                    {"type": "DisruptionTarget", "status": "True",
                                     "reason": "PreemptionByScheduler", "message": "preempted"}],
                     "containerStatuses": [
                         {"name": "trainer", "restartCount": 2, "state": {"running": {}},
                          "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                       "finishedAt": "2026-11-29T12:05:00Z",
                                                       "message": "Traceback\nKeyError\n"}}},
                         {"name": "logger", "state": {"terminated": {"exitCode": 139}}}]})
n5 = copy.deepcopy(node)
n5["status"] = {"conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                "message": "Kubelet stopped posting node status.",
                                "lastTransitionTime": "2026-11-29T12:07:40Z"}]}
write("pod", "cause-ended", parts(j(p5), j(tlist), j(n5)))
# spec.nccl: native: a pod the node controller marked (its node stopped reporting), and a
# Communicator's status.ncclPods after a refusal (nccl_pods.c reads the first answer as both)
p6 = copy.deepcopy(pod)
p6["status"].update({"phase": "Running", "conditions": [
    {"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-29T12:07:00Z"},
    {"type": "ContainersReady", "status": "True"}]})
write("pod", "node-lost", parts(j(p6), j(tlist), j(node)))
p7 = copy.deepcopy(p6)  # its machine removed: the pod garbage collector deletes it
p7["metadata"].update({"deletionTimestamp": "2026-11-29T12:08:00Z",
                       "deletionGracePeriodSeconds": 0})
p7["status"]["conditions"].append({"type": "DisruptionTarget", "status": "True",
                                   "reason": "DeletionByPodGC",
                                   "message": "PodGC: node no longer exists"})
write("pod", "pod-gc", parts(j(p7), j(tlist), j(node)))
stamp = "0123456789abcdef"
comm = {"kind": "Communicator", "metadata": {"name": "train"}, "status": {
    "phase": "Failed", "lastError": {"rank": 1, "pod": "train-1-x", "time": "2026-11-29T12:00:00Z",
                                     "reason": "NcclVersionMismatch"},
    "unhealthyMembers": [{"rank": 1, "pod": "train-1-x", "reason": "NcclVersionMismatch"},
                         {"rank": 1, "pod": "train-1-x", "reason": "RankEnded"}],
    "ncclPods": {"0": {"job": stamp, "pod": "train-0-x", "node": "n0",
                       "since": "2026-11-29T11:59:00Z"},
                 "1": {"job": stamp, "pod": "train-1-x", "node": "bad/node",
                       "since": "2026-11-29T12:01:00.5Z"},
                 "2": {"job": "other", "pod": "train-2-x"}}}}
write("pod", "nccl-pods", parts(j(comm)))
p4 = copy.deepcopy(pod)
p4["metadata"]["annotations"]["kcoll.io/world-size-error"] = "Forbidden: cannot read the Job"
del p4["metadata"]["annotations"]["kcoll.io/world-size"]
write("pod", "world-size-error", parts(j(p4), b"403 " + j({"kind": "Status", "reason": "Forbidden",
                                                            "message": "no"})))
t2 = copy.deepcopy(topo)
t2["spec"]["network"] = {"interface": "lo"}
t2["spec"]["podSelector"] = {"matchExpressions": [
    {"key": "kcoll.io/inject", "operator": "In", "values": ["true"]},
    {"key": "x", "operator": "DoesNotExist"}]}
t3 = copy.deepcopy(topo)
t3["metadata"]["name"] = "other"
t3["spec"]["namespaceSelector"] = {"matchExpressions": [{"key": "team", "operator": "NotIn",
                                                         "values": ["a"]}]}
write("pod", "interface-pin", parts(j(pod), j({"items": [t2, t3]}), b"404 {}"))
write("pod", "not-found", b"404 " + j({"kind": "Status", "reason": "NotFound", "message": "x"}))

# ---- comm: first byte (rank, world size known, job uid known), then answers ----
comm = {"apiVersion": "kcoll.io/v1alpha1", "kind": "Communicator",
        "metadata": {"name": "train", "namespace": "ml", "uid": "c-uid", "resourceVersion": "7",
                     "ownerReferences": [{"kind": "Job", "name": "train", "uid": "0f0e0d0c-uid"}]},
        "spec": {"nranks": 8, "rootEndpoint": "10.0.0.1:29500", "secretName": "kcoll-train",
                 "topology": "fabric", "transport": "Socket"}}
# the job's Secret, which a non-root agent reads once the Communicator names it
secret = b"\x00" + b"200 " + j({"apiVersion": "v1", "kind": "Secret", "type": "kcoll.io/job-secret",
                        "metadata": {"name": "kcoll-train", "namespace": "ml",
                                     "ownerReferences": [{"kind": "Job", "name": "train",
                                                          "uid": "0f0e0d0c-uid"}]},
                        "data": {"secret": "MDAxMTIyMzM0NDU1NjY3Nzg4OTlhYWJiY2NkZGVlZmY="}})
pending = copy.deepcopy(comm)
del pending["spec"]["rootEndpoint"]


def ev(t, o):
    return j({"type": t, "object": o}) + b"\n"


bm = {"kind": "Communicator", "metadata": {"resourceVersion": "9"}}
write("comm", "watch-added", bytes([0x1b]) + ev("ADDED", comm) + secret)
write("comm", "watch-pending-then-modified",
      bytes([0x1a]) + ev("ADDED", pending) + ev("BOOKMARK", bm) + ev("MODIFIED", comm) + secret)
write("comm", "watch-gone-then-added", bytes([0x13]) + ev("ERROR", {"kind": "Status", "code": 410})
      + b"\0" + ev("ADDED", comm) + secret)
write("comm", "watch-410-status", bytes([0x12]) + b"410 " + j({"kind": "Status", "code": 410})
      + b"\0" + b"garbage\n" + ev("DELETED", comm) + ev("ADDED", comm) + secret)
unowned = copy.deepcopy(comm)
del unowned["metadata"]["ownerReferences"]
write("comm", "watch-unowned-then-owned",
      bytes([0x1b]) + ev("ADDED", unowned) + ev("MODIFIED", comm) + secret)
write("comm", "job-owner-unknown", bytes([0x0a]) + ev("ADDED", comm))
c6 = copy.deepcopy(comm)
c6["spec"]["rootEndpoint"] = "[fd00::1]:29500"
write("comm", "watch-ipv6", bytes([0x1b]) + ev("ADDED", c6) + secret)
# rank 0: the Secret first (created, or this job's adopted), then the Communicator
write("comm", "root-created", bytes([0x18]) + parts(b"201 {}", b"201 " + j(comm)))
write("comm", "root-secret-adopted", bytes([0x18]) + parts(b"409 {}", secret[1:], b"201 " + j(comm)))
other = copy.deepcopy(comm)
other["metadata"]["ownerReferences"][0]["uid"] = "old-job"
write("comm", "root-adopt", bytes([0x10]) + parts(b"201 {}", b"409 {}", j(comm)))
write("comm", "root-replace-stale",
      bytes([0x10]) + parts(b"201 {}", b"409 {}", j(other), j(comm), j(comm)))
write("comm", "root-conflict-retry",
      bytes([0x10]) + parts(b"201 {}", b"409 {}", b"404 {}", b"409 {}", j(other), b"409 {}",
                            b"201 " + j(comm)))

# ---- webhook: body, then the API's answers (input size & 1: namespace scope, & 2: API on) ----
for name in sorted(os.listdir(os.path.join(FIX, "admission"))):
    if not name.endswith((".json", ".txt")):
        continue
    with open(os.path.join(FIX, "admission", name), "rb") as f:
        body = f.read()
    try:
        body = j(json.loads(body))
    except ValueError:
        pass
    write("webhook", name.rsplit(".", 1)[0], body)
job = json.loads(json.dumps(load("kube", "job-template.json")).replace("JOB", "train"))
job["spec"]["completions"] = 4
ns = load("kube", "namespace-team-a.json")
with open(os.path.join(FIX, "admission", "pod-opted-in.json"), "rb") as f:
    body = j(json.loads(f.read()))
seed = parts(body, j(job), j(ns), j({"items": [topo]}))
while len(seed) % 4 != 2:  # the API on, pod scope
    seed += b" "
write("webhook", "pod-opted-in-with-api", seed)
seed = parts(body, b"403 {}", b"404 {}")
while len(seed) % 4 != 3:  # the API on, namespace scope
    seed += b" "
write("webhook", "pod-opted-in-api-errors", seed)

# ---- agent_reply: what the fake agent answers (frame header + JSON) ----
def frame(b):
    return struct.pack(">I", len(b)) + b


hello = {"v": 1, "type": "hello", "ok": True, "rank": 1, "nranks": 4, "is_root": False,
         "root_host": "10.0.0.1", "root_port": 29500, "interface": "eth0", "address": "10.0.0.2",
         "transport": "Socket", "secret": "00112233445566778899aabbccddeeff",
         "bootstrap_timeout_s": 60, "timeout_s": 600, "pod": "p", "node": "n", "namespace": "ml",
         "job": "train", "topology": "fabric", "library_version": "0.1.0"}
write("agent_reply", "hello", frame(j(hello)))
write("agent_reply", "error", frame(j({"v": 1, "type": "error", "code": "NetworkNotAttached",
                                       "message": "attach it"})))
write("agent_reply", "report-ack", frame(j({"v": 1, "type": "report", "ok": True})))
write("agent_reply", "length-too-long", struct.pack(">I", 1 << 30) + j(hello))
write("agent_reply", "truncated", frame(j(hello))[:40])
write("agent_reply", "not-object", frame(b"[1,2]"))

# ---- kubeconfig and standalone (YAML) ----
write("kubeconfig", "token", b"""apiVersion: v1
kind: Config
current-context: c
contexts:
- name: c
  context: {cluster: k, user: u, namespace: ml}
clusters:
- name: k
  cluster:
    server: https://10.0.0.1:6443/
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
users:
- name: u
  user: {token: abc}
""")
write("kubeconfig", "client-cert", b"""current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://k:443", certificate-authority: ca.crt}}]
users: [{name: u, user: {client-certificate-data: "QUJD", client-key-data: "REVG",
  client-certificate: c.crt, client-key: /k.key}}]
""")
write("kubeconfig", "exec", b"""current-context: c
contexts: [{name: c, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://k", insecure-skip-tls-verify: false}}]
users: [{name: u, user: {exec: {command: x}}}]
""")
write("kubeconfig", "http-server", b'{"current-context":"c","contexts":[{"name":"c","context":'
      b'{"cluster":"k"}}],"clusters":[{"name":"k","cluster":{"server":"http://k"}}]}')
write("kubeconfig", "anchors", b"""base: &b {server: "https://a"}
current-context: c
contexts: [{name: c, context: {cluster: k}}]
clusters: [{name: k, cluster: *b}]
list: [1, -2, 0x10, true, null, ~, "s", 1.5, !!str 3]
""")
write("standalone", "yaml", b"""# rank 1
nranks: 2
port: 29500
transport: Socket
bootstrapTimeoutSeconds: 30
ranks:
- {rank: 0, address: 127.0.0.1, interface: lo}
- {rank: 1, address: 127.0.0.1, interface: lo, group: rack-1}
""")
write("standalone", "json-root", b'{"job":"j","secret":"00112233445566778899aabbccddeeff",'
      b'"root":{"host":"127.0.0.1","port":"29501"},"timeoutSeconds":60,'
      b'"ranks":[{"address":"127.0.0.1"},{"interface":"lo","pod":"p","node":"n"}]}')
write("standalone", "rank-3-missing", b"# rank 3\nport: 1\nranks: [{rank: 0, address: 127.0.0.1}]\n")
write("standalone", "bad-interface", b"port: 1\nranks: [{address: 127.0.0.1}, {interface: eth9}]\n")

# ---- root and listener: scripts of the fake peer ----
rec = bytearray(640)
write("root", "one-rank", bytes([0x9c | 0x10, 0, 1]) + rec)
write("root", "two-ranks", bytes([0x9c | 0x10, 0, 2]) + rec + bytes([0x9c | 0x10, 1, 2]) + rec)
write("root", "duplicate-rank", bytes([0x9c | 0x10, 1, 2]) + rec + bytes([0x9c | 0x10, 1, 2]) + rec)
write("root", "boot-error", bytes([0x1d, 1, 2]) + b"cannot start: no GPU".ljust(640, b"\0"))
write("root", "wrong-answer", bytes([0x94, 0, 1]) + rec + bytes(32))
write("root", "protocol-2", bytes([0xa4, 0, 1]) + rec)
write("root", "stranger", b"GET / HTTP/1.1\r\n\r\n".ljust(64 + 640, b"x"))
write("root", "magic-only", bytes([0x00]) + struct.pack("<I", 0x4b434f4c))
# listener: mode, from, to, stream, nranks[, len, text]
write("listener", "data-stream", bytes([0x0c, 0, 1, 0, 4]))
write("listener", "data-two-streams", bytes([0x8c, 2, 1, 0, 4, 0x8c, 2, 1, 1, 4]))
write("listener", "data-replayed", bytes([0x8c, 0, 1, 0, 4, 0xa8, 0, 0, 0, 0]))
write("listener", "abort", bytes([0x15, 3, 1, 0, 4, 11]) + b"rank 3 died")
write("listener", "abort-replayed", bytes([0x15, 3, 1, 0, 4, 4]) + b"boom" + bytes([0x35, 0, 0, 0, 0, 4]) + b"boom")
write("listener", "stuck", bytes([0x16, 2, 1, 0, 4, 3]) + b"0 3")
write("listener", "status-bad-mac", bytes([0x07, 2, 1, 0, 4, 2]) + b"17" + bytes(16))
write("listener", "wrong-rank", bytes([0x0c, 1, 1, 0, 4, 0x0c, 0, 2, 0, 4, 0x0c, 0, 1, 5, 4]))
write("listener", "stranger", b"\x00" + b"SSH-2.0-OpenSSH\r\n".ljust(80, b"\0"))

# ---- agent_server: what a container writes on the agent's socket (frames, one connection) ----
# no pid: the harness's connections come from its own process, whose pid the agent sees
# (SO_PEERCRED), so a hello naming another pid is refused (PeerPidMismatch, a seed of its own)
hreq = {"v": 1, "type": "hello", "timeout_ms": 5000, "library_version": "0.1.0"}
with open(os.path.join(HERE, "corpus", "nccl_ipc", "request"), "rb") as f:
    nccl = f.read()
write("agent_server", "hello", frame(j(hreq)))
write("agent_server", "hello-report-nccl",
      frame(j(hreq)) + frame(j({"v": 1, "type": "report", "phase": "Ready", "ready_ranks": 4})) + nccl)
write("agent_server", "hello-report-placement", frame(j(hreq)) + frame(j(
    {"v": 1, "type": "report", "phase": "Ready",
     "placement": [{"pod": "job-0", "node": "node-a", "first": 0, "count": 2, "gpus": "0-1"},
                   {"pod": "Not_A_Pod", "first": 2, "count": 2, "gpus": "x"}],
     "placement_more": 1})))
write("agent_server", "report-failed", frame(j(
    {"v": 1, "type": "report", "phase": "Failed",
     "error": {"rank": 2, "pod": "p", "node": "n", "message": "boom"},
     "conditions": [{"type": "Reachable", "status": "False", "reason": "PeerUnreachable",
                     "message": "x"}]})))
write("agent_server", "length-zero", b"\0\0\0\0" + frame(j(hreq)))
write("agent_server", "hello-other-pid", frame(j(dict(hreq, pid=42))))
write("agent_server", "length-huge", b"\x7f\xff\xff\xff{}")
write("agent_server", "truncated", frame(j(hreq))[:30])
write("agent_server", "version-2", frame(j({"v": 2, "type": "hello"})))
write("agent_server", "unknown-type", frame(j({"v": 1, "type": "bye"})) + frame(b"[1]"))
