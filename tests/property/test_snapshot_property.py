"""Properties of snapshots: round trips, order-free hashes, crash safety, damage detection,
and replay/compaction against a dict model."""

from __future__ import annotations

import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.records_pb2 import Effect
from snapshots import (
    FileSnapshotStore,
    RecordDigest,
    SnapshotCorruptError,
    SnapshotMeta,
    StreamKind,
    compact_local,
    encode_header,
    encode_record,
    encode_snapshot,
    read_snapshot,
    replay,
    snapshot_name,
    write_snapshot,
)

Rec = tuple[str, bytes, bytes]
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

types = st.sampled_from(["kv", "member", "broker", "topic", "lease", "é"])
record_sets = st.dictionaries(
    st.tuples(types, st.binary(max_size=12)), st.binary(max_size=80), max_size=40
).map(lambda d: [(t, k, v) for (t, k), v in d.items()])


def meta(offset: int) -> SnapshotMeta:
    return SnapshotMeta(cluster_id="c", last_offset=offset, last_term=2, created_ms=1)


def digest_of(records: list[Rec]) -> RecordDigest:
    digest = RecordDigest()
    for record in records:
        digest.add(*record)
    return digest


@SETTINGS
@given(records=record_sets, offset=st.integers(0, 2**63 - 1))
def test_round_trip(records: list[Rec], offset: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.snap"
        info = write_snapshot(path, meta(offset), records)
        snapshot = read_snapshot(path)
        assert snapshot.records == records
        assert snapshot.info == info and info.last_offset == offset
        assert info.digest == digest_of(records)


@SETTINGS
@given(records=record_sets, seed=st.randoms(use_true_random=False))
def test_hash_does_not_depend_on_order(records: list[Rec], seed: random.Random) -> None:
    shuffled = list(records)
    seed.shuffle(shuffled)
    assert digest_of(shuffled) == digest_of(records)
    assert (
        encode_snapshot(meta(1), shuffled)[1].hashes == encode_snapshot(meta(1), records)[1].hashes
    )


@SETTINGS
@given(records=record_sets, parts=st.lists(st.integers(0, 5), max_size=40))
def test_merged_partial_digests_equal_the_whole(records: list[Rec], parts: list[int]) -> None:
    partials = [RecordDigest() for _ in range(6)]
    for i, record in enumerate(records):
        partials[parts[i] if i < len(parts) else 0].add(*record)
    assert RecordDigest.combine(partials) == digest_of(records)


@SETTINGS
@given(records=record_sets, more=record_sets)
def test_discard_undoes_add(records: list[Rec], more: list[Rec]) -> None:
    digest = digest_of(records)
    for record in more:
        digest.add(*record)
    for record in more:
        digest.discard(*record)
    assert digest == digest_of(records)


# ------------------------------------------------------------------ crash safety

CRASHES = ["iterator-one-pass", "iterator-two-pass", "progress", "fsync", "replace", "killed"]


@SETTINGS
@given(old=record_sets, new=record_sets, crash=st.sampled_from(CRASHES), data=st.data())
def test_a_crash_during_a_write_leaves_the_previous_snapshot(
    old: list[Rec], new: list[Rec], crash: str, data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        store = FileSnapshotStore(root, keep=2)
        store.save(meta(10), old)
        previous = root / snapshot_name(10)
        at = data.draw(st.integers(0, len(new)), label="fail at record")

        def failing() -> Iterator[Rec]:
            yield from new[:at]
            raise RuntimeError("crash")

        def fail(*args: object, **kwargs: object) -> None:
            raise OSError("crash")

        if crash == "killed":  # the process died mid-write: a partial temp file stays
            whole, _ = encode_snapshot(meta(20), new)
            cut = data.draw(st.integers(0, len(whole)), label="temp file length")
            (root / f".{snapshot_name(20)}.x1y2z3.tmp").write_bytes(whole[:cut])
        else:
            with pytest.raises((RuntimeError, OSError)):
                if crash == "iterator-one-pass":
                    store.save(meta(20).with_digest(digest_of(new)), failing())
                elif crash == "iterator-two-pass":
                    store.save(meta(20), failing)
                elif crash == "progress":
                    store.save(meta(20), new, progress=fail)
                else:
                    with mock.patch.object(os, crash, fail):
                        store.save(meta(20), new)
            assert sorted(p.name for p in root.iterdir()) == [snapshot_name(10)]
        assert store.latest() == previous
        assert [i.last_offset for i in store.list()] == [10]
        assert read_snapshot(previous).records == old
        FileSnapshotStore(root, keep=2)  # a restart removes what a crash left
        assert sorted(p.name for p in root.iterdir()) == [snapshot_name(10)]


@SETTINGS
@given(old=record_sets, new=record_sets, data=st.data())
def test_any_flipped_byte_is_detected_and_latest_falls_back(
    old: list[Rec], new: list[Rec], data: st.DataObject
) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        store = FileSnapshotStore(root, keep=2)
        store.save(meta(10), old)
        info = store.save(meta(20), new)
        assert info.path is not None
        raw = bytearray(info.path.read_bytes())
        position = data.draw(st.integers(0, len(raw) - 1), label="position")
        raw[position] ^= data.draw(st.integers(1, 255), label="xor")
        info.path.write_bytes(bytes(raw))
        with pytest.raises(SnapshotCorruptError) as e:
            read_snapshot(info.path)
        assert e.value.path == str(info.path) and str(info.path) in str(e.value)
        assert store.latest() == root / snapshot_name(10)


# ------------------------------------------------------------------ replay and compaction


@st.composite
def change_logs(draw: st.DrawFn) -> list[tuple[int, int, Effect]]:
    """Records in log order over a small key space, so keys are overwritten and deleted."""
    steps = draw(st.lists(st.integers(0, 3), max_size=60))
    records, offset, sub = [], 1, 0
    for step in steps:
        if records:
            offset, sub = (offset, sub + 1) if step == 0 else (offset + step, 0)
        type_ = draw(st.sampled_from(["kv", "member"]))
        key = draw(st.sampled_from([b"a", b"b", b"c", b"d"]))
        delete = draw(st.booleans())
        value = b"" if delete else draw(st.binary(max_size=10))
        records.append((offset, sub, Effect(type=type_, key=key, value=value, delete=delete)))
    return records


def model(records: list[tuple[int, int, Effect]], upto: int) -> dict[tuple[str, bytes], bytes]:
    state: dict[tuple[str, bytes], bytes] = {}
    for offset, _, e in records:  # in log order
        if offset > upto:
            break
        if e.delete:
            state.pop((e.type, e.key), None)
        else:
            state[e.type, e.key] = e.value
    return state


@SETTINGS
@given(log=change_logs(), seed=st.randoms(use_true_random=False))
def test_replay_in_any_order_equals_the_model(
    log: list[tuple[int, int, Effect]], seed: random.Random
) -> None:
    shuffled = list(log)
    seed.shuffle(shuffled)
    assert replay(shuffled) == model(log, 2**63)
    if log:
        cut = log[len(log) // 2][0]
        base = model(log, cut)
        assert replay(shuffled, base, after_offset=cut) == model(log, 2**63)


def write_segments(directory: Path, log: list[tuple[int, int, Effect]], cuts: list[int]) -> None:
    """The log in segment files, starting new segments at the records `cuts` names (when the
    offset differs from the segment's first one, as raftlog's rolling allows)."""
    segments: list[list[tuple[int, int, Effect]]] = []
    for i, record in enumerate(log):
        if not segments or (i in cuts and record[0] != segments[-1][0][0]):
            segments.append([])
        segments[-1].append(record)
    for segment in segments:
        first = segment[0][0]
        (directory / f"{first:020d}.seg").write_bytes(
            encode_header(StreamKind.CHANGE_LOG_SEGMENT, first)
            + b"".join(encode_record(o, s, e.SerializeToString()) for o, s, e in segment)
        )


@SETTINGS
@given(log=change_logs(), cuts=st.lists(st.integers(0, 60)), data=st.data())
def test_compact_local_equals_the_model(
    log: list[tuple[int, int, Effect]], cuts: list[int], data: st.DataObject
) -> None:
    last = log[-1][0] if log else 1
    base_at = data.draw(st.integers(0, last + 1), label="base offset")
    upto = data.draw(st.integers(base_at, last + 2), label="upto")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        (root / "log").mkdir()
        write_segments(root / "log", log, cuts)
        base = root / "base.snap"
        write_snapshot(
            base, meta(base_at), [(t, k, v) for (t, k), v in model(log, base_at).items()]
        )
        out = root / "out.snap"
        info = compact_local(root / "log", base, upto, out, meta(upto))
        expected = model(log, upto)
        assert read_snapshot(out).to_dict() == expected
        assert info.digest == digest_of([(t, k, v) for (t, k), v in expected.items()])
        direct = compact_local(root / "log", None, upto, root / "direct.snap", meta(upto))
        assert direct.hashes == info.hashes and direct.counts == info.counts
