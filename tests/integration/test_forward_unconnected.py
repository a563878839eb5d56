"""A proposal on a follower whose leader it has no connection to (the follower is
redialling it: the leader was just elected, restarted or thawed after a SIGSTOP) fails at
once with "not leader" (UNAVAILABLE for clients, who retry) instead of being dropped with
its frame and answered only at the forward deadline, after the client's own (3 s in the
fault tests) has passed.

The leader here is the test itself: it authenticates to the node's peer port claiming a
member's address where nothing listens, and sends heartbeats (empty appends) of a newer
term, so the node follows it but cannot dial it back."""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog import NativeConfig, NativeEngine, NotLeaderError
from raftlog.native.auth import GREETING_BYTES, PROOF_BYTES, Dialer, PeerKey
from raftlog.native.messages import Message, MsgType, encode_message
from tests.harness import free_ports, wait_until
from tests.integration.peer_wire import connect, recv_exactly

pytestmark = pytest.mark.integration


def _frame(m: Message) -> bytes:
    payload = encode_message(m)
    return struct.pack("<I", len(payload)) + payload


class UnreachableLeader:
    """Heartbeats of term 5 to the node from a member address nobody listens on."""

    def __init__(self, node_port: int, address: str) -> None:
        self.sock = connect(node_port)
        dialer = Dialer(PeerKey("pw"), address)
        self.sock.sendall(dialer.receive_greeting(recv_exactly(self.sock, GREETING_BYTES)))
        dialer.receive_proof(recv_exactly(self.sock, PROOF_BYTES))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        heartbeat = _frame(Message(MsgType.APPEND, 5, index=0, log_term=0, commit=0))
        while not self._stop.is_set():
            try:
                self.sock.sendall(heartbeat)
            except OSError:
                return
            self._stop.wait(0.05)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.sock.close()


@pytest.fixture
def follower(tmp_path: Path) -> Iterator[tuple[NativeEngine, str]]:
    me, unreachable = free_ports(2)  # nothing ever listens on the second port
    leader = f"127.0.0.1:{unreachable}"
    engine = NativeEngine(
        NativeConfig(
            "n0",
            {"n0": f"127.0.0.1:{me}", "n1": leader},
            str(tmp_path / "n0"),
            password="pw",
        )
    )
    engine.start(lambda i, t, d: None)
    beats = UnreachableLeader(me, leader)
    try:
        yield engine, leader
    finally:
        beats.close()
        engine.stop()


def test_a_proposal_forwarded_to_an_unconnected_leader_fails_at_once(
    follower: tuple[NativeEngine, str],
) -> None:
    engine, leader = follower
    wait_until(lambda: engine.leader_address() == leader, 10, "the node did not follow")
    done = threading.Event()
    outcome: list[object] = []

    def answered(index: int | None, err: Exception | None) -> None:
        outcome.append(err if err is not None else index)
        done.set()

    started = time.monotonic()
    engine.propose(b"put", answered)
    assert done.wait(10), "the proposal was never answered"
    elapsed = time.monotonic() - started
    assert engine.leader_address() == leader  # it still follows: no election failed it
    err = outcome[0]
    assert isinstance(err, NotLeaderError), err
    assert "no connection to the leader" in str(err) and err.leader_hint == "n1"
    assert elapsed < 1.0, f"answered only after {elapsed:.1f} s"
