"""raftlog.native.core: linearizable reads by ReadIndex (Ongaro's dissertation §6.4), on the
simulated network of :mod:`tests.unit.raftlog.native.test_core`.

The leader answers a read with its commit index only after it committed an entry of its
own term and a majority answered a heartbeat round started after the read arrived; every
read waiting at a round's start shares it; a follower asks the leader; a deposed leader
never answers. No log entry is written, so reads work while followers' disks are full.
"""

from __future__ import annotations

import random

import pytest

from raftlog.native.core import RaftCore, Role
from raftlog.native.messages import KIND_NORMAL, LogEntry, Message, MsgType, NotLeader
from tests.unit.raftlog.native.test_core import TIMING, Sim, elect


def settled(sim: Sim) -> str:
    """A leader whose no-op committed everywhere."""
    leader = elect(sim)
    core = sim.cores[leader]
    sim.run_until(lambda: all(c.commit >= core.term_start for c in sim.cores.values()))
    return leader


def test_reads_waiting_together_share_one_heartbeat_round_6_4() -> None:
    sim = Sim(["a", "b", "c"])
    leader = settled(sim)
    core = sim.cores[leader]
    index, _ = sim.propose(b"x")
    sim.run_until(lambda: core.commit >= index)
    seq = core.read_seq
    for read_id in range(1, 11):
        core.read_index(read_id)
    sim.flush(leader)
    assert core.read_seq == seq + 1  # one round for the ten
    probes = [m for _, m in sim.net if m.type == MsgType.APPEND and m.offset == core.read_seq]
    assert len(probes) == 2 and all(not m.entries for m in probes)  # one per follower
    sim.run_until(lambda: len(core.read_states) == 10)
    assert core.read_states == [(i, core.commit) for i in range(1, 11)]
    assert core.read_seq == seq + 1


def test_reads_arriving_during_a_round_wait_for_the_next_one_6_4() -> None:
    sim = Sim(["a", "b", "c"])
    leader = settled(sim)
    core = sim.cores[leader]
    core.read_index(1)
    sim.flush(leader)
    core.read_index(2)  # the first round is in flight
    sim.flush(leader)
    seq = core.read_seq
    sim.run_until(lambda: len(core.read_states) == 2)
    assert [r for r, _ in core.read_states] == [1, 2] and core.read_seq == seq + 1


def test_a_follower_asks_the_leader_6_4() -> None:
    sim = Sim(["a", "b", "c"])
    leader = settled(sim)
    index, _ = sim.propose(b"x")
    sim.run_until(lambda: sim.cores[leader].commit >= index)
    follower = next(n for n in sim.cores if n != leader)
    f = sim.cores[follower]
    f.read_index(7)
    sim.flush(follower)
    sim.run_until(lambda: bool(f.read_states))
    assert f.read_states == [(7, sim.cores[leader].commit)]
    assert f.read_states[0][1] >= index  # covers every write acknowledged before


def test_a_new_leader_answers_only_after_committing_an_entry_of_its_term_6_4() -> None:
    """Its commit index may be behind the previous leader's until its no-op commits."""
    prior = [LogEntry(1, 1, KIND_NORMAL, b"x"), LogEntry(2, 1, KIND_NORMAL, b"y")]
    core = RaftCore("a", ["a", "b", "c"], term=1, entries=prior, commit=1, timing=TIMING)
    core.tick(5.0)  # pre-vote
    core.step(Message(MsgType.PRE_VOTE_RESP, 2, src="b"), 5.0)
    core.step(Message(MsgType.VOTE_RESP, 2, src="b"), 5.0)
    assert core.role == Role.LEADER and core.term_start == 3
    core.persisted(core.last_index)
    core.outbox.clear()
    core.after_persist.clear()
    core.read_index(1)
    core.start_reads(5.0)
    assert core.read_seq == 0 and not core.read_states and core.read_pending  # no round yet
    # b acknowledges everything up to the no-op: it commits (and so does entry 2)
    core.step(Message(MsgType.APPEND_RESP, 2, index=3, src="b"), 5.1)
    assert core.commit == 3
    core.start_reads(5.1)
    assert core.read_seq == 1
    probes = [(to, m) for to, m in core.outbox if m.type == MsgType.APPEND and m.offset == 1]
    assert {to for to, _ in probes} == {"b", "c"}
    core.step(Message(MsgType.APPEND_RESP, 2, index=3, offset=0, src="c"), 5.2)
    assert not core.read_states  # an answer to a message sent before the round
    core.step(Message(MsgType.APPEND_RESP, 2, index=3, offset=1, src="c"), 5.2)
    assert core.read_states == [(1, 3)]


def test_a_deposed_leader_never_answers_a_stale_read_index_6_4() -> None:
    sim = Sim(["a", "b", "c", "d", "e"], seed=3)
    old = settled(sim)
    old_core = sim.cores[old]
    sim.isolate(old)
    old_core.read_index(1)
    sim.flush(old)
    new = None

    def elected() -> bool:
        nonlocal new
        new = next((n for n, c in sim.cores.items() if n != old and c.role == Role.LEADER), None)
        return new is not None

    sim.run_until(elected)
    assert new is not None
    new_core = sim.cores[new]
    index, _ = new_core.propose(b"written after the partition")
    sim.flush(new)
    sim.run_until(lambda: new_core.commit >= index)
    assert not old_core.read_states  # no majority answers its round
    sim.run_until(lambda: old_core.role != Role.LEADER)  # check quorum (§6.2)
    assert old_core.read_states == [(1, 0)]  # refused: ask again
    sim.heal()  # back as a follower, it asks the new leader
    old_core.read_states.clear()
    sim.run_until(lambda: old_core.leader == new)
    old_core.read_index(2)
    sim.flush(old)
    sim.run_until(lambda: bool(old_core.read_states))
    assert old_core.read_states[0][0] == 2 and old_core.read_states[0][1] >= index


def test_reads_are_answered_while_the_followers_disks_are_full_6_4() -> None:
    sim = Sim(["a", "b", "c"])
    leader = settled(sim)
    core = sim.cores[leader]
    followers = [n for n in sim.cores if n != leader]
    sim.full.update(followers)
    sim.run(3 * TIMING.step_down_s)
    assert sim.leader() == leader
    core.read_index(1)
    sim.cores[followers[0]].read_index(2)
    sim.flush(leader)
    sim.flush(followers[0])
    sim.run_until(lambda: bool(core.read_states) and bool(sim.cores[followers[0]].read_states))
    assert core.read_states == [(1, core.commit)]
    assert sim.cores[followers[0]].read_states == [(2, core.commit)]


def test_a_follower_without_a_leader_is_refused_and_a_lone_leader_answers_at_once() -> None:
    core = RaftCore("a", ["a", "b", "c"], timing=TIMING, rng=random.Random(1))
    with pytest.raises(NotLeader):
        core.read_index(1)
    solo = RaftCore("a", ["a"], timing=TIMING)
    solo.tick(5.0)
    solo.persisted(solo.last_index)
    assert solo.role == Role.LEADER and solo.commit == solo.term_start
    solo.read_index(1)
    solo.start_reads(5.0)
    assert solo.read_states == [(1, solo.commit)]
