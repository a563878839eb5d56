"""The replicated metadata log (docs/architecture.md): consensus, group commit, apply,
snapshots.

:class:`ReplicatedLog` (:mod:`raftlog.log.replicated`) builds and wires its parts, one
object each, owning its fields: :mod:`~raftlog.log.group_commit` (propose and wait),
:mod:`~raftlog.log.apply` (the apply thread and inline apply),
:mod:`~raftlog.log.read_barrier` and :mod:`~raftlog.log.snapshot_duties`; what it drives
and returns is in :mod:`~raftlog.log.contracts`.
"""

from raftlog.log.contracts import (
    Applied,
    ApplyFailure,
    ApplyObserver,
    Captured,
    Change,
    Offsets,
    Record,
    SnapshotSink,
    StateMachine,
)
from raftlog.log.group_commit import leader_stamp, leader_takes_over
from raftlog.log.replicated import ReplicatedLog
from raftlog.log.snapshot_duties import gc_paused

__all__ = [
    "Applied",
    "ApplyFailure",
    "ApplyObserver",
    "Captured",
    "Change",
    "Offsets",
    "Record",
    "ReplicatedLog",
    "SnapshotSink",
    "StateMachine",
    "gc_paused",
    "leader_stamp",
    "leader_takes_over",
]
