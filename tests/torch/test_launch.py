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
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_common as tc  # noqa: E402

tc.need_torch()


def run(ck, cmd, n, how, timeout=100):
    env = {k: v for k, v in os.environ.items() if k not in ("MASTER_ADDR", "MASTER_PORT",
                                                             "RANK", "WORLD_SIZE")}
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
    else:
        print("NOTE: coll-agent was not built; the agent rendezvous is not tested here")
    run(ck, [a.coll_run, "-n", "4", "--timeout", "90", py, script], 4, "coll-run")
    r = subprocess.run([py, "-m", "kcoll.check"], capture_output=True, text=True, timeout=60)
    print(r.stdout.strip())
    ck(r.returncode == 0 and r.stdout.count(": ok:") == 2, "kcoll.check: two health lines ok\n"
       + r.stdout + r.stderr)
    n = ck.finish()
    print("%d checks passed" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
