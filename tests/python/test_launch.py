"""python -m accl.launch: environment, prefixed output, failure handling; accl.init() under it."""

import os
import signal
import subprocess
import sys
import time

from accl_testing import clean_env, launch_cmd, run_cmd

SCRIPT_ENV = r"""
import os, sys
keys = ["ACCL_RANK", "ACCL_WORLD_SIZE", "ACCL_LOCAL_RANK", "ACCL_LOCAL_WORLD_SIZE", "RANK",
        "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"]
print(" ".join(f"{k}={os.environ[k]}" for k in keys))
print("uid", len(bytes.fromhex(os.environ["ACCL_UNIQUE_ID"])), os.environ["ACCL_UNIQUE_ID"][:16])
print("err line", file=sys.stderr)
print("partial", end="")
"""


def test_environment_and_prefixed_output():
    p = run_cmd(launch_cmd(3, sys.executable, "-c", SCRIPT_ENV))
    assert p.returncode == 0, p.stderr
    out = p.stdout.splitlines()
    assert len(out) == 9 and all(line[:4] in ("[0] ", "[1] ", "[2] ") for line in out), out
    ports, uids = set(), set()
    for r in range(3):
        mine = [line[4:] for line in out if line.startswith(f"[{r}] ")]
        env = dict(kv.split("=") for kv in mine[0].split())
        assert env == {
            "ACCL_RANK": str(r), "ACCL_WORLD_SIZE": "3", "ACCL_LOCAL_RANK": str(r),
            "ACCL_LOCAL_WORLD_SIZE": "3", "RANK": str(r), "WORLD_SIZE": "3",
            "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "3", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": env["MASTER_PORT"],
        }
        ports.add(env["MASTER_PORT"])
        assert mine[1].startswith("uid 128 ")
        uids.add(mine[1])
        assert mine[2] == "partial"  # a last line without newline still arrives, terminated
    assert len(ports) == 1 and len(uids) == 1
    assert sorted(p.stderr.splitlines()) == ["[0] err line", "[1] err line", "[2] err line"]


SCRIPT_FAIL = r"""
import os, sys, time
rank = int(os.environ["RANK"])
print("pid", os.getpid(), flush=True)
if rank == 1:
    time.sleep(0.5)
    print("rank 1 fails", file=sys.stderr)
    sys.exit(3)
time.sleep(120)
"""


def test_a_failing_rank_stops_the_others():
    t0 = time.monotonic()
    p = run_cmd(launch_cmd(3, sys.executable, "-c", SCRIPT_FAIL), timeout=60)
    took = time.monotonic() - t0
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert took < 30, f"the launcher took {took:.0f} s to stop the other ranks"
    assert "[1] rank 1 fails" in p.stderr and "rank 1 exited with status 3" in p.stderr
    pids = [int(line.split()[-1]) for line in p.stdout.splitlines() if " pid " in line]
    assert len(pids) == 3
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        raise AssertionError(f"rank process {pid} is still running")


def test_a_rank_killed_by_a_signal():
    code = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    p = run_cmd(launch_cmd(2, sys.executable, "-c", code), timeout=60)
    assert p.returncode == 128 + signal.SIGKILL, p.stderr


def test_timeout_stops_the_ranks():
    p = run_cmd(launch_cmd(2, "--timeout", "1", sys.executable, "-c",
                           "import time; time.sleep(60)"), timeout=60)
    assert p.returncode == 124 and "timed out" in p.stderr, p.stderr


def test_sigterm_is_forwarded():
    cmd = launch_cmd(2, sys.executable, "-c",
                     "import time; print('up', flush=True); time.sleep(60)")
    proc = subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().endswith("up\n")
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM, err


def test_missing_program():
    p = run_cmd(launch_cmd(2, "/nonexistent/program"), timeout=60)
    assert p.returncode == 127 and "cannot start" in p.stderr


SCRIPT_INIT = r"""
import numpy as np
import accl
info = accl.rank_info()
comm = accl.init(timeout=60)
assert (comm.rank, comm.size) == (info.rank, info.size) and info.source == "accl", info
x = np.full(4, comm.rank + 1.0)
comm.all_reduce(x)
sub = comm.split(comm.rank % 2)
y = np.ones(2)
sub.all_reduce(y)
print("ok", comm.rank, comm.size, x[0], sub.size, y[0])
sub.destroy()
comm.destroy()
try:
    accl.init(timeout=60)
except accl.InvalidUsageError as e:
    assert "comm.split()" in str(e), e
else:
    raise AssertionError("a second init() under accl.launch would wait for the timeout")
"""


def test_init_under_the_launcher(tmp_path):
    script = tmp_path / "init_script.py"  # a .py program runs under the launcher's Python
    script.write_text(SCRIPT_INIT)
    p = run_cmd(launch_cmd(4, str(script)))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(p.stdout.splitlines())
    assert lines == [f"[{r}] ok {r} 4 10.0 2 2.0" for r in range(4)], lines


def _affinities(*args: str) -> dict[int, list[int]]:
    script = "import os; print(sorted(os.sched_getaffinity(0)))"
    p = run_cmd([sys.executable, "-m", "accl.launch", *args, sys.executable, "-c", script])
    assert p.returncode == 0, p.stderr
    return {int(line[1:line.index("]")]): eval(line[line.index("] ") + 2:])
            for line in p.stdout.splitlines()}


def test_ranks_are_bound_to_shares_of_the_cpus():
    cpus = sorted(os.sched_getaffinity(0))
    n = min(2, len(cpus))
    got = _affinities("-n", str(n))
    want = {r: cpus[r * len(cpus) // n:(r + 1) * len(cpus) // n] for r in range(n)}
    assert got == want
    # More ranks than CPUs: one CPU each, neighbours together (3 ranks on 2 CPUs: 0, 0, 1).
    n = len(cpus) + 1
    assert _affinities("-n", str(n)) == {r: [cpus[r * len(cpus) // n]] for r in range(n)}
    # --bind none: the scheduler places them.
    assert _affinities("--bind", "none", "-n", str(n)) == {r: cpus for r in range(n)}
