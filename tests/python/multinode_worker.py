"""One rank of tests/python/test_multinode.py, started by torchrun (or mpirun) inside a network
namespace. Writes its report to $ACCL_MN_OUT/rank<R>.json; phases ($ACCL_MN_PHASES):

  check  every collective and send/recv, several counts, dtypes and ops, against numpy
  ring   all_reduce again on a communicator made with ACCL_ALGO=allreduce:ring
  cut    writes ready<R>, waits for the test to cut a link and create the file "go", then
         runs an all_reduce on a communicator with a short timeout and reports its error
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import traceback

import numpy as np

import accl

OUT = os.environ["ACCL_MN_OUT"]
PHASES = os.environ.get("ACCL_MN_PHASES", "check").split(",")
CUT_TIMEOUT = float(os.environ.get("ACCL_MN_CUT_TIMEOUT", "5"))
COUNTS = (0, 1, 1031, 20000, 300000)  # 300000 float64: ring among leaders, split over sockets


def data(rank: int, count: int, seed: int, dtype=np.float64) -> np.ndarray:
    rng = np.random.default_rng(seed * 7919 + rank)
    return rng.integers(-40, 40, count).astype(dtype)


def expect(what: str, got: np.ndarray, want: np.ndarray, exact: bool = True) -> None:
    if exact:
        ok = got.shape == want.shape and np.array_equal(got, want)
    else:
        ok = got.shape == want.shape and np.allclose(got, want, rtol=1e-5, atol=1e-5)
    if not ok:
        bad = np.flatnonzero(got != want) if got.shape == want.shape else []
        raise AssertionError(f"{what}: shape {got.shape} vs {want.shape}, {len(bad)} elements "
                             f"differ, first at {bad[:5]}: {got.ravel()[bad[:5]]} vs "
                             f"{want.ravel()[bad[:5]]}")


def check_all_reduce(comm: accl.Communicator, seed: int) -> int:
    r, n = comm.rank, comm.size
    done = 0
    for count in COUNTS:
        for dtype, op, ref, exact in (
            (np.float64, accl.SUM, lambda xs: np.sum(xs, axis=0), True),
            (np.float64, accl.AVG, lambda xs: np.sum(xs, axis=0) / n, False),
            (np.int32, accl.MAX, lambda xs: np.max(xs, axis=0), True),
            (np.float32, accl.SUM, lambda xs: np.sum(xs, axis=0), False),
        ):
            xs = [data(q, count, seed + count, dtype) for q in range(n)]
            x = xs[r].copy()
            out = comm.all_reduce(x, op, out=np.empty_like(x))
            expect(f"all_reduce {np.dtype(dtype).name} op {op} count {count}", out,
                   ref(xs) if count else x, exact)
            inplace = comm.all_reduce(xs[r].copy(), op)
            expect(f"all_reduce in place {np.dtype(dtype).name} count {count}", inplace,
                   ref(xs) if count else x, exact)
            done += 2
    return done


def check_others(comm: accl.Communicator) -> int:
    r, n = comm.rank, comm.size
    done = 0
    for count in COUNTS:
        xs = [data(q, count, 11 + count) for q in range(n)]
        for root in sorted({0, n - 1, 3 % n}):
            got = comm.broadcast(xs[r].copy(), root)
            expect(f"broadcast root {root} count {count}", got, xs[root])
            got = comm.reduce(xs[r].copy(), root, accl.SUM)
            if r == root:
                expect(f"reduce root {root} count {count}", got, np.sum(xs, axis=0))
            done += 2
        got = comm.all_gather(xs[r], out=np.empty(n * count))
        expect(f"all_gather count {count}", got, np.concatenate(xs))
        big = [data(q, n * count, 23 + count) for q in range(n)]
        got = comm.reduce_scatter(big[r], accl.SUM, out=np.empty(count))
        expect(f"reduce_scatter count {count}", got,
               np.sum(big, axis=0)[r * count:(r + 1) * count])
        got = comm.all_to_all(big[r].copy())
        want = np.concatenate([big[q][r * count:(r + 1) * count] for q in range(n)])
        expect(f"all_to_all in place count {count}", got, want)
        root = n - 2
        got = comm.gather(xs[r], root, out=np.empty(n * count) if r == root else None)
        if r == root:
            expect(f"gather root {root} count {count}", got, np.concatenate(xs))
        got = comm.scatter(big[1] if r == 1 else None, 1, out=np.empty(count))
        expect(f"scatter root 1 count {count}", got, big[1][r * count:(r + 1) * count])
        # Send/recv around the ring and back, all at once in a group.
        into = np.empty(count)
        with accl.group():
            comm.send(xs[r], (r + 1) % n)
            comm.recv(into, (r - 1) % n)
        expect(f"send/recv ring count {count}", into, xs[(r - 1) % n])
        comm.barrier()
        done += 7
    return done


def _finish_sub(world: accl.Communicator, uid: np.ndarray, timeout: float) -> accl.Communicator:
    """A new communicator over the same ranks; rank 0's id travels over `world`."""
    n = np.array([len(uid)], np.int64)
    world.broadcast(n, 0)
    buf = uid if world.rank == 0 else np.zeros(int(n[0]), np.uint8)
    world.broadcast(buf, 0)
    return accl.Communicator(buf.tobytes(), world.rank, world.size, timeout=timeout)


def main() -> int:
    report: dict = {"host": os.environ.get("ACCL_HOSTID"), "hostname": socket.gethostname(),
                    "phases": {}}
    rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
    try:
        world = accl.init(timeout=90)
        rank = world.rank
        report["rank"], report["size"] = rank, world.size
        if "check" in PHASES:
            report["phases"]["check"] = check_all_reduce(world, 1) + check_others(world)
        if "ring" in PHASES:
            os.environ["ACCL_ALGO"] = "allreduce:ring"
            with _finish_sub(world, _uid(world), 90) as ring:
                report["phases"]["ring"] = check_all_reduce(ring, 5)
            del os.environ["ACCL_ALGO"]
        if "cut" in PHASES:
            cut = _finish_sub(world, _uid(world), CUT_TIMEOUT)
            cut.all_reduce(np.ones(4))  # connected and working before the cut
            world.barrier()
            open(os.path.join(OUT, f"ready{rank}"), "w").close()
            deadline = time.monotonic() + 120
            while not os.path.exists(os.path.join(OUT, "go")) and time.monotonic() < deadline:
                time.sleep(0.05)
            t0 = time.monotonic()
            try:
                cut.all_reduce(np.ones(1000))
                report["phases"]["cut"] = {"error": None}
            except accl.AcclError as e:
                report["phases"]["cut"] = {"error": type(e).__name__, "message": str(e),
                                           "seconds": time.monotonic() - t0}
            cut.abort()
        world.destroy()
    except BaseException:
        report["failure"] = traceback.format_exc()
    with open(os.path.join(OUT, f"rank{rank}.json.tmp"), "w") as f:
        json.dump(report, f)
    os.rename(os.path.join(OUT, f"rank{rank}.json.tmp"), os.path.join(OUT, f"rank{rank}.json"))
    return 0


def _uid(world: accl.Communicator) -> np.ndarray:
    if world.rank == 0:
        return np.frombuffer(accl.get_unique_id(), np.uint8).copy()
    return np.zeros(0, np.uint8)


if __name__ == "__main__":
    sys.exit(main())
