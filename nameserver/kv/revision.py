"""The kv store's revision as etcd 3.4 counts it: moved by a request that changes keys (a
put, a delete that deleted something, a txn that wrote, a lease revoke that deleted its
keys), kept by every other (lease, auth, member and route requests, compactions, failed
requests); every change of one request shares its revision.

The counter is one record (type ``revision``, :class:`~nameserver.kv.records.StoreRevision`)
of the image, so it travels in snapshots, the change log and replay like every record. An
image without it counts as metaledger always did: its store revision is its last log
offset (a log written before the counter existed replays to the same image). A
``count_revisions`` entry switches a store to the counter, at the revision it has then:
every member applies it at the same point of the log, so no two count differently.

In the change log, the counter's record (:data:`REVISION` effect) comes first among the
effects of each request that changed keys or compacted, unless the first of them is a
key's new value (a put: the record's ``mod_revision`` is the request's revision, so the
counter needs no record of its own, and replaying the put moves it: :func:`kv_replayed`).
A reader of the change log (kv history, watch replay) takes the revision of a request's kv
changes from the counter's record, or from the leading put's (:func:`revision_of`; a store
not counting yet numbers a put by its offset), and the offset where there is neither.
Change logs written before (a counter record before every put) replay to the same image;
a change log written so must not be replayed by an older version (upgrade, never
downgrade).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from nameserver.kv.records import REVISION as REVISION  # the record type, here as well
from nameserver.kv.records import (
    REVISION_FLOOR,
    REVISION_KEY,
    KeyValue,
    RevisionDelta,
    RevisionImage,
    StoreRevision,
    record_mod_revision,
    record_revision,
)
from raftlog import Effect, Entry
from raftlog.entry import put_effect, varint

if TYPE_CHECKING:
    from nameserver.state.image import MetadataDelta

#: the entry type that switches a store to etcd's count
COUNT_REVISIONS = "count_revisions"


def counted(delta: MetadataDelta) -> int:
    """The store's counter as ``delta`` holds it now, -1 while it counts by log offset."""
    made: RevisionDelta | None = delta.__dict__.get("store_rev")  # delta.made, inlined
    if made is not None:
        return made.revision
    sub: RevisionImage = delta.image.store_rev
    return sub.revision


def next_revision(delta: MetadataDelta, offset: int) -> int:
    """The revision a change of the request at ``offset`` is made at."""
    counter = counted(delta)
    return offset if counter < 0 else counter + 1


def current_revision(delta: MetadataDelta, offset: int) -> int:
    """The store revision before the request at ``offset``."""
    counter = counted(delta)
    return offset - 1 if counter < 0 else counter


def after_request(delta: MetadataDelta, offset: int, effects: list[Effect]) -> None:
    """Once a request's rules ran (``effects`` not empty): a store that counts takes the
    next revision if the request changed keys, and the request's effects start with the
    counter when it changed keys or compacted."""
    made: RevisionDelta | None = delta.__dict__.get("store_rev")  # counted(), inlined
    counter = made.revision if made is not None else delta.image.store_rev.revision
    if counter < 0:
        return
    first = effects[0]
    if first.type == "kv" and not first.delete:
        # a put leads (most requests): its record's mod_revision is the next revision
        # (kv.apply.put), the counter needs no record of its own
        (made if made is not None else delta.store_rev).count(counter + 1)
        return
    changed = compacted = False
    for eff in effects:
        t = eff.type
        if t == "kv":
            changed = True
            break
        if t == "mvcc":
            compacted = True
    if changed:
        counter += 1
        delta.store_rev.count(counter)
    elif not compacted:
        return
    value = b"\x08" + varint(counter) if counter else b""  # StoreRevision(counter).to_record()
    effects.insert(0, put_effect(REVISION, REVISION_KEY, value))


def apply_count_entry(delta: MetadataDelta, e: Entry, offset: int, effects: list[Effect]) -> None:
    """One ``count_revisions`` entry: from here on the store counts etcd's way, from the
    revision it has now (the last offset before this entry), or from the entry's floor
    when that is higher (its value, a :class:`StoreRevision`: :data:`FLOOR`, an empty
    store's revision in etcd, so a store switched at offset 1 gives its first key revision
    2 as etcd does; an entry without a value, as written before, has none). An entry that
    also says the store never changed keys up to an offset (:func:`untouched_through`, the
    leader saw so) starts at its floor when that offset is the last before it, whatever
    the member and bootstrap records before took: a new cluster of any size numbers its
    first put 2, as etcd. Again: nothing."""
    if counted(delta) >= 0:
        return
    floor = record_revision(e.value)
    start = floor if untouched_through(e.value) == offset - 1 else max(offset - 1, floor)
    record = StoreRevision(start)
    delta.store_rev.put(record)
    effects.append(Effect(REVISION, REVISION_KEY, record.to_record()))


#: the ``count_revisions`` value's field (after the floor's, field 1) holding the last offset
#: up to which the store never changed keys nor compacted (field 3: an ``MvccCompaction``
#: reader of an older version skips it)
_UNTOUCHED_TAG = 0x18


def untouched_through(value: bytes) -> int:
    """The offset a ``count_revisions`` entry's value says the store changed no key up to
    (-1: it says nothing, as every entry written before)."""
    i, n = 0, len(value)
    while i < n:
        tag = value[i]
        i += 1
        got, shift = 0, 0
        while i < n:  # every field of the value is a varint
            byte = value[i]
            i += 1
            got |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if tag == _UNTOUCHED_TAG:
            return got
    return -1


def revision_of(offset: int, effects: Sequence[Effect]) -> int:
    """The revision of the changes of the request at ``offset``: its counter record's,
    first of its effects when the store counts, or its leading put's ``mod_revision`` (the
    counter's, or the offset's while the store counts by offset); else the offset."""
    if effects:
        first = effects[0]
        t = first.type
        if t == REVISION:
            return record_revision(first.value)
        if t == "kv" and not first.delete:
            return record_mod_revision(first.value)
    return offset


def counted_revision(counter: int, offset: int, effects: Sequence[Effect]) -> tuple[int, int]:
    """:func:`revision_of` for a reader that follows the count from ``counter`` (the store's
    counter before the request at ``offset``; -1: it counts by offset) instead of reading
    a leading put's record (the apply path's kv history: a put's ``mod_revision`` is the
    counter after it). ``(the request's revision, the counter after it)``."""
    if effects:
        first = effects[0]
        t = first.type
        if t == "kv" and not first.delete:
            if counter < 0:
                return offset, counter
            return counter + 1, counter + 1
        if t == REVISION:
            rev = record_revision(first.value)
            return rev, rev
    return offset, counter


def kv_replayed(delta: MetadataDelta, kv: KeyValue) -> None:
    """A key's new value replayed from the change log: in a store that counts, a put
    newer than the counter is at the request's revision, which its counter record (none
    when the put led the request's effects) would have said. A snapshot's keys, and the
    puts after a counter record, are never newer: nothing."""
    counter = counted(delta)
    if 0 <= counter < kv.mod_revision:
        delta.store_rev.count(kv.mod_revision)


def image_revision(sub: Any) -> int:
    """The ``revision`` kind's sub-image -> its counter (-1: none)."""
    return int(sub.revision)


#: the trailing metadata of ``Maintenance.Status`` and ``HashKV`` from a member whose store
#: counts etcd's way (switched): the corruption check compares only members that count alike
COUNTING_METADATA = ("x-ml-store-revisions", "etcd")
#: the trailing metadata of this version's ``Maintenance.Status``: the member applies
#: ``count_revisions`` (a member without it would reject the entry and count otherwise)
COUNTS_METADATA = ("x-ml-revisions", "etcd")
#: ... and reads the entry's floor (a member that switched by opt-in only would not, and
#: would count from 0 where the others count from 1)
FLOOR_METADATA = ("x-ml-revisions-floor", "1")
#: ... and starts from the floor when the entry says the store never changed keys (a
#: member without would start from the offset where the others start from 1)
START_METADATA = ("x-ml-revisions-start", "untouched")
#: the floor a leader proposes: an empty etcd store's revision
FLOOR = REVISION_FLOOR


def count_entry(untouched: int | None = None) -> Entry:
    """The ``count_revisions`` entry a leader proposes (with :data:`FLOOR`, and the last
    offset up to which it saw the store change no key, when it did)."""
    value = StoreRevision(FLOOR).to_record()
    if untouched is not None:
        value += bytes((_UNTOUCHED_TAG,)) + varint(untouched)
    return Entry(COUNT_REVISIONS, value=value)
