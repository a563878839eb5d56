"""Generic map/delta machinery shared by every domain's sub-image (as Kafka's
``MetadataDelta``).

:class:`Journal` is the undo log of one request, :class:`Journaled` a delta's begin, commit
and rollback over it; :class:`MapDelta` is pending changes over a base mapping, undoable
through the journal; :class:`RecordsImage`/:class:`RecordsDelta` are a sorted map of
records with a key and byte count (quotas).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Generic, Protocol, TypeVar

from nameserver.state.sortedmap import PersistentSortedMap

_MISSING = object()


class Journal:
    """The undo log of one request, shared by the sub-deltas of a :class:`MetadataDelta`:
    one list per request instead of one per sub-delta (begin and commit are per request,
    the apply path's hottest bookkeeping). ``entries`` is None outside a request."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: list[tuple[_Undoable, Any, object]] | None = None

    def begin(self) -> None:
        self.entries = []

    def commit(self) -> None:
        self.entries = None

    def rollback(self) -> None:
        """Undo every change since :meth:`begin`, newest first."""
        entries, self.entries = self.entries or [], None
        for delta, key, old in reversed(entries):
            delta._revert(key, old)


class _Undoable(Protocol):
    def _revert(self, key: Any, old: object) -> None: ...


class Journaled:
    """A delta whose changes are undoable per request through its ``_journal`` (its own,
    or the one :class:`~nameserver.state.image.MetadataDelta` shares among its sub-deltas)."""

    _journal: Journal

    def begin(self) -> None:
        """Start one request: its changes can be rolled back whole (all-or-nothing)."""
        self._journal.begin()

    def commit(self) -> None:
        self._journal.commit()

    def rollback(self) -> None:
        self._journal.rollback()


K = TypeVar("K")
V = TypeVar("V")


class MapDelta(Journaled, Generic[K, V]):
    """Pending changes of one keyed sub-image over its base (``base_get``), with an undo log
    (the request's :class:`Journal`) and running key and byte totals (``size`` of a value)
    for quotas. Every domain's sub-delta is one, the kv delta included."""

    def __init__(
        self, base_get: Callable[[K], V | None], size: Callable[[V], int] = lambda _: 0
    ) -> None:
        self._base_get = base_get
        self._size = size
        self.changes: dict[K, V | None] = {}  # None = gone
        self._journal = Journal()  # MetadataDelta shares one among its sub-deltas
        self.key_delta = 0
        self.byte_delta = 0

    def _revert(self, key: K, old: object) -> None:
        current = self.get(key)
        if old is _MISSING:
            self.changes.pop(key, None)
        else:
            self.changes[key] = old  # type: ignore[assignment]
        self._account(key, current, self.get(key))

    def _account(self, key: K, old: V | None, new: V | None) -> None:
        """Keep the running totals in step with ``key`` going from ``old`` to ``new``
        (a subclass that keeps an index of its values extends this)."""
        self.key_delta += (new is not None) - (old is not None)
        self.byte_delta += (self._size(new) if new is not None else 0) - (
            self._size(old) if old is not None else 0
        )

    def _remember(self, key: K) -> None:
        """Log ``key``'s pending change for :meth:`rollback` (inside a request only)."""
        undo = self._journal.entries
        if undo is not None:
            undo.append((self, key, self.changes.get(key, _MISSING)))

    def _change(self, key: K, new: V | None) -> None:
        self._account(key, self.get(key), new)
        self._remember(key)
        self.changes[key] = new

    def delete(self, key: K) -> None:
        self._change(key, None)

    def get(self, key: K) -> V | None:
        if key in self.changes:
            return self.changes[key]
        return self._base_get(key)

    def merged(self, base: Mapping[K, V]) -> Mapping[K, V]:
        """``base`` with the changes applied (a new read-only mapping)."""
        out = dict(base)
        for key, value in self.changes.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return MappingProxyType(out)


# ------------------------------------------------------------ sorted record maps
@dataclass(frozen=True, slots=True)
class RecordsImage(Generic[V]):
    """A sub-image of records keyed by bytes in order (route data), with its byte total."""

    data: PersistentSortedMap[V] = field(default_factory=PersistentSortedMap.empty)
    value_bytes: int = 0

    def get(self, key: bytes) -> V | None:
        return self.data.get(key)

    def range(self, start: bytes, end: bytes) -> Iterator[V]:
        for _, value in self.data.range(start, end):
            yield value

    def values(self) -> Iterator[V]:
        return self.data.values()

    def __len__(self) -> int:
        return len(self.data)


class RecordsDelta(MapDelta[bytes, V]):
    """Pending changes of a :class:`RecordsImage`; ``key_of`` names a value's key."""

    def __init__(
        self, base: RecordsImage[V], key_of: Callable[[V], bytes], size: Callable[[V], int]
    ) -> None:
        super().__init__(base.get, size)
        self.base = base
        self._key_of = key_of

    def put(self, value: V) -> None:
        self._change(self._key_of(value), value)

    def range(self, start: bytes, end: bytes) -> list[V]:
        """Values with keys in [start, end) as the delta would publish them."""
        merged: dict[bytes, V | None] = dict(self.base.data.range(start, end))
        for k, v in self.changes.items():
            if start <= k < end:
                merged[k] = v
        return [v for _, v in sorted(merged.items()) if v is not None]

    def values(self) -> list[V]:
        """Every value as the delta would publish it (a scan: for rare operations)."""
        if not self.changes:
            return list(self.base.values())
        merged: dict[bytes, V | None] = dict(self.base.data.items())
        merged.update(self.changes)
        return [v for _, v in sorted(merged.items()) if v is not None]

    @property
    def count(self) -> int:
        return len(self.base) + self.key_delta

    @property
    def byte_count(self) -> int:
        return self.base.value_bytes + self.byte_delta

    def build(self) -> RecordsImage[V]:
        if not self.changes:
            return self.base
        puts = {k: v for k, v in self.changes.items() if v is not None}
        deletes = [k for k, v in self.changes.items() if v is None]
        return RecordsImage(self.base.data.update(puts, deletes), self.byte_count)


def records_image(items: list[tuple[bytes, V]], size: Callable[[V], int]) -> RecordsImage[V]:
    """A sub-image from unsorted (key, value) pairs (snapshot load)."""
    items.sort(key=lambda item: item[0])
    return RecordsImage(
        PersistentSortedMap.from_sorted_items(items), sum(size(v) for _, v in items)
    )
