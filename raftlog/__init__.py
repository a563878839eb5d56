"""The replicated metadata log (docs/architecture.md). Imports only `snapshots` from the project."""

from raftlog.consensus import (
    CommitSink,
    ConsensusEngine,
    EngineStatus,
    InMemoryEngine,
    Member,
    ProposeCallback,
)
from raftlog.entry import Effect, Entry, decode_batch, encode_batch
from raftlog.errors import (
    ConfigError,
    LearnerNotReadyError,
    NoSpaceError,
    NotLeaderError,
    ProposalDroppedError,
    ProposeError,
    QueueFullError,
    RaftLogError,
    UnknownOutcomeError,
    UnsafeReconfigurationError,
)
from raftlog.log import (
    Applied,
    ApplyFailure,
    ApplyObserver,
    Change,
    Offsets,
    ReplicatedLog,
    StateMachine,
)
from raftlog.native import NativeConfig, NativeEngine
from raftlog.pysyncobj_engine import PySyncObjConfig, PySyncObjEngine
from raftlog.segment_files import SegmentCorruptionError
from raftlog.segments import SegmentConfig, SegmentLog

__all__ = [
    "Applied",
    "ApplyFailure",
    "ApplyObserver",
    "Change",
    "CommitSink",
    "ConfigError",
    "ConsensusEngine",
    "Effect",
    "EngineStatus",
    "Entry",
    "InMemoryEngine",
    "LearnerNotReadyError",
    "Member",
    "NativeConfig",
    "NativeEngine",
    "NoSpaceError",
    "NotLeaderError",
    "Offsets",
    "ProposalDroppedError",
    "ProposeCallback",
    "ProposeError",
    "PySyncObjConfig",
    "PySyncObjEngine",
    "QueueFullError",
    "RaftLogError",
    "ReplicatedLog",
    "SegmentConfig",
    "SegmentCorruptionError",
    "SegmentLog",
    "StateMachine",
    "UnknownOutcomeError",
    "UnsafeReconfigurationError",
    "decode_batch",
    "encode_batch",
]
