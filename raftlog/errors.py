"""Errors of the replicated log.

    RaftLogError
    ├── ProposeError                 consensus did not take the proposal; `retriable` says if trying again may work
    │   ├── NotLeaderError           no leader known, or the leader changed under the proposal (retriable)
    │   ├── ProposalDroppedError     the entry was replaced by another leader's entry (retriable)
    │   ├── QueueFullError           the consensus engine's queue is full (retriable)
    │   └── UnknownOutcomeError      the deadline passed; the entry may still be applied later
    ├── ConfigError                  a configuration field is invalid (names the field)
    ├── SegmentCorruptionError       (raftlog.segments) a change-log record in the middle is corrupt
    └── WalCorruptError              (raftlog.raft_wal) a native Raft log record before the tail is corrupt

A state machine that rejects an operation is not an error of this package: the rejection
is the apply result, delivered to the proposer like any other result.
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


class UnknownOutcomeError(ProposeError):
    """The deadline passed before the entry was applied here: it may or may not be applied."""

    retriable = True


class ConfigError(RaftLogError, ValueError):
    """A configuration field is out of range; the message names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
