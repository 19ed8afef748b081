#!/usr/bin/env python3
"""Why a blamed rank ended, as Kubernetes says (label agent; k8s-agent/cause.c).
    cause_tests.py CASE --agent PATH/coll-agent --hello PATH/agent_hello_check [--keep]
Cases:
  failure_cause  after writing a failure blamed on another pod's rank that may have ended, the
                 writer agent reads that pod (and its node) and adds the cause: a NotReady node
                 without and with get on nodes, a deleted pod, and a mismatch (its rank is
                 alive: its pod is not read)
  peer_question  the "peer" question a waiting rank asks: pending, then a deleted pod's cause;
                 names never read; a flood of new names bounded
  cause_at_exit  the writer agent, stopped (SIGTERM) right after writing the failure, still makes
                 the looks due within its 10 s of flushing
Exit 0 pass, 1 fail, 77 skipped."""
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import agent_tests  # noqa: E402
import harness  # noqa: E402
from agent_tests import check, comm, per_agent_counts, report_all  # noqa: E402
from harness import hello, wait_for  # noqa: E402


def case_failure_cause(cl):
    """Why a blamed rank ended, as Kubernetes says: after writing a failure blamed on a rank that
    may have ended, the writer agent reads that rank's Pod (and its Node when the pod runs but is
    not Ready) and adds the cause to the member, lastError and an Event KcollFailureCause. Rank
    2's node stopped posting status; in a second job, rank 1's pod was deleted; in a third, the
    failure is a mismatch (the rank is alive): its pod is not read at all."""
    def job(name, victim, before_report, condition="Healthy=False/PeerFailed"):
        _, pods = cl.add_job(name, 3)
        agents = [cl.start_agent(p) for p in pods]
        rc, out = hello(agent_tests.ARGS.hello, [a["sock"] for a in agents], check=3)
        check(rc == 0, "bootstrap failed:\n" + out)
        report_all([a["sock"] for a in agents], ["Ready"])
        wait_for(lambda: ((comm(cl, name) or {}).get("status") or {}).get("phase") == "Ready",
                 30, "status.phase Ready")
        vpod = pods[victim]["metadata"]["name"]
        before_report(pods[victim])
        cl.control("/reset-counts", {})
        t0 = time.time()
        report_all([a["sock"] for i, a in enumerate(agents) if i != victim], [
            "Failed", "--error", "rank %d (pod %s) is gone" % (victim, vpod), "--error-rank",
            str(victim), "--error-pod", vpod, "--error-node", pods[victim]["spec"]["nodeName"],
            "--condition", condition])
        return vpod, t0

    def cause_of(name):
        members = ((comm(cl, name) or {}).get("status") or {}).get("unhealthyMembers") or [{}]
        return members[0].get("cause")

    def node_lost(pod):
        pod["spec"]["nodeName"] = "node-lost"
        pod["status"]["conditions"] = [{"type": "Ready", "status": "False",
                                        "lastTransitionTime": "2026-11-29T12:07:00Z"}]
        pod["status"]["containerStatuses"] = [{"name": "trainer", "ready": False,
                                               "restartCount": 0, "state": {"running": {}}}]
        cl.add(pod)
        cl.add({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-lost"},
                "status": {"conditions": [{
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastTransitionTime": "2026-11-29T12:07:40Z"}]}})

    # the chart's RBAC by default: no get on nodes; the pod says what it can
    vpod, t0 = job("cause-pod", 2, node_lost)
    cause = wait_for(lambda: cause_of("cause-pod"), 20, "a cause for rank 2")
    print("%.1f s after the reports: %s" % (time.time() - t0, cause))
    check(cause == "pod %s is not Ready since 2026-11-29T12:07:00Z though none of its containers "
          "ended: is its node node-lost down? (the agent may not read Nodes to tell: the Helm "
          "value rbac.readNodes=true lets it)" % vpod, "the cause: " + cause)
    # with rbac.readNodes=true the node says it
    cl.control("/allow", harness.chart_agent_rules(read_nodes=True))
    vpod, t0 = job("cause-node", 2, node_lost)
    cause = wait_for(lambda: cause_of("cause-node"), 20, "a cause for rank 2")
    cl.control("/allow", harness.chart_agent_rules())
    print("%.1f s after the reports: %s" % (time.time() - t0, cause))
    check("node node-lost is NotReady (Ready=Unknown, NodeStatusUnknown: Kubelet stopped "
          "posting node status.) since 2026-11-29T12:07:40Z" in cause, "the cause: " + cause)
    st = comm(cl, "cause-node")["status"]
    check("NotReady" in (st.get("lastError") or {}).get("cause", ""), "lastError.cause")
    ev = wait_for(lambda: [e for e in cl.objects("events") if e["reason"] == "KcollFailureCause"
                           and e["involvedObject"]["name"] == "cause-node"], 10,
                  "the Event KcollFailureCause")
    check(ev[0]["involvedObject"]["kind"] == "Communicator" and ev[0]["message"].startswith(
        "rank 2 (pod %s, node " % vpod) and "NotReady" in ev[0]["message"],
        "the Event on the Communicator: " + ev[0]["message"])
    counts = harness.settled(lambda: per_agent_counts(cl, "cause-node-"), quiet=1.0)
    gets = sum(v.get("verbs", {}).get("get", 0) for v in counts.values())
    print("reads: %s" % json.dumps({k: v.get("verbs") for k, v in counts.items()}))
    check(gets <= 3, "%d reads (bound 3: the blamed pod's uid for its Event, the pod, the node)"
          % gets)

    vpod, t0 = job("cause-gone", 1, lambda pod: cl.control("/delete", {
        "kind": "Pod", "namespace": "team-a", "name": pod["metadata"]["name"]}))
    cause = wait_for(lambda: cause_of("cause-gone"), 20, "a cause for rank 1")
    print("%.1f s after the reports: %s" % (time.time() - t0, cause))
    check(cause.startswith("pod %s no longer exists: it was deleted" % vpod), "the cause: " + cause)

    job("cause-alive", 2, lambda pod: None, condition="Healthy=False/CollectiveMismatch")
    wait_for(lambda: ((comm(cl, "cause-alive") or {}).get("status") or {}).get("lastError"), 20,
             "status.lastError")
    time.sleep(2.5)  # past the first two looks, were there any
    counts = per_agent_counts(cl, "cause-alive-")
    gets = sum(v.get("verbs", {}).get("get", 0) for v in counts.values())
    check(gets <= 1 and not cause_of("cause-alive"), "a mismatch's rank is alive: its pod is not "
          "read for a cause (%d reads, the one for its Event's uid)" % gets)



def case_cause_at_exit(cl):
    """The writer's pod often ends right after the failure (its training process raised): the
    agent, stopping, still makes the looks due within its 10 s of flushing. Rank 1 is blamed;
    rank 0's agent gets SIGTERM as soon as the failure is written; the kubelet writes rank 1's
    end 1.5 s later; the cause still arrives, and the agent then exits."""
    _, pods = cl.add_job("cause-exit", 3)
    agents = [cl.start_agent(p) for p in pods]
    rc, out = hello(agent_tests.ARGS.hello, [a["sock"] for a in agents], check=3)
    check(rc == 0, "bootstrap failed:\n" + out)
    report_all([a["sock"] for a in agents], ["Ready"])
    wait_for(lambda: ((comm(cl, "cause-exit") or {}).get("status") or {}).get("phase") ==
             "Ready", 30, "status.phase Ready")
    vpod = pods[1]["metadata"]["name"]
    report_all([agents[0]["sock"], agents[2]["sock"]], [
        "Failed", "--error", "rank 1 (pod %s) is gone" % vpod, "--error-rank", "1",
        "--error-pod", vpod, "--error-node", pods[1]["spec"]["nodeName"], "--condition",
        "Healthy=False/PeerFailed"])
    wait_for(lambda: ((comm(cl, "cause-exit") or {}).get("status") or {}).get("lastError"), 20,
             "status.lastError")
    t0 = time.time()
    agents[0]["proc"].send_signal(signal.SIGTERM)
    time.sleep(1.5)
    cl.kubelet_ends(vpod, {"exitCode": 1, "reason": "Error", "message": "ValueError: bad batch\n",
                           "finishedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    members = wait_for(lambda: [m for m in ((comm(cl, "cause-exit") or {}).get("status") or {})
                                .get("unhealthyMembers") or [] if m.get("cause")], 15,
                       "a cause written by the stopping agent")
    print("%.1f s after the SIGTERM: %s" % (time.time() - t0, members[0]["cause"]))
    check(members[0]["cause"].startswith("container trainer exited with code 1 (Error) at ") and
          members[0]["cause"].endswith("its last words: \"ValueError: bad batch\""),
          "the cause: " + members[0]["cause"])
    code = agents[0]["proc"].wait(timeout=15)
    print("the agent exited %.1f s after the SIGTERM (code %s)" % (time.time() - t0, code))
    check(time.time() - t0 < 12, "the agent exits within its 10 s of flushing")


def case_peer_question(cl):
    """The "peer" question (proto/peer_ipc.h) as a waiting rank asks it: answered at once,
    "pending" until the agent's read is back, then the cause of a deleted pod; a live pod is not
    said to have ended; its own pod, a name that is not DNS-1123 and a 127-character one (which
    the library's member field may have cut) are never read; a flood of ever new names costs at
    most 8 reads per 5 s."""
    _, pods = cl.add_job("peerq", 3)
    agents = [cl.start_agent(p) for p in pods]
    rc, out = hello(agent_tests.ARGS.hello, [a["sock"] for a in agents], check=3)
    check(rc == 0, "bootstrap failed:\n" + out)
    names = [p["metadata"]["name"] for p in pods]
    cl.control("/delete", {"kind": "Pod", "namespace": "team-a", "name": names[2]})

    def ask(peers):
        t = time.time()
        r = agent_tests.rpc(agents[0]["sock"], json.dumps(
            {"v": 1, "type": "peer", "pid": os.getpid(), "peers": peers}).encode())
        return r, time.time() - t

    q = [{"rank": 1, "pod": names[1], "node": "node-0"}, {"rank": 2, "pod": names[2]},
         {"rank": 0, "pod": names[0]}, {"rank": 5, "pod": "Bad_Name"},
         {"rank": 6, "pod": "p" * 127}]
    cl.control("/reset-counts", {})
    r, took = ask(q)
    print("first answer in %.3f s: %s" % (took, r))
    check(r.get("type") == "peer" and r.get("ok") and r.get("pending") and r.get("peers") == [],
          "the first answer comes at once, pending, naming nobody: %s" % r)
    r = wait_for(lambda: (lambda a: a if a.get("peers") else None)(ask(q)[0]), 10,
                 "an answer naming rank 2")
    print("then: %s" % r)
    check([p["rank"] for p in r["peers"]] == [2] and r["peers"][0]["cause"].startswith(
        "pod %s no longer exists" % names[2]), "rank 2's pod is gone; rank 1's lives: %s" % r)
    objs = {}
    for c in per_agent_counts(cl, "peerq-0-").values():
        objs.update(c.get("objects", {}))
    print("reads: %s" % objs)
    check(set(objs) == {"get pods/" + names[1], "get pods/" + names[2]},
          "only the two other pods were read (not its own, not Bad_Name, not the 127-character "
          "name): %s" % sorted(objs))
    # a failure blamed on a 127-character pod (a name the library may have cut): its end is not
    # looked up either (its 404 would call a live pod deleted)
    long_pod = "q" * 127
    report_all([agents[0]["sock"]], [
        "Failed", "--error", "rank 1 is gone", "--error-rank", "1", "--error-pod", long_pod,
        "--error-node", "node-0", "--condition", "Healthy=False/PeerFailed"])
    wait_for(lambda: ((comm(cl, "peerq") or {}).get("status") or {}).get("lastError"), 20,
             "status.lastError")
    time.sleep(2.5)  # past the first two looks, were there any
    objs = {}
    for c in per_agent_counts(cl, "peerq-0-").values():
        objs.update(c.get("objects", {}))
    check(objs.get("get pods/" + long_pod, 0) <= 1, "the 127-character pod was not read for its "
          "end (once at most, for its Event's uid): %s" % objs)
    # a flood: 40 questions of 8 new names each
    cl.control("/reset-counts", {})
    t0 = time.time()
    for i in range(40):
        ask([{"rank": 10 + k, "pod": "flood-%d-%d" % (i, k)} for k in range(8)])
    time.sleep(1.0)
    reads = sum(c.get("verbs", {}).get("get", 0)
                for c in per_agent_counts(cl, "peerq-0-").values())
    print("40 questions of 8 new names in %.1f s: %d reads" % (time.time() - t0, reads))
    check(reads <= 8 * (1 + int((time.time() - t0) / 5)), "at most 8 reads per 5 s (%d)" % reads)


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}

if __name__ == "__main__":
    sys.exit(agent_tests.main(CASES))
