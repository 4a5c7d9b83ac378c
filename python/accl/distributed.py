"""The torch.distributed backend "accl".

    import torch.distributed as dist
    import accl.distributed                 # registers "accl" (automatic when accl is installed)
    dist.init_process_group("accl")         # env:// (torchrun, accl.launch), tcp://, file://

Importing this module imports torch and registers the backend with
``torch.distributed.Backend.register_backend``. An installed accl (pip) registers it by itself:
torch calls ``_autoload`` through the ``torch.backends`` entry point at ``import torch`` unless
``TORCH_DEVICE_BACKEND_AUTOLOAD=0``. An in-tree build (``PYTHONPATH=python``) has no entry
points: import this module.

The backend is the C++ ``c10d::Backend`` in ``accl._accl_torch``, built against one exact torch.
Importing this module under another torch raises ImportError naming both versions. See
docs/torch.md.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import re
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from . import get_unique_id

__all__ = ["BACKEND", "ProcessGroupACCL", "accelerators", "built_for", "create_backend"]

BACKEND = "accl"
_REBUILD = (
    "rebuild accl against the running torch: `make build` in an accl checkout (in-tree), or "
    "`pip install --no-build-isolation --force-reinstall .`"
)


def built_for() -> str | None:
    """The torch version accl._accl_torch was compiled against, or None if it was not built.

    Read from the file rather than from the module: a module compiled against another torch
    may fail to load at all, with an error that names neither version.
    """
    spec = importlib.util.find_spec("accl._accl_torch")
    if spec is None or not spec.origin:
        return None
    with open(spec.origin, "rb") as f:
        m = re.search(rb"accl-torch-built-for:([^;\x00]+);", f.read())
    return m.group(1).decode() if m else "unknown"


def _load() -> Any:
    want = built_for()
    if want is None:
        raise ImportError(
            "accl.distributed: accl was built without its torch backend (accl._accl_torch): "
            f"torch was not importable when accl was built. {_REBUILD[0].upper()}{_REBUILD[1:]}"
        )
    if want != torch.__version__:
        raise ImportError(
            f"accl.distributed: accl's torch backend was built for torch {want}, but torch "
            f"{torch.__version__} is running; {_REBUILD}"
        )
    from . import _accl_torch

    return _accl_torch


def _torch_initializing() -> bool:
    # True while torch's own import runs, i.e. when torch's entry-point autoload imports us.
    return bool(getattr(getattr(torch, "__spec__", None), "_initializing", False))


try:
    _ext = _load()
    _unavailable = ""
except ImportError as e:
    # Raising here during `import torch` (autoload) would make `import torch` itself fail, for
    # every program. Then register "accl" with a creator that raises this reason instead.
    if not _torch_initializing():
        raise
    _ext = None
    _unavailable = str(e)
ProcessGroupACCL = _ext.ProcessGroupACCL if _ext is not None else None

@atexit.register
def _close_all() -> None:
    # Lets every group's worker thread finish and stop while Python is still fully alive (see
    # ProcessGroupACCL::closeAll). After destroy_process_group() there is nothing left to do.
    if _ext is not None:
        _ext._close_all()


def _seconds(timeout: Any) -> float:
    if isinstance(timeout, timedelta):
        return timeout.total_seconds()
    return float(timeout)


def create_backend(opts: Any, backend_options: Any = None) -> Any:
    """The creator torch calls (extended API): a ProcessGroupACCL for this rank of the group.

    Rank 0 of the group makes the accl unique id (its process hosts the rendezvous) and
    publishes it through the c10d store torch gives; the other ranks read it from there.
    """
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    key = "accl/unique_id"  # the store is already prefixed with the group's name
    if rank == 0:
        uid = get_unique_id()
        store.set(key, uid)
    else:
        uid = store.get(key)
    # recv without a source (recvAnysource) needs every send of the group to announce itself
    # in the store, a round trip per send: only where asked for, on every rank alike.
    any_source = os.environ.get("ACCL_TORCH_ANY_SOURCE", "0") not in ("", "0")
    return ProcessGroupACCL(bytes(uid), rank, size, _seconds(opts.timeout), store, any_source)


def _unavailable_creator(*args: Any) -> Any:
    raise RuntimeError(_unavailable)


def accelerators() -> dict[str, str]:
    """The accelerator device types this process serves, each with its accl backend: "cuda"
    when torch was built with CUDA (ROCm) and accl's nccl (rccl) backend loads; torch's
    PrivateUse1 device, under the name its vendor's extension gave it (say "ppu"), when the
    accl backend ACCL_TORCH_PRIVATEUSE1_BACKEND names (default "pccl") loads."""
    from .info import backend_info

    served = {}
    if torch.version.cuda or torch.version.hip:
        name = "rccl" if torch.version.hip else "nccl"
        if backend_info(name).available:
            served["cuda"] = name
    device = torch._C._get_privateuse1_backend_name()
    if device != "privateuseone":  # renamed: a vendor's extension registered its device
        name = os.environ.get("ACCL_TORCH_PRIVATEUSE1_BACKEND", "pccl")
        if backend_info(name).available:
            served[device] = name
    return served


def _register() -> None:
    if BACKEND.upper() not in dist.Backend._plugins:
        creator = create_backend if _ext is not None else _unavailable_creator
        served = accelerators() if _ext is not None else {}
        for device, backend in served.items():
            _ext.serve(device, backend)
        dist.Backend.register_backend(BACKEND, creator, extended_api=True,
                                      devices=["cpu", *served])


_register()


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group, called during ``import torch``: importing
    this module registered the backend already (or, when it cannot load, a creator that says
    why, since an exception here would make ``import torch`` fail)."""
