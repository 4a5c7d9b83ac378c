"""What the Python API adds to a call: an 8-byte float32 all_reduce timed through
Communicator.all_reduce (numpy in, numpy out, a Python loop timed with perf_counter) and through
the C API (Comm.time_op, the loop in C++, as accl.perf times it), alternately in the same
processes, medians of the rounds; the slowest rank's figure counts.

    PYTHONPATH=python python -m accl.launch -n 2 python perf/python_cost.py [rounds] [iters]
"""

import statistics
import sys
import time

import numpy as np

import accl
from accl import _types


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 5000
    comm = accl.init()
    x, y = np.ones(2, np.float32), np.empty(2, np.float32)
    live = comm._live()
    times: dict[str, list[float]] = {"C API": [], "Python": [], "Python in place": []}

    def slowest(seconds: float) -> float:
        return float(comm.all_reduce(np.array([seconds / iters * 1e6]), op=accl.MAX)[0])

    for _ in range(rounds):
        comm.barrier()
        times["C API"].append(slowest(live.time_op("all_reduce", x.ctypes.data, y.ctypes.data,
                                                   2, _types.FLOAT32, accl.SUM, 0, iters)))
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.all_reduce(x, out=y)
        times["Python"].append(slowest(time.perf_counter() - t0))
        comm.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            comm.all_reduce(y)
        times["Python in place"].append(slowest(time.perf_counter() - t0))
    if comm.rank == 0:
        c = statistics.median(times["C API"])
        print(f"# all_reduce 8 B float32, {comm.size} ranks, median us per call of {rounds} "
              f"rounds of {iters} calls")
        for name, ts in times.items():
            m = statistics.median(ts)
            print(f"{name:>16}: {m:7.3f} us" + (f"  (+{m - c:.3f} us over the C API)"
                                                  if name != "C API" else ""))


if __name__ == "__main__":
    main()
