"""Collectives on inputs written just before each call, as in training (gradients, updated
shards), against inputs written long before, as accl-perf and nccl-tests time them. A fresh
input sits in the writing core's cache, and on some machines lines another core has just written
are the slow ones to read, so an algorithm that reads its peers' inputs can look fast in a sweep
and still be slow in a job. Each loop writes the whole input (numpy fill) before every call; the
fill's own time, measured alone in the same round, is subtracted. Medians of the rounds; the
slowest rank's figure counts.

    PYTHONPATH=python python -m accl.launch -n 2 python perf/fresh_inputs.py \
        [all_gather all_reduce reduce_scatter broadcast] [--rounds R] [--iters N]
"""

import argparse
import statistics
import time

import numpy as np

import accl
from accl.perf import buffer

SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20]  # bytes of each rank's input


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("collectives", nargs="*", default=["all_gather"])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--iters", type=int, default=50)
    o = p.parse_args()
    comm = accl.init()
    n = comm.size
    calls = {
        "all_gather": lambda x, y: comm.all_gather(x, out=y),
        "all_reduce": lambda x, y: comm.all_reduce(x, out=y[: x.size]),
        "reduce_scatter": lambda x, y: comm.reduce_scatter(x, out=y[: x.size // n]),
        "broadcast": lambda x, y: comm.broadcast(x, root=0),
    }

    def slowest(seconds: float) -> float:
        return float(comm.all_reduce(np.array([seconds / o.iters * 1e6]), op=accl.MAX)[0])

    def loop(call, x: np.ndarray, y: np.ndarray | None, fresh: bool) -> float:
        comm.barrier()
        t0 = time.perf_counter()
        for i in range(o.iters):
            if fresh:
                x.fill(i)
            if y is not None:
                call(x, y)
        return time.perf_counter() - t0

    for name in o.collectives:
        if comm.rank == 0:
            print(f"# {name}, {n} ranks, float32, median us per call of {o.rounds} rounds of "
                  f"{o.iters} calls; fresh: the input written before each call (its time "
                  "subtracted)")
            print(f"# {'input (B)':>10} {'stale':>9} {'fresh':>9} {'fresh/stale':>12}")
        for size in SIZES:
            count = size // 4
            x = buffer(count, np.dtype(np.float32))
            y = buffer(count * n, np.dtype(np.float32))
            stale, fresh = [], []
            for _ in range(o.rounds):
                stale.append(slowest(loop(calls[name], x, y, False)))
                fill = loop(calls[name], x, None, True)
                fresh.append(slowest(loop(calls[name], x, y, True) - fill))
            if comm.rank == 0:
                s, f = statistics.median(stale), statistics.median(fresh)
                print(f"  {size:>10} {s:9.1f} {f:9.1f} {f / s:12.2f}")
    comm.destroy()


if __name__ == "__main__":
    main()
