"""The replica's message index: a directory of :class:`IndexFile` s, newest last.

RocketMQ's ``IndexService`` (store/src/main/java/org/apache/rocketmq/store/index/
IndexService.java): every stored record is offered once, in commit-log order (the store's
put path, the slave's replicated path and recovery: :meth:`IndexService.put`); a record is
indexed under ``topic#UNIQ_KEY`` and ``topic#K`` for each of its space-separated KEYS
(IndexService.java:209-254, ``MessageConst.KEY_SEPARATOR``). When the newest file is full a
new one is started; retention deletes files that end below the commit log's minimum; a
query walks the files newest first whose time range meets the asked one
(IndexService.java:166-203) and gives at most ``max_num`` candidate offsets (capped at 64,
RocketMQ's ``maxMsgsNumBatch``).

Files are ``<dir>/<sequence:020d>``. Their fixed sizes come from :class:`IndexConfig`: a file
of another size (the configuration changed) is set aside as ``<name>.other-size`` and its
entries are not served. Thread-safe: one lock around every call.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import NamedTuple

from broker.store.index_file import KEY_SEPARATOR, IndexFile, key_hash
from broker.store.segments import makedirs_durable
from rmq.message import StoredMessage
from rmq.msgid import UNIQ_KEY

log = logging.getLogger(__name__)
MAX_MSGS_NUM_BATCH = 64  # MessageStoreConfig.maxMsgsNumBatch
DEFAULT_QUERY_MAX_NUM = 32  # MessageStoreConfig.defaultQueryMaxNum (unique-key queries)


@dataclass(frozen=True)
class IndexConfig:
    """Each index file's size: ``hash_slots`` * 4 bytes + ``entries_per_file`` * 20 bytes
    (RocketMQ: 5 000 000 and 20 000 000, 420 MB; ours 100 000 and 400 000, 8.4 MB, so a
    broker with few messages keeps a small file; a full file just starts the next)."""

    hash_slots: int = 100_000
    entries_per_file: int = 400_000

    def validate(self) -> IndexConfig:
        if self.hash_slots < 1:
            raise ValueError(f"hash_slots: {self.hash_slots} (at least 1)")
        if self.entries_per_file < 2:
            raise ValueError(f"entries_per_file: {self.entries_per_file} (at least 2)")
        return self


#: a record offered to the index: (commit-log offset, topic, KEYS, UNIQ_KEY, store time ms)
Record = tuple[int, str, str, str, int]


class IndexHits(NamedTuple):
    """A query's candidate commit-log offsets (newest first, no repeats) and how far the
    index got: its newest entry's store time and commit-log offset."""

    offsets: list[int]
    last_timestamp: int
    last_phy_offset: int


def index_record(offset: int, m: StoredMessage, store_timestamp: int) -> Record:
    """What the index takes of a message stored at ``offset``."""
    props = m.properties
    return (offset, m.topic, props.get("KEYS", ""), props.get(UNIQ_KEY, ""), store_timestamp)


def index_keys(topic: str, keys: str, uniq_key: str) -> list[str]:
    """The index keys of a record: ``topic#UNIQ_KEY`` then ``topic#K`` for each of its KEYS."""
    out = [f"{topic}#{uniq_key}"] if uniq_key else []
    out.extend(f"{topic}#{k}" for k in keys.split(KEY_SEPARATOR) if k)
    return out


class IndexService:
    def __init__(self, directory: str, config: IndexConfig | None = None) -> None:
        self.directory = directory
        self.config = (config or IndexConfig()).validate()
        self._lock = threading.Lock()
        makedirs_durable(directory)
        self._files: list[tuple[int, IndexFile]] = []
        self.failing = False  # the last put could not start a file
        for name in sorted(os.listdir(directory)):
            if not name.isdigit():
                continue
            path = os.path.join(directory, name)
            try:
                f = IndexFile(path, self.config.hash_slots, self.config.entries_per_file)
            except ValueError as exc:
                log.warning("broker: index file set aside: %s", exc)
                os.replace(path, path + ".other-size")
                continue
            self._files.append((int(name), f))

    @property
    def end_offset(self) -> int:
        """The commit-log offset of the last record the index has seen (-1: none)."""
        with self._lock:
            return self._files[-1][1].end_phy_offset if self._files else -1

    def _active(self) -> IndexFile:
        if not self._files or self._files[-1][1].full:
            seq = self._files[-1][0] + 1 if self._files else 0
            f = IndexFile(
                os.path.join(self.directory, f"{seq:020d}"),
                self.config.hash_slots,
                self.config.entries_per_file,
            )
            if self._files:  # the new file starts where the full one ended
                full = self._files[-1][1]
                full.write_header()
                f.seen(full.end_phy_offset)
            self._files.append((seq, f))
        return self._files[-1][1]

    def put(
        self, phy_offset: int, topic: str, keys: str, uniq_key: str, store_timestamp: int
    ) -> None:
        """Index the record at ``phy_offset`` (:meth:`put_many` of one)."""
        self.put_many([(phy_offset, topic, keys, uniq_key, store_timestamp)])

    def put_many(self, records: list[Record]) -> None:
        """Index records given in commit-log order, each (commit-log offset, topic, KEYS,
        UNIQ_KEY, store time), under one lock hold and one header write; a record the
        index has seen is skipped. A new file the disk cannot hold is logged and the
        records from there left out: a send never fails for its index."""
        try:
            with self._lock:
                self._put_many(records)
        except OSError as exc:
            if not self.failing:
                log.warning("broker: index: cannot start a new file (records not indexed): %s", exc)
            self.failing = True
        else:
            self.failing = False

    def _put_many(self, records: list[Record]) -> None:
        f = self._active()
        try:
            done, rest = f.put_records(records, 0, [])
            while done < len(records):  # full: the rest go to a new file
                f = self._active()
                done, rest = f.put_records(records, done, rest)
        finally:
            f.write_header()

    def query(self, topic: str, key: str, max_num: int, begin: int, end: int) -> IndexHits:
        """Candidate offsets of records of ``topic`` indexed under ``key`` stored in
        [begin, end] (ms); a candidate may be another key's (a hash collision) or a record
        since cut: the caller checks the record."""
        max_num = max(0, min(max_num, MAX_MSGS_NUM_BATCH))
        h = key_hash(f"{topic}#{key}")
        found: list[int] = []
        with self._lock:
            last = next((f for _seq, f in reversed(self._files) if f.count > 1), None)
            for _seq, f in reversed(self._files):
                if len(found) >= max_num:
                    break
                if f.time_matched(begin, end):
                    f.lookup(h, begin, end, found, max_num)
                if f.count > 1 and f.begin_timestamp < begin:
                    break
        stamp, phy = (0, 0) if last is None else (last.end_timestamp, last.end_phy_offset)
        return IndexHits(list(dict.fromkeys(found)), stamp, phy)

    def cut(self, end: int) -> None:
        """The commit log was cut back to ``end``: records from there are offered again."""
        with self._lock:
            for _seq, f in self._files:
                f.cut(end)

    def delete_below(self, min_offset: int) -> int:
        """Delete the files (never the newest) whose every record is below ``min_offset``."""
        with self._lock:
            gone = 0
            while len(self._files) > 1 and self._files[0][1].end_phy_offset < min_offset:
                _seq, f = self._files.pop(0)
                f.close()
                os.unlink(f.path)
                gone += 1
            return gone

    def flush(self) -> None:
        with self._lock:
            files = [f for _seq, f in self._files[-2:]]  # older files are no longer written
            for f in files:
                f.flush()

    def close(self) -> None:
        with self._lock:
            for _seq, f in self._files:
                f.flush()
                f.close()
            self._files.clear()
