"""Fuzz target (atheris) for the bootstrap's parsers, through the real code paths:
  - a unique id of fuzzed bytes handed to acclCommInitRank (id decoding, address parsing);
  - fuzzed bytes sent to a live rendezvous as the handshake response (stranger checks);
  - fuzzed bytes sent, after a correct handshake, as the rank's hello (rank, size and duplicate
    checks; the rendezvous must refuse or accept, never crash or hang).

    python tests/fuzz/fuzz_bootstrap.py -max_total_time=600      # by hand, as long as you like
CI runs it for a few seconds (tests/python/test_fuzz.py). A crash, a hang (atheris -timeout) or
an exception other than accl's own errors fails it.
"""

import os
import socket
import struct
import sys

os.environ.setdefault("ACCL_TIMEOUT", "2")  # a rendezvous nobody completes ends quickly
os.environ.setdefault("ACCL_DEBUG", "NONE")  # refusals are expected here: keep the log quiet

import atheris  # noqa: E402

with atheris.instrument_imports():
    import accl  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from test_security import CHALLENGE, MAGIC, RESPONSE, VERSION, parse_id, siphash128  # noqa: E402

ID_HEADER = struct.pack("<IHH", 0x4C434341, 1, 0)  # magic, wire version, flags
rendezvous = {}


def live_rendezvous():
    """A rendezvous that still listens; a fuzzed hello may complete one, then a new one is made."""
    addr = rendezvous.get("addr")
    if addr:
        try:
            socket.create_connection(addr, timeout=1).close()
            return rendezvous["secret"], addr
        except OSError:
            pass
    secret, addr = parse_id(accl.get_unique_id())
    rendezvous.update(secret=secret, addr=addr)
    return secret, addr


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


@atheris.instrument_func  # so each mode and branch here counts as coverage for the fuzzer
def TestOneInput(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    mode = fdp.ConsumeIntInRange(0, 2)
    if mode == 0:
        raw = fdp.ConsumeBytes(128)
        uid = (ID_HEADER + raw if fdp.ConsumeBool() else raw).ljust(128, b"\0")[:128]
        try:
            accl.Communicator(uid, 0, 1, timeout=0.05).destroy()
        except accl.AcclError:
            pass
        return
    secret, addr = live_rendezvous()
    # The rendezvous runs in this process: a crash or a hang in it ends the run. Socket errors
    # on this side are expected: the server drops strangers, and a fuzzed hello may complete
    # the rendezvous, which then closes.
    try:
        with socket.create_connection(addr, timeout=5) as s:
            challenge = recv_exact(s, CHALLENGE.size)
            if challenge is None:
                return
            _, _, nonce = CHALLENGE.unpack(challenge)
            if mode == 1:
                s.sendall(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200)))
            else:
                mine = os.urandom(16)
                s.sendall(RESPONSE.pack(MAGIC, VERSION, mine, siphash128(secret, b"C" + nonce + mine)))
                if recv_exact(s, 16) is None:
                    raise AssertionError("a correct handshake was refused")
                s.sendall(fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 200)))
            s.shutdown(socket.SHUT_WR)
            while s.recv(4096):
                pass  # the answer (a refusal, or the table) until the server closes
    except OSError:
        pass

if __name__ == "__main__":
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()
