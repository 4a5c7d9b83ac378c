"""Runs last (by file name): no test may leave accl's shared memory behind."""

from accl_testing import SHM_AT_START, shm_segments


def test_no_shared_memory_left():
    left = shm_segments() - SHM_AT_START
    assert not left, f"/dev/shm segments left behind by the tests: {sorted(left)}"
