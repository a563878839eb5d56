"""A bbolt leaf page of plain values read into a dict in native code: the hot loop of reading
a large etcd snapshot (one element a key). Compiled by mypyc (scripts/mypyc_modules.txt);
the compiled build's ``_bolt._Reader`` tries it first on every leaf page and reads the page
itself, naming any fault, when it says no. The Python build does not call it (as Python it
is slower than ``_bolt``'s own loop).

:class:`LatestScan` is the seeding's one pass over etcd's ``key`` bucket: each leaf page's
records straight to each key's newest ``KvRecord`` bytes (:func:`._kvwire.kv_record_in`),
without the bucket's revision-to-record dict in between. Split over two processes (each
reads a run of the bucket's pages), :meth:`LatestScan.after` and :meth:`LatestScan.newer`
join the two runs' results into the one pass's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from snapshots.etcdfmt._kvwire import kv_key_first, kv_record_in

_HEADER: Final = 16  # bbolt's page header
_ELEMENT: Final = 16  # a leaf element: flags, pos, ksize, vsize (little-endian u32 each)


def _u32(raw: bytes, at: int) -> int:
    return raw[at] | raw[at + 1] << 8 | raw[at + 2] << 16 | raw[at + 3] << 24


def _leaf_keys(raw: bytes, count: int, last: bytes | None) -> list[bytes] | None:
    """The keys of the ``count`` elements of the leaf page ``raw`` if every one is a plain
    value (not a bucket) inside the page, with keys in increasing order after ``last``;
    else None."""
    size = len(raw)
    if _HEADER + _ELEMENT * count > size:
        return None
    keys: list[bytes] = []
    prev = last
    off = _HEADER
    for _ in range(count):
        if _u32(raw, off) & 1:  # a bucket
            return None
        kstart = off + _u32(raw, off + 4)
        kend = kstart + _u32(raw, off + 8)
        if kend + _u32(raw, off + 12) > size:
            return None
        key = raw[kstart:kend]
        if prev is not None and key <= prev:
            return None
        keys.append(key)
        prev = key
        off += _ELEMENT
    return keys


def plain_leaf(raw: bytes, count: int, last: bytes | None, out: dict[bytes, Any]) -> bool:
    """Add the ``count`` elements of the leaf page ``raw`` to ``out`` and return True if
    every one is a plain value (not a bucket) inside the page, with keys in increasing order
    after ``last``; else return False and leave ``out`` as it was."""
    keys = _leaf_keys(raw, count, last)
    if keys is None:
        return False
    off = _HEADER
    for key in keys:
        kend = off + _u32(raw, off + 4) + len(key)
        out[key] = raw[kend : kend + _u32(raw, off + 12)]
        off += _ELEMENT
    return True


class LatestScan:
    """The ``key`` bucket's leaf pages, in the bucket's (revision) order, reduced to each
    key's newest record as :func:`._kvwire.latest_kv_records` reduces the bucket's dict:
    ``latest`` {key: its ``KvRecord`` bytes, or None for a tombstone} in the order keys first
    appear, ``newest`` the newest revision's main part. A record :func:`._kvwire.kv_record`
    does not take goes to ``slow(revision bytes, record)`` as there."""

    def __init__(self, slow: Callable[[bytes, bytes], tuple[bytes, bytes | None, int]]) -> None:
        self.latest: dict[bytes, bytes | None] = {}
        self.newest = 0
        self.last: bytes | None = None  # the last revision read (they must increase)
        self.slow = slow

    def leaf(self, raw: bytes, count: int) -> bool:
        """Take the ``count`` elements of the leaf page ``raw`` and return True if every one
        is a plain value inside the page, with revisions in increasing order after the last
        page's; else return False having taken none (the caller reads the bucket as bbolt
        does, which names the fault). ``slow``'s errors pass through."""
        revs = _leaf_keys(raw, count, self.last)
        if revs is None:
            return False
        if revs:
            self.last = revs[-1]
        latest = self.latest
        newest = self.newest
        off = _HEADER
        for rev in revs:
            kstart = off + _u32(raw, off + 4)
            kend = kstart + len(rev)
            vend = kend + _u32(raw, off + 12)
            got = None
            main = 0
            if len(rev) == 17 and rev[8] == 0x5F:
                got = kv_record_in(raw, kend, vend)
                if got is not None:
                    for i in range(8):
                        main = main << 8 | rev[i]
                    latest[got[0]] = got[1]
            if got is None:
                key, value, main = self.slow(rev, raw[kend:vend])
                latest[key] = value
            if main > newest:
                newest = main
            off += _ELEMENT
        self.newest = newest
        return True

    def after(self, raw: bytes, count: int) -> bool:
        """Start after the leaf page ``raw`` (the page before this scan's first): its last
        revision is the one the next page's must follow. False if it is not a page of plain
        values in order."""
        revs = _leaf_keys(raw, count, None)
        if revs is None:
            return False
        if revs:
            self.last = revs[-1]
        return True

    def newer(self, raw: bytes, count: int, found: list[bytes]) -> None:
        """A later page of the bucket, read by another scan: each of its records whose key
        this scan holds replaces that key's record here (it is newer), so that a key keeps
        the place of its first record with its newest; those keys are appended to ``found``
        (the other scan drops them). The page is not checked here (its own scan checks it),
        and a record's key is its first field where that is one (the other scan checks that
        each record it does not map itself has no other: see :func:`first_key`); ``slow``'s
        errors pass through."""
        latest = self.latest
        off = _HEADER
        for _ in range(count):
            kstart = off + _u32(raw, off + 4)
            kend = kstart + _u32(raw, off + 8)
            vend = kend + _u32(raw, off + 12)
            key = kv_key_first(raw, kend, vend)
            if key is None or key in latest:
                rev = raw[kstart:kend]
                got = None
                if len(rev) == 17 and rev[8] == 0x5F:
                    got = kv_record_in(raw, kend, vend)
                    if got is not None:
                        latest[got[0]] = got[1]
                        found.append(got[0])
                if got is None:
                    key, value, _ = self.slow(rev, raw[kend:vend])
                    if key in latest:
                        latest[key] = value
                        found.append(key)
            off += _ELEMENT


def first_key(raw: bytes) -> bytes | None:
    """The key :meth:`LatestScan.newer` takes for the record ``raw`` without reading it
    whole (its first field, if that is a key), or None (then it reads it through ``slow``).
    A record that :class:`LatestScan` maps itself has no other key; the scan that reads one
    through ``slow`` checks that this is ``slow``'s key, or None."""
    return kv_key_first(raw, 0, len(raw))
