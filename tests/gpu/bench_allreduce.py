"""all_reduce on one GPU through accl's nccl backend against NCCL called directly (1 rank):
accl's overhead must stay under 2 us at 8 bytes and under 2% at 64 MiB. Prints PASS/FAIL lines.
Both libraries are driven through ctypes on the same stream, timed with CUDA events."""

import ctypes
import os
import statistics

import torch

import accl  # noqa: F401  (loads libaccl.so beside it)

HERE = os.path.dirname(accl.__file__)
lib = ctypes.CDLL(os.path.join(HERE, "libaccl.so"))
lib.acclGetLastError.restype = ctypes.c_char_p
# The plugin's path is not NCCL's: NCCL is found as the adapter finds it (the nvidia-nccl wheel).
import nvidia.nccl  # noqa: E402

NCCL = os.path.join(list(nvidia.nccl.__path__)[0], "lib", "libnccl.so.2")


class UniqueId(ctypes.Structure):
    """acclUniqueId and ncclUniqueId: 128 bytes, passed by value (a ctypes array would pass a
    pointer)."""
    _fields_ = [("internal", ctypes.c_char * 128)]


class Config(ctypes.Structure):
    _fields_ = [("size", ctypes.c_size_t), ("magic", ctypes.c_uint), ("version", ctypes.c_uint),
                ("blocking", ctypes.c_int), ("timeout", ctypes.c_double), ("backend", ctypes.c_char_p)]


def accl_comm():
    uid = UniqueId()
    assert lib.acclGetUniqueId(ctypes.byref(uid)) == 0
    ver = ctypes.c_int()
    lib.acclGetVersion(ctypes.byref(ver))
    cfg = Config(ctypes.sizeof(Config), 0xACC1C0F6, ver.value, 1, 60.0, b"nccl")
    comm = ctypes.c_void_p()
    lib.acclCommInitRankConfig.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId,
                                           ctypes.c_int, ctypes.c_void_p]
    rc = lib.acclCommInitRankConfig(ctypes.byref(comm), 1, uid, 0, ctypes.byref(cfg))
    assert rc == 0, lib.acclGetLastError(None)
    return comm


def nccl_comm():
    nccl = ctypes.CDLL(NCCL)
    uid = UniqueId()
    assert nccl.ncclGetUniqueId(ctypes.byref(uid)) == 0
    comm = ctypes.c_void_p()
    nccl.ncclCommInitRank.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId, ctypes.c_int]
    assert nccl.ncclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0
    return nccl, comm


def time_us(fn, x, stream, iters):
    for _ in range(10):
        fn(x, stream)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn(x, stream)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / iters


def main():
    torch.cuda.set_device(0)
    stream = torch.cuda.current_stream().cuda_stream
    nccl, ncomm = nccl_comm()
    acomm = accl_comm()
    args = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
            ctypes.c_void_p, ctypes.c_void_p]
    nccl.ncclAllReduce.argtypes = args
    lib.acclAllReduce.argtypes = args

    # Out of place: in place, one rank's all_reduce moves nothing and both time only the launch.
    def via_nccl(xy, s):
        x, y = xy
        assert nccl.ncclAllReduce(x.data_ptr(), y.data_ptr(), x.numel(), 7, 0, ncomm, s) == 0

    def via_accl(xy, s):
        x, y = xy
        assert lib.acclAllReduce(x.data_ptr(), y.data_ptr(), x.numel(), 7, 0, acomm, s) == 0

    status = 0
    for nbytes, iters, limit in ((8, 2000, "2us"), (64 << 20, 50, "2%")):
        x = (torch.ones(nbytes // 4, device="cuda"), torch.empty(nbytes // 4, device="cuda"))
        n, a = [], []
        for _ in range(5):  # interleaved, medians: the GPU clock moves too
            n.append(time_us(via_nccl, x, stream, iters))
            a.append(time_us(via_accl, x, stream, iters))
        tn, ta = statistics.median(n), statistics.median(a)
        ok = (ta - tn < 2.0) if limit == "2us" else (ta <= tn * 1.02)
        status |= not ok
        print(f"{'PASS' if ok else 'FAIL'}  all_reduce {nbytes} B: accl {ta:.2f} us, nccl {tn:.2f} us "
              f"(overhead {ta - tn:+.2f} us, {100 * (ta / tn - 1):+.1f}%; limit {limit})")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
