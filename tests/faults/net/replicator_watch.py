"""A replicator job seen from the bridge's namespace (``ip netns exec``), for
tests/faults/net/test_replicator_partitions.py: the test process reaches Redis and the
broker from the bridge itself, but asks metaledger through this helper (gRPC's own threads
would not be in the namespace the test thread entered).

``topic``: waits until the broker ``--broker`` is registered in ``--cluster``, creates
``--topic`` on it (``--queues`` queues; none without a topic) and prints ``ready``. ``watch``: a JSON line every ``--every-s``:
``t`` (wall clock, the clock the broker stamps messages with), the job's election leader
(``leader``: the worker's name, ``term``: its key's create revision, the fencing token) and
its published status (``worker``, ``replid``, ``confirmed_offset``), or ``error``; with
``--kind rocketmq``, ``claims``: each partition's claim (its worker, its key's create
revision: the partition's fencing token).

    python -m tests.faults.net.replicator_watch topic --endpoints E,.. --broker B --topic T
    python -m tests.faults.net.replicator_watch watch --endpoints E,.. --kind redis --job J
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time

from nameserver.client import Client, ClientError, QueueData
from replicator.status import read_statuses

PERM_RW = 6


def _topic(
    client: Client, cluster: str, broker: str, topic: str, queues: int, timeout_s: float
) -> int:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            names = client.route_cluster_info().clusters.get(cluster) or []
            if broker in names:
                if topic:
                    q = QueueData(broker, queues, queues, PERM_RW)
                    client.route_topic_create(topic, [q])
                print("ready", flush=True)
                return 0
        except ClientError as exc:  # metaledger not serving yet
            last = exc
        time.sleep(0.2)  # polling a condition with a deadline
    print(f"broker {broker} not registered within {timeout_s:g} s ({last!r})", flush=True)
    return 1


def _watch(client: Client, kind: str, job: str, every_s: float) -> int:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    election = client.election(f"replicators/{kind}/{job}")
    while not stop.is_set():
        line: dict[str, object] = {"t": time.time()}
        try:
            if kind == "rocketmq":
                prefix = f"/replicators/rocketmq/{job}/claims/"
                line["claims"] = {
                    kv.key.decode()[len(prefix) :]: [kv.value.decode(), kv.create_revision]
                    for kv in client.get(prefix, prefix=True).kvs
                }
                print(json.dumps(line), flush=True)
                stop.wait(every_s)
                continue
            kv = election.leader()
            line["leader"] = None if kv is None else kv.value.decode(errors="replace")
            line["term"] = None if kv is None else kv.create_revision
            docs = read_statuses(client, kind, job)
            if docs:
                doc = docs[0]
                for field in ("worker", "replid", "confirmed_offset"):
                    line[field] = doc.get(field)
        except ClientError as exc:
            line["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(line), flush=True)
        stop.wait(every_s)
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests.faults.net.replicator_watch", description=__doc__)
    p.add_argument("command", choices=["topic", "watch"])
    p.add_argument("--endpoints", required=True)
    p.add_argument("--broker", default="broker-a")
    p.add_argument("--cluster", default="DefaultCluster")
    p.add_argument("--topic", default="")
    p.add_argument("--queues", type=int, default=4)
    p.add_argument("--kind", default="redis")
    p.add_argument("--job", default="")
    p.add_argument("--every-s", type=float, default=0.1)
    p.add_argument("--timeout-s", type=float, default=60.0)
    args = p.parse_args(argv)
    with Client(args.endpoints.split(","), timeout_s=2) as client:
        if args.command == "topic":
            return _topic(
                client, args.cluster, args.broker, args.topic, args.queues, args.timeout_s
            )
        return _watch(client, args.kind, args.job, args.every_s)


if __name__ == "__main__":
    sys.exit(main())
