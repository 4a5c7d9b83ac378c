"""The package's surface, in this process, with one-rank communicators."""

import numpy as np
import pytest

import accl
from accl import _accl
from accl import comm as comm_module


def test_constants_and_version():
    assert accl.__version__ == "0.1.0"
    assert (accl.SUM, accl.PROD, accl.MAX, accl.MIN, accl.AVG) == (0, 1, 2, 3, 4)
    codes = [accl.INT8, accl.UINT8, accl.INT32, accl.UINT32, accl.INT64, accl.UINT64,
             accl.FLOAT16, accl.FLOAT32, accl.FLOAT64, accl.BFLOAT16, accl.FLOAT8_E4M3,
             accl.FLOAT8_E5M2]
    assert codes == list(range(12))
    assert all(hasattr(accl, name) for name in accl.__all__)
    assert "TimeoutError" not in accl.__all__ and "SystemError" not in accl.__all__


def test_one_rank_communicator():
    uid = accl.get_unique_id()
    assert isinstance(uid, bytes) and len(uid) == 128
    with accl.Communicator(uid.hex(), 0, 1, timeout=30) as c:  # the hex string works too
        assert (c.rank, c.size, c.backend) == (0, 1, "cpu")
        assert repr(c) == "<accl.Communicator rank 0 of 1, cpu>"
        x = np.arange(6, dtype=np.float64)
        assert c.all_reduce(x, op=accl.AVG) is x and list(x) == list(range(6))
        assert c.async_error() == 0
    assert repr(c).endswith("destroyed>")


def test_arrays_functions_take_plain_arrays_only():
    """The C++ paths of the Python API's NCCL collectives (_accl.*_arrays) take every numeric
    numpy dtype as it is, in place (out None) and out of place, and decline (False, nothing
    done) what the Python layer must convert or report."""
    with accl.Communicator(accl.get_unique_id(), 0, 1) as c:
        live = c._live()
        calls = {  # in each, the op is SUM and the root 0
            "all_reduce": lambda x, out: _accl.all_reduce_arrays(live, x, out, accl.SUM),
            "broadcast": lambda x, out: _accl.broadcast_arrays(live, x, out, 0),
            "reduce": lambda x, out: _accl.reduce_arrays(live, x, out, accl.SUM, 0),
            "all_gather": lambda x, out: _accl.all_gather_arrays(live, x, out),
            "reduce_scatter": lambda x, out: _accl.reduce_scatter_arrays(live, x, out, accl.SUM),
        }
        for name, call in calls.items():
            for dt in (np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.longlong,
                       np.ulonglong, np.float16, np.float32, np.float64):
                x, out = np.arange(5, dtype=dt), np.zeros(5, dt)
                assert call(x, out) is True and (out == x).all(), (name, dt)
                assert call(out, None) is True and (out == x).all(), (name, dt)
            x = np.ones(4, np.float32)
            ro = x.copy()
            ro.flags.writeable = False
            for a, b in [(np.ones(4, bool), np.zeros(4, bool)), (x, np.zeros(4)),
                         (x, np.zeros(3, x.dtype)), (x, ro), (np.ones(8, np.float32)[::2], x),
                         (np.ones(4, ">f4"), x), (np.ones(4, np.int16), np.zeros(4, np.int16)),
                         ([1.0] * 4, x), (x, [0.0] * 4), (x.view(np.matrix), x), (ro, None)]:
                before = b.copy() if isinstance(b, np.ndarray) else None
                assert call(a, b) is False, (name, a, b)
                assert before is None or (b == before).all(), name
            assert call(ro, x) is True, name  # a read-only input is fine
        x, out = np.ones(4, np.float32), np.zeros(4, np.float32)
        for declined in (lambda: _accl.all_reduce_arrays(None, x, out, accl.SUM),  # destroyed
                         lambda: _accl.all_reduce_arrays(live, x, out, np.int64(0)),
                         lambda: _accl.all_reduce_arrays(live, x, out, 1 << 40),
                         lambda: _accl.broadcast_arrays(live, x, out, 1),  # a bad root
                         lambda: _accl.broadcast_arrays(live, x, out, True),
                         lambda: _accl.reduce_arrays(live, x, out, accl.SUM, -1)):
            assert declined() is False and (out == 0).all()
        with pytest.raises(accl.InvalidArgumentError):  # an op only the C core checks
            _accl.all_reduce_arrays(live, x, out, 17)
        with pytest.raises(TypeError):
            _accl.all_gather_arrays(live, x)


def test_group_ends_when_its_body_raises():
    with accl.Communicator(accl.get_unique_id(), 0, 1) as c:
        with pytest.raises(KeyError):
            with accl.group():
                c.all_reduce(np.ones(3))
                raise KeyError("body")
        assert comm_module._group.depth == 0 and not comm_module._group.keep
        with accl.group():
            c.all_reduce(np.ones(4))  # a temporary, kept alive until the group ends
            assert comm_module._group.depth == 1 and len(comm_module._group.keep) == 1
        assert not comm_module._group.keep
        y = np.ones(2)
        c.all_reduce(y)
        assert list(y) == [1.0, 1.0]


def test_group_end_without_start():
    with pytest.raises(accl.InvalidUsageError):
        accl.group_end()
    assert comm_module._group.depth == 0


@pytest.mark.parametrize("uid,text", [(b"short", "got 5"), ("zz", "not a hex string"),
                                      (128, "expected bytes or a hex string, got int")])
def test_bad_unique_id(uid, text):
    with pytest.raises(accl.InvalidArgumentError, match=text):
        accl.Communicator(uid, 0, 1)
