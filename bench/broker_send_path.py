"""Micro-benchmark of one broker replica's send path, in one process, without sockets.

What the master does per SEND_MESSAGE_V2 between the bytes arriving and the answer's bytes
leaving, minus the sockets and the slaves: decode the frames (``rmq.codec.FrameDecoder``),
one task per request through the broker's frame server's ``dispatch`` (the send processor,
the topic lookup, the put pipeline with its store thread, a real store with consume queues
and index), and encode the answer. ``--in-flight`` requests (64) are decoded from one buffer
and answered together, as 64 producers on one connection are. One replica, no quorum wait
(``Standalone`` replication), the garbage collector set as ``metaledger broker`` sets it.

Prints the process CPU per send (``time.process_time``: the event loop and the store's
threads), the median of ``--repeat`` runs. On a shared machine this moves far less than
``bench.broker_send``'s per-replica CPU (one process, no cross-process scheduling), so it
is the quick check of a change to the send path; ``bench.broker_send`` stays the measure.

    python -m bench.broker_send_path [--sends 20000] [--repeat 3]
    python -m bench.broker_send_path --baseline-tree /work/main   # both trees, taking turns

``--batch N``: each request is a SEND_BATCH_MESSAGE of N messages, each with the properties
the Redis replicator's full sync gives its messages (UNIQ_KEY, KEYS, TAGS and the REDIS_*
offsets), the way its sink sends them; the CPU is then per message (``--sends`` messages).

    python -m bench.broker_send_path --batch 256 --in-flight 4 --size 512
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from collections.abc import Callable

    from rmq.codec import RemotingCommand

ROOT = Path(__file__).resolve().parent.parent


def _batch_request(n: int, first: int, queue_id: int, size: int) -> RemotingCommand:
    """SEND_BATCH_MESSAGE of ``n`` messages with a full sync's properties (as the Redis
    replicator's sink builds them: ``bench.rmq_client.send_batch_request``)."""
    from rmq.message import encode_properties
    from rmq.msgid import uniq_key

    items = []
    for i in range(first, first + n):
        props = {
            "REDIS_REPLID": "8f1c6a2d0b9e4f7a3c5d1e2f4a6b8c0d2e4f6a8b",
            "REDIS_START": "1234567",
            "REDIS_END": "1234567",
            "REDIS_DB": "0",
            "REDIS_KIND": "snapshot",
            "REDIS_SNAPSHOT": "s-0001",
            "TAGS": "SET",
            "KEYS": f"key:{i:012d}",
            "UNIQ_KEY": uniq_key(),
        }
        items.append((0, b"x" * size, encode_properties(props)))
    return _send_batch_request()("bench", queue_id, items, "broker-a")


def _send_batch_request() -> Callable[..., RemotingCommand]:
    """``bench.rmq_client.send_batch_request``; a ``--baseline-tree`` from before it has its
    ``bench.rmq_client`` first on the path, and takes this tree's (built on its own ``rmq``)."""
    import bench.rmq_client

    send = getattr(bench.rmq_client, "send_batch_request", None)
    if send is None:
        here = Path(__file__).with_name("rmq_client.py")
        spec = importlib.util.spec_from_file_location("_rmq_client_here", here)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        send = module.send_batch_request
    return cast("Callable[..., RemotingCommand]", send)


async def _run(sends: int, in_flight: int, size: int, batch: int = 0) -> float:
    import broker.cli
    from bench.rmq_client import send_v2_request
    from broker.config import BrokerConfig
    from broker.replica import Replica
    from broker.topics import TopicConfig
    from rmq.codec import FrameDecoder, RemotingCommand, encode
    from rmq.server import Peer

    with tempfile.TemporaryDirectory(prefix="broker-send-path-") as tmp:
        config = BrokerConfig(
            broker_name="broker-a",
            data_dir=tmp,
            listen_host="127.0.0.1",
            listen_port=10911,  # written as STOREHOST only: nothing listens
            grpc_listen="",
        )
        replica = Replica(config)
        replica.topics.put(TopicConfig("bench", 4, 4))
        server, peer = replica.server, Peer(1, "127.0.0.1:40000")
        if batch:
            frames = b"".join(
                encode(_batch_request(batch, i * batch, i % 4, size).replace(opaque=i))
                for i in range(in_flight)
            )
        else:
            frames = b"".join(
                encode(send_v2_request("bench", i % 4, b"x" * size, "broker-a").replace(opaque=i))
                for i in range(in_flight)
            )
        per_round = in_flight * (batch or 1)

        async def answer(request: RemotingCommand) -> bytes:
            response = await server.dispatch(request, peer)
            assert response is not None and response.code == 0, response
            return encode(response)

        async def one_round() -> None:
            decoder = FrameDecoder()
            decoder.receive_data(frames)
            tasks = []
            while isinstance(event := decoder.next_event(), RemotingCommand):
                tasks.append(asyncio.create_task(answer(event)))
            await asyncio.gather(*tasks)

        for _ in range(max(2, 50 // (batch or 1))):  # warm-up: the queues' files, the caches
            await one_round()
        tune_gc = getattr(broker.cli, "tune_gc", None)  # a tree from before it: the default
        if tune_gc is not None:
            tune_gc()
        rounds = max(1, sends // per_round)
        started = time.process_time()
        for _ in range(rounds):
            await one_round()
        spent = time.process_time() - started
        replica.core.close()
        replica.metrics.close()
        replica.store.close()
        return 1e6 * spent / (rounds * per_round)


def _once(sends: int, in_flight: int, size: int, batch: int) -> float:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - a dependency of the broker
        return asyncio.run(_run(sends, in_flight, size, batch))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(_run(sends, in_flight, size, batch))


def _in_tree(tree: Path, args: argparse.Namespace) -> float:
    """One run in ``tree`` (its own process, that tree first on the path)."""
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(tree), os.environ.get("PYTHONPATH")])),
    )
    argv = [sys.executable, __file__, "--one"]  # this file, whatever the tree has
    argv += [
        "--sends",
        str(args.sends),
        "--in-flight",
        str(args.in_flight),
        "--size",
        str(args.size),
        "--batch",
        str(args.batch),
    ]
    out = subprocess.run(
        argv, cwd=tree, env=env, capture_output=True, text=True, timeout=600, check=True
    )
    return float(out.stdout.split()[-1])


def main() -> None:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--sends", type=int, default=20000)
    p.add_argument("--in-flight", type=int, default=64)
    p.add_argument("--size", type=int, default=1024, help="message body bytes")
    p.add_argument("--batch", type=int, default=0, help="messages per SEND_BATCH_MESSAGE")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--baseline-tree", type=Path, help="also run in this checkout, taking turns")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one:
        print(f"{_once(args.sends, args.in_flight, args.size, args.batch):.2f}")
        return
    trees = {"this tree": ROOT}
    if args.baseline_tree is not None:
        trees["baseline"] = args.baseline_tree.resolve()
    runs: dict[str, list[float]] = {name: [] for name in trees}
    for n in range(args.repeat):
        order = list(trees.items()) if n % 2 == 0 else list(reversed(trees.items()))
        for name, tree in order:
            runs[name].append(_in_tree(tree, args))
    for name, values in runs.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        what = "message" if args.batch else "send"
        print(f"{name}: {statistics.median(values):.1f} us of CPU a {what} (runs: {shown})")
    if args.baseline_tree is not None:
        ratio = statistics.median(runs["this tree"]) / statistics.median(runs["baseline"])
        print(f"this tree / baseline: {ratio:.3f}x")


if __name__ == "__main__":
    main()
