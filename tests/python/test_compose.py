"""Collectives the core composes from send/recv (ACCL_COMPOSE forces it on the cpu backend):
broadcast, gather, scatter, all-to-all and barrier, in place and out of place, against numpy."""

import numpy as np
import pytest

from accl_testing import run_ranks
from test_collectives import collectives_worker


@pytest.mark.parametrize("nranks", [1, 2, 3, 5])
def test_composed_collectives(nranks):
    run_ranks(nranks, collectives_worker, [np.int8, np.float32, np.float64], [0, 1, 1031],
              env={"ACCL_COMPOSE": "all"})


def test_composed_beyond_one_p2p_buffer():
    # Messages of several send/recv chunks, so composed groups must progress concurrently.
    run_ranks(3, collectives_worker, [np.float32], [300001],
              env={"ACCL_COMPOSE": "all", "ACCL_SHM_P2P_BYTES": "4096"})
