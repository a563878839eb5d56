"""A follower asks its leader again for a read index it got no answer to
(raftlog/native/forwarding.py, ``READ_ASK_AGAIN_S``).

The transport drops a message to a peer it has no connection up to (Raft resends its own
messages; a READ_INDEX is not Raft's). Right after a healed partition the rejoining member
hears its leader before its own connection to the leader is dialled again, so the first
linearizable read through it waited out its client's deadline (1 s in the partition
campaign: the first read after a heal failed or took 0.5-0.9 s on most split and
isolated-leader faults). The read is now asked again; either answer is a valid read index.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from raftlog.errors import ProposeError
from raftlog.native.core import Role
from raftlog.native.forwarding import READ_ASK_AGAIN_S, Forwarding


class _Core:
    """What Forwarding reads of the core for reads: role, leader, read_index, read_states."""

    def __init__(self, role: Role, leader: str) -> None:
        self.role = role
        self.leader = leader
        self.asked: list[int] = []
        self.read_states: list[tuple[int, int]] = []
        self.delivered = 100

    def read_index(self, rid: int) -> None:
        self.asked.append(rid)


def _forwarding(core: _Core) -> tuple[Forwarding, list[int]]:
    config: Any = SimpleNamespace(wait_leader_ms=5000)
    kicks: list[int] = []
    f = Forwarding(
        config,
        core,  # type: ignore[arg-type]
        None,
        lambda to, m: None,
        lambda to, m, rid: None,
        lambda: kicks.append(1),
        lambda address: address,
    )
    return f, kicks


def test_a_follower_asks_again_for_a_read_index_it_got_no_answer_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    core = _Core(Role.FOLLOWER, "127.0.0.1:7001")
    f, _ = _forwarding(core)
    now = [1000.0]
    monkeypatch.setattr("raftlog.native.forwarding.time.monotonic", lambda: now[0])
    answers: list[tuple[int | None, ProposeError | None]] = []
    f.read_index(lambda index, err: answers.append((index, err)), None)
    [rid] = core.asked
    f.expire(now[0] + READ_ASK_AGAIN_S / 2)
    assert core.asked == [rid]  # not yet
    f.expire(now[0] + READ_ASK_AGAIN_S)
    assert core.asked == [rid, rid]  # the same read id: either answer will do
    f.expire(now[0] + READ_ASK_AGAIN_S * 1.5)
    assert core.asked == [rid, rid]  # once per interval
    core.read_states = [(rid, 90), (rid, 95)]  # both requests answered
    f.answer_reads()
    assert answers == [(90, None)]
    f.expire(now[0] + READ_ASK_AGAIN_S * 10)
    assert core.asked == [rid, rid]  # answered: never asked again


def test_a_leader_never_asks_again_and_no_leader_means_no_asking() -> None:
    core = _Core(Role.LEADER, "127.0.0.1:7001")
    f, _ = _forwarding(core)
    f.read_index(lambda index, err: None, None)
    f.expire(time.monotonic() + READ_ASK_AGAIN_S * 2)  # within the read's 5 s deadline
    assert len(core.asked) == 1  # a leader's own read: no message to lose

    follower = _Core(Role.FOLLOWER, "127.0.0.1:7001")
    g, _ = _forwarding(follower)
    g.read_index(lambda index, err: None, None)
    follower.leader = ""  # lost its leader: leader_changed() answers the read
    g.expire(time.monotonic() + READ_ASK_AGAIN_S * 2)
    assert len(follower.asked) == 1
