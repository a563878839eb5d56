"""An etcd ``mvccpb.KeyValue`` record's wire bytes turned into a metaledger ``KvRecord``'s,
by hand, without a message object: the hot step of seeding from an etcd snapshot (one call a
key). Compiled by mypyc (scripts/mypyc_modules.txt); the Python source is the reference.

The two messages carry the same six fields under other numbers::

    mvccpb.KeyValue  key 1, create_revision 2, mod_revision 3, version 4, value 5, lease 6
    KvRecord         key 1, value 2, create_revision 3, mod_revision 4, version 5, lease 6

so a record in the form etcd writes (fields in number order, each at most once, minimal
varints, no other fields) maps to a ``KvRecord`` by copying its spans under the new tags:
no varint is decoded. :func:`kv_record` returns exactly the bytes protobuf gives for
``KvRecord(**fields of KeyValue.FromString(raw)).SerializeToString()`` (a zero or empty field
left out), or None for any other form, which the caller parses with protobuf (whose errors
name a record that does not parse); tests/unit/snapshots/etcdfmt/test_kvwire.py compares the
two on generated and random bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

#: KvRecord's tags (field << 3 | wire type) for the value, create, mod and version
_VALUE: Final = b"\x12"
_CREATE: Final = b"\x18"
_MOD: Final = b"\x20"
_VERSION: Final = b"\x28"


def _varint_end(raw: bytes, pos: int, n: int) -> int:
    """Where the varint at ``pos`` ends if it is minimal and at most 10 bytes (a 10th byte
    may only carry bit 63, as an int64 does), else -1."""
    end = pos
    while end < n:
        b = raw[end]
        end += 1
        if b < 0x80:
            size = end - pos
            if size > 1 and b == 0:  # a padded varint: protobuf writes it shorter
                return -1
            if size == 10 and b != 1:
                return -1
            return end if size <= 10 else -1
    return -1


def _length(raw: bytes, pos: int, n: int) -> tuple[int, int]:
    """A length prefix at ``pos`` (minimal, under 2**28): (length, where it ends), or
    (-1, -1)."""
    value = 0
    shift = 0
    end = pos
    while end < n and end - pos < 4:
        b = raw[end]
        end += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if end - pos > 1 and b == 0:
                return -1, -1
            return value, end
    return -1, -1


def kv_record(raw: bytes) -> tuple[bytes, bytes] | None:
    """(key, the ``KvRecord`` bytes) of an ``mvccpb.KeyValue`` in the form etcd writes, or
    None (see the module doc). The key is never empty here (etcd's never is); a zero field
    written out (etcd leaves them out) is left to protobuf too."""
    return kv_record_in(raw, 0, len(raw))


def kv_key_first(raw: bytes, first: int, n: int) -> bytes | None:
    """The record ``raw[first:n]``'s first field if it is a key (field 1, 1 or more bytes
    inside the record), else None: the key :func:`kv_record_in` gives for a record it takes,
    without reading the rest (a record it does not take may have another key: protobuf's
    is the last field 1)."""
    if n - first < 3 or raw[first] != 0x0A:
        return None
    klen, pos = _length(raw, first + 1, n)
    if klen <= 0 or pos + klen > n:
        return None
    return raw[pos : pos + klen]


def kv_record_in(raw: bytes, first: int, n: int) -> tuple[bytes, bytes] | None:
    """:func:`kv_record` of the record ``raw[first:n]`` (no copy of it made first)."""
    pos, kend, c, c_end, m, m_end, v, v_end, value_at, value_end, lease_at = _spans(raw, first, n)
    if pos < 0:
        return None
    key = raw[pos:kend]
    if c > 0 and m > 0 and v > 0:  # the form of every live key etcd writes
        # the value's length and bytes (none: an empty slice; a start past the end is not
        # one in the compiled build)
        value_from = value_at + 1 if value_end > value_at else value_end
        return (
            key,
            b"".join(
                (
                    raw[first:kend],
                    _VALUE if value_end > value_at else b"",
                    raw[value_from:value_end],
                    _CREATE,
                    raw[c:c_end],
                    _MOD,
                    raw[m:m_end],
                    _VERSION,
                    raw[v:v_end],
                    raw[lease_at:n],
                )
            ),
        )
    out = [raw[first:kend]]
    if value_end > value_at:
        out += (_VALUE, raw[value_at + 1 : value_end])
    if c > 0:
        out += (_CREATE, raw[c:c_end])
    if m > 0:
        out += (_MOD, raw[m:m_end])
    if v > 0:
        out += (_VERSION, raw[v:v_end])
    out.append(raw[lease_at:n])
    return key, b"".join(out)


_Spans = tuple[int, int, int, int, int, int, int, int, int, int, int]
#: what :func:`_spans` gives for a record not in the form etcd writes (not None: a tuple of
#: ints that is never None stays unboxed in the compiled build, a C struct)
_NO_SPANS: Final[_Spans] = (-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1)


def _spans(raw: bytes, first: int, n: int) -> _Spans:
    """Where the fields of the record ``raw[first:n]`` in the form etcd writes are: the key
    (start, end), create, mod and version (each a varint's start, or -1, and the end), the
    value (its tag, or where it would be, and its end) and the lease's tag (or ``n``);
    ``_NO_SPANS`` (a key starting at -1) for any other form."""
    if n - first < 3 or raw[first] != 0x0A:
        return _NO_SPANS
    klen, pos = _length(raw, first + 1, n)
    if klen <= 0:
        return _NO_SPANS
    kend = pos + klen
    if kend > n:
        return _NO_SPANS
    # create, mod and version (tags 0x10, 0x18, 0x20): their varints, which kv_record_in
    # copies under KvRecord's tags (c, m, v: where each one's varint starts)
    pos = kend
    c = m = v = -1
    if pos < n and raw[pos] == 0x10:
        end = _varint_end(raw, pos + 1, n)
        if end < 0 or (end == pos + 2 and raw[pos + 1] == 0):
            return _NO_SPANS
        c = pos + 1
        pos = end
    c_end = pos
    if pos < n and raw[pos] == 0x18:
        end = _varint_end(raw, pos + 1, n)
        if end < 0 or (end == pos + 2 and raw[pos + 1] == 0):
            return _NO_SPANS
        m = pos + 1
        pos = end
    m_end = pos
    if pos < n and raw[pos] == 0x20:
        end = _varint_end(raw, pos + 1, n)
        if end < 0 or (end == pos + 2 and raw[pos + 1] == 0):
            return _NO_SPANS
        v = pos + 1
        pos = end
    v_end = pos
    value_at = pos
    if pos < n and raw[pos] == 0x2A:
        vlen, start = _length(raw, pos + 1, n)
        if vlen <= 0 or start + vlen > n:
            return _NO_SPANS
        pos = start + vlen
    value_end = pos
    lease_at = pos
    if pos < n and raw[pos] == 0x30:  # the lease: the same tag in both
        end = _varint_end(raw, pos + 1, n)
        if end < 0 or (end == pos + 2 and raw[pos + 1] == 0):
            return _NO_SPANS
        pos = end
    if pos != n:
        return _NO_SPANS
    return (kend - klen, kend, c, c_end, m, m_end, v, v_end, value_at, value_end, lease_at)


def latest_kv_records(
    records: dict[bytes, bytes],
    slow: Callable[[bytes, bytes], tuple[bytes, bytes | None, int]],
) -> tuple[dict[bytes, bytes | None], int]:
    """The ``key`` bucket's records (revision bytes to ``mvccpb.KeyValue``), in its order,
    reduced to each key's newest: {key: its ``KvRecord`` bytes, or None for a tombstone}, in
    the order keys first appear, and the newest revision's main part. A record with a plain
    revision (8-byte main, ``_``, 8-byte sub) in etcd's form is done here; any other goes to
    ``slow(revision bytes, record)``, which returns (key, KvRecord bytes or None, main) or
    raises naming the fault."""
    latest: dict[bytes, bytes | None] = {}
    newest = 0
    for raw_rev, raw in records.items():
        got = None
        main = 0
        if len(raw_rev) == 17 and raw_rev[8] == 0x5F:
            got = kv_record(raw)
            if got is not None:
                for i in range(8):
                    main = main << 8 | raw_rev[i]
                latest[got[0]] = got[1]
        if got is None:
            key, value, main = slow(raw_rev, raw)
            latest[key] = value
        if main > newest:
            newest = main
    return latest, newest
