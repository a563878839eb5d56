"""The Raft peer port's bounds on authenticated connections, in one process with short
timeouts (``NativeConfig.peer_*``): an authenticated connection that goes quiet and a frame
that stalls half way are closed, connections past the cap are closed at once, and members'
quiet connections (follower to follower) live on the dialer's keepalives.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog import NativeConfig, NativeEngine
from raftlog.native.auth import GREETING_BYTES, MAGIC, PROOF_BYTES, Dialer, PeerKey
from tests.harness import free_ports, wait_until
from tests.integration.peer_wire import connect, recv_exactly, wait_closed

pytestmark = pytest.mark.integration


class Engine:
    def __init__(self, tmp_path: Path, **limits: int) -> None:
        port = free_ports(1)[0]
        self.port = port
        self.key = PeerKey("pw")
        self.engine = NativeEngine(
            NativeConfig(
                "n0",
                {"n0": f"127.0.0.1:{port}"},
                str(tmp_path / "n0"),
                password="pw",
                **limits,  # type: ignore[arg-type]
            )
        )
        self.engine.start(lambda i, t, d: None)

    def authenticated(self) -> socket.socket:
        s = connect(self.port)
        dialer = Dialer(self.key, "127.0.0.1:1")
        s.sendall(dialer.receive_greeting(recv_exactly(s, GREETING_BYTES)))
        dialer.receive_proof(recv_exactly(s, PROOF_BYTES))
        return s


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    e = Engine(
        tmp_path,
        peer_handshake_timeout_ms=1000,
        peer_idle_timeout_ms=2000,
        peer_frame_timeout_ms=400,
        peer_max_connections=3,
    )
    try:
        yield e
    finally:
        e.engine.stop()


def test_an_authenticated_connection_that_goes_quiet_is_closed(engine: Engine) -> None:
    with engine.authenticated() as s:
        closed = wait_closed(s, 6.0)
    assert closed is not None and 1.5 <= closed, closed


def test_keepalives_keep_an_authenticated_connection_open(engine: Engine) -> None:
    with engine.authenticated() as s:
        until = time.monotonic() + 3.0  # longer than the 2 s idle timeout
        while time.monotonic() < until:
            s.sendall((0).to_bytes(4, "little"))  # an empty frame
            assert wait_closed(s, 0.3) is None
        assert wait_closed(s, 6.0) is not None  # quiet again: closed


def test_a_frame_that_stalls_half_way_is_closed_within_the_frame_timeout(engine: Engine) -> None:
    with engine.authenticated() as s:
        s.sendall((100).to_bytes(4, "little") + bytes(10))  # 10 of 100 bytes
        closed = wait_closed(s, 5.0)
    assert closed is not None and closed < 1.5, closed  # the frame timeout, not the idle one


def test_connections_past_the_cap_are_closed_at_once(engine: Engine) -> None:
    held = [connect(engine.port) for _ in range(3)]
    try:
        for s in held:
            assert recv_exactly(s, GREETING_BYTES).startswith(MAGIC)
        with connect(engine.port) as extra:
            closed = wait_closed(extra, 3.0)
            assert closed is not None and closed < 0.8, closed  # not the 1 s handshake timeout
        for s in held:  # the stalled handshakes go after the timeout, freeing the slots
            assert wait_closed(s, 5.0) is not None
        with engine.authenticated() as s:
            assert wait_closed(s, 0.3) is None
    finally:
        for s in held:
            s.close()


def test_members_keep_their_quiet_connections_open_with_keepalives(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Follower-to-follower connections carry no Raft traffic while a leader is stable:
    the dialer's keepalives (an empty frame every quarter of the idle timeout) keep them."""
    ports = free_ports(3)
    peers = {f"n{i}": f"127.0.0.1:{p}" for i, p in enumerate(ports)}
    engines = [
        NativeEngine(
            NativeConfig(
                f"n{i}",
                peers,
                str(tmp_path / f"n{i}"),
                password="pw",
                election_timeout_min_ms=300,
                election_timeout_max_ms=600,
                leader_step_down_ms=1000,
                peer_idle_timeout_ms=800,
            )
        )
        for i in range(3)
    ]
    try:
        with caplog.at_level(logging.WARNING, logger="raftlog.native"):
            for e in engines:
                e.start(lambda i, t, d: None)
            wait_until(
                lambda: (
                    sum(e.is_leader() for e in engines) == 1
                    and len({e.leader_address() for e in engines}) == 1
                ),
                15,
                "no leader",
            )
            term = engines[0].term()
            time.sleep(3.0)  # what is measured: nearly 4 idle timeouts pass quietly
        closed = [r.getMessage() for r in caplog.records if "in time" in r.getMessage()]
        assert closed == [], closed
        assert engines[0].term() == term  # and no election on the way
    finally:
        for e in engines:
            e.stop()
