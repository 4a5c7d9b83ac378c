"""The adapter for NCCL-shaped libraries (backends/nccl), end to end on a CPU-only machine.

Against the fake libraries of tests/nccl (NCCL's functions over accl's cpu backend, built with
the C++ tests): loading, version and symbols, every collective and type, groups, composition of
what an old library lacks, vendor errors, the timeout and the abort of a non-blocking init, and
the backend-neutral cases of the C++ suite. Against the real NCCL of the nvidia-nccl-cu13/-cu12
wheel, where installed: it loads, reports its version, and a communicator fails cleanly for want
of a CUDA device.

Each check runs in fresh processes: a backend is loaded once per process, from wherever its
environment pointed when it was first used.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.metadata
import importlib.util
import os
import sys
import time

import numpy as np
import pytest

import accl
from accl_testing import REPO, check, check_array, clean_env, expect_raises, run_cmd, run_ranks

PACKAGE_DIR = os.path.dirname(os.path.abspath(accl.__file__))
BUILD = os.environ.get("ACCL_BUILD_DIR", os.path.join(REPO, "build"))
FAKE_DIR = os.path.join(BUILD, "tests", "nccl")
# Variables that would point the adapter elsewhere than a test means it to look.
OVERRIDES = ("ACCL_NCCL_LIBRARY", "ACCL_RCCL_LIBRARY", "ACCL_PCCL_LIBRARY", "ACCL_BACKEND",
             "ACCL_BACKEND_PLUGIN", "ACCL_NCCL_BLOCKING", "FAKE_NCCL_VERSION",
             "FAKE_NCCL_REJECT_COUNT", "FAKE_NCCL_HANG_INIT", "FAKE_NCCL_LOG")
TIMEOUT = 60.0


def fake(name: str) -> str:
    path = os.path.join(FAKE_DIR, f"lib{name}.so")
    if not os.path.exists(path):
        pytest.skip(f"{path} is not built: the fake NCCL libraries are built with the C++ tests "
                    "(make build, or cmake -DACCL_BUILD_TESTS=ON)")
    return path


@pytest.fixture(autouse=True)
def plugins_built():
    for flavor in ("nccl", "rccl", "pccl"):
        path = os.path.join(PACKAGE_DIR, f"libaccl-backend-{flavor}.so")
        assert os.path.exists(path), f"{path} is missing: the adapter is built with libaccl"


# ---------------------------------------------------------------- helpers run in the ranks


def _setenv(env: dict[str, str | None]) -> None:
    for k in OVERRIDES:
        os.environ.pop(k, None)
    for k, v in env.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def backend_info(name: str) -> tuple[int, int, str, str, str]:
    """acclGetBackendInfo through ctypes (the Python package has no wrapper for it)."""
    lib = ctypes.CDLL(os.path.join(PACKAGE_DIR, "libaccl.so"))
    lib.acclGetLastError.restype = ctypes.c_char_p
    version, vstr, path = ctypes.c_int(), ctypes.c_char_p(), ctypes.c_char_p()
    r = lib.acclGetBackendInfo(name.encode(), ctypes.byref(version), ctypes.byref(vstr),
                               ctypes.byref(path))
    return (r, version.value, (vstr.value or b"").decode(), (path.value or b"").decode(),
            lib.acclGetLastError(None).decode())


def inputs(rank: int, count: int, dtype) -> np.ndarray:
    """Values 1..3: sums, products and averages over up to 3 ranks are exact in every dtype."""
    return ((np.arange(count) * 7 + rank) % 3 + 1).astype(dtype)


def reference(size: int, count: int, dtype, op: int) -> np.ndarray:
    v = np.stack([inputs(r, count, np.int64) for r in range(size)])
    red = {accl.SUM: v.sum(0), accl.PROD: v.prod(0), accl.MAX: v.max(0), accl.MIN: v.min(0),
           accl.AVG: v.sum(0) // size if np.dtype(dtype).kind in "iu" else v.sum(0) / size}[op]
    return red.astype(dtype)


DTYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16, np.float32,
          np.float64]
OPS = [accl.SUM, accl.PROD, accl.MAX, accl.MIN, accl.AVG]


def _collectives(uid, rank, size, backend, env):
    """Every collective against numpy, through the adapter and the fake library."""
    _setenv(env)
    n = 13
    with accl.Communicator(uid, rank, size, timeout=TIMEOUT, backend=backend) as comm:
        check(comm.backend == backend, f"backend {comm.backend!r}, expected {backend!r}")
        for dtype in DTYPES:
            for op in OPS:
                x = inputs(rank, n, dtype)
                got = comm.all_reduce(x, op=op, out=np.empty_like(x))
                want = reference(size, n, dtype, op)
                check_array(got, want, f"all_reduce {np.dtype(dtype)} op {op}",
                            rtol=1e-3 if np.dtype(dtype).kind == "f" else 0.0)
        x = inputs(rank, n, np.float32)
        comm.all_reduce(x)  # in place
        check_array(x, reference(size, n, np.float32, accl.SUM), "in-place all_reduce")
        root = size - 1
        red = comm.reduce(inputs(rank, n, np.int32), root=root, op=accl.MAX,
                          out=np.zeros(n, np.int32))
        if rank == root:
            check_array(red, reference(size, n, np.int32, accl.MAX), "reduce")
        b = comm.broadcast(np.full(n, rank, np.int64), root=1 % size)
        check_array(b, np.full(n, 1 % size), "broadcast")
        everyone = np.concatenate([inputs(r, n, np.float64) for r in range(size)])
        check_array(comm.all_gather(inputs(rank, n, np.float64), out=np.empty(n * size)),
                    everyone, "all_gather")
        rs = comm.reduce_scatter(np.tile(inputs(rank, n, np.int64), size),
                                 out=np.empty(n, np.int64))
        check_array(rs, reference(size, n, np.int64, accl.SUM), "reduce_scatter")
        a2a = comm.all_to_all(np.arange(size * n, dtype=np.int32) + 1000 * rank,
                              out=np.empty(size * n, np.int32))
        want = np.concatenate([np.arange(rank * n, (rank + 1) * n) + 1000 * r for r in range(size)])
        check_array(a2a, want, "all_to_all")
        g = comm.gather(inputs(rank, n, np.uint8), root=0, out=np.empty(size * n, np.uint8))
        if rank == 0:
            check_array(g, np.concatenate([inputs(r, n, np.uint8) for r in range(size)]), "gather")
        s = comm.scatter(np.arange(size * n, dtype=np.float32), root=0, out=np.empty(n, np.float32))
        check_array(s, np.arange(rank * n, (rank + 1) * n), "scatter")
        comm.barrier()  # NCCL has none: accl composes it from send/recv
        # A ring of sends and receives in one group: deadlocks unless the group runs it at once.
        right, left = (rank + 1) % size, (rank - 1) % size
        got = np.zeros(n, np.int64)
        with accl.group():
            comm.send(np.full(n, rank, np.int64), right)
            comm.recv(got, left)
        check_array(got, np.full(n, left), "send/recv ring in a group")
        # Zero elements are a valid call.
        comm.all_reduce(np.zeros(0, np.float32))
        comm.finalize()
    return True


def _extended_types(uid, rank, size, env, fp8_supported):
    """bfloat16 and float8 travel as torch tensors; old libraries reject float8 cleanly."""
    import torch

    _setenv(env)
    with accl.Communicator(uid, rank, size, timeout=TIMEOUT, backend="nccl") as comm:
        x = torch.full((5,), rank + 1.0, dtype=torch.bfloat16)
        comm.all_reduce(x)
        check(bool((x.float() == sum(range(1, size + 1))).all()), f"bfloat16 all_reduce: {x}")
        for dt in (torch.float8_e4m3fn, torch.float8_e5m2):
            y = torch.ones(5).to(dt)
            if fp8_supported:
                comm.all_reduce(y)
                check(bool((y.float() == size).all()), f"{dt} all_reduce: {y.float()}")
                # NCCL has none, and its refusal would poison the communicator: never sent.
                expect_raises(accl.NotSupportedError, "no average of float8", comm.all_reduce,
                              y, accl.AVG)
            else:
                expect_raises(accl.NotSupportedError, "NCCL added it in 2.24", comm.all_reduce, y)
        # The communicator is still usable after a type the library does not have.
        z = np.ones(3, np.float32)
        comm.all_reduce(z)
        check_array(z, np.full(3, size), "all_reduce after a rejected type")
    return True


def _errors(uid, rank, size, env):
    """Vendor errors come back as accl's codes with the library's own last-error text."""
    _setenv(env)
    os.environ["FAKE_NCCL_REJECT_COUNT"] = "7"
    os.environ["ACCL_NCCL_BLOCKING"] = "1"  # non-blocking ones: _sticky_argument_error
    comm = accl.Communicator(uid, rank, size, timeout=TIMEOUT, backend="nccl")
    os.environ["FAKE_NCCL_REJECT_CODE"] = "4"
    msg = expect_raises(accl.InvalidArgumentError, "ncclAllReduce failed: invalid argument",
                        comm.all_reduce, np.ones(7, np.float32))
    check("nccl-fake: count 7 rejected (FAKE_NCCL_REJECT_COUNT)" in msg,
          f"the message lacks the library's last error: {msg!r}")
    x = np.ones(5, np.float32)
    comm.all_reduce(x)  # an argument error leaves a blocking communicator usable
    check_array(x, np.full(5, size), "all_reduce after an argument error")
    os.environ["FAKE_NCCL_REJECT_CODE"] = "5"

    def exchange():
        with accl.group():
            comm.send(np.ones(7, np.int8), (rank + 1) % size)
            comm.recv(np.ones(7, np.int8), (rank - 1) % size)

    expect_raises(accl.InvalidUsageError, "ncclSend failed: invalid usage", exchange)
    os.environ["FAKE_NCCL_REJECT_CODE"] = "1"
    expect_raises(accl.DeviceError, "unhandled cuda error", comm.broadcast, np.ones(7))
    # A device error leaves it unusable; destroying it aborts the vendor communicator.
    expect_raises(accl.DeviceError, "unusable after an earlier error", comm.all_reduce, x)
    comm.destroy()
    return True


def _sticky_argument_error(uid, rank, size, env):
    """NCCL keeps an argument error on a non-blocking communicator (the adapter's default) and
    fails every later call with it: the error says so, and later calls are refused with it."""
    _setenv(env)
    os.environ["FAKE_NCCL_REJECT_COUNT"] = "7"
    comm = accl.Communicator(uid, rank, size, timeout=TIMEOUT, backend="nccl")
    msg = expect_raises(accl.InvalidArgumentError, "ncclAllReduce failed: invalid argument",
                        comm.all_reduce, np.ones(7, np.float32))
    check("unusable now" in msg, f"the message does not say the communicator is lost: {msg!r}")
    msg = expect_raises(accl.InvalidUsageError, "unusable after an earlier error",
                        comm.all_reduce, np.ones(5, np.float32))
    check("count 7 rejected" in msg, f"the refusal does not name the earlier error: {msg!r}")
    comm.destroy()
    return True


def _follow_memory(uid, rank, size, env, device_ranks, first):
    """No backend named, in processes that loaded "CUDA" (the fake driver): the first
    collective's buffers choose the backend on every rank."""
    _setenv(env)
    os.environ["FAKE_CUDA_DEVICE"] = "1" if rank in device_ranks else "0"
    ctypes.CDLL(os.path.join(FAKE_DIR, "libfakecuda.so"), mode=ctypes.RTLD_GLOBAL)
    comm = accl.Communicator(uid, rank, size, timeout=TIMEOUT)
    check(comm.backend == "auto", f"backend {comm.backend!r} before the first collective")
    x = np.full(5, rank + 1.0, np.float32)
    if first == "send":
        return expect_raises(accl.InvalidUsageError, "cannot be this communicator's first",
                             comm.send, x, (rank + 1) % size)
    if len(device_ranks) not in (0, size):
        return expect_raises(accl.InvalidUsageError, "by the buffers' memory", comm.all_reduce, x)
    comm.all_reduce(x)
    check_array(x, np.full(5, size * (size + 1) / 2), "all_reduce that chose the backend")
    comm.send(x, (rank + 1) % size) if rank % 2 == 0 else comm.recv(x, (rank - 1) % size)
    backend = comm.backend
    comm.destroy()
    return backend


def _reject_once(uid, rank, size, env):
    _setenv(env)
    with accl.Communicator(uid, rank, size, timeout=TIMEOUT, backend="nccl") as comm:
        return expect_raises(accl.InvalidArgumentError, "invalid argument", comm.all_reduce,
                             np.ones(7, np.float32))


def _init_times_out(uid, rank, size, env):
    _setenv(env)
    start = time.monotonic()
    msg = expect_raises(accl.errors.TimeoutError, "ncclCommInitRankConfig did not complete",
                        accl.Communicator, uid, rank, size, timeout=2.0, backend="nccl")
    return msg, time.monotonic() - start


def _abort_during_init(uid, rank, size, env):
    """acclCommAbort of a non-blocking init that NCCL never completes returns at once."""
    _setenv(env)
    lib = ctypes.CDLL(os.path.join(PACKAGE_DIR, "libaccl.so"))

    class Config(ctypes.Structure):  # acclConfig_t
        _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint),
                    ("version", ctypes.c_uint), ("blocking", ctypes.c_int),
                    ("timeout", ctypes.c_double), ("backend", ctypes.c_char_p)]

    class UniqueId(ctypes.Structure):
        _fields_ = [("internal", ctypes.c_char * 128)]

    version = ctypes.c_int()
    lib.acclGetVersion(ctypes.byref(version))
    config = Config(ctypes.sizeof(Config), 0xACC1C0F6, version.value, 0, TIMEOUT, b"nccl")
    ident = UniqueId()
    ctypes.memmove(ctypes.byref(ident), uid, 128)
    comm = ctypes.c_void_p()
    r = lib.acclCommInitRankConfig(ctypes.byref(comm), size, ident, rank, ctypes.byref(config))
    check(r == 7, f"non-blocking init returned {r}, expected acclInProgress (7)")
    time.sleep(0.5)
    state = ctypes.c_int()
    check(lib.acclCommGetAsyncError(comm, ctypes.byref(state)) == 0 and state.value == 7,
          f"the init should still be in progress, state {state.value}")
    start = time.monotonic()
    r = lib.acclCommAbort(comm)
    return r, time.monotonic() - start


def _info(uid, rank, size, name, env):
    _setenv(env)
    return backend_info(name)


def _load_errors(uid, rank, size, nccl_fake):
    """Each way the library can be missing or wrong, one after the other (a failed load is
    not remembered, so the next call looks again)."""
    results = {}
    _setenv({"ACCL_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"})
    results["override"] = backend_info("nccl")
    _setenv({"ACCL_PCCL_LIBRARY": nccl_fake})
    results["symbols"] = backend_info("pccl")
    _setenv({"ROCM_PATH": "/nonexistent/rocm"})
    results["missing"] = backend_info("rccl")
    return results


def _no_device(uid, rank, size, env):
    _setenv(env)
    start = time.monotonic()
    msg = expect_raises(accl.DeviceError, "No CUDA device", accl.Communicator, uid, rank, size,
                        timeout=30.0, backend="nccl")
    return msg, time.monotonic() - start


# ---------------------------------------------------------------- the fake libraries


@pytest.mark.parametrize("backend,library,size,extra", [
    ("nccl", "fakenccl", 3, {}),
    ("pccl", "fakepccl", 2, {}),
    ("nccl", "fakenccl", 2, {"ACCL_NCCL_BLOCKING": "1"}),
], ids=["nccl", "pccl", "nccl-blocking"])
def test_fake_collectives(backend, library, size, extra, tmp_path):
    log = tmp_path / "calls.log"
    env = {f"ACCL_{backend.upper()}_LIBRARY": fake(library), "FAKE_NCCL_LOG": str(log), **extra}
    assert run_ranks(size, _collectives, backend, env, make_comm=False) == [True] * size
    # Healthy communicators are destroyed, not aborted.
    assert log.read_text().split() == ["destroy"] * size, log.read_text()


def test_fake_old_library_composes_what_it_lacks():
    """NCCL 2.12 has no all-to-all, gather, scatter, non-blocking init or last-error text: the
    adapter reports them absent, the core composes the collectives, and the rest still works."""
    env = {"ACCL_NCCL_LIBRARY": fake("fakenccl-old")}
    [info] = run_ranks(1, _info, "nccl", env, make_comm=False)
    assert info[:3] == (0, 21212, "2.12.12"), info
    assert run_ranks(3, _collectives, "nccl", env, make_comm=False) == [True] * 3


@pytest.mark.parametrize("library,fp8", [("fakenccl", True), ("fakenccl-old", False)])
def test_fake_extended_types(library, fp8):
    if importlib.util.find_spec("torch") is None:
        pytest.skip("bfloat16 and float8 arrays need torch, which is not installed")
    env = {"ACCL_NCCL_LIBRARY": fake(library)}
    assert run_ranks(2, _extended_types, env, fp8, make_comm=False) == [True] * 2


def test_fake_vendor_errors(tmp_path):
    log = tmp_path / "calls.log"
    env = {"ACCL_NCCL_LIBRARY": fake("fakenccl"), "FAKE_NCCL_LOG": str(log)}
    assert run_ranks(2, _errors, env, make_comm=False) == [True] * 2
    assert log.read_text().split() == ["abort", "abort"], log.read_text()


def test_fake_argument_error_on_non_blocking_communicator():
    env = {"ACCL_NCCL_LIBRARY": fake("fakenccl")}
    assert run_ranks(2, _sticky_argument_error, env, make_comm=False) == [True] * 2


@pytest.mark.parametrize("device_ranks,first,expect", [
    ((0, 1), "all_reduce", ["nccl", "nccl"]),
    ((), "all_reduce", ["cpu", "cpu"]),
    ((0,), "all_reduce", ["rank 0 passed CUDA device memory and rank 1 host memory"] * 2),
    ((0, 1), "send", ["name the backend"] * 2),
])
def test_backend_follows_buffer_memory(device_ranks, first, expect):
    fake("fakecuda")
    env = {"ACCL_NCCL_LIBRARY": fake("fakenccl")}
    got = run_ranks(2, _follow_memory, env, device_ranks, first, make_comm=False)
    assert all(e in g for e, g in zip(expect, got)), got


def test_fake_vendor_errors_without_last_error():
    """A library without ncclGetLastError: the error string alone, no crash."""
    env = {"ACCL_NCCL_LIBRARY": fake("fakenccl-old"), "FAKE_NCCL_REJECT_COUNT": "7"}
    for msg in run_ranks(2, _reject_once, env, make_comm=False):
        assert "ncclAllReduce failed: invalid argument" in msg and "nccl-fake" not in msg, msg


def test_fake_init_timeout_aborts(tmp_path):
    log = tmp_path / "calls.log"
    env = {"ACCL_NCCL_LIBRARY": fake("fakenccl"), "FAKE_NCCL_HANG_INIT": "1",
           "FAKE_NCCL_LOG": str(log)}
    for msg, elapsed in run_ranks(2, _init_times_out, env, make_comm=False):
        assert "within 2 s" in msg and "were aborted" in msg, msg
        assert elapsed < 15, f"init took {elapsed:.1f} s with a 2 s timeout"
    assert log.read_text().split() == ["abort", "abort"], log.read_text()


def subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in clean_env().items() if k not in OVERRIDES}
    env.update(extra)
    return env


def python_calling(call: str) -> list[str]:
    """A command that prints the result of `call`, a function of this module."""
    here = os.path.dirname(os.path.abspath(__file__))
    return [sys.executable, "-c",
            f"import sys; sys.path.insert(0, {here!r}); import test_nccl_adapter as t; "
            f"print(t.{call})"]


def test_fake_abort_during_init(tmp_path):
    log = tmp_path / "calls.log"
    env = {"ACCL_NCCL_LIBRARY": fake("fakenccl"), "FAKE_NCCL_HANG_INIT": "1",
           "FAKE_NCCL_LOG": str(log)}
    for r, elapsed in run_ranks(2, _abort_during_init, env, make_comm=False):
        assert r == 0 and elapsed < 5, f"acclCommAbort returned {r} after {elapsed:.1f} s"
    assert log.read_text().split() == ["abort", "abort"], log.read_text()


def test_fake_info_and_known_bad_warning():
    """The version comes from the library at run time; a known-bad one is warned about."""
    env = subprocess_env(ACCL_NCCL_LIBRARY=fake("fakenccl"), ACCL_DEBUG="WARN")
    p = run_cmd(python_calling("backend_info('nccl')"), env=env)
    assert p.returncode == 0, p.stderr
    assert "(0, 22907, '2.29.7', " in p.stdout and "libaccl-backend-nccl.so" in p.stdout, p.stdout
    assert "known-bad" not in p.stderr, p.stderr
    p = run_cmd(python_calling("backend_info('nccl')"), env=dict(env, FAKE_NCCL_VERSION="22803"))
    assert p.returncode == 0, p.stderr
    assert "(0, 22803, '2.28.3', " in p.stdout, p.stdout
    assert "NCCL 2.28.3" in p.stderr and "known-bad version" in p.stderr, p.stderr
    assert "#1944" in p.stderr and "2.29.7 or later" in p.stderr, p.stderr


def test_load_errors_say_where_they_looked():
    [r] = run_ranks(1, _load_errors, fake("fakenccl"), make_comm=False)
    code, _, _, _, msg = r["override"]
    assert code == 2 and "ACCL_NCCL_LIBRARY=/nonexistent/libnccl.so.2: cannot load it" in msg, r
    code, _, _, _, msg = r["symbols"]
    assert code == 2 and "lacks pcclGetVersion" in msg and "pcclAllReduce" in msg, r
    assert "ACCL_PCCL_LIBRARY" in msg, r
    code, _, _, _, msg = r["missing"]
    assert code == 2 and "cannot find the rccl library (librccl.so)" in msg, r
    assert "/nonexistent/rocm/lib/" in msg and "Set ACCL_RCCL_LIBRARY" in msg, r


HARNESS = os.path.join(BUILD, "tests", "cpp", "accl_tests")
# Cases of the C++ suite whose checks hold for any backend (others check the cpu backend's name,
# or a timeout shorter than a blocking call into the fake can honour).
CPP_CASES = [
    ("fakenccl", "collectives 3 proc"), ("fakenccl", "collectives 2 thread"),
    ("fakenccl", "dtypes_ops 3 proc"), ("fakenccl", "dtypes_ops 4 thread"),
    ("fakenccl", "sendrecv 3 proc"), ("fakenccl", "sendrecv 4 thread"),
    ("fakenccl", "multichunk 2 proc"), ("fakenccl", "split 3 proc"),
    ("fakenccl", "multi_comm 4 proc"), ("fakenccl", "comm_churn 3 proc"),
    ("fakenccl-old", "collectives 3 proc"), ("fakenccl-old", "sendrecv 3 thread"),
    ("fakepccl", "collectives 2 proc"),
]


@pytest.mark.parametrize("library,case", CPP_CASES, ids=[f"{l}-{c.replace(' ', '-')}"
                                                        for l, c in CPP_CASES])
def test_cpp_suite_through_the_adapter(library, case):
    """The C++ suite's backend-neutral cases, with the adapter as the default backend."""
    if not os.path.exists(HARNESS):
        pytest.skip(f"{HARNESS} is not built (make build)")
    backend = "pccl" if library == "fakepccl" else "nccl"
    env = subprocess_env(ACCL_BACKEND_PLUGIN=os.path.join(PACKAGE_DIR,
                                                          f"libaccl-backend-{backend}.so"),
                         ACCL_DEBUG="INFO", ACCL_DEBUG_SUBSYS="INIT",
                         **{f"ACCL_{backend.upper()}_LIBRARY": fake(library)})
    p = run_cmd([HARNESS, *case.split()], env=env, timeout=150)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    # The harness must really have run on the adapter, not on the default cpu backend.
    assert f"ready on backend {backend}" in out, out[-3000:]


# ---------------------------------------------------------------- the real NCCL


def wheel_nccl() -> tuple[str, str]:
    """The nvidia-nccl wheel's library and version, or a skip."""
    for dist in ("nvidia-nccl-cu13", "nvidia-nccl-cu12"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        spec = importlib.util.find_spec("nvidia")
        for base in (spec.submodule_search_locations or []) if spec else []:
            lib = glob.glob(os.path.join(base, "nccl", "lib", "libnccl.so.2"))
            if lib:
                return lib[0], version
    pytest.skip("the NCCL wheel is not installed (pip install nvidia-nccl-cu13)")


def has_cuda_device() -> bool:
    return os.path.exists("/dev/nvidiactl") or bool(glob.glob("/dev/nvidia[0-9]*"))


def test_real_nccl_from_the_wheel_loads_and_reports_its_version():
    _, version = wheel_nccl()
    # No override and no VIRTUAL_ENV: the adapter finds the wheel from the loaded modules.
    [info] = run_ranks(1, _info, "nccl", {"VIRTUAL_ENV": None}, make_comm=False)
    code, vcode, vstr, path, msg = info
    assert code == 0, msg
    major, minor, patch = (int(v) for v in vstr.split("."))
    assert version.startswith(vstr) and vcode == major * 10000 + minor * 100 + patch, info
    assert path.endswith("/libaccl-backend-nccl.so"), info


def test_real_nccl_without_a_device_fails_cleanly():
    lib, _ = wheel_nccl()
    if has_cuda_device():
        pytest.skip("this machine has a CUDA device: the no-device error cannot be checked")
    # Rank 0 makes the unique id (the INFO line), then init fails with a device error.
    env = subprocess_env(ACCL_DEBUG="INFO", ACCL_NCCL_LIBRARY=lib)
    p = run_cmd(python_calling("_no_device(t.accl.get_unique_id(), 0, 1, {})"), env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "rank 0 created the nccl unique id" in p.stderr, p.stderr
    assert "ncclCommInitRankConfig failed: unhandled cuda error" in p.stdout, p.stdout
    # With two ranks too: each fails at once, neither waits for the other.
    for msg, elapsed in run_ranks(2, _no_device, {"ACCL_NCCL_LIBRARY": lib}, make_comm=False):
        assert "No CUDA device" in msg, msg
        assert elapsed < 20, f"failing took {elapsed:.1f} s"
