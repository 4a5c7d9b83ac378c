"""kill -9 of a rank in the middle of a collective on a communicator that spans two "nodes"
(ACCL_HOSTID per rank: TCP between them over loopback): every survivor, on either node, fails
within 5 s with RemoteError naming the dead rank and its host, with the default timeout; the
dead job leaves no shared memory behind, and a new job then runs normally.
Ranks are started directly: a launcher would stop the survivors as soon as one rank dies."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from accl_testing import clean_env, shm_segments

NRANKS = 4
HOSTS = ["node-a", "node-a", "node-b", "node-b"]  # ranks 0, 2 lead their nodes


def worker() -> int:
    import numpy as np

    import accl

    victim = int(os.environ["VICTIM"])
    comm = accl.init()  # the default timeout (600 s): only the dead peer may end the wait
    x = np.ones(1 << 20, np.float32)
    comm.all_reduce(x)  # every connection is up
    if comm.rank == victim:
        time.sleep(0.5)  # the others are inside the next all-reduce by then
        os.kill(os.getpid(), 9)
    start = time.monotonic()
    try:
        comm.all_reduce(x)
    except accl.AcclError as e:
        print(f"ERROR {type(e).__name__} {time.monotonic() - start:.2f} {e}", flush=True)
        comm.abort()
        return 0
    if victim >= 0:
        print("no error", flush=True)
        return 1
    comm.destroy()
    return 0


def run_job(victim: int) -> tuple[list[subprocess.Popen], list[str]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen(
        [sys.executable, __file__], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env=clean_env(RANK=str(r), WORLD_SIZE=str(NRANKS), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), ACCL_HOSTID=HOSTS[r], VICTIM=str(victim),
                      ACCL_SOCKET_IFNAME="lo"))
        for r in range(NRANKS)]
    try:
        outs = [p.communicate(timeout=60)[0] for p in procs]
    finally:
        for p in procs:
            p.kill()
    return procs, outs


@pytest.mark.parametrize("victim", [1, 2, 3])
def test_dead_peer_across_nodes_is_named_within_5_seconds(victim):
    before = shm_segments()
    procs, outs = run_job(victim)
    assert procs[victim].returncode == -9, outs[victim]
    for r in range(NRANKS):
        if r == victim:
            continue
        assert procs[r].returncode == 0, f"rank {r}: exit {procs[r].returncode}\n{outs[r]}"
        line = next((ln for ln in outs[r].splitlines() if ln.startswith("ERROR")), outs[r])
        _, cls, secs, msg = (line.split(" ", 3) + ["", "", ""])[:4]
        assert cls == "RemoteError", f"rank {r}: {line}"
        assert float(secs) < 5.0, f"rank {r}: {line}"
        # The host as the machine names itself (all "nodes" here are one machine).
        assert f"rank {victim}" in msg and socket.gethostname() in msg, f"rank {r}: {line}"
    assert shm_segments() <= before, f"left behind: {shm_segments() - before}"
    procs, outs = run_job(-1)  # the next job, on the same ports range and /dev/shm
    assert [p.returncode for p in procs] == [0] * NRANKS, outs


if __name__ == "__main__":
    raise SystemExit(worker())
