#!/usr/bin/env python3
"""One rank of a small job started by coll-run (with or without --agent): init_process_group
("kcoll") with no MASTER_ADDR, no store, no rank; checks all_reduce, all_gather, a subgroup and a
few DDP steps; then destroys the default group and makes it again, twice (a test suite, a job
that re-creates its group: under coll-run the job's COLL_UNIQUE_ID serves one creation), checking
that destroy_process_group ends the group's worker thread; prints "torch rank R of N ok
(rendezvous: agent|coll-run)" on success."""
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import kcoll  # noqa: F401


def main():
    assert "MASTER_ADDR" not in os.environ, "the launcher test must not set MASTER_ADDR"
    torch.set_num_threads(1)
    dist.init_process_group("kcoll")
    rank, world = dist.get_rank(), dist.get_world_size()
    how = "agent" if os.environ.get("COLL_AGENT_SOCKET") else "coll-run"
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x)
    assert float(x[0]) == world * (world + 1) / 2, x[:4]
    out = [torch.zeros(3, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(out, torch.full((3,), rank, dtype=torch.int64))
    assert [int(t[0]) for t in out] == list(range(world)), out
    sub = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        y = torch.ones(4)
        dist.all_reduce(y, group=sub)
        assert float(y[0]) == (2 if world > 1 else 1), y
    torch.manual_seed(0)
    net = DDP(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        net(torch.randn(4, 8) + rank).sum().backward()
        opt.step()
    w = net.module.weight.detach().clone()
    dist.broadcast(w, 0)
    assert torch.equal(w, net.module.weight.detach()), "replicas differ"
    dist.barrier()
    dist.destroy_process_group()
    for again in (1, 2):
        dist.init_process_group("kcoll")
        assert (dist.get_rank(), dist.get_world_size()) == (rank, world)
        z = torch.full((2,), float(again + rank))
        dist.all_reduce(z)
        assert float(z[0]) == world * again + world * (world - 1) / 2, z
        sub = dist.new_group([0, world - 1])
        if rank in (0, world - 1):
            y = torch.ones(1)
            dist.all_reduce(y, group=sub)
            assert float(y[0]) == (2 if world > 1 else 1), y
        dist.barrier()
        held = len(os.listdir("/proc/self/task"))
        dist.destroy_process_group()
        # the group's worker thread ends with it (it lived on until the next group was made)
        left = len(os.listdir("/proc/self/task"))
        assert left < held, "threads before destroy_process_group: %d, after: %d" % (held, left)
    print("torch rank %d of %d ok (rendezvous: %s)" % (rank, world, how), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
