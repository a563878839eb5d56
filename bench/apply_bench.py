"""Micro-benchmark of the apply path: ``ReplicatedLog.apply_committed`` on etcd Put items.

What one node's apply thread does per consensus item, without consensus or gRPC: decode the
item, de-duplicate, ``MetadataStateMachine.apply`` each request, append the effects to real
change-log segments (fsync policy ``batch``, as the server runs), publish the image, tell
the observer (a live :class:`~nameserver.watch.hub.WatchHub` on its own event-loop thread, with
``--watchers`` watchers on keys outside the written range, or none at all; with
``--history`` the kv history of past revisions first, as the server chains them) and answer
the (absent) proposers.

The entries are built exactly as ``KVService.Put`` builds them (a ``KvOperation`` holding
the ``PutRequest``), stamped as ``ReplicatedLog.propose`` stamps them, and framed as group
commit frames them (``--requests-per-item`` requests per item, ``--items-per-group`` items
per apply group). Keys are drawn from a ``--keys`` key space that is written once before the
timed run, so puts overwrite as in ``nameserver.loadgen --op put``.

The store counts revisions etcd's way, as a server's does once its leader switched it (a
``count_revisions`` entry first); ``--offset-revisions`` leaves it counting by offset.

Prints the apply thread's CPU per put (``time.thread_time``; the segment flusher's and the
event loop's threads are reported apart), best of ``--repeat`` runs; asserts nothing.

    python -m bench.apply_bench [--puts 40000] [--requests-per-item 8] [--watchers 0] [--history]
        [--offset-revisions]
    python -m bench.apply_bench --profile          # a cProfile top list of one run
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import pstats
import random
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from nameserver.kinds import REGISTRY
from nameserver.kv.history import KvHistory
from nameserver.kv.records import KeyValue
from nameserver.kv.revision import count_entry
from nameserver.state.machine import MetadataStateMachine
from nameserver.watch.events import HubEvent
from nameserver.watch.hub import Watcher, WatchHub
from protos import records_pb2
from protos.etcdserverpb import rpc_pb2
from raftlog import (
    Effect,
    Entry,
    InMemoryEngine,
    ReplicatedLog,
    SegmentConfig,
    SegmentLog,
    encode_batch,
)
from raftlog.entry import encode_item

T = TypeVar("T")


class _NullSink:
    """A watch stream that drops what it is sent (the bench watches keys nobody writes)."""

    def send(self, response: rpc_pb2.WatchResponse) -> None:
        pass

    def send_events(self, w: Watcher, events: list[HubEvent], header_revision: int) -> None:
        pass


class _NoHistory:
    """The hub's history: unused, every bench watcher starts from now."""

    def floor(self, delivered: int) -> int:
        return 1

    def changes(self, start: int, upto: int) -> Iterator[tuple[int, Effect]]:
        return iter(())

    def base(
        self, before: int, type_: str, key: bytes, end: bytes | None
    ) -> tuple[int, dict[bytes, KeyValue]]:
        return 0, {}


def _put_request(key: bytes, value: bytes, client_id: str, seq: int, now_ms: int) -> bytes:
    """One request as the leader proposes a ``Put``: KVService.Put + ReplicatedLog.propose."""
    op = records_pb2.KvOperation(put=rpc_pb2.PutRequest(key=key, value=value))
    entry = Entry(
        type="kv",
        key=key,
        value=op.SerializeToString(),
        client_id=client_id,
        seq=seq,
        timestamp_ms=now_ms,
    )
    return encode_batch([entry])


def make_items(
    puts: int, per_item: int, keys: int, value_size: int, seed: int, first_seq: int
) -> list[bytes]:
    rng = random.Random(seed)
    value = bytes(rng.randrange(256) for _ in range(value_size))
    now_ms = int(time.time() * 1000)
    requests = [
        _put_request(
            b"/bench/key-%08d" % rng.randrange(keys), value, "bench/c0", first_seq + i, now_ms
        )
        for i in range(puts)
    ]
    return [encode_item(requests[i : i + per_item]) for i in range(0, puts, per_item)]


class Bench:
    def __init__(self, data_dir: Path, watchers: int, history: bool = False) -> None:
        self.sm = MetadataStateMachine.empty(REGISTRY)
        self.segments = SegmentLog.open(data_dir / "log", SegmentConfig(fsync_policy="batch"))
        self.rlog = ReplicatedLog(InMemoryEngine(), self.sm, self.segments, "n0")
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_thread: threading.Thread | None = None
        self.hub: WatchHub | None = None
        self.next_offset = 1
        self.seq = 1
        if watchers >= 0:
            self._start_hub(data_dir, watchers)
        if history:  # the server's chain: the kv history first, then the hub
            self.rlog.set_observer(
                KvHistory(self.sm.image, lambda: self.sm.image, self.hub, lambda: 1)
            )

    def _start_hub(self, data_dir: Path, watchers: int) -> None:
        loop = self.loop = asyncio.new_event_loop()
        self.loop_thread = threading.Thread(target=loop.run_forever, name="loop", daemon=True)
        self.loop_thread.start()
        hub = self.hub = WatchHub(
            _NoHistory(),
            lambda: self.sm.image,
            0,
            lambda rev: rpc_pb2.ResponseHeader(revision=rev),
            1 << 20,
        )
        hub.attach(loop)

        def register() -> None:
            for i in range(watchers):
                # keys nobody writes: the hub matches every effect, delivers nothing
                key = b"/watched/%04d" % i
                w = Watcher(id=i, sink=_NullSink(), key=key, end=None)
                hub.start(w, 0)

        asyncio.run_coroutine_threadsafe(_call(register), loop).result()
        self.rlog.set_observer(hub)

    def loop_cpu_s(self) -> float:
        """CPU time of the event-loop thread so far (0 without a hub)."""
        if self.loop is None:
            return 0.0
        return asyncio.run_coroutine_threadsafe(_call(time.thread_time), self.loop).result()

    def drain(self) -> None:
        """Wait until the event loop has handled everything the apply thread handed it."""
        if self.loop is not None:
            asyncio.run_coroutine_threadsafe(_call(lambda: None), self.loop).result()

    def feed(self, items: list[bytes], per_group: int) -> None:
        """Apply ``items`` as the apply thread would, ``per_group`` items per group."""
        apply_group = self.rlog.apply_committed
        for g in range(0, len(items), per_group):
            group = []
            for data in items[g : g + per_group]:
                count = int.from_bytes(data[:4], "little")
                group.append((self.next_offset, 1, data))
                self.next_offset += count
            apply_group(group)

    def close(self) -> None:
        if self.loop is not None and self.loop_thread is not None:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.loop_thread.join(5)
            self.loop.close()
        self.segments.close()


async def _call(fn: Callable[[], T]) -> T:
    return fn()


def run_once(args: argparse.Namespace, profile: cProfile.Profile | None) -> tuple[float, float]:
    """One fresh node: populate the key space, then time ``args.puts`` puts; returns the
    apply thread's and the event loop's CPU microseconds per put."""
    with tempfile.TemporaryDirectory(prefix="apply-bench-") as tmp:
        bench = Bench(Path(tmp), args.watchers, args.history)
        try:
            populate = [
                encode_item(
                    [
                        _put_request(b"/bench/key-%08d" % k, b"x" * args.value_size, "p", k + 1, 1)
                        for k in range(start, min(start + 256, args.keys))
                    ]
                )
                for start in range(0, args.keys, 256)
            ]
            if not args.offset_revisions:
                bench.feed([encode_item([encode_batch([count_entry()])])], 1)
            bench.feed(populate, 1)
            items = make_items(
                args.puts, args.requests_per_item, args.keys, args.value_size, args.seed, 1
            )
            bench.drain()
            gc.collect()
            loop0 = bench.loop_cpu_s()
            t0 = time.thread_time()
            if profile is not None:
                profile.enable()
            bench.feed(items, args.items_per_group)
            if profile is not None:
                profile.disable()
            apply_s = time.thread_time() - t0
            bench.drain()
            loop_s = bench.loop_cpu_s() - loop0
        finally:
            bench.close()
    return apply_s / args.puts * 1e6, loop_s / args.puts * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--puts", type=int, default=40_000)
    p.add_argument("--requests-per-item", type=int, default=8)
    p.add_argument("--items-per-group", type=int, default=1)
    p.add_argument("--keys", type=int, default=10_000)
    p.add_argument("--value-size", type=int, default=256)
    p.add_argument(
        "--watchers",
        type=int,
        default=0,
        help="watchers on a live hub (keys nobody writes); -1: no hub (no observer) at all",
    )
    p.add_argument(
        "--history",
        action="store_true",
        help="the server's observer chain: the kv history (past revisions) before the hub",
    )
    p.add_argument(
        "--offset-revisions",
        action="store_true",
        help="leave the store counting revisions by offset (default: etcd's count)",
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--profile", action="store_true", help="print a cProfile top list (1 run)")
    p.add_argument("--top", type=int, default=30)
    args = p.parse_args()
    if args.profile:
        prof = cProfile.Profile()
        apply_us, loop_us = run_once(args, prof)
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(args.top)
        print(out.getvalue())
        print(f"(profiled) apply thread {apply_us:.1f} us/put, event loop {loop_us:.1f} us/put")
        return
    runs = [run_once(args, None) for _ in range(args.repeat)]
    apply_us = min(r[0] for r in runs)
    loop_us = min(r[1] for r in runs)
    print(
        f"puts={args.puts} requests/item={args.requests_per_item} "
        f"items/group={args.items_per_group} keys={args.keys} value={args.value_size}B "
        f"watchers={args.watchers}"
    )
    print(
        f"apply thread: {apply_us:.1f} us/put (best of {args.repeat}: "
        f"{', '.join(f'{r[0]:.1f}' for r in runs)}); event loop: {loop_us:.1f} us/put"
    )


if __name__ == "__main__":
    main()
