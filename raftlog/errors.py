"""Errors of the replicated log.

    RaftLogError
    ├── ProposeError                 consensus did not take the proposal; `retriable` says if trying again may work
    │   ├── NotLeaderError           no leader known, or the leader changed under the proposal (retriable)
    │   ├── ProposalDroppedError     the entry was replaced by another leader's entry (retriable)
    │   ├── QueueFullError           the consensus engine's queue is full (retriable)
    │   ├── NoSpaceError             this node's disk is full (NOSPACE): writes are refused until space returns
    │   ├── UnsafeReconfigurationError  a membership change would leave fewer started members than a quorum
    │   ├── LearnerNotReadyError     a learner's promotion before its log caught up with the leader's
    │   └── UnknownOutcomeError      the deadline passed; the entry may still be applied later
    ├── ConfigError                  a configuration field is invalid (names the field)
    ├── SegmentCorruptionError       (raftlog.segment_files) a change-log record in the middle is corrupt
    ├── PeerAuthError                (raftlog.native.auth) a Raft peer handshake failed (bad password, bad format)
    └── WalCorruptError              (raftlog.native.wal) a native Raft log record before the tail is corrupt

A state machine that rejects an operation is not an error of this package: the rejection
is the apply result (``ApplyFailure(error)``, the exception itself, untouched), delivered
to the proposer like any other result.
"""

from __future__ import annotations


class RaftLogError(Exception):
    """Root of this package's errors."""

    retriable: bool = False


class ProposeError(RaftLogError):
    """Consensus did not take, or could not confirm, a proposal."""


class NotLeaderError(ProposeError):
    retriable = True

    def __init__(self, message: str, leader_hint: str = "") -> None:
        super().__init__(message)
        self.leader_hint = leader_hint


class ProposalDroppedError(ProposeError):
    retriable = True


class QueueFullError(ProposeError):
    retriable = True


class NoSpaceError(ProposeError):
    """A durable write on this node met ENOSPC: new writes are refused until space returns
    (the node leaves the state by itself; reads keep working)."""


class UnsafeReconfigurationError(ProposeError):
    """The strict reconfiguration check (etcd's ``--strict-reconfig-check``) refused a
    membership change: after it, fewer members would run than a quorum needs. Not retried:
    start the new member first, or remove members that are down first."""


class LearnerNotReadyError(ProposeError):
    """A learner (non-voting member) is promoted only once its log holds nearly all of the
    leader's (etcd 3.4's rule). Not retried here: the caller asks again later."""


class UnknownOutcomeError(ProposeError):
    """The deadline passed before the entry was applied here: it may or may not be applied."""

    retriable = True


class ConfigError(RaftLogError, ValueError):
    """A configuration field is out of range; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
