"""Communicator: the Python face of an accl communicator, and the group() context manager.

Array arguments are numpy arrays, cpu torch tensors, DLPack objects or buffer-protocol objects
(see _buffers). Element counts and dtypes of x and out must agree as each method describes; a
mismatch raises InvalidArgumentError before any data moves, and the communicator stays usable.

Every collective works in place by default, with NCCL's in-place layouts; out= makes it out of
place. Each returns the array that holds its result on this rank (x, out, or a view of the
block of x that received it), or None where the rank receives nothing (reduce and gather off
the root). Arguments that only the root reads may be None on the other ranks when out= is given.

bool arrays travel as uint8. Reductions over bool follow torch.distributed: SUM is logical or
(MAX), PROD is logical and (MIN), MAX and MIN keep their meaning, AVG is an error.

Inside group(), calls are queued and run at the outermost group end: the arrays passed to them
are kept alive until then, but their contents are not final before it.
"""

from __future__ import annotations

import json
import numbers
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from . import _accl
from . import _types as t
from ._buffers import block, parse, wire
from .errors import AcclError, InvalidArgumentError, InvalidUsageError

__all__ = ["Communicator", "get_unique_id", "group", "group_start", "group_end"]

_NAMES = t.DTYPE_NAMES
_ITEMSIZE = t.ITEMSIZE


def get_unique_id() -> bytes:
    """A new 128-byte id for one communicator; give the same bytes to every rank.

    Unless ACCL_COMM_ID=host:port is set, this process hosts the rendezvous and must live until
    every rank has joined.
    """
    return _accl.get_unique_id()


def host_empty(shape: int | tuple[int, ...], dtype: Any = "float32") -> Any:
    """A zeroed numpy array in host memory that the ranks of a node share (acclHostAlloc).

    Any array works with every call. As a collective's input or output on the cpu backend, this
    one lets the peers on the node copy to and from it directly instead of through the kernel
    (docs/api.md). The memory is freed with the array's last reference.
    """
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    data = _accl.HostBuffer(max(1, count * dt.itemsize))
    return np.frombuffer(data, dt, count).reshape(shape)


class _GroupState(threading.local):
    def __init__(self) -> None:
        self.depth = 0
        self.keep: list[Any] = []


_group = _GroupState()


def group_start() -> None:
    """Starts queuing this thread's calls (groups nest); prefer ``with accl.group():``."""
    _accl.group_start()
    _group.depth += 1


def group_end() -> None:
    """Ends a group; the outermost end runs the queued calls and reports their errors."""
    try:
        _accl.group_end()
    finally:
        if _group.depth:
            _group.depth -= 1
            if not _group.depth:
                _group.keep.clear()


@contextmanager
def group() -> Iterator[None]:
    """Queues the calls in its body and runs them together at its end (NCCL group semantics)."""
    group_start()
    try:
        yield
    except BaseException:
        try:
            group_end()
        except AcclError:
            pass  # the body's exception says what went wrong first; report that one
        raise
    group_end()


def _mismatch(name: str, count: int, dtype: int, want_count: int, want_dtype: int) -> None:
    if count != want_count or dtype != want_dtype:
        raise InvalidArgumentError(
            f"{name}: expected {want_count} elements of {_NAMES[want_dtype]}, "
            f"got {count} of {_NAMES[dtype]}"
        )


def _output(obj: Any, name: str, count: int, dtype: int) -> tuple[Any, int]:
    view, ptr, n, dt, writable = parse(obj, name)
    _mismatch(name, n, dt, count, dtype)
    if not writable:
        raise InvalidArgumentError(f"{name} is read-only")
    return view, ptr


def _inplace(obj: Any, name: str) -> tuple[Any, int, int, int]:
    view, ptr, n, dt, writable = parse(obj, name)
    if not writable:
        raise InvalidArgumentError(f"{name} is read-only")
    return view, ptr, n, dt


def _same_size(x: Any, out: Any) -> tuple[Any, int, Any, int, int, int]:
    """x, and out (default x) of its size and type: views and addresses of both, count, type."""
    if out is None:
        xv, xp, n, dt = _inplace(x, "x")
        return xv, xp, xv, xp, n, dt
    xv, xp, n, dt, _ = parse(x, "x")
    ov, op_ = _output(out, "out", n, dt)
    return xv, xp, ov, op_, n, dt


def _blocks(name: str, count: int, size: int) -> int:
    if count % size:
        raise InvalidArgumentError(
            f"{name}: {count} elements do not split into {size} equal blocks, one per rank"
        )
    return count // size


def _reduction(dtype: int, op: int) -> tuple[int, int]:
    # `type(op) is int` first: the ABC check alone costs 0.3 us a call.
    if type(op) is not int and (isinstance(op, bool) or not isinstance(op, numbers.Integral)):
        # e.g. an output array passed where op goes: reduce_scatter(x, out) instead of out=out
        raise InvalidArgumentError(
            f"op: expected accl.SUM, PROD, MAX, MIN or AVG, got {type(op).__name__}"
        )
    if dtype != t.BOOL:
        return dtype, op
    if op == t.MAX or op == t.MIN:
        return t.UINT8, op
    if op == t.SUM:
        return t.UINT8, t.MAX
    if op == t.PROD:
        return t.UINT8, t.MIN
    raise InvalidArgumentError(
        f"op {t.OP_NAMES.get(op, op)} is not defined for bool; use SUM (or), PROD (and), MAX "
        "or MIN"
    )


def _unique_id_bytes(unique_id: bytes | str) -> bytes:
    if isinstance(unique_id, str):
        try:
            uid = bytes.fromhex(unique_id)
        except ValueError:
            raise InvalidArgumentError("unique_id: not a hex string") from None
    elif isinstance(unique_id, (bytes, bytearray, memoryview)):
        uid = bytes(unique_id)
    else:
        raise InvalidArgumentError(
            f"unique_id: expected bytes or a hex string, got {type(unique_id).__name__}"
        )
    if len(uid) != 128:
        raise InvalidArgumentError(
            f"unique_id: expected the 128 bytes of accl.get_unique_id(), got {len(uid)}"
        )
    return uid


class Communicator:
    """One rank's member of an accl communicator.

    ``unique_id`` is the same accl.get_unique_id() value on every rank (bytes, or its hex
    string); ``timeout`` is the seconds any call may block (None: ACCL_TIMEOUT, default 600);
    ``backend`` names the backend (None: ACCL_BACKEND; unset, the backend follows the buffers'
    memory: "cpu", or "nccl" for CUDA device memory, see docs/api.md). Creating it blocks until
    all ``size`` ranks have joined. Use it as a context manager to destroy it on exit.
    """

    __slots__ = ("_comm", "_rank", "_size", "_backend", "__weakref__")

    def __init__(
        self,
        unique_id: bytes | str,
        rank: int,
        size: int,
        timeout: float | None = None,
        backend: str | None = None,
    ) -> None:
        uid = _unique_id_bytes(unique_id)
        self._set(_accl.Comm(uid, rank, size, 0.0 if timeout is None else float(timeout), backend))

    def _set(self, comm: Any) -> None:
        self._comm = comm
        # Cached so that repr() and error messages still work after destroy().
        self._rank: int = comm.rank
        self._size: int = comm.size
        self._backend: str = comm.backend

    @classmethod
    def _wrap(cls, comm: Any) -> Communicator:
        self = cls.__new__(cls)
        self._set(comm)
        return self

    @classmethod
    def from_mpi(
        cls, mpi_comm: Any, timeout: float | None = None, backend: str | None = None
    ) -> Communicator:
        """A communicator over the ranks of an mpi4py communicator (collective over it)."""
        rank = mpi_comm.Get_rank()
        uid = mpi_comm.bcast(get_unique_id() if rank == 0 else None, root=0)
        return cls(uid, rank, mpi_comm.Get_size(), timeout, backend)

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    @property
    def backend(self) -> str:
        """The backend's name; "auto" until the first collective's buffers choose it."""
        if self._backend == "auto" and self._comm is not None:
            self._backend = self._comm.backend
        return self._backend

    @property
    def timeout(self) -> float:
        """The seconds any call may block. Setting it (local to this rank) applies from the next
        call on; communicators split later inherit it."""
        return float(self._live().timeout)

    @timeout.setter
    def timeout(self, seconds: float) -> None:
        self._live().timeout = float(seconds)

    def __repr__(self) -> str:
        state = "" if self._comm is not None else ", destroyed"
        return f"<accl.Communicator rank {self._rank} of {self._size}, {self.backend}{state}>"

    def __enter__(self) -> Communicator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.destroy()

    def _live(self) -> Any:
        comm = self._comm
        if comm is None:
            raise InvalidUsageError(
                f"the communicator (rank {self._rank} of {self._size}) was destroyed"
            )
        return comm

    def _check_rank(self, value: int, what: str) -> None:
        if not 0 <= value < self._size:
            raise InvalidArgumentError(
                f"{what} {value} is out of range for a communicator of {self._size} ranks"
            )

    # ------------------------------------------------------------------ lifetime

    def destroy(self) -> None:
        """Frees this rank's resources (local; idempotent)."""
        comm, self._comm = self._comm, None
        if comm is not None:
            comm.destroy()

    def abort(self) -> None:
        """Wakes any call blocked on the communicator, from any thread, and frees it."""
        comm, self._comm = self._comm, None
        if comm is not None:
            comm.abort()

    def finalize(self) -> None:
        """Collective: waits until every rank has finished; only destroy() is valid after."""
        self._live().finalize()

    def async_error(self) -> int:
        """The communicator's error state as an acclResult_t code (0 when healthy)."""
        return self._live().async_error()

    def dump_trace(self, path: str | None = None) -> dict[str, Any]:
        """The flight recorder: this rank's last ACCL_TRACE_BUFFER operations with their state
        and times, as a dict; also written to `path` as JSON when given (the format
        ``python -m accl.trace DIR`` reads, as ACCL_TRACE_DIR's automatic dumps)."""
        text = self._live().trace()
        if path is not None:
            with open(path, "w") as f:
                f.write(text)
        return json.loads(text)

    def split(self, color: int | None, key: int | None = None) -> Communicator | None:
        """Collective: ranks with the same color form a new communicator, ordered by key (default:
        this rank). Ranks passing color None get None."""
        comm = self._live()
        new = comm.split(-1 if color is None else color, self._rank if key is None else key)
        return None if new is None else Communicator._wrap(new)

    # ------------------------------------------------------------------ collectives

    def barrier(self) -> None:
        self._live().barrier()

    def all_reduce(self, x: Any, op: int = t.SUM, out: Any = None) -> Any:
        """out (default x) = op over ranks of x, elementwise."""
        # Plain numpy arrays outside a group (which keeps its calls' buffers alive) are checked
        # and taken in C++ (_accl.*_arrays); anything else is checked here.
        if not _group.depth and _accl.all_reduce_arrays(self._comm, x, out, op):
            return x if out is None else out
        comm = self._live()
        res = x if out is None else out
        xv, xp, ov, op_, n, dt = _same_size(x, out)
        wdt, wop = _reduction(dt, op)
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.all_reduce(xp, op_, n, wdt, wop)
        return res

    def broadcast(self, x: Any, root: int = 0, out: Any = None) -> Any:
        """Copies the root's x into x (default) or out on every rank; x is read only at root."""
        if not _group.depth and _accl.broadcast_arrays(self._comm, x, out, root):
            return x if out is None else out
        comm = self._live()
        self._check_rank(root, "root")
        if out is None:
            xv, xp, n, dt = _inplace(x, "x")
            ov, op_ = xv, xp
            res = x
        else:
            ov, op_, n, dt, writable = parse(out, "out")
            if not writable:
                raise InvalidArgumentError("out is read-only")
            xv, xp = ov, op_  # off the root x is not read: NCCL's sendbuff == recvbuff
            if self._rank == root:
                xv, xp, xn, xdt, _ = parse(x, "x")
                _mismatch("out", n, dt, xn, xdt)
            res = out
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.broadcast(xp, op_, n, wire(dt), root)
        return res

    def reduce(self, x: Any, root: int = 0, op: int = t.SUM, out: Any = None) -> Any:
        """At root, out (default x) = op over ranks of x; other ranks return None."""
        if not _group.depth and _accl.reduce_arrays(self._comm, x, out, op, root):
            return None if self._rank != root else x if out is None else out
        comm = self._live()
        self._check_rank(root, "root")
        if self._rank != root:
            xv, xp, n, dt, _ = parse(x, "x")
            ov, op_ = xv, xp  # recvbuff is unused off the root
            res = None
        else:
            xv, xp, ov, op_, n, dt = _same_size(x, out)
            res = x if out is None else out
        wdt, wop = _reduction(dt, op)
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.reduce(xp, op_, n, wdt, wop, root)
        return res

    def all_gather(self, x: Any, out: Any = None) -> Any:
        """Every rank's k-element contribution, in rank order, on every rank.

        In place, x holds size blocks of k and block ``rank`` is the contribution; with out=,
        x is the contribution and out holds size * k elements.
        """
        if not _group.depth and _accl.all_gather_arrays(self._comm, x, out):
            return x if out is None else out
        comm = self._live()
        if out is None:
            xv, op_, n, dt = _inplace(x, "x")
            k = _blocks("x", n, self._size)
            xp = op_ + self._rank * k * _ITEMSIZE[dt]
            ov = xv
            res = x
        else:
            xv, xp, k, dt, _ = parse(x, "x")
            ov, op_ = _output(out, "out", k * self._size, dt)
            res = out
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.all_gather(xp, op_, k, wire(dt))
        return res

    def reduce_scatter(self, x: Any, op: int = t.SUM, out: Any = None) -> Any:
        """x holds size blocks of k; rank r receives op over ranks of block r.

        In place, the result lands in block ``rank`` of x and a view of that block is returned;
        with out=, out has k elements.
        """
        if not _group.depth and _accl.reduce_scatter_arrays(self._comm, x, out, op):
            if out is not None:
                return out
            k = x.size // self._size
            return block(x, self._rank * k, self._rank * k + k)
        comm = self._live()
        if out is None:
            xv, xp, n, dt = _inplace(x, "x")
            k = _blocks("x", n, self._size)
            start = self._rank * k
            op_ = xp + start * _ITEMSIZE[dt]
            ov = xv
            res = block(xv, start, start + k)
        else:
            xv, xp, n, dt, _ = parse(x, "x")
            k = _blocks("x", n, self._size)
            ov, op_ = _output(out, "out", k, dt)
            res = out
        wdt, wop = _reduction(dt, op)
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.reduce_scatter(xp, op_, k, wdt, wop)
        return res

    def all_to_all(self, x: Any, out: Any = None) -> Any:
        """x holds size blocks; block j of rank i lands in block i of rank j's out (default x)."""
        comm = self._live()
        xv, xp, ov, op_, n, dt = _same_size(x, out)
        res = x if out is None else out
        k = _blocks("x", n, self._size)
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.all_to_all(xp, op_, k, wire(dt))
        return res

    def gather(self, x: Any, root: int = 0, out: Any = None) -> Any:
        """At root, every rank's k-element x in rank order; other ranks return None.

        At root in place, x holds size blocks of k and block ``root`` is its contribution; with
        out= at root, x has k elements and out size * k. out is ignored off the root.
        """
        comm = self._live()
        self._check_rank(root, "root")
        if self._rank != root:
            xv, xp, k, dt, _ = parse(x, "x")
            ov, op_ = xv, 0  # recvbuff is unused off the root
            res = None
        elif out is None:
            xv, op_, n, dt = _inplace(x, "x")
            k = _blocks("x", n, self._size)
            xp = op_ + root * k * _ITEMSIZE[dt]
            ov = xv
            res = x
        else:
            xv, xp, k, dt, _ = parse(x, "x")
            ov, op_ = _output(out, "out", k * self._size, dt)
            res = out
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.gather(xp, op_, k, wire(dt), root)
        return res

    def scatter(self, x: Any, root: int = 0, out: Any = None) -> Any:
        """Block r of the root's x (size blocks of k) lands on rank r.

        Without out=, off the root x is the k-element receive buffer, and at the root the result
        is its own block of x (a view of it is returned). With out=, out (k elements) receives
        on every rank and x is read only at the root.
        """
        comm = self._live()
        self._check_rank(root, "root")
        if out is None:
            xv, xp, n, dt = _inplace(x, "x")
            if self._rank == root:
                k = _blocks("x", n, self._size)
                start = root * k
                op_ = xp + start * _ITEMSIZE[dt]
                res = block(xv, start, start + k)
            else:
                k, op_, xp = n, xp, 0  # sendbuff is read only at the root
                res = x
            ov = xv
        else:
            ov, op_, k, dt, writable = parse(out, "out")
            if not writable:
                raise InvalidArgumentError("out is read-only")
            xv, xp = ov, 0
            if self._rank == root:
                xv, xp, n, xdt, _ = parse(x, "x")
                _mismatch("x", n, xdt, k * self._size, dt)
            res = out
        if _group.depth:
            _group.keep.append((xv, ov))
        comm.scatter(xp, op_, k, wire(dt), root)
        return res

    # ------------------------------------------------------------------ point to point

    def send(self, x: Any, peer: int) -> None:
        """Sends x to peer, which must recv the same count and dtype."""
        comm = self._live()
        self._check_rank(peer, "peer")
        xv, xp, n, dt, _ = parse(x, "x")
        if _group.depth:
            _group.keep.append(xv)
        comm.send(xp, n, wire(dt), peer)

    def recv(self, x: Any, peer: int) -> Any:
        """Receives into x what peer sends; returns x."""
        comm = self._live()
        self._check_rank(peer, "peer")
        xv, xp, n, dt = _inplace(x, "x")
        if _group.depth:
            _group.keep.append(xv)
        comm.recv(xp, n, wire(dt), peer)
        return x
