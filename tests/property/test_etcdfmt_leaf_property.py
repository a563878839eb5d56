"""The bbolt reader's leaf loop (unpacking the element table at once) and the ``key`` bucket's
record loop against the loops they replaced: on any input, the same result or the same error."""

from __future__ import annotations

import struct
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protos.etcdserverpb import kv_pb2
from snapshots.etcdfmt import EtcdFormatError, KeyRevision, Tree
from snapshots.etcdfmt._bolt import (
    BUCKET_LEAF_FLAG,
    ELEMENT_BYTES,
    HEADER_BYTES,
    BoltFormatError,
    _Reader,
)
from snapshots.etcdfmt._etcd import (
    _key_records,
    _latest_key_values,
    _parse_revision,
    _plain,
    _proto,
    revision_bytes,
)

_LEAF_ELEMENT = struct.Struct("<IIII")


def _reference_leaf(page: bytes, count: int, where: int, out: Tree) -> None:
    """The loop as it was (nested buckets left out: the pages here hold none)."""
    last = next(reversed(out), None) if out else None
    for i in range(count):
        off = HEADER_BYTES + ELEMENT_BYTES * i
        if off + ELEMENT_BYTES > len(page):
            raise BoltFormatError(f"leaf element {i} past the page end", where)
        flags, pos, ksize, vsize = _LEAF_ELEMENT.unpack_from(page, off)
        kstart = off + pos
        if kstart + ksize + vsize > len(page):
            raise BoltFormatError(f"leaf element {i}'s key and value run past the page end", where)
        key = bytes(page[kstart : kstart + ksize])
        value = bytes(page[kstart + ksize : kstart + ksize + vsize])
        if last is not None and key <= last:
            raise BoltFormatError(f"leaf element {i}: keys out of order", where)
        last = key
        assert not flags & BUCKET_LEAF_FLAG
        out[key] = value


def _outcome(leaf: object, page: bytes, count: int, start: Tree) -> tuple[object, Tree]:
    out = dict(start)
    try:
        leaf(memoryview(page), count, 7, out)  # type: ignore[operator]
    except BoltFormatError as e:
        return str(e), out
    return None, out


@st.composite
def _pages(draw: st.DrawFn) -> tuple[bytes, int]:
    """A leaf page of sorted (sometimes shuffled or oversized) elements, maybe cut short."""
    keys = sorted(draw(st.sets(st.binary(min_size=0, max_size=6), max_size=8)))
    if draw(st.booleans()):
        keys = draw(st.permutations(keys))
    values = [draw(st.binary(max_size=8)) for _ in keys]
    n = len(keys)
    table = bytearray()
    data = bytearray()
    for i, (k, v) in enumerate(zip(keys, values, strict=True)):
        pos = ELEMENT_BYTES * (n - i) + len(data)
        vsize = len(v) + draw(st.sampled_from([0, 0, 0, 5, 1000]))
        table += _LEAF_ELEMENT.pack(0, pos, len(k), vsize)
        data += k + v
    page = bytes(HEADER_BYTES) + bytes(table) + bytes(data)
    page = page[: draw(st.integers(0, len(page)))] if draw(st.booleans()) else page
    return page, n + draw(st.sampled_from([0, 0, 1, 3]))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_pages(), st.sampled_from([{}, {b"": b"x"}, {b"\x80": b"y"}]))
def test_leaf_reads_as_the_element_at_a_time_loop(
    page_count: tuple[bytes, int], start: Tree
) -> None:
    page, count = page_count
    if len(page) < HEADER_BYTES:
        page = page.ljust(HEADER_BYTES, b"\0")
    reader = _Reader(page, 4096, 1)
    assert _outcome(reader._leaf, page, count, start) == _outcome(
        _reference_leaf, page, count, start
    )


def _reference_key_records(tree: Tree) -> list[KeyRevision]:
    """``buckets_to_image``'s key loop as it was."""
    keys = []
    for raw_rev, raw in _plain(tree, b"key").items():
        main, sub, tombstone = _parse_revision(raw_rev)
        kv = _proto(kv_pb2.KeyValue, raw, b"key", raw_rev)
        keys.append(
            KeyRevision(
                main,
                sub,
                kv.key,
                kv.value,
                kv.create_revision,
                kv.mod_revision,
                kv.version,
                kv.lease,
                tombstone,
            )
        )
    return keys


_good_value = st.builds(
    lambda k, v, c, m, ver, le: kv_pb2.KeyValue(
        key=k, value=v, create_revision=c, mod_revision=m, version=ver, lease=le
    ).SerializeToString(),
    st.binary(max_size=5),
    st.binary(max_size=5),
    *[st.integers(-(2**63), 2**63 - 1)] * 4,
)
_rev = st.builds(
    revision_bytes, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.booleans()
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.one_of(_rev, _rev, _rev, st.binary(max_size=19)),
        st.one_of(_good_value, _good_value, st.binary(max_size=6), st.just({})),
        max_size=6,
    )
)
def test_key_records_read_as_the_record_at_a_time_loop(bucket: Tree) -> None:
    def outcome(f: Callable[[Tree], object]) -> object:
        try:
            return f({b"key": bucket})
        except EtcdFormatError as e:
            return str(e)

    assert outcome(lambda t: _key_records(t[b"key"])) == outcome(_reference_key_records)

    def latest(records: list[KeyRevision]) -> tuple[list[tuple[bytes, bytes | None]], int]:
        newest: dict[bytes, KeyRevision] = {}
        for r in records:  # the bucket's order here: as a bbolt file keeps it, by revision
            newest[r.key] = r
        return [(k, None if r.tombstone else r.value) for k, r in newest.items()], max(
            (r.main for r in records), default=0
        )

    def seeded(t: Tree) -> tuple[list[tuple[bytes, bytes | None]], int]:
        values, main = _latest_key_values(t[b"key"], lambda kv: kv.value)
        return list(values.items()), main

    assert outcome(seeded) == outcome(lambda t: latest(_reference_key_records(t)))
