"""Helpers for the Python tests: run a function on N ranks, each its own process.

Workers run in processes started with multiprocessing's "spawn" method: the test process holds
accl's rendezvous thread (and maybe torch's threads), which a fork would copy mid-state.
Workers are not under pytest's assertion rewriting, so they check with the helpers below,
whose messages say what differed.
"""

from __future__ import annotations

import glob
import multiprocessing as mp
import os
import shutil
import subprocess
import sys
import time
import traceback
from multiprocessing.connection import wait
from typing import Any, Callable

import numpy as np

import accl

CTX = mp.get_context("spawn")
COMM_TIMEOUT = 60.0  # a collective that hangs fails inside accl, naming itself
RUN_TIMEOUT = 100.0  # below pytest's per-test timeout, so the ranks' reports still come back
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Where this run's accl package is (python/, or build-sanitize/python under make test-sanitize):
# the ranks and tools the tests start import the same one.
PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(accl.__file__)))


def shm_segments() -> set[str]:
    return set(glob.glob("/dev/shm/accl*"))


SHM_AT_START = shm_segments()


def _rank_main(fn, uid, rank, size, args, conn, make_comm, comm_timeout, env) -> None:
    try:
        os.environ.update(env)
        if make_comm:
            with accl.Communicator(uid, rank, size, timeout=comm_timeout) as comm:
                result = fn(comm, *args)
        else:
            result = fn(uid, rank, size, *args)
        conn.send(("ok", result))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def run_ranks(
    size: int,
    fn: Callable[..., Any],
    *args: Any,
    make_comm: bool = True,
    comm_timeout: float = COMM_TIMEOUT,
    timeout: float = RUN_TIMEOUT,
    env: dict[str, str] | None = None,
) -> list[Any]:
    """Runs fn(comm, *args) on `size` ranks (fn(uid, rank, size, *args) if not make_comm), with
    `env` added to each rank's environment, and returns each rank's result. The first failure,
    crash or timeout stops the other ranks and fails the test with every report received; a
    clean run must leave no shared memory behind."""
    before = shm_segments()
    uid = accl.get_unique_id()
    procs, conns = [], {}
    for r in range(size):
        recv_end, send_end = CTX.Pipe(duplex=False)
        p = CTX.Process(
            target=_rank_main,
            args=(fn, uid, r, size, args, send_end, make_comm, comm_timeout, env or {}),
            name=f"accl-rank{r}",
        )
        p.start()
        send_end.close()
        procs.append(p)
        conns[recv_end] = r
    results: list[Any] = [None] * size
    errors: list[str] = []
    deadline = time.monotonic() + timeout
    try:
        while conns and not errors:
            ready = wait(list(conns), timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                errors.append(f"timed out after {timeout:g} s; ranks {sorted(conns.values())} "
                              "did not finish")
            for c in ready:
                r = conns.pop(c)
                try:
                    status, value = c.recv()
                except EOFError:
                    procs[r].join(5)
                    status, value = "error", f"died with exit code {procs[r].exitcode}"
                if status == "ok":
                    results[r] = value
                else:
                    errors.append(f"rank {r} of {size}: {value}")
    finally:
        for p in procs:
            p.join(10 if not errors else 0.2)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise AssertionError("\n".join(errors))
    codes = [p.exitcode for p in procs]
    assert codes == [0] * size, f"exit codes {codes}"
    # A segment is named after its creator's pid: only the ranks' own count, so that another
    # job's (a test suite run beside this one) is not taken for a leak.
    pids = {str(p.pid) for p in procs}
    left = {s for s in shm_segments() - before if s.rsplit("-", 1)[-1] in pids}
    assert not left, f"shared memory left behind: {sorted(left)}"
    return results


# ---------------------------------------------------------------- checks usable in workers


def check(cond: bool, message: str) -> None:
    if not cond:
        raise AssertionError(message)


def check_array(got: Any, want: Any, what: str, rtol: float = 0.0) -> None:
    """got equals want elementwise (within rtol if given), with a message naming the first
    difference."""
    g = np.asarray(got).reshape(-1)
    w = np.asarray(want).reshape(-1)
    check(g.shape == w.shape, f"{what}: shape {g.shape}, expected {w.shape}")
    if rtol:
        gf, wf = g.astype(np.float64), w.astype(np.float64)
        bad = np.flatnonzero(np.abs(gf - wf) > rtol * np.abs(wf))
    else:
        bad = np.flatnonzero(g != w)
    if bad.size:
        i = bad[0]
        raise AssertionError(
            f"{what}: {bad.size} of {g.size} elements differ; first at {i}: got {g[i]!r}, "
            f"expected {w[i]!r}"
        )


def expect_raises(exc: type[BaseException], contains: str, fn: Callable, *args, **kw) -> str:
    """fn(*args, **kw) raises exc with `contains` in its message; returns the message."""
    try:
        fn(*args, **kw)
    except exc as e:
        msg = str(e)
        check(contains.lower() in msg.lower(), f"{exc.__name__} message {msg!r} lacks {contains!r}")
        return msg
    except BaseException as e:
        raise AssertionError(f"expected {exc.__name__} ({contains!r}), got {e!r}") from e
    raise AssertionError(f"expected {exc.__name__} ({contains!r}), nothing was raised")


# ---------------------------------------------------------------- subprocess helpers


def free_port() -> int:
    """A port for MASTER_PORT or ACCL_COMM_ID, chosen as accl.launch does: below the kernel's
    ephemeral range, so that no outgoing connection (not even a rank's own early connect to it,
    which can connect to itself) takes it before rank 0 listens."""
    from accl.launch import _free_port

    return _free_port()


# Variables through which some launcher could be recognised; tests start from an env without.
LAUNCH_VARS = (
    "ACCL_UNIQUE_ID", "ACCL_RANK", "ACCL_WORLD_SIZE", "ACCL_LOCAL_RANK", "ACCL_LOCAL_WORLD_SIZE",
    "ACCL_COMM_ID", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE",
    "PMIX_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS", "SLURM_LOCALID",
    "SLURM_JOB_ID", "SLURM_STEP_ID", "SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST",
    "SLURM_NODELIST",
)


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_VARS}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHON_DIR, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def run_cmd(cmd: list[str], timeout: float = RUN_TIMEOUT, **kw: Any) -> subprocess.CompletedProcess:
    kw.setdefault("env", clean_env())
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def launch_cmd(n: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "accl.launch", "-n", str(n), *args]


def which(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.path.dirname(sys.executable),
                                                   os.environ.get("PATH", "")]))
