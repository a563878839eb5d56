"""One side of a broker HA stream for the network fault tests, run inside a member's
namespace (``ip netns exec``): the broker's own :class:`HAMaster` / :class:`HAClient` on a
store of their own, with the broker's default heartbeat and idle timeout.

    python -m tests.faults.net.ha_node master --dir D --listen IP:PORT
    python -m tests.faults.net.ha_node slave --dir D --master IP:PORT

The master appends a message every 20 ms; each side prints one JSON line every 50 ms:
``{"t": CLOCK_MONOTONIC, "end": commit log end offset, "sessions": ...}``. SIGTERM ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
import time
from pathlib import Path

from broker.ha.epochs import EpochFile
from broker.ha.master import HAMaster
from broker.ha.slave import HAClient
from broker.store import FlushMode, MessageStore, StoreConfig
from rmq.message import StoredMessage


def _store(root: Path) -> MessageStore:
    cfg = StoreConfig(flush_mode=FlushMode.ASYNC_FLUSH, flush_interval_ms=60_000)
    return MessageStore(str(root / "store"), cfg)


async def _main(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    root = Path(args.dir)
    root.mkdir(parents=True, exist_ok=True)
    store = _store(root)
    epochs = EpochFile(str(root / "epochs"))
    master: HAMaster | None = None
    slave: HAClient | None = None
    if args.role == "master":
        epochs.append(1, 0)
        host, _, port = args.listen.rpartition(":")
        master = HAMaster(store, host, int(port), epochs)
        await master.start()
    else:
        host, _, port = args.master.rpartition(":")
        slave = HAClient(store, epochs, 2, (host, int(port)))
        await slave.start()
    n = 0
    next_line = 0.0
    while not stop.is_set():
        if master is not None:
            m = StoredMessage(topic="T", body=b"m%07d" % n, queue_id=0, properties={})
            n += 1
            store.put(m)
            master.notify_appended(store.log.end_offset)
        now = time.monotonic()
        if now >= next_line:
            sessions = (
                slave.sessions if slave is not None else len(master.slaves() if master else [])
            )
            print(json.dumps({"t": now, "end": store.log.end_offset, "sessions": sessions}))
            sys.stdout.flush()
            next_line = now + 0.05
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.02)
    if master is not None:
        await master.stop()
    if slave is not None:
        await slave.stop()
    store.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.ha_node")
    p.add_argument("role", choices=["master", "slave"])
    p.add_argument("--dir", required=True)
    p.add_argument("--listen", default="")
    p.add_argument("--master", default="")
    asyncio.run(_main(p.parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
