"""python -m accl.info: the accl library, the backends it can find, the ACCL_* variables set and
the tuning file (docs/environment.md).

Backends listed: cpu (built in), every libaccl-backend-<name>.so next to libaccl.so, the plugin
named by ACCL_BACKEND_PLUGIN, the backend named by ACCL_BACKEND, and the vendor backends nccl,
rccl and pccl even when they are absent. Each is loaded (as a communicator would load it, without
creating one) through the C function acclGetBackendInfo, which reports its library version and
path, or why it is not available.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from typing import NamedTuple

__all__ = ["BackendInfo", "backend_info", "backend_names", "library_path", "preflight", "main"]

VENDOR_BACKENDS = ("nccl", "rccl", "pccl")
_SECRET_VARS = ("ACCL_COMM_SECRET", "ACCL_UNIQUE_ID")  # both carry the rendezvous secret


class BackendInfo(NamedTuple):
    name: str  # a backend name, or a plugin path
    available: bool
    version: int  # the library's version code (0 when unavailable)
    version_string: str
    path: str  # where it was loaded from, or why it is not available


def library_path() -> str:
    """The libaccl.so of this package (loaded already by accl._accl)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libaccl.so")


_lib: ctypes.CDLL | None = None


def _libaccl() -> ctypes.CDLL:
    global _lib
    if _lib is None:
        lib = ctypes.CDLL(library_path())
        lib.acclGetBackendInfo.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_int),
            ctypes.POINTER(ctypes.c_char_p),
            ctypes.POINTER(ctypes.c_char_p),
        ]
        lib.acclGetBackendInfo.restype = ctypes.c_int
        lib.acclGetLastError.argtypes = [ctypes.c_void_p]
        lib.acclGetLastError.restype = ctypes.c_char_p
        _lib = lib
    return _lib


def backend_info(name: str) -> BackendInfo:
    """Loads backend `name` (a name or a plugin path) if needed and reports on it."""
    lib = _libaccl()
    version = ctypes.c_int(0)
    text, path = ctypes.c_char_p(), ctypes.c_char_p()
    rc = lib.acclGetBackendInfo(name.encode(), ctypes.byref(version), ctypes.byref(text),
                                ctypes.byref(path))
    if rc != 0:
        why = (lib.acclGetLastError(None) or b"").decode(errors="replace")
        return BackendInfo(name, False, 0, "", why.removeprefix("acclGetBackendInfo: "))
    return BackendInfo(name, True, version.value, (text.value or b"").decode(),
                       (path.value or b"").decode())


def backend_names() -> list[str]:
    """The backends python -m accl.info reports on, in its order."""
    here = os.path.dirname(library_path())
    plugins = sorted(
        os.path.basename(p)[len("libaccl-backend-"):-len(".so")]
        for p in glob.glob(os.path.join(here, "libaccl-backend-*.so"))
    )
    names = ["cpu", *plugins]
    for var in ("ACCL_BACKEND_PLUGIN", "ACCL_BACKEND"):
        if os.environ.get(var):
            names.append(os.environ[var])
    names.extend(VENDOR_BACKENDS)
    return list(dict.fromkeys(names))  # without repeats, in order


def _display_name(spec: str) -> str:
    """A plugin given by path shows as the name in its file name (the path follows)."""
    if "/" not in spec:
        return spec
    base = os.path.basename(spec)
    if base.startswith("libaccl-backend-") and base.endswith(".so"):
        return base[len("libaccl-backend-"):-len(".so")]
    return base


# The cpu backend maps about (4 + n) MiB of /dev/shm per n-rank communicator (docs/algorithms.md).
_SHM_WARN_BYTES = 256 << 20
_FD_WARN = 1024


def preflight() -> list[tuple[str, str, str]]:
    """Checks of what accl needs from this machine: (status, what, detail), status OK or WARN."""
    import resource
    import socket

    checks = []
    try:
        st = os.statvfs("/dev/shm")
        free, total = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
        ok = os.access("/dev/shm", os.W_OK) and free >= _SHM_WARN_BYTES
        detail = f"{free >> 20} MiB free of {total >> 20} MiB"
        if not ok:
            detail += ("; not writable" if not os.access("/dev/shm", os.W_OK) else "") + \
                "; the cpu backend needs it (in a container, raise --shm-size)"
        checks.append(("OK" if ok else "WARN", "/dev/shm", detail))
    except OSError as e:
        checks.append(("WARN", "/dev/shm", f"unusable: {e}; the cpu backend needs it"))
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    enough = soft == resource.RLIM_INFINITY or soft >= _FD_WARN
    checks.append(("OK" if enough else "WARN", "open files", f"limit {soft} (hard {hard})" + (
        "" if enough else "; each rank keeps sockets and pipes open: raise it with ulimit -n")))
    memlock = resource.getrlimit(resource.RLIMIT_MEMLOCK)[0]
    checks.append(("OK", "locked memory", "unlimited" if memlock == resource.RLIM_INFINITY
                   else f"{memlock >> 10} KiB (GPU backends may want more)"))
    ifaces = [name for _, name in socket.if_nameindex()]
    chosen = os.environ.get("ACCL_SOCKET_IFNAME")
    if chosen and not any(_ifname_matches(chosen, n) for n in ifaces):
        checks.append(("WARN", "interfaces", f"ACCL_SOCKET_IFNAME={chosen} matches none of "
                       f"{', '.join(ifaces)}"))
    else:
        checks.append(("OK", "interfaces", ", ".join(ifaces) +
                       (f" (ACCL_SOCKET_IFNAME={chosen})" if chosen else "")))
    return checks


def _ifname_matches(spec: str, name: str) -> bool:
    """ACCL_SOCKET_IFNAME's NCCL syntax: prefixes, "^" excludes, "=" exact names."""
    exclude = spec.startswith("^")
    spec = spec[1:] if exclude else spec
    exact = spec.startswith("=")
    spec = spec[1:] if exact else spec
    items = [i for i in spec.split(",") if i]
    hit = any(name == i if exact else name.startswith(i) for i in items)
    return hit != exclude


def main(argv: list[str] | None = None) -> int:
    import argparse

    from . import __version__

    argparse.ArgumentParser(prog="python -m accl.info", description=__doc__.splitlines()[0]
                            ).parse_args(argv)
    print(f"accl {__version__} ({library_path()})")
    print("backends:")
    for b in map(backend_info, backend_names()):
        name = _display_name(b.name)
        if b.available:
            print(f"  {name:<10} {b.version_string:<18} {b.path}")
        else:
            first, *rest = b.path.splitlines() or [""]
            print(f"  {name:<10} unavailable: {first}")
            for line in rest:
                print(f"  {'':<10}   {line.strip()}")
    print("preflight:")
    for status, what, detail in preflight():
        print(f"  {status:<4} {what:<14} {detail}")
    print("environment:")
    set_vars = sorted(k for k in os.environ if k.startswith("ACCL_"))
    for k in set_vars:
        print(f"  {k}={'(hidden)' if k in _SECRET_VARS else os.environ[k]}")
    if not set_vars:
        print("  no ACCL_* variable is set (see docs/environment.md)")
    from .tune import tuning_file

    path = tuning_file()
    print(f"tuning file: {path or 'none'}")
    try:
        with open(path or os.devnull, errors="replace") as f:
            lines = [ln.strip() for ln in f]
    except OSError as e:
        print(f"  cannot read it ({e.strerror}): communicators fail until it is fixed")
        lines = []
    for line in lines:
        if line and not line.startswith("#"):
            name = line.split("=", 1)[0].strip()
            shown = f"{name}=(hidden)" if name in _SECRET_VARS else line
            wins = "  (the environment's value wins)" if os.environ.get(name) else ""
            print(f"  {shown}{wins}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
