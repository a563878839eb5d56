"""Errors of the Redis replicator.

    RedisReplicatorError
    ├── ProtocolError              the master sent bytes that are not what the protocol allows
    │   │                          (``offset``: the byte position in the stream where it broke)
    │   ├── RdbError               the RDB payload is malformed (``offset`` inside the RDB)
    │   │   ├── RdbChecksumError   the CRC64 trailer does not match the payload
    │   │   └── RdbUnsupportedError  an RDB version (11, 12, …) or a value type we refuse to guess at
    ├── HandshakeError             the master refused a handshake step (``step`` and its reply)
    │   ├── AuthError              AUTH was refused (wrong password, unknown ACL user, missing permission)
    │   └── MasterNotReady         -LOADING / -NOMASTERLINK / -MASTERDOWN: retry on a new link
    ├── ConfigError                a replicator setting is invalid (names the field)
    └── ShardUnavailable           a cluster source: no reachable master of the shard now

A protocol object raises these and keeps no half-parsed state behind: after a
``ProtocolError`` the only way on is a new connection (and, for an RDB, a new full sync).
"""

from __future__ import annotations


class RedisReplicatorError(Exception):
    """Root of the Redis replicator's errors."""


class ProtocolError(RedisReplicatorError):
    def __init__(self, message: str, offset: int | None = None) -> None:
        super().__init__(message if offset is None else f"{message} (at byte {offset})")
        self.offset = offset


class RdbError(ProtocolError):
    """The RDB payload is malformed; ``offset`` counts from the payload's first byte."""


class RdbChecksumError(RdbError):
    pass


class RdbUnsupportedError(RdbError):
    pass


class HandshakeError(RedisReplicatorError):
    retriable: bool = False
    """Whether a new connection may succeed later without any change of settings."""

    def __init__(self, step: str, reply: str) -> None:
        super().__init__(f"the master refused {step}: {reply}")
        self.step = step
        self.reply = reply


class AuthError(HandshakeError):
    pass


class ConfigError(RedisReplicatorError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


class MasterNotReady(HandshakeError):
    """``-LOADING``, ``-NOMASTERLINK`` or ``-MASTERDOWN``: the master cannot serve a replica
    yet (it is loading its dataset, or is itself a replica without a link). A real replica
    closes the link and tries again later (``syncWithMaster``); so does the driver."""

    retriable = True


class ShardUnavailable(RedisReplicatorError):
    """A Redis Cluster source: no reachable node is the master of the job's shard now (a
    failover in progress, every node down). The pass ends; the next one resolves again."""

    retriable = True
