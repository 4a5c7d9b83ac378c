"""accl: NCCL-shaped collective communication for Python.

    import accl
    comm = accl.init()                 # under python -m accl.launch, torchrun, mpirun or srun
    y = comm.all_reduce(x)             # numpy arrays, cpu torch tensors, DLPack or buffers
    with accl.group():                 # NCCL group semantics
        comm.send(a, peer=1)
        comm.recv(b, peer=1)

Importing accl imports neither torch nor mpi4py.
"""

from . import _accl, errors
from ._env import RankInfo, init, rank_info
from ._types import (
    AVG,
    BFLOAT16,
    FLOAT8_E4M3,
    FLOAT8_E5M2,
    FLOAT16,
    FLOAT32,
    FLOAT64,
    INT8,
    INT32,
    INT64,
    MAX,
    MIN,
    PROD,
    SUM,
    UINT8,
    UINT32,
    UINT64,
)
from .comm import Communicator, get_unique_id, group, group_end, group_start, host_empty
from .errors import (
    AcclError,
    DeviceError,
    InProgressError,
    InternalError,
    InvalidArgumentError,
    InvalidUsageError,
    NotSupportedError,
    RemoteError,
)


def _version(code: int) -> str:
    return f"{code // 10000}.{code // 100 % 100}.{code % 100}"


__version__ = _version(_accl.version())

# accl.errors.SystemError and accl.errors.TimeoutError are left out here: a star import of
# accl must not shadow the builtins of the same names.
__all__ = [
    "AVG",
    "BFLOAT16",
    "FLOAT8_E4M3",
    "FLOAT8_E5M2",
    "FLOAT16",
    "FLOAT32",
    "FLOAT64",
    "INT8",
    "INT32",
    "INT64",
    "MAX",
    "MIN",
    "PROD",
    "SUM",
    "UINT8",
    "UINT32",
    "UINT64",
    "AcclError",
    "Communicator",
    "DeviceError",
    "InProgressError",
    "InternalError",
    "InvalidArgumentError",
    "InvalidUsageError",
    "NotSupportedError",
    "RankInfo",
    "RemoteError",
    "errors",
    "get_unique_id",
    "group",
    "group_end",
    "group_start",
    "host_empty",
    "init",
    "rank_info",
]
