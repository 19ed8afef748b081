#!/usr/bin/env python3
"""One worker of a torchrun job with --max_restarts=1 (test_launch.py's torchrun half): the
kcoll backend through torchrun's env:// store. On the first try rank 1 exits after the first
all_reduce (leaving a mark file, KCOLL_TEST_MARK), the others fail in the barrier after it and
print kcoll's error; torchrun restarts the workers, and the second try runs to the end."""
import os
import sys

import torch
import torch.distributed as dist

import kcoll  # noqa: F401


def say(line):
    """One write per line: the workers share torchrun's stdout, and print's text and newline can
    reach it as two writes that another worker's line falls between."""
    os.write(1, (line + "\n").encode())


def main():
    torch.set_num_threads(1)
    mark = os.environ["KCOLL_TEST_MARK"]
    restart = os.environ.get("TORCHELASTIC_RESTART_COUNT", "?")
    dist.init_process_group("kcoll")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.full((100,), float(rank + 1))
    dist.all_reduce(x)
    assert float(x[0]) == world * (world + 1) / 2, x[:4]
    if rank == 1 and not os.path.exists(mark):
        open(mark, "w").close()
        say("rank 1 exits on purpose")
        os._exit(3)
    try:
        dist.barrier()
        y = torch.arange(world, dtype=torch.int64) * (rank + 1)
        dist.all_reduce(y)
        assert y.tolist() == [i * world * (world + 1) // 2 for i in range(world)], y
    except RuntimeError as e:
        say("rank %d raised: %s" % (rank, e))
        return 1
    dist.destroy_process_group()
    say("restart %s: rank %d of %d ok" % (restart, rank, world))
    return 0


if __name__ == "__main__":
    sys.exit(main())
