"""accl-tune: measures where the cpu backend's algorithms cross over on this machine and writes
a tuning file that later runs read.

    accl-tune                        # one rank per CPU, into ~/.config/accl/tuning.conf
    accl-tune -np 4 -o tuning.conf   # then: ACCL_TUNING_FILE=tuning.conf my_job ...

On one node the cpu backend copies small messages through /dev/shm and large ones once,
straight between the ranks' buffers (cross-memory attach), and runs small all-reduces by a
direct algorithm; the sizes where it switches are constants measured on a 2-core machine
(docs/algorithms.md). This tool times each candidate at sizes around those crossovers on the
ranks it launches: every candidate is a communicator of its own (ACCL_ALGO forces its
algorithm), and round after round, for a minute by default, they take turns on the same
buffers, so that a slow minute of a shared machine hits them all alike. The time of a point is
the mean over rounds of the slowest rank's average call: where the machine's speed swings
between minutes, and some algorithms' more than others', the mean is what a job can expect.
A crossover is the size from which to use the larger-message algorithm that costs least over
all sizes measured, each counted relative to the faster choice.

The file holds ACCL_ALLREDUCE_DIRECT_MAX and ACCL_CMA_MIN (per collective) as NAME=VALUE
lines; the library reads it for every ACCL_* variable the environment does not set
(ACCL_TUNING_FILE names it; by default ~/.config/accl/tuning.conf, if it exists). The
crossovers depend on the number of ranks per node: tune with the count the jobs use.
"""

from __future__ import annotations

import argparse
import datetime
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np

from . import _types
from .perf import parse_size

# (collective, the ACCL_ALGO name, the candidates from small to large messages: the staged one
# first, then the single-copy ones)
CANDIDATES = [
    ("all_reduce", "allreduce", ("direct", "split", "cma")),
    ("all_gather", "allgather", ("direct", "cma")),
    ("reduce_scatter", "reducescatter", ("direct", "cma")),
    ("broadcast", "broadcast", ("direct", "cma")),
    ("reduce", "reduce", ("direct", "pull", "cma")),
    ("alltoall", "alltoall", ("direct", "cma")),
    ("gather", "gather", ("direct", "cma")),
    ("scatter", "scatter", ("direct", "cma")),
]
DEFAULT_SIZES = "1K,2K,4K,8K,16K,32K,64K,128K,256K,512K,1M"


def default_path() -> str:
    """Where the library looks for a tuning file when ACCL_TUNING_FILE is unset."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "accl", "tuning.conf")


def tuning_file() -> str | None:
    """The tuning file communicators made now would read (csrc/params.cc), or None."""
    named = os.environ.get("ACCL_TUNING_FILE")
    if named:
        return None if named == "none" else named
    return default_path() if os.path.exists(default_path()) else None


def crossover(sizes: list[int], small: list[float], large: list[float]) -> int:
    """The size from which to use the large-message algorithm (one step past the last size:
    never): the threshold whose choices cost least in total, each size's time counted relative
    to the faster algorithm there, so that one noisy point does not move it far."""
    def cost(k: int) -> float:
        return sum((a if i < k else b) / min(a, b)
                   for i, (a, b) in enumerate(zip(small, large)))
    best = min(range(len(sizes) + 1), key=cost)  # the first of equal costs: the smaller size
    return sizes[best] if best < len(sizes) else 2 * sizes[-1]


def _measure(sizes: list[int], rounds: int, seconds: float,
             iters: int) -> tuple[int, dict[tuple[str, str], list[float]]]:
    """The rounds run and the mean time (s) per candidate and size (on rank 0; {} on the
    others). Rounds go on until there are `rounds` of them and `seconds` have passed: the
    speed of a shared machine changes from minute to minute, and more so for some algorithms
    than for others, so a tuning needs more than one minute's sample."""
    import accl

    world = accl.init()
    comms = {}
    for coll, algo, names in CANDIDATES:
        for name in names:
            os.environ["ACCL_ALGO"] = f"{algo}:{name}"
            try:
                comms[(coll, name)] = world.split(0, world.rank)
            except accl.InvalidUsageError:
                if name not in ("pull", "cma"):
                    raise
                # This host refuses cross-memory attach (or ACCL_CMA_MIN=-1): tune without it.
    del os.environ["ACCL_ALGO"]
    n, count = world.size, max(sizes) // 4
    src = np.ones(count * n, np.float32)
    out = np.zeros(count * n, np.float32)
    times: dict[tuple[str, str, int], list[float]] = {}
    start, done = time.monotonic(), 0
    while True:
        for coll, _algo, names in CANDIDATES:
            for s in sizes:  # the candidates take turns at each size
                for name in [m for m in names if (coll, m) in comms]:
                    c = comms[(coll, name)]
                    live = c._live()
                    args = (coll, src.ctypes.data, out.ctypes.data, s // 4, _types.FLOAT32,
                            _types.SUM, 0)
                    live.time_op(*args, 2)  # warm-up
                    c.barrier()
                    mine = np.array([live.time_op(*args, iters) / iters])
                    slowest = float(world.all_reduce(mine, op=accl.MAX)[0])
                    times.setdefault((coll, name, s), []).append(slowest)
        done += 1
        enough = done >= rounds and time.monotonic() - start >= seconds
        if world.all_reduce(np.array([float(enough)]), op=accl.MAX)[0]:  # rank clocks differ
            break
    for c in comms.values():
        c.destroy()
    means = {(coll, name): [statistics.fmean(times[(coll, name, s)]) for s in sizes]
             for coll, name in comms}
    world.destroy()
    return done, means if world.rank == 0 else {}


def settings(sizes: list[int], means: dict[tuple[str, str], list[float]]) -> dict[str, str]:
    """The tuning file's variables from the measured means; ACCL_CMA_MIN=-1 where there are no
    cma candidates (single copy refused)."""
    staged = means[("all_reduce", "split")]
    cma = means.get(("all_reduce", "cma"), staged)
    others = [min(a, b) for a, b in zip(staged, cma)]
    direct_max = max([0] + [s for s in sizes
                            if s < crossover(sizes, means[("all_reduce", "direct")], others)])
    values = {"ACCL_ALLREDUCE_DIRECT_MAX": str(direct_max)}
    if ("all_reduce", "cma") not in means:
        return dict(values, ACCL_CMA_MIN="-1")
    # Above the direct algorithm's range, all-reduce chooses between split and cma.
    above = [i for i, s in enumerate(sizes) if s > direct_max] or [len(sizes) - 1]
    mins = {"allreduce": crossover([sizes[i] for i in above], [staged[i] for i in above],
                                   [cma[i] for i in above])}
    for coll, algo, names in CANDIDATES[1:]:
        # Single copy at each size by its faster form (the library picks between reduce's two
        # by size).
        single = [min(t) for t in zip(*(means[(coll, m)] for m in names[1:]))]
        mins[algo] = crossover(sizes, means[(coll, names[0])], single)
    return dict(values, ACCL_CMA_MIN=",".join(f"{k}:{v}" for k, v in mins.items()))


def _report(sizes: list[int], means: dict[tuple[str, str], list[float]], rounds: int,
            iters: int, nranks: int, out: str) -> None:
    print(f"# accl-tune: {nranks} ranks, float32 sum, out of place, mean us of {rounds} "
          f"rounds of {iters} calls (the slowest rank's average)")
    for coll, _algo, candidates in CANDIDATES:
        names = [n for n in candidates if (coll, n) in means]
        print(f"# {coll}\n{'size':>10} " + " ".join(f"{n:>10}" for n in names))
        for i, s in enumerate(sizes):
            print(f"{s:>10} " + " ".join(f"{means[(coll, n)][i] * 1e6:10.2f}" for n in names))
    import accl

    values = settings(sizes, means)
    header = "# accl tuning file: written by accl-tune"
    lines = [f"{header} {accl.__version__} on {socket.gethostname()}, "
             f"{datetime.datetime.now():%Y-%m-%d %H:%M}, for {nranks} ranks per node",
             *(f"{k}={v}" for k, v in values.items())]
    if out != "-" and os.path.exists(out):  # the file's other settings stay
        with open(out) as f:
            lines += [ln.rstrip("\n") for ln in f if not ln.startswith(header)
                      and ln.split("=", 1)[0].strip() not in values]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if out != "-":
        os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
        with open(out + ".tmp", "w") as f:
            f.write(text)
        os.replace(out + ".tmp", out)
        print(f"# wrote {out}; communicators created later read it where the environment "
              "does not set these variables (ACCL_TUNING_FILE names another file, none: no file)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="accl-tune", description=__doc__.splitlines()[0])
    ap.add_argument("-np", dest="nranks", type=int,
                    default=max(2, min(8, len(os.sched_getaffinity(0)))),
                    help="ranks to launch (default: one per CPU, 2 to 8)")
    ap.add_argument("-o", "--output", default=None,
                    help=f"the tuning file (default {default_path()}; -: only print it)")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes per rank, comma-separated")
    ap.add_argument("--rounds", type=int, default=7, help="at least this many rounds (default 7)")
    ap.add_argument("--seconds", type=float, default=60,
                    help="and rounds for at least this long (default 60)")
    ap.add_argument("-n", "--iters", type=int, default=20)
    ap.add_argument("--rank", action="store_true", help=argparse.SUPPRESS)  # a launched rank
    ns = ap.parse_args(argv)
    sizes = sorted(parse_size(x) for x in ns.sizes.split(","))
    if ns.nranks < 2 or ns.rounds < 1 or ns.iters < 1 or sizes[0] < 4:
        ap.error("needs -np >= 2, --rounds >= 1, -n >= 1 and sizes of at least 4 bytes")
    out = ns.output or default_path()
    if ns.rank:
        rounds, means = _measure(sizes, ns.rounds, ns.seconds, ns.iters)
        if means:
            _report(sizes, means, rounds, ns.iters, ns.nranks, out)
        return 0
    cmd = [sys.executable, "-m", "accl.launch", "-n", str(ns.nranks), sys.executable, "-m",
           "accl.tune", "--rank", "-np", str(ns.nranks), "-o", out, "--sizes", ns.sizes,
           "--rounds", str(ns.rounds), "--seconds", str(ns.seconds), "-n", str(ns.iters)]
    # The measurement must not run under an earlier tuning file's settings. ACCL_ALGO forces
    # each candidate, so other thresholds do not matter; ACCL_CMA_MIN=-1 (single copy off) is
    # kept: then the candidates go without it.
    env = dict(os.environ, ACCL_TUNING_FILE="none")
    env.pop("ACCL_ALGO", None)
    return subprocess.call(cmd, env=env)


if __name__ == "__main__":
    sys.exit(main())
