"""Errors of the broker's HA replication (docs/broker.md, "Replication and failover").

    HAError
    ├── HAProtocolError      bytes that are not a frame of the phase the stream is in (a bad
    │   │                    state field, size or offset): that one HA connection is closed
    │   └── OffsetMismatch   a data frame not at the slave's end (RocketMQ's slave disconnects)
    ├── NoConsistentPoint    the slave's epochs share no epoch start with the master's: it
    │                        refuses to copy rather than keep a log the master never had
    └── EpochFileError       an epoch file (and its ``.bak``) unreadable, or an append that is
                             not strictly after the last entry

``closes_connection`` says what the HA loops do with an error, so they need no isinstance
chains; ``retriable`` says whether the slave keeps trying to reconnect.
"""

from __future__ import annotations


class HAError(Exception):
    closes_connection: bool = True
    retriable: bool = True


class HAProtocolError(HAError):
    pass


class OffsetMismatch(HAProtocolError):
    pass


class NoConsistentPoint(HAError):
    pass


class EpochFileError(HAError):
    retriable = False
