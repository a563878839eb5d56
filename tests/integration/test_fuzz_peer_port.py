"""The fuzz run against the Raft peer port of a 3-node cluster (issue 20; the other ports:
``test_fuzz_ports.py``, whose helpers this uses): cut-off and wrong handshakes, a wrong
password, and garbage frames after a valid handshake (``tests.fuzz_inputs.peer_frames``).
The cluster keeps its leader, its terms and its members, commits writes, and no node logs
an ERROR or a traceback.

The fuzzing peer knows the cluster password (the port's only guard until peer TLS) but
claims an address that is no member's, and its messages carry stale terms: a member's own
messages, at the current term, are Raft's to trust. It found that a leader took forwarded
proposals from any address: a garbage item stalled every node, ``remove <member>``
removed a member (``raftlog/native/forwarding.py`` now refuses them).
"""

from __future__ import annotations

import contextlib
import random
import socket
from concurrent.futures import ThreadPoolExecutor

import pytest

from protos.etcdserverpb import rpc_pb2
from raftlog.native.auth import GREETING_BYTES, MAGIC, PROOF_BYTES, Dialer, PeerKey
from tests import fuzz_inputs as fz
from tests.harness import Cluster
from tests.integration.peer_wire import connect, recv_exactly, wait_closed
from tests.integration.test_fuzz_ports import (
    CLOSE_TIMEOUT_S,
    WORKERS,
    assert_clean_log,
    brief,
    log_mark,
    start_fuzz,
)

pytestmark = pytest.mark.integration


# --------------------------------------------------------------------------- peer
#: the address the fuzzing peer claims in its hello: no member's, so nothing it sends can
#: pass for a member's message (a member's own garbage is Raft's trust, not a fuzz case)
STRANGER = "127.0.0.1:1"


def peer_session(port: int, password: str, data: bytes) -> tuple[bool, str]:
    """A valid handshake as STRANGER, then ``data``, then a half-close. Returns (whether the
    node closed the connection within CLOSE_TIMEOUT_S, what went wrong before that)."""
    with connect(port) as s:
        dialer = Dialer(PeerKey(password), STRANGER)
        s.sendall(dialer.receive_greeting(recv_exactly(s, GREETING_BYTES)))
        try:
            dialer.receive_proof(recv_exactly(s, PROOF_BYTES))
        except Exception as exc:
            return True, f"the handshake failed: {exc!r}"
        with contextlib.suppress(ConnectionError):
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        return wait_closed(s, CLOSE_TIMEOUT_S) is not None, ""


def peer_handshake_cases(rng: random.Random, password: str) -> list[tuple[str, bytes]]:
    """What a dialer sends after the node's greeting, all of it wrong."""
    address = STRANGER.encode()
    head = len(address).to_bytes(2, "little")
    cases = [
        ("nothing", b""),
        ("half-a-length", head[:1]),
        ("length-only", head),
        ("address-cut", head + address[:3]),
        ("nonce-cut", head + address + rng.randbytes(7)),
        ("mac-cut", head + address + rng.randbytes(16 + 20)),
        ("address-too-long", (5000).to_bytes(2, "little") + rng.randbytes(300)),
        ("address-not-utf8", (4).to_bytes(2, "little") + b"\xff\xfe\xfd\xfc" + bytes(48)),
        ("random", rng.randbytes(rng.choice((1, 50, 500)))),
    ]
    wrong = Dialer(PeerKey(password + "x"), STRANGER)
    greeting = MAGIC + bytes(GREETING_BYTES - len(MAGIC))
    # a hello made for another greeting's nonce: its MAC cannot match this connection's
    cases.append(("replayed-hello", wrong.receive_greeting(greeting)))
    return cases


def test_the_peer_port_survives_garbage_and_the_cluster_keeps_its_leader(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    rng, fuzzed = start_fuzz("peer")
    c = Cluster(tmp_path_factory.mktemp("fuzz-peer"), n=3)
    failed = True
    try:
        leader = c.wait_ready(60)
        c.put_retrying(leader, b"/fuzz/before", b"1")
        terms = {i: c.status(i).term for i in range(c.n)}
        marks = {i: log_mark(c, i) for i in range(c.n)}
        stale_term = min(terms.values()) - 1  # what a message may carry without being news
        scale = fz.fuzz_scale()
        jobs = []
        with ThreadPoolExecutor(WORKERS) as pool:
            for i in range(c.n):
                port = c.nodes[i].peer_port
                for kind, data in peer_handshake_cases(rng, c.password):
                    jobs.append((i, f"handshake {kind}", data, pool.submit(
                        lambda p=port, d=data: _after_greeting(p, d))))  # fmt: skip
                with connect(port) as s:  # the wrong password: closed with no proof
                    dialer = Dialer(PeerKey(c.password + "x"), STRANGER)
                    s.sendall(dialer.receive_greeting(recv_exactly(s, GREETING_BYTES)))
                    if recv_exactly(s, PROOF_BYTES) != b"":
                        fuzzed.failures.append(f"n{i}: a wrong password got a proof")
                members = tuple(spec.peer_addr for spec in c.nodes)
                for kind, data in fz.peer_frames(
                    rng, 4 * scale, max_term=stale_term, members=members
                ):
                    jobs.append((i, f"frame {kind}", data, pool.submit(
                        peer_session, port, c.password, data)))  # fmt: skip
            for i, kind, data, job in jobs:
                closed, problem = job.result()
                fuzzed.count(kind.split()[0])
                if problem or not closed:
                    fuzzed.failures.append(
                        f"n{i} {kind} ({brief(data)}): {problem or 'the connection stayed open'}"
                    )
        # the cluster kept its leader and term, and commits
        assert c.wait_ready(30) == leader, "the fuzz moved the leader"
        assert {i: c.status(i).term for i in range(c.n)} == terms, "the fuzz changed a term"
        listed = c.cluster_stub(leader).MemberList(rpc_pb2.MemberListRequest(), timeout=10)
        assert len(listed.members) == c.n, "the fuzz changed the membership"
        c.put_retrying(leader, b"/fuzz/after", b"2")
        c.wait_converged()
        for i in range(c.n):
            assert c.range_all(i, b"/fuzz/", serializable=True).keys() == {
                b"/fuzz/before",
                b"/fuzz/after",
            }
        fuzzed.check()
        for i in range(c.n):
            assert_clean_log(c, i, marks[i], fuzzed)
        failed = False
    finally:
        c.close(failed=failed)


def _after_greeting(port: int, data: bytes) -> tuple[bool, str]:
    """Read the greeting, send ``data``, half-close: the node must close the connection."""
    with connect(port) as s:
        if not recv_exactly(s, GREETING_BYTES).startswith(MAGIC):
            return True, "no greeting"
        with contextlib.suppress(ConnectionError):
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        return wait_closed(s, CLOSE_TIMEOUT_S) is not None, ""
