"""Arrays other than numpy's: torch tensors, DLPack objects and buffer-protocol objects."""

import array
import importlib.util

import numpy as np
import pytest

import accl
from accl import _buffers
from accl_testing import check, check_array, expect_raises, run_ranks

HAVE_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAVE_TORCH, reason="torch is not installed")


class DLPackOnly:
    """Exports a numpy array through DLPack only (no buffer protocol, not an ndarray)."""

    def __init__(self, a):
        self._a = a

    def __dlpack__(self, **kw):
        return self._a.__dlpack__(**kw)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def torch_worker(comm):
    import torch

    n, r = comm.size, comm.rank
    dtypes = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8,
              torch.uint8, torch.int32, torch.int64, torch.bool]
    dtypes += [getattr(torch, d) for d in ("uint32", "uint64", "float8_e4m3fn", "float8_e5m2")
               if hasattr(torch, d)]
    for dt in dtypes:
        for count in (0, 1, 1031):
            i = torch.arange(count)
            # Values in {0, 1}: sums over <= 8 ranks are exact even in float8.
            x = ((i + r) % 2).to(dt)
            want_sum = sum(((i + j) % 2) for j in range(n))
            if dt == torch.bool:
                want_sum = want_sum > 0  # SUM over bool is "or"
            check(comm.all_reduce(x) is x, "all_reduce returns the tensor")
            check_array(x.to(torch.float64).numpy(), want_sum.to(torch.float64).numpy(),
                        f"all_reduce {dt} {count}")
            x = ((i * 3 + r) % 5).to(dt) if dt != torch.bool else ((i + r) % 2).to(dt)
            out = torch.empty_like(x)
            comm.all_reduce(x, op=accl.MAX, out=out)
            want_max = torch.stack([((i * 3 + j) % 5) if dt != torch.bool else ((i + j) % 2)
                                    for j in range(n)]).amax(0) if count else i
            check_array(out.to(torch.float64).numpy(), want_max.to(dt).to(torch.float64).numpy(),
                        f"all_reduce MAX {dt} {count}")
            # In-place reduce_scatter returns a view of this rank's block, as a tensor.
            x = torch.ones(n * count).to(dt)
            res = comm.reduce_scatter(x, op=accl.MAX)
            check(isinstance(res, torch.Tensor) and res.numel() == count, "a tensor block")
            if count:
                check(res.data_ptr() == x.data_ptr() + r * count * x.element_size(),
                      "the block of this rank")
            g = torch.zeros(n * count).to(dt)
            g[r * count:(r + 1) * count] = torch.ones(count).to(dt)
            comm.all_gather(g)
            check(bool((g.to(torch.float32) == 1).all()), f"all_gather {dt}")
            b = torch.full((count,), r).to(dt)
            comm.broadcast(b, root=n - 1)
            check_array(b.to(torch.float64).numpy(),
                        torch.full((count,), n - 1).to(dt).to(torch.float64).numpy(),
                        f"broadcast {dt}")
    # A leaf that requires grad: its storage is still plain memory.
    w = torch.ones(5, requires_grad=True)
    comm.all_reduce(w)
    check_array(w.detach().numpy(), np.full(5, n, np.float32), "requires_grad tensor")
    # 2-d tensors count all their elements.
    m = torch.ones(3, 4, dtype=torch.float64)
    comm.all_reduce(m)
    check_array(m.numpy(), np.full((3, 4), n), "2-d tensor")
    expect_raises(accl.InvalidArgumentError, "x is not contiguous; pass x.contiguous()",
                  comm.all_reduce, torch.ones(4, 4).t())
    expect_raises(accl.InvalidArgumentError, "x is on meta; only cpu tensors",
                  comm.all_reduce, torch.empty(4, device="meta"))
    expect_raises(accl.InvalidArgumentError, "out: expected 4 elements of float32, got 4 of "
                  "bfloat16", comm.all_reduce, torch.ones(4), out=torch.ones(4).bfloat16())
    expect_raises(accl.InvalidArgumentError, "x is a torch.sparse_coo tensor; pass a dense one",
                  comm.all_reduce, torch.ones(4).to_sparse())
    expect_raises(accl.InvalidArgumentError, "unsupported dtype torch.complex64",
                  comm.all_reduce, torch.ones(4, dtype=torch.complex64))
    return True


@needs_torch
@pytest.mark.parametrize("nranks", [2, 3])
def test_torch_tensors(nranks):
    run_ranks(nranks, torch_worker)


def buffers_worker(comm):
    n, r = comm.size, comm.rank
    # bytearray in place (uint8), bytes as a read-only input.
    ba = bytearray([r + 1] * 10)
    check(comm.all_reduce(ba) is ba, "all_reduce returns the bytearray")
    check(list(ba) == [n * (n + 1) // 2] * 10, f"bytearray {list(ba)}")
    out = bytearray(10)
    comm.all_reduce(bytes([1] * 10), out=out, op=accl.SUM)
    check(list(out) == [n] * 10, "bytes in, bytearray out")
    expect_raises(accl.InvalidArgumentError, "x is read-only", comm.all_reduce, bytes(4))
    expect_raises(accl.InvalidArgumentError, "out is read-only", comm.all_reduce, bytearray(4),
                  out=memoryview(bytes(4)))
    # array.array and memoryviews keep their element type.
    arr = array.array("d", [r] * 7)
    comm.all_reduce(arr, op=accl.MAX)
    check(list(arr) == [n - 1.0] * 7, f"array.array('d') {list(arr)}")
    ints = array.array("i", range(4 * n))
    blk = comm.reduce_scatter(ints)  # a numpy view of the array's memory
    check_array(blk, np.arange(4 * n, dtype=np.int32)[r * 4:(r + 1) * 4] * n, "array.array('i')")
    check(list(ints[r * 4:(r + 1) * 4]) == list(blk), "the view is the array's memory")
    mv = memoryview(bytearray(16)).cast("f")
    mv[0] = float(r)
    comm.all_reduce(mv)
    check(mv[0] == n * (n - 1) / 2, "memoryview cast to float32")
    # DLPack: a writable export works in place; numpy arrays are exported writable.
    a = np.full(6, r, np.int64)
    check(comm.all_reduce(DLPackOnly(a)) is not None, "DLPack in place")
    check_array(a, np.full(6, n * (n - 1) // 2), "DLPack object, in place")
    out = np.zeros(6, np.int64)
    comm.all_reduce(DLPackOnly(np.full(6, 2, np.int64)), out=DLPackOnly(out), op=accl.PROD)
    check_array(out, np.full(6, 2 ** n), "DLPack in and out")
    ro = np.ones(3)
    ro.flags.writeable = False
    g = np.zeros(3 * n)
    comm.all_gather(DLPackOnly(ro), out=g)
    check_array(g, np.ones(3 * n), "read-only DLPack export as an input")
    return True


@pytest.mark.parametrize("nranks", [1, 3])
def test_buffers_and_dlpack(nranks):
    run_ranks(nranks, buffers_worker)


# ---------------------------------------------------------------- the parser, in this process


@pytest.mark.parametrize("dtype,code", [
    (np.int8, accl.INT8), (np.uint8, accl.UINT8), (np.int32, accl.INT32),
    (np.uint32, accl.UINT32), (np.int64, accl.INT64), (np.uint64, accl.UINT64),
    (np.float16, accl.FLOAT16), (np.float32, accl.FLOAT32), (np.float64, accl.FLOAT64),
    ("l", accl.INT64), ("q", accl.INT64), (np.intc, accl.INT32),
])
def test_numpy_dtype_codes(dtype, code):
    a = np.zeros((2, 3), dtype)
    view, ptr, count, dt, writable = _buffers.parse(a, "x")
    assert view is a and ptr == a.__array_interface__["data"][0]
    assert (count, dt, writable) == (6, code, True)


def test_parse_read_only_and_empty():
    a = np.zeros(5)
    a.flags.writeable = False
    assert _buffers.parse(a, "x")[1:] == (a.__array_interface__["data"][0], 5, accl.FLOAT64,
                                          False)
    e = np.zeros(0, np.float32)
    assert _buffers.parse(e, "x")[2:] == (0, accl.FLOAT32, True)


def test_parse_subclass_and_views():
    m = np.zeros(4).view(np.matrix)
    assert _buffers.parse(m, "x")[2] == 4
    b = np.arange(10.0)[2:6]  # contiguous slice: its own address
    assert _buffers.parse(b, "x")[1] == b.__array_interface__["data"][0]


@needs_torch
def test_parse_torch_dtype_codes():
    import torch

    for dt, code in [(torch.bfloat16, accl.BFLOAT16), (torch.float16, accl.FLOAT16),
                     (torch.int64, accl.INT64), (torch.uint8, accl.UINT8)]:
        t = torch.zeros(3, dtype=dt)
        assert _buffers.parse(t, "x")[1:] == (t.data_ptr(), 3, code, True)


def test_parse_rejects_unknown_objects():
    with pytest.raises(accl.InvalidArgumentError, match="y: expected a numpy array.*got dict"):
        _buffers.parse({}, "y")
