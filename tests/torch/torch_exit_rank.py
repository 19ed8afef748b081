#!/usr/bin/env python3
"""One rank that leaves the interpreter while the group's worker still runs Python: a Work's
future gets two callbacks, then() (the main thread waits for its result) and one that sleeps
0.5 s on the worker after it. Without kcoll's exit hook the main thread finalizes the interpreter
while the worker sleeps, and the worker's return into Python aborts the process ("terminate
called without an active exception"); with it, the exit waits for the worker. The callback also
waits for its own Work, which returns at once (the future is complete). Prints "exit rank R ok"
before it leaves; test_launch.py runs it under coll-run and checks the exit code."""
import os
import sys
import time

import torch
import torch.distributed as dist

import kcoll  # noqa: F401


def main():
    torch.set_num_threads(1)
    dist.init_process_group("kcoll")
    rank = dist.get_rank()
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
