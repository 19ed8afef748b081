#!/usr/bin/env python3
"""CUDA tensors through kcoll: WORLD processes on GPU 0 (or one GPU each when there are enough),
rendezvous through the store; every listed op x dtype on CUDA tensors compared bit for bit with
the same computation done on the CPU from every rank's inputs (integer-valued inputs, so exact),
then DDP on CUDA against DDP on the CPU through Gloo (same seeds), within 1e-5 relative.
Needs a PyTorch with CUDA and a kcoll package built with it (setup.py does that). Exit 77 when
there is no GPU.

usage: cuda_check.py [--world 2]
"""
import argparse
import os
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

tc.need_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import kcoll  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int32, torch.int64]
N = 1 << 16


def inp(tag, rank, n, dt):
    g = torch.Generator().manual_seed(zlib.crc32(repr((tag, rank)).encode()))
    lo = 0 if dt == torch.uint8 else -4
    return torch.randint(lo, 5, (n,), generator=g).to(dt)


def worker(rank, world):
    import faulthandler
    faulthandler.dump_traceback_later(120, exit=True)  # a hang shows where, then fails
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("kcoll", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    print("rank %d: init ok on %s" % (rank, dev), flush=True)
    ck = tc.Checks("cuda rank %d" % rank)
    for dt in DTYPES:
        print("rank %d: %s" % (rank, dt), flush=True)
        wide = torch.float64 if dt.is_floating_point else torch.int64
        xs = [inp("ar", r, N, dt) for r in range(world)]
        x = xs[rank].to(dev)
        dist.all_reduce(x)
        want = torch.stack([a.to(wide) for a in xs]).sum(0).to(dt)
        ck(torch.equal(x.cpu(), want), "all_reduce %s" % dt)
        y = xs[rank].to(dev)
        dist.all_reduce(y, op=dist.ReduceOp.MAX)
        ck(torch.equal(y.cpu(), torch.stack(xs).amax(0) if dt != torch.bfloat16 and
                       dt != torch.float16 else torch.stack([a.float() for a in xs]).amax(0)
                       .to(dt)), "all_reduce MAX %s" % dt)
        b = xs[rank].to(dev)
        dist.broadcast(b, world - 1)
        ck(torch.equal(b.cpu(), xs[world - 1]), "broadcast %s" % dt)
        out = torch.zeros(N * world, dtype=dt, device=dev)
        dist.all_gather_into_tensor(out, xs[rank].to(dev))
        ck(torch.equal(out.cpu(), torch.cat(xs)), "all_gather_into_tensor %s" % dt)
        big = [inp("rs", r, N * world, dt) for r in range(world)]
        rs = torch.zeros(N, dtype=dt, device=dev)
        dist.reduce_scatter_tensor(rs, big[rank].to(dev))
        want = torch.stack([a[rank * N:(rank + 1) * N].to(wide) for a in big]).sum(0).to(dt)
        ck(torch.equal(rs.cpu(), want), "reduce_scatter_tensor %s" % dt)
        a2a = torch.zeros(N * world, dtype=dt, device=dev)
        dist.all_to_all_single(a2a, big[rank].to(dev))
        want = torch.cat([a[rank * N:(rank + 1) * N] for a in big])
        ck(torch.equal(a2a.cpu(), want), "all_to_all_single %s" % dt)
        ring = torch.zeros(N, dtype=dt, device=dev)
        ops = [dist.P2POp(dist.isend, xs[rank].to(dev), (rank + 1) % world),
               dist.P2POp(dist.irecv, ring, (rank - 1) % world)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        ck(torch.equal(ring.cpu(), xs[(rank - 1) % world]), "batch_isend_irecv %s" % dt)
    torch.cuda.synchronize()

    def model():
        torch.manual_seed(5)
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(),
                                   torch.nn.Linear(64, 10))

    from torch.nn.parallel import DistributedDataParallel as DDP
    nets = {"kcoll-cuda": DDP(model().to(dev), device_ids=[dev.index]),
            "gloo-cpu": DDP(model(), process_group=gloo)}
    params = {}
    for name, net in nets.items():
        d = dev if name == "kcoll-cuda" else torch.device("cpu")
        opt = torch.optim.SGD(net.parameters(), lr=0.05)
        g = torch.Generator().manual_seed(77 + rank)
        for _ in range(5):
            xb = torch.randn(16, 32, generator=g).to(d)
            yb = torch.randint(0, 10, (16,), generator=g).to(d)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(xb), yb).backward()
            opt.step()
        params[name] = [p.detach().cpu() for p in net.parameters()]
    worst = max(float((a - b).abs().max()) for a, b in zip(params["kcoll-cuda"],
                                                           params["gloo-cpu"]))
    ck(all(bool(((a - b).abs() <= 1e-5 + 1e-5 * b.abs()).all())
           for a, b in zip(params["kcoll-cuda"], params["gloo-cpu"])),
       "DDP on CUDA vs DDP on CPU (gloo): max diff %g" % worst)
    n = ck.finish()
    if rank == 0:
        print("cuda: world %d on %s: %d checks passed; DDP max |cuda - cpu| = %g (kcoll %s, "
              "torch %s)" % (world, torch.cuda.get_device_name(dev), n, worst,
                             kcoll.INTERFACE, torch.__version__))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("SKIP: no GPU (torch.cuda.is_available() is False)")
        return tc.SKIP
    if not kcoll.INTERFACE["cuda"]:
        print("FAIL: this kcoll package was built without CUDA")
        return 1
    tc.spawn(worker, a.world, start_method="spawn")  # no fork once CUDA may be initialised
    print("cuda: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
