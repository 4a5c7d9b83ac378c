"""What the Python API adds to a call: NCCL's five collectives on two float32 per rank (8
bytes; reduce_scatter's input holds one such block per rank), timed through
accl.Communicator (numpy in, numpy out, a Python loop timed with perf_counter) and through the
C API (Comm.time_op, the loop in C++, as accl.perf times it), alternately in the same
processes; medians of the rounds, the slowest rank's figure counting. With --mpi, under
mpirun, the same Python loops call mpi4py instead: what a Python user of MPI sees.

    PYTHONPATH=python python -m accl.launch -n 2 python perf/python_cost.py [rounds] [iters]
    PYTHONPATH=python mpirun -n 2 python perf/python_cost.py --mpi [rounds] [iters]
"""

import statistics
import sys
import time
from collections.abc import Callable

import numpy as np

COLLECTIVES = ("all_reduce", "broadcast", "reduce", "all_gather", "reduce_scatter")


def buffers(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """x (a rank's 2 elements), out (2), whole (2n: all_gather's output, reduce_scatter's
    input), work (2n, for the in-place forms)."""
    return (np.ones(2, np.float32), np.empty(2, np.float32), np.ones(2 * n, np.float32),
            np.ones(2 * n, np.float32))


def accl_calls(comm, x, out, whole, work) -> dict[str, tuple[Callable, Callable]]:
    """Per collective: its out-of-place and its in-place call through the Python API."""
    return {
        "all_reduce": (lambda: comm.all_reduce(x, out=out), lambda: comm.all_reduce(out)),
        "broadcast": (lambda: comm.broadcast(x, out=out), lambda: comm.broadcast(out)),
        "reduce": (lambda: comm.reduce(x, out=out), lambda: comm.reduce(out)),
        "all_gather": (lambda: comm.all_gather(x, out=whole), lambda: comm.all_gather(work)),
        "reduce_scatter": (lambda: comm.reduce_scatter(whole, out=out),
                           lambda: comm.reduce_scatter(work)),
    }


def mpi_calls(comm, MPI, x, out, whole, work) -> dict[str, tuple[Callable, Callable]]:
    ip = MPI.IN_PLACE
    return {
        "all_reduce": (lambda: comm.Allreduce(x, out, MPI.SUM),
                       lambda: comm.Allreduce(ip, out, MPI.SUM)),
        # Bcast has no out-of-place form: the root copies its input first, as a user must.
        "broadcast": (lambda: (comm.rank == 0 and np.copyto(out, x), comm.Bcast(out, 0)),
                      lambda: comm.Bcast(out, 0)),
        "reduce": (lambda: comm.Reduce(x, out, MPI.SUM, 0),
                   lambda: comm.Reduce(ip if comm.rank == 0 else out, out, MPI.SUM, 0)),
        "all_gather": (lambda: comm.Allgather(x, whole), lambda: comm.Allgather(ip, work)),
        "reduce_scatter": (lambda: comm.Reduce_scatter_block(whole, out, MPI.SUM),
                           lambda: comm.Reduce_scatter_block(ip, work, MPI.SUM)),
    }


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--mpi"]
    mpi = "--mpi" in sys.argv
    rounds = int(args[0]) if args else 15
    iters = int(args[1]) if len(args) > 1 else 5000
    if mpi:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
        n, rank, barrier = comm.size, comm.rank, comm.Barrier
        calls = mpi_calls(comm, MPI, *buffers(n))

        def slowest(seconds: float) -> float:
            return comm.allreduce(seconds / iters * 1e6, MPI.MAX)
    else:
        import accl
        from accl import _types
        comm = accl.init()
        n, rank, barrier, live = comm.size, comm.rank, comm.barrier, comm._live()
        x, out, whole, work = buffers(n)
        calls = accl_calls(comm, x, out, whole, work)
        addresses = {"all_gather": (x, whole), "reduce_scatter": (whole, out)}

        def slowest(seconds: float) -> float:
            return float(comm.all_reduce(np.array([seconds / iters * 1e6]), op=accl.MAX)[0])

    def timed(call: Callable) -> float:
        barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            call()
        return slowest(time.perf_counter() - t0)

    rows = []
    for name in COLLECTIVES:
        times: dict[str, list[float]] = {"C API": [], "Python": [], "Python in place": []}
        for _ in range(rounds):
            if not mpi:
                send, recv = addresses.get(name, (x, out))
                barrier()
                times["C API"].append(slowest(live.time_op(
                    name, send.ctypes.data, recv.ctypes.data, 2, _types.FLOAT32, accl.SUM, 0,
                    iters)))
            times["Python"].append(timed(calls[name][0]))
            times["Python in place"].append(timed(calls[name][1]))
        rows.append((name, {k: statistics.median(v) for k, v in times.items() if v}))
    if rank == 0:
        lib = "mpi4py" if mpi else "accl"
        print(f"# {lib}, {n} ranks, 2 float32 per rank, median us per call of {rounds} rounds of "
              f"{iters} calls" + ("" if mpi else "; + is over the C API"))
        for name, m in rows:
            c = m.get("C API")
            line = f"{name:>15}" + (f"  C API {c:6.3f}" if c is not None else "")
            for k in ("Python", "Python in place"):
                line += f"  {k} {m[k]:6.3f}" + (f" (+{m[k] - c:.3f})" if c is not None else "")
            print(line)


if __name__ == "__main__":
    main()
