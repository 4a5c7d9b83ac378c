"""accl-perf (python -m accl.perf): tiny sweeps of every collective, their tables and JSON, the
-np launch, and --compare with gloo, Open MPI and MPICH."""

import io
import json
import os
import sys

import numpy as np
import pytest

from accl import perf, perf_compare
from accl_testing import REPO, launch_cmd, run_cmd

ALL = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall",
       "sendrecv", "gather", "scatter"]


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
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "--compare", "gloo"])
    assert p.returncode == 2 and "give -np N" in p.stderr
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "-np", "2", "--compare", "nccl"])
    assert p.returncode == 2 and "unknown library 'nccl'" in p.stderr
    p = run_cmd(launch_cmd(1, sys.executable, "-m", "accl.perf", "all_reduce", "-np", "2"))
    assert p.returncode != 0 and "under a launcher, drop it" in p.stderr
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "-np", "2", "--paired"])
    assert p.returncode == 2 and "--paired pairs the libraries of --compare" in p.stderr
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "-np", "2", "--pair", "mpi"])
    assert p.returncode == 2 and "with -np use --paired" in p.stderr
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "-np", "2", "--compare", "mpi",
                 "--paired", "-R", "1"])
    assert p.returncode == 2 and "not with pairs" in p.stderr


def test_parse_size():
    assert [perf.parse_size(s) for s in ("8", "64K", "1m", "2G")] == [8, 65536, 1 << 20, 2 << 30]


class _NoOpComm:
    """Moves no data, so every checked output keeps its sentinel."""

    size, rank, backend = 3, 1, "none"

    def all_reduce(self, x, op=0):
        return x

    def barrier(self):
        pass

    def _live(self):
        return self

    def time_op(self, *args):
        return 1e-3


@pytest.mark.parametrize("name", ALL)
def test_the_check_sees_missing_results(name):
    # This is rank 1: it receives a result from a root 0, or is the root where only roots do.
    root = "1" if name in ("reduce", "gather") else "0"
    opts = perf._parse([name, "-b", "96", "-e", "96", "-r", root])
    h = perf.Harness([perf.AcclRunner(_NoOpComm())], opts)
    send, recv = np.zeros(24, np.float32), np.zeros(24, np.float32)
    (row,) = h.run(perf.COLLECTIVES[name], 96, send, recv)
    for mode in ("out_of_place", "in_place"):
        assert row[mode]["wrong"] > 0, (name, mode, row)


def mapping_of(at):
    """(start, end, AnonHugePages in kB) of the mapping that holds address `at`, from
    /proc/self/smaps."""
    lo = hi = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and ":" not in head:
                lo, hi = (int(v, 16) for v in head.split("-"))
            elif lo is not None and lo <= at < hi and head == "AnonHugePages:":
                return lo, hi, int(line.split()[1])
    pytest.fail(f"no mapping holds {at:#x} in /proc/self/smaps")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
@pytest.mark.parametrize("count", [1000, 3 << 20])
def test_buffers_lie_on_whole_huge_pages(dtype, count):
    # The mapping must hold every 2 MiB page the buffer touches: a huge page backs only a range
    # that lies wholly inside it, and with the buffer's bytes alone its tail got huge pages or
    # not by where mmap put it, a new draw in every process.
    b = perf.buffer(count, np.dtype(dtype))
    at = b.ctypes.data
    assert at % perf.HUGE_PAGE == 0
    lo, hi, _ = mapping_of(at)
    assert lo <= at and at + -(-b.nbytes // perf.HUGE_PAGE) * perf.HUGE_PAGE <= hi, (lo, hi, at)
    assert b.dtype == dtype and b.size == count and (b == perf.FILL).all()
    b[:] = 7  # writable to its end
    assert (b == 7).all()


def test_buffers_hold_pages_of_their_own_before_any_call():
    # /proc/self/pagemap: per 4 KiB page, bit 63 present, bit 56 mapped by this process alone.
    # An untouched page is absent; one only read maps the kernel's shared zero page (not
    # exclusive), which a timed loop would read from cache however large the buffer.
    b = perf.buffer(1 << 18, np.dtype(np.float32))
    pages = b.nbytes // 4096
    with open("/proc/self/pagemap", "rb") as f:
        f.seek(b.ctypes.data // 4096 * 8)
        entries = np.frombuffer(f.read(pages * 8), np.uint64)
    own = (entries >> np.uint64(63)) & (entries >> np.uint64(56)) & np.uint64(1)
    assert own.all(), f"{pages - int(own.sum())} of {pages} pages not written"


def test_small_pages():
    """--pages small: every byte of the private buffers on small pages (AnonHugePages 0 in the
    mapping that holds them), results still checked, the first line and the JSON say so."""
    b = perf.buffer(4 << 20, np.dtype(np.uint8), huge=False)
    assert mapping_of(b.ctypes.data)[2] == 0
    out = run_cmd([sys.executable, "-m", "accl.perf", "all_gather", "-b", "1M", "-e", "1M",
                   "-n", "2", "-w", "1", "--pages", "small", "-J", "/dev/stdout"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[0].endswith(", small pages"), out.stdout
    assert '"pages": "small"' in out.stdout and "Out of bounds values : 0 OK" in out.stdout


def test_np_launches_the_ranks_and_prints_a_plain_table():
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "sendrecv", "-np", "2", "-b", "8",
                 "-e", "1K", "-f", "8", "-n", "2", "-w", "1"])
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].startswith("# accl.perf: 2 ranks, library accl (backend cpu)"), lines[0]
    assert "\r" not in p.stdout and "\r" not in p.stderr  # no progress line off a terminal
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert [r[0] for r in rows] == ["8", "64", "512"] * 2 and all(r[8] == "0" for r in rows)
    assert "# Out of bounds values : 0 OK" in lines


def test_shared_buffers(tmp_path):
    """-R 1: the buffers come from accl.host_empty, results stay checked, the table and JSON
    say so."""
    out = tmp_path / "shared.json"
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_gather", "all_reduce", "-np", "2",
                 "-b", "64K", "-e", "1M", "-f", "16", "-n", "2", "-w", "1", "-R", "1",
                 "-J", str(out)])
    assert p.returncode == 0, p.stdout + p.stderr
    assert "shared host memory (-R 1)" in p.stdout.splitlines()[0]
    assert "# Out of bounds values : 0 OK" in p.stdout
    data = json.loads(out.read_text())
    assert data["shared"] is True and data["wrong"] == 0 and len(data["rows"]) == 4


def test_fresh_inputs_prints_stale_and_fresh_times():
    """perf/fresh_inputs.py: a row per input size, stale and fresh times, and their ratio."""
    p = run_cmd(launch_cmd(2, sys.executable, os.path.join(REPO, "perf", "fresh_inputs.py"),
                           "all_gather", "reduce_scatter", "--rounds", "1", "--iters", "2"))
    assert p.returncode == 0, p.stdout + p.stderr
    rows = rows_of(p.stdout)
    assert [int(r[0]) for r in rows] == [64 << 10, 256 << 10, 1 << 20, 4 << 20] * 2, p.stdout
    for _, stale, fresh, ratio in rows:  # the times are printed to 0.1 us, the ratio to 0.01
        assert float(stale) > 0
        assert abs(float(fresh) / float(stale) - float(ratio)) <= 0.05 * abs(float(ratio)) + 0.01


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_only_on_a_terminal():
    tty, pipe = _Terminal(), io.StringIO()
    for stream in (tty, pipe):
        progress = perf.Progress(stream)
        progress.show("accl.perf: all_reduce 8 B (1/2)")
        progress.clear()
    assert tty.getvalue() == "\r\x1b[Kaccl.perf: all_reduce 8 B (1/2)\r\x1b[K"
    assert pipe.getvalue() == ""


def test_repeat_reports_the_median_loop():
    class Fake:  # a runner whose loops take 5, 1 and 3 s, in turn
        library, rank, size = "fake", 0, 1
        loops = iter([9.0, 5.0, 1.0, 3.0] * 2)  # a warm-up and 3 loops, out of then in place

        def time(self, call, iters):
            return next(self.loops) * iters

        def max(self, x):
            return x

    opts = perf._parse(["all_reduce", "-n", "4", "-w", "1", "-c", "0", "--repeat", "3"])
    buf = np.zeros(2, np.float32)
    (row,) = perf.Harness([Fake()], opts).run(perf.COLLECTIVES["all_reduce"], 8, buf, buf.copy())
    assert row["out_of_place"]["time_us"] == row["in_place"]["time_us"] == 3e6, row


def test_paired_loops_take_turns():
    """--pair: the two libraries' loops alternate, each repeat starting with the other one, and
    each library's row holds the median of its own loops."""
    calls = []

    class Fake:
        rank, size = 0, 1

        def __init__(self, library, seconds):
            self.library, self.seconds = library, iter(seconds * 2)  # out of place, in place

        def time(self, call, iters):
            calls.append((self.library, iters))
            return next(self.seconds) * iters

        def max(self, x):
            return x

    opts = perf._parse(["all_reduce", "-n", "4", "-w", "1", "-c", "0", "--repeat", "3"])
    buf = np.zeros(2, np.float32)
    a, b = Fake("accl", [0, 1.0, 2.0, 6.0]), Fake("mpi", [0, 4.0, 3.0, 5.0])
    rows = perf.Harness([a, b], opts).run(perf.COLLECTIVES["all_reduce"], 8, buf, buf.copy())
    warm, loops = ("accl", 1), ("accl", 4)
    assert calls[:8] == [warm, ("mpi", 1), loops, ("mpi", 4), ("mpi", 4), loops, loops,
                         ("mpi", 4)], calls
    assert [(r["library"], r["pair"], r["out_of_place"]["time_us"]) for r in rows] == [
        ("accl", "mpi", 2e6), ("mpi", "accl", 4e6)], rows
    assert perf.table_row(rows[1]).split()[-1] == "mpi"


def test_compare_with_gloo_and_mpi(tmp_path):
    """accl against gloo, Open MPI ("mpi") and MPICH in one interleaved run."""
    everyone = ("gloo", "mpi", "mpich")
    missing = {lib: why for lib in everyone if (why := perf_compare.unavailable(lib))}
    peers = [lib for lib in everyone if lib not in missing]
    if not peers:
        pytest.skip(f"no peer library: {missing}")
    libs = ["accl", *peers]
    out, png = tmp_path / "compare.json", tmp_path / "compare.png"
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "all_gather", "-np", "2",
                 "-b", "8", "-e", "64", "-f", "8", "-n", "2", "-w", "1", "--repeat", "3",
                 "--compare", ",".join(peers), "--passes", "2", "-J", str(out), "--plot",
                 str(png)], timeout=90)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert "2 iters (median of 3 loops), median of 2 interleaved passes" in lines[0], lines[0]
    header = [line for line in lines if line.startswith("#") and "time" in line][0].split()
    assert header == ["#", "size", *[w for lib in libs for w in (lib, "time", "busbw")],
                      *[f"accl/{peer}" for peer in peers]], header
    rows = [line.split() for line in lines if not line.startswith("#")]
    assert [r[0] for r in rows] == ["8", "64"] * 2
    for r in rows:
        assert len(r) == 1 + 2 * len(libs) + len(peers) and "N/A" not in r, r
        assert all(float(x) > 0 for x in r[-len(peers):]), r
    assert "# Out of bounds values : 0 OK" in lines

    data = json.loads(out.read_text())
    assert data["libraries"] == libs and data["passes"] == 2 and data["wrong"] == 0
    assert data["repeat"] == 3
    assert [(r["library"], r["pass"]) for r in data["runs"]] == [
        (lib, p) for p in (1, 2) for lib in libs]
    assert {(r["library"], r["pass"], r["collective"], r["size"]) for r in data["rows"]} == {
        (lib, p, c, s) for lib in libs for p in (1, 2) for c in ("all_reduce", "all_gather")
        for s in (8, 64)}
    for r in data["rows"]:
        assert r["out_of_place"]["wrong"] == 0 and r["out_of_place"]["time_us"] > 0, r
    med = {(m["library"], m["collective"], m["size"], m["mode"]): m for m in data["medians"]}
    for lib in libs:
        m = med[(lib, "all_reduce", 64, "out_of_place")]
        times = [r["out_of_place"]["time_us"] for r in data["rows"] if r["library"] == lib
                 and r["collective"] == "all_reduce" and r["size"] == 64]
        assert m["passes"] == 2 and m["time_us"] == pytest.approx(sum(times) / 2)
        assert m["busbw"] == pytest.approx(64 / m["time_us"] / 1e3)  # factor 1 at 2 ranks
    for r in data["ratios"]:
        key = (r["collective"], r["size"], r["mode"])
        assert r["ratio"] == pytest.approx(med[(r["peer"], *key)]["time_us"]
                                           / med[("accl", *key)]["time_us"])
    assert {r["peer"] for r in data["ratios"]} == set(peers)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if missing:
        pytest.skip(f"checked accl against {peers} only; missing {missing}")


def test_loop_us_sizes_the_loops_after_the_warm_up():
    """--loop-us: each library's loops get enough calls to last that long by its slowest rank's
    time over as many calls as the warm-up, after it (not the warm-up's, whose first call may
    touch new memory), never fewer than -n."""
    calls = []

    class Fake:
        rank, size = 0, 1

        def __init__(self, library, per_call):
            self.library, self.per_call = library, per_call

        def time(self, call, iters):
            first = all(lib != self.library for lib, _ in calls)  # its memory's first touch
            calls.append((self.library, iters))
            return self.per_call * iters * (1000 if first else 1)

        def max(self, x):
            return 2 * x  # the slowest rank is twice as slow as this one

    opts = perf._parse(["all_reduce", "-n", "20", "-w", "2", "-c", "0", "--loop-us", "100"])
    assert "20 iters (more to last 100 us)" in opts.iters_text()
    buf = np.zeros(2, np.float32)
    fast, slow = Fake("accl", 1e-7), Fake("mpi", 1e-3)
    rows = perf.Harness([fast, slow], opts).run(perf.COLLECTIVES["all_reduce"], 8, buf,
                                                buf.copy())
    assert calls[:6] == [("accl", 2), ("accl", 2), ("mpi", 2), ("mpi", 2), ("accl", 500),
                         ("mpi", 20)], calls
    assert rows[0]["out_of_place"]["time_us"] == pytest.approx(0.2)  # the max of the loop
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "-w", "0", "--loop-us", "10"])
    assert p.returncode == 2 and "give -w >= 1" in p.stderr


def test_paired_ratios_are_the_median_of_each_launchs():
    """Paired, a ratio is the median over the launches of each launch's own ratio; unpaired, the
    ratio of the medians over passes. Here accl leads in four launches of five, which run at
    two speeds: the medians set a slow launch of accl against a fast one of mpi (0.3)."""
    def row(lib, p, us, pair):
        r = {"library": lib, "pass": p, "collective": "all_reduce", "size": 8,
             "out_of_place": {"time_us": us}, "in_place": None}
        return r | ({"pair": pair} if pair else {})

    accl_us, mpi_us = [1.0, 1.0, 4.0, 4.0, 4.0], [1.2, 1.2, 1.2, 4.4, 4.4]
    for paired, want in ((True, 1.1), (False, 1.2 / 4.0)):
        rows = [row(lib, p + 1, us[p], paired and pair)
                for lib, us, pair in (("accl", accl_us, "mpi"), ("mpi", mpi_us, "accl"))
                for p in range(5)]
        [r] = perf_compare.ratios_of(rows, ["accl", "mpi"], 2)
        assert (r["peer"], r["mode"]) == ("mpi", "out_of_place")
        assert r["ratio"] == pytest.approx(want), paired


def test_compare_paired_with_mpi(tmp_path):
    """--paired: each MPI's launch also times accl, in the same processes, and each ratio
    compares the times of the launches that timed both."""
    peers = [lib for lib in ("mpi", "mpich") if not perf_compare.unavailable(lib)]
    if not peers:
        pytest.skip("neither Open MPI nor MPICH is available: "
                    f"{[perf_compare.unavailable(lib) for lib in ('mpi', 'mpich')]}")
    out = tmp_path / "paired.json"
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "broadcast", "-np", "2",
                 "-b", "8", "-e", "64", "-f", "8", "-n", "4", "-w", "1", "--repeat", "3",
                 "--compare", ",".join(peers), "--paired", "--passes", "2", "-J", str(out)],
                timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.splitlines()
    assert "each peer paired with accl in its launches" in lines[0], lines[0]
    assert "# Out of bounds values : 0 OK" in lines
    data = json.loads(out.read_text())
    assert data["paired"] and data["wrong"] == 0
    assert [(r["library"], r["pass"], r.get("pair")) for r in data["runs"]] == [
        x for p in (1, 2) for peer in peers for x in (("accl", p, peer), (peer, p, "accl"))]
    points = [(c, s) for c in ("all_reduce", "broadcast") for s in (8, 64)]
    assert sorted((r["library"], r["pair"], r["pass"], r["collective"], r["size"])
                  for r in data["rows"]) == sorted(
        x for peer in peers for p in (1, 2) for c, s in points
        for x in (("accl", peer, p, c, s), (peer, "accl", p, c, s)))
    for r in data["rows"]:
        assert r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0, r
    for r in data["ratios"]:
        def times(lib, pair):
            return {x["pass"]: x[r["mode"]]["time_us"] for x in data["rows"] if x["library"] == lib
                    and x["pair"] == pair and x["collective"] == r["collective"]
                    and x["size"] == r["size"]}
        mine, theirs = times("accl", r["peer"]), times(r["peer"], "accl")
        assert sorted(mine) == sorted(theirs) == [1, 2]
        assert r["ratio"] == pytest.approx((theirs[1] / mine[1] + theirs[2] / mine[2]) / 2)
    assert {(r["peer"], r["collective"], r["size"]) for r in data["ratios"]} == {
        (peer, c, s) for peer in peers for c, s in points}


def test_torch_accl_against_gloo(tmp_path):
    """--library torch-accl: the sweep through torch.distributed on accl's torch backend,
    checked against numpy like every library, beside gloo in the same run (perf/torch_compare.sh
    at small sizes)."""
    pytest.importorskip("torch")
    import importlib.util

    if importlib.util.find_spec("accl._accl_torch") is None:
        pytest.skip("accl._accl_torch was not built")
    out = tmp_path / "torch.json"
    p = run_cmd([sys.executable, "-m", "accl.perf", "all_reduce", "all_gather", "reduce_scatter",
                 "-np", "2", "-b", "8", "-e", "4K", "-f", "512", "-n", "2", "-w", "1",
                 "--library", "torch-accl", "--compare", "gloo", "--passes", "1",
                 "-J", str(out)], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert data["libraries"] == ["torch-accl", "gloo"] and data["wrong"] == 0, data["libraries"]
    assert {r["backend"] for r in data["runs"]} == {"accl", "gloo"}, data["runs"]
    got = {(r["library"], r["collective"], r["size"]) for r in data["rows"]}
    assert got == {(lib, c, s) for lib in ("torch-accl", "gloo")
                   for c in ("all_reduce", "all_gather", "reduce_scatter") for s in (8, 4096)}
    assert "torch-accl/gloo" in p.stdout, p.stdout


def test_compare_with_oneccl(tmp_path):
    """accl against Intel oneCCL (the shim of `make oneccl`, which CI does not build), every
    collective checked against numpy."""
    why = perf_compare.unavailable("oneccl")
    if why:
        pytest.skip(why)
    if "libasan" in os.environ.get("LD_PRELOAD", ""):  # make test-sanitize
        pytest.skip("oneCCL's ofi transport does not initialize with the ASan runtime preloaded")
    out = tmp_path / "oneccl.json"
    p = run_cmd([sys.executable, "-m", "accl.perf", *ALL, "-np", "2", "-b", "8", "-e", "4K",
                 "-f", "512", "-n", "2", "-w", "1", "-c", "1", "--compare", "oneccl",
                 "--passes", "1", "-J", str(out)], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "accl/oneccl" in p.stdout and "# Out of bounds values : 0 OK" in p.stdout, p.stdout
    data = json.loads(out.read_text())
    assert data["libraries"] == ["accl", "oneccl"] and data["wrong"] == 0
    assert data["runs"][1]["backend"].startswith("oneCCL 2022.2"), data["runs"]
    rows = {(r["collective"], r["size"]): r for r in data["rows"] if r["library"] == "oneccl"}
    assert set(rows) == {(c, s) for c in ALL for s in (8, 4096)}, sorted(rows)
    for (coll, _), r in rows.items():
        assert r["out_of_place"]["wrong"] == 0 and r["out_of_place"]["time_us"] > 0, r
        # In place, oneCCL's send/recv would receive over what it still sends.
        assert (r["in_place"] is None) == (coll == "sendrecv"), r


def test_oneccl_unavailable_says_how_to_build_it(monkeypatch, tmp_path):
    from accl import perf_peers

    monkeypatch.setattr(perf_peers, "oneccl_shim", lambda: str(tmp_path / "missing.so"))
    assert perf_compare.unavailable("oneccl") == "oneCCL shim not built: make oneccl"


@pytest.mark.parametrize("library", ["mpi", "mpich"])
def test_mpi_loop_runs_every_collective(tmp_path, library):
    """The MPI runner's C loop (perf/mpi/mpi_loop.c) over each MPI, 3 ranks, a root that is not
    rank 0, every collective checked against numpy; MPI has no in-place reduce-scatter in
    nccl-tests' layout."""
    why = perf_compare.unavailable(library)
    if why:
        pytest.skip(why)
    out = tmp_path / "mpi.json"
    p = run_cmd([sys.executable, "-m", "accl.perf", *ALL, "-np", "3", "-b", "8", "-e", "4K",
                 "-f", "512", "-n", "2", "-w", "1", "-c", "1", "-r", "2", "--library", library,
                 "-J", str(out)], timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    data = json.loads(out.read_text())
    assert data["wrong"] == 0
    assert sorted(r["collective"] for r in data["rows"]) == sorted(ALL * 2)
    for r in data["rows"]:
        assert r["out_of_place"]["wrong"] == 0 and r["out_of_place"]["time_us"] > 0, r
        assert (r["in_place"] is None) == (r["collective"] == "reduce_scatter"), r


def test_mpi_unavailable_says_how_to_build_its_loop(monkeypatch, tmp_path):
    from accl import perf_peers

    if perf_compare.unavailable("mpi"):
        pytest.skip(perf_compare.unavailable("mpi"))
    monkeypatch.setattr(perf_peers, "mpi_loop", lambda library: str(tmp_path / "missing.so"))
    assert perf_compare.unavailable("mpi") == (
        "the C loop over mpi is not built: make build (perf/mpi/mpi_loop.c)")
