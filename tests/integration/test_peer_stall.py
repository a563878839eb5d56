"""The Raft peer port across a stall of this node (its event loop blocked longer than the
peer idle timeout, as a SIGSTOP or a slow disk does): a peer that kept sending meanwhile
keeps its connection. Before the fix, the first sweep after the stall ran before the
buffered frames were read and closed every inbound connection ("sent no frame in time"),
so each member had to reconnect after being thawed."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog import NativeConfig, NativeEngine
from raftlog.native.auth import GREETING_BYTES, PROOF_BYTES, Dialer, PeerKey
from tests.harness import free_ports, wait_until
from tests.integration.peer_wire import connect, recv_exactly, wait_closed

pytestmark = pytest.mark.integration

_STALL_S = 2.5  # more than twice the idle timeout below
_KEEPALIVE = (0).to_bytes(4, "little")  # an empty frame


class StallingNode:
    """A one-member engine whose state machine blocks the engine's loop for ``_STALL_S``
    when it applies the entry b"stall"."""

    def __init__(self, tmp_path: Path) -> None:
        self.port = free_ports(1)[0]
        self.stalled = threading.Event()
        self.resumed = threading.Event()
        self.engine = NativeEngine(
            NativeConfig(
                "n0",
                {"n0": f"127.0.0.1:{self.port}"},
                str(tmp_path / "n0"),
                password="pw",
                peer_handshake_timeout_ms=1000,
                peer_idle_timeout_ms=1000,
                peer_frame_timeout_ms=400,
            )
        )
        self.engine.start(self._apply)

    def _apply(self, index: int, term: int, data: bytes) -> None:
        if data == b"stall":
            self.stalled.set()
            time.sleep(_STALL_S)  # the loop runs nothing else meanwhile
            self.resumed.set()

    def authenticated(self) -> socket.socket:
        s = connect(self.port)
        dialer = Dialer(PeerKey("pw"), "127.0.0.1:1")
        s.sendall(dialer.receive_greeting(recv_exactly(s, GREETING_BYTES)))
        dialer.receive_proof(recv_exactly(s, PROOF_BYTES))
        return s


@pytest.fixture
def node(tmp_path: Path) -> Iterator[StallingNode]:
    n = StallingNode(tmp_path)
    try:
        yield n
    finally:
        n.engine.stop()


def test_a_peer_that_kept_sending_through_this_nodes_stall_stays_connected(
    node: StallingNode, caplog: pytest.LogCaptureFixture
) -> None:
    wait_until(node.engine.is_leader, 15, "the one-member engine did not lead")
    with caplog.at_level(logging.WARNING, logger="raftlog.native"):
        with node.authenticated() as s:
            s.sendall(_KEEPALIVE)
            assert wait_closed(s, 0.2) is None
            node.engine.propose(b"stall", lambda index, err: None)
            wait_until(node.stalled.is_set, 10, "the stall did not start")
            wait_until(node.resumed.is_set, 10, "the stall did not end")
            until = time.monotonic() + 1.5  # more than the idle timeout past the stall
            while time.monotonic() < until:  # a member's keepalives, all along
                s.sendall(_KEEPALIVE)
                assert wait_closed(s, 0.1) is None, "closed after this node's stall"
            assert wait_closed(s, 6.0) is not None  # quiet from now on: closed in time
    closed = [r.getMessage() for r in caplog.records if "in time" in r.getMessage()]
    assert closed == ["closed a Raft peer connection that sent no frame in time"], closed
