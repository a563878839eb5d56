"""The kv store's history (etcd's MVCC): a per-key revision index in memory, so a Range,
a read-only Txn or HashKV at a past revision reads the state at that revision.

etcd keeps every revision of every key (mvcc/kvstore.go, key_index.go) until a Compact
removes those below the compaction revision, keeping for each key its newest version at or
below it unless that is a tombstone (``keyIndex.compact``). Here the image holds the latest
state, and :class:`KvHistory` holds, for every key changed since its floor, its versions
``(mod_revision, KeyValue | encoded KvRecord | None for a tombstone)`` in revision order,
starting with the version the key had before its first change in the index (so "no version
at or below R" means "absent at R"). A key with no entry here is unchanged since the floor:
its value at any readable revision is the image's.

Fed by the apply observer (``on_applied``: the kv and mvcc effects of each apply group, then
the next observer, the watch hub), pruned by compaction (the ``mvcc`` record of
:mod:`nameserver.kv.mvcc`) and by the node's change-log retention (so memory stays bounded
by what the node keeps even when nobody compacts). The floor of a node, below which a read
answers "required revision has been compacted", is the highest of the compaction revision,
the retention point and the index's base (a restart rebuilds from the oldest snapshot the
kept segments follow: :func:`rebuild`; a snapshot installed from the leader resets it).

A write txn's ranges at a revision are read here by the member that answers it, after
apply (apply never reads a node's history): :meth:`KvHistory.pin` keeps those revisions
from being pruned (by a compaction or the retention) until it has. ``version_bytes`` (the
past versions' bytes) is what the backend quota adds to the image's size
(:mod:`nameserver.cluster.nospace`).

Threads: the apply thread writes; readers (event loop, worker threads) read without a lock:
a version list is appended to or replaced whole (a reader only swaps an encoded version for
its decoded equal), and a read checks the floor again when it is done (a compaction that
passed it meanwhile makes it compacted).
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from nameserver.kv.mvcc import Compacted, check_read
from nameserver.kv.records import COMPACT_KEY, Compaction, KeyValue
from nameserver.kv.revision import counted_revision, revision_of
from nameserver.state.image import MetadataImage
from raftlog import Change, Effect
from raftlog.log import ApplyObserver, Captured

log = logging.getLogger(__name__)

#: a version's value: the record decoded, still encoded (as the effect carried it), or None
Value = KeyValue | bytes | None
#: what :meth:`KvHistory.lookup` answers for a key with no versions here
UNTOUCHED: Any = object()


def _rev(version: tuple[int, Any]) -> int:
    return int(version[0])


#: what a version costs against the backend quota beyond its bytes (etcd's kvOverhead)
VERSION_OVERHEAD = 256


def _varint_len(n: int) -> int:
    return 10 if n < 0 else max(1, (n.bit_length() + 6) // 7)


def _record_len(kv: KeyValue) -> int:
    """``len(kv.to_record())`` without encoding it (KvRecord: fields 1-6, one-byte tags)."""
    n = 0
    for data in (kv.key, kv.value):
        if data:
            n += 1 + _varint_len(len(data)) + len(data)
    for x in (kv.create_revision, kv.mod_revision, kv.version, kv.lease):
        if x:
            n += 1 + _varint_len(x)
    return n


def _cost(key: bytes, value: Value) -> int:
    """A past version's bytes against the backend quota: its record's (the same encoded or
    decoded: a read decodes versions in place), a tombstone its key's."""
    if value is None:
        return len(key) + VERSION_OVERHEAD
    if isinstance(value, bytes):
        return len(value) + VERSION_OVERHEAD
    return _record_len(value) + VERSION_OVERHEAD


def _past_bytes(key: bytes, versions: list[tuple[int, Value]]) -> int:
    """The quota bytes of a key's versions but its current value (the image counts that)."""
    n = sum(_cost(key, v) for _, v in versions[:-1])
    return n + (_cost(key, None) if versions and versions[-1][1] is None else 0)


class KvHistory:
    """Per-key versions of the kv store above this node's floor (see the module doc)."""

    def __init__(
        self,
        image: MetadataImage,
        current: Callable[[], MetadataImage],
        then: ApplyObserver | None = None,
        retained_from: Callable[[], int] | None = None,
    ) -> None:
        """``current``: the published image (read right after each group); ``then``: the
        next observer; ``retained_from``: the first offset the node's change log still holds
        (history below it is dropped)."""
        self._current = current
        self._then = then
        self._retained_from = retained_from
        self._versions: dict[bytes, list[tuple[int, Value]]] = {}
        #: ``(revision, key)`` of every version recorded, in order (what compaction visits)
        self._order: deque[tuple[int, bytes]] = deque()
        #: keys with a tombstone among their versions, sorted (ranges find deleted keys here)
        self._tombstoned: list[bytes] = []
        self._lock = threading.Lock()  # guards _tombstoned (insort vs. a reader's slice), _pins
        #: revisions a write txn of this node will read once applied: not pruned (count)
        self._pins: dict[int, int] = {}
        #: bumped by every reset (a pinned read made across one is not to be trusted)
        self.generation = 0
        #: ``(revision, compaction revision)`` from the base on (HashKV at a revision)
        self._compactions: list[tuple[int, int]] = []
        #: ``(offset, revision)`` of the changes recorded since the base, once the store
        #: counts etcd's way (the retention point, an offset, as a revision)
        self._marks: deque[tuple[int, int]] = deque()
        self.reset(image)

    # ------------------------------------------------------------ state
    def reset(self, image: MetadataImage, base: int | None = None, compacted: int = 0) -> None:
        """Start over from ``image``: nothing below its revision is readable. A rebuild
        (:func:`nameserver.kv.history_rebuild.rebuild`) starts from an older ``base``, with
        the compaction revision in force there, and then replays up to ``image``."""
        # the floor rises first: a reader that passed the old one fails its recheck
        self.base = image.revision if base is None else base
        self.image = image
        self._versions = {}
        self._order = deque()
        with self._lock:
            self._tombstoned = []
        #: versions held (kept as they come and go: /metrics reads it)
        self.version_count = 0
        #: bytes of the versions held but the keys' current values (the backend quota)
        self.version_bytes = 0
        self._key_bytes: dict[bytes, int] = {}
        self.pruned_to = 0
        self._pruned = 0  # the highest revision pruned at (pins may hold it below the floor)
        self.generation += 1
        self.compacted = image.mvcc.compact_revision if base is None else compacted
        self._compactions = [(self.base, self.compacted)]
        self._marks = deque()

    @property
    def floor(self) -> int:
        """The oldest revision readable here."""
        return max(self.base, self.compacted, self.pruned_to)

    def versions(self) -> int:
        """How many versions the index holds (metrics, memory measurements)."""
        return self.version_count

    def compact_revision_at(self, revision: int) -> int:
        """The compaction revision in force at ``revision`` (the same on every member)."""
        i = bisect.bisect_right(self._compactions, revision, key=_rev)
        return self._compactions[i - 1][1] if i else self._compactions[0][1]

    # ------------------------------------------------------------ apply thread
    def on_applied(self, before: Captured, last_offset: int, changes: list[Change]) -> None:
        try:
            self._apply(before, changes)
            self.image = self._current()
            retained = self._retained_from() if self._retained_from is not None else 0
            below = self._revision_below(retained)
            if below > self.pruned_to:
                self.pruned_to = below  # the floor rises first, then the index shrinks
            self._prune_to(max(self.compacted, self.pruned_to))
        except Exception:  # never the apply thread's problem: start over, floor raised
            log.exception("kv history: dropped (floor now %d)", last_offset)
            self.reset(self._current())
        finally:
            if self._then is not None:
                self._then.on_applied(before, last_offset, changes)

    def on_installed(self, offset: int) -> None:
        try:
            self.reset(self._current())
        finally:
            if self._then is not None:
                self._then.on_installed(offset)

    def _revision_below(self, retained: int) -> int:
        """The store revision at offset ``retained - 1`` as far as this index can tell (the
        offset while the store counts by offset; else the revision of the last change
        recorded at or below it, 0 when none)."""
        if retained <= 1:
            return 0
        if self.image.store_rev.revision < 0:
            return retained - 1
        marks, below = self._marks, 0
        while marks and marks[0][0] < retained:
            below = marks.popleft()[1]
        return below

    def _apply(self, before: Captured, changes: list[Change]) -> None:
        """An apply group's ``changes`` over ``before`` (its image before them): each
        request's revision followed from the counter there (a put leading a request's
        effects is at the counter's next), not read from its record."""
        image: MetadataImage = before.image  # type: ignore[attr-defined]
        self._replay(
            image.kv.get, [(c.offset, c.effects) for c in changes], image.store_rev.revision
        )

    def replay(
        self,
        prior: Callable[[bytes], KeyValue | None],
        changes: Iterable[tuple[int, Sequence[Effect]]],
    ) -> None:
        """Record ``(offset, its effects)`` in order (kv changes, compactions; other types are
        passed over); ``prior(key)`` is a key's value before the first of them."""
        self._replay(prior, changes)

    def _replay(
        self,
        prior: Callable[[bytes], KeyValue | None],
        changes: Iterable[tuple[int, Sequence[Effect]]],
        counter: int | None = None,
    ) -> None:
        """:meth:`replay` of ``(offset, its effects)`` pairs (an apply group's changes as
        they come: no pair per effect made on the apply path). A change's revision is
        its offset, or its counter record's, or its leading put's: read from the records
        (:func:`nameserver.kv.revision.revision_of`), or followed from ``counter``, the
        store's counter before the first change (:func:`~nameserver.kv.revision.counted_revision`)."""
        compact = 0
        record = self.record
        marks = self._marks
        for offset, effects in changes:
            if counter is None:
                rev = revision_of(offset, effects)
            else:
                rev, counter = counted_revision(counter, offset, effects)
            if rev != offset:
                marks.append((offset, rev))
            for eff in effects:
                if eff.type == "kv":
                    record(prior, rev, eff.key, None if eff.delete else eff.value)
                elif eff.type == "mvcc" and eff.key == COMPACT_KEY and not eff.delete:
                    compact = Compaction.from_record(eff.value).revision
                    self._compactions.append((rev, compact))
        if compact:
            self.compacted = compact
            self._prune_to(compact)

    def record(
        self, prior: Callable[[bytes], KeyValue | None], rev: int, key: bytes, value: Value
    ) -> None:
        """``key`` changed at ``rev`` (``value`` None: deleted); ``prior(key)`` is its
        value before, asked only when the key has no versions here yet."""
        versions = self._versions.get(key)
        if versions is None:
            before = prior(key)
            # _past_bytes of the new list, without walking it: the version before, if any,
            # and the tombstone when this is a delete
            if before is not None:
                versions = [(before.mod_revision, before), (rev, value)]
                added = _cost(key, before)
            else:
                versions = [(rev, value)]
                added = 0
            if value is None:
                added += _cost(key, None)
            self._versions[key] = versions
            self.version_count += len(versions)
        else:
            prev = versions[-1][1]
            versions.append((rev, value))
            self.version_count += 1
            added = _cost(key, prev) if prev is not None else 0
            added += _cost(key, None) if value is None else 0
        self._key_bytes[key] = self._key_bytes.get(key, 0) + added
        self.version_bytes += added
        if value is None:
            with self._lock:
                i = bisect.bisect_left(self._tombstoned, key)
                if i == len(self._tombstoned) or self._tombstoned[i] != key:
                    self._tombstoned.insert(i, key)
        self._order.append((rev, key))

    def _prune_to(self, upto: int) -> None:
        """Prune at ``upto``, or at the lowest pinned revision if lower (then again later)."""
        with self._lock:
            if self._pins:
                upto = min(upto, min(self._pins))
        if upto > self._pruned:
            self.prune(upto)
            self._pruned = upto

    def pin(self, revisions: Iterable[int]) -> list[int]:
        """Keep the index readable at ``revisions`` (those > 0) until :meth:`unpin`, even
        past a compaction or the retention point: a write txn's ranges at a revision are
        read here once it is applied. Compacted (OUT_OF_RANGE) if one is below the floor
        now but not below the compaction revision (below that, apply fails the txn on every
        node if it reads there: the log decides; this node only refuses what the log allows
        but its own history no longer holds, before proposing)."""
        with self._lock:
            floor, compacted = self.floor, self.compacted
            wanted = sorted(r for r in revisions if r > 0 and r >= compacted)
            if wanted and wanted[0] < floor:
                raise Compacted(floor)
            for r in wanted:
                self._pins[r] = self._pins.get(r, 0) + 1
        return wanted

    def unpin(self, pinned: list[int]) -> None:
        with self._lock:
            for r in pinned:
                left = self._pins.pop(r, 1) - 1
                if left > 0:
                    self._pins[r] = left

    def prune(self, upto: int) -> None:
        """Drop what no read at ``upto`` or later needs: for each key its versions at or
        below ``upto`` but the newest, and that one too when it is a tombstone (etcd's
        keyIndex.compact); a key left with only its current value leaves the index."""
        order, touched = self._order, set()
        while order and order[0][0] <= upto:
            touched.add(order.popleft()[1])
        gone: list[bytes] = []
        for key in touched:
            versions = self._versions.get(key)
            if versions is None:
                continue
            i = bisect.bisect_right(versions, upto, key=_rev)
            keep = versions[i - 1 :] if i and versions[i - 1][1] is not None else versions[i:]
            if not keep or (len(keep) == 1 and keep[0][0] <= upto):
                del self._versions[key]  # absent, or unchanged since: the image has it
                self.version_count -= len(versions)
                self.version_bytes -= self._key_bytes.pop(key, 0)
            else:
                self._versions[key] = keep  # replaced whole (readers hold the old list)
                self.version_count -= len(versions) - len(keep)
                now = _past_bytes(key, keep)
                self.version_bytes += now - self._key_bytes.get(key, 0)
                self._key_bytes[key] = now
            if all(v is not None for _, v in keep):
                gone.append(key)
        if gone:
            with self._lock:
                for key in gone:
                    i = bisect.bisect_left(self._tombstoned, key)
                    if i < len(self._tombstoned) and self._tombstoned[i] == key:
                        del self._tombstoned[i]
        i = bisect.bisect_right(self._compactions, upto, key=_rev)
        if i > 1:
            self._compactions = self._compactions[i - 1 :]  # replaced whole, as versions

    # ------------------------------------------------------------ readers
    def lookup(self, key: bytes, revision: int) -> KeyValue | None:
        """``key``'s value at ``revision``, or :data:`UNTOUCHED` when it has no versions
        here (then the image's value is the answer)."""
        versions = self._versions.get(key)
        if versions is None:
            return UNTOUCHED  # type: ignore[no-any-return]
        last = versions[-1]
        if last[0] <= revision:  # the common case: unchanged since ``revision``
            i = len(versions)
        else:
            i = bisect.bisect_right(versions, revision, key=_rev)
            if not i:
                return None
            last = versions[i - 1]
        value = last[1]
        if isinstance(value, bytes):  # decoded once, kept decoded (an equal version)
            value = KeyValue.from_record(value)
            versions[i - 1] = (last[0], value)
        return value

    def tombstoned(self, start: bytes, end: bytes | None) -> list[bytes]:
        with self._lock:
            lo = bisect.bisect_left(self._tombstoned, start)
            if end is None or end == b"\x00":
                return self._tombstoned[lo:]
            return self._tombstoned[lo : bisect.bisect_left(self._tombstoned, end)]

    def check(self, revision: int, current: int) -> None:
        """OUT_OF_RANGE unless ``revision`` (0 = current) can be read here."""
        check_read(revision, self.floor, current)

    def view(self, revision: int) -> RevisionView:
        """The kv store at ``revision`` (readable: :meth:`check` first, :meth:`ready` too)."""
        return RevisionView(self, self.image, revision)

    async def ready(self, revision: int, timeout_s: float) -> None:
        """Wait (briefly: the apply thread feeds the index right after it publishes an
        image) until the index has caught up with ``revision``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self.image.revision < revision and loop.time() < deadline:
            await asyncio.sleep(0.001)


class RevisionView:
    """A read-only :class:`~nameserver.kv.semantics.KvView` of the kv store at one revision:
    the image's keys, and the keys deleted since, each as it was at ``revision``."""

    def __init__(self, history: KvHistory, image: MetadataImage, revision: int) -> None:
        self.history = history
        self.kv = image.kv
        self.revision = revision

    def get(self, key: bytes) -> KeyValue | None:
        value = self.history.lookup(key, self.revision)
        return self.kv.get(key) if value is UNTOUCHED else value

    def range(self, key: bytes, range_end: bytes | None) -> Iterator[KeyValue]:
        if range_end is None:
            kv = self.get(key)
            if kv is not None:
                yield kv
            return
        lookup, rev = self.history.lookup, self.revision
        touched = self.history._versions.get  # an untouched key costs one dict miss
        deleted = self.history.tombstoned(key, range_end)
        d, n = 0, len(deleted)
        for k, current in self.kv.data.range(key, range_end):
            if d < n:
                while d < n and deleted[d] < k:
                    old = lookup(deleted[d], rev)
                    if old is not None and old is not UNTOUCHED:
                        yield old
                    d += 1
                if d < n and deleted[d] == k:
                    d += 1
            if touched(k) is None:
                yield current
                continue
            value = lookup(k, rev)
            if value is UNTOUCHED:
                yield current
            elif value is not None:
                yield value
        for k in deleted[d:]:
            old = lookup(k, rev)
            if old is not None and old is not UNTOUCHED:
                yield old

    def items(self) -> Iterator[tuple[bytes, KeyValue]]:
        """Every key at the revision, in key order (HashKV)."""
        for kv in self.range(b"\x00", b"\x00"):  # every key: etcd keys are never empty
            yield kv.key, kv
