"""The hand mapping of an etcd ``mvccpb.KeyValue`` to a ``KvRecord`` (snapshots.etcdfmt._kvwire)
against protobuf's: on records as etcd writes them it gives protobuf's bytes; on any other
bytes (random, cut, reordered, padded) it gives protobuf's bytes or None, never other bytes.
The compiled build's module is compared with its source (both sides are the source in the
plain build)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
from google.protobuf.message import DecodeError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.mypyc_bench import both
from protos.etcdserverpb.kv_pb2 import KeyValue
from protos.records_pb2 import KvRecord
from snapshots.etcdfmt import (
    EtcdImage,
    KeyRevision,
    Tree,
    _etcd,
    image_to_buckets,
    read_etcd_latest,
    read_etcd_latest_kv,
    revision_bytes,
    write_bolt,
)
from snapshots.etcdfmt._kvwire import kv_record

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
I64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1), st.integers(0, 300), st.sampled_from([0, 1, -1, 2**63 - 1])
)


def write_etcd_snapshot_from_tree(tree: Tree) -> bytes:
    db = write_bolt(tree)
    return db + hashlib.sha256(db).digest()


def by_protobuf(raw: bytes) -> tuple[bytes, bytes] | None:
    try:
        kv = KeyValue.FromString(raw)
    except DecodeError:
        return None
    fields = ("key", "value", "create_revision", "mod_revision", "version", "lease")
    record = KvRecord(**{f: getattr(kv, f) for f in fields})
    return kv.key, record.SerializeToString()


@SETTINGS
@given(
    key=st.binary(min_size=1, max_size=300),
    value=st.binary(max_size=300),
    create=I64,
    mod=I64,
    version=I64,
    lease=I64,
)
def test_records_as_etcd_writes_them_map_to_protobufs_bytes(
    key: bytes, value: bytes, create: int, mod: int, version: int, lease: int
) -> None:
    raw = KeyValue(
        key=key, value=value, create_revision=create, mod_revision=mod, version=version, lease=lease
    ).SerializeToString()
    assert kv_record(raw) == by_protobuf(raw)


@SETTINGS
@given(
    key=st.binary(min_size=1, max_size=20),
    value=st.binary(max_size=20),
    ints=st.lists(I64, min_size=4, max_size=4),
    cut=st.integers(0, 80),
    flip=st.tuples(st.integers(0, 80), st.integers(0, 255)),
    noise=st.binary(max_size=60),
)
def test_other_bytes_give_protobufs_bytes_or_none(
    key: bytes, value: bytes, ints: list[int], cut: int, flip: tuple[int, int], noise: bytes
) -> None:
    raw = KeyValue(
        key=key,
        value=value,
        create_revision=ints[0],
        mod_revision=ints[1],
        version=ints[2],
        lease=ints[3],
    ).SerializeToString()
    at, byte = flip
    flipped = raw[:at] + bytes([byte]) + raw[at + 1 :] if at < len(raw) else raw
    padded = raw.replace(b"\x18", b"\x18\x80\x00", 1)  # not minimal (or not a tag at all)
    explicit_zero = b"\x0a\x01k\x10\x00\x2a\x00\x30\x00"
    for candidate in (raw[:cut], flipped, noise, raw + noise, padded, explicit_zero):
        got = kv_record(candidate)
        assert got is None or got == by_protobuf(candidate), candidate


def test_the_compiled_module_agrees_with_its_source() -> None:
    compiled, source = both("snapshots.etcdfmt._kvwire")
    raws = [
        KeyValue(
            key=b"k%d" % i, value=b"v" * i, create_revision=i, mod_revision=i * 7, lease=-i
        ).SerializeToString()
        for i in range(1, 200)
    ] + [b"", b"\x0a", b"\x0a\x01", b"\x0a\x01k\x10", b"\x0a\x01k\x10\x80\x00"]
    for raw in raws:
        assert compiled.kv_record(raw) == source.kv_record(raw)

    def slow(raw_rev: bytes, raw: bytes) -> tuple[bytes, bytes | None, int]:
        got = by_protobuf(raw)
        if got is None:
            raise ValueError(f"bad record at {raw_rev!r}")
        return (
            got[0],
            (None if raw_rev.endswith(b"t") else got[1]),
            int.from_bytes(raw_rev[:8], "big"),
        )

    revs = [i.to_bytes(8, "big") + b"_" + (0).to_bytes(8, "big") for i in range(len(raws))]
    records = dict(zip(revs[:199], raws[:199], strict=True))
    records[b"\x05" * 8 + b"_" + b"\x00" * 8 + b"t"] = raws[3]  # a tombstone: the slow path
    results: list[Any] = []
    for module in (compiled, source):
        results.append(module.latest_kv_records(records, slow))
    assert results[0] == results[1]
    latest, newest = results[0]
    assert latest[b"k4"] is None and latest[b"k5"] == by_protobuf(raws[4])[1]  # type: ignore[index]
    assert newest == 0x0505050505050505
    bad = {revs[0]: b"\x0a\x01k\x10\x80\x00" + b"\xff"}
    errors = []
    for module in (compiled, source):
        try:
            module.latest_kv_records(bad, slow)
        except ValueError as e:
            errors.append(str(e))
    assert len(errors) == 2 and errors[0] == errors[1]


@pytest.mark.parametrize(("by_hand", "scan"), [(True, True), (True, False), (False, False)])
def test_seeding_reads_the_same_records_by_hand_or_through_protobuf(
    by_hand: bool, scan: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """read_etcd_latest_kv (the compiled build maps by hand; the Python build, or forced
    here, through protobuf) against read_etcd_latest with the same encoder: tombstones,
    rewritten keys, a zero field written out and a record in another field order."""
    from nameserver.etcd_seed_records import kv_record_encoder

    keys = [
        KeyRevision(2, 0, b"a", b"1", 2, 2, 1),
        KeyRevision(3, 0, b"b", b"", 3, 3, 1, 7),
        KeyRevision(4, 0, b"a", b"2", 2, 4, 2),
        KeyRevision(5, 0, b"b", tombstone=True),
        KeyRevision(6, 0, b"c", b"x" * 300, 6, 6, 1, -5),
    ]
    tree = image_to_buckets(EtcdImage(keys=tuple(keys), consistent_index=6))
    odd = b"\x2a\x01v\x0a\x01d\x10\x07\x18\x07\x20\x00"  # value first, a zero version
    tree[b"key"][revision_bytes(7, 0)] = odd  # type: ignore[index]
    data = write_etcd_snapshot_from_tree(tree)
    monkeypatch.setattr(_etcd, "KVWIRE_COMPILED", by_hand)
    monkeypatch.setattr(_etcd, "LATEST_SCAN", scan)  # the key bucket's pages in one pass
    got = read_etcd_latest_kv(data, kv_record_encoder())
    want = read_etcd_latest(data, kv_record_encoder())
    assert got == want
    assert got[1][b"b"] is None and got[1][b"d"] == by_protobuf(odd)[1]  # type: ignore[index]
    assert got[2] == 7
