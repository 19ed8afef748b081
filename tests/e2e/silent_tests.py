#!/usr/bin/env python3
"""A rank that goes silent mid collective under the kcoll agent (label agent): its node died, so
its connections stay open and nothing reaches the others. The waiting ranks ask their pod's agent
whether Kubernetes says it ended (proto/peer_ipc.h; docs/agent.md, "Silent peers").
    silent_tests.py CASE --coll-run PATH --agent PATH --check PATH/e2e_check [--keep]
Cases:
  silent_node   rank 2 stopped (SIGSTOP: silent, connections open), its pod not Ready and its node
                NotReady as the node controller marks them, get on nodes granted: the others fail
                in about 12 s (the first question at 10 s, its answer 2 s later) naming the node,
                not at COLL_TIMEOUT (60 s here), and the status says why
  silent_mark   the same without get on nodes (the chart's default): the pod's conditions as the
                node controller leaves them (Ready False, ContainersReady True) say it alone
  silent_alive  the same stop with the pod Ready (a hung or slow process, not a dead node): the
                answers say nothing ended, and the others fail at COLL_TIMEOUT (20 s) as before
Exit 0 pass, 1 fail, 77 skipped."""
import json
import os
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "agent"))
sys.path.insert(0, HERE)
import agent_tests  # noqa: E402
import harness  # noqa: E402
import e2e_tests as e2e  # noqa: E402


def looping(ck, cl, name, n, timeout_s):
    """n ranks of a new job running all_reduce in a loop under their agents, Ready."""
    cl.add(e2e.topology(name + "-topo", e2e.library_version(), timeout_s=timeout_s))
    _, pods = cl.add_job(name, n)
    agents = [cl.start_agent(p) for p in pods]
    ranks = e2e.Ranks(cl, [a["sock"] for a in agents], ["--mode", "loop", "--count", "1048576"])
    deadline = time.time() + 60
    while time.time() < deadline and not all("looping rank=" in ranks.output(i)
                                              for i in range(n)):
        if any(p.poll() is not None for p in ranks.procs):
            break
        time.sleep(0.1)
    ok = all("looping rank=" in ranks.output(i) for i in range(n))
    ck(ok, "%d ranks run all_reduce in a loop" % n,
       "\n".join(e2e.tail(ranks.output(i), 600) for i in range(n)))
    st, ready = e2e.wait_status(cl, name, lambda s: s.get("phase") == "Ready", 20)
    ck(ready, "the Communicator is Ready", json.dumps(st)[:600])
    return pods, ranks, ok and ready


def stopped(ck, cl, name, timeout_s, victim, before=None):
    """looping() with 3 ranks, then before(), then victim SIGSTOPped: (pods, ranks, its time),
    or None when the job did not run."""
    pods, ranks, ok = looping(ck, cl, name, 3, timeout_s)
    if not ok:
        ranks.kill()
        return None
    before()
    ranks.procs[victim].send_signal(signal.SIGSTOP)
    return pods, ranks, time.time()


def failures(ck, ranks, victim, n, limit):
    """Waits for the survivors (the victim is killed after them); their 'collective failed'
    lines and the seconds it took."""
    t = time.time()
    lines = {}
    for i in range(n):
        if i == victim:
            continue
        try:
            ranks.procs[i].wait(timeout=max(0.1, limit - (time.time() - t)))
        except Exception:  # noqa: BLE001 - a timeout: reported below
            pass
        out = ranks.output(i)
        lines[i] = ([x for x in out.splitlines() if x.startswith("collective failed")] or [""])[0]
    ranks.procs[victim].send_signal(signal.SIGCONT)
    ranks.kill()
    return lines


def node_dies(ck, cl, name, read_nodes):
    """Rank 2 stopped, then its node dies as the node controller tells: with read_nodes the Node
    NotReady and the pod not Ready (the node's words are the cause), else only the pod's
    conditions as the node controller leaves them (Ready False, ContainersReady True)."""
    n, victim = 3, 2
    run = stopped(ck, cl, name, 60, victim, lambda: cl.control(
        "/allow", harness.chart_agent_rules(read_nodes=read_nodes)))
    if run is None:
        return
    pods, ranks, t0 = run
    vpod = pods[victim]["metadata"]["name"]
    time.sleep(1.0)  # the node controller's part: the node stopped posting status
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    cl.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-dead"},
            "status": {"conditions": [{
                "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                "message": "Kubelet stopped posting node status.", "lastTransitionTime": now}]}})
    pod = [o for o in cl.objects("pods") if o["metadata"]["name"] == vpod][0]
    pod["spec"]["nodeName"] = "node-dead"
    pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    pod["status"]["containerStatuses"] = [{"name": "trainer", "ready": False, "restartCount": 0,
                                           "state": {"running": {}}}]
    said = "node node-dead is NotReady (Ready=Unknown, NodeStatusUnknown"
    if not read_nodes:
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                        "lastTransitionTime": now},
                                       {"type": "ContainersReady", "status": "True"}]
        pod["status"]["containerStatuses"][0]["ready"] = True
        said = "node node-dead stopped reporting: the node controller marked pod %s not Ready" % vpod
    cl.add(pod)
    lines = failures(ck, ranks, victim, n, 45)
    took = time.time() - t0
    print("survivors failed %.1f s after rank %d stopped (COLL_TIMEOUT 60 s)" % (took, victim))
    for i, line in lines.items():
        print("rank %d: %s" % (i, line[:700]))
        ck("rank %d (pod %s" % (victim, vpod) in line and "is gone, as Kubernetes tells this "
           "pod's kcoll agent: " + said in line,
           "rank %d fails naming rank %d and its lost node" % (i, victim), line)
    ck(took < 25, "the survivors fail in %.1f s, well before COLL_TIMEOUT (60 s)" % took)
    st, said = e2e.wait_status(cl, name, lambda s: "node-dead" in (
        (s.get("lastError") or {}).get("cause") or ""), 20)
    ck(said and (st.get("lastError") or {}).get("rank") == victim,
       "status.lastError names rank %d with the node as its cause" % victim,
       json.dumps(st.get("lastError"))[:1200])


def case_silent_node(ck, cl):
    node_dies(ck, cl, "e2esilent", True)


def case_silent_mark(ck, cl):
    node_dies(ck, cl, "e2emark", False)


def case_silent_alive(ck, cl):
    n, victim = 3, 2
    run = stopped(ck, cl, "e2ealive", 20, victim, lambda: cl.control("/reset-counts", {}))
    if run is None:
        return
    pods, ranks, t0 = run
    lines = failures(ck, ranks, victim, n, 45)
    took = time.time() - t0
    print("survivors failed %.1f s after rank %d stopped (COLL_TIMEOUT 20 s)" % (took, victim))
    for i, line in lines.items():
        print("rank %d: %s" % (i, line[:500]))
        ck("made no progress for" in line and "Kubernetes" not in line,
           "rank %d fails at COLL_TIMEOUT, as without the agent's answers" % i, line)
    ck(19 <= took < 35, "the survivors fail at COLL_TIMEOUT (%.1f s)" % took)
    vpod = "get pods/" + pods[victim]["metadata"]["name"]
    reads = sum(c.get("objects", {}).get(vpod, 0)
                for c in agent_tests.per_agent_counts(cl, "e2ealive-").values())
    print("the stopped rank's pod was read %d times by the waiting ranks' agents" % reads)
    ck(1 <= reads <= 8, "its pod was read %d times (questions at 10 and 20 s, answers at most "
       "every 5 s per agent)" % reads)


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    e2e.CASES = CASES
    e2e.NEEDS_CLUSTER = set(CASES)
    sys.exit(e2e.main())
