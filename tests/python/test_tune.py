"""The tuning file (ACCL_TUNING_FILE) and accl-tune, which writes one; ranks that disagree on a
setting that chooses algorithms fail at creation."""

from __future__ import annotations

import json
import os
import re
import sys

import numpy as np
import pytest
from accl_testing import check_array, clean_env, expect_raises, launch_cmd, run_cmd, run_ranks

import accl
from accl import tune


def _sum(comm):
    x = np.arange(64 << 10, dtype=np.float32) + comm.rank  # 256 KiB: single copy by default
    n = comm.size
    check_array(comm.all_reduce(x), np.arange(64 << 10, dtype=np.float32) * n + n * (n - 1) // 2,
                "all_reduce")
    return True


def _make(uid, rank, size, env):
    import os

    os.environ.update(env[rank])
    return expect_raises(accl.AcclError, env[rank].get("EXPECT", ""), accl.Communicator, uid,
                         rank, size, 20)


def test_file_sets_what_the_environment_does_not(tmp_path):
    f = tmp_path / "tuning.conf"
    # A file that breaks every communicator shows it is read; the environment overrides it.
    f.write_text("# comment\n\nACCL_ALGO = allreduce:bogus\n")
    env = {"ACCL_TUNING_FILE": str(f)}
    msgs = run_ranks(2, _make, [dict(env, EXPECT="unknown item 'allreduce:bogus'")] * 2,
                     make_comm=False)
    assert all("ACCL_ALGO=allreduce:bogus" in m for m in msgs), msgs
    assert run_ranks(2, _sum, env=dict(env, ACCL_ALGO="allreduce:split")) == [True, True]
    # With a byte-order mark, CRLF line ends and blanks around the names and values.
    f.write_bytes(b"\xef\xbb\xbfACCL_CMA_MIN = allreduce:1, allgather:64 \r\n"
                  b"\r\n  ACCL_ALLREDUCE_DIRECT_MAX=0\r\n")
    assert run_ranks(2, _sum, env=env) == [True, True]


@pytest.mark.parametrize("text,error", [
    ("ACCL_CMA_MIN=-1\nACCL_NO_SUCH=1\n", "line 2: 'ACCL_NO_SUCH=1' is not NAME=VALUE for a var"),
    ("ACCL_CMA_MIN=-1\n ACCL_CMA_MIN = 0\n", "line 2: 'ACCL_CMA_MIN = 0' sets a variable an "),
    ("ACCL_TUNING_FILE=/x\n", "line 1: 'ACCL_TUNING_FILE=/x' is not NAME=VALUE"),
])
def test_bad_file_fails_the_communicator(tmp_path, text, error):
    f = tmp_path / "tuning.conf"
    f.write_text(text)
    env = {"ACCL_TUNING_FILE": str(f), "EXPECT": f"tuning file {f}, {error}"}
    run_ranks(2, _make, [env] * 2, make_comm=False)


@pytest.mark.parametrize("where,error", [("missing", "No such file"), (".", "not a regular")])
def test_unreadable_file_fails_the_communicator(tmp_path, where, error):
    path = tmp_path / where
    env = {"ACCL_TUNING_FILE": str(path), "EXPECT": f"cannot read the tuning file {path}: {error}"}
    run_ranks(2, _make, [env] * 2, make_comm=False)


def _crossovers(n, cma_min):
    """The single-copy crossovers n ranks' communicators report (ACCL_DEBUG=INFO)."""
    env = clean_env(ACCL_TUNING_FILE="none", ACCL_DEBUG="INFO", ACCL_DEBUG_SUBSYS="SHM",
                    **({"ACCL_CMA_MIN": cma_min} if cma_min else {}))
    r = run_cmd(launch_cmd(n, sys.executable, "-c", "from accl._env import init; init()"), env=env)
    assert r.returncode == 0, r.stderr
    if "single copy from (bytes): none" in r.stderr:
        pytest.skip("cross-memory attach is not possible between processes here")
    found = re.findall(r"single copy from \(bytes\): (.*)", r.stderr)
    assert len(found) == n and len(set(found)) == 1, r.stderr
    return found[0]


def test_cma_min_item_minus_one_means_never():
    # -1 for one collective turns its single copy off and leaves the others' crossovers as set.
    many = os.sysconf("SC_NPROCESSORS_ONLN") < 2  # more ranks than cores: the other table
    assert _crossovers(2, "broadcast:-1,allgather:4096,sendrecv:-1") == (
        f"allreduce {131072 if many else 32768}, allgather 4096, reducescatter 16384, "
        f"broadcast never, reduce {32768 if many else 65536}, "
        f"alltoall {32768 if many else 16384}, gather 32768, "
        f"scatter {32768 if many else 65536}, sendrecv never")


def test_more_ranks_than_cores_single_copy_from_other_sizes():
    n = os.sysconf("SC_NPROCESSORS_ONLN") + 1
    if n > 9:
        pytest.skip(f"{n} ranks, one more than this machine's cores, are too many to start here")
    assert _crossovers(n, None) == (
        "allreduce 131072, allgather 65536, reducescatter 16384, broadcast 131072, "
        "reduce 32768, alltoall 32768, gather 32768, scatter 32768, sendrecv 32768")


@pytest.mark.parametrize("value", ["allreduce:x", "allreduce", "ring:1", "-2", "broadcast:-2"])
def test_bad_cma_min_is_named(value):
    env = {"ACCL_CMA_MIN": value, "EXPECT": f"ACCL_CMA_MIN={value}: "}
    run_ranks(2, _make, [env] * 2, make_comm=False)


def test_ranks_that_disagree_fail_naming_the_setting(tmp_path):
    f = tmp_path / "tuning.conf"
    f.write_text("ACCL_CMA_MIN=-1\n")
    # Single copy on or off: every rank.
    want = ("ranks disagree on a setting that every rank must share: rank 0 has ACCL_CMA_MIN "
            "other than -1, rank 1 has ACCL_CMA_MIN=-1")
    run_ranks(2, _make, [{"EXPECT": want}, {"ACCL_TUNING_FILE": str(f), "EXPECT": want}],
              make_comm=False)
    # What shapes a node's shared memory: the ranks of a node.
    want = ("ranks disagree on a setting that the ranks of a node must share: rank 0 has "
            "ACCL_ALLREDUCE_DIRECT_MAX=16384, rank 2 has ACCL_ALLREDUCE_DIRECT_MAX=0")
    envs = [{"EXPECT": want}] * 2 + [{"ACCL_ALLREDUCE_DIRECT_MAX": "0", "EXPECT": want}]
    run_ranks(3, _make, envs, make_comm=False)


def _two_nodes(uid, rank, size):
    import os

    # Nodes may differ (each its own accl-tune file): node1 has other thresholds and slots.
    os.environ["ACCL_HOSTID"] = f"node{rank // 2}"
    if rank >= 2:
        os.environ.update(ACCL_CMA_MIN="allreduce:1", ACCL_ALLREDUCE_DIRECT_MAX="0",
                          ACCL_SHM_SLOT_BYTES="65536")
    with accl.Communicator(uid, rank, size, 30) as comm:
        return _sum(comm)


def test_nodes_may_differ_in_node_settings():
    assert run_ranks(4, _two_nodes, make_comm=False) == [True] * 4


def test_crossover_rule():
    sizes = [1, 2, 4, 8, 16]
    assert tune.crossover(sizes, [1] * 5, [0.5] * 5) == 1
    assert tune.crossover(sizes, [1] * 5, [2] * 5) == 32
    # One noisy point above the crossover does not move it.
    assert tune.crossover(sizes, [1] * 5, [2, 2, 0.5, 0.5, 1.1]) == 4


def test_accl_tune_writes_a_file_later_runs_read(tmp_path):
    out = tmp_path / "t.conf"
    out.write_text("# mine\nACCL_SPIN_US=10\nACCL_CMA_MIN=-1\n")  # one line stays, one goes
    p = run_cmd([sys.executable, "-m", "accl.tune", "-np", "2", "-o", str(out), "--sizes",
                 "4K,64K", "--rounds", "1", "--seconds", "0", "-n", "2"], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]
    names = [ln.split("=", 1)[0] for ln in lines]
    assert names == ["ACCL_ALLREDUCE_DIRECT_MAX", "ACCL_CMA_MIN", "ACCL_SPIN_US"], lines
    assert "# mine" in out.read_text()
    items = dict(i.split(":") for i in lines[1].split("=", 1)[1].split(","))
    assert set(items) == {"allreduce", "allgather", "reducescatter", "broadcast", "reduce",
                          "alltoall", "gather", "scatter"}, items
    assert all(v in ("4096", "65536", "131072") for v in items.values()), items
    assert "# all_reduce" in p.stdout and f"# wrote {out}" in p.stdout, p.stdout
    # A job reads it: the log names the file.
    p = run_cmd([sys.executable, "-m", "accl.launch", "-n", "2", sys.executable, "-c",
                 "import accl, numpy; accl.init().all_reduce(numpy.ones(4))"],
                env=clean_env(ACCL_TUNING_FILE=str(out), ACCL_DEBUG="INFO",
                              ACCL_DEBUG_SUBSYS="INIT"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"does not set come from {out}" in p.stderr, p.stderr
    # accl.perf's tables and JSON name it.
    j = tmp_path / "perf.json"
    p = run_cmd([sys.executable, "-m", "accl.launch", "-n", "2", sys.executable, "-m",
                 "accl.perf", "all_reduce", "-b", "8", "-e", "8", "-J", str(j)],
                env=clean_env(ACCL_TUNING_FILE=str(out)))
    assert p.returncode == 0 and f"(backend cpu, tuning file {out})" in p.stdout, p.stdout
    assert json.loads(j.read_text())["tuning_file"] == str(out)
    # python -m accl.info shows it, and which of its settings the environment overrides; it
    # hides a secret.
    out.write_text(out.read_text() + "ACCL_COMM_SECRET=s3cret\n")
    p = run_cmd([sys.executable, "-m", "accl.info"],
                env=clean_env(ACCL_TUNING_FILE=str(out), ACCL_CMA_MIN="-1"), timeout=60)
    info = p.stdout.split(f"tuning file: {out}\n")[1].splitlines()
    assert info[0].startswith("  ACCL_ALLREDUCE_DIRECT_MAX=") and "wins" not in info[0], p.stdout
    assert info[1].startswith("  ACCL_CMA_MIN=allreduce:") and "wins" in info[1], p.stdout
    assert info[2:4] == ["  ACCL_SPIN_US=10", "  ACCL_COMM_SECRET=(hidden)"], p.stdout
    assert "s3cret" not in p.stdout, p.stdout
