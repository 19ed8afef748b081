#!/usr/bin/env python3
"""One rank of test_fault.py's jobs (MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE set by the test).

  kill  DDP training; rank VICTIM kills itself (SIGKILL) at step 5; every other rank must raise.
  fork  the same, with batches from a DataLoader whose worker is forked from the rank (and a
        forked child that sleeps 15 s): the children inherit the rank's sockets, and kcoll's
        fork handler must make them let go, so that the victim's death still closes them.
  wait  rank 0 waits on an all_reduce rank 1 never joins, with wait(timeout=2 s): it must raise;
        rank 1 calls the all_reduce after 6 s and must raise too (rank 0 aborted).
  group a group whose timeout is 2 s (new_group: the default group's 60 s bound its creation and
        store, which a loaded machine may need) and nobody waits: rank 0's all_reduce, which
        rank 1 joins only after 6 s, fails by itself at kcoll's deadline, which is the group's
        (not COLL_TIMEOUT's 300 s): the work completes with kcoll's error naming rank 1.
  init_missing  the group's timeout is 3 s; rank 1 joins the store, then dies before its
        creation (as a rank whose store read timed out, or that was killed): rank 0's
        init_process_group must raise within the group's timeout naming rank 1 (it waited
        COLL_BOOTSTRAP_TIMEOUT, 120 s).
  init_missing_agent  the same under `coll-run --agent` (no MASTER_ADDR: the communicator comes
        from the kcoll agent, whose pinned bootstrap timeout is 120 s): rank 1 exits before its
        creation, and rank 0's init_process_group(timeout=3 s) must raise in time naming rank 1.
  interrupt  rank 0 is sent SIGINT (Ctrl-C) 0.5 s into an all_reduce that rank 1 joins after
        3 s: KeyboardInterrupt must end rank 0's wait at once, and the call goes on in order: the
        next all_reduce of both ranks gives both results right. Prints "INTERRUPTED after <s> s"
        and "GROUP OK", exits 0.
  interrupt_exit  the same SIGINT, not caught: rank 0 leaves, and the exit hook aborts its
        communicator at once instead of waiting 5 s for the interrupted call, so rank 1's
        all_reduce 3 s later raises naming rank 0 (before, rank 1 completed it with the exiting
        rank 0).
  abort  rank 1 waits on an all_reduce rank 0 joins only after 4 s, and another thread of
        rank 1 calls kcoll.abort() after 1 s: the wait must raise at once (not at the group's
        60 s), the next all_reduce must be refused saying the group was aborted ("REFUSED:
        <message>"). Rank 0's all_reduce may complete (rank 1 sent its part before the abort),
        and then with the right sum ("FIRST <values>"); its next one must raise naming rank 1.
  shutdown  both ranks all_reduce, then kcoll.shutdown() while the group is still referenced:
        the communicator's sockets close ("FDS <before> <after>"), a later all_reduce is refused
        saying the group was shut down, a second shutdown and destroy_process_group still work;
        prints "SHUTDOWN OK", exits 0.
A rank that raised prints "RAISED after <s> s: <message>" and exits 3."""
import os
import signal
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import kcoll

VICTIM = 2


def quiet():
    """A child lets go of the test's output pipes, which the test reads to their end."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1)
    os.dup2(null, 2)


class Batches(torch.utils.data.Dataset):
    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.randn(256)


def kill_mode(rank, forked=False):
    torch.manual_seed(0)
    net = DDP(torch.nn.Linear(256, 256))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    batches = iter(lambda: torch.randn(8, 256), None)
    if forked:
        # forked after DDP's first collectives, so the children hold the rank's connections
        loader = torch.utils.data.DataLoader(Batches(), batch_size=8, num_workers=1,
                                             persistent_workers=True,
                                             multiprocessing_context="fork",
                                             worker_init_fn=lambda _: quiet())
        batches = iter(loader)
        if os.fork() == 0:
            quiet()
            time.sleep(15)
            os._exit(0)
    t0 = None
    for step in range(1000):
        if step == 5:
            t0 = time.time()
            if rank == VICTIM:
                os.kill(os.getpid(), signal.SIGKILL)
        opt.zero_grad()
        try:
            net(next(batches)).sum().backward()
            opt.step()
        except RuntimeError as e:
            print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
            return 3
    print("NOT RAISED: 1000 steps without the victim", flush=True)
    return 1


def late_peer(rank, finish, group=None):
    """Rank 1 joins an all_reduce 6 s late; finish(work) waits on it in the mode's way."""
    x = torch.ones(1 << 16)
    t0 = time.time()
    if rank == 1:
        time.sleep(6)
    try:
        finish(dist.all_reduce(x, group=group, async_op=True), t0)
    except RuntimeError as e:
        print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
        return 3
    print("NOT RAISED after %.1f s" % (time.time() - t0), flush=True)
    return 1


def wait_mode(rank):
    return late_peer(rank, lambda w, t0: w.wait(timeout=timedelta(seconds=2)))


def wait_p2p_mode(rank):
    """Rank 0's irecv from rank 1, which sends 4 s late: its wait(timeout=2 s) must name rank 1
    (the posted recv's abort, before 29 Nov 2026: a message without the rank)."""
    t0 = time.time()
    try:
        if rank == 0:
            dist.irecv(torch.zeros(4), 1).wait(timeout=timedelta(seconds=2))
        else:
            time.sleep(4)
            dist.send(torch.ones(4), 0)
    except RuntimeError as e:
        print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
        return 3
    print("NOT RAISED after %.1f s" % (time.time() - t0), flush=True)
    return 1 if rank == 0 else 0


def group_mode(rank):
    def poll_then_wait(w, t0):
        while not w.is_completed() and time.time() - t0 < 30:
            time.sleep(0.05)
        w.wait()
    group = dist.new_group([0, 1], timeout=timedelta(seconds=2))
    return late_peer(rank, poll_then_wait, group)


def refused(what):
    x = torch.ones(4)
    try:
        dist.all_reduce(x)
    except RuntimeError as e:
        print("REFUSED: %s" % e, flush=True)
        return True
    print("NOT REFUSED after %s" % what, flush=True)
    return False


def abort_mode(rank):
    x = torch.ones(4)
    t0 = time.time()
    if rank == 1:
        threading.Timer(1.0, kcoll.abort).start()
    else:
        time.sleep(4)
    try:
        dist.all_reduce(x)
        if rank == 0:  # rank 1's part was sent before its abort: the sum may complete, right
            print("FIRST %s" % x.tolist(), flush=True)
            if x.tolist() != [2.0] * 4:
                return 1
            dist.all_reduce(x)  # this one needs rank 1's next part, which never comes
    except RuntimeError as e:
        print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
        if rank == 1 and not refused("the abort"):
            return 1
        return 3
    print("NOT RAISED after %.1f s" % (time.time() - t0), flush=True)
    return 1


def abort_p2p_mode(rank):
    """kcoll.abort() 1 s into an irecv whose send never comes: the point-to-point communicator
    is aborted with the group's, so the peer's recv and its all_reduce both raise naming rank 1."""
    t0 = time.time()
    if rank == 1:
        threading.Timer(1.0, kcoll.abort).start()
        try:
            dist.irecv(torch.zeros(4), 0).wait()
        except RuntimeError as e:
            print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
            return 3
        print("NOT RAISED after %.1f s" % (time.time() - t0), flush=True)
        return 1
    time.sleep(4)
    raised = 0
    for name, call in (("recv", lambda: dist.recv(torch.zeros(4), 1)),
                       ("all_reduce", lambda: dist.all_reduce(torch.ones(4)))):
        try:
            call()
            print("NOT RAISED: %s" % name, flush=True)
        except RuntimeError as e:
            print("%s RAISED after %.1f s: %s" % (name.upper(), time.time() - t0, e), flush=True)
            raised += "rank 1" in str(e)
    return 3 if raised == 2 else 1


def abort_idle_mode(rank):
    """kcoll.abort() while the point-to-point worker is in a completion callback, not in a call,
    with an irecv still posted: that irecv's wait must raise at once, saying the group was
    aborted (before its fix on 29 Nov 2026 the worker spun on the gone communicator and the
    wait ran to its timeout)."""
    t0 = time.time()
    if rank == 1:
        time.sleep(0.2)  # rank 0 has posted both irecvs by then
        dist.send(torch.ones(4), 0)
        time.sleep(4)
        return 0
    first = dist.irecv(torch.zeros(4), 1)
    first.get_future().then(lambda f: time.sleep(1.0))  # the worker sits here for 1 s
    second = dist.irecv(torch.zeros(4), 1)  # never sent
    time.sleep(0.5)
    kcoll.abort()
    try:
        second.wait(timeout=timedelta(seconds=5))
    except RuntimeError as e:
        print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
        return 3
    print("NOT RAISED after %.1f s" % (time.time() - t0), flush=True)
    return 1


def open_fds():
    return len(os.listdir("/proc/self/fd"))


def shutdown_mode(rank):
    x = torch.ones(4)
    dist.all_reduce(x)
    group = dist.group.WORLD  # still referenced: shutdown, not the group's release, ends it
    before = open_fds()
    kcoll.shutdown()
    print("FDS %d %d" % (before, open_fds()), flush=True)
    if x.tolist() != [2.0] * 4 or not refused("shutdown"):
        return 1
    kcoll.shutdown(group)
    dist.destroy_process_group()
    print("SHUTDOWN OK", flush=True)
    return 0


def interrupt_mode(rank):
    x, y = torch.ones(4), torch.full((4,), 3.0)
    if rank == 1:
        time.sleep(3)
        dist.all_reduce(x)
    else:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        t0 = time.time()
        try:
            dist.all_reduce(x)
            print("NOT INTERRUPTED after %.1f s" % (time.time() - t0), flush=True)
            return 1
        except KeyboardInterrupt:
            print("INTERRUPTED after %.1f s" % (time.time() - t0), flush=True)
    dist.all_reduce(y)
    if x.tolist() != [2.0] * 4 or y.tolist() != [6.0] * 4:
        print("WRONG %s %s" % (x.tolist(), y.tolist()), flush=True)
        return 1
    print("GROUP OK", flush=True)
    dist.destroy_process_group()
    return 0


def interrupt_exit_mode(rank):
    x = torch.ones(4)
    if rank == 0:
        threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT)).start()
        dist.all_reduce(x)  # KeyboardInterrupt: the interpreter exits through it
        return 1
    time.sleep(3)
    t0 = time.time()
    try:
        # rank 0 sent its part before its Ctrl-C: where it reached this rank before rank 0's
        # abort did, the first all_reduce completes, with the right sum; the next must raise
        dist.all_reduce(x)
        if x.tolist() != [2.0] * 4:
            print("WRONG %s" % x.tolist(), flush=True)
            return 1
        dist.all_reduce(x)
    except RuntimeError as e:
        print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
        return 3
    print("NOT RAISED after %.1f s" % (time.time() - t0), flush=True)
    return 1


def init_missing(rank, agent=False):
    t0 = time.time()
    if rank == 1 and agent:  # gone before its creation (the agent's rendezvous needs no store)
        os._exit(0)
    if rank == 1:  # in the store (rank 0's init waits for that), then gone before its creation
        dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), 2, False,
                      timedelta(seconds=60))
        time.sleep(0.5)
        os._exit(0)
    try:
        dist.init_process_group("kcoll", timeout=timedelta(seconds=3))
    except RuntimeError as e:
        print("RAISED after %.1f s: %s" % (time.time() - t0, e), flush=True)
        os._exit(3)
    print("NOT RAISED after %.1f s" % (time.time() - t0), flush=True)
    os._exit(1)


def main():
    mode = sys.argv[1]
    torch.set_num_threads(1)
    if mode == "init_missing":
        init_missing(int(os.environ["RANK"]))
    if mode == "init_missing_agent":  # coll-run --agent: COLL_LOCAL_RANK is the rank
        init_missing(int(os.environ["COLL_LOCAL_RANK"]), agent=True)
    dist.init_process_group("kcoll", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    rc = {"kill": kill_mode, "fork": lambda r: kill_mode(r, forked=True), "wait": wait_mode,
          "group": group_mode, "interrupt": interrupt_mode, "abort": abort_mode,
          "shutdown": shutdown_mode, "abort_p2p": abort_p2p_mode, "wait_p2p": wait_p2p_mode,
          "abort_idle": abort_idle_mode,
          "interrupt_exit": interrupt_exit_mode}[mode](rank)
    sys.stdout.flush()
    os._exit(rc)  # the group is broken on purpose: no orderly teardown to wait for


if __name__ == "__main__":
    main()
