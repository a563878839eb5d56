"""The mypyc build agrees with its Python source (issue 31).

For every module in ``scripts/mypyc_modules.txt`` the test loads the ``.py`` file a second
time under another name (:func:`pure`), beside whatever ``import`` gives (the ``.so`` in the
compiled build, the same source otherwise), and feeds both the same generated inputs: Raft core
runs (a simulated cluster with drops and a partition), peer messages, WAL records and their
scan, log entries and consensus items, remoting frames and stored-message records, RDB files
(the source parser runs on the sources of its readers, encodings and events:
``bench.mypyc_bench.source_family``); the broker's modules in
:mod:`tests.unit.test_mypyc_agreement_broker`, the headers' machinery in
:mod:`tests.unit.test_mypyc_agreement_headers`. Outputs and errors (type and text) must be equal. In the
plain build both sides are the source, so the test only proves itself; ``scripts/test.sh
--mypyc`` runs it (and the rest) against the compiled build, where ``METALEDGER_MYPYC_EXPECT=1``
also checks that every listed module did import compiled.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.mypyc_bench import both
from bench.mypyc_bench import source_module as pure
from raftlog import Entry
from tests.unit.raftlog.native import test_core as sim_module

ROOT = Path(__file__).resolve().parents[2]
LISTED = [
    line.split("#", 1)[0].strip()
    for line in (ROOT / "scripts" / "mypyc_modules.txt").read_text().splitlines()
]
MODULES = [src[: -len(".py")].replace("/", ".") for src in LISTED if src]

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def plain(value: Any) -> Any:
    """A value with its classes' identity taken out (the two builds' classes differ)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            *(plain(getattr(value, f.name)) for f in dataclasses.fields(value)),
        )
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return (type(value).__name__, *(plain(v) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(plain(v) for v in value)
    if isinstance(value, dict):
        return {plain(k): plain(v) for k, v in value.items()}
    if isinstance(value, memoryview):
        return bytes(value)
    return value


def outcome(f: Callable[..., Any], *args: Any) -> Any:
    try:
        return ("ok", plain(f(*args)))
    except Exception as e:  # the same error, by name and text
        return ("error", type(e).__name__, str(e))


def agree(name: str, fn: str, *args: Any) -> Any:
    compiled, source = both(name)
    got = outcome(getattr(compiled, fn), *args)
    assert got == outcome(getattr(source, fn), *args), (name, fn)
    return got


def test_every_listed_module_exists_and_imports_compiled_when_expected() -> None:
    assert MODULES, "scripts/mypyc_modules.txt lists no module"
    for name in MODULES:
        assert (ROOT / (name.replace(".", "/") + ".py")).is_file(), name
        origin = importlib.import_module(name).__file__ or ""
        if os.environ.get("METALEDGER_MYPYC_EXPECT") == "1":
            assert origin.endswith(".so"), f"{name} did not import compiled: {origin}"


def test_each_module_knows_its_own_file_whatever_imports_it_first() -> None:
    """A compiled module one compiled module imports from another gets its ``__file__`` from
    mypyc, not from the import system: in a fresh interpreter, importing the listed modules
    last-first (so most arrive that way) leaves each ``__file__`` naming its own file."""
    script = (
        "import importlib, json, sys\n"
        "names = json.loads(sys.argv[1])\n"
        "for n in reversed(names): importlib.import_module(n)\n"
        "print(json.dumps({n: sys.modules[n].__file__ for n in names}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, json.dumps(MODULES)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    for name, file in json.loads(out).items():
        path = Path(file)
        assert path.is_file(), (name, file)
        stem = name.replace(".", "/")
        assert str(path).startswith(str(ROOT / stem) + "."), (name, file)


# ---------------------------------------------------------------- Raft messages and core
ints = st.integers(0, 2**64 - 1)
log_entries = st.lists(
    st.tuples(ints, ints, st.integers(0, 255), st.binary(max_size=40)), max_size=4
)
messages = st.tuples(
    st.integers(1, 12),
    ints,
    ints,
    ints,
    ints,
    ints,
    ints,
    st.booleans(),
    st.booleans(),
    st.integers(0, 2),
    st.binary(max_size=40),
    log_entries,
)


@SETTINGS
@given(fields=messages, garbage=st.binary(max_size=120), cut=st.integers(0, 200))
def test_peer_messages(fields: tuple[Any, ...], garbage: bytes, cut: int) -> None:
    *head, entries = fields
    wires = []
    for m in both("raftlog.native.messages"):
        msg = m.Message(*head, entries=[m.LogEntry(*e) for e in entries])
        wires.append(m.encode_message(msg))
    assert wires[0] == wires[1]
    for data in (wires[0], wires[0][:cut], garbage, wires[0][:cut] + garbage):
        agree("raftlog.native.messages", "decode_message", data)
    agree("raftlog.native.messages", "decode_voters", garbage)
    agree("raftlog.native.messages", "encode_voters", [garbage.hex(), "a:1"])


def _raft_trace(
    core_module: ModuleType, seed: int, proposals: list[bytes], drop: float
) -> list[Any]:
    """A 3-node cluster of ``core_module``'s RaftCore (tests.unit...test_core's simulation):
    every message sent, on the wire, and every node's applied entries."""
    trace: list[Any] = []

    class Traced(sim_module.Sim):
        def _out(self, src: str, box: list[Any]) -> None:
            trace.extend((src, to, sim_module.encode_message(m)) for to, m in box)
            super()._out(src, box)

    saved = sim_module.RaftCore
    sim_module.RaftCore = core_module.RaftCore
    try:
        sim = Traced(["a", "b", "c"], seed=seed)
        sim.drop_rate = drop
        rng = random.Random(seed)
        for data in proposals:
            sim.run(rng.choice([0.05, 0.3, 1.5]))
            if sim.leader() is not None:
                sim.propose(data)
            if rng.random() < 0.2:
                sim.isolate(rng.choice(["a", "b", "c"]))
            elif rng.random() < 0.5:
                sim.heal()
        sim.heal()
        sim.run(3.0)
        trace.append(sorted(sim.applied.items()))
        trace.append([(n, c.term, c.commit, c.role.value) for n, c in sorted(sim.cores.items())])
    finally:
        sim_module.RaftCore = saved
    return trace


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 10_000),
    proposals=st.lists(st.binary(max_size=30), min_size=1, max_size=5),
    drop=st.sampled_from([0.0, 0.1]),
)
def test_raft_core_runs(seed: int, proposals: list[bytes], drop: float) -> None:
    compiled, source = both("raftlog.native.core")
    assert _raft_trace(compiled, seed, proposals, drop) == _raft_trace(
        source, seed, proposals, drop
    )


# ---------------------------------------------------------------- WAL records
@SETTINGS
@given(
    entries=log_entries,
    term=ints,
    vote=st.text(max_size=20),
    index=ints,
    flip=st.integers(0, 10_000),
    xor=st.integers(1, 255),
    garbage=st.binary(max_size=60),
)
def test_wal_records_and_their_scan(
    entries: list[Any], term: int, vote: str, index: int, flip: int, xor: int, garbage: bytes
) -> None:
    records = [
        agree("raftlog.native.wal", "hard_record", term, vote),
        agree("raftlog.native.wal", "truncate_record", index),
        agree("raftlog.native.wal", "commit_record", index),
    ]
    for e in entries:
        wal, src = both("raftlog.native.wal")
        got = wal.entry_record(wal.LogEntry(*e))
        assert got == src.entry_record(src.LogEntry(*e))
        records.append(("ok", got))
    data = bytearray(b"".join(r[1] for r in records))
    data[flip % len(data)] ^= xor
    for buf in (bytes(data), bytes(data) + garbage, garbage):
        for pos in (0, 8, flip % len(data)):
            agree("raftlog.native.wal", "_bad_record", buf, pos)
            agree("raftlog.native.wal", "_valid_record_at", buf, pos)
            agree("raftlog.native.wal", "_next_valid_record", buf, pos)


# ---------------------------------------------------------------- log entries and items
i63 = st.integers(0, 2**63 - 1)  # the protobuf fields are int64
entry_fields = st.tuples(
    st.text(max_size=8),
    st.binary(max_size=24),
    st.binary(max_size=40),
    i63,
    i63,
    i63,
    st.text(max_size=8),
    i63,
)


@SETTINGS
@given(
    requests=st.lists(st.lists(entry_fields, min_size=1, max_size=3), min_size=1, max_size=4),
    client=st.text(max_size=10),
    seq=i63,
    ts=i63,
    first=i63,
    term=i63,
    garbage=st.binary(max_size=60),
)
def test_entries_and_consensus_items(
    requests: list[list[Any]], client: str, seq: int, ts: int, first: int, term: int, garbage: bytes
) -> None:
    name = "raftlog.entry"
    compiled, source = both(name)
    items = []
    for m in (compiled, source):
        encoded = [m.encode_request([m.Entry(*f) for f in r], client, seq, ts) for r in requests]
        assert [m.encode_batch([m.Entry(*f) for f in r]) for r in requests]
        items.append(m.encode_item(encoded))
    assert items[0] == items[1]
    stamped = compiled.stamp_item(items[0], ts)
    assert stamped == source.stamp_item(items[0], ts)
    for data in (items[0], stamped, garbage, items[0][:-1]):
        agree(name, "decode_item", data, first, term)
        agree(name, "item_count", data)
        agree(name, "decode_batch", data[4:], first, term)
    agree(name, "varint", seq)
    agree(name, "length_delimited", 7, garbage)
    effects = [
        m.Effect(requests[0][0][0], garbage, b"v", bool(seq & 1)) for m in (compiled, source)
    ]
    payloads = [e.encode(term, ts, len(requests)) for e in effects]
    assert payloads[0] == payloads[1]
    assert plain(compiled.Effect.decode(payloads[0])) == plain(source.Effect.decode(payloads[0]))


# ---------------------------------------------------------------- remoting frames
@SETTINGS
@given(
    code=st.integers(-(2**31), 2**31 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(0, 3),
    remark=st.none() | st.text(max_size=20),
    ext=st.dictionaries(st.text(max_size=8), st.text(max_size=12), max_size=4),
    body=st.binary(max_size=60),
    cuts=st.lists(st.integers(0, 400), max_size=4),
    garbage=st.binary(max_size=80),
)
def test_remoting_frames(
    code: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext: dict[str, str],
    body: bytes,
    cuts: list[int],
    garbage: bytes,
) -> None:
    compiled, source = both("rmq.codec")
    frames = [
        m.encode(
            m.RemotingCommand(
                code, opaque=opaque, flag=flag, remark=remark, ext_fields=ext, body=body
            )
        )
        for m in (compiled, source)
    ]
    assert frames[0] == frames[1]
    stream = frames[0] * 2 + garbage
    results = []
    for m in (compiled, source):
        decoder = m.FrameDecoder(max_frame_bytes=1024)

        def feed(decoder: Any = decoder) -> list[Any]:
            got, at = [], 0
            for cut in [*sorted(c % (len(stream) + 1) for c in cuts), len(stream)]:
                got += decoder.feed(stream[at:cut])
                at = max(at, cut)
            return got

        results.append(outcome(feed))
    assert results[0] == results[1]
    for data in (frames[0][4:], garbage):
        agree("rmq.codec", "decode_frame", data)


# ---------------------------------------------------------------- stored-message records
@SETTINGS
@given(
    topic=st.text(max_size=20),
    body=st.binary(max_size=200),
    queue_id=st.integers(0, 2**31 - 1),
    offsets=st.tuples(ints, ints).map(lambda t: (t[0] >> 1, t[1] >> 1)),
    props=st.dictionaries(
        st.text("abcKEYS_", min_size=1, max_size=6), st.text("xyz01", max_size=8), max_size=3
    ),
    sysflag=st.sampled_from([0, 0, 1, 4]),
    flip=st.integers(0, 10_000),
    garbage=st.binary(max_size=60),
)
def test_stored_message_records(
    topic: str,
    body: bytes,
    queue_id: int,
    offsets: tuple[int, int],
    props: dict[str, str],
    sysflag: int,
    flip: int,
    garbage: bytes,
) -> None:
    name = "rmq.message"
    compiled, source = both(name)
    records = [
        outcome(
            m.encode,
            m.StoredMessage(
                topic,
                body,
                queue_id=queue_id,
                queue_offset=offsets[0],
                physical_offset=offsets[1],
                sysflag=sysflag,
                properties=props,
            ),
        )
        for m in (compiled, source)
    ]
    assert records[0] == records[1]
    if records[0][0] != "ok":
        return
    record = records[0][1]
    bad = bytearray(record)
    bad[flip % len(bad)] ^= 0x5A
    for data in (record, bytes(bad), garbage, record[:-3]):
        agree(name, "decode", data)
        agree(name, "decode", data, False, True)
        agree(name, "dispatch_info", data)
        agree(name, "peek_total", data)
    agree(name, "at_physical_offset", record, offsets[0])
    agree(name, "decode_properties", garbage)
    agree(name, "encode_properties", props)


@SETTINGS
@given(
    items=st.lists(
        st.tuples(
            st.integers(-(2**31), 2**31 - 1),
            st.binary(max_size=40),
            st.dictionaries(
                st.text("abcKEYS_é", min_size=1, max_size=6), st.text("xyz01", max_size=8)
            ),
        ),
        max_size=6,
    ),
    flip=st.integers(0, 10_000),
    cut=st.integers(0, 10_000),
    garbage=st.binary(max_size=60),
)
def test_batch_bodies(
    items: list[tuple[int, bytes, dict[str, str]]], flip: int, cut: int, garbage: bytes
) -> None:
    name = "rmq.batch"
    compiled, source = both(name)
    raw = [(flag, body, source.encode_properties(props)) for flag, body, props in items]
    body = agree(name, "encode_batch_raw", raw)[1]
    assert outcome(compiled.encode_batch, [compiled.BatchItem(*it) for it in items]) == outcome(
        source.encode_batch, [source.BatchItem(*it) for it in items]
    )
    assert agree(name, "decode_batch", body)[0] == ("ok" if items else "error")
    bad = bytearray(body or b"\0")
    bad[flip % len(bad)] ^= 0x5A
    for data in (body, bytes(bad), body[: cut % (len(body) + 1)], garbage, b"\xff" * 40):
        agree(name, "decode_batch", data)
    for _flag, _body, props in raw:
        agree(name, "fits_batch", props)


@SETTINGS
@given(st.text(max_size=3000), st.integers(0, 3000))
def test_bounded_remarks(text: str, pad: int) -> None:
    agree("rmq.codec", "bounded_remark", text)
    agree("rmq.codec", "bounded_remark", text + "é" * pad)


@pytest.mark.parametrize("name", MODULES)
def test_the_source_loads_as_a_second_module(name: str) -> None:
    assert pure(name).__file__ != importlib.import_module(
        name
    ).__file__ or not importlib.import_module(name).__file__.endswith(".so")


# ---------------------------------------------------------------- kv apply
keys = st.sampled_from([b"a", b"b", b"c", b"d"])
kv_ops = st.one_of(
    st.tuples(st.just("put"), keys, st.binary(max_size=8), st.booleans()),
    st.tuples(st.just("delete"), keys, st.sampled_from([b"", b"c", b"\x00"]), st.booleans()),
    st.tuples(st.just("txn"), keys, st.binary(max_size=8), st.integers(0, 6)),
)


def _kv_entry(op: tuple[Any, ...]) -> tuple[str, Entry]:
    from protos import records_pb2
    from protos.etcdserverpb import rpc_pb2

    what, key, arg, flag = op
    if what == "put":
        kv_op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=arg, prev_kv=flag))
        return "kv", Entry("kv", b"", kv_op.SerializeToString())
    if what == "delete":
        req = rpc_pb2.DeleteRangeRequest(key=key, range_end=arg, prev_kv=flag)
        return "kv", Entry("kv", b"", records_pb2.KvOperation(delete_range=req).SerializeToString())
    cmp = rpc_pb2.Compare(key=key, target=rpc_pb2.Compare.MOD, mod_revision=flag)
    txn = rpc_pb2.TxnRequest(
        compare=[cmp],
        success=[rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=key, value=arg))],
        failure=[
            rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"a", range_end=b"\x00"))
        ],
    )
    return "txn", Entry("txn", b"", records_pb2.TxnOperation(txn=txn).SerializeToString())


def _kv_run(apply: ModuleType, ops: list[tuple[Any, ...]]) -> list[Any]:
    from nameserver.kinds import REGISTRY
    from nameserver.state.image import MetadataDelta, MetadataImage

    delta = MetadataDelta(MetadataImage.empty(REGISTRY))
    trace: list[Any] = []
    for rev, op in enumerate(ops, start=2):
        kind, entry = _kv_entry(op)
        effects: list[Any] = []
        fn = apply.apply_kv_entry if kind == "kv" else apply.apply_txn_entry
        got = outcome(lambda: fn(delta, entry, rev, effects).SerializeToString())  # noqa: B023
        trace.append((got, plain(effects)))
    trace.append(plain(list(delta.kv.range(b"\x00", b"\x00"))))
    return trace


@SETTINGS
@given(ops=st.lists(kv_ops, min_size=1, max_size=12))
def test_kv_apply(ops: list[tuple[Any, ...]]) -> None:
    compiled, source = both("nameserver.kv.apply")
    assert _kv_run(compiled, ops) == _kv_run(source, ops)


# ---------------------------------------------------------------- the RDB parser
def _rdb_events(parser_module: ModuleType, data: bytes, cuts: list[int], verify: bool) -> Any:
    """Every event (or the error) of ``data`` fed in the pieces ``cuts`` make."""
    parser = parser_module.RdbParser(verify_checksum=verify)
    out: list[Any] = []

    def run() -> list[Any]:
        at = 0
        for cut in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
            parser.feed(data[at:cut])
            out.extend(parser.events())
            at = max(at, cut)
        parser.close()
        return out

    return outcome(run), plain(out), parser.offset


def _rdb_samples() -> list[bytes]:
    from bench.mypyc_bench import mixed_rdb
    from tests.property.test_rdb_property import SAMPLE

    data = ROOT / "tests" / "unit" / "replicator" / "redis" / "data"
    return [SAMPLE, mixed_rdb(60), *(f.read_bytes() for f in sorted(data.glob("*.bin")))]


RDB_SAMPLES = _rdb_samples()


def test_the_rdb_parser_is_compared_with_its_whole_source_family() -> None:
    from bench.mypyc_bench import RDB_FAMILY, source_family

    source = source_family(RDB_FAMILY)
    assert source.__file__ is not None and source.__file__.endswith("parser.py")
    # the source parser reads through the sources of its readers, not through the .so files
    assert source.values.__file__.endswith("values.py")
    assert source.StreamReader.__module__.startswith("_pure.")
    assert importlib.import_module("replicator.redis.rdb.values").read_string is not (
        source.values.read_string
    )


@SETTINGS
@given(
    sample=st.integers(0, len(RDB_SAMPLES) - 1),
    cuts=st.lists(st.integers(0, 200_000), max_size=6),
    flip=st.none() | st.tuples(st.integers(0, 10**6), st.integers(0, 7)),
    verify=st.booleans(),
    tail=st.binary(max_size=40),
)
def test_rdb_parser_events_and_errors(
    sample: int, cuts: list[int], flip: tuple[int, int] | None, verify: bool, tail: bytes
) -> None:
    """The compiled parser (parser, readers, encodings, events) and its source give the same
    events, the same error (type, text, offset) and stop at the same offset: whole files,
    any chunking, a flipped bit anywhere (the checksum off, so malformed values are parsed),
    bytes after the end."""
    from bench.mypyc_bench import RDB_FAMILY, source_family

    data = bytearray(RDB_SAMPLES[sample])
    if flip is not None:
        data[flip[0] % len(data)] ^= 1 << flip[1]
    compiled = importlib.import_module("replicator.redis.rdb.parser")
    source = source_family(RDB_FAMILY)
    for blob in (bytes(data), bytes(data) + tail):
        assert _rdb_events(compiled, blob, cuts, verify) == _rdb_events(source, blob, cuts, verify)


@SETTINGS
@given(data=st.binary(max_size=300), header=st.booleans())
def test_rdb_parser_on_garbage(data: bytes, header: bool) -> None:
    from bench.mypyc_bench import RDB_FAMILY, source_family

    blob = b"REDIS0010" + data if header else data
    compiled = importlib.import_module("replicator.redis.rdb.parser")
    source = source_family(RDB_FAMILY)
    assert _rdb_events(compiled, blob, [], False) == _rdb_events(source, blob, [], False)
