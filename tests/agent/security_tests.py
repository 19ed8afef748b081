#!/usr/bin/env python3
"""Issue 21, findings 7 and 8 (label security): the job secret and who may reach the agent.
    security_tests.py CASE --agent PATH/coll-agent --hello PATH/agent_hello_check [--keep]
Cases:
  secret_hidden  the job's Secret kcoll-JOB: created by rank 0 with the job as its owner, the
                 type and the secret every rank got; the Communicator names it and holds no
                 secret; the secret is in no Communicator (spec, status), Event, agent or
                 webhook log, nor in what real kubectl describe prints
  unowned        a Communicator without ownerReferences is refused (a clear WARN, then
                 CommunicatorUnowned); one naming another Secret is CommunicatorInvalid; a
                 Secret of another owner is SecretStale for rank 0 and for the others
  ipc_peer       the agent's socket admits the agent's uid and --ipc-allow-uid only
                 (SO_PEERCRED): a process of another uid is refused with PeerNotAllowed and a
                 log line naming its uid; a hello that names another pid is PeerPidMismatch
                 (needs root to change uid: SKIPPED otherwise)
  health_bind    the health port binds $POD_IP (the pod's IP, where kubelet probes) and no
                 other address; 127.0.0.1 without it; every address only when asked (a WARN)
Exit 0 pass, 1 fail, 77 skipped."""
import base64
import json
import os
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_tests  # noqa: E402
from free_port import free_port  # noqa: E402  (agent_tests put tests/ on the path)
import harness  # noqa: E402
from agent_tests import check, comm  # noqa: E402
from harness import hello, report, wait_for  # noqa: E402

def args():
    return agent_tests.ARGS


def refused(cl, pod, *words, absent=None):
    """The agent of pod (rendezvous timeout 5 s) fails its hello with every one of words in the
    message, and without absent; returns that agent."""
    a = cl.start_agent(pod, extra_args=["--rendezvous-timeout", "5"])
    rc, out = hello(args().hello, [a["sock"]], timeout_ms=20000)
    print(out.strip())
    check(rc != 0 and all(w in out for w in words) and (absent is None or absent not in out),
          "refused naming %s: %s" % (", ".join(words), out.strip()[-400:]))
    return a


def secrets(cl, name):
    return [s for s in cl.objects("secrets") if s["metadata"]["name"] == name]


def case_secret_hidden(cl):
    uid, pods = cl.add_job("train", 4)
    agents = [cl.start_agent(p) for p in pods]
    rc, out = hello(args().hello, [a["sock"] for a in agents], check=4, timeout_ms=30000)
    print(out.strip())
    check(rc == 0, "bootstrap")
    got = {line.split("secret=")[1].split()[0] for line in out.splitlines() if "secret=" in line}
    check(len(got) == 1, "every rank got one secret (%s)" % got)
    secret = got.pop()
    check(len(secret) == 32, "a 128-bit secret")

    s = secrets(cl, "kcoll-train")
    check(len(s) == 1, "rank 0 created Secret kcoll-train")
    s = s[0]
    refs = s["metadata"].get("ownerReferences", [])
    check(refs and refs[0]["uid"] == uid and refs[0]["kind"] == "Job" and
          refs[0]["name"] == "train" and refs[0]["apiVersion"] == "batch/v1",
          "the Secret is owned by the Job, like the Communicator (%s)" % refs)
    check(s.get("type") == "kcoll.io/job-secret" and
          s["metadata"].get("labels", {}).get("kcoll.io/job") == "train", "type and label")
    check(base64.b64decode(s["data"]["secret"]).decode() == secret,
          "the Secret holds the secret every rank was served")

    # an error so that status, lastError and Events are written too
    report(args().hello, agents[0]["sock"], "Ready")
    report(args().hello, agents[2]["sock"], "Ready")
    rc, _ = report(args().hello, agents[2]["sock"], "Degraded",
                   error="connection to rank 3 reset during all_reduce")
    check(rc == 0, "report")
    wait_for(lambda: (comm(cl, "train").get("status") or {}).get("lastError"), 20, "lastError")
    wait_for(lambda: [e for e in cl.objects("events")
                      if e["involvedObject"]["kind"] == "Communicator"], 20, "Event")
    c = comm(cl, "train")
    check(c["spec"].get("secretName") == "kcoll-train" and "secret" not in c["spec"],
          "the Communicator names the Secret and holds no secret (%s)" % sorted(c["spec"]))
    check(c["metadata"]["ownerReferences"][0]["uid"] == uid, "Communicator owned by the Job")
    places = {"the Communicator": json.dumps(c), "Events": json.dumps(cl.objects("events"))}
    for a in agents:
        places["log of " + a["pod"]] = cl.agent_log(a)
    cl.webhook_log.flush()
    with open(cl.webhook_log.name) as f:
        places["the webhook's log"] = f.read()
    for where, text in places.items():
        check(secret not in text.lower(), "the secret appears in " + where)
    kubectl = harness.find_kubectl()
    if kubectl:
        env = dict(os.environ, KUBECONFIG=cl.kubeconfig(), HOME=cl.dir)
        for cmd in (["describe", "communicator", "train"],
                    ["get", "communicator", "train", "-o", "yaml"]):
            r = subprocess.run([kubectl] + cmd, capture_output=True, text=True, env=env,
                               timeout=60)
            check(r.returncode == 0 and "kcoll-train" in r.stdout and
                  secret not in r.stdout.lower(),
                  "kubectl %s shows the Secret's name, not the secret" % " ".join(cmd))
    else:
        print("kubectl not found: its output not checked")

    # a kcoll.io/job label renames the job, not its owner: the Secret and the Communicator are
    # named after the label and owned by the Job by the Job's own name (an ownerReference whose
    # name does not match its uid would have the garbage collector delete them at once)
    def renamed(i, p):
        p["metadata"]["labels"]["kcoll.io/job"] = "renamed"
    uid, pods = cl.add_job("bar", 2, pod_edit=renamed)
    agents = [cl.start_agent(p) for p in pods]
    rc, out = hello(args().hello, [a["sock"] for a in agents], check=2, timeout_ms=30000)
    check(rc == 0, "a job renamed by its label: " + out)
    for obj in (comm(cl, "renamed"), secrets(cl, "kcoll-renamed")[0]):
        ref = obj["metadata"]["ownerReferences"][0]
        check(ref["name"] == "bar" and ref["uid"] == uid,
              "%s owned by Job bar by its name and uid (%s)" % (obj["kind"], ref))


def communicator(name, spec, owner_uid=None):
    meta = {"name": name, "namespace": "team-a"}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                    "uid": owner_uid}]
    return {"apiVersion": "kcoll.io/v1alpha1", "kind": "Communicator", "metadata": meta,
            "spec": dict({"jobName": name, "nranks": 2, "topology": "team-a-loopback"}, **spec)}


def case_unowned(cl):
    # 1. a Communicator nobody owns, published as rank 0 would: refused by rank 1
    _, pods = cl.add_job("orphan", 2)
    cl.add(communicator("orphan", {"rootEndpoint": "10.9.9.9:1", "secretName": "kcoll-orphan"}))
    a1 = refused(cl, pods[1], "CommunicatorUnowned", "no ownerReferences", absent="10.9.9.9")
    check("AGENT-RDV-UNOWNED" in cl.agent_log(a1) and
          "has no ownerReferences: refused" in cl.agent_log(a1), "and the agent says so at once")

    # 2. owned by the job but naming another Secret: refused, the right name in the message
    uid, pods = cl.add_job("wrongname", 2)
    cl.add(communicator("wrongname", {"rootEndpoint": "127.0.0.1:1",
                                      "secretName": "kcoll-../../other"}, uid))
    refused(cl, pods[1], "CommunicatorInvalid", "kcoll-wrongname")

    # 3. a Secret kcoll-JOB of another owner (an earlier job's, not yet garbage-collected, or
    # made by hand): rank 0 waits for it to go, then fails naming it; never takes it
    uid, pods = cl.add_job("stale", 2)
    cl.add({"apiVersion": "v1", "kind": "Secret", "type": "kcoll.io/job-secret",
            "metadata": {"name": "kcoll-stale", "namespace": "team-a", "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "stale",
                 "uid": "00000000-dead-beef-0000-000000000000"}]},
            "data": {"secret": base64.b64encode(b"ab" * 16).decode()}})
    refused(cl, pods[0], "SecretStale", "kubectl delete secret -n team-a kcoll-stale",
            absent="abab")
    check(comm(cl, "stale") is None, "no Communicator published with another job's secret")
    # the other ranks check the owner too (a Communicator of this job, a Secret of another)
    cl.add(communicator("stale", {"rootEndpoint": "127.0.0.1:1", "secretName": "kcoll-stale"},
                        uid))
    refused(cl, pods[1], "SecretStale", "not by this job", absent="abab")


def ask_as(sock, uid, msg):
    """msg on sock from a child process running as uid (its own pid in the message when msg
    says "self"); the reply, or {"child_error": ...}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            m = dict(msg, pid=os.getpid()) if msg.get("pid") == "self" else msg
            os.write(w, json.dumps(agent_tests.rpc(sock, json.dumps(m).encode())).encode())
        except Exception as e:  # noqa: BLE001 - the parent reports what the child met
            os.write(w, json.dumps({"child_error": repr(e)}).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while True:
        chunk = os.read(r, 65536)
        if not chunk:
            break
        data += chunk
    os.close(r)
    os.waitpid(pid, 0)
    return json.loads(data)


def case_ipc_peer(cl):
    if os.geteuid() != 0:
        harness.skip("changing uid needs root (CI runs as root)")
    topo = os.path.join(cl.dir, "topo.yaml")
    with open(topo, "w") as f:
        f.write("job: peer\nport: 29556\nsecret: 00112233445566778899aabbccddeeff\n"
                "ranks:\n  - {rank: 0, address: 127.0.0.1, interface: lo}\n")
    os.chmod(cl.dir, 0o755)
    a = cl.start_agent("peer-0", extra_args=["--topology", topo, "--rank", "0",
                                             "--ipc-allow-uid", "65533"], tag="peer")
    wait_for(lambda: os.path.exists(a["sock"]), 10, "the agent's socket")
    check((os.stat(a["sock"]).st_mode & 0o777) == 0o666,
          "with other uids allowed the socket is open to all and SO_PEERCRED decides")
    hello_msg = {"v": 1, "type": "hello", "timeout_ms": 10000, "pid": "self"}
    r = ask_as(a["sock"], 65534, hello_msg)
    print("uid 65534:", r)
    check(r.get("type") == "error" and r.get("code") == "PeerNotAllowed" and
          "secret" not in r and "uid 65534" in r.get("error", ""),
          "a process of another uid is refused, and gets no facts")
    wait_for(lambda: "AGENT-IPC-PEER-REFUSED" in cl.agent_log(a), 10, "the refusal's log line")
    line = [x for x in cl.agent_log(a).splitlines() if "AGENT-IPC-PEER-REFUSED" in x][0]
    check("uid 65534" in line and "65533" in line and "COLL_AGENT_IPC_ALLOW_UIDS" in line,
          "the log line names the uid, the allowed ones and the fix: " + line)
    r = ask_as(a["sock"], 65533, hello_msg)
    print("uid 65533:", {k: r.get(k) for k in ("type", "ok", "rank", "code")})
    check(r.get("type") == "hello" and r.get("ok") is True and
          r.get("secret") == "00112233445566778899aabbccddeeff", "an allowed uid gets the facts")
    rc, out = hello(args().hello, [a["sock"]], timeout_ms=10000)
    check(rc == 0, "the agent's own uid (root here) is admitted: " + out)
    r = ask_as(a["sock"], 65533, dict(hello_msg, pid=1))
    print("pid 1 claimed:", r)
    check(r.get("code") == "PeerPidMismatch" and "secret" not in r,
          "a hello that names another process's pid is refused")
    check(a["proc"].poll() is None, "the agent lives")


def answers(host, port):
    try:
        with urllib.request.urlopen("http://%s:%d/healthz" % (host, port), timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def case_health_bind(cl):
    topo = os.path.join(cl.dir, "topo.yaml")
    with open(topo, "w") as f:
        f.write("job: hb\nport: 29557\nsecret: 00112233445566778899aabbccddeeff\n"
                "ranks:\n  - {rank: 0, address: 127.0.0.1, interface: lo}\n")
    # in a pod: the pod's IP (POD_IP, from status.podIP), no other address
    port = free_port()
    a = cl.start_agent("hb-0", extra_args=["--topology", topo, "--rank", "0", "--health-port",
                                           str(port)], env={"POD_IP": "127.0.0.2"}, tag="hb0")
    wait_for(lambda: answers("127.0.0.2", port), 10, "/healthz on the pod IP")
    check(not answers("127.0.0.1", port), "the health port answers on another address too")
    check("health on 127.0.0.2 port %d" % port in cl.agent_log(a), "the log names the address")
    # outside a pod: this host only
    port = free_port()
    a = cl.start_agent("hb-1", extra_args=["--topology", topo, "--rank", "0", "--health-port",
                                           str(port)], tag="hb1")
    wait_for(lambda: answers("127.0.0.1", port), 10, "/healthz on 127.0.0.1")
    check(not answers("127.0.0.2", port), "without POD_IP the health port is not on 127.0.0.2")
    # every address only when asked, with a warning
    port = free_port()
    a = cl.start_agent("hb-2", extra_args=["--topology", topo, "--rank", "0", "--health-port",
                                           str(port), "--health-addr", "0.0.0.0"], tag="hb2")
    wait_for(lambda: answers("127.0.0.2", port), 10, "/healthz on every address")
    check("WARN AGENT-HTTP-LISTEN" in cl.agent_log(a), "0.0.0.0 is warned about")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    sys.exit(agent_tests.main(CASES))
