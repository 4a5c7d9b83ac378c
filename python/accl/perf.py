"""A bandwidth sweep in the style of nccl-tests, for accl and, side by side, gloo and MPI.

    accl-perf all_reduce -np 4 -b 8 -e 64M -f 2 -c 1
    accl-perf all_reduce all_gather -np 2 --compare gloo,mpi --passes 3 --plot perf.png -J perf.json
    torchrun --nproc-per-node 4 -m accl.perf all_reduce        (or mpirun, or python -m accl.launch)

Under a launcher, every rank runs the sweep. For every size it times `-n` back-to-back calls
(after `-w` warm-up calls, and a barrier) out of place and in place; for accl the loop runs in
the C++ core (Comm.time_op) so the figure holds no Python. The time reported is the slowest
rank's. algbw is bytes / time and busbw is algbw times nccl-tests' bus factor for the
collective, in decimal GB/s. `-c 1` then runs one call per mode on fresh data and counts the
elements that differ from a numpy reference (#wrong, summed over ranks). Rank 0 prints the
table to stdout and, when stderr is a terminal, a progress line there; `-J file` also writes
the results as JSON. The exit status is 1 if any element was wrong. `-R 1` puts accl's
buffers in shared host memory (accl.host_empty), as nccl-tests' `-R` registers NCCL's.
`--pages small` puts every library's private buffers on small pages instead of huge ones, as
numpy's and torch's memory is where transparent huge pages are only advised.

`--library gloo|mpi|mpich|oneccl` runs the same harness over torch.distributed's gloo, mpi4py
(over Open MPI or MPICH) or Intel oneCCL (through its shim, built by `make oneccl`) instead
(perf_peers.py). `--pair LIB` times LIB as well, in the same processes (under LIB's launcher):
at every point the two libraries' loops alternate, so that both are timed in the same moment
of a machine whose speed drifts. Without a launcher, `-np N` starts N local ranks itself, and
`--compare` runs the sweep of each library in turn, interleaved over `--passes` passes, and
prints medians and accl's ratio to each peer; with `--paired`, each peer's launch pairs it with
accl (perf_compare.py).

Each collective is described by one Collective entry below; the harness does the rest.
"""

from __future__ import annotations

import argparse
import json
import math
import mmap
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from . import _types as t
from ._env import init
from .comm import host_empty


class Shape(NamedTuple):
    """Element counts of one call, as nccl-tests' *GetCollByteCount computes them."""

    send: int  # elements of the send buffer
    recv: int  # elements of the receive buffer
    count: int  # the count argument of the call
    send_off: int  # in place, sendbuff = buffer + send_off * rank
    recv_off: int  # in place, recvbuff = buffer + recv_off * rank


# Layouts: the Shape of a call moving `total` elements over `n` ranks.
Layout = Callable[[int, int], Shape]


def _whole(total: int, n: int) -> Shape:
    return Shape(total, total, total, 0, 0)


def _gathered(total: int, n: int) -> Shape:
    k = total // n
    return Shape(k, k * n, k, k, 0)


def _scattered(total: int, n: int) -> Shape:
    k = total // n
    return Shape(k * n, k, k, 0, k)


def _exchanged(total: int, n: int) -> Shape:
    k = total // n
    return Shape(k * n, k * n, k, 0, 0)


# gen(start, count, rank) -> that rank's input elements [start, start + count) as float64.
Gen = Callable[[int, int, int], np.ndarray]
Reduce = Callable[[Gen, int, int, int], np.ndarray]
# expected(gen, reduce, n, rank, root, k) -> this rank's expected output, or None where the rank
# receives nothing; k is the count argument of the call.
Expected = Callable[[Gen, Reduce, int, int, int, int], "np.ndarray | None"]


@dataclass(frozen=True)
class Collective:
    name: str  # as Comm.time_op and the command line call it
    layout: Layout
    busbw_factor: Callable[[int], float]
    expected: Expected
    reduces: bool = False
    rooted: bool = False


def _ring(n: int) -> float:
    return (n - 1) / n


COLLECTIVES = {
    c.name: c
    for c in (
        Collective(
            "all_reduce",
            _whole,
            lambda n: 2 * (n - 1) / n,
            lambda gen, red, n, r, root, k: red(gen, 0, k, n),
            reduces=True,
        ),
        Collective(
            "all_gather",
            _gathered,
            _ring,
            lambda gen, red, n, r, root, k: np.concatenate([gen(0, k, j) for j in range(n)]),
        ),
        Collective(
            "reduce_scatter",
            _scattered,
            _ring,
            lambda gen, red, n, r, root, k: red(gen, r * k, k, n),
            reduces=True,
        ),
        Collective(
            "broadcast",
            _whole,
            lambda n: 1.0,
            lambda gen, red, n, r, root, k: gen(0, k, root),
            rooted=True,
        ),
        Collective(
            "reduce",
            _whole,
            lambda n: 1.0,
            lambda gen, red, n, r, root, k: red(gen, 0, k, n) if r == root else None,
            reduces=True,
            rooted=True,
        ),
        Collective(
            "alltoall",
            _exchanged,
            _ring,
            lambda gen, red, n, r, root, k: np.concatenate(
                [gen(r * k, k, j) for j in range(n)]
            ),
        ),
        Collective(
            "sendrecv",  # each rank sends to the next and receives from the previous one
            _whole,
            lambda n: 1.0,
            lambda gen, red, n, r, root, k: gen(0, k, (r - 1) % n),
        ),
        Collective(
            "gather",
            _gathered,
            _ring,
            lambda gen, red, n, r, root, k: (
                np.concatenate([gen(0, k, j) for j in range(n)]) if r == root else None
            ),
            rooted=True,
        ),
        Collective(
            "scatter",
            _scattered,
            _ring,
            lambda gen, red, n, r, root, k: gen(r * k, k, root),
            rooted=True,
        ),
    )
}
_ALIASES = {"all_to_all": "alltoall", "allreduce": "all_reduce", "allgather": "all_gather",
            "reducescatter": "reduce_scatter"}

_DTYPES = {name: code for code, name in t.DTYPE_NAMES.items() if code != t.BOOL}
_DTYPES.update(half=t.FLOAT16, float=t.FLOAT32, double=t.FLOAT64, bf16=t.BFLOAT16)
_OPS = {name: code for code, name in t.OP_NAMES.items()}
SENTINEL = 123  # fills outputs before a check, so that an element never written shows up


def _numpy_dtype(code: int) -> np.dtype:
    simple = {t.INT8: np.int8, t.UINT8: np.uint8, t.INT32: np.int32, t.UINT32: np.uint32,
              t.INT64: np.int64, t.UINT64: np.uint64, t.FLOAT16: np.float16,
              t.FLOAT32: np.float32, t.FLOAT64: np.float64}
    if code in simple:
        return np.dtype(simple[code])
    try:
        import ml_dtypes
    except ImportError:
        raise SystemExit(f"accl.perf: {t.DTYPE_NAMES[code]} needs the ml_dtypes package") from None
    attr = {t.BFLOAT16: "bfloat16", t.FLOAT8_E4M3: "float8_e4m3fn", t.FLOAT8_E5M2: "float8_e5m2"}
    return np.dtype(getattr(ml_dtypes, attr[code]))


def _generator(reduces: bool, op: int, n: int) -> Gen:
    """Inputs whose reductions are exact in the types of 16 bits or more for up to ~16 ranks
    (float8 sums are exact for a few ranks only)."""

    def gen(start: int, count: int, rank: int) -> np.ndarray:
        i = np.arange(start, start + count, dtype=np.int64)
        if not reduces:
            v = (i * 3 + rank * 5) % 97
        elif op == t.PROD:
            v = np.where((i + rank) % n == 0, 2, 1)  # one factor 2 per element
        elif op in (t.MAX, t.MIN):
            v = (i * 7 + rank * 3) % 11
        else:
            v = (i + rank) % 4
        return v.astype(np.float64)

    return gen


def _reducer(op: int, integer: bool) -> Reduce:
    def red(gen: Gen, start: int, count: int, n: int) -> np.ndarray:
        acc = gen(start, count, 0)
        for r in range(1, n):
            v = gen(start, count, r)
            if op in (t.SUM, t.AVG):
                acc += v
            elif op == t.PROD:
                acc *= v
            elif op == t.MAX:
                np.maximum(acc, v, out=acc)
            else:
                np.minimum(acc, v, out=acc)
        if op == t.AVG:
            acc = np.floor(acc / n) if integer else acc / n
        return acc

    return red


def _count_wrong(got: np.ndarray, want: np.ndarray, dtype: np.dtype, rtol: float) -> int:
    g = got.astype(np.float64)
    w = want.astype(dtype).astype(np.float64)  # the reference, rounded like the data
    if rtol:
        return int(np.count_nonzero(np.abs(g - want) > rtol * np.abs(want)))
    return int(np.count_nonzero(g != w))


# mpi: Open MPI; torch-accl: torch.distributed over accl; oneccl: Intel oneCCL (make oneccl)
LIBRARIES = ("accl", "gloo", "mpi", "mpich", "oneccl", "torch-accl")
MODES = ("out_of_place", "in_place")


@dataclass
class Options:
    collectives: list[Collective]
    minbytes: int
    maxbytes: int
    stepfactor: int
    stepbytes: int
    iters: int
    warmup: int
    check: bool
    dtype: int
    op: int
    root: int
    json_path: str | None
    library: str = "accl"
    nranks: int | None = None  # -np: ranks this process launches itself
    compare: list[str] = field(default_factory=list)
    passes: int = 1
    plot: str | None = None
    repeat: int = 1  # timed loops per point; the median is reported
    shared: bool = False  # -R 1: accl's buffers in shared host memory (acclHostAlloc)
    pages: str = "huge"  # of the private buffers: "huge" (advised) or "small"
    pair: str | None = None  # --pair: a second library timed in the same processes
    paired: bool = False  # --paired: --compare runs each peer paired with `library`
    loop_us: float = 0  # --loop-us: a timed loop's least duration (0: -n calls)

    @property
    def sizes(self) -> list[int]:
        sizes, s = [], self.minbytes
        while s <= self.maxbytes:
            sizes.append(s)
            s = s * self.stepfactor if self.stepfactor > 1 else s + self.stepbytes
            if s == 0:
                break  # -b 0 with a factor would loop forever
        return sizes

    def iters_text(self) -> str:
        """How a point is timed, for the tables' first line."""
        loops = f" (median of {self.repeat} loops)" if self.repeat > 1 else ""
        least = f" (more to last {self.loop_us:g} us)" if self.loop_us else ""
        return f"{self.iters} iters{least}{loops}"

    def sweep_args(self) -> list[str]:
        """The command line of one library's sweep, for the ranks -np / --compare launch."""
        return [*(c.name for c in self.collectives), "-b", str(self.minbytes),
                "-e", str(self.maxbytes), "-f", str(self.stepfactor), "-i", str(self.stepbytes),
                "-n", str(self.iters), "-w", str(self.warmup), "-c", str(int(self.check)),
                "-d", t.DTYPE_NAMES[self.dtype], "-o", t.OP_NAMES[self.op], "-r", str(self.root),
                "--repeat", str(self.repeat), "-R", str(int(self.shared)), "--pages", self.pages,
                "--loop-us", str(self.loop_us)]


def parse_size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        return int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8, 64K, 1M, 2G)") from None


def _libraries(text: str) -> list[str]:
    names = [n for n in text.split(",") if n]
    bad = [n for n in names if n not in LIBRARIES]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown library {bad[0]!r}; choose from {', '.join(LIBRARIES)}")
    return names


def _parse(argv: list[str] | None) -> Options:
    ap = argparse.ArgumentParser(prog="accl-perf", description=__doc__.split("\n")[0])
    ap.add_argument("collective", nargs="+", help=", ".join(COLLECTIVES))
    ap.add_argument("-b", "--minbytes", type=parse_size, default=8,
                    help="smallest size in bytes; K, M, G suffixes (default 8)")
    ap.add_argument("-e", "--maxbytes", type=parse_size, default=64 << 20,
                    help="largest size in bytes (default 64M)")
    ap.add_argument("-f", "--stepfactor", type=int, default=2,
                    help="multiply the size by this per step (default 2)")
    ap.add_argument("-i", "--stepbytes", type=parse_size, default=1 << 20,
                    help="with -f 1, add this to the size per step (default 1M)")
    ap.add_argument("-n", "--iters", type=int, default=20, help="timed calls per size")
    ap.add_argument("-w", "--warmup_iters", type=int, default=5, help="untimed calls first")
    ap.add_argument("--loop-us", type=float, default=0, metavar="US",
                    help="make each timed loop last at least US microseconds: -n calls, or more "
                    "where the calls are short, as -w more calls after the warm-up show (needs -w; "
                    "default 0: -n calls)")
    ap.add_argument("--repeat", type=int, default=1, metavar="R",
                    help="timed loops of -n calls per point, each from a barrier; the median "
                    "loop is reported (default 1, as nccl-tests)")
    ap.add_argument("-c", "--check", type=int, default=1, choices=(0, 1),
                    help="check the results against numpy (default 1)")
    ap.add_argument("-d", "--datatype", default="float32", choices=sorted(_DTYPES),
                    metavar="TYPE", help="float32 (default), " + ", ".join(sorted(_DTYPES)))
    ap.add_argument("-o", "--op", default="sum", choices=sorted(_OPS),
                    help="reduction op (default sum)")
    ap.add_argument("-r", "--root", type=int, default=0, help="root rank (default 0)")
    ap.add_argument("-J", "--json", metavar="FILE", help="also write the results as JSON")
    ap.add_argument("-R", "--shared", type=int, default=0, choices=(0, 1),
                    help="1: accl's buffers in shared host memory (acclHostAlloc), which its "
                    "peers copy to and from without the kernel; other libraries keep private "
                    "memory (default 0: private memory)")
    ap.add_argument("--pages", default="huge", choices=("huge", "small"),
                    help="pages of the private buffers: huge (advised; default), or small, as "
                    "numpy's and torch's memory where huge pages are only advised")
    ap.add_argument("-np", dest="nranks", type=int, metavar="N",
                    help="start N local ranks (not under a launcher)")
    ap.add_argument("--library", default="accl", choices=LIBRARIES,
                    help="the library the sweep calls (default accl)")
    ap.add_argument("--compare", type=_libraries, default=[], metavar="LIBS",
                    help="also sweep these libraries (gloo,mpi,mpich,oneccl,torch-accl,accl) in "
                    "the same run; needs -np")
    ap.add_argument("--passes", type=int, default=None,
                    help="interleaved passes over the libraries (default 3 with --compare, else 1)")
    ap.add_argument("--plot", metavar="FILE.png", help="draw busbw and time against size")
    ap.add_argument("--pair", choices=LIBRARIES, metavar="LIB",
                    help="also time LIB in the same processes, its loop and --library's in turn "
                    "at every point (run under LIB's launcher)")
    ap.add_argument("--paired", action="store_true",
                    help="with --compare: each peer's launch also times --library (--pair), and "
                    "the ratios compare the two libraries' loops of the same launches")
    ns = ap.parse_args(argv)
    colls = []
    for name in ns.collective:
        name = _ALIASES.get(name, name)
        if name not in COLLECTIVES:
            ap.error(f"unknown collective {name!r}; choose from {', '.join(COLLECTIVES)}")
        colls.append(COLLECTIVES[name])
    if ns.stepfactor < 1 or (ns.stepfactor == 1 and ns.stepbytes < 1):
        ap.error("-f must be > 1, or -f 1 with -i > 0")
    if ns.iters < 1 or ns.repeat < 1 or ns.warmup_iters < 0 or ns.minbytes > ns.maxbytes:
        ap.error("need -n >= 1, --repeat >= 1, -w >= 0 and -b <= -e")
    if ns.loop_us < 0 or (ns.loop_us and not ns.warmup_iters):
        ap.error("--loop-us sizes the loops from the warm-up calls: give -w >= 1")
    if ns.nranks is not None and ns.nranks < 1:
        ap.error("-np must be at least 1")
    if (ns.compare or ns.passes) and ns.nranks is None:
        ap.error("--compare and --passes launch the ranks themselves: give -np N")
    if ns.passes is not None and ns.passes < 1:
        ap.error("--passes must be at least 1")
    if ns.pair == ns.library:
        ap.error("--pair names the library the sweep already calls")
    if ns.pair and ns.nranks is not None:
        ap.error("--pair runs under the paired library's launcher; with -np use --paired")
    if (ns.pair or ns.paired) and ns.shared:
        ap.error("-R 1 gives accl memory that a paired library would share: not with pairs")
    compare = [lib for lib in ns.compare if lib != ns.library]
    if ns.paired and not compare:
        ap.error("--paired pairs the libraries of --compare")
    passes = ns.passes or (3 if compare else 1)
    return Options(colls, ns.minbytes, ns.maxbytes, ns.stepfactor, ns.stepbytes, ns.iters,
                   ns.warmup_iters, bool(ns.check), _DTYPES[ns.datatype], _OPS[ns.op], ns.root,
                   ns.json, ns.library, ns.nranks, compare, passes, ns.plot, ns.repeat,
                   bool(ns.shared), ns.pages, ns.pair, ns.paired, ns.loop_us)


def _fmt(v: float) -> str:
    return f"{v:.2f}" if v < 1e4 else f"{v:.1f}" if v < 1e5 else f"{v:.0f}"


def human(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


class Progress:
    """One line on stderr, rewritten in place; only on a terminal, so that logs and pipes
    never get it, and never on stdout, which holds the table."""

    def __init__(self, stream: Any = None) -> None:
        self.stream = sys.stderr if stream is None else stream
        self.on = self.stream.isatty()
        self.shown = False

    def show(self, text: str) -> None:
        if self.on:
            self.stream.write(f"\r\x1b[K{text}")
            self.stream.flush()
            self.shown = bool(text)

    def clear(self) -> None:
        if self.shown:
            self.show("")


class Call(NamedTuple):
    """One call as the harness asks a library to make it."""

    name: str
    src: np.ndarray  # this rank's input (in place: a view into the buffer `out` is a view of)
    out: np.ndarray  # where this rank's result goes
    count: int  # the count argument, as NCCL's API takes it
    dtype: int
    op: int
    root: int
    in_place: bool


class NotAvailable(Exception):
    """The library has no form of this call (the row shows N/A), e.g. MPI's in-place
    reduce-scatter leaves the result where nccl-tests does not look for it."""


class AcclRunner:
    """Runs calls on an accl communicator; the loop is timed in C++."""

    library = "accl"

    def __init__(self, comm: Any) -> None:
        from .tune import tuning_file

        self.comm, self.rank, self.size = comm, comm.rank, comm.size
        self.backend = comm.backend
        self.tuning_file = tuning_file()  # its settings chose algorithms: the tables say so
        self._one = np.zeros(1, np.float64)

    def time(self, c: Call, iters: int) -> float:
        self.comm.barrier()  # every library's loop starts from a barrier
        return self.comm._live().time_op(c.name, _addr(c.src), _addr(c.out), c.count, c.dtype,
                                         c.op, c.root, iters)

    def max(self, x: float) -> float:
        self._one[0] = x
        return float(self.comm.all_reduce(self._one, op=t.MAX)[0])

    def sum(self, x: float) -> float:
        self._one[0] = x
        return float(self.comm.all_reduce(self._one, op=t.SUM)[0])

    def close(self) -> None:
        self.comm.destroy()


def _addr(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


class Harness:
    """Times the calls of one library, or of two in the same processes (--pair): then each of
    a point's loops is one library's and the next the other's, each repeat starting with the
    other library, so that the two are timed within milliseconds of each other."""

    def __init__(self, runners: list[Any], opts: Options) -> None:
        self.runners, self.opts = runners, opts
        self.n, self.rank = runners[0].size, runners[0].rank
        self.np_dtype = _numpy_dtype(opts.dtype)
        self.itemsize = self.np_dtype.itemsize
        integer = self.np_dtype.kind in "iu"
        self.rtol = 0.0 if integer or opts.op != t.AVG else 2 * float(np.finfo(self.np_dtype).eps)
        self.red = _reducer(opts.op, integer)

    def run(self, coll: Collective, nbytes: int, send: np.ndarray,
            recv: np.ndarray) -> list[dict]:
        """Times, and checks if asked, one size out of place (send -> recv) and in place (in
        recv): a row per library. Both buffers hold at least nbytes."""
        o, isz = self.opts, self.itemsize
        shape = coll.layout(nbytes // isz, self.n)
        elements = max(shape.send, shape.recv)
        rows = [{
            "library": r.library, "pass": 1, "collective": coll.name,
            "size": elements * isz, "count": elements, "type": t.DTYPE_NAMES[o.dtype],
            "redop": t.OP_NAMES[o.op] if coll.reduces else "none",
            "root": o.root if coll.rooted else -1,
        } for r in self.runners]
        if len(rows) == 2:  # each names the library it was paired with
            rows[0]["pair"], rows[1]["pair"] = rows[1]["library"], rows[0]["library"]
        for mode in MODES:
            call = self._call(coll, shape, mode, send, recv)
            loops = [self._loop_calls(r, call) for r in self.runners]  # None: N/A
            times: list[list[float]] = [[] for _ in self.runners]
            for i in range(o.repeat):
                for j in range(len(self.runners)):
                    k = (i + j) % len(self.runners)  # each repeat starts with the next library
                    if loops[k] is None:
                        continue
                    sec = self._per_call(self.runners[k], call, loops[k])
                    if sec is None:
                        loops[k] = None
                    else:
                        times[k].append(sec)
            for r, row, calls, ts in zip(self.runners, rows, loops, times):
                if calls is None:
                    row[mode] = None
                    continue
                sec = statistics.median(ts)
                algbw = elements * isz / sec / 1e9 if sec > 0 else 0.0
                wrong = self._check(r, coll, call, recv, shape) if o.check else None
                row[mode] = {"time_us": sec * 1e6, "algbw": algbw,
                             "busbw": algbw * coll.busbw_factor(self.n), "wrong": wrong}
        return rows

    @staticmethod
    def _per_call(runner: Any, call: Call, iters: int) -> float | None:
        """The slowest rank's seconds a call over a loop of `iters` calls (None: the library has
        no such call)."""
        try:
            return runner.max(runner.time(call, iters) / iters)
        except NotAvailable:
            return None

    def _loop_calls(self, runner: Any, call: Call) -> int | None:
        """Makes the warm-up calls; then the calls of each timed loop (None: no such call). A
        loop of a few short calls times how the ranks leave the barrier before it as much as
        the calls: with --loop-us, the slowest rank's time over as many calls again sizes every
        rank's loop alike. Not the warm-up's own time: a first call may map and touch memory
        (the first send/recv in place takes its aside buffer), and loops sized by it were too
        short (4 ranks paired, 4 B in place first: accl 2.85-2.99 us against 2.36-2.42 at 8 B
        after it; with -w 200, 2.60-2.80 against 2.59-2.81)."""
        o = self.opts
        if o.warmup and self._per_call(runner, call, o.warmup) is None:
            return None
        if not o.loop_us:
            return o.iters
        sec = self._per_call(runner, call, o.warmup)  # --loop-us needs -w >= 1
        if sec is None:
            return None
        return max(o.iters, math.ceil(o.loop_us * 1e-6 / sec)) if sec > 0 else o.iters

    def _call(self, coll: Collective, shape: Shape, mode: str, send: np.ndarray,
              recv: np.ndarray) -> Call:
        r = self.rank
        if mode == "out_of_place":
            src, out = send[: shape.send], recv[: shape.recv]
        else:  # nccl-tests' in-place layout: both are views of the receive buffer
            src = recv[shape.send_off * r: shape.send_off * r + shape.send]
            out = recv[shape.recv_off * r: shape.recv_off * r + shape.recv]
        op = self.opts.op if coll.reduces else t.SUM
        return Call(coll.name, src, out, shape.count, self.opts.dtype, op,
                    self.opts.root if coll.rooted else 0, mode == "in_place")

    def warm_up(self, coll: Collective, nbytes: int, send: np.ndarray, recv: np.ndarray) -> None:
        """-w calls at the largest size before a collective's sweep, as nccl-tests does: the
        first touch of the buffers and of the library's own memory is not the first size's."""
        call = self._call(coll, coll.layout(nbytes // self.itemsize, self.n), "out_of_place",
                          send, recv)
        for r in self.runners:
            if self.opts.warmup:
                r.time(call, self.opts.warmup)

    def _check(self, runner: Any, coll: Collective, call: Call, recv: np.ndarray,
               shape: Shape) -> int:
        """Runs the call once more on fresh data; the wrong elements over all ranks."""
        n, r = self.n, self.rank
        gen = _generator(coll.reduces, self.opts.op, n)
        recv[: max(shape.send, shape.recv)] = SENTINEL
        call.src[:] = gen(0, shape.send, r).astype(self.np_dtype)
        runner.time(call, 1)
        want = coll.expected(gen, self.red, n, r, self.opts.root, shape.count)
        wrong = 0 if want is None else _count_wrong(call.out, want, self.np_dtype, self.rtol)
        return int(runner.sum(wrong))


def make_runner(library: str) -> Any:
    if library == "accl":
        return AcclRunner(init())
    from . import perf_peers

    if library == "torch-accl":
        return perf_peers.GlooRunner("accl")
    if library == "oneccl":
        return perf_peers.OnecclRunner()
    return perf_peers.GlooRunner() if library == "gloo" else perf_peers.MpiRunner(library)


def main(argv: list[str] | None = None) -> int:
    opts = _parse(argv)
    _numpy_dtype(opts.dtype)  # fails now, not after every rank has joined
    if opts.nranks is not None:
        from . import perf_compare

        return perf_compare.drive(opts)
    # The paired library first: under its launcher it may start what accl's init uses (MPI).
    runners = [make_runner(opts.pair)] if opts.pair else []
    runners.insert(0, make_runner(opts.library))
    try:
        if not 0 <= opts.root < runners[0].size:
            raise SystemExit(f"accl.perf: -r {opts.root} is not a rank of {runners[0].size}")
        return _sweep(runners, opts)
    finally:
        for r in runners:
            r.close()


def table_header(coll: str, paired: bool = False) -> list[str]:
    """The columns of nccl-tests; a paired sweep's rows also name their library."""
    lib = f"  {'library':>8s}" if paired else ""
    return [f"#\n# {coll}\n#",
            f"# {'':53s}{'out-of-place':^34s}{'in-place':^34s}",
            f"# {'size':>10s}  {'count':>12s}  {'type':>11s}  {'redop':>6s}  {'root':>6s}"
            + f"  {'time':>8s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}" * 2 + lib,
            f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>11s}  {'':>6s}  {'':>6s}"
            + f"  {'(us)':>8s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}" * 2]


def table_row(row: dict) -> str:
    line = (f"  {row['size']:10d}  {row['count']:12d}  {row['type']:>11s}  "
            f"{row['redop']:>6s}  {row['root']:6d}")
    for mode in MODES:
        m = row[mode]
        if m is None:
            line += f"  {'N/A':>8s}  {'N/A':>6s}  {'N/A':>6s}  {'N/A':>6s}"
            continue
        wrong = "N/A" if m["wrong"] is None else str(m["wrong"])
        line += f"  {_fmt(m['time_us']):>8s}  {m['algbw']:6.2f}  {m['busbw']:6.2f}  {wrong:>6s}"
    return line + (f"  {row['library']:>8s}" if "pair" in row else "")


def totals(rows: list[dict]) -> tuple[int, float]:
    """The wrong elements and the average busbw over every measured (row, mode)."""
    done = [row[m] for row in rows for m in MODES if row[m] is not None]
    avg = sum(m["busbw"] for m in done) / len(done) if done else 0.0
    return sum(m["wrong"] or 0 for m in done), avg


HUGE_PAGE = 2 << 20
# What the buffers hold before the first check writes its data: not zeros, as no gradient is.
# On this VM streaming stores of zero lines ran at twice the speed of any other data (4 MiB
# copied in 74 against 148 us, 2026-12-05), and the timed calls before each size's check moved
# the zeros of the buffer's untouched part.
FILL = 1


def buffer(count: int, dtype: np.dtype, shared: bool = False, huge: bool = True) -> np.ndarray:
    """An array of FILL starting at a 2 MiB boundary, with transparent huge pages advised (they
    back it where the kernel allows). Every library of a comparison runs in processes of its
    own, and with numpy's allocation whether the first megabytes of a buffer were huge pages
    depended on where each process's allocator put it: accl's single-copy all_gather of 128 KiB
    to 1 MiB took 1.5-1.6x longer on small pages, so that lottery, not the library, picked the
    leader at those sizes. `huge` False: huge pages refused, so small pages back every byte.
    `shared`: in shared host memory instead (acclHostAlloc, small pages where the kernel keeps
    shared memory off huge pages, as by default)."""
    if shared:
        a = host_empty(count, dtype)
        a.fill(FILL)  # written now, as below
        return a
    # Private, as numpy's and torch's memory is (a shared mapping would be shmem, whose pages
    # the kernel pins and copies differently); anonymous memory is zeroed.
    # Whole huge pages from the boundary on: a huge page backs only a 2 MiB range that lies
    # entirely inside the mapping, so with the bytes alone the tail of the buffer (all of a
    # buffer under 2 MiB) had huge pages or not by where mmap put it, a new draw in every
    # process (4 ranks, single-copy broadcasts of 256 KiB-1 MiB: 3-4x apart).
    whole = -(-count * dtype.itemsize // HUGE_PAGE) * HUGE_PAGE
    m = mmap.mmap(-1, whole + HUGE_PAGE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    skip = -np.frombuffer(m, np.uint8, 1).ctypes.data % HUGE_PAGE
    if hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            m.madvise(mmap.MADV_HUGEPAGE if huge else mmap.MADV_NOHUGEPAGE, skip, len(m) - skip)
        except OSError:
            pass  # a kernel without transparent huge pages: small pages for every library
    a = np.frombuffer(m, dtype, count, skip)
    # Written now: a page first read, by numpy or by a peer's single-copy read, maps the kernel's
    # shared zero page, which stays in cache however large the buffer, so a sweep timed before
    # the check writes the data would measure cache, not memory.
    a.fill(FILL)
    return a


def _sweep(runners: list[Any], opts: Options) -> int:
    h = Harness(runners, opts)
    runner, paired = runners[0], len(runners) > 1
    top = opts.sizes[-1] // h.itemsize
    # -R is accl's: the other libraries are faster on private memory (docs/performance.md).
    shared = opts.shared and runner.library == "accl"
    huge = opts.pages == "huge"
    send = buffer(top, np.dtype(h.np_dtype), shared, huge)
    recv = buffer(top, np.dtype(h.np_dtype), shared, huge)
    lead = runner.rank == 0
    progress = Progress() if lead else None
    rows = []
    say = print if lead else (lambda *a, **k: None)
    tuned = getattr(runner, "tuning_file", None)
    pair = f", paired with {runners[1].library} ({runners[1].backend})" if paired else ""
    say(f"# accl.perf: {runner.size} ranks, library {runner.library} (backend {runner.backend}"
        f"{f', tuning file {tuned}' if tuned else ''}){pair}, "
        f"{opts.iters_text()}, {opts.warmup} warmup iters, "
        f"check {int(opts.check)}{', shared host memory (-R 1)' if shared else ''}"
        f"{', small pages' if not huge and not shared else ''}")
    todo = len(opts.collectives) * len(opts.sizes)
    for coll in opts.collectives:
        say("\n".join(table_header(coll.name, paired)))
        h.warm_up(coll, opts.sizes[-1], send, recv)
        for nbytes in opts.sizes:
            if progress:
                progress.show(f"accl.perf: {runner.library} {coll.name} {human(nbytes)} "
                              f"({len(rows) // len(runners) + 1}/{todo})")
            point = h.run(coll, nbytes, send, recv)
            rows += point
            if progress:
                progress.clear()
            for row in point:
                say(table_row(row), flush=True)
    wrong, _ = totals(rows)
    avg = {r.library: totals([row for row in rows if row["library"] == r.library])[1]
           for r in runners}
    say("#")
    say(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    for lib, bw in avg.items():
        say(f"# Avg bus bandwidth    : {bw:g}" + (f" ({lib})" if paired else ""))
    if lead and opts.json_path:
        with open(opts.json_path, "w") as f:
            json.dump({"nranks": runner.size, "library": runner.library,
                       "backend": runner.backend, "tuning_file": tuned,
                       "pair": runners[1].library if paired else None,
                       "pair_backend": runners[1].backend if paired else None,
                       "iters": opts.iters, "repeat": opts.repeat, "warmup": opts.warmup,
                       "check": opts.check,
                       "datatype": t.DTYPE_NAMES[opts.dtype], "op": t.OP_NAMES[opts.op],
                       "root": opts.root, "shared": shared, "pages": opts.pages,
                       "rows": rows, "wrong": wrong,
                       "avg_busbw": avg[runner.library]},
                      f, indent=1)
    if lead and opts.plot:
        from . import perf_compare

        perf_compare.plot(perf_compare.medians(rows, runner.size), opts.plot)
    return 1 if wrong else 0


if __name__ == "__main__":
    # Through the package's module, not __main__: perf_peers raises accl.perf.NotAvailable.
    from accl.perf import main as _main

    sys.exit(_main())
