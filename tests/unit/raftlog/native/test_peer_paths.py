"""raftlog.native.transport with ``peer_paths`` > 1: a stuck path is given up for another.

Under 20 % packet loss each way one TCP connection's retransmissions held every message
behind a lost segment for up to 4.3 s a minute (``python -m tests.faults.net.tcp_loss``);
with a second connection to move to once the kernel says the first is stuck, at most
2.2 s. These check the switch itself, with the kernel's answer (``stuck``) given.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest

from raftlog.errors import ConfigError
from raftlog.native import transport as tr
from raftlog.native.config import NativeConfig
from raftlog.native.transport import Peer, Transport

PEERS = {"n0": "127.0.0.1:7001", "n1": "127.0.0.1:7002"}
N1 = PEERS["n1"]


class FakeWriter:
    def __init__(self, name: str) -> None:
        self.name = name
        self.aborted = False
        self.transport = SimpleNamespace(abort=self._abort)

    def _abort(self) -> None:
        self.aborted = True

    def get_extra_info(self, key: str) -> None:
        return None


def _transport(paths: int, lost: list[str]) -> Transport:
    config = NativeConfig("n0", PEERS, "/j", password="pw", peer_paths=paths)
    core: Any = SimpleNamespace(leader=N1)
    loop = asyncio.new_event_loop()
    t = Transport(config, loop, core, lambda m: None, lambda: None, lambda to, r: None, lost.append)
    loop.close()
    return t


def _with_peer(t: Transport, *writers: FakeWriter | None) -> Peer:
    peer = Peer(N1, len(writers))
    peer.writers = list(writers)  # type: ignore[arg-type]
    t._peers[N1] = peer
    return peer


def _two_paths(
    monkeypatch: pytest.MonkeyPatch, stuck: dict[str, bool]
) -> tuple[Transport, Peer, FakeWriter, FakeWriter, list[str]]:
    """A transport with two paths to n1, "a" current, the kernel's word on each in ``stuck``;
    and the list ``on_lost`` appends to."""
    lost: list[str] = []
    t = _transport(2, lost)
    a, b = FakeWriter("a"), FakeWriter("b")
    peer = _with_peer(t, a, b)
    monkeypatch.setattr(tr, "stuck", lambda w: stuck[w.name])
    return t, peer, a, b, lost


def test_a_stuck_current_path_is_given_up_for_one_that_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    t, peer, a, b, lost = _two_paths(monkeypatch, {"a": True, "b": False})
    t.unstick()
    assert peer.writer is b and peer.switches == 1
    assert a.aborted and not b.aborted  # nothing it held arrives late
    assert peer.writers == [None, b]  # dialled again by its own task
    assert lost == [N1]  # the forwards written to it are answered (outcome unknown)
    t.unstick()  # b is fine: it stays
    assert peer.writer is b and lost == [N1]


def test_no_switch_when_every_path_is_stuck_or_the_current_one_is_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stuck = {"a": True, "b": True}
    t, peer, a, _, lost = _two_paths(monkeypatch, stuck)
    t.unstick()
    assert peer.writer is a and not a.aborted and lost == []
    stuck["a"] = False
    t.unstick()
    assert peer.writer is a and peer.switches == 0


def test_one_path_is_never_given_up_and_a_missing_current_falls_to_one_that_is_up(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tr, "stuck", lambda w: True)
    lost: list[str] = []
    t = _transport(1, lost)
    a = FakeWriter("a")
    peer = _with_peer(t, a)
    t.unstick()
    assert peer.writer is a and not a.aborted and lost == []
    b = FakeWriter("b")
    two = Peer(N1, 2)
    two.writers = [None, b]  # type: ignore[list-item]
    assert two.writer is b and two.current == 1
    assert Peer(N1, 2).writer is None


@pytest.mark.parametrize("paths", [0, 5])
def test_peer_paths_is_one_to_four(paths: int) -> None:
    with pytest.raises(ConfigError, match=r"^peer_paths: must be 1 to 4"):
        NativeConfig("n0", PEERS, "/j", password="pw", peer_paths=paths).validate()
