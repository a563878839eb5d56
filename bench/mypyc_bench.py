"""The mypyc build's modules against their Python source, side by side in one process (issue 31).

    scripts/build_mypyc.sh && python -m bench.mypyc_bench [--ops 20000] [--repeat 3]

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
    args = ap.parse_args(argv)
    print(f"{'module':24} {'operation':52} {'import µs':>9} {'source µs':>9} {'ratio':>6}")
    for name, what, build in OPS:
        imported, source = both(name)
        kind = "compiled" if (imported.__file__ or "").endswith(".so") else "source"
        a = cpu_per_op(build(imported), args.ops, args.repeat)
        b = cpu_per_op(build(source), args.ops, args.repeat)
        print(f"{name:24} {what:52} {a:9.2f} {b:9.2f} {b / a:5.2f}x  ({kind})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
