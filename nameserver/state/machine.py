"""The metadata state machine: applies log entries to the image.

It imports nothing from consensus or gRPC (consensus only hands it committed entries), and no domain: what each entry
type does and which record types exist is the registry's
(:mod:`nameserver.state.registry`) that its image carries, given by whoever makes it (the
server passes :data:`nameserver.kinds.REGISTRY`), so unit tests drive it with lists of
entries and any registry. ``apply`` is deterministic (no clock, no randomness, no I/O);
each entry's changes are all-or-nothing; results are etcd response messages without
headers, or a :class:`~nameserver.errors.Rejected`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from google.protobuf.message import DecodeError

from nameserver.errors import InvalidArgument
from nameserver.state.image import MetadataDelta, MetadataImage, Provenance
from nameserver.state.registry import Registry
from raftlog import Effect, Entry
from snapshots import SnapshotColumns


class MetadataStateMachine:
    def __init__(self, image: MetadataImage) -> None:
        """Over ``image``, with its registry's kinds (:meth:`empty` starts from nothing)."""
        self.registry = registry = image.registry
        self._image = image
        self._rules = registry.rules  # entry type -> apply rule: one dict lookup per entry
        self._guard = registry.guard  # the quota check around each request, if any
        self._after = registry.after_request  # the store revision's count, if any
        self._delta: MetadataDelta | None = None
        self._applied = (0, 0)  # (offset, term) of the last request applied into the delta

    @classmethod
    def empty(cls, registry: Registry) -> MetadataStateMachine:
        """Over the empty image of ``registry``'s kinds (the server's:
        :data:`nameserver.kinds.REGISTRY`)."""
        return cls(MetadataImage.empty(registry))

    @property
    def image(self) -> MetadataImage:
        """The current published image; take the reference once per request."""
        return self._image

    @property
    def last_offset(self) -> int:
        return self._image.provenance.last_offset

    # ------------------------------------------------------------------ apply
    def apply(self, offset: int, term: int, entries: Sequence[Entry]) -> tuple[list[Effect], Any]:
        delta = self._delta
        if delta is None:
            delta = self._delta = MetadataDelta(self._image)
        self._applied = (offset, term)  # the delta's provenance, made once at publish
        effects: list[Effect] = []
        delta.begin()
        guard = self._guard
        try:
            # The guard (quotas) counts only when its rule can apply: the answer is the
            # same on every node, quotas are records of the log.
            before = guard.before(delta, entries) if guard is not None else None
            rules = self._rules
            results = []
            for e in entries:
                rule = rules.get(e.type)
                if rule is None:
                    raise InvalidArgument(f"unknown entry type {e.type!r}")
                results.append(rule(delta, e, offset, effects))
            if effects and self._after is not None:
                self._after(delta, offset, effects)
            if before is not None and guard is not None:
                guard.after(delta, before)
        except DecodeError as exc:
            # e.g. a Txn nested past protobuf's depth limit: the same on every node, a
            # rejection of this request (not a failure of apply)
            delta.rollback()
            raise InvalidArgument(f"etcdserver: request cannot be decoded: {exc}") from None
        except Exception:
            delta.rollback()
            raise
        delta.commit()
        return effects, results[0] if len(results) == 1 else results

    def publish(self) -> None:
        if self._delta is not None:
            self._delta.provenance = Provenance(*self._applied)
            self._image = self._delta.build()
            self._delta = None

    # -------------------------------------------------------------- snapshots
    def capture(self) -> CapturedImage:
        return CapturedImage(self._image)

    def load(
        self, last_offset: int, last_term: int, records: Iterable[tuple[str, bytes, bytes]]
    ) -> list[Effect]:
        new = image_from_records(records, last_offset, last_term, self.registry)
        effects = diff_images(self._image, new)
        self._delta = None
        self._image = new
        return effects


#: The snapshot thread pauses SNAPSHOT_YIELD_S after every SNAPSHOT_YIELD_EVERY records.
SNAPSHOT_YIELD_EVERY = 2000
SNAPSHOT_YIELD_S = 0.001


class CapturedImage:
    """An image held for a snapshot: immutable, so reading it needs no lock."""

    def __init__(self, image: MetadataImage) -> None:
        self.image = image
        self.last_offset = image.provenance.last_offset
        self.last_term = image.provenance.last_term

    def records(self) -> Iterator[tuple[str, bytes, bytes]]:
        """The image's records, pausing briefly every few thousand so that the snapshot
        thread, which holds the GIL while it encodes, never starves the apply, consensus
        and gRPC threads for long (the commit path's stall bound)."""
        for i, record in enumerate(image_records(self.image)):
            if i % SNAPSHOT_YIELD_EVERY == SNAPSHOT_YIELD_EVERY - 1:
                time.sleep(SNAPSHOT_YIELD_S)
            yield record


def image_records(image: MetadataImage) -> Iterator[tuple[str, bytes, bytes]]:
    """Every (type, key, value) record of an image: what a snapshot holds (kinds in
    registry order, each kind's records in its own order)."""
    attrs = image.__dict__
    for kind in image.registry.kinds:
        name = kind.name
        for key, record in kind.items(attrs[kind.field]):
            yield name, key, record.to_record()


def image_from_records(
    records: Iterable[tuple[str, bytes, bytes]],
    last_offset: int,
    last_term: int,
    registry: Registry,
) -> MetadataImage:
    """Rebuild an image of ``registry``'s kinds from snapshot records (record-level replay:
    no state-machine rules).

    Kinds with ``from_items`` are built in bulk from their decoded records, and given a
    :class:`snapshots.SnapshotColumns` (restore), kinds with ``from_columns`` from their
    columns whole (:meth:`KvImage.from_records`); the rest replay record by record."""
    columns: dict[str, tuple[list[bytes], list[bytes]]] = {}
    if isinstance(records, SnapshotColumns):
        taken = [k.name for k in registry.kinds if k.from_columns is not None]
        columns = {t: records.columns[t] for t in taken if t in records.columns}
        records = _without(records, frozenset(taken))
    bulk: dict[str, tuple[Callable[[tuple[bytes, Any]], None], Callable[[bytes], Any]]] = {}
    items: dict[str, list[tuple[bytes, Any]]] = {}
    for kind in registry.kinds:
        if kind.from_items is not None and kind.name not in columns:
            got: list[tuple[bytes, Any]] = []
            items[kind.name] = got
            bulk[kind.name] = (got.append, kind.decode)
    delta = MetadataDelta(MetadataImage.empty(registry))
    for type_, key, value in records:
        into = bulk.get(type_)
        if into is None:
            delta.replay(type_, key, value, False)
        else:
            into[0]((key, into[1](value)))
    delta.provenance = Provenance(last_offset, last_term)
    image = delta.build()
    subs: dict[str, Any] = {}
    for kind in registry.kinds:
        if kind.name in columns:
            subs[kind.field] = kind.from_columns(*columns[kind.name])  # type: ignore[misc]
        elif kind.name in items:
            subs[kind.field] = kind.from_items(items[kind.name])  # type: ignore[misc]
    return image.replace(**subs)


def _without(records: SnapshotColumns, types: frozenset[str]) -> Iterator[tuple[str, bytes, bytes]]:
    """The records of every type but ``types`` (whose columns the caller takes whole)."""
    for t, (keys, values) in records.columns.items():
        if t not in types:
            for key, value in zip(keys, values, strict=True):
                yield t, key, value


def diff_images(old: MetadataImage, new: MetadataImage) -> list[Effect]:
    """The effects that turn ``old`` into ``new``: puts of changed records, deletes of gone
    ones (kind by kind, in registry order)."""
    effects: list[Effect] = []
    old_subs, new_subs = old.__dict__, new.__dict__
    for kind in new.registry.kinds:
        name, lookup = kind.name, kind.lookup
        old_sub, new_sub = old_subs.get(kind.field, kind.empty), new_subs[kind.field]
        if old_sub is new_sub:
            continue
        for key, record in kind.items(new_sub):
            if lookup(old_sub, key) != record:
                effects.append(Effect(name, key, record.to_record()))
        effects.extend(
            Effect(name, key, delete=True)
            for key, _ in kind.items(old_sub)
            if lookup(new_sub, key) is None
        )
    return effects
