"""Communicator.from_mpi and accl.init() under Open MPI's mpirun (skipped without mpi4py)."""

import importlib.util
import os
import sys

import pytest

from accl_testing import run_cmd, which

SCRIPT = r"""
import numpy as np
from mpi4py import MPI
import accl
world = MPI.COMM_WORLD
comm = accl.Communicator.from_mpi(world, timeout=60)
x = np.full(5, world.rank + 1.0)
comm.all_reduce(x)
comm.destroy()
comm = accl.init(timeout=60)  # finds mpirun's variables and mpi4py: from_mpi again
info = accl.rank_info()
y = np.full(2, comm.rank, np.int64)
comm.all_reduce(y, op=accl.MAX)
comm.destroy()
print("ok", info.source, comm.rank, comm.size, x[0], y[0], flush=True)
"""


def mpirun_cmd(n):
    mpirun = which("mpirun")
    if mpirun is None or importlib.util.find_spec("mpi4py") is None:
        pytest.skip("mpi4py or mpirun is not installed")
    cmd = [mpirun, "-n", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


def test_from_mpi_and_init_under_mpirun():
    n = 3
    cmd = mpirun_cmd(n)
    barrier = "from mpi4py import MPI; MPI.COMM_WORLD.Barrier()"
    smoke = run_cmd(cmd + [sys.executable, "-c", barrier], timeout=60)
    if smoke.returncode != 0:
        pytest.skip(f"mpirun does not work here: {smoke.stderr.strip()[-300:]}")
    p = run_cmd(cmd + [sys.executable, "-c", SCRIPT], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if line.startswith("ok"))
    assert lines == [f"ok mpi {r} {n} 6.0 {n - 1}" for r in range(n)], p.stdout + p.stderr
