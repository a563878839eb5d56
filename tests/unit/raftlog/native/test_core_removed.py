"""RaftCore.removed (§4.2.3, removed servers; etcd's ErrMemberRemoved): a member learns that
it was removed once the configuration without it is committed in its log and no leader
writes to it any more, and a new member catching up through an older configuration without
it never thinks so (issue 29: a removed member kept serving)."""

from __future__ import annotations

from tests.unit.raftlog.native.test_core import TIMING, Sim, elect

QUIET_S = 2 * TIMING.election_max_s


def test_a_removed_follower_knows_it_once_the_leader_went_quiet_4_2_3() -> None:
    sim = Sim(["a", "b", "c"], seed=13)
    leader = elect(sim)
    sim.propose(b"x")
    sim.run(0.3)
    victim = next(n for n in ("a", "b", "c") if n != leader)
    stays = next(n for n in ("a", "b", "c") if n not in (leader, victim))
    sim.cores[leader].propose_change("remove", victim)
    sim.flush(leader)
    sim.run_until(lambda: victim not in sim.cores[victim].voters)
    assert not sim.cores[victim].removed(sim.now, QUIET_S)  # the leader still writes to it
    sim.run(QUIET_S + 0.5)
    assert sim.cores[victim].removed(sim.now, QUIET_S)
    assert sim.cores[victim].removed(sim.now + 60, QUIET_S)
    for name in (leader, stays):
        assert not sim.cores[name].removed(sim.now + 60, QUIET_S)


def test_a_joiner_on_an_older_configuration_is_not_removed_4_2_1() -> None:
    """``e`` joins after ``d``: while it catches up, the newest configuration in its log is
    often the committed one that added ``d`` (without ``e``), but the leader writes to it
    all along."""
    sim = Sim(["a", "b", "c"], seed=5)
    leader = elect(sim)
    sim.run(0.5)
    sim.add("d", voters=["a", "b", "c", "d"])
    sim.cores[leader].propose_change("add", "d")
    sim.flush(leader)
    sim.run(1.0)
    for i in range(1500):  # several rounds of appends (512 entries in flight at most)
        sim.cores[leader].propose(b"e%d" % i)
    sim.flush(leader)
    sim.run(1.0)
    sim.add("e", voters=["a", "b", "c", "d", "e"])
    sim.cores[leader].propose_change("add", "e")
    sim.flush(leader)
    e = sim.cores["e"]
    excluded = 0
    for _ in range(int(5.0 / 0.01)):
        sim.step()
        if "e" not in e.voters and e.commit >= e.config_index:
            excluded += 1  # what removal looks like, but not quiet
        assert not e.removed(sim.now, QUIET_S)
    assert excluded, "e never stood on the older configuration: the test misses its point"
    assert "e" in e.voters
    sim.run(QUIET_S + 1)
    assert not e.removed(sim.now, QUIET_S)
