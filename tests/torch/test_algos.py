#!/usr/bin/env python3
"""What PyTorch builds on top of a process group, through kcoll against the same through Gloo.

On 2 and 3 ranks (forked processes, rendezvous through the store), every rank runs each case
twice, once on the kcoll default group and once on a Gloo group, and compares:
  * object collectives: all_gather_object, broadcast_object_list, gather_object,
    scatter_object_list (pickles carried as uint8 tensors of per-rank sizes): equal;
  * DDP with no_sync() (gradient accumulation) and find_unused_parameters=True, a branch of the
    model unused on odd steps;
  * DDP with PowerSGD's comm hook: its then() callbacks issue collectives and wait for them
    (on kcoll's worker thread, which completed the future they hang on);
  * ZeroRedundancyOptimizer (sharded Adam: broadcasts from each shard's owner), with
    consolidate_state_dict;
  * Join with uneven inputs: rank r runs 3 + 2r steps, the ones done early shadow the others;
  * torch.distributed.nn.functional.all_reduce: the gradient flows back through the collective;
  * a then() callback that issues and waits for a second collective, and a third issued after it.
Parameters after training: 2 ranks bit for bit; 3 ranks within |kcoll - gloo| <= 1e-6 +
1e-5 * |gloo| (float32 sums of three terms in different orders).

usage: test_algos.py [--worlds 2,3]
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

tc.need_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import kcoll  # noqa: E402,F401


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(4321)
        self.a = torch.nn.Linear(16, 32)
        self.b = torch.nn.Linear(32, 4)
        self.side = torch.nn.Linear(32, 4)  # used on even steps only

    def forward(self, x, step=0):
        h = torch.relu(self.a(x))
        return self.b(h) + (self.side(h) if step % 2 == 0 else 0)


def batches(rank, n):
    g = torch.Generator().manual_seed(99 + rank)
    return [torch.randn(8, 16, generator=g) for _ in range(n)]


def params(m):
    return [p.detach().clone() for p in m.parameters()]


def objects(rank, world, pg):
    got = {}
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * (100 * rank)}, group=pg)
    got["all_gather_object"] = objs
    lst = [{"a": 1, "t": torch.arange(5)}, "hi"] if rank == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0, group=pg)
    got["broadcast_object_list"] = [lst[0]["a"], lst[0]["t"].tolist(), lst[1]]
    out = [None] * world if rank == 0 else None
    dist.gather_object(("g", rank, [rank] * rank), out, dst=0, group=pg)
    got["gather_object"] = out
    one = [None]
    dist.scatter_object_list(one, [("s", i) for i in range(world)] if rank == 0 else None,
                             src=0, group=pg)
    got["scatter_object_list"] = one[0]
    return got


def ddp_accumulate(rank, pg):
    m = DDP(Net(), process_group=pg, find_unused_parameters=True)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for step, x in enumerate(batches(rank, 6)):
        if step % 3 != 2:
            with m.no_sync():
                m(x, step).sum().backward()
        else:
            m(x, step).sum().backward()
            opt.step()
            opt.zero_grad()
    return params(m)


def ddp_powersgd(rank, pg):
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ps
    m = DDP(Net(), process_group=pg)
    st = ps.PowerSGDState(process_group=pg, matrix_approximation_rank=1, start_powerSGD_iter=2,
                          use_error_feedback=True, warm_start=True, random_seed=0)
    m.register_comm_hook(st, ps.powerSGD_hook)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    for x in batches(rank, 5):
        m(x).sum().backward()
        opt.step()
        opt.zero_grad()
    return params(m)


def zero(rank, pg):
    from torch.distributed.optim import ZeroRedundancyOptimizer
    m = DDP(Net(), process_group=pg)
    zo = ZeroRedundancyOptimizer(m.parameters(), optimizer_class=torch.optim.Adam, lr=0.01,
                                 process_group=pg)
    for x in batches(rank, 3):
        m(x).sum().backward()
        zo.step()
        zo.zero_grad()
    zo.consolidate_state_dict(to=0)
    if rank == 0:
        assert len(zo.state_dict()["state"]) == len(list(m.parameters()))
    return params(m)


def join(rank, pg):
    from torch.distributed.algorithms.join import Join
    m = DDP(Net(), process_group=pg)
    opt = torch.optim.SGD(m.parameters(), lr=0.05)
    with Join([m]):
        for x in batches(rank, 3 + 2 * rank):
            m(x).sum().backward()
            opt.step()
            opt.zero_grad()
    return params(m)


def autograd(rank, pg):
    import torch.distributed.nn.functional as F
    x = torch.full((3,), float(rank + 1), requires_grad=True)
    y = F.all_reduce(x, group=pg)
    (y * (rank + 1)).sum().backward()
    return [y.detach(), x.grad.clone()]


def nested(rank, world, pg):
    t = torch.full((4,), float(rank + 1))

    def again(fut):  # a collective issued and waited for inside a callback
        doubled = fut.value()[0] * 2
        return dist.all_reduce(doubled, group=pg, async_op=True).get_future().wait()[0]

    fut = dist.all_reduce(t, group=pg, async_op=True).get_future().then(again)
    after = torch.ones(2) * rank
    dist.all_reduce(after, group=pg)
    return [fut.wait(), after]


def worker(rank, world):
    torch.set_num_threads(1)
    dist.init_process_group("kcoll", rank=rank, world_size=world)
    gloo = dist.new_group(backend="gloo")
    ck = tc.Checks("rank %d of %d" % (rank, world))
    ok = objects(rank, world, None)
    og = objects(rank, world, gloo)
    for k in og:
        ck(ok[k] == og[k], "%s: kcoll %r, gloo %r" % (k, ok[k], og[k]))
    s = world * (world + 1) / 2
    nk = nested(rank, world, None)
    ck(nk[0].tolist() == [2 * s * world] * 4 and nk[1].tolist() == [s - world] * 2,
       "a collective inside a then() callback, and one after it: %r" % nk)
    worst = 0.0
    for name, fn in (("DDP no_sync + unused parameters", ddp_accumulate),
                     ("DDP + PowerSGD hook", ddp_powersgd), ("ZeroRedundancyOptimizer", zero),
                     ("Join, uneven inputs", join), ("nn.functional.all_reduce", autograd)):
        pk, pg = fn(rank, None), fn(rank, gloo)
        for a, b in zip(pk, pg):
            diff = float((a - b).abs().max())
            worst = max(worst, diff)
            if world == 2:
                ck(torch.equal(a, b), "%s, 2 ranks: kcoll and gloo differ by %g" % (name, diff))
            else:
                ck(bool(((a - b).abs() <= 1e-6 + 1e-5 * b.abs()).all()),
                   "%s, %d ranks: |kcoll - gloo| = %g is over the bound" % (name, world, diff))
    n = ck.finish()
    if rank == 0:
        print("world %d: %d checks, max |kcoll - gloo| = %g" % (world, n, worst))
    dist.destroy_process_group()


if __name__ == "__main__":
    sys.exit(tc.main_worlds(worker, "2,3"))
