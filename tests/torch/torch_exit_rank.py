#!/usr/bin/env python3
"""One rank that leaves the interpreter while the group's worker still runs Python: a Work's
future gets two callbacks, then() (the main thread waits for its result) and one that sleeps
0.5 s on the worker after it. Without kcoll's exit hook the main thread finalizes the interpreter
while the worker sleeps, and the worker's return into Python aborts the process ("terminate
called without an active exception"); with it, the exit waits for the worker. The callback also
waits for its own Work, which returns at once (the future is complete). Before that, a child
forked while the worker sleeps in its queue's wait leaves through the interpreter's exit as well: a collective
there is refused naming the fork, the group's destructor leaves the parent's worker, condition
variables and communicator alone (destroying the condition variable the parent's worker waited
on hung the child: glibc waits for its waiters), and the group must still work in the parent.
Prints "exit rank R ok" before it leaves; test_launch.py runs it under coll-run and checks the
exit code."""
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import kcoll  # noqa: F401


def fork_child_leaves(t):
    """A child forked while the worker waits for a job: its collective is refused, it leaves
    through sys.exit within 20 s with status 0, and the parent's group still works."""
    time.sleep(0.3)  # the worker is past its spin, waiting on its condition variable
    child = os.fork()
    if child == 0:
        try:
            dist.all_reduce(t)
            os._exit(3)  # a forked child must not join its parent's collectives
        except RuntimeError as e:
            if "was forked from it" not in str(e):
                os.write(2, b"child: %s\n" % str(e).encode())
                os._exit(4)
        sys.exit(0)
    deadline = time.monotonic() + 20
    while True:
        pid, status = os.waitpid(child, os.WNOHANG)
        if pid == child:
            break
        if time.monotonic() > deadline:
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the forked child did not exit within 20 s")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0, "forked child: %d" % status
    dist.all_reduce(t)
    n = float(dist.get_world_size())
    assert t.tolist() == [n * n] * 2, t


def main():
    torch.set_num_threads(1)
    dist.init_process_group("kcoll")
    rank = dist.get_rank()
    t = torch.ones(2)
    dist.all_reduce(t)
    fork_child_leaves(t)
    t = torch.ones(2)
    w = dist.all_reduce(t, async_op=True)

    def tripled(f):
        w.wait()  # this very Work, from its own callback
        return f.value()[0] * 3

    fut = w.get_future().then(tripled)
    w.get_future().add_done_callback(lambda f: time.sleep(0.5))
    got = fut.wait().tolist()
    assert got == [3.0 * dist.get_world_size()] * 2, got
    os.write(1, b"exit rank %d ok\n" % rank)
    return 0  # no destroy_process_group: the interpreter's exit has to cope


if __name__ == "__main__":
    sys.exit(main())
