"""The bootstrap fuzz target runs briefly without a crash, hang or unexpected exception."""

import importlib.util
import os
import subprocess
import sys

import pytest

FUZZ = os.path.join(os.path.dirname(__file__), "..", "fuzz", "fuzz_bootstrap.py")


def test_bootstrap_fuzz_target_runs_clean(tmp_path):
    if importlib.util.find_spec("atheris") is None:
        pytest.skip("atheris is not installed")
    p = subprocess.run([sys.executable, FUZZ, "-runs=1500", "-timeout=20", "-seed=7",
                        f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True,
                       timeout=240, env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Done 1500 runs" in p.stderr, p.stderr[-2000:]
