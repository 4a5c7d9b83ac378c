"""The torch.distributed backend "accl" (accl.distributed, accl._accl_torch).

Each test starts real ranks with ``python -m accl.launch -n N`` running this file as a script:
``python test_torch_backend.py <scenario>`` runs one scenario on one rank under
init_process_group("accl") with env://. A scenario checks its results itself and exits non-zero
with a message naming the first difference.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

if __name__ != "__main__":
    import pytest

    torch = pytest.importorskip("torch", reason="torch is not installed")
    import importlib.util

    import accl  # noqa: F401  (the package, for find_spec below)
    from accl_testing import PYTHON_DIR, clean_env, free_port, launch_cmd, run_cmd

    if importlib.util.find_spec("accl._accl_torch") is None:
        pytest.skip("accl._accl_torch was not built (torch was not importable at build time)",
                    allow_module_level=True)
else:
    import torch
    import torch.distributed as dist

# ------------------------------------------------------------------ scenarios (run in ranks)


def _check(cond: bool, what: str) -> None:
    if not cond:
        raise AssertionError(what)


def _eq(got, want, what: str, tol: float = 0.0) -> None:
    _check(got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}")
    _check(got.shape == want.shape, f"{what}: shape {tuple(got.shape)}, expected "
           f"{tuple(want.shape)}")
    if tol:
        ok = torch.allclose(got.double(), want.double(), rtol=tol, atol=tol)
    else:
        ok = torch.equal(got, want)
    _check(ok, f"{what}: got {got.tolist()}, expected {want.tolist()}")


def _raises(fn, contains: str, what: str) -> None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        _check(contains.lower() in str(e).lower(), f"{what}: message {str(e)!r} lacks {contains!r}")
        return
    raise AssertionError(f"{what}: no error raised")


def _rank_input(r: int, dtype) -> torch.Tensor:
    base = torch.arange(6) % 3 + 1 + r  # small: an int8 product over 3 ranks fits
    if dtype == torch.bool:
        return (torch.arange(6) + r) % 3 == 0
    if dtype.is_complex:
        return torch.complex(base.float(), -base.float()).to(dtype)
    return base.to(dtype)


def _expect(inputs: list, op, dtype, n: int) -> torch.Tensor:
    R = dist.ReduceOp
    if dtype == torch.bool:
        s = torch.stack(inputs)
        return {R.SUM: s.any(0), R.MAX: s.any(0), R.PRODUCT: s.all(0), R.MIN: s.all(0),
                R.BOR: s.any(0), R.BAND: s.all(0),
                R.BXOR: s.to(torch.int64).sum(0) % 2 == 1}[op]
    s = torch.stack([i.to(torch.complex128 if dtype.is_complex else torch.float64)
                     for i in inputs])
    if op == R.SUM:
        out = s.sum(0)
    elif op == R.AVG:
        out = s.sum(0) / n if dtype.is_floating_point or dtype.is_complex else \
            torch.div(s.sum(0), n, rounding_mode="trunc")
    elif op == R.PRODUCT:
        out = s.prod(0)
    elif op == R.MIN:
        out = s.amin(0)
    elif op == R.MAX:
        out = s.amax(0)
    else:
        acc = inputs[0].clone()
        for x in inputs[1:]:
            acc = {R.BAND: torch.bitwise_and, R.BOR: torch.bitwise_or,
                   R.BXOR: torch.bitwise_xor}[op](acc, x)
        return acc
    return out.to(dtype)


def scenario_ops() -> None:
    r, n = dist.get_rank(), dist.get_world_size()
    R = dist.ReduceOp
    others = [i for i in range(n)]
    tol = {torch.float16: 1e-2, torch.bfloat16: 2e-2}

    # all_reduce: every dtype x op; an unsupported pair raises before any data moves.
    dtypes = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
              torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64]
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX, R.AVG, R.BAND, R.BOR, R.BXOR]
    for dt in dtypes:
        inputs = [_rank_input(i, dt) for i in others]
        for op in ops:
            what = f"all_reduce {dt} {op}"
            x = inputs[r].clone()
            bad = ((op in (R.BAND, R.BOR, R.BXOR) and (dt.is_floating_point or dt.is_complex))
                   or (dt == torch.bool and op == R.AVG)
                   or (dt.is_complex and op in (R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR)))
            if bad:
                _raises(lambda: dist.all_reduce(x, op=op), "not", what)
                continue
            dist.all_reduce(x, op=op)
            _eq(x, _expect(inputs, op, dt, n), what, tol.get(dt, 0.0))

    # Sparse (COO) all_reduce: a sum, as gloo's (rank i has rows 0..i, some shared); other
    # reductions are refused.
    def sparse(i: int) -> torch.Tensor:
        return torch.sparse_coo_tensor(torch.arange(i + 1).reshape(1, -1),
                                       torch.full((i + 1, 2), float(i + 1)), (n, 2))
    x = sparse(r)
    dist.all_reduce(x)
    _check(x.is_sparse, "sparse all_reduce keeps the layout")
    _eq(x.to_dense(), sum(sparse(i).to_dense() for i in others), "sparse all_reduce")
    _raises(lambda: dist.all_reduce(sparse(r), op=R.MAX), "only SUM", "sparse all_reduce MAX")

    # PREMUL_SUM: the factor multiplies each input before the sum.
    x = _rank_input(r, torch.float32)
    dist.all_reduce(x, op=dist._make_nccl_premul_sum(2.0))
    _eq(x, 2 * sum(_rank_input(i, torch.float32) for i in others), "all_reduce PREMUL_SUM")
    _raises(lambda: dist.all_reduce(torch.ones(2, dtype=torch.int32),
                                    op=dist._make_nccl_premul_sum(2.0)), "PREMUL_SUM",
            "PREMUL_SUM on int32")

    # A non-contiguous tensor (a column) is reduced in place.
    m = torch.zeros(4, 3)
    m[:, 1] = r + 1
    dist.all_reduce(m[:, 1])
    _eq(m[:, 1], torch.full((4,), float(n * (n + 1) // 2)), "all_reduce of a column")
    _eq(m[:, 0], torch.zeros(4), "all_reduce left the other columns alone")

    # broadcast, any dtype (bytes move): from the last rank.
    for dt in (torch.float32, torch.int16, torch.complex128, torch.bool):
        x = _rank_input(r, dt)
        dist.broadcast(x, src=n - 1)
        _eq(x, _rank_input(n - 1, dt), f"broadcast {dt}")

    # reduce to rank 1 % n, through accl and through the host fold (BXOR).
    root = 1 % n
    for op, dt in ((R.SUM, torch.float32), (R.BXOR, torch.int32), (R.MAX, torch.int16)):
        x = _rank_input(r, dt)
        dist.reduce(x, dst=root, op=op)
        if r == root:
            _eq(x, _expect([_rank_input(i, dt) for i in others], op, dt, n), f"reduce {op}")
        else:
            _eq(x, _rank_input(r, dt), f"reduce {op} leaves non-roots alone")

    # all_gather (list) and all_gather_into_tensor.
    x = _rank_input(r, torch.float64)
    outs = [torch.empty_like(x) for _ in others]
    dist.all_gather(outs, x)
    for i in others:
        _eq(outs[i], _rank_input(i, torch.float64), f"all_gather block {i}")
    flat = torch.empty(n * 6, dtype=torch.float64)
    dist.all_gather_into_tensor(flat, x)
    _eq(flat, torch.cat([_rank_input(i, torch.float64) for i in others]), "all_gather_into_tensor")

    # reduce_scatter (list) and reduce_scatter_tensor.
    for op, dt in ((R.SUM, torch.float32), (R.MAX, torch.int64), (R.BOR, torch.int64)):
        blocks = [_rank_input(r + b, dt) for b in others]  # block b of rank r
        out = torch.empty(6, dtype=dt)
        dist.reduce_scatter(out, [b.clone() for b in blocks], op=op)
        want = _expect([_rank_input(i + r, dt) for i in others], op, dt, n)
        _eq(out, want, f"reduce_scatter {op} {dt}")
        out2 = torch.empty(6, dtype=dt)
        dist.reduce_scatter_tensor(out2, torch.cat(blocks), op=op)
        _eq(out2, want, f"reduce_scatter_tensor {op} {dt}")

    # all_to_all_single: equal blocks, and split sizes (rank r sends r+p+1 rows to p).
    src = torch.arange(n * 2, dtype=torch.float32) + 100 * r
    dst = torch.empty_like(src)
    dist.all_to_all_single(dst, src)
    want = torch.cat([torch.arange(2 * r, 2 * r + 2, dtype=torch.float32) + 100 * p
                      for p in others])
    _eq(dst, want, "all_to_all_single")
    splits = [r + p + 1 for p in others]
    src = torch.cat([torch.full((s, 2), 100.0 * r + p) for p, s in enumerate(splits)])
    dst = torch.empty(sum(splits), 2)
    dist.all_to_all_single(dst, src, output_split_sizes=splits, input_split_sizes=splits)
    want = torch.cat([torch.full((s, 2), 100.0 * p + r) for p, s in enumerate(splits)])
    _eq(dst, want, "all_to_all_single with split sizes")

    # all_to_all (lists of tensors of different sizes).
    ins = [torch.full((r + p + 1,), float(10 * r + p)) for p in others]
    outs = [torch.empty(p + r + 1) for p in others]
    dist.all_to_all(outs, ins)
    for p in others:
        _eq(outs[p], torch.full((p + r + 1,), float(10 * p + r)), f"all_to_all from {p}")

    # gather and scatter at rank 0.
    x = _rank_input(r, torch.int32)
    gl = [torch.empty_like(x) for _ in others] if r == 0 else None
    dist.gather(x, gl, dst=0)
    if r == 0:
        for i in others:
            _eq(gl[i], _rank_input(i, torch.int32), f"gather block {i}")
    out = torch.empty(6, dtype=torch.int32)
    dist.scatter(out, [_rank_input(i, torch.int32) for i in others] if r == 0 else None, src=0)
    _eq(out, _rank_input(r, torch.int32), "scatter")

    # send/recv: pairs (even sends first), and a ring through batch_isend_irecv.
    if n >= 2 and r < n - n % 2:
        peer = r ^ 1
        mine, theirs = torch.full((5,), float(r)), torch.empty(5)
        if r % 2 == 0:
            dist.send(mine, peer)
            dist.recv(theirs, peer)
        else:
            dist.recv(theirs, peer)
            dist.send(mine, peer)
        _eq(theirs, torch.full((5,), float(peer)), "send/recv")
    nxt, prv = (r + 1) % n, (r - 1) % n
    big = 1 << 20  # large enough that a send cannot finish before its receive is posted
    send_t, recv_t = torch.full((big,), float(r)), torch.empty(big)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, send_t, nxt),
                                   dist.P2POp(dist.irecv, recv_t, prv)])
    for q in reqs:
        q.wait()
    _eq(recv_t[:4], torch.full((4,), float(prv)), "batch_isend_irecv ring")
    _raises(lambda: dist.recv(torch.empty(1)), "source", "recv from any source")
    # A device no accl backend serves here: refused at the call, naming the devices served.
    # (torch itself answers ops on meta tensors, so this calls the backend directly.)
    backend = dist.group.WORLD._get_backend(torch.device("cpu"))
    _raises(lambda: backend.allreduce([torch.ones(2, device="meta")]),
            "no accl backend serves meta", "a tensor on a device accl does not serve")

    # Coalesced all-reduces: all_reduce_coalesced and the coalescing manager.
    ts = [torch.full((3,), float(r)), torch.full((5,), float(2 * r))]
    total = float(n * (n - 1) // 2)
    dist.all_reduce_coalesced(ts)
    _eq(ts[0], torch.full((3,), total), "all_reduce_coalesced 0")
    _eq(ts[1], torch.full((5,), 2 * total), "all_reduce_coalesced 1")
    from torch.distributed.distributed_c10d import _coalescing_manager

    ts = [torch.full((3,), float(r)), torch.full((5,), float(2 * r))]
    with _coalescing_manager(device=torch.device("cpu"), async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t)
    cm.wait()
    _eq(ts[1], torch.full((5,), 2 * total), "coalescing manager")

    # async_op=True: Work.wait, is_completed, get_future and chained callbacks.
    ts = [torch.full((1000,), float(r + i)) for i in range(5)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    futs = [w.get_future().then(lambda f: f.value()[0] * 2) for w in works]
    for i, (w, f) in enumerate(zip(works, futs)):
        _check(w.wait() is True, "Work.wait() returns True")
        _check(w.is_completed() and w.is_success(), "is_completed after wait")
        _eq(f.wait(), torch.full((1000,), 2 * (total + n * i)), f"future callback {i}")
    w = dist.all_gather_into_tensor(torch.empty(n * 2), torch.ones(2), async_op=True)
    _check(len(w.get_future().wait()) == 1, "all_gather_into_tensor future holds one tensor")

    # barrier, objects (pickles over all_gather/broadcast), sequence numbers, sub-groups.
    dist.barrier()
    objs = [None] * n
    dist.all_gather_object(objs, {"rank": r})
    _check(objs == [{"rank": i} for i in others], f"all_gather_object: {objs}")
    lst = [f"from {r}"]
    dist.broadcast_object_list(lst, src=0)
    _check(lst == ["from 0"], f"broadcast_object_list: {lst}")
    pg = dist.distributed_c10d._get_default_group()
    seqs = [None] * n
    backend = pg._get_backend(torch.device("cpu"))
    dist.all_gather_object(seqs, backend._get_sequence_number_for_group())
    _check(len(set(seqs)) == 1 and seqs[0] > 0, f"sequence numbers differ: {seqs}")
    backend = pg._get_backend(torch.device("cpu"))
    _check(backend.name() == "accl", f"backend name {backend.name()}")
    backend.monitored_barrier()
    sub = dist.new_group([0, n - 1])
    if r in (0, n - 1):
        x = torch.ones(2)
        dist.all_reduce(x, group=sub)
        _eq(x, torch.full((2,), 2.0 if n > 1 else 1.0), "all_reduce on a sub-group")
    dist.barrier()
    dist.destroy_process_group()


def scenario_timeout() -> None:
    """The process-group timeout bounds an op whose peer never comes, and the error names the
    op and the missing rank. Work.wait(timeout) gives up early without failing the op."""
    r = dist.get_rank()
    x = torch.ones(4)
    # Rank 1 comes late: rank 0's short wait() gives up, a full wait() then succeeds.
    if r == 1:
        time.sleep(1.0)
    w = dist.all_reduce(x, async_op=True)
    if r == 0:
        _raises(lambda: w.wait(timeout=timedelta(milliseconds=100)), "timed out",
                "Work.wait(timeout)")
    w.wait()
    _eq(x, torch.full((4,), 2.0), "late all_reduce")
    # Rank 1 never joins this one: rank 0 fails after the group's 3 s timeout.
    if r == 0:
        t0 = time.monotonic()
        try:
            dist.all_reduce(x)
        except Exception as e:  # noqa: BLE001
            msg = str(e)
            print("timeout message:", msg.splitlines()[0], flush=True)
            took = time.monotonic() - t0
            _check(2.0 < took < 30.0, f"timed out after {took:.1f} s, expected about 3 s")
            _check(isinstance(e, dist.DistBackendError), f"{type(e)} is not DistBackendError")
            _check("1" in msg and "allreduce" in msg.lower().replace("_", "")
                   and "time" in msg.lower(), f"timeout message {msg!r}")
        else:
            raise AssertionError("all_reduce without rank 1 did not fail")
        # The communicator is unusable now; later ops fail at once instead of hanging.
        _raises(lambda: dist.all_reduce(x), "", "an op after the timeout")
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        err = backend.get_error()
        _check(err == torch._C._distributed_c10d.ErrorType.TIMEOUT, f"get_error() = {err}")
    else:
        time.sleep(6.0)
    dist.destroy_process_group()


def scenario_abort() -> None:
    """abort() from another thread ends an op that waits for a rank that never comes, long
    before the group's timeout; later ops fail at once with a clear message."""
    import threading

    r = dist.get_rank()
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    if r == 0:
        w = dist.all_reduce(torch.ones(4), async_op=True)
        threading.Timer(0.5, backend.abort).start()
        t0 = time.monotonic()
        _raises(w.wait, "", "the op abort() interrupted")
        took = time.monotonic() - t0
        _check(took < 10.0, f"abort took {took:.1f} s to end the op")
        _raises(lambda: dist.all_reduce(torch.ones(4)), "aborted", "an op after abort()")
    else:
        time.sleep(2.0)
    dist.destroy_process_group()


def scenario_dead_peer() -> None:
    """kill -9 of rank 2 in the middle of a run: ranks 0 and 1 get a DistBackendError naming
    rank 2 within 5 s, and are not killed."""
    r = dist.get_rank()
    x = torch.ones(1 << 16)
    dist.all_reduce(x)
    if r == 2:
        os.kill(os.getpid(), 9)
    t0 = time.monotonic()
    try:
        for _ in range(100000):
            dist.all_reduce(x)
    except Exception as e:  # noqa: BLE001
        took = time.monotonic() - t0
        print(f"dead peer message after {took:.2f} s: {str(e).splitlines()[0]}", flush=True)
        _check(isinstance(e, dist.DistBackendError), f"{type(e)} is not DistBackendError")
        _check("rank 2" in str(e) and "gone" in str(e), f"message {str(e)!r}")
        _check(took < 5.0, f"the dead peer was found after {took:.1f} s")
    else:
        raise AssertionError("all_reduce with a dead peer did not fail")


def scenario_backend_api() -> None:
    """split_group, setTimeout, getError and the deprecated all_gather_coalesced."""
    import warnings

    r, n = dist.get_rank(), dist.get_world_size()
    world = dist.group.WORLD
    backend = world._get_backend(torch.device("cpu"))
    E = torch._C._distributed_c10d.ErrorType
    _check(backend.get_error() == E.SUCCESS, f"get_error() = {backend.get_error()}")

    # split_group: ranks 0 and n-1 form a new group (one acclCommSplit); the others get None.
    # dist.split_group itself refuses to split without an accelerator, for every backend, so
    # the ProcessGroup method it calls is used directly.
    _check(backend.supports_splitting, "supports_splitting")
    members = [0, n - 1]
    sub = world.split_group(members, timeout=timedelta(seconds=30))
    if r in members:
        _check(sub is not None and sub.size() == 2 and sub.rank() == members.index(r),
               f"split group: {sub}")
        x = torch.full((3,), float(r))
        sub.allreduce([x]).wait()
        _eq(x, torch.full((3,), float(n - 1)), "all_reduce on the split group")
    else:
        _check(sub is None, f"rank {r} is not in the split but got {sub}")
    x = torch.ones(2)
    dist.all_reduce(x)  # the parent group still works after the split
    _eq(x, torch.full((2,), float(n)), "all_reduce on the parent after split_group")

    _raises(lambda: backend.set_timeout(timedelta(seconds=0)), "positive", "set_timeout(0)")
    backend.set_timeout(timedelta(seconds=30))  # what set_timeout does: scenario set_timeout

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # all_gather_coalesced is deprecated
        # outs[i][j]: rank i's input j.
        outs = [[torch.zeros(2), torch.zeros(3, 2)] for _ in range(n)]
        dist.all_gather_coalesced(outs, [torch.full((2,), float(r)),
                                         torch.arange(6.0).reshape(3, 2) + 10 * r])
    for i in range(n):
        _eq(outs[i][0], torch.full((2,), float(i)), f"all_gather_coalesced 1st from {i}")
        _eq(outs[i][1], torch.arange(6.0).reshape(3, 2) + 10 * i, f"all_gather_coalesced 2nd "
            f"from {i}")
    dist.destroy_process_group()


def scenario_set_timeout() -> None:
    """set_timeout shortens the timeout of later ops (created with 60 s), on the default group
    and on a new_group; rank 0 then waits alone and must fail after about 2 s."""
    r = dist.get_rank()
    sub = dist.new_group()
    for g in (dist.group.WORLD, sub):
        g._get_backend(torch.device("cpu")).set_timeout(timedelta(seconds=2))
        x = torch.ones(3)
        dist.all_reduce(x, group=g)  # still works under the new timeout
        _eq(x, torch.full((3,), 2.0), "all_reduce after set_timeout")
    if r == 0:
        for g in (sub, dist.group.WORLD):
            t0 = time.monotonic()
            _raises(lambda: dist.all_reduce(torch.ones(2), group=g), "ranks 1",
                    "all_reduce without rank 1")
            took = time.monotonic() - t0
            _check(1.5 < took < 15.0, f"timed out after {took:.1f} s; set_timeout gave 2 s, the "
                   "group was made with 60 s")
    else:
        time.sleep(8.0)


def scenario_monitored_barrier() -> None:
    """ProcessGroup.monitored_barrier(timeout, wait_all_ranks): passes when all come; names the
    ranks that do not (the first, or all), within its own timeout; the ranks that came hear
    at once that rank 0 failed; a zero timeout on rank 0 fails at once; the groups stay
    usable. 3 ranks."""
    r = dist.get_rank()
    world = dist.group.WORLD
    world.monitored_barrier(timedelta(seconds=20))
    world.monitored_barrier(timedelta(seconds=20), wait_all_ranks=True)
    if r == 0:
        _raises(lambda: world.monitored_barrier(timedelta(0)), "Rank 0 timed out in "
                "monitoredBarrier", "monitored_barrier(0)")
    g1 = dist.new_group(timeout=timedelta(seconds=60))
    g2 = dist.new_group(timeout=timedelta(seconds=4))
    if r == 0:  # ranks 1 and 2 do not come
        t0 = time.monotonic()
        _raises(lambda: g1.monitored_barrier(timedelta(seconds=1), wait_all_ranks=True),
                "Ranks 1, 2 failed to pass monitoredBarrier", "wait_all_ranks")
        took = time.monotonic() - t0
        _check(took < 10.0, f"monitored_barrier(1 s) failed after {took:.1f} s (group: 60 s)")
    # Rank 2 does not come: rank 0 names it (the first missing rank), rank 1 hears of it.
    if r == 0:
        _raises(lambda: g2.monitored_barrier(timedelta(seconds=1)),
                "Rank 2 failed to pass monitoredBarrier", "first missing rank")
    elif r == 1:
        t0 = time.monotonic()
        _raises(lambda: g2.monitored_barrier(timedelta(seconds=1)), "Rank 1 successfully "
                "reached monitoredBarrier, but received errors", "a rank that came")
        took = time.monotonic() - t0
        _check(took < 3.5, f"rank 1 heard of rank 0's failure after {took:.1f} s, not at once "
               "(g2's timeout: 4 s)")
    for g in (None, g1, g2):  # every group still works
        x = torch.ones(2)
        dist.all_reduce(x, group=g)
        _eq(x, torch.full((2,), 3.0), "all_reduce after the failed monitored barriers")


def scenario_any_source() -> None:
    """recv without src (recvAnysource) on a group made with ACCL_TORCH_ANY_SOURCE=1: every
    message arrives once, from the rank Work._source_rank() names, in each sender's order,
    mixed with receives that name the source. Without it, recv without src raises."""
    r, n = dist.get_rank(), dist.get_world_size()
    _raises(lambda: dist.recv(torch.zeros(2)), "ACCL_TORCH_ANY_SOURCE", "recv(src=None)")
    os.environ["ACCL_TORCH_ANY_SOURCE"] = "1"
    g = dist.new_group()
    per = 3  # messages from each sender to each receiver; value sender * 100 + index
    for receiver in range(n):
        if r != receiver:
            for i in range(per):
                dist.send(torch.full((5,), float(r * 100 + i)), receiver, group=g)
            continue
        got = {s: [] for s in range(n) if s != r}
        first = (r + 1) % n
        t = torch.zeros(5)
        dist.recv(t, src=first, group=g)  # a named receive takes the first one of `first`
        got[first].append(int(t[0]))
        for k in range((n - 1) * per - 1):
            t = torch.full((5,), -1.0)
            if k % 2:
                w = dist.irecv(t, group=g)
                w.wait()
                src = w._source_rank()
            else:
                src = dist.recv(t, group=g)
            _check(bool((t == t[0]).all()) and int(t[0]) // 100 == src,
                   f"recv from any source: {t.tolist()} reported as from rank {src}")
            got[src].append(int(t[0]))
        for s, values in got.items():
            _eq(torch.tensor(values), torch.tensor([s * 100 + i for i in range(per)]),
                f"rank {r}: the messages from rank {s}, in arrival order")
    dist.barrier(group=g)


def scenario_init_methods() -> None:
    """tcp:// and file:// init_method, one after the other in the same processes."""
    r, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    tmp = sys.argv[2]
    for method in (f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}", f"file://{tmp}/store"):
        dist.init_process_group("accl", init_method=method, rank=r, world_size=n,
                                timeout=timedelta(seconds=60))
        x = torch.full((3,), float(r))
        dist.all_reduce(x)
        _eq(x, torch.full((3,), float(n * (n - 1) // 2)), f"all_reduce after {method}")
        dist.destroy_process_group()


def _main() -> None:
    import accl.distributed  # noqa: F401  (registers "accl")

    scenario = sys.argv[1]
    if scenario != "init_methods":
        timeout = timedelta(seconds=3 if scenario == "timeout" else 60)
        dist.init_process_group("accl", timeout=timeout)
    globals()[f"scenario_{scenario}"]()


if __name__ == "__main__":
    _main()
    sys.exit(0)

# ------------------------------------------------------------------ tests (pytest)


def _launch(n: int, *args: str, timeout: float = 100.0):
    p = run_cmd(launch_cmd(n, "--timeout", str(int(timeout - 10)), *args), timeout=timeout)
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


@pytest.mark.parametrize("n", [2, 3])
def test_ops(n):
    _launch(n, __file__, "ops")


def test_timeout_names_the_missing_rank():
    p = _launch(2, __file__, "timeout")
    assert "timeout message" in p.stdout, p.stdout


def test_abort_from_another_thread():
    _launch(2, __file__, "abort")


def test_dead_peer_is_named_within_5_seconds():
    # Ranks started directly: accl.launch would stop the survivors as soon as one rank dies.
    import subprocess

    port = free_port()
    procs = [subprocess.Popen([sys.executable, __file__, "dead_peer"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              env=clean_env(RANK=str(r), WORLD_SIZE="3", MASTER_ADDR="127.0.0.1",
                                            MASTER_PORT=str(port)))
             for r in range(3)]
    outs = [p.communicate(timeout=90)[0] for p in procs]
    assert procs[2].returncode == -9, outs[2]
    for r in (0, 1):
        assert procs[r].returncode == 0, f"rank {r}: exit {procs[r].returncode}\n{outs[r]}"
        assert "dead peer message" in outs[r], outs[r]


@pytest.mark.parametrize("n", [2, 3])
def test_backend_api(n):
    _launch(n, __file__, "backend_api")


def test_set_timeout():
    _launch(2, __file__, "set_timeout")


def test_monitored_barrier():
    _launch(3, __file__, "monitored_barrier")


@pytest.mark.parametrize("n", [2, 3])
def test_recv_any_source(n):
    _launch(n, __file__, "any_source")


def test_init_methods(tmp_path):
    _launch(2, __file__, "init_methods", str(tmp_path))


def test_ddp_matches_gloo():
    # 3 ranks: the two backends may add the gradients in different orders (see the example).
    p = _launch(3, os.path.join(REPO, "examples", "ddp.py"), "--compare", "gloo")
    assert "max |accl - gloo|" in p.stdout, p.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_fsdp2_matches_gloo(n):
    # At 3 ranks the shards are of uneven size (padded), and gloo may add in another order.
    p = _launch(n, os.path.join(REPO, "examples", "fsdp.py"), "--compare", "gloo")
    assert "accl: loss" in p.stdout and "max |accl - gloo|" in p.stdout, p.stdout


def test_compile_functional_collectives():
    # inductor generates and compiles C++ for the graph around the collectives: about 25 s the
    # first time, seconds once its cache (/tmp/torchinductor_$USER) has it.
    p = _launch(2, os.path.join(REPO, "examples", "compile_functional.py"), timeout=200)
    assert "results match" in p.stdout, p.stdout


def _py(code: str, **env: str):
    return run_cmd([sys.executable, "-c", code], env=clean_env(**env))


PRIVATEUSE1 = """
import torch, torch.distributed as dist
torch.utils.rename_privateuse1_backend("ppu")  # what a vendor's extension does
import accl.distributed
print(accl.distributed.accelerators(), sorted(dist.Backend.backend_capability["accl"]))
"""


@pytest.mark.parametrize("backend,served", [
    ("", "{'ppu': 'pccl'} ['cpu', 'ppu']"),
    ("nonexistent", "{} ['cpu']"),
], ids=["pccl", "unknown-backend"])
def test_privateuse1_device_is_served(backend, served):
    """A PrivateUse1 device (the name its extension registered) is served when the accl backend
    for it loads: here T-Head's pccl, the fake library from the C++ tests. Its tensors cannot be
    made without the vendor's device; the GPU-side path is the one cuda tensors take."""
    lib = os.path.join(os.environ.get("ACCL_BUILD_DIR", os.path.join(REPO, "build")),
                       "tests", "nccl", "libfakepccl.so")
    if not os.path.exists(lib):
        pytest.skip(f"{lib} is not built (the fake vendor libraries come with the C++ tests)")
    env = {"ACCL_PCCL_LIBRARY": lib}
    if backend:
        env["ACCL_TORCH_PRIVATEUSE1_BACKEND"] = backend
    p = _py(PRIVATEUSE1, **env)
    assert p.returncode == 0 and p.stdout.strip() == served, p.stdout + p.stderr


def test_import_accl_does_not_import_torch():
    p = _py("import sys, accl; assert 'torch' not in sys.modules, 'torch was imported'")
    assert p.returncode == 0, p.stderr


def test_version_mismatch_names_both_versions():
    p = _py("import torch; torch.__version__ = '0.0.1'; import accl.distributed")
    assert p.returncode != 0
    assert "0.0.1" in p.stderr and torch.__version__ in p.stderr and "rebuild" in p.stderr, p.stderr


def test_version_mismatch_during_autoload_does_not_break_import_torch():
    # As if torch's autoload imported accl.distributed while torch itself is being imported:
    # registration succeeds, and asking for "accl" raises the reason.
    code = ("import torch, torch.distributed as dist; torch.__version__ = '0.0.1'; "
            "torch.__spec__._initializing = True; import accl.distributed; "
            "torch.__spec__._initializing = False\n"
            "try:\n dist.init_process_group('accl', store=dist.HashStore(), rank=0, world_size=1)\n"
            "except RuntimeError as e:\n print('raised:', e)")
    p = _py(code)
    assert p.returncode == 0, p.stderr
    assert "raised:" in p.stdout and "0.0.1" in p.stdout and "rebuild" in p.stdout, p.stdout


def test_entry_point_autoload(tmp_path):
    # What pip install leaves: an entry point in the torch.backends group. torch calls it
    # during `import torch` unless TORCH_DEVICE_BACKEND_AUTOLOAD=0.
    info = tmp_path / "accl_autoload_test-0.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: accl-autoload-test\n"
                                   "Version: 0.0\n")
    (info / "entry_points.txt").write_text(
        "[torch.backends]\naccl = accl.distributed:_autoload\n")
    code = ("import sys, torch, torch.distributed as dist; "
            "print('ACCL' in dist.Backend._plugins, 'accl.distributed' in sys.modules)")
    path = os.pathsep.join([str(tmp_path), PYTHON_DIR])
    p = _py(code, PYTHONPATH=path)
    assert p.stdout.split() == ["True", "True"], p.stdout + p.stderr
    p = _py(code, PYTHONPATH=path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert p.stdout.split() == ["False", "False"], p.stdout + p.stderr
