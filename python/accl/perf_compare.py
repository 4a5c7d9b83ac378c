"""accl-perf -np N [--compare gloo,mpi]: launches the sweeps, merges them, prints and plots.

Each library's sweep is its own launch: accl and gloo under accl.launch (which also sets the
MASTER_ADDR/PORT, RANK and WORLD_SIZE that gloo reads), MPI under mpirun over Open MPI's
shared-memory transport. Rank 0 of each writes its rows as JSON; this process collects them.
Runs are interleaved, pass by pass (accl, gloo, mpi, accl, gloo, mpi, ...), because the speed of
a shared machine drifts from minute to minute and a library run only in a slow minute would
look slow. The table holds the median over passes of each point's time (out of place) and the
busbw of that time, then the first library's ratio to each other one: its busbw over theirs,
which is their time over its time (> 1: the first library is faster).

On this VM the speed drifts faster than a pass: the cost of a line crossing between the cores
changes every few seconds, for every page at once. `--paired` therefore launches each peer with
the first library in the same processes (accl.perf --pair), their loops in turn at every point,
and a ratio compares the two libraries' times of the same launches, taken milliseconds apart.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict

from . import _types as t
from . import launch, perf
from ._env import rank_info

_PREFIX = re.compile(r"^\[\d+\] ")  # accl.launch's rank prefix


def unavailable(library: str) -> str | None:
    """Why this machine cannot run the library's sweep, or None."""
    if library in ("gloo", "torch-accl"):
        try:
            import torch.distributed as dist
        except ImportError:
            return "torch is not installed"
        return None if dist.is_gloo_available() else "torch was built without gloo"
    if library in ("mpi", "mpich"):
        try:
            import mpi4py  # noqa: F401
        except ImportError:
            return "mpi4py is not installed"
        if library == "mpich" and not os.path.exists(_mpich("lib/libmpi.so.12")):
            return f"MPICH is not installed in {_mpich('')} (make setup: pip install --prefix)"
        if library == "mpi" and not _mpirun():
            return "mpirun is not on the PATH"
        from .perf_peers import mpi_loop

        return None if os.path.exists(mpi_loop(library)) else (
            f"the C loop over {library} is not built: make build (perf/mpi/mpi_loop.c)")
    if library == "oneccl":
        from .perf_peers import oneccl_shim

        return None if os.path.exists(oneccl_shim()) else "oneCCL shim not built: make oneccl"
    return None


def _mpich(path: str) -> str:
    # MPICH's wheel goes into its own prefix inside the venv: its mpirun would shadow Open MPI's.
    return os.path.join(sys.prefix, "mpich", path)


def _mpirun() -> str | None:
    here = os.path.dirname(sys.executable)  # a venv's Open MPI wheel puts mpirun beside python
    return shutil.which("mpirun", path=os.pathsep.join([here, os.environ.get("PATH", "")]))


def launch_cmd(library: str, n: int, args: list[str], pair: str | None = None) -> list[str]:
    """The launch of one sweep of `library`, paired with `pair` (--pair) if given: under the
    launcher of the paired library, which accl's ranks also start under."""
    sweep = [sys.executable, "-m", "accl.perf", *args, "--library", library]
    if pair:
        sweep += ["--pair", pair]
        library = pair
    # Every library's ranks are placed as accl.launch places them: one per core where they fit,
    # else one core each, neighbouring ranks on the same one (ranks 0 and 1 on the first core).
    fits = n <= len(os.sched_getaffinity(0))
    if library == "mpich":
        # mpi4py loads whichever MPI library MPI4PY_LIBMPI names; Hydra passes it to the ranks.
        cores = "core" if fits else "user:" + ",".join(str(min(s)) for s in launch.shares(n))
        return [_mpich("bin/mpiexec"), "-n", str(n), "-bind-to", cores,
                "-genv", "MPI4PY_LIBMPI", _mpich("lib/libmpi.so.12"), *sweep]
    if library != "mpi":  # accl, gloo, torch-accl and oneccl
        return [sys.executable, "-m", "accl.launch", "-n", str(n), *sweep]
    # Mapped by core with more ranks than cores, Open MPI fills each core in turn.
    place = ["--bind-to", "core"] if fits else [
        "--map-by", "core:OVERSUBSCRIBE", "--bind-to", "core:overload-allowed"]
    cmd = [_mpirun() or "mpirun", "-n", str(n), *place]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    # ob1 with the self and sm (Open MPI 5's name for vader) transports: shared memory only.
    return cmd + ["--mca", "pml", "ob1", "--mca", "btl", "self,sm", *sweep]


def _run(cmd: list[str], forward: bool, progress: perf.Progress, label: str, todo: int) -> int:
    """Runs one launch; its table goes to stdout if `forward`, else only into the progress."""
    done, coll = 0, ""
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1,
                          env=dict(os.environ, PYTHONUNBUFFERED="1")) as p:
        assert p.stdout is not None
        for line in p.stdout:
            line = _PREFIX.sub("", line)
            if forward:
                progress.clear()
                sys.stdout.write(line)
                sys.stdout.flush()
            if line[2:].strip() in perf.COLLECTIVES:  # "# all_reduce" opens its table
                coll = line[2:].strip()
            elif line.strip() and not line.startswith("#"):
                done += 1
                size = perf.human(int(line.split()[0]))
                progress.show(f"accl.perf: {label}: {coll} {size} done ({done}/{todo})")
    progress.clear()
    return p.returncode


def drive(opts: perf.Options) -> int:
    if rank_info().source != "single":
        raise SystemExit("accl.perf: -np starts the ranks itself; under a launcher, drop it")
    if not 0 <= opts.root < opts.nranks:
        raise SystemExit(f"accl.perf: -r {opts.root} is not a rank of {opts.nranks}")
    libraries = [opts.library, *opts.compare]
    for lib in libraries:
        why = unavailable(lib)
        if why:
            raise SystemExit(f"accl.perf: cannot run {lib}: {why}")
    single = len(libraries) == 1 and opts.passes == 1
    # Paired, a launch per peer times the first library too; else a launch per library.
    launches = [(opts.library, p) for p in opts.compare] if opts.paired else [
        (lib, None) for lib in libraries]
    todo = len(opts.collectives) * len(opts.sizes) * (2 if opts.paired else 1)
    progress = perf.Progress()
    rows, runs = [], []
    with tempfile.TemporaryDirectory(prefix="accl-perf-") as tmp:
        for p in range(1, opts.passes + 1):
            for lib, pair in launches:
                name = f"{lib}+{pair}" if pair else lib
                out = os.path.join(tmp, f"{name}-{p}.json")
                cmd = launch_cmd(lib, opts.nranks, [*opts.sweep_args(), "-J", out], pair)
                label = f"pass {p}/{opts.passes} {name}"
                code = _run(cmd, single, progress, label, todo)
                if code not in (0, 1) or not os.path.exists(out):  # 1: wrong results, still rows
                    raise SystemExit(f"accl.perf: the {name} sweep of pass {p} failed "
                                     f"(status {code}): {' '.join(cmd)}")
                with open(out) as f:
                    run = json.load(f)
                for row in run["rows"]:
                    row["pass"] = p
                rows += run["rows"]
                runs.append({"library": lib, "pass": p, "backend": run["backend"],
                             "tuning_file": run.get("tuning_file")})
                if pair:  # each names the other
                    runs[-1]["pair"] = pair
                    runs.append({"library": pair, "pass": p, "backend": run["pair_backend"],
                                 "tuning_file": None, "pair": lib})
    med = medians(rows, opts.nranks)
    ratios = ratios_of(rows, libraries, opts.nranks)
    wrong, _ = perf.totals(rows)
    if not single:
        print("\n".join(combined_table(opts, libraries, med, ratios, rows)))
    if opts.json_path:
        with open(opts.json_path, "w") as f:
            json.dump({"nranks": opts.nranks, "libraries": libraries, "passes": opts.passes,
                       "paired": opts.paired,
                       "runs": runs, "iters": opts.iters, "repeat": opts.repeat,
                       "warmup": opts.warmup, "check": opts.check,
                       "datatype": t.DTYPE_NAMES[opts.dtype],
                       "op": t.OP_NAMES[opts.op], "root": opts.root, "shared": opts.shared,
                       "pages": opts.pages,
                       "rows": rows, "medians": med, "ratios": ratios, "wrong": wrong}, f, indent=1)
    if opts.plot:
        plot(med, opts.plot)
    return 1 if wrong else 0


def medians(rows: list[dict], nranks: int) -> list[dict]:
    """Per (library, collective, size, mode): the median time over passes, and its bandwidths."""
    times: dict[tuple, list[float]] = defaultdict(list)
    for r in rows:
        for mode in perf.MODES:
            if r[mode] is not None:
                times[(r["library"], r["collective"], r["size"], mode)].append(r[mode]["time_us"])
    out = []
    for (lib, coll, size, mode), ts in times.items():
        us = statistics.median(ts)
        algbw = size / us / 1e3 if us > 0 else 0.0
        out.append({"library": lib, "collective": coll, "size": size, "mode": mode,
                    "passes": len(ts), "time_us": us, "algbw": algbw,
                    "busbw": algbw * perf.COLLECTIVES[coll].busbw_factor(nranks)})
    return out


def ratios_of(rows: list[dict], libraries: list[str], nranks: int) -> list[dict]:
    """The first library's busbw over each other's, point by point: their time over its time.
    Unpaired, of the medians over passes. Paired (--paired), the median over the launches of
    each launch's own ratio: a launch's two times were taken milliseconds apart, while separate
    launches draw different modes of this machine, and a ratio of the medians would set one
    launch's time against another's."""
    base, out = libraries[0], []
    for peer in libraries[1:]:
        launches: dict[tuple, dict] = defaultdict(dict)  # (coll, size, mode) -> pass -> times
        for r in rows:
            if (r["library"], r.get("pair")) in ((base, peer), (peer, base)):
                for mode in perf.MODES:
                    if r[mode] is not None:
                        launches[(r["collective"], r["size"], mode)].setdefault(
                            r["pass"], {})[r["library"]] = r[mode]["time_us"]
        ratio: dict[tuple, float] = {}
        for k, by_pass in launches.items():
            each = [x[peer] / x[base] for x in by_pass.values() if x.get(base) and peer in x]
            if each:
                ratio[k] = statistics.median(each)
        if not launches:
            at = {(m["library"], m["collective"], m["size"], m["mode"]): m["time_us"]
                  for m in medians([r for r in rows if r["library"] in (base, peer)], nranks)}
            ratio = {(coll, size, mode): us / at[(base, coll, size, mode)]
                     for (lib, coll, size, mode), us in at.items()
                     if lib == peer and at.get((base, coll, size, mode))}
        out += [{"library": base, "peer": peer, "collective": coll, "size": size, "mode": mode,
                 "ratio": x} for (coll, size, mode), x in ratio.items()]
    return out


def combined_table(opts: perf.Options, libraries: list[str], med: list[dict],
                   ratios: list[dict], rows: list[dict]) -> list[str]:
    at = {(m["library"], m["collective"], m["size"]): m for m in med if m["mode"] == "out_of_place"}
    ratio = {(r["peer"], r["collective"], r["size"]): r["ratio"] for r in ratios
             if r["mode"] == "out_of_place"}
    base, peers = libraries[0], libraries[1:]
    each_launch = ", the median of each launch's" if opts.paired else ""
    lines = [f"# accl.perf: {opts.nranks} ranks, {t.DTYPE_NAMES[opts.dtype]} "
             f"{t.OP_NAMES[opts.op]}, out of place, {opts.iters_text()}, median of "
             f"{opts.passes} interleaved passes"
             f"{f', each peer paired with {libraries[0]} in its launches' if opts.paired else ''}"
             f"{', accl on shared host memory (-R 1)' if opts.shared else ''}"
             f"{', small pages' if opts.pages == 'small' else ''}; "
             f"ratio = {base} busbw / peer busbw{each_launch}"]
    for coll in opts.collectives:
        sizes = sorted({s for (_, c, s) in at if c == coll.name})
        lines += [f"#\n# {coll.name}\n#",
                  f"# {'size':>10s}" + "".join(f"  {lib + ' time':>12s}  {'busbw':>6s}"
                                               for lib in libraries)
                  + "".join(f"  {base + '/' + p:>10s}" for p in peers),
                  f"# {'(B)':>10s}" + f"  {'(us)':>12s}  {'(GB/s)':>6s}" * len(libraries)
                  + f"  {'(busbw)':>10s}" * len(peers)]
        for size in sizes:
            line = f"  {size:10d}"
            for lib in libraries:
                m = at.get((lib, coll.name, size))
                line += (f"  {perf._fmt(m['time_us']):>12s}  {m['busbw']:6.2f}" if m
                         else f"  {'N/A':>12s}  {'N/A':>6s}")
            for p in peers:
                r = ratio.get((p, coll.name, size))
                line += f"  {r:10.3g}" if r is not None else f"  {'N/A':>10s}"
            lines.append(line)
    wrong, _ = perf.totals(rows)
    lines += ["#", f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}"]
    for lib in libraries:
        _, avg = perf.totals([r for r in rows if r["library"] == lib])
        lines.append(f"# Avg bus bandwidth    : {avg:g} ({lib}, every pass and mode)")
    return lines


def plot(med: list[dict], path: str) -> None:
    """busbw and time against size, log-log, out of place: a row per collective, a line per
    library."""
    import matplotlib

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    oop = [m for m in med if m["mode"] == "out_of_place"]
    colls = list(dict.fromkeys(m["collective"] for m in oop))
    libs = list(dict.fromkeys(m["library"] for m in oop))
    fig, axes = plt.subplots(len(colls), 2, figsize=(10, 3.2 * len(colls)), squeeze=False)
    for (bw, lat), coll in zip(axes, colls):
        for lib in libs:
            pts = sorted((m["size"], m["busbw"], m["time_us"]) for m in oop
                         if m["collective"] == coll and m["library"] == lib and m["size"] > 0)
            if pts:
                sizes, busbw, us = zip(*pts)
                bw.plot(sizes, [max(b, 1e-6) for b in busbw], marker=".", label=lib)
                lat.plot(sizes, us, marker=".", label=lib)
        for ax, what in ((bw, "bus bandwidth (GB/s)"), (lat, "time (us)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("size (B)")
            ax.set_ylabel(what)
            ax.set_title(f"{coll}, out of place")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=64)  # small enough to keep in the repository (docs/)
    plt.close(fig)
