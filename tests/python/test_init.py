"""accl.init() under each launcher it recognises, and rank_info()'s reading of the environment."""

import importlib.util
import subprocess
import sys

import pytest

from accl import _env
from accl_testing import clean_env, free_port, run_cmd, which

# init() twice in a row: the second id must not be confused with the first.
SCRIPT = r"""
import numpy as np, accl
info = accl.rank_info()
for attempt in range(2):
    comm = accl.init(timeout=60)
    assert (comm.rank, comm.size) == (info.rank, info.size), (comm, info)
    x = np.full(3, comm.rank + 1.0)
    comm.all_reduce(x)
    comm.destroy()
print("ok", info.source, info.rank, info.size, info.local_rank, x[0])
"""

HAVE_TORCH = importlib.util.find_spec("torch") is not None


def run_each(envs, script=SCRIPT, timeout=120):
    """Starts one `python -c script` per environment and returns their outputs, in order."""
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for env in envs]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append((p.returncode, out, err))
    finally:
        for p in procs:
            p.kill()
            p.wait()
    for code, out, err in results:
        assert code == 0, out + err
    return [out.strip() for _, out, _ in results]


def expected(source, n, local=None):
    total = n * (n + 1) / 2
    return [f"ok {source} {r} {n} {r if local is None else local[r]} {total}" for r in range(n)]


@pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")
def test_torch_env_without_agent():
    """RANK/WORLD_SIZE/MASTER_*: rank 0 hosts a TCPStore, as torch's env:// does."""
    port = str(free_port())
    envs = [clean_env(RANK=str(r), WORLD_SIZE="2", LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=port) for r in range(2)]
    assert run_each(envs) == expected("torchrun", 2)


@pytest.mark.skipif(not HAVE_TORCH or which("torchrun") is None, reason="torchrun is not installed")
def test_torchrun():
    script = SCRIPT.replace("print(", "print('agent' if __import__('os').environ.get("
                            "'TORCHELASTIC_USE_AGENT_STORE') == 'True' else 'own', ")
    p = run_cmd([which("torchrun"), "--standalone", "--nproc-per-node", "2", "--no-python",
                 sys.executable, "-c", script], timeout=150)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = sorted(line for line in p.stdout.splitlines() if " ok " in line)
    # torchrun's agent hosts the store that the ranks share the id through.
    assert lines == ["agent " + line for line in expected("torchrun", 2)], p.stdout


def test_slurm_uses_accl_comm_id():
    port = str(free_port())
    envs = [clean_env(SLURM_PROCID=str(r), SLURM_STEP_NUM_TASKS="3", SLURM_NTASKS="3",
                      SLURM_LOCALID=str(2 - r), SLURM_JOB_ID="4242", SLURM_STEP_ID="0",
                      SLURM_STEP_NODELIST="localhost", MASTER_PORT=port) for r in range(3)]
    script = SCRIPT + "import os; assert os.environ['ACCL_COMM_ID'] == 'localhost:" + port + "'\n"
    assert run_each(envs, script) == expected("slurm", 3, [2, 1, 0])


def test_mpi_env_without_mpi4py(tmp_path):
    """Open MPI's variables but no mpi4py: rank 0 hosts the rendezvous at ACCL_COMM_ID."""
    fake = tmp_path / "mpi4py"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('mpi4py hidden by the test')\n")
    port = str(free_port())
    envs = []
    for r in range(2):
        env = clean_env(OMPI_COMM_WORLD_RANK=str(r), OMPI_COMM_WORLD_SIZE="2",
                        OMPI_COMM_WORLD_LOCAL_RANK=str(r), OMPI_COMM_WORLD_LOCAL_SIZE="2",
                        MASTER_PORT=port)
        env["PYTHONPATH"] = f"{tmp_path}:{env['PYTHONPATH']}"
        envs.append(env)
    script = SCRIPT + "import os; assert os.environ['ACCL_COMM_ID'] == '127.0.0.1:" + port + "'\n"
    assert run_each(envs, script) == expected("mpi", 2)


def test_no_launcher_gives_one_rank():
    assert run_each([clean_env()]) == expected("single", 1)


# ---------------------------------------------------------------- rank_info, in this process


@pytest.mark.parametrize("env,info", [
    ({}, (0, 1, 0, "single")),
    ({"ACCL_UNIQUE_ID": "00", "ACCL_RANK": "2", "ACCL_WORLD_SIZE": "4", "ACCL_LOCAL_RANK": "0",
      "RANK": "9", "WORLD_SIZE": "9"}, (2, 4, 0, "accl")),
    ({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "OMPI_COMM_WORLD_RANK": "0"},
     (3, 8, 1, "torchrun")),
    ({"RANK": "3", "WORLD_SIZE": "8"}, (3, 8, 3, "torchrun")),
    ({"RANK": "3"}, (0, 1, 0, "single")),  # a stray RANK alone is no launch
    ({"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "6", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
      "PMIX_RANK": "5", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "1"}, (5, 6, 1, "mpi")),
    ({"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1"}, (1, 2, 1, "mpi")),
    ({"PMIX_RANK": "2", "SLURM_STEP_NUM_TASKS": "3", "SLURM_LOCALID": "0"}, (2, 3, 0, "mpi")),
    ({"SLURM_PROCID": "7", "SLURM_STEP_NUM_TASKS": "8", "SLURM_NTASKS": "8", "SLURM_LOCALID": "3"},
     (7, 8, 3, "slurm")),
    # An sbatch script outside srun: Slurm's variables, but no job step to join.
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "8"}, (0, 1, 0, "single")),
])
def test_rank_info(env, info):
    assert tuple(_env.rank_info(env)) == info


def test_rank_info_reports_a_missing_variable():
    import accl

    with pytest.raises(accl.InvalidUsageError, match="ACCL_WORLD_SIZE is not set"):
        _env.rank_info({"ACCL_UNIQUE_ID": "00", "ACCL_RANK": "0"})
    with pytest.raises(accl.InvalidUsageError, match="not an integer"):
        _env.rank_info({"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(accl.InvalidUsageError, match="PMI_SIZE is not set"):
        _env.rank_info({"PMI_RANK": "0"})


@pytest.mark.parametrize("nodelist,host", [
    ("node07", "node07"), ("a1,b2", "a1"), ("node[07-09,12],gpu1", "node07"),
    ("gpu[3,5]", "gpu3"), ("host-a[001-004]", "host-a001"),
])
def test_first_slurm_host(nodelist, host):
    assert _env._first_host(nodelist) == host
