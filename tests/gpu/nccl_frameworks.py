#!/usr/bin/env python3
"""Frameworks on kcoll's libnccl.so.2, on a GPU (ctest label gpu): unchanged NCCL programs with
kcoll's library preloaded, two processes sharing GPU 0 (NVIDIA NCCL refuses two ranks on one GPU,
kcoll does not, so there is no side-by-side with NVIDIA's on a one-GPU machine).

  nccl_frameworks.py torch LIBNCCL   torch.distributed backend="nccl": all_reduce,
                                     all_gather_into_tensor, reduce_scatter_tensor, broadcast,
                                     all_to_all_single, send/recv, new_group, DDP on a small model
                                     against a one-process reference, a timed all_reduce loop
  nccl_frameworks.py cupy LIBNCCL    cupy.cuda.nccl: all-reduce and a timed loop

Exit 77 (skipped, with the reason) without the framework, without CUDA or without a GPU. Every
worker prints NCCL's banner (NCCL_DEBUG=VERSION): the run fails unless it says kcoll answered.
"""
import json
import os
import socket
import subprocess
import sys
import time

SKIP = 77
TIMEOUT = 300


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def launch(kind, lib, world=2):
    env = dict(os.environ)
    env.update({"LD_PRELOAD": lib, "NCCL_DEBUG": "VERSION", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(world),
                "COLL_SOCKET_IFNAME": env.get("COLL_SOCKET_IFNAME", "lo")})
    idfile = "/tmp/kcoll-nccl-%s-%d.id" % (kind, os.getpid())
    procs = []
    for r in range(world):
        e = dict(env, RANK=str(r), LOCAL_RANK=str(r), KCOLL_TEST_IDFILE=idfile)
        procs.append(subprocess.Popen([sys.executable, __file__, "worker-" + kind, lib], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True))
    ok = True
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            out += "\n(killed after %d s)" % TIMEOUT
        for line in out.splitlines():
            print("[rank %d] %s" % (r, line))
        if p.returncode != 0:
            print("rank %d exited %d" % (r, p.returncode))
            ok = False
        elif "+kcoll" not in out:
            print("rank %d: NCCL's banner does not name kcoll: NVIDIA's library answered" % r)
            ok = False
    try:
        os.unlink(idfile)
    except OSError:
        pass
    return 0 if ok else 1


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        raise SystemExit(1)


def timed(fn, iters=20):
    fn()
    best = float("inf")
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def worker_torch():
    import torch
    import torch.distributed as dist
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    x = torch.arange(1000, dtype=torch.float32, device=dev) + rank
    dist.all_reduce(x)
    want = sum(torch.arange(1000, dtype=torch.float32) + r for r in range(world))
    check(torch.equal(x.cpu(), want), "all_reduce float32")
    for dt in (torch.float16, torch.bfloat16, torch.int32, torch.float64):
        y = torch.full((4097,), rank + 1, dtype=dt, device=dev)
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        check(bool((y == world).all()), "all_reduce max %s" % dt)
    g = torch.empty(world * 3, device=dev)
    dist.all_gather_into_tensor(g, torch.full((3,), float(rank), device=dev))
    check(g.cpu().tolist() == [float(r) for r in range(world) for _ in range(3)],
          "all_gather_into_tensor")
    rs = torch.empty(2, device=dev)
    dist.reduce_scatter_tensor(rs, torch.arange(2 * world, dtype=torch.float32, device=dev))
    check(rs.cpu().tolist() == [float(world * (2 * rank + k)) for k in range(2)],
          "reduce_scatter_tensor")
    b = torch.full((5,), float(rank), device=dev)
    dist.broadcast(b, src=world - 1)
    check(bool((b == world - 1).all()), "broadcast")
    a = torch.arange(world, dtype=torch.float32, device=dev) + 10 * rank
    o = torch.empty_like(a)
    dist.all_to_all_single(o, a)
    check(o.cpu().tolist() == [float(rank + 10 * r) for r in range(world)], "all_to_all_single")
    t = torch.full((7,), float(rank), device=dev)
    if rank == 0:
        dist.send(t + 100, dst=1)
    elif rank == 1:
        dist.recv(t, src=0)
        check(bool((t == 100).all()), "send/recv")
    sub = dist.new_group([0, 1])
    s = torch.ones(3, device=dev)
    dist.all_reduce(s, group=sub)
    check(bool((s == 2).all()), "new_group all_reduce")
    # DDP: the same steps as one process on the whole batch (SGD, averaged gradients)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    ref.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model.to(dev), device_ids=[0])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ropt = torch.optim.SGD(ref.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        xs, ys = torch.randn(world * 8, 16, generator=gen), torch.randn(world * 8, 4, generator=gen)
        opt.zero_grad()
        mine = slice(rank * 8, rank * 8 + 8)
        torch.nn.functional.mse_loss(ddp(xs[mine].to(dev)), ys[mine].to(dev)).backward()
        opt.step()
        ropt.zero_grad()
        torch.nn.functional.mse_loss(ref(xs), ys).backward()
        ropt.step()
    diff = max((p.detach().cpu() - q.detach()).abs().max().item()
               for p, q in zip(ddp.module.parameters(), ref.parameters()))
    check(diff < 1e-5, "DDP 5 steps: parameters within 1e-5 of the one-process reference (%.2g)"
          % diff)
    for size in (8, 1 << 20, 64 << 20):
        buf = torch.ones(size // 4, device=dev)

        def one():
            dist.all_reduce(buf)
            torch.cuda.synchronize()
        t = timed(one)
        bus = 2 * (world - 1) / world * size / t / 1e9
        print("time all_reduce %10d B: %9.1f us  busbw %7.2f GB/s" % (size, t * 1e6, bus))
    dist.destroy_process_group()


def worker_cupy():
    import cupy
    from cupy.cuda import nccl
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    idfile = os.environ["KCOLL_TEST_IDFILE"]
    cupy.cuda.Device(0).use()
    if rank == 0:
        uid = nccl.get_unique_id()
        with open(idfile + ".tmp", "w") as f:
            json.dump(list(uid), f)
        os.rename(idfile + ".tmp", idfile)
    else:
        end = time.time() + 60
        while not os.path.exists(idfile) and time.time() < end:
            time.sleep(0.05)
        with open(idfile) as f:
            uid = tuple(json.load(f))
    comm = nccl.NcclCommunicator(world, uid, rank)
    x = cupy.arange(1000, dtype=cupy.float32) + rank
    y = cupy.empty_like(x)
    stream = cupy.cuda.Stream.null
    comm.allReduce(x.data.ptr, y.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, stream.ptr)
    stream.synchronize()
    want = sum(cupy.arange(1000, dtype=cupy.float32) + r for r in range(world))
    check(bool(cupy.all(y == want)), "cupy allReduce float32")
    for size in (8, 1 << 20, 64 << 20):
        a = cupy.ones(size // 4, dtype=cupy.float32)

        def one():
            comm.allReduce(a.data.ptr, a.data.ptr, a.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM,
                           stream.ptr)
            stream.synchronize()
        t = timed(one)
        bus = 2 * (world - 1) / world * size / t / 1e9
        print("time allReduce %10d B: %9.1f us  busbw %7.2f GB/s" % (size, t * 1e6, bus))
    comm.destroy()


def available(kind):
    try:
        if kind == "torch":
            import torch
            if not torch.cuda.is_available():
                return "PyTorch %s has no CUDA device here" % torch.__version__
            if not torch.distributed.is_nccl_available():
                return "PyTorch %s was built without NCCL" % torch.__version__
        else:
            import cupy
            if cupy.cuda.runtime.getDeviceCount() < 1:
                return "no CUDA device"
    except Exception as e:  # ImportError, or a CUDA runtime without a driver
        return "%s is not usable here: %s" % (kind, e)
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    kind, lib = sys.argv[1], sys.argv[2]
    if kind.startswith("worker-"):
        {"worker-torch": worker_torch, "worker-cupy": worker_cupy}[kind]()
        return 0
    why = available(kind)
    if why is not None:
        print("SKIPPED: %s" % why)
        return SKIP
    if not os.path.exists(lib):
        print("SKIPPED: %s was not built (needs the CUDA toolkit's nccl.h)" % lib)
        return SKIP
    return launch(kind, lib)


if __name__ == "__main__":
    sys.exit(main())
