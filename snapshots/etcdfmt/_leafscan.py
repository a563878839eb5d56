"""A bbolt leaf page of plain values read into a dict in native code: the hot loop of reading
a large etcd snapshot (one element a key). Compiled by mypyc (scripts/mypyc_modules.txt);
the compiled build's ``_bolt._Reader`` tries it first on every leaf page and reads the page
itself, naming any fault, when it says no. The Python build does not call it (as Python it
is slower than ``_bolt``'s own loop).
"""

from __future__ import annotations

from typing import Any, Final

_HEADER: Final = 16  # bbolt's page header
_ELEMENT: Final = 16  # a leaf element: flags, pos, ksize, vsize (little-endian u32 each)


def _u32(raw: bytes, at: int) -> int:
    return raw[at] | raw[at + 1] << 8 | raw[at + 2] << 16 | raw[at + 3] << 24


def plain_leaf(raw: bytes, count: int, last: bytes | None, out: dict[bytes, Any]) -> bool:
    """Add the ``count`` elements of the leaf page ``raw`` to ``out`` and return True if
    every one is a plain value (not a bucket) inside the page, with keys in increasing order
    after ``last``; else return False and leave ``out`` as it was."""
    size = len(raw)
    if _HEADER + _ELEMENT * count > size:
        return False
    keys: list[bytes] = []
    prev = last
    off = _HEADER
    for _ in range(count):
        if _u32(raw, off) & 1:  # a bucket
            return False
        kstart = off + _u32(raw, off + 4)
        kend = kstart + _u32(raw, off + 8)
        if kend + _u32(raw, off + 12) > size:
            return False
        key = raw[kstart:kend]
        if prev is not None and key <= prev:
            return False
        keys.append(key)
        prev = key
        off += _ELEMENT
    off = _HEADER
    for key in keys:
        kend = off + _u32(raw, off + 4) + len(key)
        out[key] = raw[kend : kend + _u32(raw, off + 12)]
        off += _ELEMENT
    return True
