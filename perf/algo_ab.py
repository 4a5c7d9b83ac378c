"""A/B of algorithm settings in the same processes: the crossovers in docs/algorithms.md.

    python -m accl.launch -n 2 python perf/algo_ab.py all_reduce \
        "ACCL_ALGO=allreduce:split|ACCL_ALGO=allreduce:cma" 16K,64K,1M [rounds] [iters]

Each `|`-separated variant is a set of environment variables under which one communicator is
made (split from the world). Round after round, size after size, the variants take turns on
the same buffers, so a slow minute of this shared machine hits them all alike; the table gives
each variant's median time (the slowest rank's average over `iters` calls, out of place, or in
place with AB_INPLACE=1) and its speed relative to the first. Sizes are bytes per rank, float32
sum; the loop runs in C++ (Comm.time_op), as accl.perf's does.
"""

import os
import statistics
import sys

import numpy as np

import accl
from accl import _types

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size(text: str) -> int:
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def main() -> None:
    coll, variants = sys.argv[1], sys.argv[2].split("|")
    sizes = [size(x) for x in sys.argv[3].split(",")]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 7
    iters = int(sys.argv[5]) if len(sys.argv) > 5 else 20
    inplace = os.environ.get("AB_INPLACE") == "1"
    world = accl.init()
    comms = []
    for v in variants:
        saved = dict(os.environ)
        os.environ.update(kv.partition("=")[::2] for kv in v.split())
        comms.append(world.split(0, world.rank))
        os.environ.clear()
        os.environ.update(saved)
    n, count = world.size, max(sizes) // 4
    src = np.ones(count * (n if coll in ("reduce_scatter", "alltoall") else 1), np.float32)
    out = np.zeros(count * (n if coll in ("all_gather", "alltoall") else 1), np.float32)
    times: dict[tuple[int, int], list[float]] = {}
    for _ in range(rounds):
        for s in sizes:
            for i, c in enumerate(comms):
                live = c._live()
                send, recv = src.ctypes.data, out.ctypes.data
                if inplace:  # the C API's in-place layouts
                    if coll == "reduce_scatter":
                        recv = send + world.rank * s
                    elif coll == "all_gather":
                        send = recv + world.rank * s
                    else:
                        send = recv
                args = (coll, send, recv, s // 4, _types.FLOAT32, accl.SUM, 0)
                live.time_op(*args, 3)  # warm-up
                c.barrier()
                mine = np.array([live.time_op(*args, iters) / iters])
                slowest = float(world.all_reduce(mine, op=accl.MAX)[0])
                times.setdefault((i, s), []).append(slowest * 1e6)
    if world.rank == 0:
        print(f"# {coll}, {n} ranks, float32 sum, {'in' if inplace else 'out of'} place, "
              f"median us of {rounds} rounds of {iters} calls; (x) = speed against the first")
        for i, v in enumerate(variants):
            print(f"# {chr(65 + i)}: {v}")
        for s in sizes:
            med = [statistics.median(times[(i, s)]) for i in range(len(variants))]
            print(f"{s:>11} " + " ".join(f"{chr(65 + i)} {m:10.2f} ({med[0] / m:4.2f}x)"
                                         for i, m in enumerate(med)))


if __name__ == "__main__":
    main()
