"""The record-kind registry (nameserver.state.registry): a toy record kind, declared only
here and registered in a test-only registry beside the server's kinds, flows through apply,
quotas, snapshot records, replay, restore from a snapshot file, diffs and consistency
without any other module knowing it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

from nameserver.errors import InvalidArgument, ResourceExhausted
from nameserver.kinds import KINDS, READS, REGISTRY
from nameserver.state.consistency import LINEARIZABLE, SERIALIZABLE, read_mode
from nameserver.state.image import MetadataDelta, MetadataImage
from nameserver.state.machine import (
    MetadataStateMachine,
    diff_images,
    image_from_records,
    image_records,
)
from nameserver.state.mapdelta import MapDelta
from nameserver.state.registry import (
    RecordKind,
    Registry,
    UnknownRecordType,
)
from protos import records_pb2
from raftlog import Effect, Entry
from snapshots import SnapshotMeta, read_snapshot_columns, write_snapshot


# ------------------------------------------------------------------ the toy kind
@dataclass(frozen=True, slots=True)
class Note:
    key: bytes
    text: bytes

    def to_record(self) -> bytes:
        return self.key + b"=" + self.text

    @staticmethod
    def from_record(data: bytes) -> Note:
        key, _, text = data.partition(b"=")
        return Note(key, text)


@dataclass(frozen=True, slots=True)
class NotesImage:
    notes: MappingProxyType[bytes, Note] = field(default_factory=lambda: MappingProxyType({}))

    def get(self, key: bytes) -> Note | None:
        return self.notes.get(key)


class NotesDelta(MapDelta[bytes, Note]):
    def __init__(self, base: NotesImage) -> None:
        super().__init__(base.get, lambda n: len(n.key) + len(n.text))
        self.base = base

    def put(self, note: Note) -> None:
        self._change(note.key, note)

    def build(self) -> NotesImage:
        if not self.changes:
            return self.base
        return NotesImage(self.merged(self.base.notes))  # type: ignore[arg-type]


def apply_note(delta: MetadataDelta, e: Entry, rev: int, effects: list[Effect]) -> int:
    """A ``note`` entry: value = the text (empty: delete). Returns the revision."""
    notes = delta.sub("notes")
    if e.value:
        notes.put(Note(e.key, e.value))
        effects.append(Effect("note", e.key, Note(e.key, e.value).to_record()))
    elif notes.get(e.key) is not None:
        notes.delete(e.key)
        effects.append(Effect("note", e.key, delete=True))
    return rev


NOTE = RecordKind(
    name="note",
    field="notes",
    empty=NotesImage(),
    delta=NotesDelta,
    decode=Note.from_record,
    consistency=LINEARIZABLE,
    items=lambda image: sorted(image.notes.items()),
    lookup=lambda image, key: image.get(key),
    usage=lambda d: (len(d.base.notes) + d.key_delta, d.byte_delta),
    rules={"note": apply_note},
)
TOYS = Registry((*KINDS, NOTE), READS)


def note(key: bytes, text: bytes = b"") -> Entry:
    return Entry(type="note", key=key, value=text)


def quota(record_type: str, max_keys: int) -> Entry:
    q = records_pb2.QuotaRecord(record_type=record_type, max_keys=max_keys)
    return Entry(type="quota", key=record_type.encode(), value=q.SerializeToString())


class Machine:
    def __init__(self) -> None:
        self.sm = MetadataStateMachine.empty(TOYS)
        self.offset = 0

    def apply(self, *entries: Entry) -> tuple[list[Effect], Any]:
        self.offset += 1
        out = self.sm.apply(self.offset, 1, list(entries))
        self.sm.publish()
        return out

    def notes(self) -> dict[bytes, bytes]:
        return {k: n.text for k, n in self.sm.image.sub("notes").notes.items()}


# ------------------------------------------------------------------------ tests
def test_the_server_registry_lists_every_type_once() -> None:
    assert REGISTRY.record_types == (
        "kv",
        "member",
        "lease",
        "offset",
        "quota",
        "replica_group",
        "broker",
        "topic",
        "kvconfig",
        "alarm",
        "mvcc",
        "auth",
        "revision",
    )
    assert "note" not in REGISTRY.by_name and "note" not in REGISTRY.rules
    assert "notes" not in MetadataImage.empty(REGISTRY).__dict__
    # the machinery keeps the registry it is given: no other is taken behind its back
    assert MetadataStateMachine.empty(REGISTRY).registry is REGISTRY
    assert MetadataStateMachine.empty(TOYS).image.registry is TOYS


def test_a_toy_kind_applies_and_rolls_back_with_the_request() -> None:
    m = Machine()
    effects, result = m.apply(note(b"a", b"one"), note(b"b", b"two"))
    assert result == [1, 1]
    assert [(e.type, e.key) for e in effects] == [("note", b"a"), ("note", b"b")]
    assert m.notes() == {b"a": b"one", b"b": b"two"}
    # a request failing after a note rolls the note back with it (one journal)
    with pytest.raises(InvalidArgument):
        m.apply(note(b"c", b"three"), Entry(type="nope"))
    assert m.notes() == {b"a": b"one", b"b": b"two"}
    m.apply(note(b"a"))
    assert m.notes() == {b"b": b"two"}
    # the server's kinds still work beside it
    m.apply(Entry(type="noop"))
    assert m.sm.image.revision == 4


def test_a_toy_kind_with_usage_has_a_quota() -> None:
    m = Machine()
    m.apply(quota("note", 1))
    m.apply(note(b"a", b"one"))
    with pytest.raises(ResourceExhausted) as info:
        m.apply(note(b"b", b"two"))
    assert "note" in str(info.value)
    assert m.notes() == {b"a": b"one"}
    with pytest.raises(InvalidArgument):  # the server's registry has no such type
        MetadataStateMachine.empty(REGISTRY).apply(1, 1, [quota("note", 1)])


def test_a_toy_kind_goes_through_snapshot_records_replay_and_diff(tmp_path: Path) -> None:
    m = Machine()
    m.apply(note(b"b", b"two"), note(b"a", b"one"))
    image = m.sm.image
    records = list(image_records(image))
    assert [r for r in records if r[0] == "note"] == [
        ("note", b"a", b"a=one"),
        ("note", b"b", b"b=two"),
    ]
    # record-level replay, from tuples and from a snapshot file's columns
    again = image_from_records(records, image.revision, 1, TOYS)
    assert again.sub("notes") == image.sub("notes") and again.revision == image.revision
    path = tmp_path / "toy.snap"
    write_snapshot(path, SnapshotMeta("toy", image.revision, 1), lambda: image_records(image))
    restored = image_from_records(read_snapshot_columns(path), image.revision, 1, TOYS)
    assert list(image_records(restored)) == records and restored.revision == image.revision
    # change-log replay: one record at a time
    delta = MetadataDelta(MetadataImage.empty(TOYS))
    delta.replay("note", b"a", b"a=one", False)
    delta.replay("note", b"a", b"", True)
    delta.replay("note", b"c", b"c=three", False)
    assert dict(delta.build().sub("notes").notes) == {b"c": Note(b"c", b"three")}
    # diffs (a snapshot installed over an older image)
    empty = MetadataImage.empty(TOYS)
    assert [(e.type, e.key, e.delete) for e in diff_images(empty, image)] == [
        ("note", b"a", False),
        ("note", b"b", False),
    ]
    assert [(e.type, e.key, e.delete) for e in diff_images(image, empty)] == [
        ("note", b"a", True),
        ("note", b"b", True),
    ]
    # a machine loads it (snapshot install) and reports the changes as effects
    other = MetadataStateMachine.empty(TOYS)
    assert len(other.load(image.revision, 1, records)) == 2
    assert list(image_records(other.image)) == records
    # the server's registry refuses the toy's records
    with pytest.raises(UnknownRecordType):
        image_from_records(records, image.revision, 1, REGISTRY)


def test_a_toy_kind_declares_its_consistency() -> None:
    assert read_mode("note", serializable=True, registry=TOYS) == LINEARIZABLE
    assert read_mode("kv", serializable=True, registry=TOYS) == SERIALIZABLE
    with pytest.raises(KeyError):
        read_mode("note", serializable=True, registry=REGISTRY)


def test_a_registry_refuses_clashes() -> None:
    with pytest.raises(ValueError, match="twice"):
        Registry((*KINDS, NOTE, NOTE))
    with pytest.raises(ValueError, match="two apply rules"):
        Registry((*KINDS, NOTE, RecordKind(**{**_fields(NOTE), "name": "n2", "field": "n2"})))
    with pytest.raises(ValueError, match="reserved"):
        Registry((RecordKind(**{**_fields(NOTE), "field": "provenance"}),))


def _fields(kind: RecordKind) -> dict[str, Any]:
    return {name: getattr(kind, name) for name in RecordKind.__dataclass_fields__}
