"""The full-disk NOSPACE a member raises for itself, and how it clears it (DiskAlarm), with
a log that commits only when told: the order of the checks and of the commits is the
test's, not a clock's (issue 29: a NOSPACE that stayed after the disk recovered)."""

from __future__ import annotations

import asyncio
import contextlib
import errno
from collections.abc import Sequence

from nameserver.cluster.apply import alarm_entry
from nameserver.cluster.liveness import DiskAlarm
from nameserver.cluster.records import ALARM_NOSPACE, alarm_key
from nameserver.kinds import REGISTRY
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import Applied, Entry, UnknownOutcomeError
from raftlog.consensus import Member
from raftlog.health import Health

ME = 0xA1
ENOSPC = OSError(errno.ENOSPC, "No space left on device")


class HeldLog:
    """Proposals wait in order; while ``disk_full`` nothing commits (the proposer times
    out, its entry stays in the log), else a proposal commits with all before it.
    :meth:`commit` commits what waits (the followers catch up)."""

    def __init__(self, state: MetadataStateMachine) -> None:
        self.health = Health()
        self.state = state
        self.disk_full = False
        self.waiting: list[Sequence[Entry]] = []
        self.offset = 0

    async def propose(
        self, entries: Sequence[Entry], timeout_s: float, even_if_full: bool = False
    ) -> Applied:
        self.waiting.append(entries)
        if self.disk_full:
            raise UnknownOutcomeError("no commit in time (every Raft log is full)")
        self.commit()
        return Applied(self.offset, None)

    def commit(self) -> None:
        for entries in self.waiting:
            self.offset += 1
            self.state.apply(self.offset, 1, list(entries))
        self.state.publish()
        self.waiting = []

    def lose(self) -> None:
        """A new leader's log replaced what waited: it never commits."""
        self.waiting = []


class ThreeMembers:
    def members(self) -> list[Member]:
        return [Member(f"127.0.0.1:{port}") for port in (1, 2, 3)]


def disk_alarm() -> tuple[DiskAlarm, HeldLog, MetadataStateMachine]:
    state = MetadataStateMachine.empty(REGISTRY)
    rlog = HeldLog(state)
    alarm = DiskAlarm(rlog, state, ThreeMembers(), ME, timeout_s=1.0)  # type: ignore[arg-type]
    return alarm, rlog, state


def raised(state: MetadataStateMachine) -> bool:
    return state.image.alarms.get(alarm_key(ME, ALARM_NOSPACE)) is not None


def check(alarm: DiskAlarm) -> None:
    """One periodic check (what ``run_every`` does: a failure waits for the next one)."""
    with contextlib.suppress(UnknownOutcomeError):
        asyncio.run(alarm.raise_if_full())


def fill(alarm: DiskAlarm, rlog: HeldLog) -> None:
    """The disk fills: the member proposes its NOSPACE, which cannot commit yet."""
    rlog.disk_full = True
    rlog.health.fault("raft-log", ENOSPC)
    check(alarm)
    (activate,) = rlog.waiting[0]
    request = records_pb2.AlarmOperation.FromString(activate.value).request
    assert (request.action, request.memberID) == (rpc_pb2.AlarmRequest.ACTIVATE, ME)


def free(rlog: HeldLog) -> None:
    rlog.disk_full = False
    rlog.health.clear("raft-log")


def test_nospace_committed_after_the_disk_recovered_is_still_cleared() -> None:
    """Every Raft log was full: the ACTIVATE waits uncommitted, the disk recovers and the
    member checks before its ACTIVATE has applied here. Its disarm goes in behind it, so
    the alarm is gone once both committed (before the fix it was never disarmed)."""
    alarm, rlog, state = disk_alarm()
    fill(alarm, rlog)
    free(rlog)
    check(alarm)  # the ACTIVATE has not applied here yet
    rlog.commit()  # the followers caught up
    for _ in range(3):
        check(alarm)
    assert not raised(state)
    assert rlog.waiting == []


def test_nospace_already_applied_when_the_disk_recovers_is_cleared() -> None:
    alarm, rlog, state = disk_alarm()
    fill(alarm, rlog)
    rlog.commit()  # the other members committed it; this one applied it
    assert raised(state)
    check(alarm)  # still full: nothing more to propose
    assert rlog.waiting == []
    free(rlog)
    check(alarm)
    assert not raised(state)


def test_a_lost_nospace_is_not_disarmed_for_ever_after() -> None:
    """The ACTIVATE was lost with a leader change: one disarm (which changes nothing) ends
    the episode; a NOSPACE raised later by the quota waits for ``alarm disarm``."""
    alarm, rlog, state = disk_alarm()
    fill(alarm, rlog)
    rlog.lose()
    free(rlog)
    check(alarm)
    assert not raised(state)
    quota = rpc_pb2.AlarmRequest(
        action=rpc_pb2.AlarmRequest.ACTIVATE, memberID=ME, alarm=rpc_pb2.NOSPACE
    )
    asyncio.run(rlog.propose([alarm_entry(quota)], 1.0))
    for _ in range(3):
        check(alarm)
    assert raised(state)


def test_a_disarm_that_times_out_is_proposed_again() -> None:
    alarm, rlog, state = disk_alarm()
    fill(alarm, rlog)
    rlog.commit()
    rlog.health.clear("raft-log")  # the disk has room, but no commit comes in time yet
    check(alarm)
    assert raised(state)
    rlog.disk_full = False
    check(alarm)
    assert not raised(state)
