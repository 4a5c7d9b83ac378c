"""The bootstrap refuses strangers and carries on: garbage, an oversized message, a wrong
secret, a replayed handshake and a half-sent handshake held open (slowloris) hit the
rendezvous while a real job runs through it; the job completes on time and every stranger is
dropped and logged."""

import os
import socket
import struct
import threading
import time

import numpy as np

import accl
from accl_testing import check, run_ranks

MAGIC, VERSION = 0x4C434341, 1
CHALLENGE, RESPONSE = struct.Struct("<II16s"), struct.Struct("<II16s16s")
MASK = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & MASK


def siphash128(key: bytes, msg: bytes) -> bytes:
    """SipHash-2-4 with 128-bit output, as csrc/auth.cc computes it."""
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D ^ 0xEE,
         k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & MASK; v[1] = _rotl(v[1], 13) ^ v[0]; v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & MASK; v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & MASK; v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & MASK; v[1] = _rotl(v[1], 17) ^ v[2]; v[2] = _rotl(v[2], 32)

    full = len(msg) - len(msg) % 8
    for i in range(0, full, 8):
        m = struct.unpack_from("<Q", msg, i)[0]
        v[3] ^= m; rounds(2); v[0] ^= m
    b = (len(msg) << 56) & MASK
    for i, byte in enumerate(msg[full:]):
        b |= byte << (8 * i)
    v[3] ^= b; rounds(2); v[0] ^= b
    v[2] ^= 0xEE; rounds(4)
    h0 = v[0] ^ v[1] ^ v[2] ^ v[3]
    v[1] ^= 0xDD; rounds(4)
    h1 = v[0] ^ v[1] ^ v[2] ^ v[3]
    return struct.pack("<QQ", h0, h1)


def parse_id(uid: bytes):
    """(secret, (host, port)) from the unique id's layout in csrc/bootstrap.cc."""
    secret = uid[8:24]
    family, port = struct.unpack_from("<H", uid, 32)[0], struct.unpack_from(">H", uid, 34)[0]
    assert family == socket.AF_INET
    return secret, (socket.inet_ntoa(uid[40:44]), port)


def challenge(s):
    data = b""
    while len(data) < CHALLENGE.size:
        data += s.recv(CHALLENGE.size - len(data))
    magic, version, nonce = CHALLENGE.unpack(data)
    assert (magic, version) == (MAGIC, VERSION)
    return nonce


def refused(s) -> bool:
    """True when the server closes the connection without confirming the handshake."""
    s.settimeout(10)
    try:
        return s.recv(16) == b""
    except ConnectionResetError:
        return True


def attack(addr, secret, results, hold):
    def conn():
        return socket.create_connection(addr, timeout=10)

    with conn() as s:  # garbage, and far more of it than any message
        challenge(s)
        try:
            s.sendall(os.urandom(1 << 20))
        except OSError:
            pass
        results["garbage"] = refused(s)
    with conn() as s:  # a well-formed response keyed with the wrong secret
        nonce = challenge(s)
        mine = os.urandom(16)
        s.sendall(RESPONSE.pack(MAGIC, VERSION, mine, siphash128(os.urandom(16), b"C" + nonce + mine)))
        results["wrong secret"] = refused(s)
    with conn() as s1, conn() as s2:  # a valid response to one challenge, replayed to another
        nonce1, nonce2, mine = challenge(s1), challenge(s2), os.urandom(16)
        captured = RESPONSE.pack(MAGIC, VERSION, mine, siphash128(secret, b"C" + nonce1 + mine))
        s2.sendall(captured)
        results["replay"] = refused(s2)
    slow = conn()  # slowloris: half a response, held open while the job runs
    challenge(slow)
    slow.sendall(RESPONSE.pack(MAGIC, VERSION, os.urandom(16), os.urandom(16))[:10])
    hold.append(slow)


def job(_uid, rank, size, uid):
    with accl.Communicator(uid, rank, size, timeout=30) as comm:
        x = np.full(1000, rank + 1.0)
        comm.all_reduce(x)
        check(np.all(x == size * (size + 1) / 2), f"all_reduce gave {x[:3]}")


def test_strangers_are_refused_and_the_job_carries_on(capfd):
    uid = accl.get_unique_id()
    secret, addr = parse_id(uid)
    results, hold = {}, []
    t = threading.Thread(target=attack, args=(addr, secret, results, hold))
    t.start()
    t.join(30)
    assert results == {"garbage": True, "wrong secret": True, "replay": True}, results
    assert hold, "the slowloris connection was not set up"
    # Read before the ranks start: they share the capture file, and once (1 run in 80) the
    # first refusals were missing from what was read after them. Each refusal is logged before
    # its connection is closed, so all three are in by now.
    err = capfd.readouterr().err
    assert err.count("refused connection from") >= 3, err
    start = time.monotonic()
    run_ranks(3, job, uid, make_comm=False)
    took = time.monotonic() - start
    hold[0].close()
    assert took < 4, f"the job took {took:.1f} s with a stalled stranger connected"
