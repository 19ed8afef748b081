#!/usr/bin/env python3
"""spec.nccl: native, a rank that ends (docs/nccl-env.md, "A rank that ends"), against the fake
API server of tests/agent: NVIDIA NCCL processes (the plugin driven as NCCL would, and real NCCL
2.28.9 when it was built) hold as if blocked in a collective; the kubelet writes that one pod's
container ended. Its agent must write the end to the Communicator with the cause, and the other
pods' processes must be told on stderr within seconds (and end, with COLL_NCCL_ON_RANK_END=exit);
a clean exit (the job's normal end) must change nothing.

Cases: ended (OOMKilled; the told processes, exit and wait), clean (exit 0 everywhere),
at_stop (the sidecar is stopped before its pod's end reaches the API server), refused (a rank of
another NCCL version: the ranks already in NCCL are told), pods (two NCCL processes per pod),
node (a pod's node dies: the agent of the pod before it in the ring writes it), ring (the watched
pod replaced by one of a new name), restart (restarted in place: Ready again, then a new end),
late (an end before a pod's first NCCL start is told to it, not to its restart), refused_watch
(the API server refuses the watches for a while: asked again, and they work once allowed), gc
(a pod deleted with its node before the mark: the ring writes it), deleted (a pod deleted while
its agent runs: written once)."""
import argparse
import contextlib
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "agent"))
import harness  # noqa: E402
from harness import Cluster, wait_for  # noqa: E402

ARGS = None
SKIP = 77
HOLD_MS = 60000


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def clean_env(extra):
    e = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "COLL_", "KCOLL_"))}
    e.update(extra)
    return e


class Rank:
    """One NCCL process of a pod, held after NCCL's init: the plugin driven directly, or real
    NCCL's ncclGetUniqueId (real=True)."""

    def __init__(self, sock, env=None, real=False):
        e = clean_env({"COLL_AGENT_SOCKET": sock, "NCCLENV_DIRECT_HOLD_MS": str(HOLD_MS),
                       "NCCLENV_UID_HOLD_MS": str(HOLD_MS),
                       "COLL_NCCL_ENDED_POLL_MS": os.environ.get("NCCLENV_POLL_MS", "500")})
        if real:
            e["NCCL_ENV_PLUGIN"] = ARGS.plugin
        e.update(env or {})
        cmd = [ARGS.uid] if real else [ARGS.direct, ARGS.plugin, "2.28.9", "NCCL_SOCKET_IFNAME"]
        self.proc = subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        self.err = ""
        line = ""
        while "held" not in line and ("rc=" not in line or not real):
            line = self.proc.stdout.readline()
            if not line:
                check(False, "the NCCL process ended before its init: " + self.proc.stderr.read())
            check(not line.startswith("init=") or line.startswith("init=0"),
                  "the plugin's init failed: " + line)
            check(not line.startswith("rc=") or line.startswith("rc=0 "),
                  "real NCCL's init failed: " + line)
        os.set_blocking(self.proc.stderr.fileno(), False)

    def stderr(self):
        try:
            chunk = self.proc.stderr.read()
        except (BlockingIOError, TypeError):
            chunk = None
        self.err += chunk or ""
        return self.err

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.stderr()


def no_sanitizer_reports(cl, ranks):
    """Under the ASan build: no report from an agent or an NCCL process (its plugin)."""
    for r in ranks:
        r.stderr()
    texts = [(a["log"], cl.agent_log(a)) for a in cl.agents] + \
        [("rank %d" % i, r.err) for i, r in enumerate(ranks)]
    for where, text in texts:
        check("Sanitizer" not in text and "runtime error:" not in text,
              "sanitizer report in %s: %s" % (where, text[-3000:]))


def communicator(cl, name):
    c = [o for o in cl.objects("communicators") if o["metadata"]["name"] == name]
    return c[0] if c else None


@contextlib.contextmanager
def scene():
    """A fake cluster and the NCCL processes a case starts (appended to the list): at the end
    every process is killed, the logs shown on a failure, the cluster closed."""
    cl = Cluster(ARGS.agent)
    ranks, ok = [], False
    try:
        yield cl, ranks
        no_sanitizer_reports(cl, ranks)
        ok = True
    finally:
        for r in ranks:
            r.close()
        if not ok:
            for a in cl.agents:
                print("---- %s\n%s" % (a["log"], cl.agent_log(a)[-2500:]))
            for i, r in enumerate(ranks):
                print("---- rank %d stderr\n%s" % (i, r.err[-1500:]))
        cl.close(keep=ARGS.keep or not ok)


def labelled(cl, name):
    """The Communicator's label kcoll.io/rank-ended (patched beside the status, not after it)."""
    return wait_for(lambda: ((communicator(cl, name) or {}).get("metadata") or {}).get(
        "labels", {}).get("kcoll.io/rank-ended"), 10, "the label kcoll.io/rank-ended on " + name)


def ready(cl, name):
    """The Communicator's status once it says Ready (None before)."""
    st = (communicator(cl, name) or {}).get("status") or {}
    return st if st.get("phase") == "Ready" else None


def start_job(cl, name, n, pod_edit=None):
    _, pods = cl.add_job(name, n, pod_edit=pod_edit)
    agents = [cl.start_agent(p) for p in pods]
    rc, out = harness.hello(ARGS.hello, [a["sock"] for a in agents], check=n)
    check(rc == 0, "bootstrap failed: " + out)
    return pods, agents


def oom(cl, pod):
    cl.kubelet_ends(pod, {"exitCode": 137, "reason": "OOMKilled", "startedAt": now_iso(),
                          "finishedAt": now_iso()}, limit="8Gi")


def case_ended(_):
    """Rank 2's container is OOMKilled while the others are held in NCCL: the Communicator says
    so with the cause within seconds; rank 0 (COLL_NCCL_ON_RANK_END=exit) ends by SIGTERM, rank 1
    (the default) is told and waits on; each says it once."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "ended", 3)
        names = [p["metadata"]["name"] for p in pods]
        ranks += [Rank(agents[0]["sock"], {"COLL_NCCL_ON_RANK_END": "exit"},
                       real=bool(ARGS.uid)),
                  Rank(agents[1]["sock"]), Rank(agents[2]["sock"])]
        # what the watches cost while no rank ends: nothing (the bootstrap's own writes done,
        # the agents must go 3 s without a request; a slow machine gets 30 s for it)
        def requests():
            return {ua: c["requests"] for ua, c in cl.control("/counts").items()
                    if ua.startswith("coll-agent")}
        t_idle, last, since = time.time(), requests(), time.time()
        while time.time() - since < 3.0:
            check(time.time() - t_idle < 30,
                  "the agents made requests while no rank ended: %s" % last)
            time.sleep(0.2)
            cur = requests()
            if cur != last:
                last, since = cur, time.time()
        st = wait_for(lambda: ready(cl, "ended"), 20, "phase Ready")
        check(st["readyRanks"] == 3, "readyRanks: %s" % st)
        cl.control("/reset-counts", {})
        t0 = time.time()
        oom(cl, names[2])
        ranks[2].proc.kill()  # its process ended with its container

        def written():
            c = communicator(cl, "ended")
            st = (c or {}).get("status") or {}
            last = st.get("lastError") or {}
            return c if last.get("reason") == "RankEnded" and st.get("phase") == "Failed" else None
        c = wait_for(written, 20, "the Communicator to say that rank 2 ended")
        t_written = time.time() - t0
        last = c["status"]["lastError"]
        print("lastError:", last)
        check(last["rank"] == 2 and last["pod"] == names[2] and "OOMKilled" in last["message"]
              and "8Gi" in last.get("cause", ""), "lastError: %s" % last)
        labelled(cl, "ended")
        members = [m for m in c["status"].get("unhealthyMembers", []) if m["rank"] == 2]
        check(members and members[0]["reason"] == "RankEnded" and members[0].get("cause"),
              "unhealthyMembers: %s" % c["status"].get("unhealthyMembers"))
        # rank 0 ends (SIGTERM), rank 1 is told and holds
        rc0 = ranks[0].proc.wait(timeout=20)
        t_exit = time.time() - t0
        err0 = ranks[0].stderr()
        print("rank 0:", [ln for ln in err0.splitlines() if "kcoll" in ln])
        check(rc0 == -signal.SIGTERM, "rank 0 ended with %s, not SIGTERM" % rc0)
        check(names[2] in err0 and "OOMKilled" in err0 and "this process ends now" in err0,
              "rank 0's stderr does not say why it ends: " + err0)
        wait_for(lambda: "OOMKilled" in ranks[1].stderr(), 20, "rank 1 to be told")
        t_told = time.time() - t0
        time.sleep(2.0)  # asked four more times: told once, still held
        err1 = ranks[1].stderr()
        told = [ln for ln in err1.splitlines() if names[2] in ln]
        print("rank 1:", told)
        check(len(told) == 1 and "COLL_NCCL_ON_RANK_END=exit ends it" in told[0],
              "rank 1 told %d times: %s" % (len(told), err1))
        check(ranks[1].proc.poll() is None, "rank 1 ended without COLL_NCCL_ON_RANK_END=exit")
        # rank 0's container ends as its process did (SIGTERM: 143): a consequence, which keeps
        # rank 2's end as lastError and is not told to rank 1
        cl.kubelet_ends(names[0], {"exitCode": 143, "reason": "Error", "startedAt": now_iso(),
                                   "finishedAt": now_iso()})

        def after():
            st = (communicator(cl, "ended") or {}).get("status") or {}
            m = [x for x in st.get("unhealthyMembers", []) if x["rank"] == 0]
            return (m[0], st) if m else None
        m0, st = wait_for(after, 20, "rank 0's end in unhealthyMembers")
        print("rank 0's end:", m0["message"])
        check(m0["reason"] == "EndedAfterPeer" and names[2] in m0["message"] and
              st["lastError"]["rank"] == 2, "a consequence hid the cause: %s %s" %
              (m0, st["lastError"]))
        time.sleep(2.0)
        check(names[0] not in ranks[1].stderr(), "rank 1 was told of a consequence: " +
              ranks[1].stderr())
        time.sleep(1.5)  # Events are posted by the writer thread
        evs = [e for e in cl.objects("events") if e["reason"] == "KcollRankEnded"]
        check({e["involvedObject"]["kind"] for e in evs} == {"Communicator", "Pod"},
              "KcollRankEnded Events: %s" % [(e["involvedObject"], e["message"]) for e in evs])
        cost = {ua.split("(")[-1].rstrip(")"): (c["requests"], c["verbs"])
                for ua, c in cl.control("/counts").items() if ua.startswith("coll-agent")}
        print("API requests of the three agents for two ends (rank 2's, then rank 0's): %s" % cost)
        total = sum(n for n, _ in cost.values())
        check(total <= 30, "%d API requests for two ends" % total)
        print("after the kubelet wrote the OOMKill: Communicator %.1f s, rank 0 ended %.1f s, "
              "rank 1 told %.1f s (%s NCCL on rank 0)" % (t_written, t_exit, t_told,
                                                          "real" if ARGS.uid else "driven"))
        check(t_exit < 10 and t_told < 10, "told too late")
        desc = cl.kubectl_describe("ended")
        if desc is not None:
            print(desc.stdout)
            check("RankEnded" in desc.stdout and "OOMKilled" in desc.stdout,
                  "describe: " + desc.stdout + desc.stderr[-2000:])


def case_clean(_):
    """Every container exits 0 (the job's normal end), then the sidecars stop: nothing is written,
    nobody is told, and each agent stops within 2 s."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "clean", 2)
        ranks += [Rank(a["sock"]) for a in agents]
        time.sleep(1.0)
        for i, p in enumerate(pods):
            ranks[i].proc.kill()
            cl.kubelet_ends(p["metadata"]["name"], {"exitCode": 0, "reason": "Completed",
                                                    "startedAt": now_iso(),
                                                    "finishedAt": now_iso()})
        time.sleep(3.0)
        t0 = time.time()
        cl.stop_agents()
        t_stop = time.time() - t0
        c = communicator(cl, "clean")
        st = (c or {}).get("status") or {}
        check(not st.get("lastError") and not st.get("unhealthyMembers") and
              "kcoll.io/rank-ended" not in c["metadata"].get("labels", {}),
              "a clean end was written as a failure: %s" % st)
        check(not [e for e in cl.objects("events") if e["reason"] == "KcollRankEnded"],
              "KcollRankEnded Event at a clean end")
        print("clean end: nothing written; the agents stopped in %.1f s" % t_stop)
        check(t_stop < 4, "the agents took %.1f s to stop" % t_stop)


def case_at_stop(_):
    """The kubelet stops the sidecar as the training container ends, before the end reaches the
    API server: the agent reads its pod again at its stop and still writes it."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "atstop", 2)
        names = [p["metadata"]["name"] for p in pods]
        ranks += [Rank(a["sock"]) for a in agents]
        time.sleep(1.0)
        ranks[1].proc.kill()
        t0 = time.time()
        agents[1]["proc"].send_signal(signal.SIGTERM)
        time.sleep(0.5)
        cl.kubelet_ends(names[1], {"exitCode": 1, "reason": "Error", "startedAt": now_iso(),
                                   "finishedAt": now_iso(),
                                   "message": "RuntimeError: CUDA error: an illegal memory access"})
        rc = agents[1]["proc"].wait(timeout=20)
        t_stop = time.time() - t0
        c = communicator(cl, "atstop")
        last = ((c or {}).get("status") or {}).get("lastError") or {}
        print("agent stopped in %.1f s (rc %s); lastError: %s" % (t_stop, rc, last))
        check(last.get("reason") == "RankEnded" and last.get("pod") == names[1] and
              "illegal memory access" in last.get("cause", ""), "lastError: %s" % last)
        wait_for(lambda: "illegal memory access" in ranks[0].stderr(), 20, "rank 0 to be told")
        check(rc == 0 and t_stop < 10, "the agent's stop: rc %s after %.1f s" % (rc, t_stop))


def case_refused(_):
    """A rank refused at its init for another NCCL version: the ranks already in NCCL (waiting for
    it in NCCL's bootstrap) are told at once who was refused and why; started again with the
    right version, it alone makes the job Ready again."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "refused", 2)
        names = [p["metadata"]["name"] for p in pods]
        ranks += [Rank(agents[0]["sock"], real=bool(ARGS.uid))]
        t0 = time.time()
        e = clean_env({"COLL_AGENT_SOCKET": agents[1]["sock"]})
        r = subprocess.run([ARGS.direct, ARGS.plugin, "2.19.3"], env=e, capture_output=True,
                           text=True, timeout=60)
        check(r.stdout.startswith("init=5 "), "rank 1 with 2.19.3 was not refused: " + r.stdout)
        wait_for(lambda: "2.19.3" in ranks[0].stderr(), 20, "rank 0 to be told of the refusal")
        told = [ln for ln in ranks[0].stderr().splitlines() if names[1] in ln]
        print("rank 0 told %.1f s after the refusal: %s" % (time.time() - t0, told))
        check(len(told) == 1 and "version mismatch" in told[0] and "NVIDIA NCCL is not told" in
              told[0], "rank 0's stderr: " + ranks[0].stderr())
        labelled(cl, "refused")
        # rank 1 started again with the right NCCL: rank 0, still in NCCL's init, lets it in
        ranks.append(Rank(agents[1]["sock"]))
        st = wait_for(lambda: ready(cl, "refused"), 20, "phase Ready once rank 1 runs 2.28.9")
        healthy = [c for c in st["conditions"] if c["type"] == "Healthy"][0]
        print("rank 1 started again:", healthy["message"])
        versions = [c for c in st["conditions"] if c["type"] == "VersionsConsistent"][0]
        check(healthy["reason"] == "Restarted" and "the refused pods" in healthy["message"] and
              versions["status"] == "True" and versions["reason"] == "Restarted",
              "conditions: %s" % st["conditions"])


def case_pods(_):
    """Two pods of two NCCL processes each (kcoll.io/ranks-per-pod: 2, torchrun's LOCAL_RANK):
    local rank l of pod p is rank 2p+l in the agent's answer and in ncclMembers; a LOCAL_RANK out
    of range, or none, is refused; pod 1's container ends: "ranks 2-3 (pod ...) ended", and both
    processes of pod 0 are told."""
    with scene() as (cl, ranks):
        def two(_, p):
            p["metadata"]["annotations"]["kcoll.io/ranks-per-pod"] = "2"
        _, pods = cl.add_job("pods", 2, pod_edit=two)
        names = [p["metadata"]["name"] for p in pods]
        agents = [cl.start_agent(p) for p in pods]
        for pod in range(2):
            for lr in range(2):
                ranks.append(Rank(agents[pod]["sock"], {"LOCAL_RANK": str(lr)}))
        for bad, code in (({"LOCAL_RANK": "2"}, "LocalRankOutOfRange"), ({}, "LocalRankUnknown")):
            e = clean_env({"COLL_AGENT_SOCKET": agents[0]["sock"]})
            e.update(bad)
            r = subprocess.run([ARGS.direct, ARGS.plugin, "2.28.9"], env=e, capture_output=True,
                               text=True, timeout=60)
            print("LOCAL_RANK %s: %s" % (bad.get("LOCAL_RANK", "unset"), r.stderr.strip()))
            check(r.stdout.startswith("init=5 ") and code in r.stderr and names[0] in r.stderr,
                  "a process with LOCAL_RANK %s was not refused: %s %s" % (bad, r.stdout, r.stderr))
        members = ((communicator(cl, "pods") or {}).get("status") or {}).get("ncclMembers", {})
        check(sorted(members) == ["0", "1", "2", "3"] and members["1"]["pod"] == names[0] and
              members["2"]["pod"] == names[1], "ncclMembers: %s" % members)
        # every pod's processes started NVIDIA NCCL: the Communicator is Ready with 4 ranks
        st = wait_for(lambda: ready(cl, "pods"), 20, "phase Ready")
        print("phase %s, readyRanks %s, ncclPods %s" % (st["phase"], st["readyRanks"],
                                                       st["ncclPods"]))
        check(st["readyRanks"] == 4 and sorted(st["ncclPods"]) == ["0", "1"] and
              {k: v for k, v in st["ncclPods"]["0"].items() if k != "since"} == {
                  "job": members["0"]["job"], "pod": names[0],
                  "node": pods[0]["spec"]["nodeName"]} and
              st["ncclPods"]["0"]["since"].endswith("Z"), "status: %s" % st)
        time.sleep(1.0)
        ranks[2].proc.kill()
        ranks[3].proc.kill()
        oom(cl, names[1])
        for r in ranks[:2]:
            wait_for(lambda: names[1] in r.stderr(), 20, "pod 0's processes to be told")
        told = [ln for ln in ranks[1].stderr().splitlines() if names[1] in ln]
        print("rank 1:", told)
        check(len(told) == 1 and "ranks 2-3 (pod %s" % names[1] in told[0] and
              "this process (rank 1, pod %s)" % names[0] in told[0], "rank 1 was told: %s" % told)
        last = communicator(cl, "pods")["status"]["lastError"]
        check(last["rank"] == 2 and last.get("localRank") == 0 and last["reason"] == "RankEnded",
              "lastError: %s" % last)


def node_controller(cl, pod_name, containers_ready="True", reason=None, ready="False"):
    """The pod's conditions as the node controller leaves them when the pod's node stops
    reporting (Ready False, nothing else), or as the kubelet writes them (containers_ready False:
    a failing readiness probe; reason ReadinessGatesNotReady: a readiness gate not met)."""
    pod = [o for o in cl.objects("pods") if o["metadata"]["name"] == pod_name][0]
    st = pod.setdefault("status", {})
    st["phase"] = "Running"
    cond = {"type": "Ready", "status": ready, "lastTransitionTime": now_iso()}
    if reason:
        cond["reason"] = reason
    st["conditions"] = [cond, {"type": "ContainersReady", "status": containers_ready,
                               "lastTransitionTime": now_iso()}]
    st["containerStatuses"] = [{"name": pod["spec"]["containers"][0]["name"], "restartCount": 0,
                                "ready": containers_ready == "True", "state": {"running": {}}}]
    cl.add(pod)


def ring_job(cl, ranks, name):
    """3 pods on nodes node-0..2, their NCCL processes held (rank 0's with exit), the job Ready and
    pod 1's agent watching pod 2 (the ring): the pod names and the agents."""
    def own_node(i, p):
        p["spec"]["nodeName"] = "node-%d" % i
    pods, agents = start_job(cl, name, 3, own_node)
    names = [p["metadata"]["name"] for p in pods]
    ranks += [Rank(agents[0]["sock"], {"COLL_NCCL_ON_RANK_END": "exit"}),
              Rank(agents[1]["sock"]), Rank(agents[2]["sock"])]
    wait_for(lambda: ready(cl, name), 20, "phase Ready")
    wait_for(lambda: "watching pod %s" % names[2] in cl.agent_log(agents[1]), 20,
             "pod 1's agent to watch pod 2")
    return names, agents


def rank_ended_written(cl, name, t0, timeout):
    """The Communicator once its lastError says a rank ended (RankEnded), and when after t0."""
    def written():
        c = communicator(cl, name)
        last = ((c or {}).get("status") or {}).get("lastError") or {}
        return c if last.get("reason") == "RankEnded" else None
    c = wait_for(written, timeout, "the Communicator to say that a rank is gone")
    return c, time.time() - t0


def case_node(_):
    """Rank 2's node dies: its agent and its process vanish with it, and 40-50 s later the node
    controller marks its pod not Ready while its containers ran. The agent of the pod before it
    (pod 1 watches pod 2, a ring) writes rank 2 gone with that cause; rank 0 (exit) ends, rank 1
    is told. A failing readiness probe or an unmet readiness gate before it writes nothing."""
    with scene() as (cl, ranks):
        names, agents = ring_job(cl, ranks, "nodelost")
        # the kubelet's own not-Ready states are no node's loss
        node_controller(cl, names[2], containers_ready="False")
        node_controller(cl, names[2], reason="ReadinessGatesNotReady")
        time.sleep(2.5)
        st = (communicator(cl, "nodelost") or {}).get("status") or {}
        check(st.get("phase") == "Ready" and not st.get("lastError"),
              "a pod not Ready by the kubelet's word was written gone: %s" % st)
        node_controller(cl, names[2], ready="True")
        # node-2 dies: the agent and the process on it vanish without a word
        agents[2]["proc"].kill()
        ranks[2].proc.kill()
        time.sleep(0.5)
        t0 = time.time()
        node_controller(cl, names[2])
        c, t_written = rank_ended_written(cl, "nodelost", t0, 20)
        last = c["status"]["lastError"]
        print("lastError:", last)
        check(c["status"]["phase"] == "Failed" and last["rank"] == 2 and
              last["pod"] == names[2] and last.get("node") in (None, "node-2") and
              "is gone: node node-2 stopped reporting" in last["message"] and
              "the node controller marked pod %s not Ready at " % names[2] in last["message"],
              "lastError: %s" % last)
        labelled(cl, "nodelost")
        check("AGENT-RANK-ENDED" in cl.agent_log(agents[1]),
              "pod 1's agent (the ring's) did not write it")
        rc0 = ranks[0].proc.wait(timeout=20)
        t_exit = time.time() - t0
        check(rc0 == -signal.SIGTERM and "node-2 stopped reporting" in ranks[0].stderr(),
              "rank 0 ended with %s: %s" % (rc0, ranks[0].stderr()))
        wait_for(lambda: "node-2 stopped reporting" in ranks[1].stderr(), 20, "rank 1 told")
        t_told = time.time() - t0
        time.sleep(1.5)  # Events are posted by the writer thread
        evs = [(e["involvedObject"]["kind"], e["involvedObject"]["name"])
               for e in cl.objects("events") if e["reason"] == "KcollRankEnded"]
        check(("Pod", names[2]) in evs and ("Communicator", "nodelost") in evs,
              "KcollRankEnded Events: %s" % evs)
        print("after the node controller's mark: Communicator %.1f s, rank 0 ended %.1f s, "
              "rank 1 told %.1f s" % (t_written, t_exit, t_told))


def case_ring(_):
    """The watched pod ends cleanly and the job replaces it with a pod of a new name (an Indexed
    Job's): the watch moves to the replacement once it records itself, and its node's loss is
    written. Each pod of a job of two watches the other."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "ring", 2)
        names = [p["metadata"]["name"] for p in pods]
        ranks += [Rank(a["sock"]) for a in agents]
        for i in range(2):
            wait_for(lambda: "watching pod %s" % names[1 - i] in cl.agent_log(agents[i]), 20,
                     "pod %d's agent to watch pod %d" % (i, 1 - i))
        ranks[1].proc.kill()
        cl.kubelet_ends(names[1], {"exitCode": 0, "reason": "Completed", "startedAt": now_iso(),
                                   "finishedAt": now_iso()})
        cl.stop_agents([agents[1]])
        new = dict(pods[1], metadata=dict(pods[1]["metadata"], name=names[1][:-5] + "zzzzz"))
        for k in ("uid", "resourceVersion", "creationTimestamp"):
            new["metadata"].pop(k, None)
        new.pop("status", None)
        cl.add_pod(new)
        t0 = time.time()
        a2 = cl.start_agent(new)
        ranks.append(Rank(a2["sock"]))
        wait_for(lambda: "watching pod %s" % new["metadata"]["name"] in cl.agent_log(agents[0]),
                 40, "pod 0's agent to watch the replacement")
        print("pod 0's agent watches the replacement %.1f s after it started" % (time.time() - t0))
        node_controller(cl, new["metadata"]["name"])
        wait_for(lambda: "stopped reporting" in ranks[0].stderr(), 20, "rank 0 to be told")
        st = communicator(cl, "ring")["status"]
        check(st["lastError"]["pod"] == new["metadata"]["name"], "lastError: %s" % st)


def case_late(_):
    """Rank 1 ended before rank 0's processes started NCCL (pods start in any order): rank 0's
    first process waits for it in NCCL's init, and is told; a second process of rank 0's pod (a
    restart in place, after the end) is not."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "late", 2)
        names = [p["metadata"]["name"] for p in pods]
        ranks.append(Rank(agents[1]["sock"]))
        ranks[0].proc.kill()
        oom(cl, names[1])
        labelled(cl, "late")
        time.sleep(3.0)  # well before rank 0's start: the end's time + the clocks' 2 s
        ranks.append(Rank(agents[0]["sock"]))
        wait_for(lambda: "OOMKilled" in ranks[1].stderr(), 20, "rank 0's first process told")
        ranks[1].proc.kill()
        ranks.append(Rank(agents[0]["sock"]))
        time.sleep(2.5)
        check("OOMKilled" not in ranks[2].stderr(),
              "rank 0's restarted process was told of the end before it: " + ranks[2].stderr())


def restarted(cl, pod_name, terminated, restarts):
    """What the kubelet writes when a container ended and was started again in place (a
    PyTorchJob's restartPolicy OnFailure): the end as its lastState, running again."""
    pod = [o for o in cl.objects("pods") if o["metadata"]["name"] == pod_name][0]
    st = pod.setdefault("status", {})
    st["phase"] = "Running"
    st["containerStatuses"] = [{"name": pod["spec"]["containers"][0]["name"], "ready": True,
                                "restartCount": restarts,
                                "state": {"running": {"startedAt": now_iso()}},
                                "lastState": {"terminated": terminated}}]
    cl.add(pod)


def case_restart(_):
    """A job restarted in place: rank 1's container OOMKilled and started again, rank 0 (exit)
    ends and is started again. Once both pods' new NCCL processes passed their init, the
    Communicator is Ready again (Healthy True, Restarted; the old members dropped, lastError kept,
    the label gone) and the new processes are not told of the old ends. A later end is written
    and told as a first end."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "restart", 2)
        names = [p["metadata"]["name"] for p in pods]
        exit0 = {"COLL_NCCL_ON_RANK_END": "exit"}
        ranks += [Rank(agents[0]["sock"], exit0), Rank(agents[1]["sock"])]
        wait_for(lambda: ready(cl, "restart"), 20, "phase Ready")
        ranks[1].proc.kill()
        restarted(cl, names[1], {"exitCode": 137, "reason": "OOMKilled", "startedAt": now_iso(),
                                 "finishedAt": now_iso()}, 1)
        check(ranks[0].proc.wait(timeout=20) == -signal.SIGTERM, "rank 0 did not end")
        restarted(cl, names[0], {"exitCode": 143, "reason": "Error", "startedAt": now_iso(),
                                 "finishedAt": now_iso()}, 1)

        def members():
            st = (communicator(cl, "restart") or {}).get("status") or {}
            return {m["rank"]: m["reason"] for m in st.get("unhealthyMembers", [])}
        wait_for(lambda: members() == {1: "RankEnded", 0: "EndedAfterPeer"}, 20, "both ends")
        st = communicator(cl, "restart")["status"]
        check(st["phase"] == "Failed", "status: %s" % st)
        time.sleep(3.5)  # the containers start again (a restart takes seconds)
        t0 = time.time()
        ranks += [Rank(agents[0]["sock"], exit0), Rank(agents[1]["sock"])]
        st = wait_for(lambda: ready(cl, "restart"), 20, "phase Ready again")
        t_ready = time.time() - t0
        healthy = [c for c in st["conditions"] if c["type"] == "Healthy"][0]
        print("Ready again %.1f s after the new processes started: %s" % (t_ready, healthy))
        check(healthy["status"] == "True" and healthy["reason"] == "Restarted" and
              "again after the failure" in healthy["message"] and
              not st.get("unhealthyMembers") and st["lastError"]["rank"] == 1 and
              st["lastError"]["reason"] == "RankEnded", "status: %s" % st)
        wait_for(lambda: "kcoll.io/rank-ended" not in communicator(cl, "restart")["metadata"].get(
            "labels", {}), 10, "the label kcoll.io/rank-ended removed")
        time.sleep(2.5)  # asked several times: the old ends are not theirs
        for r in ranks[2:]:
            check("OOMKilled" not in r.stderr() and r.proc.poll() is None,
                  "a restarted process was told of the end that restarted it: " + r.stderr())
        # a later end is a first end again: written, labelled, told
        ranks[3].proc.kill()
        restarted(cl, names[1], {"exitCode": 1, "reason": "Error", "startedAt": now_iso(),
                                 "finishedAt": now_iso(), "message": "RuntimeError: second"}, 2)
        check(ranks[2].proc.wait(timeout=20) == -signal.SIGTERM and
              "RuntimeError: second" in ranks[2].stderr(),
              "the new rank 0 was not ended by the new end: " + ranks[2].stderr())
        st = communicator(cl, "restart")["status"]
        print("the later end:", st["lastError"]["message"][:200])
        check(st["phase"] == "Failed" and st["lastError"]["reason"] == "RankEnded" and
              "after rank" not in st["lastError"]["message"], "status: %s" % st)
        labelled(cl, "restart")


def case_refused_watch(_):
    """The API server refuses the agents' watches for a while (RBAC taken away and given back by
    a chart upgrade, an authorizer's outage: 403 for the pods, 400 for the Communicator's): each
    watch says so once and is asked again
    after 1, 2, 4 ... s; once allowed again, a node's loss is written by the ring, told through
    the Communicator's watch, and a pod's own end by its own watch, as if nothing had
    happened."""
    with scene() as (cl, ranks):
        def own_node(i, p):
            p["spec"]["nodeName"] = "node-%d" % i
        pods, agents = start_job(cl, "refused", 3, own_node)
        names = [p["metadata"]["name"] for p in pods]
        ranks += [Rank(a["sock"]) for a in agents]
        wait_for(lambda: ready(cl, "refused"), 20, "phase Ready")
        for i in range(3):
            wait_for(lambda: "watching pod %s" % names[(i + 1) % 3] in cl.agent_log(agents[i]),
                     20, "pod %d's agent to watch the next pod" % i)
        cl.control("/deny", {"rules": [{"verb": "watch", "resource": "pods"}]})
        cl.control("/inject", {"faults": [{"status": 400, "count": 1000, "method": "GET",
                                           "path": "/communicators"}]})
        cl.control("/outage", {"seconds": 1})  # the watches open again, and are refused

        def refusals():
            out = {}
            for ua, c in cl.control("/counts").items():
                for i, n in enumerate(names):
                    if ua.startswith("coll-agent") and n in ua:
                        f = c.get("forbidden", [])
                        out[i] = (f.count("watch pods"), c.get("codes", {}).get("400", 0))
            return out
        # each agent's three watches refused twice at least: the own pod's and the next pod's,
        # the Communicator's
        got = wait_for(lambda: (lambda r: r if len(r) == 3 and all(
            p >= 4 and c >= 2 for p, c in r.values()) else None)(refusals()), 30,
            "every watch refused twice")
        print("refused watches per agent (pods, communicators):", got)
        for a in agents:
            log = cl.agent_log(a)
            said = [ln for ln in log.splitlines() if "watched again" in ln and
                    ("HTTP 403" in ln or "HTTP 400" in ln)]
            check(len(said) == 3, "each refusal said once per watch, not per try: %s" % said)
        cl.control("/deny", {"rules": []})
        cl.control("/inject", {"faults": []})
        t0 = time.time()
        agents[2]["proc"].kill()  # node-2 dies
        ranks[2].proc.kill()
        node_controller(cl, names[2])
        for i in range(2):
            wait_for(lambda: "node-2 stopped reporting" in ranks[i].stderr(), 40,
                     "rank %d told once the watches were allowed again" % i)
        print("rank 2's node loss told %.1f s after the watches were allowed again" %
              (time.time() - t0))
        st = communicator(cl, "refused")["status"]
        check(st["lastError"]["pod"] == names[2] and "is gone" in st["lastError"]["message"],
              "lastError: %s" % st["lastError"])
        # pod 0's own watch: its container's end is written (a consequence of rank 2's)
        ranks[0].proc.kill()
        oom(cl, names[0])

        def member0():
            st = (communicator(cl, "refused") or {}).get("status") or {}
            return [m for m in st.get("unhealthyMembers", []) if m["rank"] == 0]
        m0 = wait_for(member0, 20, "rank 0's end written by its own watch")
        check(m0[0]["reason"] == "EndedAfterPeer" and "OOMKilled" in m0[0]["message"],
              "rank 0's member: %s" % m0)


def delete_pod(cl, pod_name, gc=False):
    """A pod deleted at once (kubectl delete --force, the pod garbage collector): with gc, first
    what the garbage collector writes before it deletes a pod whose node no longer exists."""
    pod = [o for o in cl.objects("pods") if o["metadata"]["name"] == pod_name][0]
    if gc:
        pod["metadata"]["deletionTimestamp"] = now_iso()
        pod["metadata"]["deletionGracePeriodSeconds"] = 0
        pod.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
             "message": "PodGC: node no longer exists", "lastTransitionTime": now_iso()})
        cl.add(pod)
    cl.control("/delete", {"kind": "Pod", "namespace": pod["metadata"]["namespace"],
                           "name": pod_name})


def case_gc(_):
    """Rank 2's machine is removed by the cloud (a spot VM reclaimed): its agent and process
    vanish, its Node object is deleted, and the pod garbage collector deletes its pod, before the
    node controller's mark. Pod 1's agent (the ring) gives rank 2's agent 10 s to write it, then
    writes it gone itself: rank 0 (exit) ends, rank 1 is told."""
    with scene() as (cl, ranks):
        names, agents = ring_job(cl, ranks, "gc")
        agents[2]["proc"].kill()
        ranks[2].proc.kill()
        time.sleep(0.5)
        t0 = time.time()
        delete_pod(cl, names[2], gc=True)
        c, t_written = rank_ended_written(cl, "gc", t0, 30)
        last = c["status"]["lastError"]
        print("lastError:", last["message"])
        check(last["rank"] == 2 and last["pod"] == names[2] and "is gone" in last["message"] and
              "DeletionByPodGC: PodGC: node no longer exists" in last["message"] and
              "its agent wrote no end within 10 s: node node-2 is down" in last["message"],
              "lastError: %s" % last)
        check(t_written >= 9.5, "written %.1f s after the deletion: before its agent's 10 s" %
              t_written)
        check(ranks[0].proc.wait(timeout=20) == -signal.SIGTERM, "rank 0 did not end")
        wait_for(lambda: "DeletionByPodGC" in ranks[1].stderr(), 20, "rank 1 told")
        print("after the pod garbage collector deleted pod 2: Communicator %.1f s, rank 1 told "
              "%.1f s" % (t_written, time.time() - t0))


def case_deleted(_):
    """Pod 1 deleted at once while its agent runs: its agent writes it; the agent watching it (the
    ring) writes nothing more (one KcollRankEnded Event per object)."""
    with scene() as (cl, ranks):
        pods, agents = start_job(cl, "deleted", 3)
        names = [p["metadata"]["name"] for p in pods]
        ranks += [Rank(a["sock"]) for a in agents]
        wait_for(lambda: ready(cl, "deleted"), 20, "phase Ready")
        wait_for(lambda: "watching pod %s" % names[1] in cl.agent_log(agents[0]), 20,
                 "pod 0's agent to watch pod 1")
        delete_pod(cl, names[1])
        wait_for(lambda: names[1] in ranks[0].stderr(), 20, "rank 0 told")
        time.sleep(12)  # past the ring's 10 s
        evs = [(e["involvedObject"]["kind"], e["message"]) for e in cl.objects("events")
               if e["reason"] == "KcollRankEnded"]
        check(len(evs) == 2 and "no longer exists" in evs[0][1], "KcollRankEnded Events: %s" % evs)
        check(" AGENT-RANK-ENDED " not in cl.agent_log(agents[0]),
              "the ring wrote it again: " + cl.agent_log(agents[0])[-2000:])
        st = communicator(cl, "deleted")["status"]
        check([m["pod"] for m in st["unhealthyMembers"]] == [names[1]], "members: %s" % st)


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("case", choices=sorted(CASES))
    for a in ("--agent", "--plugin", "--direct", "--hello"):
        ap.add_argument(a, required=True)
    ap.add_argument("--uid")
    ap.add_argument("--keep", action="store_true")
    ARGS = ap.parse_args()
    for p in (ARGS.agent, ARGS.plugin, ARGS.direct, ARGS.hello):
        if not os.path.exists(p):
            print("SKIPPED: %s is not built" % p)
            return SKIP
    try:
        CASES[ARGS.case](ARGS)
    except AssertionError as e:
        print("FAIL: %s" % e)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
