"""accl.init(): a communicator over the ranks a launcher started, found from the environment.

Launchers are recognised in this order:
  accl     python -m accl.launch: ACCL_UNIQUE_ID (hex), ACCL_RANK, ACCL_WORLD_SIZE.
  torchrun RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: rank 0 shares the id through a torch
           TCPStore at MASTER_ADDR:MASTER_PORT (the torchrun agent's store when
           TORCHELASTIC_USE_AGENT_STORE=True, else one rank 0 hosts, as torch's env:// does).
  mpi      Open MPI (OMPI_COMM_WORLD_*), MPICH/PMI (PMI_RANK, PMI_SIZE), PMIx (PMIX_RANK): with
           mpi4py, rank 0's id is broadcast over MPI.COMM_WORLD; without it, as slurm below.
  slurm    srun (SLURM_PROCID, SLURM_STEP_NUM_TASKS; an sbatch script outside srun is not a
           launch): ACCL_COMM_ID is set to MASTER_ADDR (default: the first host of the step or
           127.0.0.1 when every rank is local) and MASTER_PORT (default: 29501-30500, derived
           from the job id) unless it is set, and rank 0 hosts the rendezvous there. Every rank
           must see the same ACCL_COMM_SECRET; if it is unset the C library derives one and warns.
  single   none of these: a communicator of one rank, as MPI's singleton init does, so that a
           script written for a launcher also runs as a plain `python script.py`.

init() may run more than once in a process, except under accl.launch, whose process hosts a
single rendezvous: there the second call raises InvalidUsageError (use comm.split()).
"""

from __future__ import annotations

import itertools
import os
import re
import zlib
from typing import Any, NamedTuple

from .comm import Communicator, get_unique_id
from .errors import InvalidUsageError

__all__ = ["RankInfo", "rank_info", "init"]


class RankInfo(NamedTuple):
    rank: int
    size: int
    local_rank: int
    source: str  # "accl", "torchrun", "mpi", "slurm" or "single"


# In order of precedence: (source, variables that mark it, rank variable, size variables (the
# first one set counts), local-rank variable).
_LAUNCHERS = (
    ("accl", ("ACCL_UNIQUE_ID",), "ACCL_RANK", ("ACCL_WORLD_SIZE",), "ACCL_LOCAL_RANK"),
    ("torchrun", ("RANK", "WORLD_SIZE"), "RANK", ("WORLD_SIZE",), "LOCAL_RANK"),
    ("mpi", ("OMPI_COMM_WORLD_RANK",), "OMPI_COMM_WORLD_RANK", ("OMPI_COMM_WORLD_SIZE",),
     "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("mpi", ("PMI_RANK",), "PMI_RANK", ("PMI_SIZE",), "MPI_LOCALRANKID"),
    ("mpi", ("PMIX_RANK",), "PMIX_RANK",
     ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS"), "SLURM_LOCALID"),
    ("slurm", ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"), "SLURM_PROCID", ("SLURM_STEP_NUM_TASKS",),
     "SLURM_LOCALID"),
)

_init_calls = itertools.count()
_launcher_id_used = False


def _int(env: Any, name: str, source: str) -> int:
    value = env.get(name)
    if value is None:
        raise InvalidUsageError(f"accl.init: {name} is not set, but the {source} variables are")
    try:
        return int(value)
    except ValueError:
        raise InvalidUsageError(f"accl.init: {name}={value!r} is not an integer") from None


def rank_info(env: Any = None) -> RankInfo:
    """This process's rank, rank count, local rank and launcher, read from the environment.

    Without a local-rank variable the local rank is taken to equal the rank (one node).
    """
    env = os.environ if env is None else env
    for source, markers, rank_var, size_vars, local_var in _LAUNCHERS:
        if not all(m in env for m in markers):
            continue
        rank = _int(env, rank_var, source)
        size_var = next((v for v in size_vars if v in env), size_vars[0])
        size = _int(env, size_var, source)
        local = _int(env, local_var, source) if local_var in env else rank
        return RankInfo(rank, size, local, source)
    return RankInfo(0, 1, 0, "single")


def init(timeout: float | None = None, backend: str | None = None) -> Communicator:
    """A communicator over all ranks of the current launch (see the module doc for the order)."""
    info = rank_info()
    env = os.environ
    if info.source == "accl":
        uid = _launcher_uid()
    elif info.source == "torchrun":
        return _init_torchrun(info, timeout, backend)
    elif info.source in ("mpi", "slurm"):
        world = _mpi_world(info.size) if info.source == "mpi" else None
        if world is not None:
            return Communicator.from_mpi(world, timeout, backend)
        env.setdefault("ACCL_COMM_ID", f"{_master_addr(info)}:{_master_port()}")
        uid = get_unique_id()  # with ACCL_COMM_ID set, rank 0 hosts the rendezvous there
    else:
        uid = get_unique_id()
    return Communicator(uid, info.rank, info.size, timeout, backend)


def _launcher_uid() -> bytes:
    global _launcher_id_used
    if _launcher_id_used:
        # A second rendezvous on the launcher's id would only wait for the timeout.
        raise InvalidUsageError(
            "accl.init: this process already used the id of accl.launch, which hosts one "
            "rendezvous per run; call init() once and comm.split() for more communicators"
        )
    _launcher_id_used = True
    return bytes.fromhex(os.environ["ACCL_UNIQUE_ID"])


def _init_torchrun(info: RankInfo, timeout: float | None, backend: str | None) -> Communicator:
    from datetime import timedelta

    from torch.distributed import TCPStore

    env = os.environ
    for name in ("MASTER_ADDR", "MASTER_PORT"):
        if name not in env:
            raise InvalidUsageError(f"accl.init: {name} is not set, but RANK and WORLD_SIZE are")
    agent = env.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    wait = timeout if timeout else float(env.get("ACCL_TIMEOUT", 600))
    store = TCPStore(
        env["MASTER_ADDR"],
        int(env["MASTER_PORT"]),
        info.size,
        is_master=info.rank == 0 and not agent,
        timeout=timedelta(seconds=wait),
        wait_for_workers=False,
        multi_tenant=True,  # shares the server with a later torch env:// init in this process
    )
    # The agent's store outlives restarts and repeated init() calls: key on both.
    key = f"accl/{env.get('TORCHELASTIC_RESTART_COUNT', '0')}/uid/{next(_init_calls)}"
    if info.rank == 0:
        uid = get_unique_id()
        store.set(key, uid)
    else:
        uid = store.get(key)
    # Returns once every rank has joined, hence read the key: only then may rank 0's store go.
    comm = Communicator(uid, info.rank, info.size, timeout, backend)
    del store
    return comm


def _mpi_world(size: int) -> Any:
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    world = MPI.COMM_WORLD
    # An mpi4py built for another MPI than the launcher's sees singletons: do not trust it then.
    return world if world.Get_size() == size else None


def _master_addr(info: RankInfo) -> str:
    env = os.environ
    if "MASTER_ADDR" in env:
        return env["MASTER_ADDR"]
    for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
        if env.get(name):
            return _first_host(env[name])
    local_size = env.get("OMPI_COMM_WORLD_LOCAL_SIZE") or env.get("MPI_LOCALNRANKS")
    if local_size is not None and int(local_size) == info.size:
        return "127.0.0.1"
    raise InvalidUsageError(
        "accl.init: cannot tell which host rank 0 runs on; set MASTER_ADDR (and MASTER_PORT) or "
        "ACCL_COMM_ID=host:port, or install mpi4py"
    )


def _first_host(nodelist: str) -> str:
    """The first host of a Slurm host list such as "node[07-09,12],gpu1" (node07)."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if m is None:
        raise InvalidUsageError(f"accl.init: cannot parse the Slurm host list {nodelist!r}")
    prefix, ranges = m.groups()
    return prefix if ranges is None else prefix + re.split(r"[,-]", ranges)[0]


def _master_port() -> int:
    env = os.environ
    if "MASTER_PORT" in env:
        return int(env["MASTER_PORT"])
    # Concurrent jobs on one host should not meet on the same port: derive it from the job.
    job = "/".join(
        env.get(name, "")
        for name in ("SLURM_JOB_ID", "SLURM_STEP_ID", "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid")
    )
    return 29501 + zlib.crc32(job.encode()) % 1000
