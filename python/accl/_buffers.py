"""Turns the array arguments of Communicator's methods into what _accl takes.

``parse(x, name)`` accepts, in the order it tries them:
  - a numpy ndarray (checked first: it is the common case on the latency path of every call);
  - a torch.Tensor on the cpu (torch is never imported here: a tensor exists only if the
    caller imported torch already);
  - any other object with ``__dlpack__`` (read through ``numpy.from_dlpack``; a producer that
    exports read-only memory gives an array usable as an input only);
  - any object with the buffer protocol (bytearray, memoryview, array.array; bytes and other
    read-only buffers are inputs only).
Arrays must be C-contiguous. bool data travels as uint8 under the Python-only code BOOL; the
Communicator decides which reductions make sense for it. bfloat16 and float8 numpy arrays need
the optional ml_dtypes package (looked up only if the caller imported it).

It returns ``(view, address, count, dtype, writable)``: ``view`` is what a returned block is
sliced from (x itself for ndarrays and tensors, else the ndarray wrapping x's memory, which also
holds x's buffer export for as long as it lives).
"""

from __future__ import annotations

import sys
from ctypes import addressof, c_char
from typing import Any

import numpy as np

from . import _types as t
from .errors import InvalidArgumentError

_NUMPY_CODES: dict[Any, int] = {
    np.dtype(np.int8): t.INT8,
    np.dtype(np.uint8): t.UINT8,
    np.dtype(np.int32): t.INT32,
    np.dtype(np.uint32): t.UINT32,
    np.dtype(np.int64): t.INT64,
    np.dtype(np.uint64): t.UINT64,
    np.dtype(np.float16): t.FLOAT16,
    np.dtype(np.float32): t.FLOAT32,
    np.dtype(np.float64): t.FLOAT64,
    np.dtype(np.bool_): t.BOOL,
}
_TORCH_CODES: dict[Any, int] = {}

Parsed = tuple[Any, int, int, int, bool]


def parse(x: Any, name: str) -> Parsed:
    if type(x) is np.ndarray:
        a = x
    else:
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            return _parse_tensor(x, name)
        a = _to_ndarray(x, name)
    code = _NUMPY_CODES.get(a.dtype)
    if code is None:
        code = _numpy_code_slow(a.dtype, name)
    flags = a.flags
    if not flags.c_contiguous:
        raise InvalidArgumentError(f"{name} is not contiguous; pass np.ascontiguousarray({name})")
    writable = flags.writeable
    # ctypes reads the address ~5x faster than __array_interface__ (which builds a dict), but
    # only from a writable, non-empty buffer whose format the buffer protocol can express.
    if writable and a.size:
        try:
            return a, addressof(c_char.from_buffer(a)), a.size, code, True
        except (TypeError, ValueError, BufferError):
            pass
    return a, a.__array_interface__["data"][0], a.size, code, writable


def wire(dtype: int) -> int:
    """The C type code for a parsed dtype (bool travels as uint8)."""
    return t.UINT8 if dtype == t.BOOL else dtype


def block(view: Any, start: int, stop: int) -> Any:
    """Elements [start, stop) of a contiguous array or tensor, as a view of it."""
    return (view if view.ndim == 1 else view.reshape(-1))[start:stop]  # reshape: 0.15 us


def _to_ndarray(x: Any, name: str) -> np.ndarray:
    if isinstance(x, np.ndarray):  # subclasses: memmap, matrix, ...
        return x
    if hasattr(x, "__dlpack__"):
        try:
            return np.from_dlpack(x)
        except (BufferError, RuntimeError, TypeError, ValueError) as e:
            raise InvalidArgumentError(
                f"{name}: cannot read its memory through DLPack ({e}); only host (cpu) memory "
                "is supported"
            ) from None
    try:
        m = memoryview(x)
    except TypeError:
        raise InvalidArgumentError(
            f"{name}: expected a numpy array, a torch tensor, or an object with __dlpack__ or "
            f"the buffer protocol; got {type(x).__name__}"
        ) from None
    try:
        return np.asarray(m)
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError(f"{name}: cannot use its buffer ({e})") from None


def _numpy_code_slow(dtype: np.dtype, name: str) -> int:
    # ml_dtypes arrays can only exist if the caller imported ml_dtypes; add its types then.
    ml = sys.modules.get("ml_dtypes")
    if ml is not None:
        for attr, code in (
            ("bfloat16", t.BFLOAT16),
            ("float8_e4m3fn", t.FLOAT8_E4M3),
            ("float8_e5m2", t.FLOAT8_E5M2),
        ):
            if hasattr(ml, attr):
                _NUMPY_CODES[np.dtype(getattr(ml, attr))] = code
        code = _NUMPY_CODES.get(dtype)
        if code is not None:
            return code
    raise InvalidArgumentError(f"{name}: unsupported dtype {dtype} ({_supported()})")


def _parse_tensor(x: Any, name: str) -> Parsed:
    if x.device.type != "cpu":
        raise InvalidArgumentError(
            f"{name} is on {x.device}; only cpu tensors are supported here (accelerator "
            "tensors need a GPU backend)"
        )
    code = _TORCH_CODES.get(x.dtype)
    if code is None:
        code = _torch_code_slow(x.dtype, name)
    if x.layout is not sys.modules["torch"].strided:
        raise InvalidArgumentError(f"{name} is a {x.layout} tensor; pass a dense one")
    if not x.is_contiguous():
        raise InvalidArgumentError(f"{name} is not contiguous; pass {name}.contiguous()")
    return x, x.data_ptr(), x.numel(), code, True


def _torch_code_slow(dtype: Any, name: str) -> int:
    torch = sys.modules["torch"]
    for attr, code in (
        ("int8", t.INT8),
        ("uint8", t.UINT8),
        ("int32", t.INT32),
        ("uint32", t.UINT32),
        ("int64", t.INT64),
        ("uint64", t.UINT64),
        ("float16", t.FLOAT16),
        ("float32", t.FLOAT32),
        ("float64", t.FLOAT64),
        ("bfloat16", t.BFLOAT16),
        ("float8_e4m3fn", t.FLOAT8_E4M3),
        ("float8_e5m2", t.FLOAT8_E5M2),
        ("bool", t.BOOL),
    ):
        if hasattr(torch, attr):  # uint32/uint64/float8 exist only in newer torch versions
            _TORCH_CODES[getattr(torch, attr)] = code
    code = _TORCH_CODES.get(dtype)
    if code is None:
        raise InvalidArgumentError(f"{name}: unsupported dtype {dtype} ({_supported()})")
    return code


def _supported() -> str:
    names = [n for c, n in t.DTYPE_NAMES.items() if c != t.BOOL]
    return "supported: " + ", ".join(names) + ", bool"
