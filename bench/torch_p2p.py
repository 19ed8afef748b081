#!/usr/bin/env python3
"""Point-to-point and strided tensors through the kcoll backend beside Gloo, in the same
processes: the ring of PyTorch's tutorial (isend to the right, recv from the left, wait), a
synchronous ping-pong, isend + irecv then both waits, a pipeline step (isend to the right, an
8-byte all_reduce, recv from the left, wait), each for message sizes given with -s; and
dist.all_reduce of a 4-d float32 tensor, contiguous and channels_last (kcoll copies a strided
tensor to a contiguous one and back). Times are per iteration on rank 0, the best of -r rounds.

    PYTHONPATH=build/python python3 bench/torch_p2p.py -n 2 -s 8,1M
    PYTHONPATH=build/python python3 bench/torch_p2p.py -n 4 -s 16M --no-allreduce
"""
import argparse
import datetime
import os
import socket
import sys
import time


def size_arg(text):
    mult = {"K": 1 << 10, "M": 1 << 20}
    return int(text[:-1]) * mult[text[-1]] if text[-1] in mult else int(text)


def p2p_round(dist, pattern, rank, world, send, recv, group, iters):
    import torch
    right, left = (rank + 1) % world, (rank - 1) % world
    loss = torch.zeros(2)
    dist.barrier(group=group)
    t0 = time.perf_counter()
    for _ in range(iters):
        if pattern == "ring":
            q = dist.isend(send, right, group=group)
            dist.recv(recv, left, group=group)
            q.wait()
        elif pattern == "ping-pong":
            if rank == 0:
                dist.send(send, 1, group=group)
                dist.recv(recv, 1, group=group)
            elif rank == 1:
                dist.recv(recv, 0, group=group)
                dist.send(send, 0, group=group)
        elif pattern == "isend+all_reduce":
            q = dist.isend(send, right, group=group)
            dist.all_reduce(loss, group=group)
            dist.recv(recv, left, group=group)
            q.wait()
        else:
            a = dist.isend(send, right, group=group)
            b = dist.irecv(recv, left, group=group)
            a.wait()
            b.wait()
    return (time.perf_counter() - t0) / iters


def bench(rank, world, args):
    import torch
    import torch.distributed as dist

    import kcoll  # noqa: F401
    dist.init_process_group("kcoll", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    groups = {"kcoll": None, "gloo": dist.new_group(backend="gloo")}
    lines = []
    for size in args.sizes:
        n = max(1, size // 4)
        send, recv = torch.full((n,), float(rank)), torch.empty(n)
        iters = max(3, min(200, (64 << 20) // (size * max(world, 2))))
        for pattern in ("ring", "ping-pong", "isend+irecv", "isend+all_reduce"):
            best = {}
            for _ in range(args.rounds):
                for name, g in groups.items():
                    t = p2p_round(dist, pattern, rank, world, send, recv, g, iters)
                    best[name] = min(best.get(name, t), t)
            lines.append("%-12s %9d B  kcoll %10.1f us  gloo %10.1f us" % (
                pattern, size, best["kcoll"] * 1e6, best["gloo"] * 1e6))
    if args.allreduce:
        for shape in ((64, 64, 8, 8), (256, 256, 8, 8)):
            x = torch.randn(*shape)
            layouts = {"contiguous": x,
                       "channels_last": x.contiguous(memory_format=torch.channels_last)}
            for lname, t in layouts.items():
                best = {}
                for _ in range(args.rounds):
                    for name, g in groups.items():
                        dist.barrier(group=g)
                        t0 = time.perf_counter()
                        for _ in range(10):
                            dist.all_reduce(t, group=g)
                        d = (time.perf_counter() - t0) / 10
                        best[name] = min(best.get(name, d), d)
                lines.append("all_reduce %-14s %5.1f MiB  kcoll %8.3f ms  gloo %8.3f ms" % (
                    lname, x.numel() * 4 / (1 << 20), best["kcoll"] * 1e3, best["gloo"] * 1e3))
    if rank == 0:
        print("\n".join(lines), flush=True)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-n", type=int, default=2, help="ranks (forked; 2 or more)")
    ap.add_argument("-s", dest="sizes", default="8,1M",
                    type=lambda v: [size_arg(x) for x in v.split(",")],
                    help="message sizes in bytes (K, M suffixes)")
    ap.add_argument("-r", dest="rounds", type=int, default=3, help="rounds (best is kept)")
    ap.add_argument("--no-allreduce", dest="allreduce", action="store_false")
    args = ap.parse_args()
    if args.n < 2:
        sys.exit("torch_p2p: -n 2 or more")
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    mp.start_processes(bench, args=(args.n, args), nprocs=args.n, start_method="fork")


if __name__ == "__main__":
    main()
