#!/usr/bin/env python3
"""Rendezvous without MASTER_ADDR: `coll-run -n 2 --agent python3 torch_rank.py` (the sidecar
agent in standalone mode: the backend gets everything from COLL_AGENT_SOCKET) and `coll-run -n 4
python3 torch_rank.py` (COLL_UNIQUE_ID/COLL_RANK/COLL_NRANKS); then `python3 -m kcoll.check`.
(The store path, torchrun's MASTER_ADDR/MASTER_PORT, is what test_ops and test_ddp use.)

usage: test_launch.py --coll-run PATH [--agent PATH]
(without --agent, when coll-agent was not built, the agent half is left out and says so)
"""
import argparse
import os
import shutil
import subprocess
import tempfile
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_common as tc  # noqa: E402

tc.need_torch()


def run(ck, cmd, n, how, timeout=100, extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT",
                                                             "RANK", "WORLD_SIZE")}
    env.update(extra or {})
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                       stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    print("%s: exit %d in %.1f s" % (" ".join(os.path.basename(c) for c in cmd), r.returncode,
                                     time.time() - t0))
    ck(r.returncode == 0, "%s: exit 0\n%s" % (how, out[-3000:]))
    for rank in range(n):
        want = "[rank %d] torch rank %d of %d ok (rendezvous: %s)" % (rank, rank, n, how)
        ck(want in out.splitlines(), "%s: %s" % (how, want))
    return out


def torchrun(ck, nodes, per_node):
    """nodes torchrun processes of per_node workers each, --max_restarts=1; returns their output.
    Debian's PyTorch 1.13 under Python 3.11 cannot parse torchrun's default --redirects/--tee of 0
    (IntFlag iteration skips Std.NONE); a mapping for a local rank that does not exist (9:1) means
    the same and parses everywhere."""
    world = nodes * per_node
    tmp = tempfile.mkdtemp(prefix="kcoll-torchrun-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "COLL_"))}
    env["KCOLL_TEST_MARK"] = os.path.join(tmp, "rank1-exited")
    how = "torchrun %d node(s) x %d" % (nodes, per_node)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--redirects", "9:1", "--tee", "9:1",
           "--nproc_per_node", str(per_node), "--max_restarts", "1", "--monitor_interval", "1"]
    if nodes == 1:
        cmd += ["--standalone"] if per_node == 2 else []
    else:
        cmd += ["--nnodes", str(nodes), "--rdzv_backend", "c10d", "--rdzv_id", "kcoll-test",
                "--rdzv_endpoint", "127.0.0.1:%d" % tc.free_port()]
    cmd.append(os.path.join(HERE, "torch_elastic_rank.py"))
    t0 = time.time()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, stdin=subprocess.DEVNULL) for _ in range(nodes)]
    out = ""
    end = time.time() + 60  # 8-11 s idle; a CI run once passed 90 s here (07:18 UTC, 29 Nov)
    for p in procs:
        try:
            out += p.communicate(timeout=max(end - time.time(), 1))[0]
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out += p.communicate()[0] + "\n(HUNG: killed after 60 s)"
            print("%s: hung; its output:\n%s" % (how, out[-6000:]))
    shutil.rmtree(tmp, ignore_errors=True)
    print("%s: exit %s in %.1f s" % (how, [p.returncode for p in procs], time.time() - t0))
    ck(all(p.returncode == 0 for p in procs), "%s: every torchrun exits 0\n%s" % (how, out[-4000:]))
    lines = out.splitlines()
    ck("rank 1 exits on purpose" in lines, "%s: rank 1 exited on the first try" % how)
    named = [ln for ln in lines if " raised: " in ln]
    ck(len(named) >= 1 and all("rank 1 (pid" in ln for ln in named),
       "%s: the others raised naming rank 1\n%s" % (how, "\n".join(named)))
    for rank in range(world):
        ok = [ln for ln in lines if ln.endswith(": rank %d of %d ok" % (rank, world))]
        ck(len(ok) == 1 and ok[0].startswith("restart 1"),
           "%s: rank %d ran to the end after the restart (%s)" % (how, rank, ok))


def agent_missing_rank(ck, coll_run, agent):
    """Under the agent, rank 1 exits before its creation: rank 0's init_process_group(timeout=3 s)
    raises within INIT_LIMIT naming rank 1 (the agent's pinned bootstrap timeout is 120 s)."""
    cmd = [coll_run, "-n", "2", "--timeout", "90", "--agent=" + agent, sys.executable,
           os.path.join(HERE, "torch_fault_rank.py"), "init_missing_agent"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MASTER_", "COLL_"))}
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=100, env=env,
                       stdin=subprocess.DEVNULL)
    out = r.stdout + r.stderr
    raised = [ln for ln in out.splitlines() if ln.startswith("[rank 0] RAISED after ")]
    secs = float(raised[0].split()[4]) if raised else None
    print("agent, rank 1 missing: exit %d in %.1f s; %s" % (r.returncode, time.time() - t0,
                                                            raised[0] if raised else "no RAISED"))
    ck(secs is not None and secs <= tc.INIT_LIMIT and "missing: rank 1" in raised[0],
       "agent, rank 1 missing: rank 0's init_process_group raised within %.0f s naming rank 1\n%s"
       % (tc.INIT_LIMIT, out[-3000:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--coll-run", required=True)
    ap.add_argument("--agent")
    a = ap.parse_args()
    ck = tc.Checks("launch")
    py = sys.executable
    script = os.path.join(HERE, "torch_rank.py")
    if a.agent:
        out = run(ck, [a.coll_run, "-n", "2", "--timeout", "90", "--agent=" + a.agent, py,
                       script], 2, "agent")
        ck("AGENT-STANDALONE" in out, "the agents served the ranks (AGENT-STANDALONE)")
        agent_missing_rank(ck, a.coll_run, a.agent)
    else:
        print("NOTE: coll-agent was not built; the agent rendezvous is not tested here")
    run(ck, [a.coll_run, "-n", "4", "--timeout", "90", py, script], 4, "coll-run")
    # ProcessGroupNCCL's settings kept from a backend="nccl" job: one INFO line each (COLL_DEBUG)
    habits = {"TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_ASYNC_ERROR_HANDLING": "1",
              "TORCH_NCCL_DESYNC_DEBUG": "1", "TORCH_NCCL_AVOID_RECORD_STREAMS": "1",
              "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "COLL_DEBUG": "INFO",
              "COLL_DEBUG_SUBSYS": "TORCH"}
    out = run(ck, [a.coll_run, "-n", "2", "--timeout", "90", py, script], 2, "coll-run",
              extra=habits)
    for want in ("TORCH_NCCL_BLOCKING_WAIT=1 is ProcessGroupNCCL's; the kcoll backend does not "
                 "read it and does this instead: Work.wait() blocks",
                 "NCCL_ASYNC_ERROR_HANDLING=1 is ProcessGroupNCCL's; the kcoll backend does not "
                 "read it and does this instead: a failed collective raises",
                 "TORCH_NCCL_DESYNC_DEBUG=1 is ProcessGroupNCCL's; the kcoll backend does not "
                 "read it and does this instead: every collective's call",
                 "TORCH_NCCL_AVOID_RECORD_STREAMS=1 is ProcessGroupNCCL's and has no meaning",
                 "TORCH_DISTRIBUTED_DEBUG=DETAIL: PyTorch 1.13 does not wrap"):
        for rank in range(2):
            ck(out.count(":rank %d kcoll INFO TORCH %s" % (rank, want)) == 1,
               "rank %d answers once: %s" % (rank, want))
    # leaving the interpreter while the worker still runs a Python callback (no
    # destroy_process_group): exit 0, not an abort at exit
    ex = subprocess.run([a.coll_run, "-n", "2", "--timeout", "60", py,
                         os.path.join(HERE, "torch_exit_rank.py")], capture_output=True,
                        text=True, timeout=90, stdin=subprocess.DEVNULL)
    out = ex.stdout + ex.stderr
    ck(ex.returncode == 0 and out.count(" ok\n") == 2 and "terminate called" not in out,
       "exit with the worker in a callback: exit 0, both ranks ok\n" + out[-2000:])
    torchrun(ck, 1, 3)
    torchrun(ck, 1, 2)
    torchrun(ck, 2, 2)
    r = subprocess.run([py, "-m", "kcoll.check"], capture_output=True, text=True, timeout=60)
    print(r.stdout.strip())
    ck(r.returncode == 0 and r.stdout.count(": ok:") == 2, "kcoll.check: two health lines ok\n"
       + r.stdout + r.stderr)
    n = ck.finish()
    print("%d checks passed" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
