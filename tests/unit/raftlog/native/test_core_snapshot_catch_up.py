"""raftlog.native.core: a follower caught up by snapshots while the leader keeps compacting
(§5.3), on the simulated network of :mod:`tests.unit.raftlog.native.test_core`.

The driver streams the snapshot file on the leader's connection and tells the core when the
last chunk was written (:meth:`RaftCore.snapshot_sent`); "written" is not "read": a
follower that is paused (SIGSTOP) reads it only when it runs again, by which time the
leader may have compacted past it, and the follower's answer may be lost (the leader
closed the paused follower's idle connection). These tests do by hand what the driver
does, and check that the leader keeps its follower (heartbeats during the transfer, §3.4)
and sends it the newer snapshot it needs, within heartbeats, not the transfer timeout.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from raftlog.native.core import MAX_INFLIGHT_ENTRIES, RaftCore, Role
from raftlog.native.messages import Message, MsgType
from tests.unit.raftlog.native.test_core import TIMING, Sim, elect


def compact(sim: Sim, leader: str, writes: int, tag: bytes) -> tuple[int, int, tuple[str, ...]]:
    """``writes`` more entries, applied, then a snapshot of all of them: the leader's log
    starts after it. Returns the snapshot's (index, term, voters)."""
    for i in range(writes):
        sim.propose(tag + b"%d" % i)
    sim.run(0.3)
    core = sim.cores[leader]
    core.compact(core.delivered)
    return core.snap_index, core.snap_term, core.config_at(core.snap_index)


def install(sim: Sim, name: str, leader: str, snap: tuple[int, int, tuple[str, ...]]) -> None:
    """What the follower's driver does with the last chunk: restore the core, rewrite the
    log file, load the image."""
    index, term, voters = snap
    core = sim.cores[name]
    assert core.restore(index, term, voters)
    d = sim.disks[name]
    d.term, d.vote, d.entries = core.term, core.vote, list(core.log)
    d.snap_index, d.snap_term, d.snap_voters = core.snap_index, core.snap_term, core.snap_voters
    sim.applied[name] = [a for a in sim.applied[leader] if a[0] <= index]


def stream_written(sim: Sim, leader: str, to: str, index: int) -> None:
    """The leader asked for a snapshot for ``to``; its driver wrote the file (at ``index``)
    into the connection."""
    core = sim.cores[leader]
    assert to in core.need_snapshot
    core.need_snapshot.discard(to)
    core.snapshot_sent(to, True, sim.now, index)
    sim.flush(leader)


def paused_follower_behind(sim: Sim) -> tuple[str, str, tuple[int, int, tuple[str, ...]]]:
    """A follower paused while the leader compacted past it; the leader's snapshot for it
    was written into its connection (unread: it is paused), then the leader compacted
    again. Returns (leader, follower, the snapshot written to it)."""
    leader = elect(sim)
    slow = next(n for n in sim.cores if n != leader)
    sim.propose(b"warm")
    sim.run(0.3)
    sim.down.add(slow)  # SIGSTOP: it neither runs nor reads (what is sent to it is lost here)
    # more than the leader lets be in flight to it (MAX_INFLIGHT_ENTRIES), so the log it
    # would send next is compacted away
    first = compact(sim, leader, MAX_INFLIGHT_ENTRIES + 100, b"a")
    sim.run_until(lambda: slow in sim.cores[leader].need_snapshot, seconds=1.0)
    stream_written(sim, leader, slow, first[0])
    newer = compact(sim, leader, 30, b"b")
    assert newer[0] > first[0]
    sim.run(1.0)
    return leader, slow, first


def keeps_leader(follower: RaftCore, leader: str, term: int) -> bool:
    return follower.role == Role.FOLLOWER and follower.leader == leader and follower.term == term


def test_a_follower_that_installed_a_snapshot_the_leader_compacted_past_gets_the_newer_one_5_3() -> (
    None
):
    """Its answer (the old snapshot's index, below the leader's log start) is lost: the
    leader learns where it is from its answers to heartbeats, and sends the newer snapshot;
    the follower keeps its leader all along (no election, no term change)."""
    sim = Sim(["a", "b", "c"], seed=43)
    leader, slow, first = paused_follower_behind(sim)
    core, follower = sim.cores[leader], sim.cores[slow]
    term = core.term
    sim.down.discard(slow)  # SIGCONT: it reads the snapshot chunks, then installs them ...
    install(sim, slow, leader, first)
    # ... and its SNAPSHOT_RESP is lost: the leader had closed its idle connection
    sim.run_until(lambda: slow in core.need_snapshot, seconds=3 * TIMING.heartbeat_s)
    sim.run(TIMING.election_max_s)  # the transfer takes a while: heartbeats keep it
    assert keeps_leader(follower, leader, term)
    stream_written(sim, leader, slow, core.snap_index)
    install(sim, slow, leader, (core.snap_index, core.snap_term, core.snap_voters))
    sim.propose(b"tail")
    sim.run(0.5)
    assert sim.applied[slow] == sim.applied[leader]
    assert sim.applied[slow][-1][2] == b"tail"
    assert keeps_leader(follower, leader, term) and core.progress[slow].match == core.last_index


def test_a_follower_answering_with_a_snapshot_older_than_the_log_start_gets_the_newer_one_5_3() -> (
    None
):
    sim = Sim(["a", "b", "c"], seed=47)
    leader, slow, first = paused_follower_behind(sim)
    core = sim.cores[leader]
    sim.down.discard(slow)
    install(sim, slow, leader, first)
    core.step(Message(MsgType.SNAPSHOT_RESP, core.term, index=first[0], src=slow), sim.now)
    assert slow in core.need_snapshot  # at once: the log starts after what it holds
    assert core.progress[slow].match == first[0]


def test_a_snapshot_written_into_a_connection_that_died_is_sent_again_5_3() -> None:
    """The driver wrote the whole snapshot, but the connection closed before the follower
    read it: the follower's answers to heartbeats sent after it still show its old log,
    so the leader sends the snapshot again (after a pause, not the transfer timeout)."""
    sim = Sim(["a", "b", "c"], seed=53)
    leader, slow, _ = paused_follower_behind(sim)
    core, follower = sim.cores[leader], sim.cores[slow]
    before = follower.last_index
    sim.down.discard(slow)  # it runs again; the chunks never reach it
    sim.run(3 * TIMING.heartbeat_s)
    assert keeps_leader(follower, leader, core.term)
    assert follower.last_index == before
    sim.run_until(lambda: slow in core.need_snapshot, seconds=2 * TIMING.election_max_s)
    stream_written(sim, leader, slow, core.snap_index)
    install(sim, slow, leader, (core.snap_index, core.snap_term, core.snap_voters))
    sim.propose(b"tail")
    sim.run(0.5)
    assert sim.applied[slow] == sim.applied[leader]


def test_a_follower_that_holds_the_log_start_is_caught_up_from_the_log_mid_transfer_5_3() -> None:
    """A snapshot is on its way, but the follower's answer shows it already holds every
    entry before the leader's log start (it caught up another way): the leader goes on
    from its log instead of waiting for the transfer."""
    sim = Sim(["a", "b", "c"], seed=59)
    leader, slow, _ = paused_follower_behind(sim)
    core = sim.cores[leader]
    sim.down.discard(slow)
    # it got a newer snapshot than the one in flight (say from an earlier transfer)
    install(sim, slow, leader, (core.snap_index, core.snap_term, core.snap_voters))
    sim.propose(b"tail")
    sim.run(0.5)
    assert sim.applied[slow] == sim.applied[leader]
    assert core.progress[slow].snapshot_until == 0.0


class Driver:
    """The snapshot half of each member's driver, on the simulation: a leader's request
    becomes a transfer written whole (or one that fails); a written one reaches a running
    follower at once, a paused one when it runs again, or never (its connection closed);
    the follower's answer may be lost."""

    def __init__(self, sim: Sim, rng: random.Random) -> None:
        self.sim, self.rng = sim, rng
        self.unread: dict[str, tuple[str, tuple[int, int, tuple[str, ...]]]] = {}

    def step(self) -> None:
        sim = self.sim
        for name, core in sim.cores.items():
            if name in sim.down or core.role != Role.LEADER:
                continue
            for to in sorted(core.need_snapshot):
                core.need_snapshot.discard(to)
                snap = (core.snap_index, core.snap_term, core.snap_voters)
                fate = self.rng.random()
                core.snapshot_sent(to, fate >= 0.1, sim.now, snap[0])
                if fate >= 0.3:  # written; below: failed, or lost with its connection
                    self.unread[to] = (name, snap)
        for to in [t for t in self.unread if t not in sim.down]:
            leader, snap = self.unread.pop(to)
            if snap[0] > sim.cores[to].commit:
                install(sim, to, leader, snap)
            if self.rng.random() < 0.5:  # else its answer is lost
                m = Message(MsgType.SNAPSHOT_RESP, sim.cores[to].term, index=snap[0], src=to)
                sim.net.append((leader, m))


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_followers_paused_while_the_leader_compacts_catch_up_within_seconds_5_3(
    seed: int,
) -> None:
    """Members paused and resumed while everyone compacts, snapshot transfers failing,
    lost or answered into the void: once all run again, every member has everything
    within a few election timeouts (the transfer timeout is minutes)."""
    names = ["a", "b", "c"]
    sim = Sim(names, seed=seed)
    rng = random.Random(seed)
    driver = Driver(sim, rng)

    def run(seconds: float) -> None:
        for _ in range(int(seconds / 0.01)):
            sim.step()
            driver.step()

    elect(sim)
    for round_ in range(30):
        action = rng.random()
        if action < 0.2 and not sim.down:
            sim.down.add(rng.choice(names))  # SIGSTOP
        elif action < 0.4 and sim.down:
            sim.down.clear()  # SIGCONT
        elif action < 0.7:
            name = rng.choice(names)
            core = sim.cores[name]
            core.compact(core.delivered)
        leader = sim.leader()
        if leader is not None:
            for i in range(rng.choice([1, 50, 600])):
                sim.cores[leader].propose(b"r%d.%d" % (round_, i))
            sim.flush(leader)
        run(rng.choice([0.05, 0.3, 1.0]))
    sim.down.clear()
    run(3 * TIMING.election_max_s)
    leader = elect(sim)
    index, _ = sim.cores[leader].propose(b"final")
    sim.flush(leader)
    deadline = sim.now + 5 * TIMING.election_max_s
    while not all(c.commit >= index for c in sim.cores.values()):
        assert sim.now < deadline, {n: (c.role, c.commit) for n, c in sim.cores.items()}
        run(0.1)
    run(0.1)
    assert all(a == sim.applied[leader] for a in sim.applied.values())
