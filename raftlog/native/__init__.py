"""The native consensus engine (docs/operations.md, "Consensus engines"): a sans-I/O Raft
core, its WAL, the peer transport and the driver that runs them on one asyncio loop.

:mod:`~raftlog.native.messages` and :mod:`~raftlog.native.core` hold the protocol (no
I/O); :mod:`~raftlog.native.wal` the fdatasynced log; :mod:`~raftlog.native.auth`,
:mod:`~raftlog.native.conns` and :mod:`~raftlog.native.transport` the peer connections;
:mod:`~raftlog.native.engine` the engine itself (lifecycle, public API), whose loop pass
(:mod:`~raftlog.native.flush`) drives the transport, :mod:`~raftlog.native.forwarding` and
:mod:`~raftlog.native.snapshot_stream`, one object each.
"""

from raftlog.native.config import NativeConfig
from raftlog.native.engine import NativeEngine

__all__ = ["NativeConfig", "NativeEngine"]
