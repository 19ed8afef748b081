#!/usr/bin/env python3
"""Failures reach PyTorch as exceptions, never as hangs (processes started with MASTER_ADDR/
MASTER_PORT, the store path):
  * 3 ranks train with DDP; rank 2 is SIGKILLed at step 5: ranks 0 and 1 raise RuntimeError
    within KILL_LIMIT seconds, and the message names rank 2;
  * the same with each rank's batches from a forked DataLoader worker, and a forked child that
    sleeps 15 s: ranks 0 and 1 raise within FORK_LIMIT seconds naming rank 2 (the children
    inherited rank 2's sockets; before kcoll's fork handler, the others waited for them to end);
  * wait(timeout=2 s) on an all_reduce that the peer has not joined raises within WAIT_LIMIT
    seconds naming the operation and the rank it waited on (before 29 Nov 2026, no rank); the
    late peer then raises too instead of hanging; the same for an irecv whose send comes 4 s
    late (a posted request; before its fix on 29 Nov 2026 the message named no rank);
  * kcoll.abort() while the point-to-point worker runs a completion callback, with an irecv
    posted: its wait raises within ABORT_LIMIT seconds saying the group was aborted (before
    its fix on 29 Nov 2026 the worker spun on the gone communicator, writing a warning per try);
  * with the group's timeout at 2 s and COLL_TIMEOUT unset, an all_reduce the peer joins 6 s
    late fails by itself within GROUP_LIMIT seconds, with kcoll's message naming the late rank:
    the group's timeout is kcoll's deadline (before, COLL_TIMEOUT's 300 s);
  * with the group's timeout at 3 s, a rank that dies before its creation makes rank 0's
    init_process_group raise within INIT_LIMIT seconds naming it (before, it waited for
    COLL_BOOTSTRAP_TIMEOUT, 120 s: a test killed its rank 0 after 90 s);
  * kcoll.abort() from a second thread, 1 s into an all_reduce the peer never joins: the wait
    raises within ABORT_LIMIT seconds (not the group's 60 s), the next call is refused saying
    the group was aborted, and the peer's all_reduce raises naming the aborted rank;
    the same 1 s into an irecv whose send never comes: the peer's recv and all_reduce raise
    naming the aborted rank (both communicators of the group are aborted);
    kcoll.shutdown() with the group still referenced closes its communicator's sockets and
    makes a later call raise saying so (PyTorch >= 2.7 calls both from destroy_process_group
    and Backend::abort; 1.13 here calls them through the package);
  * SIGINT (Ctrl-C) during an all_reduce the peer joins 3 s late raises KeyboardInterrupt within
    INTERRUPT_LIMIT seconds (before, it waited for the peer, or the group's timeout), and the
    group still works: the interrupted call completes in order; when the interrupted rank
    leaves instead, its communicator is aborted at once, and the peer's all_reduce 3 s later
    raises naming rank 0 (before, the exit waited 5 s and the peer completed the call); where
    rank 0's part reached the peer before its abort did, the peer's first all_reduce completes
    with the right sum and its next one raises.
"""
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_common as tc  # noqa: E402

tc.need_torch()

KILL_LIMIT = 30.0
FORK_LIMIT = 8.0
WAIT_LIMIT = 5.0
GROUP_LIMIT = 5.0
INTERRUPT_LIMIT = 1.5
INIT_LIMIT = tc.INIT_LIMIT
ABORT_LIMIT = 3.0  # kcoll.abort() 1 s into a wait whose group timeout is 60 s


def job(mode, world):
    port = tc.free_port()
    procs = []
    t0 = time.time()
    for rank in range(world):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                   WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "torch_fault_rank.py"),
                                       mode], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n(HUNG: killed by the test after 90 s)"
        outs.append((p.returncode, out))
    return outs, time.time() - t0


def raised_after(out):
    for line in out.splitlines():
        if line.startswith("RAISED after "):
            return float(line.split()[2]), line
    return None, None


def victim_killed(ck, mode, limit):
    """A 3-rank job in which rank 2 is SIGKILLed: ranks 0 and 1 raise within limit seconds,
    naming rank 2 (fork: with rank 2's forked children still alive)."""
    outs, took = job(mode, 3)
    print("%s: job ended in %.1f s" % (mode, took))
    ck(outs[2][0] == -9, "%s: rank 2 was killed (exit %s)" % (mode, outs[2][0]))
    for rank in (0, 1):
        rc, out = outs[rank]
        secs, line = raised_after(out)
        print("%s: rank %d: exit %s: %s" % (mode, rank, rc, line or out[-1500:]))
        ck(rc == 3 and secs is not None and secs <= limit,
           "%s: rank %d raised within %.0f s (exit %s)\n%s" % (mode, rank, limit, rc, out[-2000:]))
        ck(line is not None and "rank 2" in line, "%s: rank %d's error names rank 2" % (mode, rank))


def rank0_raised(ck, mode, limit, what, words):
    """A 2-rank job whose rank 0 must raise within limit seconds with all of words in its
    message; the job's outputs."""
    outs, took = job(mode, 2)
    print("%s: job ended in %.1f s" % (mode, took))
    secs, line = raised_after(outs[0][1])
    print("%s: rank 0: exit %s: %s" % (mode, outs[0][0], line or outs[0][1][-1500:]))
    ck(outs[0][0] == 3 and secs is not None and secs <= limit,
       "%s: rank 0's %s within %.0f s\n%s" % (mode, what, limit, outs[0][1][-2000:]))
    ck(line is not None and all(w in line for w in words),
       "%s: rank 0's message has %s" % (mode, ", ".join(words)))
    return outs


def abort_and_shutdown(ck):
    outs, took = job("abort", 2)
    print("abort: job ended in %.1f s" % took)
    secs, line = raised_after(outs[1][1])
    print("abort: rank 1: exit %s: %s" % (outs[1][0], line or outs[1][1][-1500:]))
    ck(outs[1][0] == 3 and secs is not None and secs <= ABORT_LIMIT and "abort" in line,
       "abort: rank 1's wait raised within %.0f s of the start, naming the abort\n%s"
       % (ABORT_LIMIT, outs[1][1][-2000:]))
    ck("REFUSED: kcoll: this process group was aborted" in outs[1][1],
       "abort: rank 1's next all_reduce was refused: the group was aborted")
    secs0, line0 = raised_after(outs[0][1])
    print("abort: rank 0: exit %s: %s" % (outs[0][0], line0 or outs[0][1][-1500:]))
    ck(outs[0][0] == 3 and line0 is not None and "rank 1" in line0,
       "abort: rank 0's all_reduce raised naming rank 1 (the first may complete with the right "
       "sum: rank 1 sent its part before the abort)\n%s" % outs[0][1][-2000:])
    # the same during an irecv: the point-to-point communicator goes with the group's
    outs, took = job("abort_p2p", 2)
    secs, line = raised_after(outs[1][1])
    print("abort_p2p: job ended in %.1f s; rank 1: exit %s: %s"
          % (took, outs[1][0], line or outs[1][1][-1500:]))
    ck(outs[1][0] == 3 and secs is not None and secs <= ABORT_LIMIT and "abort" in line,
       "abort_p2p: rank 1's irecv raised within %.0f s, naming the abort\n%s"
       % (ABORT_LIMIT, outs[1][1][-2000:]))
    ck(outs[0][0] == 3, "abort_p2p: rank 0's recv and all_reduce both raised naming rank 1\n%s"
       % outs[0][1][-2000:])
    outs, took = job("shutdown", 2)
    print("shutdown: job ended in %.1f s" % took)
    for rank, (rc, out) in enumerate(outs):
        fds = [ln.split()[1:] for ln in out.splitlines() if ln.startswith("FDS ")]
        print("shutdown: rank %d: exit %s, open fds before/after: %s" % (rank, rc, fds))
        ck(rc == 0 and "SHUTDOWN OK" in out.splitlines(),
           "shutdown: rank %d ran to the end\n%s" % (rank, out[-2000:]))
        ck(fds and int(fds[0][1]) < int(fds[0][0]),
           "shutdown: rank %d's communicator closed its sockets while the group is referenced"
           % rank)
        ck("REFUSED: kcoll: this process group was shut down" in out,
           "shutdown: rank %d's later all_reduce was refused: the group was shut down" % rank)


def main():
    ck = tc.Checks("fault")
    for mode, limit in (("kill", KILL_LIMIT), ("fork", FORK_LIMIT)):
        victim_killed(ck, mode, limit)
    outs = rank0_raised(ck, "wait", WAIT_LIMIT, "wait(timeout=2 s) raised",
                        ("all_reduce", "2000 ms", "waiting on rank 1 (pid"))
    _, line1 = raised_after(outs[1][1])
    print("wait: rank 1: exit %s: %s" % (outs[1][0], line1 or outs[1][1][-1500:]))
    ck(outs[1][0] == 3, "the late rank 1 raised instead of hanging\n%s" % outs[1][1][-2000:])
    rank0_raised(ck, "wait_p2p", WAIT_LIMIT, "an irecv's wait(timeout=2 s) raised",
                 ("recv from rank 1", "2000 ms", "waiting on rank 1 (pid"))
    outs = rank0_raised(ck, "abort_idle", ABORT_LIMIT,
                        "a posted irecv's wait raised after kcoll.abort() during a callback",
                        ("this process group was aborted",))
    ck(len(outs[0][1]) < 20000, "abort_idle: rank 0 wrote %d bytes (a worker spinning on the "
       "gone communicator logs a line per try)" % len(outs[0][1]))
    rank0_raised(ck, "group", GROUP_LIMIT,
                 "all_reduce failed by itself (the group's 2 s timeout is kcoll's deadline)",
                 ("COLL_TIMEOUT", "rank 1"))
    rank0_raised(ck, "init_missing", INIT_LIMIT,
                 "init_process_group raised (the group's 3 s timeout bounds the creation)",
                 ("missing: rank 1",))
    abort_and_shutdown(ck)
    outs, took = job("interrupt", 2)
    print("interrupt: job ended in %.1f s" % took)
    for rank, (rc, out) in enumerate(outs):
        print("interrupt: rank %d: exit %s: %s" % (rank, rc, " | ".join(out.splitlines()[-3:])))
        ck(rc == 0 and "GROUP OK" in out.splitlines(),
           "interrupt: rank %d: the group works after the interrupted wait\n%s"
           % (rank, out[-2000:]))
    took0 = [float(l.split()[2]) for l in outs[0][1].splitlines() if l.startswith("INTERRUPTED")]
    ck(took0 and took0[0] <= INTERRUPT_LIMIT,
       "interrupt: rank 0's KeyboardInterrupt came within %.1f s (%s)" % (INTERRUPT_LIMIT, took0))
    outs, took = job("interrupt_exit", 2)
    print("interrupt_exit: job ended in %.1f s" % took)
    secs, line = raised_after(outs[1][1])
    print("interrupt_exit: rank 0 exit %s; rank 1: exit %s: %s"
          % (outs[0][0], outs[1][0], line or outs[1][1][-1500:]))
    ck(outs[0][0] != 0 and "KeyboardInterrupt" in outs[0][1],
       "interrupt_exit: rank 0 left through KeyboardInterrupt\n%s" % outs[0][1][-2000:])
    ck(outs[1][0] == 3 and line is not None and "rank 0" in line,
       "interrupt_exit: rank 1's all_reduce raised naming rank 0\n%s" % outs[1][1][-2000:])
    n = ck.finish()
    print("%d checks passed" % n)
    return 0


if __name__ == "__main__":
    sys.exit(main())
