"""The mypyc build's modules against their Python source, side by side in one process (issue 31).

    scripts/build_mypyc.sh && python -m bench.mypyc_bench [--ops 20000] [--repeat 3] [--only NAME]

Each module of ``scripts/mypyc_modules.txt`` that has an operation here is imported (the .so
in the compiled build) and loaded a second time from its ``.py`` (:func:`source_module`); both
run the same operation and the process CPU per operation (``time.process_time``, best of
``--repeat``) is printed side by side. Without the build both columns are the source (the
ratios then say how noisy the machine is). Asserts nothing; writes no results file.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
_loaded: dict[str, ModuleType] = {}


def source_module(name: str) -> ModuleType:
    """Module ``name``'s ``.py`` file, executed as a separate module ``_pure.<name>`` (what it
    imports comes from the normal, possibly compiled, modules)."""
    if name not in _loaded:
        alias = f"_pure.{name}"
        spec = importlib.util.spec_from_file_location(
            alias, ROOT / (name.replace(".", "/") + ".py")
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[alias] = module  # dataclasses look their module up while decorating
        spec.loader.exec_module(module)
        _loaded[name] = module
    return _loaded[name]


def both(name: str) -> tuple[ModuleType, ModuleType]:
    """(what ``import`` gives, the source loaded beside it)."""
    return importlib.import_module(name), source_module(name)


#: rmq.headers (Python either way) on its machinery, compiled or not: the source side is both
#: sources, and "compiled" means rmq.headerfields is
HEADERS_FAMILY: tuple[str, ...] = ("rmq.headerfields", "rmq.headers")

#: modules compiled together whose sources are compared as a family: the source of the last
#: one runs on the sources of the others (:func:`source_family`), never on their .so files
RDB_FAMILY: tuple[str, ...] = tuple(
    f"replicator.redis.rdb.{m}" for m in ("events", "encodings", "values", "streams", "parser")
)


def source_family(names: Sequence[str]) -> ModuleType:
    """The ``.py`` files of ``names`` (each after the modules it imports), executed as separate
    modules ``_pure.<name>`` whose imports of one another give these copies: while a copy is
    executed, ``sys.modules`` and the parent packages name the copies made before it, then they
    are put back. Returns the last one's copy (e.g. the RDB parser on its sources)."""
    key = "+".join(names)
    if key not in _loaded:
        copies: dict[str, ModuleType] = {}
        for name in names:
            importlib.import_module(name)  # what the copies stand in for, restored below
            saved = {n: sys.modules[n] for n in copies}
            parents = {n: sys.modules[n.rsplit(".", 1)[0]] for n in copies}
            try:
                for n, copy in copies.items():
                    sys.modules[n] = copy
                    setattr(parents[n], n.rsplit(".", 1)[1], copy)
                alias = f"_pure.{key}.{name}"
                path = ROOT / (name.replace(".", "/") + ".py")
                spec = importlib.util.spec_from_file_location(alias, path)
                assert spec is not None and spec.loader is not None
                module = importlib.util.module_from_spec(spec)
                sys.modules[alias] = module  # dataclasses look their module up while decorating
                spec.loader.exec_module(module)
                copies[name] = module
            finally:
                for n, original in saved.items():
                    sys.modules[n] = original
                    setattr(parents[n], n.rsplit(".", 1)[1], original)
        _loaded[key] = copies[names[-1]]
    return _loaded[key]


def _messages(m: ModuleType) -> Callable[[], object]:
    msg = m.Message(1, 5, 10, 5, 9, entries=[m.LogEntry(11, 5, 0, b"x" * 300) for _ in range(8)])
    return lambda: m.decode_message(m.encode_message(msg))


def _follower_append(m: ModuleType) -> Callable[[], object]:
    """A follower's step of an APPEND of 8 entries, persisted and committed (no I/O)."""
    msgs = importlib.import_module("raftlog.native.messages")
    core = m.RaftCore("b", ["a", "b", "c"])
    state = {"last": 0}

    def op() -> object:
        last = state["last"]
        entries = [msgs.LogEntry(last + i + 1, 1, 0, b"x" * 256) for i in range(8)]
        a = msgs.Message(msgs.MsgType.APPEND, 1, index=last, log_term=1 if last else 0,
                         commit=last, entries=entries, src="a")  # fmt: skip
        core.step(a, 1.0)
        core.persisted(core.last_index)
        core.outbox.clear()
        core.after_persist.clear()
        state["last"] = last + 8
        return core.committed_entries()

    return op


def _wal(m: ModuleType) -> Callable[[], object]:
    entry = importlib.import_module("raftlog.native.messages").LogEntry(7, 1, 0, b"x" * 256)
    data = b"".join([m.entry_record(entry)] * 8)
    return lambda: (m.entry_record(entry), m._next_valid_record(data, 1))


def _codec(m: ModuleType) -> Callable[[], object]:
    cmd = m.RemotingCommand(105, opaque=7, ext_fields={"topic": "T", "a": "1"}, body=b"x" * 100)
    return lambda: m.decode_frame(m.encode(cmd)[4:])


def _stored(m: ModuleType) -> Callable[[], object]:
    sm = m.StoredMessage("T", b"x" * 256, properties={"TAGS": "a", "UNIQ_KEY": "k"})
    return lambda: m.decode(m.encode(sm))


def _entry(m: ModuleType) -> Callable[[], object]:
    es = [m.Entry("kv", b"k%d" % i, b"v" * 256) for i in range(8)]
    return lambda: m.decode_item(m.encode_item([m.encode_request(es, "c", 1, 2)]), 1, 1)


def _headers(m: ModuleType) -> Callable[[], object]:
    """The broker's header work per send: SEND_MESSAGE_V2's header read from its short names,
    and the answer's header written into the response (``m`` is ``rmq.headers``, on the
    compiled or the source ``rmq.headerfields``)."""
    from rmq.codec import RemotingCommand

    fields = {"a": "g", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "h": "0"}
    fields |= {"g": "1700000000000", "i": "TAGS\x01a\x02UNIQ_KEY\x01k\x02", "j": "0"}
    fields |= {"k": "false", "l": "16", "m": "false"}
    request = RemotingCommand(310, opaque=7, ext_fields=fields)
    answer = m.SendMessageResponseHeader("0A00000700002A9F0000000000001E240", 1, 42)
    return lambda: (m.SendMessageHeader.from_command(request), answer.response(request, 0))


def _send_processor(m: ModuleType) -> Callable[[], object]:
    """The send processor's own Python per SEND_MESSAGE_V2: the stored message from the
    header, the DELAY check and the answer (the header parse and the store are not in it)."""
    from broker.config import BrokerConfig
    from broker.core import BrokerCore
    from broker.replication import PutStatus
    from broker.store import PutResult
    from rmq.codec import RemotingCommand
    from rmq.headers import SendMessageHeader
    from rmq.server import Peer

    core = object.__new__(BrokerCore)  # the processor reads only its config here
    core.config = BrokerConfig(broker_name="b", data_dir="/nonexistent")
    proc = m.SendProcessor(core)
    h = SendMessageHeader(
        producer_group="g", topic="T", queue_id=1, sys_flag=0, born_timestamp=1, flag=0
    )
    request = RemotingCommand(310, opaque=7, ext_fields={"a": "g", "b": "T"})
    results = [PutResult("PUT_OK", 123456, 42, 300)]
    peer = Peer(1, "10.0.0.7:4100")
    props = {"TAGS": "a", "UNIQ_KEY": "k"}

    def op() -> object:
        born = m.peer_host(peer)
        is_half = m.is_half_message(h.sys_flag, h.reconsume_times, props)
        msg = proc.delayed(proc._message(h, "T", 1, b"x" * 256, 0, props, born))
        return is_half, msg, proc._answer(request, PutStatus.PUT_OK, results, 1)

    return op


def _index_file(m: ModuleType) -> Callable[[], object]:
    """Index puts of one record under two keys into a mapped file (reset when full)."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="mypyc_bench_")) / f"index_{id(m)}"
    f = m.IndexFile(str(path), 5000, 20000)
    hashes = [m.key_hash("T#k1"), m.key_hash("T#UNIQ")]
    state = {"phy": 0}

    def op() -> object:
        if f.full:
            f.count = 1
        state["phy"] += 300
        return f.put(hashes, state["phy"], 1700000000000 + state["phy"])

    return op


def _replicated_scan(m: ModuleType) -> Callable[[], object]:
    """A replica's scan of a master's 16 records of 256 bytes over 2 queues (keys indexed)."""
    import shutil
    import tempfile

    from broker.store import MessageStore
    from rmq.message import StoredMessage

    root = tempfile.mkdtemp(prefix="mypyc_bench_log_")
    store = MessageStore(root)
    try:
        for i in range(16):
            props = {"KEYS": f"k{i}", "UNIQ_KEY": f"u{i}", "TAGS": "a"}
            message = StoredMessage("T", b"x" * 256, queue_id=i % 2, properties=props)
            store.put_many([[message]], wait_durable=False)
        data = store.read_log(0, store.log.end_offset)
    finally:
        store.close()
        shutil.rmtree(root, True)
    view = memoryview(data)

    def read(at: int, n: int) -> memoryview:
        return view[at : at + n]

    def write(topic: str, queue_id: int, first: int, units: object) -> None:
        pass

    return lambda: m.scan_replicated(read, 0, len(data), 1 << 30, True, {}, [], write)


def mixed_rdb(keys: int) -> bytes:
    """An RDB of ``keys`` keys of mixed types, about as bench.rdb_parse's fill mixes them:
    short, int and LZF strings, listpack lists, hashes and zsets, hashtable hashes, sets and
    zsets, intsets (tests/unit/.../rdbgen.py's encoders)."""
    from tests.unit.replicator.redis.rdb import rdbgen as g

    s = g.string
    body = [b"\xfe\x00\xfb" + g.length(keys) + g.length(0)]
    for i in range(keys):
        k = s(b"key:%d" % i)
        m = i % 10
        if m < 3:
            body.append(b"\x00" + k + s(b"value-%d-" % i + b"x" * 40))
        elif m == 3:
            body.append(b"\x00" + k + g.int_string(i * 7919 % 100_000))
        elif m == 4:
            body.append(b"\x00" + k + g.lzf_literal_string(b"v" * 90 + b"%d" % i))
        elif m == 5:
            lp = g.listpack([b"item-%d-%d" % (j, i) for j in range(8)])
            body.append(b"\x12" + k + g.length(1) + g.length(2) + s(lp))
        elif m == 6:
            body.append(
                b"\x10"
                + k
                + s(
                    g.listpack(
                        [b"field%d" % j if j % 2 == 0 else b"val%d" % (i + j) for j in range(12)]
                    )
                )
            )
        elif m == 7:
            fields = b"".join(s(b"f%d" % j) + s(b"%d" % (i + j)) for j in range(16))
            body.append(b"\x04" + k + g.length(16) + fields)
        elif m == 8:
            body.append(b"\x0b" + k + s(g.intset([i + j * 1000 for j in range(12)], 4)))
        else:
            members = b"".join(s(b"z%d" % j) + struct.pack("<d", j * 1.5) for j in range(16))
            body.append(b"\x05" + k + g.length(16) + members)
    return g.rdb(b"".join(body), version=10)


def _rdb_parse(m: ModuleType) -> Callable[[], object]:
    """A whole parse of :func:`mixed_rdb` (1000 keys), fed in 64 KiB chunks, CRC64 checked."""
    data = mixed_rdb(1000)

    def op() -> object:
        parser = m.RdbParser()
        n = 0
        for i in range(0, len(data), 65536):
            parser.feed(data[i : i + 65536])
            n += len(parser.events())
        parser.close()
        return n

    return op


#: (module, what one operation is, its builder)
OPS: list[tuple[str, str, Callable[[ModuleType], Callable[[], object]]]] = [
    ("raftlog.native.messages", "peer message encode+decode, 8 entries", _messages),
    (
        "raftlog.native.core",
        "follower: APPEND of 8 entries, persisted, committed",
        _follower_append,
    ),
    ("raftlog.native.wal", "WAL entry record + scan of 8 records", _wal),
    ("raftlog.entry", "encode_request + item + decode_item, 8 entries", _entry),
    ("rmq.codec", "remoting frame encode + decode", _codec),
    ("rmq.message", "stored record encode + decode", _stored),
    ("rmq.headers", "a send's header read (V2 names) + answer header", _headers),
    ("broker.send.processor", "a send's stored message, DELAY check and answer", _send_processor),
    ("broker.store.index_file", "index put of one record under two keys", _index_file),
    ("broker.store.replicated", "a replica's scan of 16 records (units, index)", _replicated_scan),
    ("replicator.redis.rdb.parser", "parse of an RDB of 1000 mixed keys", _rdb_parse),
]


def cpu_per_op(op: Callable[[], object], n: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.process_time()
        for _ in range(n):
            op()
        best = min(best, (time.process_time() - t) / n)
    return best * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ops", type=int, default=20000, help="operations per timed run")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", default="", help="only the modules whose name contains this")
    args = ap.parse_args(argv)
    print(f"{'module':24} {'operation':52} {'import µs':>9} {'source µs':>9} {'ratio':>6}")
    for name, what, build in OPS:
        if args.only not in name:
            continue
        imported = importlib.import_module(name)
        family = next((f for f in (RDB_FAMILY, HEADERS_FAMILY) if name in f), None)
        source = source_family(family) if family else source_module(name)
        first = importlib.import_module(family[0]) if family else imported
        kind = "compiled" if (first.__file__ or "").endswith(".so") else "source"
        a = cpu_per_op(build(imported), args.ops, args.repeat)
        b = cpu_per_op(build(source), args.ops, args.repeat)
        print(f"{name:24} {what:52} {a:9.2f} {b:9.2f} {b / a:5.2f}x  ({kind})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
