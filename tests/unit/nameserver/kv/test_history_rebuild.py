"""The kv history rebuilt at start (nameserver/kv/history_rebuild.py): from offset 0 when the
segments still start at 1, else from the oldest kept snapshot the segments continue (its kv
records give each key's value before its first change), with compactions replayed; every
revision from the floor up reads as the model does, and below it is compacted."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nameserver.kinds import REGISTRY
from nameserver.kv.history import KvHistory
from nameserver.kv.history_rebuild import rebuild
from nameserver.kv.mvcc import Compacted
from nameserver.kv.records import KeyValue
from nameserver.state.image import MetadataImage
from nameserver.state.machine import CapturedImage, MetadataStateMachine
from snapshots import SnapshotMeta, write_snapshot
from tests.property.test_kv_history_property import compact, delete, put

KEYS = [b"k/%d" % i for i in range(4)]


def history_of(
    n: int, compact_at: dict[int, int]
) -> tuple[list[MetadataImage], list[tuple[int, bytes]], list[dict[bytes, bytes]]]:
    """Images after each offset, the change log's records, and the model's values."""
    machine = MetadataStateMachine.empty(REGISTRY)
    images, records, states = [machine.image], [], [{}]
    state: dict[bytes, bytes] = {}
    for offset in range(1, n + 1):
        if offset in compact_at:
            entry = compact(compact_at[offset])
        elif offset % 5 == 0:
            entry = delete(KEYS[offset % 4], b"")
        else:
            entry = put(KEYS[offset % 4], b"v%d" % offset)
        effects, _ = machine.apply(offset, 1, [entry])
        machine.publish()
        for eff in effects:
            records.append((offset, eff.encode()))
            if eff.type == "kv":
                if eff.delete:
                    state.pop(eff.key, None)
                else:
                    state[eff.key] = KeyValue.from_record(eff.value).value
        images.append(machine.image)
        states.append(dict(state))
    return images, records, states


class Segments:
    def __init__(self, records: list[tuple[int, bytes]], first: int) -> None:
        self.records = [r for r in records if r[0] >= first]
        self.first_offset = first

    def read_from(self, offset: int) -> Any:
        if offset < self.first_offset:
            raise ValueError("deleted")
        return (SimpleNamespace(offset=o, payload=p) for o, p in self.records if o >= offset)


def snapshot(tmp_path: Path, image: MetadataImage) -> Any:
    path = tmp_path / f"{image.revision:020d}.snap"
    meta = SnapshotMeta(cluster_id="c", last_offset=image.revision, last_term=1)
    write_snapshot(path, meta, CapturedImage(image).records)
    return SimpleNamespace(path=path, last_offset=image.revision)


def check(history: KvHistory, states: list[dict[bytes, bytes]], floor: int) -> None:
    current = len(states) - 1
    assert history.floor == floor
    for rev in range(floor, current + 1):
        got = {kv.key: kv.value for kv in history.view(rev).range(b"\x00", b"\x00")}
        assert got == states[rev], rev
    if floor > 1:
        with pytest.raises(Compacted):
            history.check(floor - 1, current)


def test_from_offset_zero_when_the_segments_start_at_one() -> None:
    images, records, states = history_of(30, {})
    history = KvHistory(images[-1], lambda: images[-1])
    rebuild(history, images[-1], SimpleNamespace(list=list), Segments(records, 1))  # type: ignore[arg-type]
    check(history, states, 0)


def test_from_the_oldest_snapshot_the_segments_follow(tmp_path: Path) -> None:
    images, records, states = history_of(40, {33: 12})
    infos = [snapshot(tmp_path, images[25]), snapshot(tmp_path, images[15])]  # newest first
    store = SimpleNamespace(list=lambda: infos)
    history = KvHistory(images[-1], lambda: images[-1])
    rebuild(history, images[-1], store, Segments(records, 16))  # type: ignore[arg-type]
    check(history, states, 15)
    assert history.compact_revision_at(20) == 0 and history.compact_revision_at(40) == 12


def test_a_compaction_above_the_snapshot_is_the_floor(tmp_path: Path) -> None:
    images, records, states = history_of(40, {33: 30})
    store = SimpleNamespace(list=lambda: [snapshot(tmp_path, images[15])])
    history = KvHistory(images[-1], lambda: images[-1])
    rebuild(history, images[-1], store, Segments(records, 10))  # type: ignore[arg-type]
    check(history, states, 30)


def test_no_replayable_point_keeps_the_floor_at_the_image() -> None:
    images, records, states = history_of(20, {})
    history = KvHistory(images[-1], lambda: images[-1])
    rebuild(history, images[-1], SimpleNamespace(list=list), Segments(records, 8))  # type: ignore[arg-type]
    check(history, states, 20)
