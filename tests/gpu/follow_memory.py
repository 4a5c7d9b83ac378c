"""With no backend named, the backend follows the buffers' memory (issue 4, part 2), on a real
GPU: in a process that has loaded CUDA, a communicator's first collective on device memory
starts it on nccl, on host memory on cpu. 1 rank, through the C API (ctypes). Prints PASS/FAIL."""

import ctypes
import os

import torch

import accl  # noqa: F401  (loads libaccl.so beside it)

lib = ctypes.CDLL(os.path.join(os.path.dirname(accl.__file__), "libaccl.so"))
lib.acclGetLastError.restype = ctypes.c_char_p


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * 128)]


lib.acclCommInitRank.argtypes = [ctypes.c_void_p, ctypes.c_int, UniqueId, ctypes.c_int]
lib.acclAllReduce.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                              ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
lib.acclCommGetBackend.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_char_p)]


def backend(comm):
    name = ctypes.c_char_p()
    assert lib.acclCommGetBackend(comm, ctypes.byref(name)) == 0
    return name.value.decode()


def run(device):
    uid = UniqueId()
    assert lib.acclGetUniqueId(ctypes.byref(uid)) == 0
    comm = ctypes.c_void_p()
    assert lib.acclCommInitRank(ctypes.byref(comm), 1, uid, 0) == 0, lib.acclGetLastError(None)
    before = backend(comm)
    x = torch.arange(1000, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    stream = torch.cuda.current_stream().cuda_stream if device == "cuda" else None
    rc = lib.acclAllReduce(x.data_ptr(), y.data_ptr(), x.numel(), 7, 0, comm, stream)
    assert rc == 0, lib.acclGetLastError(None)
    torch.cuda.synchronize()
    assert torch.equal(x, y), "wrong all_reduce result"
    after = backend(comm)
    assert lib.acclCommDestroy(comm) == 0
    return before, after


def main():
    os.environ.pop("ACCL_BACKEND", None)
    torch.cuda.init()  # the process has loaded CUDA: the first collective chooses
    status = 0
    for device, want in (("cuda", "nccl"), ("cpu", "cpu")):
        try:
            before, after = run(device)
            ok = (before, after) == ("auto", want)
            detail = f"backend {before!r} before, {after!r} after"
        except Exception as e:  # noqa: BLE001  (every failure is a line of the report)
            ok, detail = False, repr(e)
        status |= not ok
        print(f"{'PASS' if ok else 'FAIL'}  no backend named, first collective on {device} "
              f"memory: {detail} (want {want!r})")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
