"""PyTorch's own distributed tests (DistributedTest._DistTestBase) on the backend "accl".

    # from the repository root; ACCL_SUITE_BACKEND=accl (default) or gloo, WORLD_SIZE=2 (default)
    PYTHONPATH=python .venv/bin/python -m pytest -p no:cacheprovider \
        tests/torch_suite/run_torch_suite.py -k "all_reduce or broadcast"

The equivalent of torch's test/distributed/test_distributed_spawn.py (the test/ directory is not
in the torch wheel): one TestCase class, TestDistBackendWithSpawn, whose tests each spawn
WORLD_SIZE ranks that init_process_group(BACKEND) through a file:// store.

distributed_test.py picks its tests by backend *name* when it is imported: decorators such as
`skip_but_pass_in_sandcastle_if(BACKEND != "gloo", ...)` run at class definition, and knows only
gloo, nccl, mpi and ucc. So this runner imports it with BACKEND=gloo: exactly the tests torch
runs on gloo are selected, and test bodies take their gloo (cpu) branches, such as
`if BACKEND == "mpi" or BACKEND == "gloo": <build a cpu model>`. Then, with
ACCL_SUITE_BACKEND=accl, every process group those tests create with the name "gloo"
(init_process_group, new_group, new_subgroups, all through _new_process_group_helper) is made
with "accl" instead. accl is thereby held to gloo's expectations, which is what the issue asks
("accl passes every test that gloo passes"). With ACCL_SUITE_BACKEND=gloo nothing is redirected:
the reference run, under the same runner.

The one visible artifact: dist.get_backend() answers "accl" where a test expects the name
"gloo" (test_get_backend); docs/torch.md lists it with the other differences. Two more
adjustments, both for accl groups only: dist.monitored_barrier's by-name refusal of non-gloo
backends is lifted (accl implements monitoredBarrier), and ACCL_TORCH_ANY_SOURCE=1 is set so that
groups support recv without a source (test_send_recv_any_source*).
"""

from __future__ import annotations

import os
import sys
import tempfile

# Set before distributed_test is imported: it reads them at import. Spawned ranks re-import
# this module and inherit the parent's environment, so they see the same values.
TARGET = os.environ.setdefault("ACCL_SUITE_BACKEND", "accl")
os.environ["BACKEND"] = "gloo"  # test selection and in-test branches: gloo's
os.environ.setdefault("WORLD_SIZE", "2")
os.environ.setdefault("TEMP_DIR", tempfile.mkdtemp(prefix="accl_torch_suite_"))

import torch  # noqa: E402
import torch.distributed.distributed_c10d as c10d  # noqa: E402

if TARGET != "gloo":
    import accl.distributed  # noqa: F401,E402  (registers "accl")

    _helper = c10d._new_process_group_helper

    def _redirected(group_size, group_rank, global_ranks, backend, *args, **kwargs):
        # Only the plain name: a mixed "cpu:gloo,cuda:nccl" string is left as it is.
        if str(backend).lower() == "gloo":
            backend = c10d.Backend(TARGET)
        return _helper(group_size, group_rank, global_ranks, backend, *args, **kwargs)

    c10d._new_process_group_helper = _redirected

    # dist.monitored_barrier refuses every backend but gloo by its name, in Python, before it
    # reaches the backend. accl implements monitoredBarrier, so the name check is answered
    # "gloo" for accl groups during that call; what runs is accl's monitoredBarrier.
    _monitored = c10d.monitored_barrier

    def _monitored_barrier(*args, **kwargs):
        real = c10d.get_backend

        def as_gloo(g=None):
            name = real(g)
            return c10d.Backend.GLOO if name == TARGET else name

        c10d.get_backend = as_gloo
        try:
            return _monitored(*args, **kwargs)
        finally:
            c10d.get_backend = real

    c10d.monitored_barrier = torch.distributed.monitored_barrier = _monitored_barrier

    # recv without a source (test_send_recv_any_source*) needs groups that announce sends.
    os.environ.setdefault("ACCL_TORCH_ANY_SOURCE", "1")

from torch.testing._internal.common_utils import run_tests  # noqa: E402
from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    run_tests()
