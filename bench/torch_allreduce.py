#!/usr/bin/env python3
"""dist.all_reduce of float32 (sum, in place) from 8 B to 64 MiB through the kcoll backend and
through Gloo, and raw coll_all_reduce called from C on a communicator of its own (the binding's
reference), in the same processes on the same tensors, alternating rounds; the best round of
each is reported as time per call (the slowest rank's) and bus bandwidth (nccl-tests' busbw:
bytes / time * 2 (n - 1) / n).

    python3 bench/torch_allreduce.py -n 2                 # forks 2 ranks (MASTER_ADDR store)
    coll-run -n 4 python3 bench/torch_allreduce.py        # or under coll-run (no MASTER_ADDR)

Compare with raw libcoll on the same build:
    coll-run -n 2 build/tools/coll-perf -C all_reduce -b 8 -e 64M -f 2 -z in

PYTHONPATH must reach the kcoll package (build/python after a CMake build).
"""
import argparse
import os
import socket
import sys
import time


def human(n):
    for unit, size in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return "%d %s" % (n // size, unit)
    return "%d B" % n


def iters_for(seconds_per_call, budget):
    """Enough calls that one timed batch takes about budget seconds, 5..2000."""
    return max(5, min(2000, int(budget / max(seconds_per_call, 1e-7))))


def bench(rank, world, args):
    import torch
    import torch.distributed as dist

    import kcoll  # noqa: F401
    from kcoll import _C

    torch.set_num_threads(1)
    dist.init_process_group("kcoll", rank=rank, world_size=world) if rank >= 0 else \
        dist.init_process_group("kcoll")
    rank, world = dist.get_rank(), dist.get_world_size()
    groups = {"kcoll": None, "gloo": dist.new_group(backend="gloo")}
    store = dist.distributed_c10d._get_default_store()
    if rank == 0:
        store.set("bench/raw_uid", _C.unique_id())
    raw = _C.Comm.init_rank(store.get("bench/raw_uid").decode(), rank, world)
    sizes = []
    n = args.min_bytes
    while n <= args.max_bytes:
        sizes.append(n)
        n *= 2
    best = {(name, s): float("inf") for name in list(groups) + ["raw"] for s in sizes}
    for s in sizes:
        x = torch.ones(max(1, s // 4))
        for _ in range(args.rounds):
            for name in ["raw", "kcoll", "gloo"]:
                g = groups.get(name)
                t0 = time.perf_counter()
                for _ in range(2):  # warm up, and a first measure to size the batch
                    dist.all_reduce(x, group=g)
                k = torch.tensor([iters_for((time.perf_counter() - t0) / 2, args.budget)])
                dist.all_reduce(k, op=dist.ReduceOp.MIN, group=groups["gloo"])  # the same k
                k = int(k)
                if name == "raw":
                    t = _C.time_all_reduce(raw, x, k)
                else:
                    t0 = time.perf_counter()
                    for _ in range(k):
                        dist.all_reduce(x, group=g)
                    t = (time.perf_counter() - t0) / k
                t = torch.tensor([t], dtype=torch.float64)
                dist.all_reduce(t, op=dist.ReduceOp.MAX, group=groups["gloo"])
                best[(name, s)] = min(best[(name, s)], float(t))
                x.fill_(1.0)
    if rank == 0:
        print("# dist.all_reduce float32 sum in place, %d ranks, torch %s, best of %d rounds, "
              "host %s" % (world, torch.__version__, args.rounds, socket.gethostname()))
        print("| bytes | raw coll_all_reduce | dist.all_reduce kcoll | dist.all_reduce gloo | "
              "kcoll / raw | kcoll / gloo |")
        print("| --- | --- | --- | --- | --- | --- |")
        f = 2.0 * (world - 1) / world if world > 1 else 1.0

        def cell(t, s):
            return "%.1f us, %.3f GB/s" % (t * 1e6, s / t * f / 1e9)
        for s in sizes:
            tr, tk, tg = best[("raw", s)], best[("kcoll", s)], best[("gloo", s)]
            print("| %s | %s | %s | %s | %.0f %% | %.2fx |" % (
                human(s), cell(tr, s), cell(tk, s), cell(tg, s), 100.0 * tr / tk, tg / tk))
        sys.stdout.flush()
    dist.barrier(group=groups["gloo"])
    del raw
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", "--nranks", type=int, default=2)
    ap.add_argument("-b", "--min-bytes", type=int, default=8)
    ap.add_argument("-e", "--max-bytes", type=int, default=64 << 20)
    ap.add_argument("-r", "--rounds", type=int, default=2)
    ap.add_argument("--budget", type=float, default=0.05,
                    help="about how many seconds one timed batch takes (default 0.05)")
    args = ap.parse_args()
    if os.environ.get("COLL_UNIQUE_ID") or os.environ.get("COLL_AGENT_SOCKET"):
        bench(-1, -1, args)  # under coll-run: the communicator comes from its environment
        return 0
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.start_processes(bench, args=(args.nranks, args), nprocs=args.nranks, start_method="fork")
    return 0


if __name__ == "__main__":
    sys.exit(main())
