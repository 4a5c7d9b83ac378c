"""Starts N local ranks of a program: python -m accl.launch -n 4 python my_script.py [args...]

This process creates the communicator's unique id and hosts its rendezvous, so it stays alive
until the ranks finish. Each rank gets ACCL_UNIQUE_ID, ACCL_RANK, ACCL_WORLD_SIZE,
ACCL_LOCAL_RANK and ACCL_LOCAL_WORLD_SIZE (read by accl.init()), and also RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT (a free port) so that torch scripts
run unchanged. A program ending in .py runs under this Python.

Every output line of rank r is prefixed with "[r] ", on the stream it was written to. If a rank
fails, the others get SIGTERM, then SIGKILL after a grace period, and the launcher exits with
the failed rank's status (128 + N for a rank killed by signal N). --timeout S stops all ranks
after S seconds and exits 124. SIGINT and SIGTERM are forwarded to the ranks.

With no more ranks than CPUs this process may use, rank r is bound to the r-th of N equal shares
of them (as mpirun binds ranks by default): two ranks that poll shared memory, put on one CPU by
the scheduler, would each spin away the time the other needs. A share holds every CPU a rank's
threads may use (4 ranks on 64 CPUs: 16 each). With more ranks than CPUs each rank gets one CPU,
neighbouring ranks the same one (4 ranks on 2 CPUs: 0, 0, 1, 1): left to the scheduler, some
launches ran three ranks on one CPU and one on the other for hundreds of milliseconds, and a
4-rank send/recv of 256 KiB took twice as long there. --bind none leaves placement to the
scheduler.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import IO

from . import _accl

GRACE_S = 5.0
POLL_S = 0.05


def _free_port() -> int:
    """A port for MASTER_PORT that is free now and stays free: one below the kernel's ephemeral
    range, so no outgoing connection can be given it before rank 0 listens on it."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # everything below the range is taken: let the kernel pick
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pump(src: IO[bytes], dst: IO[bytes], prefix: bytes, lock: threading.Lock) -> None:
    writing = True
    for line in iter(src.readline, b""):
        if not line.endswith(b"\n"):
            line += b"\n"
        if writing:
            with lock:
                try:
                    dst.write(prefix + line)
                    dst.flush()
                except OSError:  # our reader went away (| head): keep draining, or the rank blocks
                    writing = False
    src.close()


def _status(code: int) -> int:
    return code if code >= 0 else 128 - code


def shares(n: int) -> list[set[int]]:
    """The CPUs for each of n ranks: equal, contiguous shares of this process's; with more ranks
    than CPUs, one CPU each, neighbouring ranks on the same one."""
    cpus = sorted(os.sched_getaffinity(0))
    if n > len(cpus):
        return [{cpus[r * len(cpus) // n]} for r in range(n)]
    return [set(cpus[r * len(cpus) // n:(r + 1) * len(cpus) // n]) for r in range(n)]


class _Ranks:
    def __init__(self, cmd: list[str], n: int, uid: bytes, bind: bool) -> None:
        port = str(_free_port())
        self.procs: list[subprocess.Popen[bytes]] = []
        self.pumps: list[threading.Thread] = []
        self.shares = shares(n) if bind else None
        try:
            self._start(cmd, n, uid, port)
        except BaseException:
            self.stop()  # the ranks already started would wait for the missing ones
            raise

    def _start(self, cmd: list[str], n: int, uid: bytes, port: str) -> None:
        out_lock, err_lock = threading.Lock(), threading.Lock()
        for r in range(n):
            env = dict(os.environ)
            env.update(
                ACCL_UNIQUE_ID=uid.hex(),
                ACCL_RANK=str(r),
                ACCL_WORLD_SIZE=str(n),
                ACCL_LOCAL_RANK=str(r),
                ACCL_LOCAL_WORLD_SIZE=str(n),
                RANK=str(r),
                WORLD_SIZE=str(n),
                LOCAL_RANK=str(r),
                LOCAL_WORLD_SIZE=str(n),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=port,
            )
            # Without it a Python rank block-buffers its piped output and lines arrive late.
            env.setdefault("PYTHONUNBUFFERED", "1")
            # Own process group: a failure or Ctrl-C stops the rank's whole process tree.
            p = subprocess.Popen(
                cmd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            self.procs.append(p)
            if self.shares:
                os.sched_setaffinity(p.pid, self.shares[r])  # its threads inherit it
            prefix = f"[{r}] ".encode()
            for src, dst, lock in (
                (p.stdout, sys.stdout.buffer, out_lock),
                (p.stderr, sys.stderr.buffer, err_lock),
            ):
                th = threading.Thread(target=_pump, args=(src, dst, prefix, lock), daemon=True)
                th.start()
                self.pumps.append(th)

    def send_signal(self, sig: int) -> None:
        for p in self.procs:
            # Only while the rank is unreaped: after that its pid (the group id) may be reused.
            if p.poll() is None:
                try:
                    os.killpg(p.pid, sig)
                except ProcessLookupError:
                    pass

    def stop(self, first: int = signal.SIGTERM) -> None:
        """Sends `first`, then SIGKILL to the ranks still running after the grace period."""
        self.send_signal(first)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(p.poll() is None for p in self.procs):
            time.sleep(POLL_S)
        self.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()

    def finish(self) -> None:
        # A rank's leftover background process may hold its pipes open: do not wait forever.
        deadline = time.monotonic() + GRACE_S
        for th in self.pumps:
            th.join(max(0.0, deadline - time.monotonic()))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m accl.launch", description="Start N local ranks of a program."
    )
    ap.add_argument("-n", "--nproc", type=int, required=True, help="number of ranks")
    ap.add_argument(
        "--timeout", type=float, default=None, help="stop every rank after this many seconds"
    )
    ap.add_argument(
        "--bind", choices=("share", "none"), default="share",
        help="share: bind rank r to the r-th equal share of the CPUs when there are at least as "
        "many CPUs as ranks (default); none: leave placement to the scheduler",
    )
    ap.add_argument("prog", help="program to run (a .py file runs under this Python)")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="its arguments")
    ns = ap.parse_args(argv)
    if ns.nproc < 1:
        ap.error("-n must be at least 1")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    cmd = [ns.prog, *ns.args]
    if ns.prog.endswith(".py"):
        cmd.insert(0, sys.executable)

    received: list[int] = []

    def on_signal(sig: int, _frame: object) -> None:
        received.append(sig)  # acted on by the supervising loop, never mid-startup

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            ranks = _Ranks(cmd, ns.nproc, _accl.get_unique_id(), ns.bind == "share")
        except OSError as e:
            _say(f"cannot start {ns.prog}: {e}")
            return 127
        try:
            return _supervise(ranks, ns.timeout, received)
        finally:
            ranks.finish()
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _supervise(ranks: _Ranks, timeout: float | None, received: list[int]) -> int:
    """Waits for the ranks; stops them all on a signal, a failed rank or the timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if received:
            ranks.stop(first=received[0])
            return 128 + received[0]
        failed = [(r, p.returncode) for r, p in enumerate(ranks.procs) if p.poll()]
        if failed:
            r, code = failed[0]
            _say(f"rank {r} exited with status {_status(code)}; stopping the other ranks")
            ranks.stop()
            return _status(code)
        if all(p.returncode is not None for p in ranks.procs):
            return 0
        if deadline is not None and time.monotonic() > deadline:
            _say(f"timed out after {timeout:g} s; stopping the ranks")
            ranks.stop()
            return 124
        time.sleep(POLL_S)


def _say(message: str) -> None:
    print(f"accl.launch: {message}", file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
