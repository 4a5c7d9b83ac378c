"""Backend plugins: python -m accl.info, the conformance suite on cpu, mpi and the example
plugin, the mpi plugin's own MPI set-up and errors, and the example built out of tree against
the installed CMake package."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import accl
from accl.conformance import COLLECTIVES
from accl.info import backend_info
from accl_testing import REPO, check, clean_env, free_port, run_cmd, run_ranks, which

PLUGIN_SCRIPT = os.path.join(REPO, "tests", "plugins", "mpi_ranks.py")


def conformance(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return run_cmd([sys.executable, "-m", "accl.conformance", "--timeout", "15", *args],
                   timeout=timeout)


def summary(p: subprocess.CompletedProcess) -> str:
    lines = p.stdout.strip().splitlines()
    return lines[-1] if lines else ""


def table_rows(p: subprocess.CompletedProcess) -> list[list[str]]:
    """The rows of the conformance table: [collective, dtype, cell per rank count...]."""
    return [row for row in map(str.split, p.stdout.splitlines()) if row[:1] in
            [[c] for c in COLLECTIVES]]


def require_mpi_plugin() -> None:
    info = backend_info("mpi")
    if not info.available:
        pytest.skip(f"the mpi plugin is not available: {info.path.splitlines()[0]}")


def mpirun_cmd(n: int) -> list[str]:
    mpirun = which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun is not installed")
    cmd = [mpirun, "-n", str(n), "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    return cmd


# ---------------------------------------------------------------- python -m accl.info


def test_info_lists_backends_versions_and_environment():
    env = clean_env(ACCL_DEBUG="WARN", ACCL_COMM_SECRET="s3cret")
    p = run_cmd([sys.executable, "-m", "accl.info"], env=env, timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    assert f"accl {accl.__version__}" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert rows["cpu"].split()[1] == accl.__version__, out
    assert "built into libaccl" in rows["cpu"], out
    for vendor in ("nccl", "rccl", "pccl"):  # listed even when absent, with the reason
        assert vendor in rows, out
        assert "unavailable: " in rows[vendor] or ".so" in rows[vendor], out
    assert "ACCL_DEBUG=WARN" in out and "ACCL_COMM_SECRET=(hidden)" in out, out
    # The preflight: /dev/shm, file limits and interfaces, each OK or WARN with the reason.
    checks = [line.split(None, 2) for line in out.split("preflight:\n")[1].split("environment:")[0]
              .splitlines()]
    assert [c[1] for c in checks] == ["/dev/shm", "open", "locked", "interfaces"], out
    assert all(c[0] in ("OK", "WARN") for c in checks), out
    assert "s3cret" not in out


def test_preflight_warns_about_a_missing_interface():
    env = clean_env(ACCL_SOCKET_IFNAME="nosuchif")
    p = run_cmd([sys.executable, "-m", "accl.info"], env=env, timeout=60)
    assert "WARN interfaces     ACCL_SOCKET_IFNAME=nosuchif matches none of" in p.stdout, p.stdout


# ---------------------------------------------------------------- the conformance suite


def test_conformance_cpu_passes_everything():
    p = conformance("--backend", "cpu", "-n", "1,2,3")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " 0 unsupported, 0 failed, 0 not run" in summary(p), summary(p)


def test_conformance_mpi():
    require_mpi_plugin()
    mpirun_cmd(1)
    p = conformance("--backend", "mpi", "-n", "1,2,3")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert " 0 failed, 0 not run" in summary(p), summary(p)
    # MPI has no 8-bit float type: only fp8 reductions may be unsupported.
    if "unsupported (cases: reason):" in p.stdout:
        reasons = p.stdout.split("unsupported (cases: reason):")[1].split("\n\n")[0]
        for line in reasons.strip().splitlines():
            assert "float8" in line, p.stdout


def test_conformance_reports_a_failure(tmp_path):
    # The suite must catch a wrong plugin: here the example, whose send/recv flips a bit.
    src = os.path.join(REPO, "backends", "example", "example_backend.c")
    cc = which("cc") or which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    with open(src) as f:
        code = f.read()
    good = "memmove(recvs[i].buf, sends[i].buf, sends[i].bytes);"
    assert good in code
    broken = tmp_path / "broken.c"
    broken.write_text(code.replace(good, good + " recvs[i].buf[0] ^= 1;"))
    lib = tmp_path / "libaccl-backend-example.so"
    subprocess.run([cc, "-shared", "-fPIC", "-std=c11", "-I", os.path.join(REPO, "csrc", "include"),
                    str(broken), "-o", str(lib)], check=True)
    p = conformance("--backend", "example", "--plugin", str(lib), "-n", "1",
                    "--collectives", "send_recv,all_reduce", "--dtypes", "int32", timeout=60)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "send_recv int32 - count=13 ranks=1: rank 0: 1 of 13 elements differ" in p.stdout
    assert "all_reduce" not in p.stdout.split("failures")[-1]


# ---------------------------------------------------------------- the mpi plugin


def test_mpi_plugin_initialises_and_finalises_mpi_itself():
    require_mpi_plugin()
    cmd = mpirun_cmd(2) + ["-x", "ACCL_COMM_ID", "-x", "ACCL_COMM_SECRET", "-x", "PYTHONPATH"]
    env = clean_env(ACCL_COMM_ID=f"127.0.0.1:{free_port()}", ACCL_COMM_SECRET="plugin-test")
    p = run_cmd(cmd + [sys.executable, PLUGIN_SCRIPT, "own-init"], env=env, timeout=90)
    # mpirun fails the job when a rank that initialised MPI exits without MPI_Finalize.
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if line[:1].isdigit())
    assert lines == ["0 3 1 False", "1 3 0 False"], p.stdout + p.stderr


def test_mpi_plugin_reports_mismatch_and_timeout():
    require_mpi_plugin()
    p = run_cmd(mpirun_cmd(2) + [sys.executable, PLUGIN_SCRIPT, "errors"], timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if line[:1].isdigit())
    assert lines == ["0 no-error timeout", "1 remote"], p.stdout + p.stderr


def _mpi_without_mpirun(uid: bytes, rank: int, size: int) -> str:
    try:
        accl.Communicator(uid, rank, size, timeout=30, backend="mpi")
    except accl.InvalidUsageError as e:
        return str(e)
    raise AssertionError("ranks outside one MPI job made an mpi communicator")


def test_mpi_plugin_refuses_ranks_outside_one_mpi_job():
    require_mpi_plugin()
    # Each rank is an MPI singleton. Open MPI 5 leaves a singleton's shared-memory segment in
    # /dev/shm; a singleton needs only the self transport.
    env = {"OMPI_MCA_btl": "self"}
    for msg in run_ranks(2, _mpi_without_mpirun, make_comm=False, env=env):
        check("not one MPI job" in msg and "mpirun" in msg, msg)


# ---------------------------------------------------------------- the example plugin, out of tree


def test_example_plugin_builds_out_of_tree_and_conforms(tmp_path):
    build = os.environ.get("ACCL_BUILD_DIR", os.path.join(REPO, "build"))
    cmake = which("cmake")
    if cmake is None or not os.path.exists(os.path.join(build, "acclConfig.cmake")):
        pytest.skip(f"needs cmake and the tree configured and built in {build} (make build)")
    prefix, example = tmp_path / "prefix", tmp_path / "example"
    steps = [
        [cmake, "--install", build, "--prefix", str(prefix)],
        [cmake, "-S", os.path.join(REPO, "backends", "example"), "-B", str(example),
         f"-DCMAKE_PREFIX_PATH={prefix}"],
        [cmake, "--build", str(example)],
    ]
    for step in steps:
        p = run_cmd(step, timeout=120)
        assert p.returncode == 0, f"{' '.join(step)}:\n{p.stdout}\n{p.stderr}"
    lib = example / "libaccl-backend-example.so"
    assert lib.exists()
    # Loaded by path, through the plugin ABI alone.
    p = conformance("--backend", "example", "--plugin", str(lib), "-n", "1,2")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    rows = table_rows(p)
    assert len(rows) == 12 * 9 + 1, p.stdout
    assert all(r[2:] == ["pass", "unsupported"] for r in rows), p.stdout
    assert "supports communicators of 1 rank only, not 2" in p.stdout
    p = run_cmd([sys.executable, "-m", "accl.info"],
                env=clean_env(ACCL_BACKEND_PLUGIN=str(lib)), timeout=60)
    assert f"example    1.0.0              {lib}" in p.stdout, p.stdout
