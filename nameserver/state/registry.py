"""The record-kind registry: every record type of the log, declared once (docs/architecture.md,
"Where a new thing goes").

A record type (the ``type`` of change-log effects and snapshot records) is one
:class:`RecordKind`: its name, the field of the composite image that holds its sub-image,
how to make and replay its sub-delta, how to list its records for a snapshot and build
its sub-image from them, how it is read (consistency), how it counts against quotas, and
the apply rules of the entry types it owns. :class:`Registry` indexes a tuple of kinds;
``nameserver/kinds.py`` is the one place that lists the server's kinds.

The composite image and delta (:mod:`nameserver.state.image`), the state machine's
dispatch, snapshot records and replay, diffs (:mod:`nameserver.state.machine`),
consistency (:mod:`nameserver.state.consistency`) and quotas
(:mod:`nameserver.quotas.apply`) are lookups and loops over a registry: adding a record
type edits none of them. Dispatch stays one dict lookup per entry (:attr:`Registry.rules`).

This module, like the rest of ``state/``, imports no domain package and not
:mod:`nameserver.kinds`: the machinery takes its registry as an argument (an image carries
its own), and the server's wiring passes :data:`nameserver.kinds.REGISTRY`. So ``state/``
loads without the domains, and no import runs back from the state machinery to them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nameserver.state.image import MetadataDelta
    from raftlog import Effect, Entry

#: An apply rule: one entry of its type applied to the delta (deterministic, no I/O); it
#: appends its effects and returns the entry's result or raises ``Rejected``.
ApplyRule = Callable[["MetadataDelta", "Entry", int, "list[Effect]"], Any]

#: Attribute names of the composite image and delta that no kind may take as its field.
RESERVED_FIELDS = frozenset({"provenance", "registry", "image", "revision", "sub", "replace"})


class RequestGuard(Protocol):
    """A check around each request (quotas): ``before`` returns what ``after`` compares
    against, or None when the request cannot break the rule (then ``after`` is skipped);
    ``after`` raises ``Rejected`` to roll the request back."""

    def before(self, delta: MetadataDelta, entries: Sequence[Entry]) -> Any: ...

    def after(self, delta: MetadataDelta, before: Any) -> None: ...


class UnknownRecordType(ValueError):
    """A record whose type no kind of the registry declares."""


def same_key(key: bytes) -> bytes:
    """The sub-delta key of a kind keyed by the record key itself."""
    return key


@dataclass(frozen=True, slots=True, eq=False)
class RecordKind:
    """One record type: everything the shared machinery needs to know about it.

    A record (``decode(value)``) has ``to_record() -> bytes`` and compares by value. The
    sub-delta (``delta(sub_image)``) has ``get``, ``put(record)``, ``delete(key)``,
    ``build() -> sub_image`` and a ``_journal`` attribute (the request's shared undo log,
    set by the composite delta), as :class:`~nameserver.state.mapdelta.MapDelta` does.
    """

    #: the record type: Effect.type, snapshot record type, quota and consistency key
    name: str
    #: attribute of MetadataImage / MetadataDelta holding the sub-image / sub-delta
    field: str
    #: the empty sub-image (immutable: shared by every empty image)
    empty: Any
    #: a sub-delta over a sub-image
    delta: Callable[[Any], Any]
    #: a record value (bytes, a ``records.proto`` message) -> the record
    decode: Callable[[bytes], Any]
    #: how a read of this type is served (a :mod:`nameserver.state.consistency` level)
    consistency: str
    #: the sub-image's records as (record key, record), in snapshot order
    items: Callable[[Any], Iterable[tuple[bytes, Any]]]
    #: the record under a record key in a sub-image, or None (diffs)
    lookup: Callable[[Any, bytes], Any]
    #: a record key -> the sub-delta's key (``delete``)
    key_of: Callable[[bytes], Any] = same_key
    #: bulk restore: a sub-image from unsorted (key, record) pairs; None = replay each
    from_items: Callable[[list[tuple[bytes, Any]]], Any] | None = None
    #: bulk restore from a snapshot's columns (keys, values); None = from_items or replay
    from_columns: Callable[[list[bytes], list[bytes]], Any] | None = None
    #: quota accounting: (keys, bytes) as the sub-delta would publish them; None = no quota
    usage: Callable[[Any], tuple[int, int]] | None = None
    #: entry types this kind's apply rules handle -> the rule
    rules: Mapping[str, ApplyRule] = dataclasses.field(default_factory=dict)
    #: a check around every request (the quota kind's limits), if the kind has one
    guard: RequestGuard | None = None
    #: the kind that holds the store revision: its sub-image -> that revision (-1: none
    #: yet, the image's last offset is); one kind at most
    revision: Callable[[Any], int] | None = None
    #: after every request whose rules made effects: (delta, offset, the request's effects),
    #: may change the delta and the effects (the store revision's count); one kind at most
    after_request: Callable[[MetadataDelta, int, list[Effect]], None] | None = None
    #: after a record of this kind was replayed (a put, from the change log or a
    #: snapshot): (delta, the record); the kv kind's moves the store revision's count
    replayed: Callable[[MetadataDelta, Any], None] | None = None


def _noop(delta: MetadataDelta, entry: Entry, rev: int, effects: list[Effect]) -> None:
    return None


class _Guards:
    """Several kinds' guards as one (each request pays for a list only in this case)."""

    def __init__(self, guards: Sequence[RequestGuard]) -> None:
        self.guards = tuple(guards)

    def before(self, delta: MetadataDelta, entries: Sequence[Entry]) -> Any:
        tokens: list[Any] | None = None  # made only when some guard counts (rarely)
        for i, guard in enumerate(self.guards):
            token = guard.before(delta, entries)
            if token is not None:
                if tokens is None:
                    tokens = [None] * len(self.guards)
                tokens[i] = token
        return tokens

    def after(self, delta: MetadataDelta, before: Any) -> None:
        for guard, token in zip(self.guards, before, strict=True):
            if token is not None:
                guard.after(delta, token)


class Registry:
    """The kinds of one state machine, indexed for the lookups the machinery does."""

    def __init__(self, kinds: Sequence[RecordKind], reads: Mapping[str, str] | None = None) -> None:
        """``reads``: read surfaces that are not record types (locks, elections, routes)
        and their consistency."""
        self.kinds: tuple[RecordKind, ...] = tuple(kinds)
        self.by_name: dict[str, RecordKind] = {}
        self.by_field: dict[str, RecordKind] = {}
        #: entry type -> apply rule (``noop`` included): the state machine's dispatch
        self.rules: dict[str, ApplyRule] = {"noop": _noop}
        for kind in self.kinds:
            if kind.name in self.by_name or kind.field in self.by_field:
                raise ValueError(f"record kind {kind.name!r} ({kind.field}) registered twice")
            if kind.field in RESERVED_FIELDS or kind.field.startswith("_"):
                raise ValueError(f"record kind {kind.name!r}: field {kind.field!r} is reserved")
            self.by_name[kind.name] = kind
            self.by_field[kind.field] = kind
            for entry_type, rule in kind.rules.items():
                if entry_type in self.rules:
                    raise ValueError(f"entry type {entry_type!r} has two apply rules")
                self.rules[entry_type] = rule
        #: every record type, in registration order (snapshot order)
        self.record_types: tuple[str, ...] = tuple(k.name for k in self.kinds)
        #: the kinds that have a quota, in registration order
        self.quota_kinds: tuple[RecordKind, ...] = tuple(
            k for k in self.kinds if k.usage is not None
        )
        self.quota_types: tuple[str, ...] = tuple(k.name for k in self.quota_kinds)
        #: record type or read surface -> its consistency level
        self.consistency: dict[str, str] = {k.name: k.consistency for k in self.kinds}
        for surface, level in (reads or {}).items():
            if surface in self.consistency:
                raise ValueError(f"read surface {surface!r} is also a record type")
            self.consistency[surface] = level
        guards = [k.guard for k in self.kinds if k.guard is not None]
        #: the check around every request, if any kind has one
        self.guard: RequestGuard | None = (
            None if not guards else guards[0] if len(guards) == 1 else _Guards(guards)
        )
        counters = [(k.field, k.revision) for k in self.kinds if k.revision is not None]
        hooks = [k.after_request for k in self.kinds if k.after_request is not None]
        if len(counters) > 1 or len(hooks) > 1:
            raise ValueError("two kinds hold the store revision")
        #: (field, sub-image -> revision) of the kind holding the store revision, if any
        self.revision: tuple[str, Callable[[Any], int]] | None = counters[0] if counters else None
        #: what runs after each request that made effects, if any kind has it
        self.after_request: Callable[[MetadataDelta, int, list[Effect]], None] | None = (
            hooks[0] if hooks else None
        )
        #: field -> empty sub-image: the attributes of an empty composite image
        self.empty_subs: dict[str, Any] = {k.field: k.empty for k in self.kinds}

    def kind(self, record_type: str) -> RecordKind:
        kind = self.by_name.get(record_type)
        if kind is None:
            raise UnknownRecordType(f"unknown record type {record_type!r}")
        return kind
