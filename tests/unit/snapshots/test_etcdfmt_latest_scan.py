"""Seeding's one pass over etcd's ``key`` bucket (snapshots.etcdfmt._leafscan.LatestScan: each
leaf page's records straight to each key's newest KvRecord bytes) against the two passes it
replaces (the bucket read into a dict, then reduced by _kvwire.latest_kv_records): the same
records, newest revision and image, or the same error, on files made here and on the same
files with bytes flipped or cut. The compiled module is compared with its source (both sides
are the source in the plain build)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.mypyc_bench import both
from nameserver.etcd_seed_records import kv_record_encoder
from snapshots.etcdfmt import (
    EtcdFormatError,
    EtcdImage,
    KeyRevision,
    Lease,
    _bolt,
    _etcd,
    image_to_buckets,
    read_etcd_latest_kv,
    revision_bytes,
    write_bolt,
    write_etcd_snapshot,
)

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def outcome(data: bytes, scan: bool, mp: pytest.MonkeyPatch) -> Any:
    mp.setattr(_etcd, "KVWIRE_COMPILED", True)  # the hand mapping, in either build
    mp.setattr(_etcd, "LATEST_SCAN", scan)
    try:
        image, latest, newest = read_etcd_latest_kv(data, kv_record_encoder())
    except EtcdFormatError as e:
        return ("error", type(e).__name__, str(e))
    return ("ok", image, list(latest.items()), newest)


@st.composite
def key_records(draw: st.DrawFn) -> list[KeyRevision]:
    names = draw(st.lists(st.binary(min_size=1, max_size=12), min_size=1, max_size=8))
    out = []
    main = 2
    for _ in range(draw(st.integers(0, 400))):
        key = draw(st.sampled_from(names))
        if draw(st.integers(0, 9)) == 0:
            out.append(KeyRevision(main, 0, key, tombstone=True))
        else:
            value = draw(st.binary(max_size=draw(st.sampled_from([0, 40, 3000]))))
            lease = draw(st.sampled_from([0, 0, 7, -3]))
            out.append(KeyRevision(main, 0, key, value, 2, main, 1, lease))
        main += draw(st.integers(1, 3))
    return out


@SETTINGS
@given(
    keys=key_records(),
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 255)), max_size=3),
    cut=st.integers(0, 1 << 20),
)
def test_the_one_pass_reads_as_the_two(
    keys: list[KeyRevision], flips: list[tuple[int, int]], cut: int
) -> None:
    image = EtcdImage(keys=tuple(keys), consistent_index=5, leases=(Lease(7, 60),))
    data = write_etcd_snapshot(image)
    db = data[:-32]
    damaged = bytearray(db)
    for at, byte in flips:
        damaged[8192 + at % max(1, len(db) - 8192)] = byte  # past the meta pages
    candidates = [data, bytes(damaged), db[: max(8192, cut % (len(db) + 1))]]
    with pytest.MonkeyPatch.context() as mp:
        for candidate in candidates:
            assert outcome(candidate, True, mp) == outcome(candidate, False, mp)
        assert outcome(data, True, mp)[0] == "ok"
    slow = lambda raw_rev, raw: pytest.fail("no record of the form etcd writes goes slow")  # noqa: E731
    mapped = [r for r in keys if not r.tombstone]
    if len(mapped) == len(keys):  # read in the one pass, not again
        _, latest, _ = _etcd._read_latest_scanned(data, slow)
        assert len(latest) == len({r.key for r in keys})


def test_odd_buckets_and_records_read_as_the_two_passes_read_them() -> None:
    """A record in another form and a tombstone (the slow path), a nested bucket in the key
    bucket, a record that does not parse, revisions out of order: the same answer."""
    tree = image_to_buckets(
        EtcdImage(
            keys=tuple(KeyRevision(i + 2, 0, b"k%d" % i, b"v", 2, i + 2, 1) for i in range(300))
        )
    )
    key = tree[b"key"]
    assert isinstance(key, dict)
    variants = []
    odd = dict(key)
    odd[revision_bytes(900, 0)] = b"\x2a\x01v\x0a\x01d\x10\x07\x18\x07\x20\x00"  # value first
    odd[revision_bytes(901, 0, tombstone=True)] = key[revision_bytes(2, 0)]
    variants.append(odd)
    variants.append({**key, revision_bytes(902, 0): {b"nested": b"bucket"}})
    variants.append({**key, revision_bytes(903, 0): b"\xff\xff"})
    variants.append({**key, b"short": b"\x0a\x01k"})
    with pytest.MonkeyPatch.context() as mp:
        for bucket in variants:
            data = write_bolt({**tree, b"key": bucket})
            assert outcome(data, True, mp) == outcome(data, False, mp)


def test_the_compiled_scan_agrees_with_its_source() -> None:
    compiled, source = both("snapshots.etcdfmt._leafscan")
    keys = [
        KeyRevision(i + 2, 0, b"k%d" % (i % 700), b"v" * (i % 90), 2, i + 2, 1) for i in range(3000)
    ]
    keys.append(KeyRevision(4000, 0, b"k5", tombstone=True))
    db = write_bolt(image_to_buckets(EtcdImage(keys=tuple(keys))))

    def slow(raw_rev: bytes, raw: bytes) -> tuple[bytes, bytes | None, int]:
        return raw[2 : 2 + raw[1]], None, int.from_bytes(raw_rev[:8], "big")

    got = []
    for module in (compiled, source):
        scan = module.LatestScan(slow)
        _bolt.read_bolt(db, scan.leaf)
        got.append((list(scan.latest.items()), scan.newest, scan.last))
    assert got[0] == got[1]
    assert got[0][1] == 4000 and dict(got[0][0])[b"k5"] is None
    page = db[2 * 4096 : 3 * 4096]
    for module in (compiled, source):  # a refused page is taken by neither
        scan = module.LatestScan(slow)
        assert not scan.leaf(page, 10**6)
        assert (scan.latest, scan.newest, scan.last) == ({}, 0, None)


def test_the_compiled_run_joins_agree_with_their_source() -> None:
    """LatestScan.after and .newer (a seeding in two processes: each a run of the pages) and
    first_key, compiled against their source: a first run that takes the second run's newer
    records of its keys, and the keys it took."""
    compiled, source = both("snapshots.etcdfmt._leafscan")
    keys = [
        KeyRevision(i + 2, 0, b"k%d" % (i % 700), b"v" * (i % 90), 2, i + 2, 1) for i in range(3000)
    ]
    keys.append(KeyRevision(4000, 0, b"k5", tombstone=True))
    db = write_bolt(image_to_buckets(EtcdImage(keys=tuple(keys))))
    pages: list[tuple[memoryview, int]] = []
    _bolt.read_bolt(db, key_pages=pages)
    mid = len(pages) // 2

    def slow(raw_rev: bytes, raw: bytes) -> tuple[bytes, bytes | None, int]:
        return raw[2 : 2 + raw[1]], None, int.from_bytes(raw_rev[:8], "big")

    got = []
    for module in (compiled, source):
        first, second = module.LatestScan(slow), module.LatestScan(slow)
        found: list[bytes] = []
        for page, count in pages[:mid]:
            assert first.leaf(page.tobytes(), count)
        for page, count in pages[mid:]:
            first.newer(page.tobytes(), count, found)
        assert second.after(pages[mid - 1][0].tobytes(), pages[mid - 1][1])
        assert second.last == first.last  # the first run's last revision
        raw = pages[0][0].tobytes()
        got.append((list(first.latest.items()), found, module.first_key(raw[16 + 40 :])))
    assert got[0] == got[1]
    assert dict(got[0][0])[b"k5"] is None and b"k5" in got[0][1]  # deleted in the second run
    whole = compiled.LatestScan(slow)
    for page, count in pages:
        whole.leaf(page.tobytes(), count)
    assert dict(got[0][0]) == {k: v for k, v in whole.latest.items() if k in dict(got[0][0])}
