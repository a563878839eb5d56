"""Properties of the native engine's WAL under faults: a write or fdatasync that fails at any
byte of a batch, then a retry or a crash, keeps exactly the acknowledged prefix with no hole;
any flipped byte before the last record is corruption naming file and position; any cut or
flip of the last record is a torn tail that loads the prefix.

Crashes here are process crashes (the page cache survives), so ``fdatasync`` is replaced by a
no-op unless a test makes it fail: that keeps hundreds of syncs per example fast and changes
nothing the WAL can observe.
"""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raftlog.native import wal as raft_wal
from raftlog.native.messages import KIND_CONFIG, KIND_NOOP, KIND_NORMAL, LogEntry
from raftlog.native.wal import (
    RaftWal,
    WalCorruptError,
    commit_record,
    entry_record,
    hard_record,
    truncate_record,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# one record as the model sees it: its bytes on disk and what it does to the state
Record = tuple[bytes, Callable[["Model"], None]]


class FailingFile:
    """Test-only stand-in for the WAL's file: write() takes ``budget`` more bytes, then ENOSPC
    (a short write first, as the kernel does when the disk fills up)."""

    def __init__(self, real: Any, budget: int) -> None:
        self.real, self.budget = real, budget

    def write(self, b: memoryview) -> int:
        if self.budget <= 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        n: int = self.real.write(b[: self.budget])
        self.budget -= n
        return n

    def fileno(self) -> int:
        return int(self.real.fileno())

    def close(self) -> None:
        self.real.close()


def failing(err: int) -> Callable[..., None]:
    def fail(*_: object) -> None:
        raise OSError(err, os.strerror(err))

    return fail


@contextmanager
def no_fdatasync() -> Iterator[None]:
    with mock.patch.object(raft_wal, "_fdatasync", lambda fd: None):
        yield


@dataclass
class Model:
    """What the log should hold: the WAL's own replay rules, written out plainly."""

    term: int = 0
    vote: str = ""
    commit: int = 0
    entries: list[LogEntry] = field(default_factory=list)
    floor: int = 1  # the next index while there are no entries (after a snapshot)

    @property
    def next_index(self) -> int:
        return self.entries[-1].index + 1 if self.entries else self.floor

    def cut(self, index: int) -> None:
        self.entries = [e for e in self.entries if e.index < index]
        if not self.entries:
            self.floor = index

    def state(self) -> tuple[int, str, int, list[LogEntry]]:
        return self.term, self.vote, self.commit, self.entries


def hard(term: int, vote: str) -> Record:
    def do(m: Model) -> None:
        m.term, m.vote = term, vote

    return hard_record(term, vote), do


def truncate(index: int) -> Record:
    return truncate_record(index), lambda m: m.cut(index)


def entry(e: LogEntry) -> Record:
    def do(m: Model) -> None:
        m.cut(e.index)
        m.entries.append(e)

    return entry_record(e), do


def commit(index: int) -> Record:
    def do(m: Model) -> None:
        m.commit = max(m.commit, index)

    return commit_record(index), do


@dataclass
class Batch:
    hard: tuple[int, str] | None
    truncate_from: int | None
    entries: list[LogEntry]
    commit: int | None

    def records(self) -> list[Record]:
        """In the order RaftWal.append writes them."""
        out = [hard(*self.hard)] if self.hard is not None else []
        out += [truncate(self.truncate_from)] if self.truncate_from is not None else []
        out += [entry(e) for e in self.entries]
        return out + ([commit(self.commit)] if self.commit is not None else [])

    def append_to(self, wal: RaftWal) -> None:
        wal.append(self.entries, self.truncate_from, self.hard, self.commit)


def draw_batch(data: st.DataObject, model: Model) -> Batch:
    """A batch that continues ``model`` (the acknowledged state plus what is pending)."""
    term = model.term + data.draw(st.integers(0, 1), label="term step")
    new_hard = data.draw(st.booleans(), label="hard") or term != model.term
    vote = data.draw(st.sampled_from(["", "n1:7001", "nœud-2"]), label="vote")
    start = model.next_index
    truncate_from = None
    if model.entries and data.draw(st.booleans(), label="conflict"):
        start = data.draw(st.integers(model.entries[0].index, model.next_index - 1))
        truncate_from = start
    n = data.draw(st.integers(0, 4), label="entries")
    payloads = data.draw(st.lists(st.binary(max_size=48), min_size=n, max_size=n))
    kinds = data.draw(
        st.lists(st.sampled_from([KIND_NORMAL, KIND_NOOP, KIND_CONFIG]), min_size=n, max_size=n)
    )
    entries = [
        LogEntry(start + i, term, k, p)
        for i, (k, p) in enumerate(zip(kinds, payloads, strict=True))
    ]
    last = start + n - 1
    commit_to = data.draw(st.integers(0, max(0, last)), label="commit")  # as the engine
    return Batch((term, vote) if new_hard else None, truncate_from, entries, commit_to)


def advanced(model: Model, records: list[Record]) -> Model:
    m = Model(model.term, model.vote, model.commit, list(model.entries), model.floor)
    for _, do in records:
        do(m)
    return m


def check_loaded(directory: Path, expected: Model) -> RaftWal:
    wal, state = RaftWal.open(directory)
    assert (state.term, state.vote, state.commit, state.entries) == expected.state()
    indexes = [e.index for e in state.entries]
    assert all(b == a + 1 for a, b in pairwise(indexes))  # no hole
    return wal


def the_file(directory: Path) -> Path:
    (path,) = directory.glob("wal-*.log")
    return path


@SETTINGS
@given(data=st.data())
def test_a_failed_write_or_sync_at_any_byte_keeps_exactly_the_acknowledged_prefix(
    data: st.DataObject,
) -> None:
    """Batches are synced; some fail (ENOSPC after k bytes of the batch, for any k, or a failed
    fdatasync, with or without the cut back failing too); then the log either retries (maybe
    after more appends) or the process dies and the log is reopened. After every reopen the
    state is the acknowledged batches plus, only when the cut back failed, the whole records of
    the failed write that reached the file: never a record after a hole."""
    with tempfile.TemporaryDirectory() as tmp, no_fdatasync():
        directory = Path(tmp)
        wal, _ = RaftWal.open(directory)
        acked = Model()  # every batch whose sync returned
        try:
            for _ in range(data.draw(st.integers(1, 8), label="steps")):
                step = data.draw(st.sampled_from(["batch", "batch", "reopen", "rewrite"]))
                if step == "reopen":
                    wal.close()
                    wal = check_loaded(directory, acked)
                    continue
                if step == "rewrite":
                    first = acked.entries[0].index if acked.entries else acked.next_index
                    keep = data.draw(st.integers(first, acked.next_index), label="keep from")
                    acked.entries = [e for e in acked.entries if e.index >= keep]
                    acked.floor = keep if not acked.entries else acked.floor
                    wal.rewrite(acked.term, acked.vote, acked.commit, acked.entries)
                    continue
                batch = draw_batch(data, acked)
                pending = batch.records()
                batch.append_to(wal)
                fault = data.draw(st.sampled_from(["none", "write", "fdatasync"]), label="fault")
                if fault == "none":
                    wal.sync()
                    acked = advanced(acked, pending)
                    continue
                path = the_file(directory)
                before = path.read_bytes()
                size = sum(len(b) for b, _ in pending)
                k = data.draw(st.integers(0, size - 1), label="k") if fault == "write" else size
                cut_fails = data.draw(st.booleans(), label="cut back fails")
                real = wal._file
                if fault == "write":
                    wal._file = FailingFile(real, k)  # type: ignore[assignment]
                with (
                    mock.patch.object(
                        raft_wal,
                        "_fdatasync",
                        failing(errno.EIO) if fault == "fdatasync" else (lambda fd: None),
                    ),
                    mock.patch.object(
                        raft_wal, "_ftruncate", failing(errno.EIO) if cut_fails else os.ftruncate
                    ),
                    pytest.raises(OSError),
                ):
                    wal.sync()
                wal._file = real
                in_file = b"".join(b for b, _ in pending)[:k] if cut_fails else b""
                assert path.read_bytes() == before + in_file
                assert wal.needs_repair == cut_fails
                after = data.draw(st.sampled_from(["retry", "append and retry", "crash"]))
                if after == "crash":
                    wal.close()
                    whole, end = [], 0
                    for record in pending:
                        end += len(record[0])
                        if end <= len(in_file):
                            whole.append(record)
                    acked = advanced(acked, whole)
                    wal = check_loaded(directory, acked)
                    assert the_file(directory).read_bytes() == before + b"".join(
                        b for b, _ in whole
                    )
                    continue
                if after == "append and retry":
                    more = draw_batch(data, advanced(acked, pending))
                    more.append_to(wal)
                    pending += more.records()
                wal.sync()
                assert not wal.needs_repair
                acked = advanced(acked, pending)
                assert the_file(directory).read_bytes() == before + b"".join(b for b, _ in pending)
            wal.close()
            wal = check_loaded(directory, acked)
        finally:
            wal.close()


def small_batch() -> tuple[Batch, bytes]:
    batch = Batch(
        (3, "n2:7002"), None, [LogEntry(i, 3, KIND_NORMAL, b"v%d" % i) for i in (3, 4, 5)], 4
    )
    return batch, b"".join(b for b, _ in batch.records())


@pytest.mark.parametrize("cut_fails", [False, True])
@pytest.mark.parametrize("then", ["retry", "crash"])
def test_enospc_after_every_byte_of_a_batch(tmp_path: Path, then: str, cut_fails: bool) -> None:
    """The same, exhaustively: every k in 0..len(batch) for one batch of five records."""
    base = [LogEntry(i, 2, KIND_NORMAL, b"a%d" % i) for i in (1, 2)]
    batch, raw = small_batch()
    records = batch.records()
    with no_fdatasync():
        for k in range(len(raw) + 1):
            directory = tmp_path / str(k)
            wal, _ = RaftWal.open(directory)
            wal.append(base, hard=(2, ""), commit=1)
            wal.sync()
            acked = the_file(directory).read_bytes()
            real = wal._file
            wal._file = FailingFile(real, k)  # type: ignore[assignment]
            batch.append_to(wal)
            with mock.patch.object(
                raft_wal, "_ftruncate", failing(errno.EIO) if cut_fails else os.ftruncate
            ):
                if k < len(raw):
                    with pytest.raises(OSError, match="No space"):
                        wal.sync()
                else:
                    wal.sync()  # the whole batch fitted
            wal._file = real
            expected = Model(2, "", 1, list(base))
            if k == len(raw):
                expected = advanced(expected, records)
            elif then == "retry":
                wal.sync()
                expected = advanced(expected, records)
            elif cut_fails:  # the whole records that reached the file load; the rest is torn
                ends = [sum(len(b) for b, _ in records[: i + 1]) for i in range(len(records))]
                expected = advanced(
                    expected, [r for r, end in zip(records, ends, strict=True) if end <= k]
                )
            wal.close()
            check_loaded(directory, expected).close()
            if k < len(raw) and then == "crash" and not cut_fails:
                assert the_file(directory).read_bytes() == acked


@st.composite
def logs(draw: st.DrawFn) -> list[list[LogEntry]]:
    """Two to six synced batches of one to three entries each."""
    sizes = draw(st.lists(st.integers(1, 3), min_size=2, max_size=6))
    payloads = draw(st.lists(st.binary(max_size=40), min_size=sum(sizes), max_size=sum(sizes)))
    batches, i = [], 0
    for size in sizes:
        batches.append([LogEntry(i + j + 1, 1, KIND_NORMAL, payloads[i + j]) for j in range(size)])
        i += size
    return batches


def record_starts(batches: list[list[LogEntry]]) -> list[int]:
    lengths = [len(hard_record(1, "n1:7001"))] + [len(entry_record(e)) for b in batches for e in b]
    return [sum(lengths[:i]) for i in range(len(lengths))] + [sum(lengths)]


def written(directory: Path, batches: list[list[LogEntry]]) -> Path:
    with no_fdatasync():
        wal, _ = RaftWal.open(directory)
        wal.append([], hard=(1, "n1:7001"))
        wal.sync()
        for batch in batches:
            wal.append(batch)
            wal.sync()
        wal.close()
    return the_file(directory)


@SETTINGS
@given(batches=logs(), data=st.data())
def test_any_flipped_byte_before_the_last_record_is_corruption(
    batches: list[list[LogEntry]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = written(Path(tmp), batches)
        starts = record_starts(batches)
        raw = bytearray(path.read_bytes())
        byte = data.draw(st.integers(0, starts[-2] - 1), label="byte")
        raw[byte] ^= data.draw(st.integers(1, 255), label="xor")
        path.write_bytes(bytes(raw))
        with pytest.raises(WalCorruptError) as info:
            RaftWal.open(tmp)
        record = max(s for s in starts if s <= byte)
        assert info.value.path == path and info.value.position == record
        assert f"{path}: corrupt Raft log at byte {record}: " in str(info.value)
        assert path.read_bytes() == bytes(raw)  # nothing was cut off


@SETTINGS
@given(batches=logs(), data=st.data())
def test_any_cut_flip_or_zero_fill_of_the_last_record_is_a_torn_tail(
    batches: list[list[LogEntry]], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = written(Path(tmp), batches)
        starts = record_starts(batches)
        original = path.read_bytes()
        raw = bytearray(original)
        last = starts[-2]
        how = data.draw(st.sampled_from(["cut", "flip", "cut and zeros"]), label="how")
        if how == "flip":
            raw[data.draw(st.integers(last, len(raw) - 1), label="byte")] ^= data.draw(
                st.integers(1, 255)
            )
        else:
            del raw[data.draw(st.integers(last, len(raw) - 1), label="cut") :]
        if how == "cut and zeros":
            raw += bytes(data.draw(st.integers(1, 9000), label="zeros"))
        path.write_bytes(bytes(raw))
        every = [e for b in batches for e in b]
        end = starts[-1]
        if raw[last:end] == original[last:end]:  # the zeros put back what the cut took (zeros)
            assert RaftWal.open(tmp)[1].entries == every
            assert path.stat().st_size == end
            return
        with no_fdatasync():
            wal, state = RaftWal.open(tmp)
            assert state.entries == every[:-1] and (state.term, state.vote) == (1, "n1:7001")
            assert path.stat().st_size == last
            wal.append(every[-1:])
            wal.sync()
            wal.close()
        assert RaftWal.open(tmp)[1].entries == every
