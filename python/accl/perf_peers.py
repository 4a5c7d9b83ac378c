"""The libraries accl-perf compares accl with, behind the interface of perf.AcclRunner.

Each runner turns a perf.Call (numpy views in nccl-tests' layout) into the library's own call
and times `iters` of them from a barrier, with the library's clock. Where a library has only an
in-place form of a call (torch's all_reduce, broadcast and reduce, MPI's Bcast), the
out-of-place form copies the input into the output first, as a user of that library must, and
that copy is timed. Where it has no form with nccl-tests' layout, the call is NotAvailable.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from . import _types as t
from ._env import rank_info
from .perf import Call, NotAvailable


class GlooRunner:
    """torch.distributed over gloo, on the ranks of a launcher that sets MASTER_ADDR, MASTER_PORT,
    RANK and WORLD_SIZE (accl.launch, torchrun). With backend "accl" (library "torch-accl"), the
    same calls go through accl's torch backend: what a torch program gets from accl."""

    library = backend = "gloo"

    def __init__(self, backend: str = "gloo") -> None:
        import torch
        import torch.distributed as dist

        if backend != "gloo":
            import accl.distributed  # noqa: F401  (registers "accl")

            self.library, self.backend = f"torch-{backend}", backend
        # One intra-op thread: the copy of the out-of-place form (all_reduce) is memory-bound,
        # and torch's OpenMP workers, spinning for work, took the cores from the library's own
        # threads: on 2 cores a 512 KiB copy_ then cost 20 ms instead of 0.1.
        torch.set_num_threads(1)
        self.torch, self.dist = torch, dist
        dist.init_process_group(self.backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        R = dist.ReduceOp
        self.ops = {t.SUM: R.SUM, t.PROD: R.PRODUCT, t.MAX: R.MAX, t.MIN: R.MIN, t.AVG: R.AVG}
        self._one = torch.zeros(1, dtype=torch.float64)

    def _bind(self, c: Call) -> Callable[[], Any]:
        dist, n, me, root = self.dist, self.size, self.rank, c.root
        src, out = self.torch.from_numpy(c.src), self.torch.from_numpy(c.out)
        op, k = self.ops[c.op], c.count
        oop = not c.in_place
        blocks = [i * k for i in range(n)]
        if c.name == "all_reduce":
            return lambda: (oop and out.copy_(src), dist.all_reduce(out, op))
        if c.name == "all_gather":
            return lambda: dist.all_gather_single(out, src)
        if c.name == "reduce_scatter":
            return lambda: dist.reduce_scatter_single(out, src, op)
        if c.name == "broadcast":
            return lambda: (oop and me == root and out.copy_(src), dist.broadcast(out, root))
        if c.name == "reduce":
            return lambda: (oop and out.copy_(src), dist.reduce(out, root, op))
        if c.name == "alltoall" and oop:
            return lambda: dist.all_to_all_single(out, src)
        if c.name == "gather":
            parts = [out[b: b + k] for b in blocks] if me == root else None
            return lambda: dist.gather(src, parts, dst=root)
        if c.name == "scatter":
            parts = [src[b: b + k] for b in blocks] if me == root else None
            return lambda: dist.scatter(out, parts, src=root)
        if c.name == "sendrecv" and oop:
            pair = [dist.P2POp(dist.isend, src, (me + 1) % n),
                    dist.P2POp(dist.irecv, out, (me - 1) % n)]
            return lambda: [w.wait() for w in dist.batch_isend_irecv(pair)]
        # In place, gloo's all-to-all and send/recv overwrite the input they still read from.
        raise NotAvailable(f"gloo has no {c.name} in place")

    def time(self, c: Call, iters: int) -> float:
        once = self._bind(c)
        self.dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            once()
        return time.perf_counter() - t0

    def _reduce(self, x: float, op: Any) -> float:
        self._one[0] = x
        self.dist.all_reduce(self._one, op)
        return float(self._one[0])

    def max(self, x: float) -> float:
        return self._reduce(x, self.dist.ReduceOp.MAX)

    def sum(self, x: float) -> float:
        return self._reduce(x, self.dist.ReduceOp.SUM)

    def close(self) -> None:
        self.dist.destroy_process_group()


def mpi_loop(library: str) -> str:
    """Where `make build` puts the C loop of the MPI runner (perf/mpi/mpi_loop.c) built against
    the MPI that `library` names: beside that MPI's libmpi."""
    prefix = os.path.join(sys.prefix, "mpich") if library == "mpich" else sys.prefix
    return os.path.join(prefix, "lib", "libaccl_mpi_loop.so")


class MpiRunner:
    """mpi4py's MPI.COMM_WORLD (under mpirun) with numpy buffers; `library` names the MPI in the
    tables: "mpi" (Open MPI) or "mpich". mpi4py starts MPI and makes the barriers and the
    reductions of the harness; the timed loop is the C one of `mpi_loop`, as accl's is C++, so
    that neither library's figure carries Python's cost per call."""

    # accl's element types that MPI has (no 16- or 8-bit floats), and its reductions (no average)
    TYPES = (t.INT8, t.UINT8, t.INT32, t.UINT32, t.INT64, t.UINT64, t.FLOAT32, t.FLOAT64)
    OPS = (t.SUM, t.PROD, t.MAX, t.MIN)

    def __init__(self, library: str = "mpi") -> None:
        from mpi4py import MPI

        self.library = library
        self.MPI, self.comm = MPI, MPI.COMM_WORLD
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()
        self.backend = MPI.Get_library_version().splitlines()[0].split(",")[0].strip()
        lib = ctypes.CDLL(mpi_loop(library))
        if not lib.accl_mpi_ready():
            raise SystemExit(f"accl.perf: {mpi_loop(library)} links another MPI than the one "
                             f"mpi4py started ({self.backend})")
        lib.accl_mpi_time.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                                      ctypes.c_long, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                      ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
        self.lib = lib

    def time(self, c: Call, iters: int) -> float:
        # The sweep fails on its first call rather than report another type or reduction.
        if c.dtype not in self.TYPES:
            raise SystemExit(f"accl.perf: MPI has no {t.DTYPE_NAMES[c.dtype]}")
        if c.op not in self.OPS:
            raise SystemExit(f"accl.perf: MPI has no {t.OP_NAMES[c.op]} reduction")
        if c.count > 2**31 - 1:
            raise SystemExit(f"accl.perf: {c.count} elements is more than MPI's int count")
        out = ctypes.c_double()
        code = self.lib.accl_mpi_time(c.name.encode(), c.src.ctypes.data, c.out.ctypes.data,
                                      c.count, c.dtype, c.op, c.root, int(c.in_place), iters,
                                      ctypes.byref(out))
        if code == 1:
            raise NotAvailable(f"MPI has no {c.name} in place with nccl-tests' layout")
        if code:
            raise RuntimeError(f"MPI {c.name}: error {code} on rank {self.rank}")
        return out.value

    def max(self, x: float) -> float:
        return float(self.comm.allreduce(x, op=self.MPI.MAX))

    def sum(self, x: float) -> float:
        return float(self.comm.allreduce(x, op=self.MPI.SUM))

    def close(self) -> None:
        pass  # mpi4py finalizes MPI at exit


def oneccl_shim() -> str:
    """Where `make oneccl` puts the shim over oneCCL (perf/oneccl/oneccl_shim.cc)."""
    return os.path.join(sys.prefix, "oneccl", "liboneccl_shim.so")


# oneCCL's settings for the sweep, unless the environment sets them otherwise.
ONECCL_ENV = {
    # libfabric (the ofi transport; oneCCL's mpi one needs an MPI launcher), with its shm
    # provider between the ranks of the node instead of TCP over the network interface.
    "CCL_ATL_TRANSPORT": "ofi",
    "CCL_ATL_SHM": "1",
    # The calling thread drives the collective. oneCCL's default, a worker thread per rank
    # that the caller waits on, took 10 to 40 ms for a 32 B all-reduce on 2 cores.
    "CCL_WORKER_OFFLOAD": "0",
    # The local rank and count from LOCAL_RANK and LOCAL_WORLD_SIZE, which accl.launch sets.
    "CCL_PROCESS_LAUNCHER": "torchrun",
    "CCL_ENABLE_OMP_COLL": "0",  # they need the mpi transport, and warn otherwise
    "CCL_LOG_LEVEL": "error",  # every setting above that differs from the default warns
}


class OnecclRunner:
    """Intel oneCCL's C++ API through the shim of `make oneccl` (ctypes), on the ranks of
    accl.launch or torchrun, on one node. The ranks find oneCCL's key-value store through a file
    in the temporary directory named after the launch (ACCL_UNIQUE_ID, else MASTER_ADDR and
    MASTER_PORT) and the launcher's pid, the ranks' parent: a crashed run's file on a reused
    port is not taken for this run's."""

    library = "oneccl"

    def __init__(self) -> None:
        for k, v in ONECCL_ENV.items():
            os.environ.setdefault(k, v)  # before oneCCL reads them, when the shim loads
        lib = ctypes.CDLL(oneccl_shim())
        lib.oneccl_error.restype = lib.oneccl_version.restype = ctypes.c_char_p
        lib.oneccl_init.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_double]
        lib.oneccl_time.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                    ctypes.c_int, ctypes.POINTER(ctypes.c_double)]
        lib.oneccl_reduce_double.argtypes = [ctypes.POINTER(ctypes.c_double), ctypes.c_int]
        self.lib = lib
        info = rank_info()
        self.rank, self.size = info.rank, info.size
        env = os.environ
        launch = env.get("ACCL_UNIQUE_ID") or f"{env.get('MASTER_ADDR')}:{env.get('MASTER_PORT')}"
        if launch == "None:None":
            raise SystemExit("accl.perf: oneccl needs accl.launch or torchrun (MASTER_PORT)")
        key = hashlib.sha1(f"{launch} {os.getppid()}".encode()).hexdigest()[:16]
        path = os.path.join(tempfile.gettempdir(), f"accl-perf-oneccl-{key}")
        self._check(lib.oneccl_init(self.rank, self.size, path.encode(), 60.0), "init")
        self.backend = f"oneCCL {lib.oneccl_version().decode()} {env['CCL_ATL_TRANSPORT']}"
        self._one = ctypes.c_double()

    def _check(self, code: int, what: str) -> None:
        if code < 0:
            raise RuntimeError(f"oneCCL {what}: {self.lib.oneccl_error().decode()}")

    def time(self, c: Call, iters: int) -> float:
        if c.dtype in (t.FLOAT8_E4M3, t.FLOAT8_E5M2):
            raise SystemExit(f"accl.perf: oneCCL has no {t.DTYPE_NAMES[c.dtype]}")
        if c.op == t.AVG:  # only on its GPU path; the sweep fails rather than report a sum
            raise SystemExit("accl.perf: oneCCL has no avg reduction on the CPU")
        if c.name == "sendrecv" and c.in_place:  # oneCCL would receive over what it still sends
            raise NotAvailable("oneCCL has no sendrecv in place")
        out = ctypes.c_double()
        code = self.lib.oneccl_time(c.name.encode(), c.src.ctypes.data, c.out.ctypes.data,
                                    c.count, c.dtype, c.op, c.root, iters, ctypes.byref(out))
        if code == 1:
            raise NotAvailable(f"oneCCL has no {c.name}")
        self._check(code, c.name)
        return out.value

    def _reduce(self, x: float, op: int) -> float:
        self._one.value = x
        self._check(self.lib.oneccl_reduce_double(ctypes.byref(self._one), op), "all_reduce")
        return self._one.value

    def max(self, x: float) -> float:
        return self._reduce(x, t.MAX)

    def sum(self, x: float) -> float:
        return self._reduce(x, t.SUM)

    def close(self) -> None:
        self.lib.oneccl_finalize()
