"""The Raft peer transport gives up a connection to a peer that went silent, and dials
again (raftlog/native/transport.py, ``peer_dead_timeout_ms``).

The peer here is a fake member: it accepts the engine's dial, completes the handshake and
reads (its kernel acknowledges everything) but never dials back, as a member on the far
side of a one-way partition looks. Before the deadline the engine wrote into such a
connection for as long as TCP let it (a black-holed one: until its retransmissions gave up,
13 s and more); now it is closed once nothing was heard for the deadline, and dialled again.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from raftlog import NativeConfig, NativeEngine
from raftlog.native.auth import HELLO_HEAD_BYTES, Listener, PeerKey
from tests.harness import free_ports, wait_until
from tests.integration.peer_wire import recv_exactly

pytestmark = pytest.mark.integration

_DEAD_MS = 1000


class SilentMember:
    """Accepts peer connections, answers the handshake, reads and drops what comes, and
    records when each connection opened and closed."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.conns: list[list[float]] = []  # [opened, closed or 0.0]
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            side = Listener(PeerKey("pw"))
            conn.sendall(side.greeting())
            head = recv_exactly(conn, HELLO_HEAD_BYTES)
            rest = recv_exactly(conn, side.hello_rest_bytes(head))
            conn.sendall(side.receive_hello(head + rest))
            record = [time.monotonic(), 0.0]
            self.conns.append(record)
            conn.settimeout(0.2)
            while not self._stop.is_set():
                try:
                    if not conn.recv(65536):
                        break
                except TimeoutError:
                    continue
                except OSError:
                    break
            record[1] = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(5)
        self.sock.close()


@pytest.fixture
def silent() -> Iterator[SilentMember]:
    member = SilentMember()
    try:
        yield member
    finally:
        member.close()


def test_a_connection_to_a_silent_peer_is_closed_within_the_deadline_and_dialled_again(
    tmp_path: Path, silent: SilentMember
) -> None:
    port = free_ports(1)[0]
    engine = NativeEngine(
        NativeConfig(
            "n0",
            {"n0": f"127.0.0.1:{port}", "n1": f"127.0.0.1:{silent.port}"},
            str(tmp_path / "n0"),
            password="pw",
            election_timeout_min_ms=300,
            election_timeout_max_ms=600,
            peer_dead_timeout_ms=_DEAD_MS,
        )
    )
    engine.start(lambda index, term, data: None)
    try:
        # the engine campaigns (pre-vote) and so dials n1; n1 never answers nor dials back
        wait_until(lambda: len(silent.conns) >= 3, 30, "the engine did not dial again")
    finally:
        engine.stop()
    first, second = silent.conns[0], silent.conns[1]
    lived = first[1] - first[0]
    assert first[1] > 0, "the first connection was never closed"
    # closed after the deadline (not before: keepalives kept going), well before TCP's
    # own give-up; 2 busy cores: generous on the upper side
    assert _DEAD_MS / 1000 - 0.05 <= lived <= _DEAD_MS / 1000 + 3.0, lived
    assert second[0] - first[1] < 3.0, "not dialled again promptly"
