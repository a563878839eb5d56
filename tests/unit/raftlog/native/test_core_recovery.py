"""raftlog.native.core: recovering members and guarding membership, on the simulated network of
:mod:`tests.unit.raftlog.native.test_core` (no sockets, no disk, no clock).

* A follower whose data was wiped restarts with an empty log while the leader remembers
  it matched far more. Raft assumes what was acknowledged stays on disk (§3.8); etcd-raft's
  leader never moves ``next`` below ``match``, so such a follower would be stuck forever.
  Here the leader notices (the follower's rejection carries its last index) and catches
  it up from the log (§3.5) or, when the log was compacted, from a snapshot (§5.3).
* Single-server changes (§4.1) are refused when the members that answer would be fewer
  than a quorum of the new configuration (etcd's ``--strict-reconfig-check``): adding
  members that never start must not cost the cluster its leader (§4.2.1 is about new
  servers catching up; this is about them never showing up).
"""

from __future__ import annotations

import logging

import pytest

from raftlog.native.core import RaftCore, Role
from raftlog.native.messages import (
    KIND_CONFIG,
    KIND_NORMAL,
    ChangeRefused,
    LogEntry,
    Message,
    MsgType,
    UnsafeChange,
    decode_voters,
    encode_voters,
    standalone_config,
)
from tests.unit.raftlog.native.test_core import TIMING, Disk, Sim, elect


def wipe(sim: Sim, name: str) -> None:
    """The member's data dir is deleted; it restarts with the same command (same voters)."""
    sim.crash(name)
    sim.disks[name] = Disk(snap_voters=tuple(sim.voters))
    sim.applied[name] = []
    sim.restart(name)


def values(sim: Sim, name: str) -> list[bytes]:
    return [d for _, _, d in sim.applied[name]]


def lost_log_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "lost its log" in r.getMessage()]


def test_a_follower_that_lost_its_log_is_caught_up_from_the_log_3_5(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim = Sim(["a", "b", "c"], seed=31)
    leader = elect(sim)
    for i in range(40):
        sim.propose(b"w%d" % i)
    sim.run(0.5)
    victim = next(n for n in sim.cores if n != leader)
    core = sim.cores[leader]
    matched = core.progress[victim].match
    assert matched == core.last_index
    caplog.set_level(logging.WARNING, logger="raftlog.native.core")
    wipe(sim, victim)
    assert sim.cores[victim].last_index == 0
    sim.run(1.0)  # heartbeats find it empty: the leader resends everything
    sim.propose(b"after")
    sim.run(0.5)
    assert values(sim, victim) == values(sim, leader)
    assert values(sim, victim)[-1] == b"after" and len(values(sim, victim)) == 41
    assert sim.cores[victim].last_index == core.last_index
    assert core.progress[victim].match == core.last_index
    warned = lost_log_warnings(caplog)
    assert warned == [
        f"member {victim} lost its log (its last index 0 < matched {matched}); "
        "catching it up from the log"
    ]
    assert sim.leader() == leader  # nobody's term moved


def test_a_follower_that_lost_its_log_is_caught_up_from_a_snapshot_5_3(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sim = Sim(["a", "b", "c"], seed=37)
    leader = elect(sim)
    for i in range(30):
        sim.propose(b"s%d" % i)
    sim.run(0.5)
    core = sim.cores[leader]
    core.compact(core.delivered)  # a snapshot now holds everything applied
    index, term = core.snap_index, core.snap_term
    victim = next(n for n in sim.cores if n != leader)
    caplog.set_level(logging.WARNING, logger="raftlog.native.core")
    wipe(sim, victim)
    sim.run_until(lambda: victim in core.need_snapshot)
    assert "catching it up from a snapshot" in lost_log_warnings(caplog)[0]
    # what the driver does: stream the file, then the follower installs it
    core.need_snapshot.discard(victim)
    follower = sim.cores[victim]
    assert follower.restore(index, term, core.config_at(index))
    sim.applied[victim] = list(sim.applied[leader])
    core.step(Message(MsgType.SNAPSHOT_RESP, core.term, index=index, src=victim), sim.now)
    sim.flush(leader)
    sim.propose(b"tail")
    sim.run(0.5)
    assert values(sim, victim) == values(sim, leader)
    assert values(sim, victim)[-1] == b"tail"
    assert follower.last_index == core.last_index and follower.commit == core.commit


def test_a_stale_or_lagging_follower_is_not_called_lost_3_5(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A follower that was down keeps its log: it is behind, not lost (no warning)."""
    sim = Sim(["a", "b", "c"], seed=41)
    leader = elect(sim)
    slow = next(n for n in sim.cores if n != leader)
    for i in range(5):
        sim.propose(b"x%d" % i)
    sim.run(0.3)
    caplog.set_level(logging.WARNING, logger="raftlog.native.core")
    sim.crash(slow)
    for i in range(20):
        sim.propose(b"y%d" % i)
    sim.run(0.3)
    sim.restart(slow)
    sim.run(1.0)
    assert values(sim, slow) == values(sim, leader)
    assert not lost_log_warnings(caplog)


def test_a_follower_told_to_commit_past_its_log_clamps_and_says_so_once_3_5(
    caplog: pytest.LogCaptureFixture,
) -> None:
    follower = RaftCore("b", ["a", "b"], timing=TIMING)
    follower.step(
        Message(MsgType.APPEND, 1, index=0, log_term=0, commit=9, src="a"), 0.0
    )  # the leader thinks b has 9 entries; b has none: the heartbeat commits nothing
    follower.outbox.clear()
    caplog.set_level(logging.INFO, logger="raftlog.native.core")
    for t in range(5):  # heartbeats whose commit is past this log
        m = Message(MsgType.APPEND, 1, index=9, log_term=1, commit=9, src="a")
        follower.step(m, 0.1 * t)
    resp = follower.outbox[-1][1]
    assert resp.reject and resp.flag and resp.index == 0 and resp.hint == 0
    assert follower.commit == 0
    gap = [
        r for r in caplog.records if "behind what the leader a has committed (9)" in r.getMessage()
    ]
    assert len(gap) == 1 and gap[0].levelno == logging.INFO  # routine: a member joining
    assert "this node's log ends at index 0" in gap[0].getMessage()
    # an append that matches, with a commit past what it carries: commit only what it has
    entries = [LogEntry(1, 1, 0, b"e1"), LogEntry(2, 1, 0, b"e2")]
    m = Message(MsgType.APPEND, 1, index=0, log_term=0, commit=9, entries=entries, src="a")
    follower.step(m, 1.0)
    assert follower.last_index == 2 and follower.commit == 2


def test_strict_reconfig_adding_members_that_never_start_keeps_the_leader_4_1() -> None:
    sim = Sim(["a", "b", "c"], seed=43)
    leader = elect(sim)
    core = sim.cores[leader]
    term = core.term
    sim.run(0.5)
    # 3 started of 4, quorum 3: allowed (the cluster still commits without "d")
    core.propose_change("add", "d")
    sim.flush(leader)
    sim.run(0.5)
    assert "d" in core.voters and core.commit >= core.config_index
    # 3 started of 5, quorum 3: allowed
    core.propose_change("add", "e")
    sim.flush(leader)
    sim.run(0.5)
    assert core.commit >= core.config_index and len(core.voters) == 5
    # 3 started of 6, quorum 4: refused; it would leave the cluster leaderless
    with pytest.raises(UnsafeChange, match="not enough started members"):
        core.propose_change("add", "f")
    assert len(core.voters) == 5
    # removing a running member from five (two never started): 2 started of 4, refused
    running = next(n for n in ("a", "b", "c") if n != leader)
    with pytest.raises(UnsafeChange, match=r"2 of the 4 members .* quorum is 3"):
        core.propose_change("remove", running)
    # removing one that never started is fine: 3 started of 4
    core.propose_change("remove", "d")
    sim.flush(leader)
    sim.run(3.0)
    assert sim.leader() == leader and core.term == term
    assert core.voters == tuple(sorted({"a", "b", "c", "e"}))
    sim.propose(b"still commits")
    sim.run(0.5)
    assert values(sim, leader)[-1] == b"still commits"


def test_strict_reconfig_counts_only_members_heard_from_recently_4_1() -> None:
    sim = Sim(["a", "b", "c"], seed=47)
    leader = elect(sim)
    core = sim.cores[leader]
    sim.run(0.5)
    down = next(n for n in sim.cores if n != leader)
    sim.crash(down)
    sim.run(TIMING.election_max_s + 0.2)  # still leads: 2 of 3 answer
    assert core.role == Role.LEADER
    assert core.started_members(sim.now) == set(core.voters) - {down}
    # 2 started of 4, quorum 3
    with pytest.raises(UnsafeChange):
        core.propose_change("add", "d")
    # removing the running follower: 1 started of 2, quorum 2
    other = next(n for n in sim.cores if n not in (leader, down))
    with pytest.raises(UnsafeChange):
        core.propose_change("remove", other)
    # removing the one that is down is what an operator wants: 2 of 2
    core.propose_change("remove", down)
    sim.flush(leader)
    sim.run(0.5)
    assert down not in core.voters and core.commit >= core.config_index


def test_strict_reconfig_can_be_turned_off_and_lets_one_member_grow_4_1() -> None:
    loose = RaftCore("a", ["a", "b", "c"], timing=TIMING, strict_reconfig=False)
    loose._become_leader(0.0)
    loose.persisted(loose.last_index)
    for p in loose.progress.values():
        p.match = loose.last_index
    loose._maybe_commit()
    # nobody answered for ages: a strict leader would refuse; this one does not check
    loose.propose_change("add", "d", now=100.0)
    single = RaftCore("a", ["a"], timing=TIMING)
    single.tick(5.0)  # alone: elected at its first election timeout
    assert single.role == Role.LEADER
    single.persisted(single.last_index)
    assert single.commit == single.last_index
    single.propose_change("add", "b", now=6.0)  # 1 started of 2: etcd allows it
    single.tick(6.0 + TIMING.step_down_s / 2)  # b has not answered yet: no step-down (§6.2)
    assert single.role == Role.LEADER
    with pytest.raises(ChangeRefused, match="in progress"):
        single.propose_change("add", "c")


def test_force_new_cluster_appends_a_config_of_one_and_keeps_every_entry_4_1() -> None:
    """etcd's --force-new-cluster: this member's log, plus a configuration that leaves it
    the only voter; elected alone, it commits everything it holds (§3.6.2: its no-op
    commits the entries of earlier terms)."""
    entries = [LogEntry(i, 2, KIND_NORMAL, b"k%d" % i) for i in range(8, 13)]
    forced = standalone_config("a", ["a", "b", "c"], entries, 9, 2, term=3)
    assert forced is not None
    assert (forced.index, forced.term, forced.kind) == (13, 3, KIND_CONFIG)
    assert decode_voters(forced.data) == ("a",)
    # the log was all inside the snapshot: the entry follows the snapshot
    assert standalone_config("a", ["a", "b"], entries[:1], 10, 2, term=2) == LogEntry(
        11, 2, KIND_CONFIG, encode_voters(["a"])
    )
    # already alone (a config entry in the log says so): nothing to do
    assert standalone_config("a", ["a", "b", "c"], [*entries, forced], 9, 2, term=3) is None
    core = RaftCore(
        "a",
        ["a", "b", "c"],
        term=3,
        entries=[*entries, forced],
        snap_index=9,
        snap_term=2,
        commit=10,
        timing=TIMING,
    )
    assert core.voters == ("a",)
    core.tick(5.0)  # its election timeout: a quorum of one
    assert core.role == Role.LEADER and core.term == 4
    core.persisted(core.last_index)
    assert core.commit == core.last_index == 14
    # everything after the snapshot reaches the state machine (which skips what it applied)
    assert [e.data for e in core.committed_entries() if e.kind == KIND_NORMAL] == [
        b"k10",
        b"k11",
        b"k12",
    ]


def test_a_removed_member_learns_that_its_removal_committed_4_2_2() -> None:
    """The member being removed gets the entry and its commit (so a request waiting on it
    there is answered); then the leader stops sending to it, and it never campaigns."""
    sim = Sim(["a", "b", "c"], seed=53)
    leader = elect(sim)
    sim.run(0.5)
    core = sim.cores[leader]
    victim = next(n for n in sim.cores if n != leader)
    index, _ = core.propose_change("remove", victim)
    sim.flush(leader)
    sim.run(0.5)
    removed = sim.cores[victim]
    assert victim not in removed.voters and removed.commit >= index
    assert victim not in core.progress  # forgotten once told
    term = core.term
    sim.propose(b"without it")
    sim.run(5.0)
    assert sim.leader() == leader and core.term == term
    assert values(sim, leader)[-1] == b"without it"
    assert removed.role == Role.FOLLOWER and removed.term == term
