"""A bandwidth sweep in the style of nccl-tests.

    python -m accl.launch -n 4 python -m accl.perf all_reduce -b 8 -e 64M -f 2 -c 1

Runs under any launcher accl.init() knows (alone it is one rank). For every size it times
`-n` back-to-back calls (after `-w` warm-up calls) out of place and in place, inside the C++
core (Comm.time_op); the time reported is the slowest rank's. algbw is bytes / time and busbw
is algbw times nccl-tests' bus factor for the collective, in decimal GB/s. `-c 1` then runs one
call per mode on fresh data and counts the elements that differ from a numpy reference (#wrong,
summed over ranks). Rank 0 prints the table to stdout; `-J file` also writes it as JSON. The
exit status is 1 if any element was wrong.

Each collective is described by one Collective entry below; the harness does the rest.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from . import _types as t
from ._env import init


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


@dataclass
class Options:
    collectives: list[Collective]
    sizes: list[int]
    iters: int
    warmup: int
    check: bool
    dtype: int
    op: int
    root: int
    json_path: str | None


def parse_size(text: str) -> int:
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:].upper(), 1)
    digits = text[:-1] if scale > 1 else text
    try:
        return int(digits) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 8, 64K, 1M, 2G)") from None


def _parse(argv: list[str] | None) -> Options:
    ap = argparse.ArgumentParser(prog="python -m accl.perf", description=__doc__.split("\n")[0])
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
    ap.add_argument("-c", "--check", type=int, default=1, choices=(0, 1),
                    help="check the results against numpy (default 1)")
    ap.add_argument("-d", "--datatype", default="float32", choices=sorted(_DTYPES),
                    metavar="TYPE", help="float32 (default), " + ", ".join(sorted(_DTYPES)))
    ap.add_argument("-o", "--op", default="sum", choices=sorted(_OPS),
                    help="reduction op (default sum)")
    ap.add_argument("-r", "--root", type=int, default=0, help="root rank (default 0)")
    ap.add_argument("-J", "--json", metavar="FILE", help="also write the results as JSON")
    ns = ap.parse_args(argv)
    colls = []
    for name in ns.collective:
        name = _ALIASES.get(name, name)
        if name not in COLLECTIVES:
            ap.error(f"unknown collective {name!r}; choose from {', '.join(COLLECTIVES)}")
        colls.append(COLLECTIVES[name])
    if ns.stepfactor < 1 or (ns.stepfactor == 1 and ns.stepbytes < 1):
        ap.error("-f must be > 1, or -f 1 with -i > 0")
    if ns.iters < 1 or ns.warmup_iters < 0 or ns.minbytes > ns.maxbytes:
        ap.error("need -n >= 1, -w >= 0 and -b <= -e")
    sizes, s = [], ns.minbytes
    while s <= ns.maxbytes:
        sizes.append(s)
        s = s * ns.stepfactor if ns.stepfactor > 1 else s + ns.stepbytes
        if s == 0:
            break  # -b 0 with a factor would loop forever
    return Options(colls, sizes, ns.iters, ns.warmup_iters, bool(ns.check), _DTYPES[ns.datatype],
                   _OPS[ns.op], ns.root, ns.json)


def _fmt(v: float) -> str:
    return f"{v:.2f}" if v < 1e4 else f"{v:.1f}" if v < 1e5 else f"{v:.0f}"


class Harness:
    def __init__(self, comm: Any, opts: Options) -> None:
        self.comm, self.opts = comm, opts
        self.n, self.rank = comm.size, comm.rank
        self.np_dtype = _numpy_dtype(opts.dtype)
        self.itemsize = self.np_dtype.itemsize
        integer = self.np_dtype.kind in "iu"
        self.rtol = 0.0 if integer or opts.op != t.AVG else 2 * float(np.finfo(self.np_dtype).eps)
        self.red = _reducer(opts.op, integer)
        self._one = np.zeros(1, np.float64)
        self._wrong = np.zeros(1, np.int64)

    def _slowest(self, seconds: float) -> float:
        self._one[0] = seconds
        return float(self.comm.all_reduce(self._one, op=t.MAX)[0])

    def _total(self, wrong: int) -> int:
        self._wrong[0] = wrong
        return int(self.comm.all_reduce(self._wrong, op=t.SUM)[0])

    def run(self, coll: Collective, nbytes: int, send: np.ndarray, recv: np.ndarray) -> dict:
        """Times, and checks if asked, one size out of place (send -> recv) and in place (in
        recv). Both buffers hold at least nbytes."""
        o, r, isz = self.opts, self.rank, self.itemsize
        shape = coll.layout(nbytes // isz, self.n)
        elements = max(shape.send, shape.recv)
        op = o.op if coll.reduces else t.SUM
        root = o.root if coll.rooted else -1
        timer = self.comm._live().time_op
        sp, rp = send.__array_interface__["data"][0], recv.__array_interface__["data"][0]
        row: dict[str, Any] = {
            "collective": coll.name, "size": elements * isz, "count": elements,
            "type": t.DTYPE_NAMES[o.dtype], "redop": t.OP_NAMES[op] if coll.reduces else "none",
            "root": root,
        }
        for mode, s, d in (
            ("out_of_place", sp, rp),
            ("in_place", rp + shape.send_off * r * isz, rp + shape.recv_off * r * isz),
        ):
            args = (coll.name, s, d, shape.count, o.dtype, op, max(root, 0))
            if o.warmup:
                timer(*args, o.warmup)
            sec = self._slowest(timer(*args, o.iters) / o.iters)
            algbw = elements * isz / sec / 1e9 if sec > 0 else 0.0
            wrong = self._check(coll, mode, send, recv, args, shape) if o.check else None
            row[mode] = {"time_us": sec * 1e6, "algbw": algbw,
                         "busbw": algbw * coll.busbw_factor(self.n), "wrong": wrong}
        return row

    def _check(self, coll: Collective, mode: str, send: np.ndarray, recv: np.ndarray,
               args: tuple, shape: Shape) -> int:
        """Runs the call once more on fresh data; the wrong elements over all ranks."""
        n, r = self.n, self.rank
        gen = _generator(coll.reduces, self.opts.op, n)
        recv[: max(shape.send, shape.recv)] = SENTINEL
        if mode == "out_of_place":
            src, out = send[: shape.send], recv[: shape.recv]
        else:
            src = recv[shape.send_off * r: shape.send_off * r + shape.send]
            out = recv[shape.recv_off * r: shape.recv_off * r + shape.recv]
        src[:] = gen(0, shape.send, r).astype(self.np_dtype)
        self.comm._live().time_op(*args, 1)
        want = coll.expected(gen, self.red, n, r, self.opts.root, shape.count)
        wrong = 0 if want is None else _count_wrong(out, want, self.np_dtype, self.rtol)
        return self._total(wrong)


def main(argv: list[str] | None = None) -> int:
    opts = _parse(argv)
    _numpy_dtype(opts.dtype)  # fails now, not after every rank has joined
    comm = init()
    try:
        if not 0 <= opts.root < comm.size:
            raise SystemExit(f"accl.perf: -r {opts.root} is not a rank of {comm.size}")
        return _sweep(comm, opts)
    finally:
        comm.destroy()


def _sweep(comm: Any, opts: Options) -> int:
    h = Harness(comm, opts)
    top = opts.sizes[-1] // h.itemsize
    send = np.zeros(top, h.np_dtype)
    recv = np.zeros(top, h.np_dtype)
    lead = comm.rank == 0
    rows = []
    say = print if lead else (lambda *a, **k: None)
    say(f"# accl.perf: {comm.size} ranks, backend {comm.backend}, {opts.iters} iters, "
        f"{opts.warmup} warmup iters, check {int(opts.check)}")
    for coll in opts.collectives:
        say(f"#\n# {coll.name}\n#")
        say(f"# {'':53s}{'out-of-place':^34s}{'in-place':^34s}")
        say(f"# {'size':>10s}  {'count':>12s}  {'type':>11s}  {'redop':>6s}  {'root':>6s}"
            + f"  {'time':>8s}  {'algbw':>6s}  {'busbw':>6s}  {'#wrong':>6s}" * 2)
        say(f"# {'(B)':>10s}  {'(elements)':>12s}  {'':>11s}  {'':>6s}  {'':>6s}"
            + f"  {'(us)':>8s}  {'(GB/s)':>6s}  {'(GB/s)':>6s}  {'':>6s}" * 2)
        for nbytes in opts.sizes:
            row = h.run(coll, nbytes, send, recv)
            rows.append(row)
            line = (f"  {row['size']:10d}  {row['count']:12d}  {row['type']:>11s}  "
                    f"{row['redop']:>6s}  {row['root']:6d}")
            for mode in ("out_of_place", "in_place"):
                m = row[mode]
                wrong = "N/A" if m["wrong"] is None else str(m["wrong"])
                line += (f"  {_fmt(m['time_us']):>8s}  {m['algbw']:6.2f}  {m['busbw']:6.2f}"
                         f"  {wrong:>6s}")
            say(line, flush=True)
    busbws = [row[m]["busbw"] for row in rows for m in ("out_of_place", "in_place")]
    avg = sum(busbws) / len(busbws) if busbws else 0.0
    wrong = sum(row[m]["wrong"] or 0 for row in rows for m in ("out_of_place", "in_place"))
    say("#")
    say(f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}")
    say(f"# Avg bus bandwidth    : {avg:g}")
    if lead and opts.json_path:
        with open(opts.json_path, "w") as f:
            json.dump({"nranks": comm.size, "backend": comm.backend, "iters": opts.iters,
                       "warmup": opts.warmup, "check": opts.check,
                       "datatype": t.DTYPE_NAMES[opts.dtype], "op": t.OP_NAMES[opts.op],
                       "root": opts.root, "rows": rows, "wrong": wrong, "avg_busbw": avg},
                      f, indent=1)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
