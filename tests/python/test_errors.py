"""Bad arguments, use after destroy/abort, timeouts, and the exception classes themselves."""

import builtins
import importlib.util
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import accl
from accl import errors
from accl_testing import PYTHON_DIR, check, check_array, clean_env, expect_raises, run_ranks

Bad = accl.InvalidArgumentError


def bad_inputs_worker(comm):
    n, r = comm.size, comm.rank
    x = np.ones(16, np.float32)
    ro = np.ones(16, np.float32)
    ro.flags.writeable = False
    cases = [
        # (exception, text in its message, call, args, kwargs)
        (Bad, "out: expected 16 elements of float32, got 8 of float32",
         comm.all_reduce, (x,), {"out": np.empty(8, np.float32)}),
        (Bad, "out: expected 16 elements of float32, got 16 of float64",
         comm.all_reduce, (x,), {"out": np.empty(16, np.float64)}),
        (Bad, "x is not contiguous; pass np.ascontiguousarray(x)",
         comm.all_reduce, (np.ones(32, np.float32)[::2],), {}),
        (Bad, "out is not contiguous", comm.all_gather, (x,),
         {"out": np.empty((2 * n, 16), np.float32)[:, 0]}),
        (Bad, "out is read-only", comm.all_reduce, (x,), {"out": ro}),
        (Bad, "x is read-only", comm.all_reduce, (ro,), {}),
        (Bad, "x is read-only", comm.recv, (ro, 0), {}),
        (Bad, "root 5 is out of range", comm.broadcast, (x,), {"root": 5}),
        (Bad, "root -1 is out of range", comm.reduce, (x,), {"root": -1}),
        (Bad, "root 9 is out of range", comm.gather, (x,), {"root": 9}),
        (Bad, "peer 7 is out of range", comm.send, (x, 7), {}),
        (Bad, "peer -2 is out of range", comm.recv, (x, -2), {}),
        (Bad, "unsupported dtype complex64", comm.all_reduce, (np.ones(4, np.complex64),), {}),
        (Bad, "unsupported dtype >f4", comm.all_reduce, (np.ones(4, ">f4"),), {}),
        (Bad, "expected a numpy array", comm.all_reduce, ([1.0, 2.0],), {}),
        (Bad, "out: expected", comm.reduce_scatter, (np.ones(16 * n, np.int32),),
         {"out": np.empty(15, np.int32)}),
        (Bad, "out: expected 16 elements of int32, got 16 of uint32",
         comm.all_to_all, (np.ones(16, np.int32),), {"out": np.empty(16, np.uint32)}),
        (Bad, "op avg is not defined for bool", comm.all_reduce, (np.ones(4, bool),),
         {"op": accl.AVG}),
        (Bad, "expected the 128 bytes", accl.Communicator, (b"short", 0, 1), {}),
    ]
    if n > 1:
        cases += [
            (Bad, f"x: {16 * n + 1} elements do not split into {n} equal blocks",
             comm.all_gather, (np.ones(16 * n + 1, np.float32),), {}),
            (Bad, "elements do not split", comm.reduce_scatter, (np.ones(16 * n + 1),), {}),
            (Bad, "elements do not split", comm.all_to_all, (np.ones(16 * n + 1),), {}),
        ]
    cases += [
        (Bad, "op: expected accl.SUM, PROD, MAX, MIN or AVG, got ndarray", comm.reduce_scatter,
         (np.ones(16 * n, np.float32), np.empty(16, np.float32)), {}),
        (Bad, "op: expected accl.SUM, PROD, MAX, MIN or AVG, got str", comm.all_reduce, (x,),
         {"op": "sum"}),
    ]
    # Checks of what only the root reads raise on the root only; other ranks make no call.
    root_only = [
        (Bad, f"x: expected {16 * n} elements of float32, got 16 of float32",
         comm.scatter, (x,), {"out": np.empty(16, np.float32)}),
        (Bad, "out: expected 16 elements of float32, got 17 of float32",
         comm.broadcast, (x,), {"out": np.empty(17, np.float32)}),
        (Bad, f"out: expected {16 * n} elements", comm.gather, (x,),
         {"out": np.empty(16 * n + 1, np.float32)}),
    ]
    # Errors that only the C core can see: a bad op, an overlap it does not allow.
    buf = np.zeros(32, np.float32)
    cases += [
        (Bad, "", comm.all_reduce, (x,), {"op": 17}),
        (Bad, "", comm.all_reduce, (buf[:16],), {"out": buf[8:24]}),
    ]
    messages = []
    if r == 0 and n > 1:
        for exc, text, fn, args, kw in root_only:
            messages.append(expect_raises(exc, text, fn, *args, **kw))
    for exc, text, fn, args, kw in cases:
        messages.append(expect_raises(exc, text, fn, *args, **kw))
        # Still usable: a correct all-reduce after every rejected call.
        y = np.full(3, r + 1, np.int32)
        comm.all_reduce(y)
        check_array(y, np.full(3, n * (n + 1) // 2, np.int32), "all_reduce after an error")
    return messages


@pytest.mark.parametrize("nranks", [1, 2, 3])
def test_bad_inputs(nranks):
    messages = run_ranks(nranks, bad_inputs_worker)
    # What the C core reported must say what was wrong, not only its code.
    assert all(m.strip() for m in messages[0])


def destroyed_worker(comm):
    sub = comm.split(0)
    check("destroyed" not in repr(sub), repr(sub))
    sub.destroy()
    sub.destroy()  # idempotent
    check("destroyed" in repr(sub) and sub.rank == comm.rank, repr(sub))
    x = np.ones(4)
    for call in (lambda: sub.all_reduce(x), sub.barrier, lambda: sub.split(0),
                 lambda: sub.send(x, 0), sub.finalize):
        expect_raises(accl.InvalidUsageError, "destroyed", call)
    with comm.split(0) as sub2:
        sub2.barrier()
    expect_raises(accl.InvalidUsageError, "destroyed", sub2.barrier)
    sub3 = comm.split(0)
    sub3.abort()
    expect_raises(accl.InvalidUsageError, "destroyed", sub3.all_reduce, x)
    sub4 = comm.split(0)
    sub4.all_reduce(x)
    sub4.finalize()
    expect_raises(accl.InvalidUsageError, "finalized", sub4.all_reduce, x)
    sub4.destroy()
    comm.all_reduce(x)
    check_array(x, np.full(4, comm.size ** 2), "parent after its splits were destroyed")
    return True


@pytest.mark.parametrize("nranks", [1, 3])
def test_use_after_destroy(nranks):
    run_ranks(nranks, destroyed_worker)


def timeout_worker(uid, rank, size):
    comm = accl.Communicator(uid, rank, size, timeout=2.0)
    if rank == 0:
        t0 = time.monotonic()
        msg = expect_raises(accl.errors.TimeoutError, "", comm.all_reduce, np.ones(8))
        took = time.monotonic() - t0
        check(1.5 < took < 20, f"the timeout took {took:.1f} s")
        check(comm.async_error() == errors.TimeoutError.code, f"async_error {comm.async_error()}")
        comm.abort()
        return msg
    time.sleep(4)  # never joins the all-reduce
    comm.destroy()
    return None


def test_timeout_names_the_operation():
    msg = run_ranks(2, timeout_worker, make_comm=False)[0]
    low = msg.lower().replace("_", "")
    assert "allreduce" in low and "1" in msg, msg


def set_timeout_worker(uid, rank, size):
    comm = accl.Communicator(uid, rank, size, timeout=60.0)
    check(comm.timeout == 60.0, f"timeout {comm.timeout}")
    for bad in (0, -2, float("nan"), float("inf")):
        expect_raises(Bad, "positive", setattr, comm, "timeout", bad)
    comm.timeout = 1.5
    check(comm.timeout == 1.5, f"timeout {comm.timeout} after setting 1.5")
    check_array(comm.all_reduce(np.ones(4)), np.full(4, float(size)), "all_reduce after the change")
    if rank == 0:
        t0 = time.monotonic()
        expect_raises(accl.errors.TimeoutError, "", comm.all_reduce, np.ones(8))
        took = time.monotonic() - t0
        check(1.2 < took < 10, f"the timeout set to 1.5 s (created with 60 s) took {took:.1f} s")
        comm.abort()
        return True
    time.sleep(4)  # never joins the all-reduce
    comm.destroy()
    return True


def test_set_timeout_applies_to_later_calls():
    run_ranks(2, set_timeout_worker, make_comm=False)


def abort_worker(uid, rank, size):
    comm = accl.Communicator(uid, rank, size, timeout=60.0)
    if rank == 0:
        threading.Timer(1.0, comm.abort).start()
        t0 = time.monotonic()
        expect_raises(accl.RemoteError, "", comm.all_reduce, np.ones(8))
        check(time.monotonic() - t0 < 10, "abort from another thread woke the call")
        expect_raises(accl.InvalidUsageError, "destroyed", comm.barrier)
    else:
        time.sleep(3)
        comm.destroy()
    return True


def test_abort_wakes_a_blocked_call():
    run_ranks(2, abort_worker, make_comm=False)


# ---------------------------------------------------------------- the classes, in this process

CODES = {
    errors.DeviceError: (1, ()),
    errors.SystemError: (2, (builtins.OSError,)),
    errors.InternalError: (3, ()),
    errors.InvalidArgumentError: (4, (ValueError,)),
    errors.InvalidUsageError: (5, (RuntimeError,)),
    errors.RemoteError: (6, (ConnectionError,)),
    errors.InProgressError: (7, ()),
    errors.TimeoutError: (8, (builtins.TimeoutError,)),
    errors.NotSupportedError: (9, (NotImplementedError,)),
}


@pytest.mark.parametrize("cls", list(CODES), ids=lambda c: c.__name__)
def test_error_classes(cls):
    code, bases = CODES[cls]
    assert errors.from_code(code) is cls and cls.code == code
    e = cls("what went wrong")
    assert isinstance(e, errors.AcclError) and str(e) == "what went wrong"
    assert e.code == code and e.message == "what went wrong"
    for base in bases:
        assert isinstance(e, base)
    assert accl._accl.error_string(code)


def test_unknown_code():
    assert errors.from_code(0) is errors.AcclError
    assert errors.from_code(42) is errors.AcclError


def test_c_errors_arrive_as_classes():
    with pytest.raises(accl.InvalidArgumentError):
        accl.Communicator(accl.get_unique_id(), 3, 2)  # rank outside [0, size)


def test_errors_module_stands_alone():
    spec = importlib.util.spec_from_file_location(
        "standalone_errors", os.path.join(PYTHON_DIR, "accl", "errors.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.from_code(8).__name__ == "TimeoutError"


def test_import_is_light():
    code = ("import sys, accl; bad = [m for m in ('torch', 'mpi4py') if m in sys.modules]; "
            "print(accl.__version__); sys.exit(1 if bad else 0)")
    p = subprocess.run([sys.executable, "-c", code], env=clean_env(), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "0.1.0", p.stdout + p.stderr
