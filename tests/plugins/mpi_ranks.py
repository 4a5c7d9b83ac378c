"""Ranks for test_plugins.py, started by mpirun -n 2: python mpi_ranks.py own-init|errors.

own-init  MPI is left to the mpi plugin (mpi4py is never imported; the ranks meet at
          ACCL_COMM_ID): it initialises MPI at the first communicator and finalises it at exit,
          or mpirun would report an abnormal end.
errors    a receive shorter than its send fails with RemoteError on the receiver, and a
          collective that one rank never joins times out on the other with TimeoutError.
Each rank prints one line "<rank> <findings>" for the test to check.
"""

import sys
import time

import numpy as np

import accl

mode = sys.argv[1]
info = accl.rank_info()
rank, size = info.rank, info.size

if mode == "own-init":
    comm = accl.Communicator(accl.get_unique_id(), rank, size, timeout=30, backend="mpi")
    x = np.full(3, rank + 1, np.int64)
    comm.all_reduce(x)
    with accl.group():
        comm.send(np.full(2, rank, np.float32), (rank + 1) % size)
        y = comm.recv(np.zeros(2, np.float32), (rank - 1) % size)
    comm.destroy()
    print(rank, int(x[0]), int(y[0]), "mpi4py" in sys.modules, flush=True)
else:
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    found = []
    comm = accl.Communicator.from_mpi(world, timeout=30, backend="mpi")
    try:
        if rank == 0:
            comm.send(np.zeros(8, np.int32), 1)
        else:
            comm.recv(np.zeros(4, np.int32), 0)
        found.append("no-error")
    except accl.RemoteError as e:
        found.append("remote" if "do not match" in str(e) else f"remote? {e}")
    comm.abort()
    world.Barrier()
    comm = accl.Communicator.from_mpi(world, timeout=1.5, backend="mpi")
    if rank == 0:
        start = time.monotonic()
        try:
            comm.all_reduce(np.zeros(4))
            found.append("no-timeout")
        except accl.errors.TimeoutError as e:
            waited = time.monotonic() - start
            ok = "timed out after 1.5 s" in str(e) and waited < 10
            found.append("timeout" if ok else f"timeout? {waited:.1f} s: {e}")
    else:
        time.sleep(3)  # never joins the all-reduce
    comm.abort()
    print(rank, " ".join(found), flush=True)
