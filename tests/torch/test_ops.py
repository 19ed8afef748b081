#!/usr/bin/env python3
"""Every torch.distributed operation through kcoll against Gloo on the same inputs, for every
dtype kcoll maps, on 1, 2 and 4 ranks (forked processes, rendezvous through the store).

Inputs are small integers stored in each dtype, and the world sizes are powers of two, so every
sum, product and average is exact in every format whatever the reduction order: results must be
equal bit for bit. Where Gloo lacks the operation or the dtype (bfloat16, AVG, PREMUL_SUM,
reduce_scatter in PyTorch 1.13) the result is compared with the same computation done locally
from every rank's inputs (each rank can regenerate them), also bit for bit. One case with
random float32 inputs compares all_reduce SUM with Gloo within the stated bound
|kcoll - gloo| <= 2 * world * eps32 * sum_r |x_r| (reduction orders differ).

Lists of uneven sizes (all_gather, reduce_scatter; Gloo refuses them, ProcessGroupNCCL takes
them) are compared with the local reference.

Tensors that are not contiguous (strided slices, transposes, channels_last; Gloo takes them)
go through every operation too: results equal Gloo's on contiguous copies (kcoll's where Gloo
lacks the operation), and the elements between a strided view's own stay untouched.

usage: test_ops.py [--worlds 1,2,4]
"""
import datetime
import os
import sys
import time
import warnings
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_common as tc  # noqa: E402

tc.need_torch()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import kcoll  # noqa: E402,F401

# all_reduce_coalesced and all_gather_coalesced are tested as they are, deprecated or not
warnings.filterwarnings("ignore", message=".*will be deprecated")

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool]
R = dist.ReduceOp
N = 37  # odd on purpose: no block divides it evenly


def inp(tag, rank, n, dt, lo=-4, hi=5):
    g = torch.Generator().manual_seed(zlib.crc32(repr((tag, rank)).encode()))
    if dt == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dt == torch.uint8 or lo > 0:
        lo = max(lo, 0)
    return torch.randint(lo, hi, (n,), generator=g).to(dt)


BITWISE = {"BAND": torch.bitwise_and, "BOR": torch.bitwise_or, "BXOR": torch.bitwise_xor}


def reduce_local(xs, op, dt, world):
    if op in BITWISE:
        r = xs[0].clone()
        for x in xs[1:]:
            r = BITWISE[op](r, x)
        return r
    if dt == torch.bool:
        s = torch.stack([x.to(torch.int64) for x in xs])
        if op in ("SUM", "MAX"):
            return s.amax(0).bool()
        return s.amin(0).bool()  # PRODUCT, MIN
    wide = torch.float64 if dt.is_floating_point else torch.int64
    s = torch.stack([x.to(wide) for x in xs])
    if op == "SUM":
        r = s.sum(0)
    elif op == "PRODUCT":
        r = s.prod(0)
    elif op == "MIN":
        r = s.amin(0)
    elif op == "MAX":
        r = s.amax(0)
    elif op == "AVG":
        r = s.sum(0) / world if dt.is_floating_point else torch.div(s.sum(0), world,
                                                                      rounding_mode="trunc")
    elif op in ("PREMUL_SUM", "PREMUL_SUM_TENSOR"):
        r = (s * 0.5).sum(0)
    return r.to(dt)


def rop(op):
    if op == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(0.5)
    if op == "PREMUL_SUM_TENSOR":  # the factor as a tensor (1.13 takes a list of one)
        return dist._make_nccl_premul_sum([torch.tensor([0.5])])
    return getattr(R, op)


# Each case: name -> (run(group, rank, world, dt) -> [tensors], ref(rank, world, dt) -> [tensors])
def cases(world):
    c = {}

    def all_reduce(op):
        hi = 3 if op == "PRODUCT" else 5
        lo = 1 if op == "PRODUCT" else -4

        def run(g, rank, world, dt):
            x = inp(("ar", op), rank, N, dt, lo, hi)
            dist.all_reduce(x, op=rop(op), group=g)
            return [x]

        def ref(rank, world, dt):
            return [reduce_local([inp(("ar", op), r, N, dt, lo, hi) for r in range(world)],
                                 op, dt, world)]
        return run, ref

    for op in ["SUM", "PRODUCT", "MIN", "MAX", "AVG", "PREMUL_SUM", "PREMUL_SUM_TENSOR",
               "BAND", "BOR", "BXOR"]:
        c["all_reduce " + op] = all_reduce(op)

    # BAND/BOR/BXOR (integer and bool tensors) through every other reducing operation
    def coalesced(g, rank, world, dt):
        xs = [inp(("co", k), rank, N + k, dt) for k in range(2)]
        dist.all_reduce_coalesced(xs, op=R.BOR, group=g)
        return xs
    c["all_reduce_coalesced BOR"] = (coalesced, lambda rank, world, dt: [reduce_local(
        [inp(("co", k), r, N + k, dt) for r in range(world)], "BOR", dt, world)
        for k in range(2)])

    def reduce_bxor(g, rank, world, dt):
        x = inp("rx", rank, N, dt)
        dist.reduce(x, world - 1, op=R.BXOR, group=g)
        return [x] if rank == world - 1 else []
    c["reduce BXOR"] = (reduce_bxor, lambda rank, world, dt: [reduce_local(
        [inp("rx", r, N, dt) for r in range(world)], "BXOR", dt, world)]
        if rank == world - 1 else [])

    def reduce_scatter_band(g, rank, world, dt):
        out = torch.zeros(N, dtype=dt)
        dist.reduce_scatter_tensor(out, inp("rsb", rank, N * world, dt), op=R.BAND, group=g)
        return [out]
    c["reduce_scatter_tensor BAND"] = (reduce_scatter_band, lambda rank, world, dt: [
        reduce_local([inp("rsb", r, N * world, dt)[rank * N:(rank + 1) * N]
                      for r in range(world)], "BAND", dt, world)])

    def reduce_scatter_v_bor(g, rank, world, dt):
        out = torch.zeros(N + rank, dtype=dt)
        dist.reduce_scatter(out, [inp(("rvb", j), rank, N + j, dt) for j in range(world)],
                            op=R.BOR, group=g)
        return [out]
    c["reduce_scatter uneven BOR"] = (reduce_scatter_v_bor, lambda rank, world, dt: [
        reduce_local([inp(("rvb", rank), r, N + rank, dt) for r in range(world)], "BOR", dt,
                     world)])

    def broadcast(g, rank, world, dt):
        x = inp("bc", rank, N, dt)
        dist.broadcast(x, world - 1, group=g)
        return [x]
    c["broadcast"] = (broadcast, lambda rank, world, dt: [inp("bc", world - 1, N, dt)])

    def reduce(g, rank, world, dt):
        x = inp("rd", rank, N, dt)
        dist.reduce(x, 0, group=g)
        return [x] if rank == 0 else []
    c["reduce SUM"] = (reduce, lambda rank, world, dt: [reduce_local(
        [inp("rd", r, N, dt) for r in range(world)], "SUM", dt, world)] if rank == 0 else [])

    def all_gather(g, rank, world, dt):
        out = [torch.zeros(N, dtype=dt) for _ in range(world)]
        dist.all_gather(out, inp("ag", rank, N, dt), group=g)
        return out
    c["all_gather"] = (all_gather, lambda rank, world, dt: [inp("ag", r, N, dt)
                                                              for r in range(world)])

    def sz(r):  # a size of its own per rank: uneven lists, as ProcessGroupNCCL takes them
        return N + 3 * r

    def all_gather_v(g, rank, world, dt):
        out = [torch.zeros(sz(r), dtype=dt) for r in range(world)]
        dist.all_gather(out, inp("agv", rank, sz(rank), dt), group=g)
        return out
    c["all_gather uneven"] = (all_gather_v, lambda rank, world, dt: [inp("agv", r, sz(r), dt)
                                                                     for r in range(world)])

    def reduce_scatter_v(g, rank, world, dt):
        out = torch.zeros(sz(rank), dtype=dt)
        dist.reduce_scatter(out, [inp(("rsv", j), rank, sz(j), dt) for j in range(world)],
                            group=g)
        return [out]
    c["reduce_scatter uneven SUM"] = (reduce_scatter_v, lambda rank, world, dt: [reduce_local(
        [inp(("rsv", rank), r, sz(rank), dt) for r in range(world)], "SUM", dt, world)])

    def all_gather_coalesced(step):  # inputs of N + step * k elements
        def run(g, rank, world, dt):  # outs[r]: rank r's list
            outs = [[torch.zeros(N + step * k, dtype=dt) for k in range(2)]
                    for _ in range(world)]
            dist.all_gather_coalesced(
                outs, [inp(("agc", k), rank, N + step * k, dt) for k in range(2)], group=g)
            return [t for ts in outs for t in ts]
        return run, lambda rank, world, dt: [inp(("agc", k), r, N + step * k, dt)
                                             for r in range(world) for k in range(2)]
    c["all_gather_coalesced"] = all_gather_coalesced(0)
    c["all_gather_coalesced sizes"] = all_gather_coalesced(1)

    def all_gather_t(g, rank, world, dt):
        out = torch.zeros(N * world, dtype=dt)
        dist.all_gather_into_tensor(out, inp("agt", rank, N, dt), group=g)
        return [out]
    c["all_gather_into_tensor"] = (all_gather_t, lambda rank, world, dt: [torch.cat(
        [inp("agt", r, N, dt) for r in range(world)])])

    def reduce_scatter(g, rank, world, dt):
        out = torch.zeros(N, dtype=dt)
        dist.reduce_scatter(out, [inp(("rs", j), rank, N, dt) for j in range(world)], group=g)
        return [out]
    c["reduce_scatter SUM"] = (reduce_scatter, lambda rank, world, dt: [reduce_local(
        [inp(("rs", rank), r, N, dt) for r in range(world)], "SUM", dt, world)])

    def reduce_scatter_t(g, rank, world, dt):
        out = torch.zeros(N, dtype=dt)
        dist.reduce_scatter_tensor(out, inp("rst", rank, N * world, dt), group=g)
        return [out]
    c["reduce_scatter_tensor SUM"] = (reduce_scatter_t, lambda rank, world, dt: [reduce_local(
        [inp("rst", r, N * world, dt)[rank * N:(rank + 1) * N] for r in range(world)], "SUM",
        dt, world)])

    def all_to_all(g, rank, world, dt):
        out = [torch.zeros(N, dtype=dt) for _ in range(world)]
        dist.all_to_all(out, [inp(("a2a", j), rank, N, dt) for j in range(world)], group=g)
        return out
    c["all_to_all"] = (all_to_all, lambda rank, world, dt: [inp(("a2a", rank), i, N, dt)
                                                              for i in range(world)])

    def a2a_uneven(g, rank, world, dt):  # rank r sends N + r + j elements to rank j
        out = [torch.zeros(N + i + rank, dtype=dt) for i in range(world)]
        dist.all_to_all(out, [inp(("a2au", j), rank, N + rank + j, dt) for j in range(world)],
                        group=g)
        return out
    c["all_to_all uneven"] = (a2a_uneven, lambda rank, world, dt: [
        inp(("a2au", rank), i, N + i + rank, dt) for i in range(world)])

    def a2a_single(g, rank, world, dt):
        out = torch.zeros(N * world, dtype=dt)
        dist.all_to_all_single(out, inp("a2as", rank, N * world, dt), group=g)
        return [out]
    c["all_to_all_single"] = (a2a_single, lambda rank, world, dt: [torch.cat(
        [inp("a2as", i, N * world, dt)[rank * N:(rank + 1) * N] for i in range(world)])])

    def split(r, j):  # rows rank r sends to rank j
        return (r + 2 * j) % 3 + (j == 1)

    def a2a_splits(g, rank, world, dt):
        ins = [split(rank, j) for j in range(world)]
        outs = [split(i, rank) for i in range(world)]
        x = inp("a2av", rank, sum(ins) * 5, dt).view(-1, 5)
        out = torch.zeros(sum(outs), 5, dtype=dt)
        dist.all_to_all_single(out, x, outs, ins, group=g)
        return [out]

    def a2a_splits_ref(rank, world, dt):
        parts = []
        for i in range(world):
            x = inp("a2av", i, sum(split(i, j) for j in range(world)) * 5, dt).view(-1, 5)
            off = sum(split(i, j) for j in range(rank))
            parts.append(x[off:off + split(i, rank)])
        return [torch.cat(parts)]
    c["all_to_all_single splits"] = (a2a_splits, a2a_splits_ref)

    groot = 1 % world

    def gather(g, rank, world, dt):
        out = [torch.zeros(N, dtype=dt) for _ in range(world)] if rank == groot else None
        dist.gather(inp("ga", rank, N, dt), out, groot, group=g)
        return out or []
    c["gather"] = (gather, lambda rank, world, dt: [inp("ga", r, N, dt) for r in range(world)]
                   if rank == groot else [])

    def scatter(g, rank, world, dt):
        out = torch.zeros(N, dtype=dt)
        ins = [inp(("sc", j), 0, N, dt) for j in range(world)] if rank == 0 else None
        dist.scatter(out, ins, 0, group=g)
        return [out]
    c["scatter"] = (scatter, lambda rank, world, dt: [inp(("sc", rank), 0, N, dt)])

    if world > 1:
        def ring(g, rank, world, dt):
            out = torch.zeros(N, dtype=dt)
            ops = [dist.P2POp(dist.isend, inp("ring", rank, N, dt), (rank + 1) % world, g, tag=5),
                   dist.P2POp(dist.irecv, out, (rank - 1) % world, g, tag=5)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return [out]
        c["batch_isend_irecv ring"] = (ring, lambda rank, world, dt: [
            inp("ring", (rank - 1) % world, N, dt)])

        def sendrecv(g, rank, world, dt):
            x = inp("sr", rank, N, dt)
            if rank == 0:
                dist.send(x, 1, group=g)
                return []
            if rank == 1:
                dist.recv(x, 0, group=g)
            return [x]
        c["send/recv"] = (sendrecv, lambda rank, world, dt: [] if rank == 0 else
                          [inp("sr", 0 if rank == 1 else rank, N, dt)])

        def tagged(g, rank, world, dt):  # tags, in the same order on both sides
            if rank == 0:
                for w in [dist.isend(inp(("tg", t), 0, N, dt), 1, group=g, tag=t)
                          for t in (3, 9)]:
                    w.wait()
                return []
            outs = [torch.zeros(N, dtype=dt) for _ in range(2)]
            if rank == 1:
                for w in [dist.irecv(outs[k], 0, group=g, tag=t) for k, t in enumerate((3, 9))]:
                    w.wait()
            return outs
        c["isend/irecv with tags"] = (tagged, lambda rank, world, dt: [] if rank == 0 else [
            inp(("tg", t), 0, N, dt) if rank == 1 else torch.zeros(N, dtype=dt)
            for t in (3, 9)])
    return c


FILL = 77.0  # the elements between a strided view's own: never written


def layout_cases(world):
    """name -> run(group, rank, S) -> [tensors]: S(x) gives x itself (the reference run) or a
    view with x's values that is not contiguous (the run under test)."""
    c = {}
    n = 6

    def v(tag, rank, k=n):
        return inp(tag, rank, k, torch.float32)

    def all_reduce(g, rank, S):
        x = S(v("la", rank).view(2, 3))
        dist.all_reduce(x, group=g)
        return [x]
    c["all_reduce"] = all_reduce

    def transposed(g, rank, S):  # a transpose: no fill between its elements
        x = v("lt", rank).view(2, 3)
        x = x.t().contiguous().t() if S(None) else x
        dist.all_reduce(x, group=g)
        return [x]
    c["all_reduce transposed"] = transposed

    def channels_last(g, rank, S):
        x = inp("lc", rank, 2 * 3 * 2 * 2, torch.float32).view(2, 3, 2, 2)
        if S(None):
            x = x.contiguous(memory_format=torch.channels_last)
        dist.all_reduce(x, group=g)
        ok = x.is_contiguous(memory_format=torch.channels_last) == bool(S(None))
        return [x, torch.tensor([ok])]
    c["all_reduce channels_last"] = channels_last

    def broadcast(g, rank, S):
        x = S(v("lb", rank))
        dist.broadcast(x, world - 1, group=g)
        return [x]
    c["broadcast"] = broadcast

    def reduce(g, rank, S):
        x = S(v("lr", rank))
        dist.reduce(x, 0, group=g)
        return [x] if rank == 0 else []  # Gloo uses the others' as scratch
    c["reduce"] = reduce

    def all_gather(g, rank, S):
        outs = [S(torch.zeros(n)) for _ in range(world)]
        dist.all_gather(outs, S(v("lg", rank)), group=g)
        return outs
    c["all_gather"] = all_gather

    def all_gather_t(g, rank, S):
        out = S(torch.zeros(world * n))
        dist.all_gather_into_tensor(out, S(v("lgt", rank)), group=g)
        return [out]
    c["all_gather_into_tensor"] = all_gather_t

    def reduce_scatter(g, rank, S):
        out = S(torch.zeros(n))
        dist.reduce_scatter(out, [S(v(("ls", j), rank)) for j in range(world)], group=g)
        return [out]
    c["reduce_scatter"] = reduce_scatter

    def reduce_scatter_t(g, rank, S):
        out = S(torch.zeros(n))
        dist.reduce_scatter_tensor(out, S(v("lst", rank, n * world)), group=g)
        return [out]
    c["reduce_scatter_tensor"] = reduce_scatter_t

    def a2a_single(g, rank, S):
        out = S(torch.zeros(n * world))
        dist.all_to_all_single(out, S(v("lts", rank, n * world)), group=g)
        return [out]
    c["all_to_all_single"] = a2a_single

    def a2a_splits(g, rank, S):
        ins = [(rank + j) % 3 for j in range(world)]
        outs = [(i + rank) % 3 for i in range(world)]
        out = S(torch.zeros(sum(outs), 2))
        dist.all_to_all_single(out, S(v("ltv", rank, sum(ins) * 2).view(-1, 2)), outs, ins,
                               group=g)
        return [out]
    c["all_to_all_single splits"] = a2a_splits

    def a2a(g, rank, S):
        outs = [S(torch.zeros(n)) for _ in range(world)]
        dist.all_to_all(outs, [S(v(("lta", j), rank)) for j in range(world)], group=g)
        return outs
    c["all_to_all"] = a2a

    def gather(g, rank, S):
        outs = [S(torch.zeros(n)) for _ in range(world)] if rank == 0 else None
        dist.gather(S(v("lga", rank)), outs, 0, group=g)
        return outs or []
    c["gather"] = gather

    def scatter(g, rank, S):
        out = S(torch.zeros(n))
        dist.scatter(out, [S(v(("lsc", j), 0)) for j in range(world)] if rank == 0 else None,
                     0, group=g)
        return [out]
    c["scatter"] = scatter

    if world > 1:
        def ring(g, rank, S):
            out = S(torch.zeros(n))
            ops = [dist.P2POp(dist.isend, S(v("lring", rank)), (rank + 1) % world, g),
                   dist.P2POp(dist.irecv, out, (rank - 1) % world, g)]
            for w in dist.batch_isend_irecv(ops):
                w.wait()
            return [out]
        c["batch_isend_irecv"] = ring

        def sendrecv(g, rank, S):
            x = S(v("lsr", rank))
            if rank == 0:
                dist.send(x, 1, group=g)
            elif rank == 1:
                dist.recv(x, 0, group=g)
            return [x]
        c["send/recv"] = sendrecv
    return c


def layouts(rank, world, gloo, ck):
    """Every operation on tensors that are not contiguous, against the reference run."""
    for name, run in layout_cases(world).items():
        bases = []

        def strided(x):  # every other element of a buffer whose others hold FILL
            if x is None:
                return True
            base = torch.full(tuple(x.shape) + (2,), FILL)
            bases.append(base)
            view = base[..., 0]
            view.copy_(x)
            assert view.numel() <= 1 or not view.is_contiguous()
            return view
        got = run(None, rank, strided)
        try:
            want = run(gloo, rank, lambda x: False if x is None else x)
        except RuntimeError:  # Gloo lacks it: kcoll's own run on contiguous tensors
            want = run(None, rank, lambda x: False if x is None else x)
        if name == "all_reduce channels_last":
            want[1] = torch.tensor([True])  # the reference is contiguous, as it should be
        same = len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))
        ck(same, "%s on strided tensors: kcoll %s, reference %s" % (
            name, [t.flatten().tolist()[:6] for t in got],
            [t.flatten().tolist()[:6] for t in want]))
        ck(all(bool((b[..., 1] == FILL).all()) for b in bases),
           "%s on strided tensors: the elements between the view's own are untouched" % name)
    try:
        dist.all_reduce(torch.zeros(1).expand(4))
        ck(False, "an expand()ed output is refused")
    except RuntimeError as e:
        ck("share memory" in str(e) and ".clone()" in str(e), "expanded output: %s" % e)


def worker(rank, world):
    # a collective that waits on itself raises within a minute instead of hanging the suite
    dist.init_process_group("kcoll", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    assert dist.get_backend() == "kcoll"
    gloo = dist.new_group(backend="gloo")
    ck = tc.Checks("rank %d of %d" % (rank, world))
    vs_gloo = vs_local = 0
    gloo_lacks = set()
    for name, (run, ref) in cases(world).items():
        for dt in DTYPES:
            if name == "all_reduce AVG" and dt == torch.bool or \
                    name.startswith("all_reduce PREMUL_SUM") and not dt.is_floating_point or \
                    any(b in name for b in BITWISE) and dt.is_floating_point:
                continue
            got = run(None, rank, world, dt)
            try:
                want = run(gloo, rank, world, dt)
                vs_gloo += 1
                src = "gloo"
            except RuntimeError:
                want = ref(rank, world, dt)
                vs_local += 1
                src = "local"
                gloo_lacks.add(name + " " + str(dt).split(".")[-1])
            # AVG of float16 multiplies each input by 1/n before the sum, as NCCL does
            # (docs/nccl.md): where 1/n is not a power of two, it may miss the exactly rounded
            # average (3 ranks: -0.3330078125 for -1/3, one ulp below -0.333251953125). Bound:
            # 2 * eps(float16) * max(|average|, 1); exact everywhere else
            ulps = 2 if name == "all_reduce AVG" and dt == torch.float16 and \
                world & (world - 1) else 0
            same = len(got) == len(want) and all(
                a.dtype == b.dtype and (torch.equal(a, b) if not ulps else bool(
                    ((a.double() - b.double()).abs() <=
                     ulps * torch.finfo(dt).eps * b.double().abs().clamp(min=1)).all()))
                for a, b in zip(got, want))
            ck(same, "%s %s: kcoll %s, %s %s" % (name, dt, [t.tolist()[:6] for t in got], src,
                                                 [t.tolist()[:6] for t in want]))
    # random float32: sums in different orders, within the bound
    g = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn(100003, generator=g)
    absx = x.abs()
    a, b = x.clone(), x.clone()
    dist.all_reduce(a)
    dist.all_reduce(b, group=gloo)
    dist.all_reduce(absx, group=gloo)
    bound = 2 * world * torch.finfo(torch.float32).eps * absx
    ck(bool(((a - b).abs() <= bound).all()), "random float32 all_reduce: max |kcoll-gloo| %g"
       % float((a - b).abs().max()))
    # async Work: wait and result
    y = torch.full((N,), rank + 1, dtype=torch.int64)
    w = dist.all_reduce(y, async_op=True)
    ck(w.wait() and w.is_completed() and torch.equal(w.result()[0], y),
       "async all_reduce: wait/is_completed/result")
    ck(int(y[0]) == world * (world + 1) // 2, "async all_reduce value %d" % int(y[0]))
    dist.barrier()
    # a subgroup through the backend (even ranks)
    evens = list(range(0, world, 2))
    sub = dist.new_group(evens, backend="kcoll")
    if rank in evens:
        z = torch.full((5,), float(rank + 1))
        dist.all_reduce(z, group=sub)
        ck(float(z[0]) == float(sum(r + 1 for r in evens)),
           "new_group %s all_reduce: %s" % (evens, z.tolist()))
    layouts(rank, world, gloo, ck)
    # a batch that exchanges large messages both ways with each neighbour (16 MiB each: past
    # what a transport buffers, so that a send waits for its recv) completes as one coll group;
    # issued one operation at a time, each rank's first send would wait for a recv its peer has
    # not reached. PyTorch 2.7+ coalesces it only where supports_coalescing is true.
    if world > 1:
        big = 1 << 22
        mine = torch.full((big,), float(rank))
        left, right = torch.empty(big), torch.empty(big)
        ops = [dist.P2POp(dist.isend, mine, (rank + 1) % world),
               dist.P2POp(dist.isend, mine, (rank - 1) % world),
               dist.P2POp(dist.irecv, left, (rank - 1) % world),
               dist.P2POp(dist.irecv, right, (rank + 1) % world)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        ck(bool((left == (rank - 1) % world).all()) and bool((right == (rank + 1) % world).all()),
           "16 MiB exchange with both neighbours in one batch: %s %s"
           % (left[:2].tolist(), right[:2].tolist()))
        # the ring of PyTorch's tutorial ("Writing Distributed Applications"): isend to the
        # right, recv from the left, then wait. Gloo's isend does not wait for its recv; kcoll
        # posts both as requests (before 28 Nov 2026: every rank's send waited for a recv queued
        # behind it, and the ring timed out at 1 MiB and more)
        left.zero_()
        req = dist.isend(mine, (rank + 1) % world)
        dist.recv(left, (rank - 1) % world)
        req.wait()
        ck(bool((left == (rank - 1) % world).all()), "16 MiB tutorial ring (isend, recv, wait): "
           "%s" % left[:2].tolist())
        # an isend nobody waits for yet still goes: the receiver
        # gets it while the sender sleeps, long before its wait
        if rank < 2:
            x = torch.full((1 << 18,), 5.0)
            if rank == 0:
                req = dist.isend(x, 1)
                time.sleep(2.0)
                req.wait()
            else:
                t0 = time.monotonic()
                dist.recv(x.zero_(), 0)
                took = time.monotonic() - t0
                ck(took < 1.5 and bool((x == 5.0).all()),
                   "an isend not waited for reaches its recv in %.3f s (the sender waits after "
                   "2 s)" % took)
    # exchanges whose operations are far apart complete, as on Gloo (before 29 Nov 2026 each hung
    # until a timeout: the operation issued first ran alone on the worker, and the later one, on
    # which its peer waited, queued behind it): every rank posts its irecv, works 0.1 s, then
    # sends, in a ring; and a 4 MiB isend (past what a transport buffers), 0.1 s of work, then
    # the irecv of the reverse ring
    if world > 1:
        got = torch.zeros(4)
        t0 = time.monotonic()
        req = dist.irecv(got, (rank - 1) % world)
        time.sleep(0.1)
        dist.send(torch.full((4,), float(rank)), (rank + 1) % world)
        req.wait()
        ck(bool((got == (rank - 1) % world).all()),
           "irecv, 0.1 s, send (ring): got %s in %.2f s" % (got.tolist(), time.monotonic() - t0))
        big = torch.full((1 << 20,), float(rank))
        got = torch.zeros(1 << 20)
        req = dist.isend(big, (rank + 1) % world)
        time.sleep(0.1)
        req2 = dist.irecv(got, (rank - 1) % world)
        req2.wait()
        req.wait()
        ck(bool((got == (rank - 1) % world).all()),
           "4 MiB isend, 0.1 s, irecv (ring): got %s" % got[:2].tolist())
    # a then() callback on a recv's future (it runs on the point-to-point worker) receives again
    # and waits, while the main thread issues an exchange with rank 2: the callback's recv must
    # complete (the worker drives it itself, inside the callback) and the exchange after it
    if world >= 3 and rank < 3:
        if rank == 0:
            got, late, x = torch.zeros(4), {}, torch.zeros(4)

            def again(fut):
                out = torch.zeros(4)
                dist.irecv(out, 1, tag=5).wait()
                late["v"] = out
                return out
            fut = dist.irecv(got, 1).get_future().then(again)
            time.sleep(0.1)
            q = dist.irecv(x, 2)
            dist.send(torch.full((4,), 7.0), 2)
            q.wait()
            fut.wait()
            ck(bool((got == 1).all()) and bool((late["v"] == 11).all()) and bool((x == 2).all()),
               "a callback's recv with an exchange queued behind it: %s %s %s"
               % (got.tolist(), late["v"].tolist(), x.tolist()))
        elif rank == 1:
            dist.send(torch.full((4,), 1.0), 0)
            time.sleep(0.4)
            dist.send(torch.full((4,), 11.0), 0, tag=5)
        else:
            y = torch.zeros(4)
            r = dist.irecv(y, 0)
            dist.send(torch.full((4,), 2.0), 0)
            r.wait()
            ck(bool((y == 7).all()), "the exchange queued behind a callback: %s" % y.tolist())
    # point-to-point runs apart from the collectives, as on Gloo and ProcessGroupNCCL: rank 0
    # irecv then all_reduce, rank 1 all_reduce then send (4 MiB: past what a transport buffers).
    # Before 29 Nov 2026 both were jobs of one worker, in issue order, and this raised a
    # collective mismatch (recv against all_reduce).
    if world > 1:
        z = torch.full((4,), float(rank + 1))
        got = torch.zeros(1 << 20)
        if rank == 0:
            req = dist.irecv(got, 1)
            dist.all_reduce(z)
            req.wait()
            ck(bool((got == 7.0).all()), "irecv, all_reduce, wait: got %s" % got[:2].tolist())
        else:
            dist.all_reduce(z)
            if rank == 1:
                dist.send(torch.full((1 << 20,), 7.0), 0)
        ck(bool((z == world * (world + 1) / 2).all()),
           "all_reduce between an irecv and its send: %s" % z.tolist())
    # refusals carry a clear message
    try:
        dist.all_reduce(torch.zeros(4), op=R.BXOR)
        ck(False, "BXOR of float32 is refused")
    except RuntimeError as e:
        ck("BXOR needs integer or bool tensors" in str(e), "BXOR float refusal: %s" % e)
    try:
        dist.all_reduce(torch.zeros(4, dtype=torch.int16))
        ck(False, "int16 is refused")
    except RuntimeError as e:
        ck("not supported" in str(e), "int16 refusal message: %s" % e)
    # dtypes kcoll does not compute on still move where nothing is computed (as Gloo moves
    # them): complex64, complex128 and int16 through send/recv, broadcast, all_gather and
    # all_to_all_single, bit for bit; and a recv's Work names its source (both refused before
    # 28 Nov 2026)
    for dt in (torch.complex64, torch.complex128, torch.int16):
        def val(r, n=6):
            v = torch.arange(n, dtype=torch.float64) * (r + 1) - 7
            return torch.complex(v, -v).to(dt) if dt.is_complex else v.to(dt)
        b = val(0) if rank == 0 else torch.zeros(6, dtype=dt)
        dist.broadcast(b, 0)
        ck(torch.equal(b, val(0)), "broadcast %s: %s" % (dt, b.tolist()[:3]))
        outs = [torch.zeros(6, dtype=dt) for _ in range(world)]
        dist.all_gather(outs, val(rank))
        ck(all(torch.equal(o, val(r)) for r, o in enumerate(outs)), "all_gather %s" % dt)
        a2a = torch.zeros(2 * world, dtype=dt)
        dist.all_to_all_single(a2a, val(rank, 2 * world))
        ck(torch.equal(a2a, torch.cat([val(r, 2 * world)[2 * rank:2 * rank + 2]
                                       for r in range(world)])), "all_to_all_single %s" % dt)
        if world > 1 and rank < 2:
            if rank == 0:
                dist.send(val(0), 1)
            else:
                got = torch.zeros(6, dtype=dt)
                w = dist.irecv(got, 0)
                w.wait()
                ck(torch.equal(got, val(0)) and w.source_rank() == 0,
                   "send/recv %s: %s, source_rank %s" % (dt, got.tolist()[:3], w.source_rank()))
    # tags out of order: Gloo matches by tag; kcoll matches in issue order (as NCCL does), so the
    # first recv meets the tag-1 message and must raise naming both tags, not return its data
    # (it returned it, silently, before the tag went with the message). On a group of its own:
    # the mismatch fails that group's communicator.
    if world > 1:
        pair = dist.new_group([0, 1], backend="kcoll")
        if rank == 0:
            for t in (1, 2):
                dist.isend(torch.full((4,), float(t)), 1, group=pair, tag=t)
        elif rank == 1:
            y, x = torch.zeros(4), torch.zeros(4)
            try:
                for w in [dist.irecv(y, 0, group=pair, tag=2), dist.irecv(x, 0, group=pair, tag=1)]:
                    w.wait()
                ck(False, "recv tag 2 after send tag 1: raised (got %s and %s)"
                   % (y.tolist(), x.tolist()))
            except RuntimeError as e:
                ck("tag 2" in str(e) and "tag 1" in str(e) and "does not choose" in str(e),
                   "out-of-order tags: the message names both tags and the rule: %s" % e)
    # an uneven all_gather whose sizes the ranks do not agree on: rank 1 expects 3 elements
    # from rank 0, which sends 2 (and, its own list even, calls all_gather itself): both raise,
    # naming the counts (the first to see it may report it to the other: either message)
    if world > 1:
        pair = dist.new_group([0, 1], backend="kcoll")
        if rank < 2:
            outs = [torch.zeros(3 if rank == 1 and r == 0 else 2) for r in range(2)]
            try:
                dist.all_gather(outs, torch.ones(2), group=pair)
                ck(False, "uneven all_gather with sizes that disagree: raised")
            except RuntimeError as e:
                ck("mismatch" in str(e) and "count 2" in str(e) and "all_gather" in str(e),
                   "uneven all_gather with sizes that disagree: %s" % e)
    n = ck.finish()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("world %d: %d checks passed (%d cases against gloo, %d against the local "
              "reference)" % (world, n, vs_gloo, vs_local))
        print("world %d: gloo lacks: %s" % (world, ", ".join(sorted(gloo_lacks))))


if __name__ == "__main__":
    sys.exit(tc.main_worlds(worker, "1,2,3,4"))
