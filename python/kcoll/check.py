"""python3 -m kcoll.check: versions, the pinned interface and a two-line health check.

Exit status 0 when both health lines say ok, 1 otherwise.
"""
import os
import sys
import time


def main():
    import torch
    import torch.distributed as dist

    import kcoll
    from kcoll import _C

    print("kcoll package:   %s" % os.path.dirname(os.path.abspath(kcoll.__file__)))
    print("libcoll:         %s (coll.h %d)" % (kcoll.library_version(), _C.HEADER_VERSION))
    print("torch:           %s (extension built against %s, subclassing %s, CUDA %s)"
          % (torch.__version__, _C.TORCH_BUILT_WITH, _C.TORCH_BASE,
             "yes" if _C.CUDA else "no"))
    print("interface:       %s" % ", ".join("%s=%s" % kv for kv in sorted(kcoll.INTERFACE.items())))
    ok = True
    # 1: the library on its own: a one-rank communicator and an all_reduce through the backend
    try:
        t0 = time.time()
        comm = _C.Comm.init_rank(_C.unique_id(), 0, 1)
        pg = _C.create(comm, 30.0)
        x = torch.arange(8, dtype=torch.float32)
        pg.allreduce([x]).wait()
        assert torch.equal(x, torch.arange(8, dtype=torch.float32)), x
        print("health 1/2: ok: 1-rank communicator, all_reduce of 8 float32 in %.3f s"
              % (time.time() - t0))
    except Exception as e:  # noqa: BLE001 (the check reports whatever went wrong)
        ok = False
        print("health 1/2: FAILED: %s" % e)
    # 2: torch.distributed through the registered backend, with a local store
    try:
        t0 = time.time()
        dist.init_process_group("kcoll", store=dist.HashStore(), rank=0, world_size=1)
        y = torch.ones(4, dtype=torch.int64)
        dist.all_reduce(y)
        dist.barrier()
        assert dist.get_backend() == "kcoll" and int(y.sum()) == 4
        dist.destroy_process_group()
        print("health 2/2: ok: init_process_group('kcoll') + all_reduce + barrier in %.3f s"
              % (time.time() - t0))
    except Exception as e:  # noqa: BLE001
        ok = False
        print("health 2/2: FAILED: %s" % e)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
