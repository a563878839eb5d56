"""The replica processes of the failover test and their commit logs, read from the files.

:class:`Replica` is ``tests/integration/broker/conftest.py``'s ``BrokerProcess`` (its own
session, stopped by its PID) with the failover group's flags and its own data dir per
replica of one group. :func:`commit_log_bytes` reads a stopped
replica's ``<data-dir>/store/commitlog`` segments up to the first byte that is not a whole,
good record (research/broker.md §1: TOTALSIZE, MAGICCODE, CRC).
"""

from __future__ import annotations

import struct
from pathlib import Path

from broker.store.segments import list_segments
from rmq.message import MAGIC_V1, MAGIC_V2, MalformedMessage, decode
from tests.integration.broker.conftest import BrokerProcess

HEARTBEAT_TIMEOUT_MS = 2000


class Replica(BrokerProcess):
    """One ``metaledger broker`` replica of the failover group (SYNC_MASTER, a short replica
    heartbeat timeout), not started until :meth:`start`."""

    def __init__(
        self, root: Path, endpoints: list[str], group: str, index: int, *extra: str,
        grpc: bool = False,
    ) -> None:  # fmt: skip
        flags = [
            "--cluster", "fo-cluster", "--broker-role", "SYNC_MASTER",
            "--replica-heartbeat-timeout-ms", str(HEARTBEAT_TIMEOUT_MS),
            "--slave-timeout-ms", "2000", "--flush", "ASYNC_FLUSH", *extra,
        ]  # fmt: skip
        super().__init__(
            root, endpoints, group, *flags, replica=f"{group}-r{index}", start=False, grpc=grpc
        )
        self.index = index

    def commit_log(self) -> bytes:
        return commit_log_bytes(self.data_dir)


def commit_log_bytes(data_dir: Path) -> bytes:
    """The commit log's valid records, read from the files (the replica stopped): from the
    first segment's start up to the first byte that is not a whole, good record."""
    segments = list_segments(str(data_dir / "store" / "commitlog"))
    out = bytearray()
    for start, path in segments:
        if start != len(out):
            break
        with open(path, "rb") as f:
            while True:
                head = f.read(8)
                if len(head) < 8:
                    break
                total, magic = struct.unpack(">ii", head)
                if magic not in (MAGIC_V1, MAGIC_V2) or total <= 8:
                    break
                record = head + f.read(total - 8)
                try:
                    decode(record)
                except (MalformedMessage, struct.error, ValueError):
                    break
                out += record
        if len(segments) == 1:
            break
    return bytes(out)
