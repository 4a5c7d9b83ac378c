"""python -m accl.perf: a tiny sweep of every collective, its table and its JSON."""

import json
import sys

import numpy as np
import pytest

from accl import perf
from accl_testing import launch_cmd, run_cmd

ALL = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "gather",
       "scatter"]


def rows_of(stdout):
    """The table rows (not the # lines) printed by rank 0 under the launcher."""
    return [line[4:].split() for line in stdout.splitlines()
            if line.startswith("[0] ") and not line.startswith("[0] #")]


def test_sweep_of_every_collective(tmp_path):
    out = tmp_path / "perf.json"
    p = run_cmd(launch_cmd(3, sys.executable, "-m", "accl.perf", *ALL, "-b", "8", "-e", "4K",
                           "-f", "8", "-n", "3", "-w", "1", "-c", "1", "-r", "1", "-J", str(out)))
    assert p.returncode == 0, p.stdout + p.stderr
    assert not [line for line in p.stdout.splitlines() if not line.startswith("[0] ")], \
        "only rank 0 prints"
    assert "[0] # Out of bounds values : 0 OK" in p.stdout
    assert "[0] # Avg bus bandwidth    : " in p.stdout
    header = [line for line in p.stdout.splitlines() if "#wrong" in line][0].split()
    assert header[2:8] == ["size", "count", "type", "redop", "root", "time"], header
    rows = rows_of(p.stdout)
    sizes = [8, 64, 512, 4096]
    assert len(rows) == len(ALL) * len(sizes)
    for row in rows:
        assert len(row) == 13 and row[8] == "0" and row[12] == "0", row  # 0 wrong, both modes
    data = json.loads(out.read_text())
    assert data["nranks"] == 3 and data["backend"] == "cpu" and data["wrong"] == 0
    assert [r["collective"] for r in data["rows"]] == [c for c in ALL for _ in sizes]
    by = {(r["collective"], r["size"]): r for r in data["rows"]}
    # nccl-tests' layouts: blocked collectives round the size down to whole blocks of 3 ranks.
    assert by[("all_reduce", 4096)]["count"] == 1024 and by[("all_reduce", 4096)]["root"] == -1
    assert by[("all_gather", 4092)]["count"] == 1023 and by[("broadcast", 4096)]["root"] == 1
    for r in data["rows"]:
        for mode in ("out_of_place", "in_place"):
            m = r[mode]
            assert m["wrong"] == 0 and m["time_us"] > 0
            assert m["algbw"] == pytest.approx(r["size"] / m["time_us"] / 1e3)
            factor = perf.COLLECTIVES[r["collective"]].busbw_factor(3)
            assert m["busbw"] == pytest.approx(m["algbw"] * factor)


@pytest.mark.parametrize("args", [["-d", "float16", "-o", "avg"], ["-d", "int8", "-o", "prod"],
                                  ["-d", "uint64", "-o", "min"], ["-d", "float64", "-o", "max"]])
def test_checked_reductions(args):
    p = run_cmd(launch_cmd(2, sys.executable, "-m", "accl.perf", "all_reduce", "reduce_scatter",
                           "reduce", "-b", "4", "-e", "64K", "-f", "16", "-n", "2", "-w", "0",
                           *args))
    assert p.returncode == 0 and "# Out of bounds values : 0 OK" in p.stdout, p.stdout + p.stderr


def test_single_rank_without_check():
    p = run_cmd([sys.executable, "-m", "accl.perf", "broadcast", "-b", "1K", "-e", "1K", "-c", "0",
                 "-n", "1", "-w", "0"])
    assert p.returncode == 0, p.stderr
    (row,) = [line.split() for line in p.stdout.splitlines() if not line.startswith("#")]
    assert row[:5] == ["1024", "256", "float32", "none", "0"] and row[8] == "N/A", row


def test_bad_arguments():
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_sum"])
    assert p.returncode == 2 and "unknown collective" in p.stderr
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "-b", "1X"])
    assert p.returncode == 2 and "not a size" in p.stderr
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "-r", "3"])
    assert p.returncode != 0 and "-r 3 is not a rank" in p.stderr


def test_parse_size():
    assert [perf.parse_size(s) for s in ("8", "64K", "1m", "2G")] == [8, 65536, 1 << 20, 2 << 30]


class _NoOpComm:
    """Moves no data, so every checked output keeps its sentinel."""

    size, rank, backend = 3, 1, "none"

    def all_reduce(self, x, op=0):
        return x

    def _live(self):
        return self

    def time_op(self, *args):
        return 1e-3


@pytest.mark.parametrize("name", ALL)
def test_the_check_sees_missing_results(name):
    # This is rank 1: it receives a result from a root 0, or is the root where only roots do.
    root = "1" if name in ("reduce", "gather") else "0"
    opts = perf._parse([name, "-b", "96", "-e", "96", "-r", root])
    h = perf.Harness(_NoOpComm(), opts)
    send, recv = np.zeros(24, np.float32), np.zeros(24, np.float32)
    row = h.run(perf.COLLECTIVES[name], 96, send, recv)
    for mode in ("out_of_place", "in_place"):
        assert row[mode]["wrong"] > 0, (name, mode, row)
