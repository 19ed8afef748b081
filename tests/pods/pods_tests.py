#!/usr/bin/env python3
"""Several ranks per pod (label pods): one coll-agent per pod serves all of the pod's processes,
each saying its LOCAL_RANK as torchrun sets it; rank = pod rank x ranksPerPod + local rank.

    pods_tests.py CASE --coll-run PATH --agent PATH --check PATH [--keep]

Cases (fake API server cases reuse tests/agent/harness.py, the rank program is tests/e2e/e2e_check):
  k8s_3x4        3 pods x 4 ranks, ranksPerPod from torchrun --nproc-per-node 4 in the pod spec:
                 Ready, collectives (all_to_all too) exact, API requests per pod as with one rank
  k8s_4x8        4 pods x 8 ranks (32), ranksPerPod 8 from the CollectiveTopology: the same
  local_missing  a pod starts 3 of its 4 local ranks: every rank fails within seconds naming the
                 pod and its local ranks; the Communicator is Failed naming them
  local_duplicate  two processes of one pod say LOCAL_RANK 0: refused naming both pids; the job
                 fails at once
  local_range    LOCAL_RANK 2 in a pod of 2 ranks: refused naming the pod and 0..1
  kill_local     a local rank is SIGKILLed mid all_reduce: every rank's error names its pod, local
                 rank and global rank; the Communicator's lastError and unhealthyMembers too
  failure_cost   4 pods x 8 ranks, one rank SIGKILLed: the failure costs O(1) API requests and at
                 most 2 Events (issue 21)
  standalone     coll-run --agent --pods 3 --ranks-per-pod 4: collectives exact, one agent per pod;
                 the hierarchical all_reduce with a host per pod (and the flat ring) exact
  webhook        the admission webhook refuses a pod with more ranks than GPUs, or whose torchrun
                 --nnodes is not its Job's pods, and admits one that fits
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "agent"))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))
import agent_tests  # noqa: E402
import harness  # noqa: E402
import e2e_tests as e2e  # noqa: E402

DROP = ("COLL_UNIQUE_ID", "COLL_RANK", "COLL_NRANKS", "COLL_LOCAL_RANK", "COLL_SOCKET_IFNAME",
        "COLL_TIMEOUT", "COLL_BOOTSTRAP_TIMEOUT", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
        "TORCHELASTIC_RESTART_COUNT", "RANK", "WORLD_SIZE")


class Procs(e2e.Ranks):
    """Library processes of several pods: (socket, local rank, local world size) each; output in
    files. Waiting and killing as e2e's."""

    def __init__(self, cl, specs, args, late=()):
        """late: indexes started a second later than the others."""
        self.procs, self.logs, self.specs = [None] * len(specs), [None] * len(specs), specs
        order = [i for i in range(len(specs)) if i not in late] + list(late)
        for i in order:
            sock, lr, lws = specs[i]
            if i in late and i == late[0]:
                time.sleep(1.0)
            env = {k: v for k, v in os.environ.items() if k not in DROP}
            env.update({"COLL_AGENT_SOCKET": sock, "LOCAL_RANK": str(lr)})
            if lws is not None:
                env["LOCAL_WORLD_SIZE"] = str(lws)
            path = os.path.join(cl.dir, "proc-%d.log" % i)
            with open(path, "w") as f:
                self.procs[i] = subprocess.Popen([e2e.ARGS.check] + list(args), env=env, stdout=f,
                                                 stderr=subprocess.STDOUT,
                                                 stdin=subprocess.DEVNULL)
            self.logs[i] = path


def topology(name, per=None, boot_s=60, timeout_s=60, local_s=None):
    t = e2e.topology(name, e2e.library_version(), boot_s, timeout_s)
    if per is not None:
        t["spec"]["ranksPerPod"] = per
    if local_s is not None:
        t["spec"]["localRanksTimeoutSeconds"] = local_s
    return t


def comm_object(cl, name):
    for o in cl.objects("communicators"):
        if o["metadata"]["name"] == name:
            return o
    return None


def job_of_pods(ck, cl, name, npods, per, pod_edit=None, agent_args=()):
    _, pods = cl.add_job(name, npods, pod_edit=pod_edit)
    agents = [cl.start_agent(p, extra_args=list(agent_args)) for p in pods]
    return pods, agents


def ready_job(ck, cl, name, npods, per, torchrun, count):
    """npods pods of per ranks each reach Ready; every collective exact; API load per pod."""
    n = npods * per
    if torchrun:  # ranksPerPod from the pod: torchrun's --nproc-per-node and the GPU limit
        cl.add(topology(name + "-topo"))

        def edit(i, p):
            c = p["spec"]["containers"][0]
            c["command"] = ["torchrun", "--nproc-per-node", str(per), "train.py"]
            c["resources"] = {"limits": {"nvidia.com/gpu": str(per)}}
    else:
        cl.add(topology(name + "-topo", per=per))
        edit = None
    cl.control("/reset-counts", {})
    t0 = time.time()
    pods, agents = job_of_pods(ck, cl, name, npods, per, edit)
    procs = Procs(cl, [(agents[p]["sock"], lr, per) for p in range(npods) for lr in range(per)],
                  ["--count", str(count)])
    codes = procs.wait(240)
    elapsed = time.time() - t0
    print("%d pods x %d ranks: collectives done in %.1f s" % (npods, per, elapsed))
    bad = [i for i, c in enumerate(codes) if c != 0]
    ck(not bad, "all %d processes exit 0" % n,
       "" if not bad else "exit codes %s\nfirst failure:\n%s" % (codes, e2e.tail(procs.output(
           bad[0]))))
    got = {}
    for i in range(n):
        m = re.search(r"^init ok rank=(\d+) nranks=(\d+)$", procs.output(i), re.M)
        if m:
            got[i] = (int(m.group(1)), int(m.group(2)))
    ck(all(got.get(i) == (i, n) for i in range(n)),
       "local rank l of pod p is rank p*%d+l of %d, for every pod and local rank" % (per, n),
       "got %s" % got)
    per_rank = max(1, count // n)
    wants = ("all_reduce ok count=7", "all_reduce ok count=%d" % count,
             "all_gather ok per_rank=%d" % per_rank, "broadcast ok count=%d root=%d" %
             (per_rank * n, n - 1), "all_to_all ok per_rank=%d" % per_rank)
    good = sum(1 for i in range(n) if all(w in procs.output(i) for w in wants) and
               "WRONG" not in procs.output(i))
    ck(good == n, "all_reduce, all_gather, broadcast and all_to_all exact on %d of %d ranks"
       % (good, n))
    st, ready = e2e.wait_status(cl, name, lambda s: s.get("phase") == "Ready", 30)
    print("Communicator %s status: %s" % (name, json.dumps(
        {k: st.get(k) for k in ("phase", "readyRanks", "unhealthyCount")})))
    ck(ready, "the Communicator's status.phase is Ready", json.dumps(st)[:1500])
    ck(st.get("readyRanks") == n, "status.readyRanks counts ranks: %s == %d" % (
        st.get("readyRanks"), n))
    # where each rank runs: one entry per pod, its ranks, node and GPUs (issue 20)
    place = st.get("placement") or []
    # with nvidia.com/gpu limits (the torchrun pods) local rank r binds GPU r; without, none
    gpus = ("0-%d" % (per - 1) if per > 1 else "0") if torchrun else None
    print("status.placement: %s" % json.dumps(place))
    pod_names = sorted(p["metadata"]["name"] for p in pods)
    ck(len(place) == npods and st.get("placementOmitted") == 0 and
       [e.get("firstRank") for e in place] == [p * per for p in range(npods)] and
       all(e.get("ranks") == per and e.get("node") for e in place) and
       sorted(e.get("pod") for e in place) == pod_names and
       all(e.get("gpus") == gpus for e in place),
       "status.placement: %d pods of %d ranks, each with its node and GPUs %s" % (
           npods, per, gpus or "none (no nvidia.com/gpu limits)"), json.dumps(place)[:1500])
    spec = (comm_object(cl, name) or {}).get("spec", {})
    ck(spec.get("nranks") == n and spec.get("pods") == npods and spec.get("ranksPerPod") == per,
       "spec: nranks %d, pods %d, ranksPerPod %d" % (n, npods, per),
       json.dumps({k: spec.get(k) for k in ("nranks", "pods", "ranksPerPod")}))
    counts = agent_tests.per_agent_counts(cl, name + "-")
    total = sum(v["requests"] for v in counts.values())
    watches = sum(v["watches"] for v in counts.values())
    print("API: %d agents made %d requests (%.2f per pod), %d watches, for %d ranks" % (
        len(counts), total, total / max(1, len(counts)), watches, n))
    ck(len(counts) == npods, "one API client per pod (%d), not per rank" % len(counts))
    # as with one rank per pod: 3 requests (pod, topologies, the job's Secret) and a watch;
    # rank 0's pod creates the Secret and the Communicator and patches its status:
    # Bootstrapping, then Ready with readyRanks, which its local ranks' reports count up (one
    # patch when they come together; on a loaded machine up to one per count seen, so at most
    # one per local rank), rarely a re-read after a conflict. Bounded by ranksPerPod, never by
    # the number of pods.
    most_patches = 1 + per
    ck(all(v["requests"] <= 3 for k, v in counts.items() if "-0-" not in k) and
       all(v["requests"] <= 5 + most_patches and
           v.get("verbs", {}).get("patch", 0) <= most_patches
           for k, v in counts.items() if "-0-" in k) and watches <= npods - 1,
       "requests per pod as with one rank per pod: 3 and a watch; rank 0's pod at most %d "
       "(two creates, status patches Bootstrapping and Ready, at most %d in all, a re-read)"
       % (5 + most_patches, most_patches),
       json.dumps({k: (v["requests"], v["watches"], v.get("verbs")) for k, v in counts.items()}))
    log = cl.agent_log(agents[0])
    src = ("torchrun --nproc-per-node %d in container trainer" % per if torchrun
           else "CollectiveTopology %s-topo spec.ranksPerPod" % name)
    ck("ranksPerPod=%d (%s) gpus=%d" % (per, src, per if torchrun else 0) in log,
       "agent 0 says ranksPerPod %d from %s" % (per, src), e2e.tail(log, 1500))


def case_k8s_3x4(ck, cl):
    ready_job(ck, cl, "pods34", 3, 4, torchrun=True, count=4096)


def case_k8s_4x8(ck, cl):
    ready_job(ck, cl, "pods48", 4, 8, torchrun=False, count=2048)


def failing_job(ck, cl, name, per, specs_of, local_s=5, late=()):
    """Two pods of per ranks with a topology deadline of local_s for the local ranks; specs_of
    (agents) lists the processes. Returns (procs, codes, pods, elapsed)."""
    cl.add(topology(name + "-topo", per=per, boot_s=40, local_s=local_s))
    pods, agents = job_of_pods(ck, cl, name, 2, per)
    t0 = time.time()
    procs = Procs(cl, specs_of(agents), ["--count", "1024"], late)
    codes = procs.wait(90)
    elapsed = time.time() - t0
    print("exit codes %s after %.1f s" % (codes, elapsed))
    for i in range(len(codes)):
        line = [x for x in procs.output(i).splitlines() if x.startswith("init failed")]
        print("process %d: %s" % (i, line[0][:600] if line else e2e.tail(procs.output(i), 300)))
    return procs, codes, pods, elapsed


def case_local_missing(ck, cl):
    """Pod 1 starts local ranks 0..2 of 4: all 7 processes fail fast naming pod 1 and the local
    ranks; the Communicator says so."""
    per = 4
    procs, codes, pods, elapsed = failing_job(
        ck, cl, "podmiss", per, lambda a: [(a[0]["sock"], lr, per) for lr in range(per)] +
        [(a[1]["sock"], lr, per) for lr in range(per - 1)])
    pod1 = pods[1]["metadata"]["name"]
    ck(codes == [3] * (2 * per - 1), "all 7 processes fail in coll_comm_init_agent (exit 3)")
    ck(elapsed < 30, "they fail within 30 s (%.1f s), not at the 40 s bootstrap timeout" % elapsed)
    want = re.compile(r"pod %s \(pod rank 1 of 2\) started 3 of its 4 local ranks: local ranks "
                      r"0-2 said hello .* local ranks 3 \(global ranks from 4\) did not" % pod1)
    named = [i for i in range(2 * per - 1) if want.search(procs.output(i))]
    ck(len(named) == 2 * per - 1, "every process's error names pod %s, local ranks 0-2 present "
       "and 3 missing (%d of 7)" % (pod1, len(named)))
    # pod 1's agent names rank 7 (its local rank 3); pod 0's ranks then report the root's
    # message, which names the same pod and local ranks
    st, failed = e2e.wait_status(cl, "podmiss", lambda s: s.get("phase") == "Failed" and
                                 want.search((s.get("lastError") or {}).get("message", "")), 20)
    last = st.get("lastError") or {}
    print("Communicator podmiss lastError: %s" % json.dumps(last)[:800])
    ck(failed, "status Failed; lastError names pod %s and its local ranks" % pod1,
       json.dumps(st)[:1500])
    def logged():
        log = cl.agent_log(cl.agents[1])
        return (re.search(r"AGENT-LOCAL-RANKS-MISSING .*local ranks 3 \(global ranks from 4\) "
                          r"did not", log) and
                re.search(r"Communicator podmiss status: phase=Failed", log))
    try:
        harness.wait_for(logged, 20, "pod 1's agent to write the status")
    except AssertionError:
        pass
    ck(logged(), "pod 1's agent logs the missing local rank and writes the Failed status",
       e2e.tail(cl.agent_log(cl.agents[1]), 1500))


def case_local_duplicate(ck, cl):
    """Two processes of pod 1 say LOCAL_RANK 0 (its local rank 1 starts a second later): the
    second is refused naming both pids, the pod's other hellos fail with it, and every process of
    the job fails at once through the bootstrap root."""
    per = 2
    procs, codes, pods, elapsed = failing_job(
        ck, cl, "poddup", per, lambda a: [(a[0]["sock"], 0, per), (a[0]["sock"], 1, per),
                                      (a[1]["sock"], 0, per), (a[1]["sock"], 0, per),
                                      (a[1]["sock"], 1, per)], local_s=20, late=(4,))
    pod1 = pods[1]["metadata"]["name"]
    p2, p3 = procs.procs[2].pid, procs.procs[3].pid
    m = None
    for i in (2, 3):
        m = m or re.search(r"two processes in pod %s claim LOCAL_RANK 0 \(global rank 2\): pid "
                           r"(\d+) said hello first, pid (\d+) second" % pod1, procs.output(i))
    ck(m and {int(m.group(1)), int(m.group(2))} == {p2, p3},
       "the refused process names pod %s, LOCAL_RANK 0 and both pids %d and %d" % (pod1, p2, p3))
    ck(all(c == 3 for c in codes), "every process fails in coll_comm_init_agent (exit 3): %s"
       % codes)
    ck(elapsed < 15, "within 15 s (%.1f s): the refused process failed the job through the root"
       % elapsed)
    ck(sum(1 for i in range(5) if "claim LOCAL_RANK 0" in procs.output(i)) >= 4,
       "the other processes' errors carry that message")


def case_local_range(ck, cl):
    """LOCAL_RANK 2 in a pod of 2 ranks (its local ranks 0 and 1 start a second later): refused
    naming the pod and local ranks 0..1; every process of the job fails with it."""
    per = 2
    procs, codes, pods, elapsed = failing_job(
        ck, cl, "podrange", per, lambda a: [(a[0]["sock"], 0, per), (a[0]["sock"], 1, per),
                                        (a[1]["sock"], 0, per), (a[1]["sock"], 1, per),
                                        (a[1]["sock"], 2, per)], local_s=20, late=(2, 3))
    pod1 = pods[1]["metadata"]["name"]
    ck(re.search(r"pod %s \(pod rank 1 of 2\): the process with pid %d says LOCAL_RANK 2, but the "
                 r"pod runs 2 local ranks \(ranksPerPod 2 from CollectiveTopology podrange-topo "
                 r"spec.ranksPerPod: local ranks 0\.\.1\)"
                 % (pod1, procs.procs[4].pid), procs.output(4)),
       "the stray process is refused naming pod %s, its pid, LOCAL_RANK 2 and 0..1" % pod1,
       e2e.tail(procs.output(4), 800))
    ck(all(c == 3 for c in codes) and elapsed < 15,
       "every process fails at once (%s, %.1f s)" % (codes, elapsed))


def case_kill_local(ck, cl):
    """Local rank 1 of pod 1 (rank 3) is SIGKILLed mid all_reduce: the others' errors and the
    Communicator name its pod, local rank and global rank."""
    per, victim = 2, 3
    cl.add(topology("podkill-topo", per=per, timeout_s=30))
    pods, agents = job_of_pods(ck, cl, "podkill", 2, per)
    procs = Procs(cl, [(agents[p]["sock"], lr, per) for p in range(2) for lr in range(per)],
                  ["--mode", "loop", "--count", "1048576"])
    deadline = time.time() + 90
    while time.time() < deadline and not all("looping rank=" in procs.output(i)
                                             for i in range(4)):
        if any(p.poll() is not None for p in procs.procs):
            break
        time.sleep(0.1)
    looping = all("looping rank=" in procs.output(i) for i in range(4))
    ck(looping, "4 ranks (2 pods x 2) run all_reduce in a loop")
    if not looping:
        procs.kill()
        return
    time.sleep(0.3)
    procs.procs[victim].send_signal(signal.SIGKILL)
    codes = procs.wait(60)
    pod1 = pods[1]["metadata"]["name"]
    for i in range(3):
        line = [x for x in procs.output(i).splitlines() if x.startswith("collective failed")]
        ck(codes[i] == 4 and line and re.search(r"rank 3 \(local rank 1 of 2 in pod %s" % pod1,
                                                line[0]),
           "rank %d: its error names rank 3, local rank 1 of pod %s" % (i, pod1),
           line[0][:800] if line else e2e.tail(procs.output(i), 800))
        if line:
            print("rank %d: %s" % (i, line[0][:400]))
    # the cause and the count may come in two patches (the count from rank 0's next report)
    st, named = e2e.wait_status(cl, "podkill", lambda s: (s.get("lastError") or {}).get(
        "rank") == victim and s.get("readyRanks") == 3, 30)
    last = st.get("lastError") or {}
    members = st.get("unhealthyMembers") or []
    print("Communicator podkill: %s" % json.dumps({k: st.get(k) for k in (
        "phase", "readyRanks", "lastError", "unhealthyMembers")})[:1500])
    ck(named and last.get("localRank") == 1 and last.get("pod") == pod1,
       "status.lastError: rank 3, localRank 1, pod %s" % pod1, json.dumps(last))
    ck([(m.get("rank"), m.get("localRank"), m.get("pod")) for m in members] ==
       [(victim, 1, pod1)], "status.unhealthyMembers is rank 3 (local rank 1 of pod %s)" % pod1,
       json.dumps(members)[:800])
    ck(st.get("readyRanks") == 3, "status.readyRanks drops to 3 of 4 (%s)" % st.get("readyRanks"))


def case_failure_cost(ck, cl):
    """Issue 21: 4 pods x 8 ranks (32); rank 13 (local rank 5 of pod 1) is SIGKILLed mid
    all_reduce; its 31 survivors report the failure. The API cost of that one failure is O(1):
    rank 0's pod's agent writes it, the next two agents look once; at most 2 Events (one on the
    Communicator, one on pod 1), counted."""
    npods, per, victim = 4, 8, 13
    n = npods * per
    cl.add(topology("podcost-topo", per=per, timeout_s=30))
    pods, agents = job_of_pods(ck, cl, "podcost", npods, per)
    procs = Procs(cl, [(agents[p]["sock"], lr, per) for p in range(npods) for lr in range(per)],
                  ["--mode", "loop", "--count", "262144"])
    deadline = time.time() + 150
    while time.time() < deadline and not all("looping rank=" in procs.output(i)
                                              for i in range(n)):
        if any(p.poll() is not None for p in procs.procs):
            break
        time.sleep(0.2)
    looping = all("looping rank=" in procs.output(i) for i in range(n))
    ck(looping, "32 ranks (4 pods x 8) run all_reduce in a loop")
    st, ready = e2e.wait_status(cl, "podcost", lambda s: s.get("phase") == "Ready", 30)
    ck(ready, "the Communicator is Ready before the failure", json.dumps(st)[:800])
    if not looping or not ready:
        procs.kill()
        return
    before = {e["metadata"]["name"] for e in cl.objects("events")}
    cl.control("/reset-counts", {})
    procs.procs[victim].send_signal(signal.SIGKILL)
    codes = procs.wait(90)
    failed = sum(1 for i, c in enumerate(codes) if i != victim and c not in (0, None))
    ck(failed == n - 1, "the 31 survivors fail (%d did): %s" % (failed, codes))
    st, named = e2e.wait_status(cl, "podcost", lambda s: (s.get("lastError") or {}).get(
        "rank") == victim, 30)
    counts = harness.settled(lambda: agent_tests.per_agent_counts(cl, "podcost-"), quiet=4.0)
    requests = sum(v["requests"] + v["watches"] for v in counts.values())
    conflicts = sum(v.get("codes", {}).get("409", 0) for v in counts.values())
    evs = [e for e in cl.objects("events") if e["metadata"]["name"] not in before]
    print("one failure at %d ranks (%d pods x %d): %d API requests (%d answered 409), %d Events "
          "%s; per agent %s" % (n, npods, per, requests, conflicts, len(evs),
                                [(e["involvedObject"]["kind"], e["involvedObject"]["name"],
                                  e["reason"], e.get("count")) for e in evs],
                                json.dumps({k: (v["requests"], v.get("verbs"), v.get("codes"))
                                            for k, v in counts.items()})))
    members = st.get("unhealthyMembers") or []
    ck(named and [m.get("rank") for m in members] == [victim] and st.get("unhealthyCount") == 1,
       "status names rank %d alone" % victim, json.dumps(
           {k: st.get(k) for k in ("lastError", "unhealthyMembers", "unhealthyCount")})[:1500])
    # the writer then reads the blamed pod for why it ended (docs/agent.md, "Why a rank ended"):
    # here it never says (one of 8 processes died, its container runs), so up to 5 looks in 60 s
    vpod = "get pods/" + pods[victim // per]["metadata"]["name"]
    reads = sum(v.get("objects", {}).get(vpod, 0) for v in counts.values())
    looks = max(0, reads - 1)
    ck(requests - looks <= 12, "the failure cost %d API requests besides %d looks at the blamed "
       "pod (bound 12: one writer's status patch, Events and the blamed pod's uid, two backups' "
       "looks)" % (requests - looks, looks))
    ck(looks <= 5, "the blamed pod was read %d times for why it ended (bound 5)" % looks)
    ck(len(evs) <= 2, "the failure made %d Events (bound 2)" % len(evs))


def case_standalone(ck, _cl):
    """coll-run --agent --pods 3 --ranks-per-pod 4: one agent per pod, collectives exact."""
    n, count = 12, 4096
    r = subprocess.run([e2e.ARGS.coll_run, "--pods", "3", "--ranks-per-pod", "4", "--timeout", "150",
                        "--agent=" + e2e.ARGS.agent, e2e.ARGS.check, "--count", str(count)],
                       capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL)
    out, err = r.stdout, r.stderr
    ck(r.returncode == 0, "coll-run --pods 3 --ranks-per-pod 4 exits 0", e2e.tail(out + err))
    per_rank = count // n
    for rank in range(n):
        for want in ("init ok rank=%d nranks=%d" % (rank, n), "local rank=%d local_rank=%d " %
                     (rank, rank % 4), "all_to_all ok per_rank=%d" % per_rank,
                     "all_reduce ok count=%d" % count, "done rank=%d" % rank):
            ck(any(x.startswith("[rank %d] %s" % (rank, want)) for x in out.splitlines()),
               "rank %d: %s" % (rank, want))
    ck("WRONG" not in out, "no wrong element")
    # the hierarchical all_reduce: each pod its own host (shared memory inside, TCP across),
    # counts that split unevenly, the flat ring beside it
    for hier in ("64K", "0"):
        r2 = subprocess.run([e2e.ARGS.coll_run, "--pods", "3", "--ranks-per-pod", "4", "--timeout",
                             "150", "--agent=" + e2e.ARGS.agent, e2e.ARGS.check, "--count", "100003"],
                            capture_output=True, text=True, timeout=200, stdin=subprocess.DEVNULL,
                            env=dict(os.environ, COLL_HIER_MIN=hier, COLL_SHM_DIRECT_MIN="0",
                                     COLL_DEBUG="INFO", COLL_DEBUG_SUBSYS="INIT",
                                     COLL_TEST_HOST_ID_SUFFIX=",".join("p%d" % (r // 4)
                                                                       for r in range(n))))
        o2 = r2.stdout + r2.stderr
        ok2 = sum(1 for rank in range(n) if "[rank %d] all_reduce ok count=100003" % rank in o2 and
                  "[rank %d] all_reduce avg ok count=100003" % rank in o2)
        ck(r2.returncode == 0 and ok2 == n and "WRONG" not in o2,
           "COLL_HIER_MIN=%s, a host per pod: all_reduce (sum, avg) of 100003 exact on %d of %d "
           "ranks" % (hier, ok2, n), e2e.tail(o2))
        said = re.search(r"3 pods x 4 ranks: rank 5 is local rank 1 of pod coll-run-pod-1 .*"
                         r"all_reduce from (\d+) bytes is hierarchical", o2)
        ck(said and said.group(1) == ("65536" if hier == "64K" else "0"),
           "rank 5 says where it runs and from how many bytes all_reduce is hierarchical (%s)"
           % hier, said.group(0) if said else "")
    agents = sorted(set(re.findall(r"^\[agent (\d+)\]", err, re.M)))
    ck(agents == ["0", "1", "2"], "three agents, one per pod (%s)" % agents)
    for p in range(3):
        ck(re.search(r"^\[agent %d\] .* AGENT-STANDALONE pod %d of 3 \(ranks %d\.\.%d of 12, 4 "
                     r"per pod\)" % (p, p, 4 * p, 4 * p + 3), err, re.M),
           "agent %d serves pod %d: ranks %d..%d" % (p, p, 4 * p, 4 * p + 3))


def case_webhook(ck, cl):
    """The admission webhook checks a pod's ranks: no more ranks than its GPUs, torchrun's
    --nnodes equal to the Job's pods; a pod that fits is admitted."""
    cl.add(topology("podhook-topo"))

    def trainer(nproc, gpus, nnodes=None):
        def edit(i, p):
            c = p["spec"]["containers"][0]
            c["command"] = ["torchrun", "--nproc-per-node", str(nproc)]
            if nnodes is not None:
                c["command"] += ["--nnodes", str(nnodes)]
            c["command"] += ["train.py"]
            c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        return edit
    for name, edit, want in (
            ("podhook-gpus", trainer(8, 4), r"the pod runs 8 ranks \(torchrun --nproc-per-node 8 "
             r"in container trainer\) but has 4 GPUs \(nvidia.com/gpu limits\)"),
            ("podhook-nnodes", trainer(4, 4, nnodes=5), r"torchrun --nnodes 5 in the pod, but "
             r"its Job runs 3 pods"),
            ("podhook-ok", trainer(4, 4, nnodes=3), None)):
        try:
            cl.add_job(name, 3, pod_edit=edit)
            err = None
        except RuntimeError as e:
            err = str(e)
        if want is None:
            ck(err is None, "%s: 4 ranks on 4 GPUs, --nnodes 3 in a Job of 3 pods: admitted"
               % name, err or "")
        else:
            ck(err is not None and re.search(want, err), "%s: the webhook refuses the pod: %s"
               % (name, (err or "admitted")[:300]), err or "")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    # e2e_tests' driver (arguments, fake API server, checks, logs of a failed case) runs them
    e2e.CASES = CASES
    e2e.NEEDS_CLUSTER = set(CASES) - {"standalone"}
    sys.exit(e2e.main())
