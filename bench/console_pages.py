"""How long each of the console's JSON endpoints takes, and the console's CPU per request,
against a real node holding a large prefix; and the console's memory while it samples.

    python -m bench.console_pages [--keys 100000] [--leases 10000] [--topics 1000]
                                  [--rounds 20] [--sample-seconds 10]

One node (tests.harness.Cluster) gets ``--keys`` keys under ``big/`` (in transactions of 100
puts) and a few more, ``--leases`` leases (one key on each tenth), 20 locks and elections
and 50 users, ``--topics`` topics (one registering broker, none running), the records of
``--jobs`` Redis and as many RocketMQ replicator jobs, and one open live tail; a real ``metaledger console`` process (tests.console_harness) is asked
each endpoint ``--rounds`` times in turn. Per endpoint: the median and worst wall time, and
the console process's CPU (all its threads, from /proc) per request. Then the console samples
for ``--sample-seconds`` at 20 per second and its resident memory is read before and after.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from nameserver.client import Client, Op  # noqa: E402
from tests.console_harness import ConsoleProcess  # noqa: E402
from tests.harness import Cluster  # noqa: E402
from tests.remoting_client import call, register_request  # noqa: E402


def cpu_s(pid: int) -> float:
    """The process's CPU time in seconds, summed over its threads in nanoseconds
    (/proc/PID/task/*/schedstat; /proc/PID/stat counts 10 ms ticks). A thread that ended
    between two reads drops out: the console's threads live as long as it does."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (FileNotFoundError, ProcessLookupError):
            continue
    return total / 1e9


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def fill(client: Client, keys: int) -> None:
    for start in range(0, keys, 100):
        ops = [Op.put(f"big/{i:06d}", f"value {i}") for i in range(start, min(start + 100, keys))]
        client.txn([], success=ops)
    for i in range(20):
        client.put(f"app/k{i}", json.dumps({"n": i}))
        client.put("app/history", f"version {i}")


def fill_leases(client: Client, leases: int) -> int:
    """``leases`` leases of 600 s (a key on each tenth), 20 held locks and elections, 50
    users; returns the id of the lease in the middle (a cursor)."""

    def grant(i: int) -> int:
        lease_id = client.lease_grant(600).id
        if i % 10 == 0:
            client.put(f"svc/{i:06d}", "up", lease=lease_id)
        return lease_id

    with ThreadPoolExecutor(8) as pool:
        ids = sorted(pool.map(grant, range(leases)))
    for i in range(20):
        held = client.lease_grant(600).id
        client.put(f"locks/job{i}/{held:x}", "" if i % 2 else f"leader-{i}", lease=held)
    for i in range(50):
        client.user_add(f"user{i}", "pw")
    return ids[len(ids) // 2] if ids else 0


def fill_topics(cluster: Cluster, topics: int) -> None:
    """``topics`` topics of 4 queues each, registered by one broker as a broker registers
    them (REGISTER_BROKER; no broker runs: the page reads routes from metaledger only)."""
    names = [f"T{i:06d}" for i in range(topics)]
    request = register_request(
        "bench-broker", "127.0.0.1:10911", names, heartbeat_timeout_ms=3_600_000
    )
    reply = call(f"127.0.0.1:{cluster.nodes[0].remoting_port}", request, timeout=60)
    assert reply.code == 0, reply.remark


def fill_replicators(client: Client, jobs: int) -> None:
    """The records of ``jobs`` Redis jobs (an active and a standby worker each) and ``jobs``
    RocketMQ jobs (two workers, 16 source queues each), as the workers keep them."""
    now = time.time()
    ops = []
    for j in range(jobs):
        redis = {"kind": "redis", "job": f"r{j}", "worker": "w1", "updated": now,
                 "source": "redis://10.0.0.1:6379", "topic": "events", "phase": "command stream",
                 "parsed_offset": 9000, "confirmed_offset": 8000, "acked_offset": 8000,
                 "checkpoint_offset": 7000, "lag_bytes": 1000, "lag_s": 0.2, "in_flight": 3,
                 "sent": 500, "confirmed": 497, "last_error": None}  # fmt: skip
        ops.append(Op.put(f"/replicators/redis/r{j}/status", json.dumps(redis)))
        ops += [Op.put(f"replicators/redis/r{j}/{j * 2 + w + 1:x}", f"w{w}") for w in (1, 2)]
        queues = [{"partition": f"t/broker-a/{q}", "dest_topic": "t", "max_offset": 100,
                   "pulled_offset": 90, "committed_offset": 80, "lag_messages": 20, "lag_s": 0.5,
                   "in_flight": 10, "sent": 90, "acked": 80, "alarms": [], "stopped": ""}
                  for q in range(16)]  # fmt: skip
        for w in (1, 2):
            doc = {"kind": "rocketmq", "job": f"m{j}", "worker": f"w{w}", "updated": now,
                   "source": "10.0.0.1:9876", "dest": "10.0.0.2:9876", "source_cluster": "A",
                   "dest_cluster": "B", "leader": w == 1, "last_failure": "",
                   "queues": queues[w - 1 :: 2],
                   "heartbeat": {"enabled": w == 1, "rtt_ms": 3.0, "link_down": False}}  # fmt: skip
            ops.append(Op.put(f"/replicators/rocketmq/m{j}/w/w{w}/status", json.dumps(doc)))
            ops.append(Op.put(f"/replicators/rocketmq/m{j}/workers/w{w}", ""))
        ops += [
            Op.put(f"/replicators/rocketmq/m{j}/claims/t/broker-a/{q}", "w1") for q in range(16)
        ]
        if len(ops) >= 100:
            client.txn([], success=ops)
            ops = []
    if ops:
        client.txn([], success=ops)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--leases", type=int, default=10_000)
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--sample-seconds", type=float, default=10.0)
    ap.add_argument("--jobs", type=int, default=100, help="Redis and RocketMQ replicator jobs")
    args = ap.parse_args(argv)
    last = f"{args.keys - 1:06d}"
    endpoints = {
        "cluster": "/api/cluster",
        "samples 1 h": "/api/cluster/samples?seconds=3600",
        "list top (one dir of N keys)": "/api/keys/list?prefix=",
        "list big/ first 100": "/api/keys/list?prefix=big/",
        "search key, last of N": f"/api/keys/search?prefix=big/&q={last}&by=key",
        "search value (20k budget)": "/api/keys/search?prefix=big/&q=nowhere&by=value",
        "value": "/api/keys/value?key=app/k3",
        "history (20 versions)": "/api/keys/history?key=app/history",
        "diff of two revisions": "/api/keys/diff?key=app/history&from=0&to=0",
        "leases first 100 of L": "/api/leases?limit=100",
        "leases 100 mid-way": "/api/leases?limit=100&cursor=",
        "locks under locks/": "/api/locks?prefix=locks/",
        "locks, all keys (20k budget)": "/api/locks?prefix=",
        "users and roles": "/api/users",
        "rocketmq topics first 50 of T": "/api/rocketmq/topics?limit=50",
        "rocketmq topics 50 mid-way": f"/api/rocketmq/topics?limit=50&cursor=T{args.topics // 2:06d}",
        "rocketmq brokers and groups": "/api/rocketmq/brokers",
        "replicators (J + J jobs)": "/api/replicators",
        "tail poll, nothing new": "/api/keys/tail?id=",
    }
    with tempfile.TemporaryDirectory() as tmp, Cluster(Path(tmp) / "node", n=1) as cluster:
        cluster.wait_ready(30)
        with Client(cluster.endpoints, timeout_s=30) as client:
            began = time.monotonic()
            fill(client, args.keys)
            print(f"filled {args.keys} keys in {time.monotonic() - began:.1f} s")
            began = time.monotonic()
            middle = fill_leases(client, args.leases)
            print(f"granted {args.leases} leases in {time.monotonic() - began:.1f} s")
            endpoints["leases 100 mid-way"] += f"{middle:x}"
            began = time.monotonic()
            fill_topics(cluster, args.topics)
            print(f"created {args.topics} topics in {time.monotonic() - began:.1f} s")
            fill_replicators(client, args.jobs)
            first = client.get("app/history").kvs[0].mod_revision
            endpoints["diff of two revisions"] = (
                f"/api/keys/diff?key=app/history&from={first - 10}&to={first}"
            )
        console = ConsoleProcess(Path(tmp) / "console", cluster.endpoints)
        try:
            pid = console.proc.pid
            status, tail = console.request("/api/keys/tail/open?prefix=big/", {})
            assert status == 200, tail
            endpoints["tail poll, nothing new"] += tail["id"]
            print(f"{'endpoint':32} {'median ms':>10} {'worst ms':>9} {'CPU us/req':>11}")
            for name, path in endpoints.items():
                status, body = console.get(path)
                assert status == 200, (path, status, body)
                walls = []
                cpu0 = cpu_s(pid)
                for _ in range(args.rounds):
                    t0 = time.perf_counter()
                    console.get(path)
                    walls.append(time.perf_counter() - t0)
                cpu = (cpu_s(pid) - cpu0) / args.rounds
                print(
                    f"{name:32} {statistics.median(walls) * 1e3:10.1f}"
                    f" {max(walls) * 1e3:9.1f} {cpu * 1e6:11.0f}"
                )
            console.stop()
            fast = ConsoleProcess(
                Path(tmp) / "sampling", cluster.endpoints, "--sample-every", "0.05"
            )
            try:
                before = rss_mib(fast.proc.pid)
                time.sleep(args.sample_seconds)  # the measured interval itself
                after = rss_mib(fast.proc.pid)
                samples = len(fast.get("/api/cluster/samples?seconds=86400")[1]["t"])
                print(
                    f"sampling at 20/s for {args.sample_seconds:g} s: RSS {before:.1f} ->"
                    f" {after:.1f} MiB, {samples} samples kept (ring of 3600)"
                )
            finally:
                fast.stop()
        finally:
            console.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
