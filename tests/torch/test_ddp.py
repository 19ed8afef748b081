#!/usr/bin/env python3
"""DistributedDataParallel training through kcoll against the same training through Gloo.

On 2 and 4 ranks (forked processes, rendezvous through the store), every rank builds the same
small model (same seed) twice, wraps one copy in DDP on the kcoll default group and the other in
DDP on a Gloo group, and trains both for STEPS SGD steps on the same per-rank batches. The
parameters after training must be:
  * 2 ranks: equal bit for bit (a sum of two terms does not depend on the order);
  * 4 ranks: within |kcoll - gloo| <= 1e-6 + 1e-5 * |gloo| (float32 sums of four terms in
    different orders differ in the last bits, and STEPS steps carry that along).
Every rank also checks that its kcoll parameters equal rank 0's bit for bit (DDP keeps the
replicas identical), and that training moved them. Two configurations: DDP's defaults on an MLP,
and the MLP with BatchNorm (running statistics compared too) under buckets of about 4 KiB
(several all_reduces in flight at once), gradient_as_bucket_view and static_graph.

usage: test_ddp.py [--worlds 2,4] [--steps 8]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

tc.need_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import kcoll  # noqa: E402,F401


def model():
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                               torch.nn.ReLU(), torch.nn.Linear(64, 10))


def model_bn():
    """With BatchNorm: its running statistics are buffers that DDP broadcasts from rank 0 before
    every forward."""
    torch.manual_seed(1234)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 64), torch.nn.BatchNorm1d(64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 10))


# (name, model, DDP options): the defaults (one 25 MiB bucket), and buckets of about 4 KiB
# (8 gradients' all_reduces in flight at once, each on a view of its bucket) with the static-graph
# path and BatchNorm buffers broadcast every step
CONFIGS = (("default", model, {}),
           ("small buckets", model_bn, dict(bucket_cap_mb=0.004, gradient_as_bucket_view=True,
                                            static_graph=True)))


def train(net, rank, steps):
    """steps SGD steps on this rank's batches; returns state(net)."""
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(77 + rank)
    for _ in range(steps):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x), y).backward()
        opt.step()
    return state(net)


def state(net):
    """The parameters, then the floating-point buffers (BatchNorm's running statistics)."""
    return [p.detach().clone() for p in net.parameters()] + \
        [b.detach().clone() for b in net.buffers() if b.is_floating_point()]


def worker(rank, world, steps):
    torch.set_num_threads(1)
    dist.init_process_group("kcoll", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    for name, make, opts in CONFIGS:
        ck = tc.Checks("rank %d of %d, %s" % (rank, world, name))
        start = state(make())
        pk = train(DDP(make(), **opts), rank, steps)
        pg = train(DDP(make(), process_group=gloo, **opts), rank, steps)
        nparams = len(list(make().parameters()))
        worst = 0.0
        for i, (a, b, s) in enumerate(zip(pk, pg, start)):
            diff = float((a - b).abs().max())
            worst = max(worst, diff)
            if world == 2:
                ck(torch.equal(a, b), "2 ranks: kcoll and gloo parameters differ by %g" % diff)
            else:
                ck(bool(((a - b).abs() <= 1e-6 + 1e-5 * b.abs()).all()),
                   "%d ranks: |kcoll - gloo| = %g is over the bound" % (world, diff))
            ck(not torch.equal(a, s), "training moved the parameters")
            if i < nparams:  # buffers: rank 0's before each forward, then this rank's batch's
                r0 = a.clone()
                dist.broadcast(r0, 0)
                ck(torch.equal(a, r0), "replicas identical to rank 0's")
        ck.finish()
        if rank == 0:
            print("world %d, %s: %d steps, %d tensors, max |kcoll - gloo| = %g"
                  % (world, name, steps, len(pk), worst))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default="2,4")
    ap.add_argument("--steps", type=int, default=8)
    a = ap.parse_args()
    for world in [int(w) for w in a.worlds.split(",")]:
        tc.spawn(worker, world, a.steps)
        print("world %d: ok" % world)
    return 0


if __name__ == "__main__":
    sys.exit(main())
