"""Master-slave HA replication of the commit log: RocketMQ 5's auto-switch HA protocol.

HAMaster(store, host, port, epochs)   on the master: streams the commit log, counts acks
    .start() / .stop(); .slaves(); .wait_for(offset, count, timeout_s, among); .confirm_offset;
    .sync_state_set (slave ids); .notify_appended(end) after every append
HAClient(store, epochs, broker_id, (host, port))   on a slave: copies it byte for byte
    .start() / .stop(); .connected; .confirm_offset; .last_error
EpochFile(path)   ``<root>/epochFileCheckpoint``; .begin(epoch, end) on promotion
consistent_point(...)   where a slave's log stops agreeing with the master's

Frames: ``broker.ha.protocol`` (sans-I/O). Errors: ``broker.ha.errors``.
"""

from broker.ha.epochs import FILE_NAME as EPOCH_FILE_NAME
from broker.ha.epochs import EpochEntry, EpochFile, consistent_point
from broker.ha.errors import (
    EpochFileError,
    HAError,
    HAProtocolError,
    NoConsistentPoint,
    OffsetMismatch,
)
from broker.ha.master import HAMaster, SlaveState
from broker.ha.slave import HAClient

__all__ = [
    "EPOCH_FILE_NAME",
    "EpochEntry",
    "EpochFile",
    "EpochFileError",
    "HAClient",
    "HAError",
    "HAMaster",
    "HAProtocolError",
    "NoConsistentPoint",
    "OffsetMismatch",
    "SlaveState",
    "consistent_point",
]
