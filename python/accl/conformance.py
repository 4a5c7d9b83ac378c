"""The backend conformance suite: a backend's results, checked against the cpu backend's.

    python -m accl.conformance --backend mpi
    python -m accl.conformance --backend myvendor --plugin ./libaccl-backend-myvendor.so -n 1,2,4

For each rank count (-n, default 1,2,3) it starts that many ranks: local processes, or one
mpirun for the mpi backend, whose ranks must be one MPI job. Every rank opens two communicators,
one on the backend under test and one on the cpu backend (the reference), and runs each case on
both with the same inputs: every collective x dtype x reduction op x size class, where the size
classes are 0 elements, 1, a small odd count (13, also in place) and an odd count above 1 MiB.
Rooted collectives use the last rank as root; send_recv is a ring inside a group. Outputs must
match bit for bit, except reductions over float types, whose order of reduction may differ:
those must agree within a few units in the last place of the type.

It prints one row per collective and dtype, one column per rank count, then the failures and
the reasons given for unsupported operations (a NotSupportedError is "unsupported", not a
failure). Exit status: 0 if nothing failed, 1 if something did, 2 if the suite could not run.
--device cuda (or hip) puts the tested backend's buffers in GPU memory, through the CUDA (HIP)
runtime opened with ctypes.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, NamedTuple

import numpy as np

from . import _accl
from . import _types as t
from .errors import AcclError, NotSupportedError

__all__ = ["Case", "cases", "main"]

COLLECTIVES = ("all_reduce", "reduce", "reduce_scatter", "broadcast", "all_gather",
               "all_to_all", "gather", "scatter", "send_recv", "barrier")
REDUCING = ("all_reduce", "reduce", "reduce_scatter")
DTYPES = tuple(t.DTYPE_NAMES[c] for c in range(12))
OPS = tuple(t.OP_NAMES[o] for o in (t.SUM, t.PROD, t.MAX, t.MIN, t.AVG))
SIZES = ("0", "1", "13", "13 in place", "1M+")  # size classes; 1M+ is (1 MiB / itemsize) + 1
_CODE = {name: code for code, name in t.DTYPE_NAMES.items()}
_OP_CODE = {name: code for code, name in t.OP_NAMES.items()}
_FLOATS = ("float16", "float32", "float64", "bfloat16", "float8_e4m3", "float8_e5m2")
# Allowed relative difference of float reductions (about 2 units in the last place).
_RTOL = {"float16": 2**-9, "float32": 2**-22, "float64": 2**-51, "bfloat16": 2**-6,
         "float8_e4m3": 2**-2, "float8_e5m2": 2**-1}
_BREAKING = (1, 2, 3, 6, 8)  # result codes after which a communicator is unusable
_SENTINEL = 0xA5  # fills receive buffers, so an output that is never written shows


class Case(NamedTuple):
    collective: str
    dtype: str  # "-" for barrier
    op: str  # "-" unless the collective reduces
    size: str  # one of SIZES, "-" for barrier

    def count(self) -> int:
        if self.size == "1M+":
            return (1 << 20) // t.ITEMSIZE[_CODE[self.dtype]] + 1
        return int(self.size.split()[0]) if self.size != "-" else 0


def cases(collectives=COLLECTIVES, dtypes=DTYPES, sizes=SIZES) -> list[Case]:
    """Every case, in the order every rank runs them."""
    out = []
    for coll in collectives:
        if coll == "barrier":
            out.append(Case("barrier", "-", "-", "-"))
            continue
        for dt in dtypes:
            for op in OPS if coll in REDUCING else ("-",):
                for size in sizes:
                    if not (size.endswith("in place") and coll == "send_recv"):
                        out.append(Case(coll, dt, op, size))
    return out


# ---------------------------------------------------------------- element encodings


def _fp8_table(e4m3: bool) -> np.ndarray:
    """The value of each of the 256 codes of an OCP fp8 type."""
    mbits, bias = (3, 7) if e4m3 else (2, 15)
    vals = np.empty(256)
    for code in range(256):
        exp, man = (code & 0x7F) >> mbits, code & ((1 << mbits) - 1)
        if e4m3 and exp == 15 and man == 7 or not e4m3 and exp == 31 and man:
            v = np.nan
        elif not e4m3 and exp == 31:
            v = np.inf
        elif exp == 0:
            v = man / (1 << mbits) * 2.0 ** (1 - bias)
        else:
            v = (1 + man / (1 << mbits)) * 2.0 ** (exp - bias)
        vals[code] = -v if code & 0x80 else v
    return vals


_FP8 = {"float8_e4m3": _fp8_table(True), "float8_e5m2": _fp8_table(False)}


def _encode(values: np.ndarray, dtype: str) -> np.ndarray:
    """Small integers (exact in every type) as the bytes of `dtype`."""
    if dtype in _FP8:
        codes = {float(v): c for c, v in enumerate(_FP8[dtype]) if c < 128 or v != 0}
        lut = np.array([codes[float(v)] for v in range(-4, 5)], np.uint8)
        return lut[values + 4]
    if dtype == "bfloat16":
        return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return values.astype(dtype).view(np.uint8)


def _decode(raw: np.ndarray, dtype: str) -> np.ndarray:
    if dtype in _FP8:
        return _FP8[dtype][raw]
    if dtype == "bfloat16":
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return raw.view(dtype).astype(np.float64)


def _compare(got: np.ndarray, want: np.ndarray, case: Case) -> str | None:
    """None if got matches want (the cpu backend's output), else what differs."""
    if np.array_equal(got, want):
        return None
    size = t.ITEMSIZE[_CODE[case.dtype]]
    is_float = case.dtype in _FLOATS
    g = _decode(got, case.dtype) if is_float else got.view(case.dtype)
    w = _decode(want, case.dtype) if is_float else want.view(case.dtype)
    if is_float and case.collective in REDUCING:
        tol = _RTOL[case.dtype] * np.maximum(np.abs(w), 1.0)
        ok = (np.abs(g - w) <= tol) | (np.isnan(g) & np.isnan(w)) | (g == w)
    else:  # moved data must arrive bit for bit
        ok = np.all(got.reshape(-1, size) == want.reshape(-1, size), axis=1)
    bad = np.flatnonzero(~ok)
    if not bad.size:
        return None
    i = bad[0]
    return f"{bad.size} of {ok.size} elements differ; first at {i}: got {g[i]}, expected {w[i]}"


# ---------------------------------------------------------------- memory


class _HostMemory:
    """Buffers in host memory (numpy arrays); addresses are what the C API takes."""

    def __init__(self) -> None:
        self._arrays: dict[int, np.ndarray] = {}

    def alloc(self, data: np.ndarray) -> int:
        a = data.copy() if data.size else np.zeros(1, np.uint8)
        self._arrays[a.ctypes.data] = a
        return a.ctypes.data

    def read(self, addr: int, offset: int, nbytes: int) -> np.ndarray:
        return self._arrays[addr][offset:offset + nbytes].copy()

    def sync(self) -> None:
        pass

    def free_all(self) -> None:
        self._arrays.clear()


class _DeviceMemory:
    """Buffers in GPU memory, through the CUDA or HIP runtime (opened with ctypes)."""

    _RUNTIMES = {
        "cuda": ("cuda", ("libcudart.so", "libcudart.so.13", "libcudart.so.12",
                          "libcudart.so.11.0")),
        "hip": ("hip", ("libamdhip64.so", "libamdhip64.so.6", "libamdhip64.so.5")),
    }

    @classmethod
    def devices(cls, kind: str) -> tuple[Any, int]:
        """The runtime library and how many devices it sees; raises RuntimeError if none."""
        prefix, names = cls._RUNTIMES[kind]
        # The library path first, then where pip's CUDA wheels and the toolkit keep it.
        dirs = ["", *glob.glob(os.path.join(sys.prefix, "lib", "python*", "site-packages",
                                            "nvidia", "*", "lib")),
                os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64"),
                "/opt/rocm/lib"]
        for path in (os.path.join(d, n) for d in dirs for n in names):
            try:
                lib = ctypes.CDLL(path)
                break
            except OSError:
                continue
        else:
            raise RuntimeError(f"--device {kind}: none of {', '.join(names)} can be loaded "
                               f"(looked on the library path and in {', '.join(dirs[1:])})")
        count = ctypes.c_int(0)
        rc = getattr(lib, prefix + "GetDeviceCount")(ctypes.byref(count))
        if rc != 0 or count.value < 1:
            raise RuntimeError(f"--device {kind}: no usable device ({prefix}GetDeviceCount "
                               f"returned error {rc}, {count.value} devices)")
        return lib, count.value

    def __init__(self, kind: str, local_rank: int) -> None:
        lib, count = self.devices(kind)
        prefix = self._RUNTIMES[kind][0]
        self._fn = lambda name: getattr(lib, prefix + name)
        self._check(self._fn("SetDevice")(local_rank % count), "SetDevice")
        self._ptrs: list[int] = []

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"device runtime call {what} failed with error {rc}")

    def alloc(self, data: np.ndarray) -> int:
        p = ctypes.c_void_p()
        self._check(self._fn("Malloc")(ctypes.byref(p), ctypes.c_size_t(max(data.size, 1))),
                    "Malloc")
        self._ptrs.append(p.value)
        if data.size:
            self._copy(p.value, data.ctypes.data, data.size, 1)  # host to device
        return p.value

    def _copy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        self._check(self._fn("Memcpy")(ctypes.c_void_p(dst), ctypes.c_void_p(src),
                                       ctypes.c_size_t(nbytes), kind), "Memcpy")

    def read(self, addr: int, offset: int, nbytes: int) -> np.ndarray:
        out = np.empty(nbytes, np.uint8)
        if nbytes:
            self._copy(out.ctypes.data, addr + offset, nbytes, 2)  # device to host
        return out

    def sync(self) -> None:
        self._check(self._fn("DeviceSynchronize")(), "DeviceSynchronize")

    def free_all(self) -> None:
        for p in self._ptrs:
            self._fn("Free")(ctypes.c_void_p(p))
        self._ptrs.clear()


# ---------------------------------------------------------------- one case on one communicator


class _Plan(NamedTuple):
    regions: list[np.ndarray]  # initial bytes of each buffer
    send: tuple[int, int] | None  # (region, byte offset) of sendbuff, None for NULL
    recv: tuple[int, int] | None
    result: tuple[int, int, int] | None  # (region, offset, bytes) to compare; None: no output


def _plan(case: Case, n: int, rank: int, data: Any) -> _Plan:
    """The buffers of `case` on `rank`; data(nbytes) gives this rank's input bytes."""
    coll, k = case.collective, case.count()
    b = k * t.ITEMSIZE[_CODE[case.dtype]] if case.dtype != "-" else 0
    root, inplace = n - 1, case.size.endswith("in place")

    def blank(nbytes: int) -> np.ndarray:
        return np.full(nbytes, _SENTINEL, np.uint8)

    def placed(nbytes: int, off: int, block: np.ndarray) -> np.ndarray:
        r = blank(nbytes)
        r[off:off + block.size] = block
        return r

    if coll == "barrier":
        return _Plan([], None, None, None)
    if coll in ("all_reduce", "all_to_all") or (coll == "reduce" and rank != root):
        m = b * n if coll == "all_to_all" else b
        result = None if coll == "reduce" else (0, 0, m)
        if inplace:
            return _Plan([data(m)], (0, 0), (0, 0), result)
        return _Plan([data(m), blank(m)], (0, 0), None if coll == "reduce" else (1, 0),
                     result and (1, 0, m))
    if coll == "reduce":  # at the root
        if inplace:
            return _Plan([data(b)], (0, 0), (0, 0), (0, 0, b))
        return _Plan([data(b), blank(b)], (0, 0), (1, 0), (1, 0, b))
    if coll == "broadcast":
        if rank != root:
            return _Plan([blank(b)], (0, 0) if inplace else None, (0, 0), (0, 0, b))
        if inplace:
            return _Plan([data(b)], (0, 0), (0, 0), (0, 0, b))
        return _Plan([data(b), blank(b)], (0, 0), (1, 0), (1, 0, b))
    if coll == "all_gather" or (coll == "gather" and rank == root):
        me = rank if coll == "all_gather" else root
        if inplace:
            return _Plan([placed(n * b, me * b, data(b))], (0, me * b), (0, 0), (0, 0, n * b))
        return _Plan([data(b), blank(n * b)], (0, 0), (1, 0), (1, 0, n * b))
    if coll == "gather":  # off the root
        return _Plan([data(b)], (0, 0), None, None)
    if coll == "reduce_scatter" or (coll == "scatter" and rank == root):
        me = rank if coll == "reduce_scatter" else root
        if inplace:
            return _Plan([data(n * b)], (0, 0), (0, me * b), (0, me * b, b))
        return _Plan([data(n * b), blank(b)], (0, 0), (1, 0), (1, 0, b))
    if coll == "scatter":  # off the root
        return _Plan([blank(b)], None, (0, 0), (0, 0, b))
    assert coll == "send_recv"
    return _Plan([data(b), blank(b)], (0, 0), (1, 0), (1, 0, b))


def _execute(comm: Any, mem: Any, case: Case, plan: _Plan, n: int, rank: int):
    """Runs `case` on `comm` with buffers in `mem`; returns the output bytes (or None)."""
    try:
        addrs = [mem.alloc(r) for r in plan.regions]

        def ptr(spec: tuple[int, int] | None) -> int:
            return 0 if spec is None else addrs[spec[0]] + spec[1]

        s, r, k, root = ptr(plan.send), ptr(plan.recv), case.count(), n - 1
        dt = _CODE.get(case.dtype, 0)
        op = _OP_CODE.get(case.op, 0)
        coll = case.collective
        if coll == "barrier":
            comm.barrier()
        elif coll == "all_reduce":
            comm.all_reduce(s, r, k, dt, op)
        elif coll == "reduce":
            comm.reduce(s, r, k, dt, op, root)
        elif coll == "reduce_scatter":
            comm.reduce_scatter(s, r, k, dt, op)
        elif coll == "broadcast":
            comm.broadcast(s, r, k, dt, root)
        elif coll == "all_gather":
            comm.all_gather(s, r, k, dt)
        elif coll == "all_to_all":
            comm.all_to_all(s, r, k, dt)
        elif coll == "gather":
            comm.gather(s, r, k, dt, root)
        elif coll == "scatter":
            comm.scatter(s, r, k, dt, root)
        else:
            _accl.group_start()
            try:
                comm.send(s, k, dt, (rank + 1) % n)
                comm.recv(r, k, dt, (rank - 1) % n)
            finally:
                _accl.group_end()
        mem.sync()
        if plan.result is None:
            return None
        region, off, nbytes = plan.result
        return mem.read(addrs[region], off, nbytes)
    finally:
        mem.free_all()


def _run_case(case: Case, ref: Any, test: Any, mem: Any, n: int, rank: int, data: Any):
    """(status, message, breaks the communicators) of one case on this rank."""
    plan = _plan(case, n, rank, data)
    try:
        want = _execute(ref, _HostMemory(), case, plan, n, rank)
    except AcclError as e:
        return "fail", f"the cpu reference failed: {e}", e.code in _BREAKING
    try:
        got = _execute(test, mem, case, plan, n, rank)
    except NotSupportedError as e:
        return "unsupported", str(e), False
    except AcclError as e:
        return "fail", str(e), e.code in _BREAKING
    if want is None:
        return "pass", "", False
    diff = _compare(got, want, case)
    return ("pass", "", False) if diff is None else ("fail", diff, False)


# ---------------------------------------------------------------- a rank


def _inputs(rank: int, n: int, dtypes: list[str]) -> dict[str, np.ndarray]:
    """This rank's input bytes per dtype: small integers, exact in every type, that differ
    from rank to rank, enough for the largest case."""
    rng = np.random.default_rng(1000 + rank)
    pool = {}
    for dt in dtypes:
        elems = n * ((1 << 20) // t.ITEMSIZE[_CODE[dt]] + 1)
        low = 0 if dt.startswith("uint") else -4
        pool[dt] = _encode(rng.integers(low, 5, elems), dt)
    return pool


def _worker(cfg_path: str, rank: int | None) -> int:
    with open(cfg_path) as f:
        cfg = json.load(f)
    if rank is None:  # under mpirun: the rank is the MPI world rank
        from ._env import rank_info

        rank = rank_info().rank
    n = cfg["ranks"]
    todo = cases(cfg["collectives"], cfg["dtypes"], cfg["sizes"])
    results: list[list[str]] = []
    report = {"rank": rank, "results": results, "backend": ""}

    def finish() -> int:
        with open(os.path.join(cfg["out"], f"rank{rank}.json"), "w") as f:
            json.dump(report, f)
        return 0

    ref = test = None
    try:
        mem = _HostMemory() if cfg["device"] == "host" else _DeviceMemory(cfg["device"], rank)
        ref = _accl.Comm(bytes.fromhex(cfg["ref_uid"]), rank, n, cfg["timeout"], "cpu")
        test = _accl.Comm(bytes.fromhex(cfg["test_uid"]), rank, n, cfg["timeout"], cfg["spec"])
        report["backend"] = test.backend
    except (AcclError, RuntimeError) as e:
        status = "unsupported" if isinstance(e, NotSupportedError) else "fail"
        why = f"could not create the communicators: {e}"
        results.extend([status, why] for _ in todo)
        if ref is not None:
            ref.abort()
        return finish()
    pool = _inputs(rank, n, cfg["dtypes"])
    broken = False
    for case in todo:
        if broken:
            results.append(["not run", "an earlier failure broke the communicator"])
            continue
        raw = pool.get(case.dtype)
        status, message, broken = _run_case(case, ref, test, mem, n, rank,
                                            lambda nbytes: raw[:nbytes])
        results.append([status, message])
    for comm in (test, ref):
        if broken:
            comm.abort()
        else:
            comm.destroy()
    return finish()


# ---------------------------------------------------------------- the launcher


def _mpirun() -> list[str]:
    path = shutil.which("mpirun", path=os.pathsep.join(
        [os.path.dirname(sys.executable), os.environ.get("PATH", "")]))
    if path is None:
        raise RuntimeError("mpirun is not on the PATH (ranks of the mpi backend are one MPI job)")
    cmd = [path]
    version = subprocess.run([path, "--version"], capture_output=True, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version or "prte" in version.lower():
        # More ranks than cores is fine for a test; the ranks need the caller's PYTHONPATH.
        cmd += ["--oversubscribe", "-x", "PYTHONPATH"]
        cmd += ["--allow-run-as-root"] if os.geteuid() == 0 else []
    return cmd


# Variables of MPI launchers: a local rank must not believe it belongs to the caller's MPI job.
_MPI_VARS = re.compile(r"^(OMPI_|PMIX_|PMI_|PRTE_|SLURM_)")


def _run_ranks(cfg: dict, n: int, launcher: str, out: str) -> list[dict | None]:
    """Starts the n ranks of one rank count and collects their reports (None: no report)."""
    uid_ref, uid_test = _accl.get_unique_id(), _accl.get_unique_id()
    cfg = dict(cfg, ranks=n, ref_uid=uid_ref.hex(), test_uid=uid_test.hex(), out=out)
    cfg_path = os.path.join(out, "config.json")
    with open(cfg_path, "w") as f:
        json.dump(cfg, f)
    env = dict(os.environ)
    pkg_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (pkg_parent, env.get("PYTHONPATH")) if p)
    worker = [sys.executable, "-m", "accl.conformance", "--worker", cfg_path]
    if launcher == "mpirun":
        procs = [subprocess.Popen(_mpirun() + ["-n", str(n)] + worker,
                                  env=env, stdout=subprocess.DEVNULL)]
    else:
        env = {k: v for k, v in env.items() if not _MPI_VARS.match(k)}
        procs = [subprocess.Popen(worker + ["--rank", str(r)], env=env, stdout=subprocess.DEVNULL)
                 for r in range(n)]
    deadline = time.monotonic() + 60 + 10 * cfg["timeout"]
    for p in procs:
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            for q in procs:
                q.wait()
            break
    reports: list[dict | None] = []
    for r in range(n):
        try:
            with open(os.path.join(out, f"rank{r}.json")) as f:
                reports.append(json.load(f))
        except (OSError, ValueError):
            reports.append(None)
    return reports


def _merge(reports: list[dict | None], index: int) -> tuple[str, str]:
    """One case's status over all ranks, and its message."""
    per_rank = []
    for r, rep in enumerate(reports):
        if rep is None:
            per_rank.append((r, "fail", "the rank did not report (crashed or timed out)"))
        else:
            per_rank.append((r, *rep["results"][index]))
    statuses = {s for _, s, _ in per_rank}
    for want in ("fail", "not run"):
        for r, s, m in per_rank:
            if s == want:
                return s, f"rank {r}: {m}"
    if statuses == {"unsupported"}:
        return "unsupported", per_rank[0][2]
    if "unsupported" in statuses:
        said = [r for r, s, _ in per_rank if s == "unsupported"]
        return "fail", f"only ranks {said} said unsupported: {per_rank[said[0]][2]}"
    return "pass", ""


def _cell(statuses: list[str]) -> str:
    total, npass = len(statuses), statuses.count("pass")
    if "fail" in statuses:
        return f"FAIL {statuses.count('fail')}/{total}"
    if "not run" in statuses:
        return "not run"
    if npass == total:
        return "pass"
    return "unsupported" if npass == 0 else f"pass {npass}/{total}"


def _reason(message: str) -> str:
    # Drop the part that varies from call to call: "acclAllReduce: rank 0/2 (mpi) #12: ".
    return re.sub(r"^(rank \d+: )?(accl\w+: )?rank \d+/\d+ \(\S+\)( #\d+)?: ", "", message)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m accl.conformance",
                                 description="Check a backend against the cpu backend.")
    ap.add_argument("--backend", help="name of the backend under test (cpu, mpi, nccl, ...)")
    ap.add_argument("--plugin", help="path of its plugin library (default: found by name)")
    ap.add_argument("-n", "--ranks", default="1,2,3", help="rank counts, comma separated")
    ap.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma separated")
    ap.add_argument("--dtypes", default=",".join(DTYPES), help="comma separated")
    ap.add_argument("--sizes", default=",".join(SIZES), help="size classes, comma separated")
    ap.add_argument("--launcher", choices=("auto", "local", "mpirun"), default="auto",
                    help="how ranks start (auto: mpirun for the mpi backend, else local)")
    ap.add_argument("--device", choices=("host", "cuda", "hip"), default="host",
                    help="memory of the tested backend's buffers")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds any call may block")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ns = ap.parse_args(argv)
    if ns.worker:
        return ns
    if not ns.backend:
        ap.error("--backend is required")
    for name, allowed in (("collectives", COLLECTIVES), ("dtypes", DTYPES), ("sizes", SIZES)):
        chosen = [x.strip() for x in getattr(ns, name).split(",") if x.strip()]
        unknown = [x for x in chosen if x not in allowed]
        if unknown or not chosen:
            ap.error(f"--{name}: unknown {unknown}; choose from {', '.join(allowed)}")
        setattr(ns, name, chosen)
    try:
        ns.ranks = [int(x) for x in ns.ranks.split(",")]
    except ValueError:
        ap.error(f"-n: expected rank counts such as 1,2,4, got {ns.ranks!r}")
    if any(r < 1 for r in ns.ranks):
        ap.error("-n: rank counts must be at least 1")
    return ns


def main(argv: list[str] | None = None) -> int:
    ns = _parse(argv)
    if ns.worker:
        return _worker(ns.worker, ns.rank)
    from .info import backend_info

    spec = ns.plugin or ns.backend
    info = backend_info(spec)
    if not info.available:
        print(f"accl.conformance: backend {spec} is not available: {info.path}", file=sys.stderr)
        return 2
    if ns.device != "host":
        try:
            _DeviceMemory.devices(ns.device)
        except RuntimeError as e:
            print(f"accl.conformance: {e}", file=sys.stderr)
            return 2
    launcher = ns.launcher
    if launcher == "auto":
        launcher = "mpirun" if ns.backend == "mpi" else "local"
    cfg = {"spec": spec, "timeout": ns.timeout, "device": ns.device,
           "collectives": ns.collectives, "dtypes": ns.dtypes, "sizes": ns.sizes}
    todo = cases(ns.collectives, ns.dtypes, ns.sizes)
    print(f"backend {ns.backend} {info.version_string} ({info.path}), reference cpu, "
          f"{len(todo)} cases per rank count, ranks {','.join(map(str, ns.ranks))}", flush=True)
    merged: dict[int, list[tuple[str, str]]] = {}
    start = time.monotonic()
    for n in ns.ranks:
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="accl-conformance-") as out:
            try:
                reports = _run_ranks(cfg, n, launcher, out)
            except (OSError, RuntimeError) as e:
                print(f"accl.conformance: cannot start {n} ranks: {e}", file=sys.stderr)
                return 2
        named = {rep["backend"] for rep in reports if rep and rep["backend"]}
        if named - {ns.backend}:
            print(f"accl.conformance: warning: {spec} is backend {sorted(named)}, not "
                  f"{ns.backend}", file=sys.stderr)
        merged[n] = [_merge(reports, i) for i in range(len(todo))]
        print(f"ranks={n}: {len(todo)} cases in {time.monotonic() - t0:.1f} s", flush=True)
    _report(ns, todo, merged, time.monotonic() - start)
    return 1 if any(s in ("fail", "not run") for m in merged.values() for s, _ in m) else 0


def _report(ns: argparse.Namespace, todo: list[Case], merged: dict, seconds: float) -> None:
    rows: dict[tuple[str, str], list[int]] = {}
    for i, c in enumerate(todo):
        rows.setdefault((c.collective, c.dtype), []).append(i)
    print()
    print(f"{'collective':<16}{'dtype':<13}" + "".join(f"{f'ranks={n}':<14}" for n in ns.ranks))
    for (coll, dt), idx in rows.items():
        cells = [_cell([merged[n][i][0] for i in idx]) for n in ns.ranks]
        print(f"{coll:<16}{dt:<13}" + "".join(f"{c:<14}" for c in cells))
    counts = {s: 0 for s in ("pass", "unsupported", "fail", "not run")}
    failures: dict[tuple[int, str], list[str]] = {}
    reasons: dict[str, int] = {}
    for n in ns.ranks:
        for c, (status, message) in zip(todo, merged[n]):
            counts[status] += 1
            if status in ("fail", "not run"):
                where = f"{c.collective} {c.dtype} {c.op} count={c.size}"
                failures.setdefault((n, _reason(message)), []).append(where)
            elif status == "unsupported":
                key = _reason(message)
                reasons[key] = reasons.get(key, 0) + 1
    if reasons:
        print("\nunsupported (cases: reason):")
        for why, k in sorted(reasons.items(), key=lambda kv: -kv[1])[:12]:
            print(f"  {k}: {why}")
    if failures:
        print(f"\nfailures ({counts['fail'] + counts['not run']} cases; one line per reason):")
        for (n, why), where in list(failures.items())[:40]:
            more = f" and {len(where) - 1} more cases" if len(where) > 1 else ""
            print(f"  {where[0]} ranks={n}{more}: {why}")
        if len(failures) > 40:
            print(f"  ... and {len(failures) - 40} more reasons")
    print(f"\n{ns.backend}: {counts['pass']} passed, {counts['unsupported']} unsupported, "
          f"{counts['fail']} failed, {counts['not run']} not run in {seconds:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
