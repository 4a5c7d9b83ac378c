"""System failures say what failed, the likely cause and the fix: a /dev/shm too small or
read-only (a private mount namespace of the test's own), an interface that does not exist, a
host that does not resolve, a port already taken."""

import os
import shutil
import socket
import subprocess
import sys

import pytest

from accl_testing import clean_env

INIT = """
import accl
try:
    accl.Communicator(accl.get_unique_id(), 0, 1, timeout=5).destroy()
    print("no error")
except accl.AcclError as e:
    print(type(e).__name__, e)
"""


def run(env=None, shm_mount=None):
    cmd = [sys.executable, "-c", INIT]
    if shm_mount:
        if os.geteuid() != 0 or not shutil.which("unshare"):
            pytest.skip("needs root and unshare for a private /dev/shm")
        cmd = ["unshare", "-m", "sh", "-c",
               f"mount -t tmpfs -o {shm_mount} tmpfs /dev/shm && exec \"$0\" \"$@\""] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=clean_env(**(env or {})))
    if shm_mount and "mount:" in p.stderr:
        pytest.skip(f"cannot mount a private /dev/shm here: {p.stderr.strip()}")
    return p.stdout


def test_dev_shm_too_small():
    out = run(shm_mount="size=1M")
    assert out.startswith("SystemError") and "cannot reserve" in out and "--shm-size" in out, out


def test_dev_shm_read_only():
    out = run(shm_mount="ro")
    assert out.startswith("SystemError") and "Read-only file system" in out \
        and "is /dev/shm mounted and writable?" in out, out


def test_unknown_interface():
    out = run({"ACCL_SOCKET_IFNAME": "nosuchif0"})
    assert "no up interface matches ACCL_SOCKET_IFNAME=nosuchif0" in out and "ip addr" in out, out


def test_unresolvable_host():
    out = run({"ACCL_COMM_ID": "nosuchhost.invalid:1234", "ACCL_COMM_SECRET": "x"})
    assert "cannot resolve 'nosuchhost.invalid:1234'" in out and "DNS" in out, out


def test_port_in_use():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        out = run({"ACCL_COMM_ID": f"127.0.0.1:{port}", "ACCL_COMM_SECRET": "x"})
    assert f"bind to 127.0.0.1:{port} failed: Address already in use" in out \
        and "another process holds this port" in out, out
