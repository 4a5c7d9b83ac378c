"""The tuning file (ACCL_TUNING_FILE) and accl-tune, which writes one; ranks that disagree on a
setting that chooses algorithms fail at creation."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from accl_testing import check_array, clean_env, expect_raises, run_cmd, run_ranks

import accl
from accl import tune


def _sum(comm):
    x = np.arange(64 << 10, dtype=np.float32) + comm.rank  # 256 KiB: single copy by default
    check_array(comm.all_reduce(x), np.arange(64 << 10, dtype=np.float32) * comm.size + 1,
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
    f.write_text("ACCL_CMA_MIN=allreduce:1,allgather:64\nACCL_ALLREDUCE_DIRECT_MAX=0\n")
    assert run_ranks(2, _sum, env=env) == [True, True]


def test_bad_file_fails_the_communicator(tmp_path):
    f = tmp_path / "tuning.conf"
    f.write_text("ACCL_CMA_MIN=-1\nACCL_NO_SUCH=1\n")
    env = {"ACCL_TUNING_FILE": str(f), "EXPECT": f"tuning file {f}, line 2: 'ACCL_NO_SUCH=1'"}
    run_ranks(2, _make, [env] * 2, make_comm=False)
    env = {"ACCL_TUNING_FILE": str(tmp_path / "missing"), "EXPECT": "cannot read the tuning file"}
    run_ranks(2, _make, [env] * 2, make_comm=False)


@pytest.mark.parametrize("value", ["allreduce:x", "allreduce", "ring:1", "-2"])
def test_bad_cma_min_is_named(value):
    env = {"ACCL_CMA_MIN": value, "EXPECT": f"ACCL_CMA_MIN={value}: "}
    run_ranks(2, _make, [env] * 2, make_comm=False)


def test_ranks_that_disagree_fail_naming_the_setting(tmp_path):
    f = tmp_path / "tuning.conf"
    f.write_text("ACCL_CMA_MIN=-1\n")
    want = "ranks disagree on a setting that every rank must share: rank 0 has ACCL_CMA_MIN"
    want += " unset, rank 1 has ACCL_CMA_MIN=-1"
    envs = [{"EXPECT": want}, {"ACCL_TUNING_FILE": str(f), "EXPECT": want}]
    run_ranks(2, _make, envs, make_comm=False)


def test_crossover_rule():
    sizes = [1, 2, 4, 8, 16]
    assert tune.crossover(sizes, [1] * 5, [0.5] * 5) == 1
    assert tune.crossover(sizes, [1] * 5, [2] * 5) == 32
    # One noisy point above the crossover does not move it.
    assert tune.crossover(sizes, [1] * 5, [2, 2, 0.5, 0.5, 1.1]) == 4


def test_accl_tune_writes_a_file_later_runs_read(tmp_path):
    out = tmp_path / "t.conf"
    p = run_cmd([sys.executable, "-m", "accl.tune", "-np", "2", "-o", str(out), "--sizes",
                 "4K,64K", "--rounds", "1", "--seconds", "0", "-n", "2"], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]
    names = [ln.split("=", 1)[0] for ln in lines]
    assert names == ["ACCL_ALLREDUCE_DIRECT_MAX", "ACCL_CMA_MIN"], lines
    items = dict(i.split(":") for i in lines[1].split("=", 1)[1].split(","))
    assert set(items) == {"allreduce", "allgather", "reducescatter", "broadcast"}, items
    assert all(v in ("4096", "65536", "131072") for v in items.values()), items
    assert "# all_reduce" in p.stdout and f"# wrote {out}" in p.stdout, p.stdout
    # A job reads it: the log names the file.
    p = run_cmd([sys.executable, "-m", "accl.launch", "-n", "2", sys.executable, "-c",
                 "import accl, numpy; accl.init().all_reduce(numpy.ones(4))"],
                env=clean_env(ACCL_TUNING_FILE=str(out), ACCL_DEBUG="INFO",
                              ACCL_DEBUG_SUBSYS="INIT"))
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"does not set come from {out}" in p.stderr, p.stderr
    # python -m accl.info shows it, and which of its settings the environment overrides.
    p = run_cmd([sys.executable, "-m", "accl.info"],
                env=clean_env(ACCL_TUNING_FILE=str(out), ACCL_CMA_MIN="-1"), timeout=60)
    info = p.stdout.split(f"tuning file: {out}\n")[1].splitlines()
    assert info[0].startswith("  ACCL_ALLREDUCE_DIRECT_MAX=") and "wins" not in info[0], p.stdout
    assert info[1].startswith("  ACCL_CMA_MIN=allreduce:") and "wins" in info[1], p.stdout
