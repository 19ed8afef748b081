#!/usr/bin/env python3
"""End-to-end tests: library processes (tests/e2e/e2e_check.c) create their communicator through
coll-agent, as the ranks of a pod do, and run checked collectives.

    e2e_tests.py CASE --coll-run PATH --agent PATH --check PATH [--keep]

Cases:
  standalone    coll-run -n 4 --agent: all_reduce / all_gather / broadcast checked on every rank;
                with --pin-version 9.9.9 every rank fails with ERR_VERSION naming both versions
  k8s64         64 agents of one Indexed Job against the fake API server, 64 library processes
                (one per agent), checked collectives, then the Communicator's status is Ready
  version_pin   a CollectiveTopology pinning libraryVersion 9.9.9: every rank fails with
                ERR_VERSION naming both versions; the Communicator is Failed with that message;
                real `kubectl describe communicator` shows it
  rank_failure  4 ranks against the fixture; one is SIGKILLed mid all_reduce; the survivors fail
                naming it; the Communicator's lastError names it and `kubectl describe` shows it
  attachment_missing  8 ranks; rank 5's pod lacks the pinned Multus attachment: the Communicator
                names rank 5, its pod and the cause; the ranks that waited are not unhealthy
  attachment_missing_root  the same for rank 0's pod (it creates the Communicator to fail)
  iface_missing rank 1's pinned interface is missing (standalone agents, then one pod of a
                Kubernetes job): every rank fails within seconds naming rank 1, its pod or host
                and the interface

Every case prints one line per assertion and a closing `N passed, M failed` line. Exit 0 when
everything passed, 1 otherwise, 77 (skipped, with the reason) when a prerequisite is missing.
python3 standard library only; the Kubernetes cases reuse tests/agent/harness.py.
"""
import argparse
import copy
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "agent"))
sys.path.insert(0, os.path.dirname(HERE))
import harness  # noqa: E402
from free_port import free_port  # noqa: E402

SKIP = 77
ARGS = None


class Checks:
    """Counts assertions instead of stopping at the first one, so a run says all it can."""

    def __init__(self):
        self.passed = 0
        self.failed = 0

    def __call__(self, cond, what, detail=""):
        if cond:
            self.passed += 1
            print("ok   " + what)
        else:
            self.failed += 1
            print("FAIL " + what)
            if detail:
                print("     " + detail.replace("\n", "\n     "))
        sys.stdout.flush()
        return bool(cond)


class Skip(Exception):
    pass


def library_version():
    r = subprocess.run([ARGS.check, "--version"], capture_output=True, text=True, timeout=30)
    if r.returncode != 0 or not r.stdout.strip():
        raise RuntimeError("%s --version failed: %s" % (ARGS.check, r.stderr))
    return r.stdout.strip()


def topology(name, version, boot_s=60, timeout_s=60):
    """The fixture's loopback topology (network team-a/lo-net = lo/127.0.0.1, Socket) with the
    given library pin and timeouts."""
    t = copy.deepcopy(harness.fixture("topology-train.json"))
    t["metadata"]["name"] = name
    t["spec"]["libraryVersion"] = version
    t["spec"]["bootstrapTimeoutSeconds"] = boot_s
    t["spec"]["timeoutSeconds"] = timeout_s
    return t


def rank_env(sock):
    """A pod's environment as the webhook leaves it: COLL_AGENT_SOCKET, no launcher variables."""
    e = dict(os.environ)
    for k in ("COLL_UNIQUE_ID", "COLL_RANK", "COLL_NRANKS", "COLL_LOCAL_RANK",
              "COLL_SOCKET_IFNAME", "COLL_TIMEOUT", "COLL_BOOTSTRAP_TIMEOUT", "LOCAL_RANK",
              "LOCAL_WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT"):
        e.pop(k, None)
    e["COLL_AGENT_SOCKET"] = sock
    return e


class Ranks:
    """Library processes, one per agent socket, output in files (64 pipes could fill up)."""

    def __init__(self, cl, socks, args, env=None, envs=None):
        """envs: one dict per process on top of env (a pod's LOCAL_RANK, ...)."""
        self.procs, self.logs = [], []
        for i, sock in enumerate(socks):
            path = os.path.join(cl.dir, "rank-%d.log" % i)
            f = open(path, "w")
            self.logs.append(path)
            self.procs.append(subprocess.Popen([ARGS.check] + list(args),
                                               env=dict(rank_env(sock), **(env or {}),
                                                        **(envs[i] if envs else {})),
                                               stdout=f, stderr=subprocess.STDOUT,
                                               stdin=subprocess.DEVNULL))
            f.close()

    def output(self, i):
        with open(self.logs[i], errors="replace") as f:
            return f.read()

    def wait(self, timeout):
        """Exit codes (None for a process still running at the deadline, which is killed)."""
        deadline = time.time() + timeout
        codes = []
        for p in self.procs:
            try:
                codes.append(p.wait(timeout=max(0.1, deadline - time.time())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        self.kill()
        return codes

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


def comm_status(cl, name):
    for o in cl.objects("communicators"):
        if o["metadata"]["name"] == name:
            return o.get("status") or {}
    return {}


def wait_status(cl, name, pred, timeout):
    deadline = time.time() + timeout
    st = {}
    while time.time() < deadline:
        st = comm_status(cl, name)
        if pred(st):
            return st, True
        time.sleep(0.1)
    return st, False


def comm_event_reasons(cl, timeout):
    """Sorted reasons of the Events on Communicators, once there is one (or after timeout)."""
    deadline = time.time() + timeout
    while True:
        reasons = sorted({e["reason"] for e in cl.objects("events")
                          if e["involvedObject"]["kind"] == "Communicator"})
        if reasons or time.time() >= deadline:
            return reasons
        time.sleep(0.1)


def tail(text, n=3000):
    return text[-n:]


# ---------------------------------------------------------------------------------------------
def case_standalone(ck, _cl):
    """coll-run -n 4 --agent with the checker; then a pin this library does not match."""
    n = 4
    t0 = time.time()
    r = subprocess.run([ARGS.coll_run, "-n", str(n), "--timeout", "120", "--agent=" + ARGS.agent,
                        ARGS.check, "--count", "262144"], capture_output=True, text=True,
                       timeout=180, stdin=subprocess.DEVNULL)
    print("coll-run -n 4 --agent e2e_check: exit %d in %.1f s" % (r.returncode, time.time() - t0))
    out, err = r.stdout, r.stderr
    ck(r.returncode == 0, "coll-run exits 0", tail(out + err))
    for rank in range(n):
        for want in ("init ok rank=%d nranks=%d" % (rank, n), "all_reduce ok count=7",
                     "all_reduce ok count=262144", "all_gather ok per_rank=65536",
                     "broadcast ok count=262144 root=3", "done rank=%d" % rank):
            ck("[rank %d] %s" % (rank, want) in out.splitlines(),
               "rank %d: %s" % (rank, want))
    ck("WRONG" not in out, "no wrong element on any rank")
    for rank in range(n):
        ck(re.search(r"^\[agent %d\] .* AGENT-STANDALONE rank %d of %d " % (rank, rank, n), err,
                     re.M), "agent %d served rank %d of %d from the topology" % (rank, rank, n))
        ck(re.search(r"^\[agent %d\] .* AGENT-REPORT library report: phase=Ready" % rank, err,
                     re.M), "rank %d reported Ready to its agent" % rank)

    version = library_version()
    r = subprocess.run([ARGS.coll_run, "-n", "2", "--timeout", "60", "--agent=" + ARGS.agent,
                        "--pin-version", "9.9.9", ARGS.check], capture_output=True, text=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    out = r.stdout
    ck(r.returncode == 3, "pin 9.9.9: coll-run exits with the first failing rank's status 3",
       "exit %d\n%s" % (r.returncode, tail(out + r.stderr)))
    # coll-run stops the other rank as soon as one fails, so only the first may get to print
    lines = [x for x in out.splitlines() if re.match(r"^\[rank \d\] init failed", x)]
    ck(lines and all("result=ERR_VERSION" in x and "runs kcoll %s" % version in x and
                     "pins 9.9.9" in x for x in lines),
       "pin 9.9.9: the failing rank's coll_comm_init_agent gives ERR_VERSION naming %s and "
       "9.9.9" % version, tail(out))
    ck(re.search(r"^coll-run: rank \d \(pid \d+\) exited with status 3", r.stderr, re.M),
       "pin 9.9.9: coll-run names the failing rank", tail(r.stderr))
    if lines:
        print(lines[0])


def case_k8s64(ck, cl):
    """64 agents of one Indexed Job, 64 library processes, checked collectives, status Ready."""
    n = 64
    version = library_version()
    cl.add(topology("e2e-loopback", version))
    _, pods = cl.add_job("e2e64", n)
    t0 = time.time()
    agents = [cl.start_agent(p) for p in pods]
    ranks = Ranks(cl, [a["sock"] for a in agents], ["--count", "16384"])
    codes = ranks.wait(120)
    elapsed = time.time() - t0
    print("64 agents + 64 ranks: collectives done in %.1f s" % elapsed)
    ok = [i for i, c in enumerate(codes) if c == 0]
    ck(len(ok) == n, "all 64 library processes exit 0 (%d did)" % len(ok),
       "" if len(ok) == n else "exit codes %s\nfirst failure:\n%s" % (
           codes, tail(ranks.output(next(i for i, c in enumerate(codes) if c != 0)))))
    seen = {}
    for i in range(n):
        m = re.search(r"^init ok rank=(\d+) nranks=(\d+)$", ranks.output(i), re.M)
        if m:
            seen[i] = (int(m.group(1)), int(m.group(2)))
    ck(all(seen.get(i) == (i, n) for i in range(n)),
       "the agent of completion index i gives rank i of 64, for every i",
       "got %s" % {k: v for k, v in seen.items() if v != (k, n)})
    good = sum(1 for i in range(n) if all(w in ranks.output(i) for w in (
        "all_reduce ok count=7", "all_reduce ok count=16384", "all_gather ok per_rank=256",
        "broadcast ok count=16384 root=63")) and "WRONG" not in ranks.output(i))
    ck(good == n, "all_reduce, all_gather and broadcast results checked on %d of 64 ranks" % good)
    st, ready = wait_status(cl, "e2e64", lambda s: s.get("phase") == "Ready", 30)
    print("Communicator e2e64 status: %s" % json.dumps(
        {k: st.get(k) for k in ("phase", "readyRanks", "nranks", "unhealthyCount")}))
    ck(ready, "the Communicator's status.phase is Ready", json.dumps(st)[:2000])
    ck(st.get("readyRanks") == n, "status.readyRanks is 64 (%s)" % st.get("readyRanks"))
    # the transports rank 0 uses, as its library reported them: every rank runs on this machine
    ck(st.get("transport") == "shared memory (%d peers)" % (n - 1),
       "status.transport is rank 0's (%s)" % st.get("transport"))
    conds = {c["type"]: c["status"] for c in st.get("conditions", [])}
    ck(all(conds.get(t) == "True" for t in ("VersionsConsistent", "NetworkConsistent",
                                            "Reachable", "Healthy")),
       "conditions VersionsConsistent, NetworkConsistent, Reachable, Healthy are True",
       json.dumps(conds))
    ck(elapsed < 60, "64-rank bootstrap and collectives within 60 s (%.1f s)" % elapsed)


def case_version_pin(ck, cl):
    """libraryVersion 9.9.9 pinned by the topology: ERR_VERSION everywhere, Failed status."""
    n = 4
    version = library_version()
    cl.add(topology("e2e-pin", "9.9.9"))
    _, pods = cl.add_job("e2epin", n)
    agents = [cl.start_agent(p) for p in pods]
    ranks = Ranks(cl, [a["sock"] for a in agents], [])
    codes = ranks.wait(60)
    ck(codes == [3] * n, "every rank's coll_comm_init_agent fails (exit 3): %s" % codes)
    msg = ""
    for i in range(n):
        out = ranks.output(i)
        line = [x for x in out.splitlines() if x.startswith("init failed")]
        good = (line and "result=ERR_VERSION" in line[0] and
                "runs kcoll %s" % version in line[0] and "pins 9.9.9" in line[0])
        ck(good, "rank %d: ERR_VERSION naming this library's %s and the pin 9.9.9" % (i, version),
           tail(out))
        if good and not msg:
            msg = line[0]
    print(msg)
    st, failed = wait_status(cl, "e2epin", lambda s: s.get("phase") == "Failed" and (
        s.get("lastError") or {}).get("message"), 30)
    err = (st.get("lastError") or {}).get("message", "")
    print("Communicator e2epin status: %s" % json.dumps(
        {k: st.get(k) for k in ("phase", "lastError", "unhealthyCount")}))
    ck(failed, "the Communicator's status.phase is Failed", json.dumps(st)[:2000])
    time.sleep(1.0)  # the root's own "Bootstrapping" write may come after the ranks' failures
    st = comm_status(cl, "e2epin")
    ck(st.get("phase") == "Failed", "status.phase stays Failed (the root's later Bootstrapping "
       "does not hide this bootstrap's failure)", json.dumps(st)[:2000])
    ck("9.9.9" in err and version in err and "version mismatch" in err,
       "status.lastError.message names both versions", err)
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    vc = conds.get("VersionsConsistent") or {}
    ck(vc.get("status") == "False" and vc.get("reason") == "VersionMismatch",
       "condition VersionsConsistent=False with reason VersionMismatch", json.dumps(vc))
    reasons = comm_event_reasons(cl, 10)  # the agents post Events after their status writes
    print("Event reasons on the Communicator: %s" % reasons)
    ck(reasons == ["KcollBootstrapFailed"],
       "a failure before Ready is reported as KcollBootstrapFailed", str(reasons))
    r = cl.kubectl_describe("e2epin")
    if r is None:
        raise Skip("kubectl v1.33+ not found in PATH or .deps/bin (scripts/setup.sh installs it); "
                   "the rest of the case ran")
    print(r.stdout)
    ck(r.returncode == 0, "kubectl describe communicator e2epin exits 0", r.stderr[-2000:])
    ck(re.search(r"^\s*Phase:\s+Failed\s*$", r.stdout, re.M), "kubectl describe shows Phase Failed")
    ck("pins 9.9.9" in r.stdout and "runs kcoll %s" % version in r.stdout,
       "kubectl describe shows the version mismatch message")


def case_rank_failure(ck, cl):
    """A rank SIGKILLed mid all_reduce after Ready: survivors fail naming it; status says so."""
    n, victim = 4, 2
    version = library_version()
    cl.add(topology("e2e-fail", version, timeout_s=30))
    _, pods = cl.add_job("e2efail", n)
    agents = [cl.start_agent(p) for p in pods]
    # 4 Mi floats (16 MiB) per all_reduce: each takes tens of milliseconds, so one is in flight
    # whenever the victim is killed.
    ranks = Ranks(cl, [a["sock"] for a in agents], ["--mode", "loop", "--count", "4194304"])
    deadline = time.time() + 60
    while time.time() < deadline:
        if all("looping rank=" in ranks.output(i) for i in range(n)):
            break
        if any(p.poll() is not None for p in ranks.procs):
            break
        time.sleep(0.1)
    looping = all("looping rank=" in ranks.output(i) for i in range(n))
    ck(looping, "4 ranks are running all_reduce in a loop",
       "\n".join(tail(ranks.output(i), 800) for i in range(n)))
    st, ready = wait_status(cl, "e2efail", lambda s: s.get("phase") == "Ready", 20)
    ck(ready, "the Communicator is Ready before the failure", json.dumps(st)[:1000])
    if not looping:
        ranks.kill()
        return
    time.sleep(0.3)
    t0 = time.time()
    ranks.procs[victim].send_signal(signal.SIGKILL)
    time.sleep(0.5)  # the kubelet's part: the victim's container OOMKilled at its 8Gi limit
    cl.kubelet_ends(pods[victim]["metadata"]["name"], {"exitCode": 137, "reason": "OOMKilled",
                    "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, "8Gi")
    codes = ranks.wait(60)
    print("survivors finished %.1f s after the SIGKILL: exit codes %s" % (time.time() - t0, codes))
    ck(codes[victim] == -signal.SIGKILL, "rank %d was killed by SIGKILL" % victim)
    for i in range(n):
        if i == victim:
            continue
        out = ranks.output(i)
        line = [x for x in out.splitlines() if x.startswith("collective failed")]
        ck(codes[i] == 4 and line and "op=all_reduce" in line[0],
           "rank %d: its all_reduce fails (exit %s)" % (i, codes[i]), tail(out))
        ck(line and re.search(r"\brank %d\b" % victim, line[0]),
           "rank %d: the error names rank %d" % (i, victim), line[0] if line else "")
        ck("kubectl describe communicator e2efail -n team-a shows this failure for the whole "
           "job, and why rank %d (pod %s) ended" % (victim, pods[victim]["metadata"]["name"]) in
           out, "rank %d: its log says where to look for why rank %d ended" % (i, victim))
        if line:
            print("rank %d: %s" % (i, line[0]))
    st, named = wait_status(cl, "e2efail", lambda s: re.search(
        r"\brank %d\b" % victim, (s.get("lastError") or {}).get("message", "")), 30)
    print("Communicator e2efail status: %s" % json.dumps(
        {k: st.get(k) for k in ("phase", "readyRanks", "lastError", "unhealthyCount",
                                "unhealthyMembers")}))
    last = st.get("lastError") or {}
    ck(named, "status.lastError.message names rank %d" % victim, json.dumps(last))
    # the survivors blame the dead rank: the status names it, its pod and its node (from its
    # member record), not the survivor that happened to write last
    vpod, vnode = pods[victim]["metadata"]["name"], pods[victim]["spec"]["nodeName"]
    ck(last.get("rank") == victim and last.get("pod") == vpod and last.get("node") == vnode,
       "status.lastError names rank %d, pod %s, node %s" % (victim, vpod, vnode),
       json.dumps(last))
    members = st.get("unhealthyMembers") or []
    ck([m.get("rank") for m in members] == [victim] and st.get("unhealthyCount") == 1 and
       members[0].get("pod") == vpod,
       "status.unhealthyMembers is the dead rank alone (count %s)" % st.get("unhealthyCount"),
       json.dumps(members)[:1000])
    ck(st.get("readyRanks") == n - 1, "status.readyRanks drops to %d (%s)" % (n - 1,
                                                                         st.get("readyRanks")))
    ck(st.get("phase") in ("Failed", "Degraded"), "status.phase is Failed or Degraded (%s)"
       % st.get("phase"))
    healthy = {c.get("type"): c for c in st.get("conditions") or []}.get("Healthy") or {}
    ck(healthy.get("status") == "False" and healthy.get("reason") in (
        "PeerFailed", "PeerUnreachable", "CollectiveTimeout"),
       "condition Healthy=False with the failure's class as its reason", json.dumps(healthy))
    def cause_of(s):  # why it ended: the writer agent reads the victim's pod
        return (s.get("unhealthyMembers") or [{}])[0].get("cause") or ""
    st, told = wait_status(cl, "e2efail", lambda s: "OOMKilled" in cause_of(s), 30)
    cause = cause_of(st)
    print("%.1f s after the SIGKILL, the status says why: %s" % (time.time() - t0, cause))
    ck(told and "container trainer was OOMKilled (exit code 137)" in cause and "memory limit of "
       "8Gi" in cause and (st.get("lastError") or {}).get("cause") == cause, "status.unhealthy"
       "Members[0].cause and lastError.cause: the victim's container was OOMKilled at its 8Gi "
       "limit", json.dumps({k: st.get(k) for k in ("unhealthyMembers", "lastError")})[:1500])
    ck(wait_status(cl, "e2efail", lambda _: "KcollFailureCause" in comm_event_reasons(cl, 0),
                   10)[1], "an Event KcollFailureCause on the Communicator")
    r = cl.kubectl_describe("e2efail")
    if r is None:
        raise Skip("kubectl v1.33+ not found in PATH or .deps/bin (scripts/setup.sh installs it); "
                   "the rest of the case ran")
    print(r.stdout)
    ck(r.returncode == 0, "kubectl describe communicator e2efail exits 0", r.stderr[-2000:])
    ck(re.search(r"^\s*Phase:\s+(Failed|Degraded)\s*$", r.stdout, re.M),
       "kubectl describe shows Phase Failed or Degraded")
    ck(re.search(r"\brank %d\b" % victim, r.stdout[r.stdout.find("Last Error"):]),
       "kubectl describe's Last Error names rank %d" % victim)
    ck(re.search(r"^\s*Cause:\s+container trainer was OOMKilled", r.stdout, re.M) and
       re.search(r"KcollFailureCause\s.*OOMKilled", r.stdout),
       "kubectl describe shows the cause, in the status and in the Events")



def case_attachment_missing(ck, cl):
    """Issue 21: rank 5's pod lacks the pinned network attachment (its Multus network-status has
    only the default network). The Communicator names rank 5, its pod and the cause
    (NetworkConsistent False, reason NetworkNotAttached; lastError names the pod and the
    attachment); the ranks that waited for it are not listed unhealthy, and no Event lands on
    their pods."""
    attachment_missing(ck, cl, 5)


def case_attachment_missing_root(ck, cl):
    """As attachment_missing, for rank 0's pod: its agent creates the Communicator on its pod IP
    (the pinned network is missing) only to fail the others, and writes its own cause there."""
    attachment_missing(ck, cl, 0)


def attachment_missing(ck, cl, culprit):
    n = 8
    cl.add(topology("e2e-attach", library_version(), boot_s=15))
    default_only = [x for x in harness.fixture("network-status-lo.json") if x.get("default")]

    def strip(i, p):
        if i == culprit:
            p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"] = json.dumps(
                default_only)
            # the bootstrap root on the pod's own IP (bindable here, as in a real pod)
            p.setdefault("status", {})["podIP"] = "127.0.0.1"
    _, pods = cl.add_job("e2eattach", n, pod_edit=strip)
    agents = [cl.start_agent(p) for p in pods]
    ranks = Ranks(cl, [a["sock"] for a in agents], ["--count", "1024"])
    codes = ranks.wait(90)
    print("exit codes %s" % codes)
    ck(all(c not in (0, None) for c in codes), "every rank fails (%s)" % codes)
    cpod, cnode = pods[culprit]["metadata"]["name"], pods[culprit]["spec"]["nodeName"]
    print("rank %d: %s" % (culprit, tail(ranks.output(culprit), 600)))

    st, named = wait_status(cl, "e2eattach", lambda s: s.get("phase") == "Failed" and (
        s.get("lastError") or {}).get("rank") == culprit, 30)
    time.sleep(7)  # the waiting ranks' reports are written, and the backups look, by now
    st = comm_status(cl, "e2eattach")
    last = st.get("lastError") or {}
    print("Communicator e2eattach status: %s" % json.dumps(
        {k: st.get(k) for k in ("phase", "lastError", "unhealthyCount", "unhealthyMembers",
                                "conditions")})[:3000])
    ck(named and last.get("rank") == culprit and last.get("pod") == cpod and
       last.get("node") == cnode, "status.lastError names rank %d, pod %s, node %s"
       % (culprit, cpod, cnode), json.dumps(last))
    ck("team-a/lo-net" in last.get("message", "") and "not attached" in last.get("message", ""),
       "status.lastError.message names the attachment team-a/lo-net and the cause",
       last.get("message", ""))
    ck(last.get("reason") == "NetworkNotAttached", "status.lastError.reason is NetworkNotAttached",
       json.dumps(last))
    conds = {c.get("type"): c for c in st.get("conditions") or []}
    nc = conds.get("NetworkConsistent") or {}
    ck(nc.get("status") == "False" and nc.get("reason") == "NetworkNotAttached" and
       cpod in nc.get("message", ""), "condition NetworkConsistent=False, reason "
       "NetworkNotAttached, its message names pod %s" % cpod, json.dumps(nc))
    members = st.get("unhealthyMembers") or []
    ck([(m.get("rank"), m.get("pod")) for m in members] == [(culprit, cpod)] and
       st.get("unhealthyCount") == 1, "status.unhealthyMembers is rank %d (pod %s) alone, "
       "unhealthyCount 1: the ranks that waited for it are healthy" % (culprit, cpod),
       json.dumps(members)[:1500])
    pod_events = sorted({(e["involvedObject"]["name"], e["reason"]) for e in cl.objects("events")
                         if e["involvedObject"]["kind"] == "Pod"})
    print("pod Events: %s" % pod_events)
    ck(pod_events == [(cpod, "KcollNetworkNotAttached")],
       "the only pod Event is KcollNetworkNotAttached on pod %s" % cpod, str(pod_events))
    reasons = comm_event_reasons(cl, 5)
    print("Event reasons on the Communicator: %s" % reasons)
    ck("KcollNetworkNotAttached" in reasons, "the Communicator has a KcollNetworkNotAttached "
       "Event", str(reasons))


def case_topology_order(ck, cl):
    """A CollectiveTopology with topologyKey: each agent reads its Node's rack label, and the
    library orders its rings by rack (ranks 0 2 on rack-a, 1 3 on rack-b: ring 0 2 1 3), says so
    at INFO, and its collectives are still exact. A node without the label is a warning."""
    n, key = 4, "kcoll.test/rack"
    # the chart grants get on nodes when a topology uses topologyKey (rbac.readNodes)
    cl.control("/allow", harness.chart_agent_rules(read_nodes=True))
    version = library_version()
    t = topology("e2e-racks", version)
    t["spec"]["topologyKey"] = key
    cl.add(t)
    for i in range(n):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "rack-node-%d" % i,
                                                                 "labels": {}}}
        node["metadata"]["labels"][key] = "rack-" + "ab"[i % 2]
        cl.add(node)

    def on_own_node(i, p):
        p["spec"]["nodeName"] = "rack-node-%d" % i
    _, pods = cl.add_job("e2eracks", n, pod_edit=on_own_node)
    agents = [cl.start_agent(p) for p in pods]
    ranks = Ranks(cl, [a["sock"] for a in agents], ["--count", "65536"],
                  env={"COLL_DEBUG": "INFO", "COLL_DEBUG_SUBSYS": "INIT"})
    codes = ranks.wait(120)
    ck(codes == [0] * n, "all %d ranks exit 0 (%s)" % (n, codes),
       "" if codes == [0] * n else tail(ranks.output(next(i for i, c in enumerate(codes)
                                                           if c != 0))))
    for i in range(n):
        out = ranks.output(i)
        m = re.search(r"ring order by \(topology group, host, rank\): 2 groups; this rank's "
                      r'group "([^"]*)"; ring ([0-9 ]+)', out)
        ck(m and m.group(1) == "rack-" + "ab"[i % 2] and m.group(2).strip() == "0 2 1 3",
           "rank %d: INFO says its group rack-%s and ring 0 2 1 3" % (i, "ab"[i % 2]),
           m.group(0) if m else tail(out, 1500))
        ck(all(w in out for w in ("all_reduce ok count=65536", "all_gather ok per_rank=16384",
                                  "broadcast ok count=65536 root=3")) and "WRONG" not in out,
           "rank %d: all_reduce, all_gather and broadcast exact in the rack-ordered ring" % i)
    for i, a in enumerate(agents):
        with open(a["log"], errors="replace") as f:
            log = f.read()
        ck("AGENT-NODE-GROUP" in log and "rack-node-%d" % i in log,
           "agent %d logs its node's group" % i, tail(log, 1000))
    # a node without the label: the agent warns and its rank joins no group; nothing fails
    cl.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "bare-node"}})

    def on_bare(i, p):
        p["spec"]["nodeName"] = "bare-node" if i == 1 else "rack-node-%d" % i
    _, pods2 = cl.add_job("e2ebare", 2, pod_edit=on_bare)
    agents2 = [cl.start_agent(p) for p in pods2]
    ranks2 = Ranks(cl, [a["sock"] for a in agents2], ["--count", "1024"])
    codes2 = ranks2.wait(120)
    ck(codes2 == [0, 0], "a node without the label: both ranks still run (%s)" % codes2)
    with open(agents2[1]["log"], errors="replace") as f:
        log = f.read()
    ck("NodeGroupLabelMissing" in log and "kubectl label node bare-node %s=" % key in log,
       "the agent on the unlabelled node warns with the kubectl fix", tail(log, 1500))


def case_walkthrough(ck, cl):
    """The README's "Install on a cluster" walk-through, short of a live cluster: `helm template`
    of deploy/helm/kcoll with the README's values gives the default CollectiveTopology and the
    agent's RBAC; the example Indexed Job (deploy/examples/indexed-job.yaml) gets pods the way the
    Job controller makes them, each admitted through the real webhook (the namespace opted in);
    agents run under the chart's rules; the ranks' collectives are exact; `kubectl describe
    communicator llama-ft` shows it Ready."""
    sys.path.insert(0, os.path.join(os.path.dirname(HERE), "deploy"))
    import tempfile
    from deploytools import find_tool, yaml_file_objects, yaml_to_objects
    helm, kubectl = find_tool("helm"), harness.find_kubectl()
    if not helm or not kubectl:
        raise Skip("helm or kubectl v1.33+ not found in .deps/bin or PATH (scripts/setup.sh "
                   "installs them)")
    version = library_version()
    tmp = tempfile.mkdtemp(prefix="kcoll-helm-", dir=cl.dir)
    env = dict(os.environ, KUBECONFIG=os.path.join(tmp, "none"), HELM_CACHE_HOME=tmp,
               HELM_CONFIG_HOME=tmp, HELM_DATA_HOME=tmp)
    # README: helm install kcoll deploy/helm/kcoll -n kcoll-system --set 'rbac.agentNamespaces=
    # {NS}' ...; here the network is the loopback interface every process of this machine has
    sets = ["rbac.agentNamespaces={team-a}", "defaultTopology.network.interface=lo",
            "defaultTopology.transport=Socket", "libraryVersion=%s" % version,
            "image.tag=%s" % version]
    cmd = [helm, "template", "kcoll", os.path.join(harness.ROOT, "deploy", "helm", "kcoll"),
           "-n", "kcoll-system"]
    for x in sets:
        cmd += ["--set", x]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    ck(r.returncode == 0, "helm template with the README's values renders", r.stderr[-2000:])
    if r.returncode != 0:
        return
    objs = yaml_to_objects(kubectl, r.stdout)
    topo = [o for o in objs if o.get("kind") == "CollectiveTopology"]
    ck(len(topo) == 1 and topo[0]["spec"].get("libraryVersion") == version,
       "the chart renders one default CollectiveTopology pinning %s" % version)
    if len(topo) != 1:
        return
    cl.add(topo[0])
    binds = [o for o in objs if o.get("kind") == "RoleBinding" and
             o["metadata"].get("namespace") == "team-a"]
    ck(binds, "the chart binds the agent role in the opted-in namespace team-a")
    # the example Job, in the fixture's namespace (opted in: pods go through /mutate/namespace)
    job = yaml_file_objects(kubectl, os.path.join(harness.ROOT, "deploy", "examples",
                                                  "indexed-job.yaml"))[0]
    job["metadata"]["namespace"] = "team-a"
    job["metadata"]["uid"] = "0b7c1d2e-0000-4000-8000-00000000beef"
    n = int(job["spec"]["completions"])
    cl.add(job)
    name, pods = job["metadata"]["name"], []
    ns_json = json.dumps(harness.fixture("network-status-lo.json"))
    for i in range(n):
        p = {"apiVersion": "v1", "kind": "Pod",
             "metadata": copy.deepcopy(job["spec"]["template"]["metadata"]),
             "spec": copy.deepcopy(job["spec"]["template"]["spec"])}
        md = p["metadata"]
        md["name"] = "%s-%d-x%d" % (name, i, i)
        md["namespace"] = "team-a"
        md.setdefault("labels", {}).update({
            "batch.kubernetes.io/controller-uid": job["metadata"]["uid"],
            "batch.kubernetes.io/job-name": name,
            "batch.kubernetes.io/job-completion-index": str(i)})
        md.setdefault("annotations", {}).update({
            "batch.kubernetes.io/job-completion-index": str(i),
            "k8s.v1.cni.cncf.io/network-status": ns_json})
        md["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                  "uid": job["metadata"]["uid"], "controller": True,
                                  "blockOwnerDeletion": True}]
        p["spec"]["hostname"] = "%s-%d" % (name, i)
        p["spec"]["nodeName"] = "node-0"
        pods.append(cl.add_pod(p))
    inj = pods[0]
    side = [c for c in inj["spec"].get("initContainers", []) if c["name"] == "kcoll-agent"]
    trainer = inj["spec"]["containers"][0]
    tenv = {e["name"]: e.get("value") for e in trainer.get("env", [])}
    ann = inj["metadata"].get("annotations", {})
    ck(side and side[0].get("restartPolicy") == "Always",
       "the webhook injected the agent as a native sidecar")
    ck(tenv.get("COLL_AGENT_SOCKET") == "/var/run/kcoll/agent.sock" and
       (tenv.get("LD_LIBRARY_PATH") or "").startswith("/var/run/kcoll/lib"),
       "the trainer gets COLL_AGENT_SOCKET and LD_LIBRARY_PATH", json.dumps(tenv))
    ck(ann.get("kcoll.io/world-size") == str(n),
       "the webhook wrote the world size %d from the Job" % n, json.dumps(ann)[:1000])
    agents = [cl.start_agent(p) for p in pods]
    # the example's trainer is torchrun --nproc-per-node PER: PER processes per pod, each with
    # its LOCAL_RANK, as torchrun starts them (issue 20: several ranks per pod)
    argv = trainer.get("command", []) + trainer.get("args", [])
    per = int(argv[argv.index("--nproc-per-node") + 1]) if "--nproc-per-node" in argv else 1
    ranks = Ranks(cl, [a["sock"] for a in agents for _ in range(per)], ["--count", "65536"],
                  envs=[{"LOCAL_RANK": str(lr), "LOCAL_WORLD_SIZE": str(per)}
                        for _ in agents for lr in range(per)])
    n *= per
    codes = ranks.wait(120)
    ck(codes == [0] * n, "the %d ranks of the example Job exit 0 (%s)" % (n, codes),
       "" if codes == [0] * n else tail(ranks.output(next(i for i, c in enumerate(codes)
                                                           if c != 0))))
    ck(all("all_reduce ok count=65536" in ranks.output(i) and "WRONG" not in ranks.output(i)
           for i in range(n)), "every rank's all_reduce is exact")
    st, ready = wait_status(cl, name, lambda s: s.get("phase") == "Ready", 30)
    ck(ready and st.get("readyRanks") == n, "Communicator %s is Ready with %d ranks" % (name, n),
       json.dumps(st)[:1500])
    r = cl.kubectl_describe(name)
    if r is None:
        raise Skip("kubectl v1.33+ not found (scripts/setup.sh installs it)")
    print(r.stdout)
    ck(r.returncode == 0 and re.search(r"^\s*Phase:\s+Ready\s*$", r.stdout, re.M),
       "kubectl describe communicator %s shows Phase Ready" % name, r.stderr[-1500:])


def expect_told(ck, ranks, n, t0, bad, names, limit=10.0):
    """Every rank's init fails within limit seconds of t0 with one message naming rank bad and
    each of names (its pod or host, the missing interface)."""
    codes = ranks.wait(limit + 20)
    dt = time.time() - t0
    print("%d ranks ended %.1f s after the start: exit codes %s" % (n, dt, codes))
    ck(all(c == 3 for c in codes), "every rank's init fails (exit 3): %s" % codes)
    ck(dt < limit, "every rank ended within %.0f s (%.1f s; the bootstrap timeout is 60 s)" %
       (limit, dt))
    for i in range(n):
        out = ranks.output(i)
        line = ([x for x in out.splitlines() if x.startswith("init failed")] or [""])[0]
        ck(("rank %d (pid " % bad) in line and all(w in line for w in names),
           "rank %d: names rank %d and %s" % (i, bad, ", ".join(names)), tail(out))
        if i == 0:
            print(line)


def case_iface_missing(ck, cl):
    """One rank's pinned interface is missing: standalone (coll-agent --topology, one agent per
    rank) and in Kubernetes (one pod's network-status names an interface the pod lacks): every
    rank fails within seconds naming that rank, its pod or host and the interface."""
    n, bad = 3, 1
    d = cl.dir
    port = free_port()
    topo = {"job": "iface", "port": port, "secret": "0123456789abcdef0123456789abcdef",
            "transport": "Socket", "bootstrapTimeoutSeconds": 60, "timeoutSeconds": 60,
            "nranks": n,
            "ranks": [{"rank": r, "address": "127.0.0.1", "interface": "net9" if r == bad else "lo",
                       "node": "host-%d" % r, "pod": "iface-%d" % r} for r in range(n)]}
    path = os.path.join(d, "iface-topology.json")
    with open(path, "w") as f:
        json.dump(topo, f)
    agents, socks = [], []
    for r in range(n):
        sock = os.path.join(d, "iface-%d.sock" % r)
        log = open(os.path.join(d, "iface-agent-%d.log" % r), "w")
        agents.append(subprocess.Popen([ARGS.agent, "--topology", path, "--rank", str(r),
                                        "--socket", sock, "--health-port", "0"],
                                       stdout=log, stderr=subprocess.STDOUT))
        log.close()
        socks.append(sock)
    t0 = time.time()
    try:
        ranks = Ranks(cl, socks, [])
        expect_told(ck, ranks, n, t0, bad, ["iface-1 on host-1", "standalone topology",
                                            "pins interface net9, which does not exist"])
    finally:
        for a in agents:
            a.kill()
            a.wait()

    cl.add(topology("e2e-iface", library_version()))
    # rank 1's pod, then rank 0's (whose pinned address is not in the pod either: its agent
    # publishes the root endpoint on the pod IP, where its process hosts the root to tell all)
    for job, bad in (("e2eif", 1), ("e2eif0", 0)):
        def missing(i, p, bad=bad):
            if i == bad:
                st = harness.fixture("network-status-lo.json")
                st[1]["interface"] = "net9"
                st[1]["ips"] = ["127.0.0.1" if bad else "10.99.0.1"]
                p["metadata"]["annotations"]["k8s.v1.cni.cncf.io/network-status"] = json.dumps(st)
                p["status"]["podIP"] = "127.0.0.1"
        _, pods = cl.add_job(job, n, pod_edit=missing)
        t0 = time.time()
        agents = [cl.start_agent(p) for p in pods]
        ranks = Ranks(cl, [a["sock"] for a in agents], [])
        expect_told(ck, ranks, n, t0, bad, [pods[bad]["metadata"]["name"], "node-0",
                                            "interface net9 does not exist in this pod",
                                            "CollectiveTopology e2e-iface"])
        cl.stop_agents(agents)


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}
NEEDS_CLUSTER = {"k8s64", "version_pin", "rank_failure", "attachment_missing",
                 "attachment_missing_root", "topology_order",
                 "walkthrough", "iface_missing"}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    ap.add_argument("--coll-run", required=True)
    ap.add_argument("--agent", required=True)
    ap.add_argument("--check", required=True)
    ap.add_argument("--keep", action="store_true")
    ARGS = ap.parse_args()
    for p in (ARGS.coll_run, ARGS.agent, ARGS.check):
        if not os.access(p, os.X_OK):
            harness.skip("%s is not built" % p)
    ck = Checks()
    cl = None
    t0 = time.time()

    def run():
        nonlocal cl
        if ARGS.case in NEEDS_CLUSTER:
            cl = harness.Cluster(ARGS.agent, topologies=())
        CASES[ARGS.case](ck, cl)

    try:
        skipped = guarded(ck, ARGS.case, run)
    finally:
        if cl is not None:
            if ck.failed:
                for a in cl.agents[:4]:
                    print("---- %s" % a["log"])
                    print(tail(cl.agent_log(a), 2000))
            cl.close(keep=ARGS.keep or ck.failed > 0)
    return finish(ck, ARGS.case, t0, skipped)


def guarded(ck, case, fn, *args):
    """Runs fn(*args): the reason when it raised Skip, else None. An unexpected error is a failed
    check with its trace, not a crash. (tests/image/image_test.py runs its cases through it too.)"""
    try:
        fn(*args)
    except Skip as e:
        return str(e)
    except Exception as e:
        import traceback
        traceback.print_exc()
        ck(False, "case %s raised %s: %s" % (case, type(e).__name__, e))
    return None


def finish(ck, case, t0, skipped):
    """The closing lines of a case and its exit status: 1 failed, 77 skipped, 0 passed."""
    print("case %s took %.1f s" % (case, time.time() - t0))
    print("%d passed, %d failed" % (ck.passed, ck.failed))
    if ck.failed:
        return 1
    if skipped:
        print("SKIP: " + skipped)
        return SKIP
    return 0


if __name__ == "__main__":
    sys.exit(main())
