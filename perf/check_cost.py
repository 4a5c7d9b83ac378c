"""What ACCL_CHECK=1 costs: all_reduce at 8 B and 1 MiB on 2 local ranks, one communicator with
the check off and one with it on, timed alternately (medians of 5 passes) in the same processes.

    PYTHONPATH=python python perf/check_cost.py
"""

import os
import statistics

import numpy as np

from accl import FLOAT32, SUM, _accl

N = 2


def rank(r, uids):
    os.environ["ACCL_CHECK"] = "0"
    off = _accl.Comm(uids[0], r, N, 60.0)
    os.environ["ACCL_CHECK"] = "1"
    on = _accl.Comm(uids[1], r, N, 60.0)
    for nbytes, iters in ((8, 2000), (1 << 20, 100)):
        count = nbytes // 4
        x = np.ones(count, np.float32)
        y = np.empty_like(x)
        times = {"off": [], "on": []}
        for _ in range(5):
            for name, comm in (("off", off), ("on", on)):
                t = comm.time_op("all_reduce", x.ctypes.data, y.ctypes.data, count, FLOAT32, SUM, 0, iters)
                times[name].append(t / iters * 1e6)
        if r == 0:
            a, b = statistics.median(times["off"]), statistics.median(times["on"])
            print(f"all_reduce {nbytes:>8} B: ACCL_CHECK=0 {a:8.1f} us, ACCL_CHECK=1 {b:8.1f} us "
                  f"({b - a:+.1f} us per call)", flush=True)


if __name__ == "__main__":
    uids = [_accl.get_unique_id(), _accl.get_unique_id()]
    pids = []
    for r in range(N):
        pid = os.fork()
        if pid == 0:
            rank(r, uids)
            os._exit(0)
        pids.append(pid)
    for pid in pids:
        os.waitpid(pid, 0)
