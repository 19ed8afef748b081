"""Shared by the torch tests: skip when PyTorch is missing, start ranks, free ports, checks."""
import os
import sys
import traceback

SKIP = 77
# A creation bounded by a 3 s group timeout fails within this (the imports and the store's
# rendezvous under ASan on a loaded machine come first): test_fault and test_launch.
INIT_LIMIT = 12.0


def need_torch():
    """Exit 77 (skipped) when PyTorch is not installed; fail when kcoll itself does not import."""
    try:
        import torch  # noqa: F401
        import torch.distributed as dist
    except ImportError as e:
        print("SKIP: PyTorch is not installed (%s); apt-get install python3-torch" % e)
        sys.exit(SKIP)
    if not dist.is_available():
        print("SKIP: this PyTorch has no torch.distributed")
        sys.exit(SKIP)
    try:
        import kcoll  # noqa: F401
    except ImportError as e:  # PyTorch is there: a missing package is a failure, not a skip
        print("FAIL: PyTorch is installed but the kcoll package does not import (%s); was the "
              "backend built (cmake -DCOLL_TORCH=ON, pybind11-dev, libtorch-dev) and is "
              "PYTHONPATH=<build>/python?" % e)
        sys.exit(1)


def free_port():
    """A port for a store or rendezvous endpoint (tests/free_port.py)."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    from free_port import free_port as pick
    return pick()


def spawn(fn, world, *args, start_method="fork"):
    """Run fn(rank, world, *args) in world processes (forked: fast; "spawn" where CUDA is used)
    rendezvousing through env:// (MASTER_ADDR/MASTER_PORT: the store path). Raises when any rank
    raised."""
    import torch.multiprocessing as mp
    for attempt in range(3):
        env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
        try:
            mp.start_processes(_entry, args=(fn, world, env, args), nprocs=world, join=True,
                               start_method=start_method)
            return
        except Exception as e:  # the store's port taken meanwhile: nothing ran yet, go again
            if attempt == 2 or "errno: 98 - Address already in use" not in str(e):
                raise
            print("spawn: the store's port %s was taken; again with another" % env["MASTER_PORT"])


def main_worlds(worker, default, *args):
    """A test's main: worker(rank, world, *args) on each world size of --worlds (default)."""
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--worlds", default=default)
    a = ap.parse_args()
    for world in [int(w) for w in a.worlds.split(",")]:
        spawn(worker, world, *args)
        print("world %d: ok" % world)
    return 0


def _entry(rank, fn, world, env, args):
    os.environ.update(env)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(world)
    try:
        fn(rank, world, *args)
    except BaseException:
        traceback.print_exc()
        raise


class Checks:
    """Counts checks; fails at the end with every failed one listed."""

    def __init__(self, who):
        self.who = who
        self.n = 0
        self.failed = []

    def __call__(self, ok, what):
        self.n += 1
        if not ok:
            self.failed.append(what)

    def finish(self):
        if self.failed:
            raise AssertionError("%s: %d of %d checks failed:\n  %s" % (
                self.who, len(self.failed), self.n, "\n  ".join(self.failed[:40])))
        return self.n
