"""Failover without loss (issue 17, "What must hold"): one run of the scenario, real processes.

A real metaledger node, three real ``metaledger broker`` replicas of one group (SYNC_MASTER,
policy totalReplicas 3, inSyncReplicas 2, short replica heartbeat timeout) and a producer
sending continuously over the remoting protocol. The master is killed with SIGKILL once per kill
point the caller gives (after that many more acknowledged sends), restarted and caught up.
:func:`run_failover` returns what was measured and asserts what must hold:

- metaledger elects a new master from the in-sync set the group had at the kill, at a higher
  master epoch, and it answers PUT_OK within seconds (kill to first PUT_OK is measured);
- every message the producer saw acknowledged (code 0) is consumable from the new master
  (PULL_MESSAGE from queue offset 0 to the queue's max of every queue); duplicates (a send
  retried after its answer was lost) are counted, not failed: delivery is at-least-once;
- a consumer group's offset committed before the kill (UPDATE_CONSUMER_OFFSET, durable in
  metaledger once flushed) is never lower when asked after it (QUERY_CONSUMER_OFFSET);
- the old master restarted on its data dir rejoins as a slave, its unacknowledged tail is
  cut, and the three commit logs end at the same offset, byte-identical (compared in the
  files under each ``<data-dir>/store/commitlog`` after every replica stopped).

The replica processes and the commit-log files are in ``failover_procs``. The producer retries a refused or failed send with the same body against the master it
finds in ``Client.replica_group`` (as RocketMQ's producer retries, research/rocketmq-clients.md).
Every process is started on free 127.0.0.1 ports and stopped by its PID.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nameserver.client import Client, GroupPolicy, NotFound, QueueData, ReplicaGroupInfo
from rmq.codes import RequestCode
from rmq.connection import ConnectionFailure, RemotingConnection
from rmq.message import decode_records, properties_text
from tests.cluster.broker.failover_procs import Replica

TOPIC = "FailoverTopic"
QUEUES = 4
CONSUMER_GROUP = "fo-consumers"
#: a new master must answer PUT_OK within this many seconds of the kill
FAILOVER_DEADLINE_S = 20.0


@dataclass
class Producer:
    """``workers`` tasks sending SEND_MESSAGE_V2 with unique bodies to the group's master;
    a send is retried (same body) until it is acknowledged with code 0."""

    client: Client
    group: str
    workers: int = 4
    acked: list[tuple[bytes, str, float]] = field(default_factory=list)  # body, master, when
    codes: collections.Counter[str] = field(default_factory=collections.Counter)
    stopping: bool = False
    master: str = ""
    _conns: dict[str, RemotingConnection] = field(default_factory=dict)
    _opened: list[RemotingConnection] = field(default_factory=list)
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _seq: Iterator[int] = field(default_factory=itertools.count)
    _refreshed: float = 0.0

    async def refresh(self) -> None:
        if time.monotonic() - self._refreshed < 0.1:
            await asyncio.sleep(0.05)
            return
        self._refreshed = time.monotonic()
        g = await asyncio.to_thread(self.client.replica_group, self.group)
        self.master = g.master_address

    async def conn(self, addr: str) -> RemotingConnection:
        c = self._conns.get(addr)
        if c is None or c.closed:
            host, _, port = addr.rpartition(":")
            c = await RemotingConnection.connect(host, int(port), timeout_s=2.0)
            self._opened.append(c)  # workers connect at once: every one is closed
            self._conns[addr] = c
        return c

    async def worker(self, w: int) -> None:
        while not self.stopping:
            body = f"m{next(self._seq):07d}|".encode() + bytes(range(256))  # unique over rounds
            while not self.stopping:
                addr = self.master
                try:
                    if not addr:
                        raise ConnectionFailure("no master yet")
                    c = await self.conn(addr)
                    reply = await c.request(
                        RequestCode.SEND_MESSAGE_V2, send_header(self.group, w % QUEUES), body, 5.0
                    )
                except (ConnectionFailure, OSError, TimeoutError) as exc:
                    self.codes[type(exc).__name__] += 1
                    await self.refresh()
                    continue
                self.codes[str(reply.code)] += 1
                if reply.code == 0:
                    self.acked.append((body, addr, time.monotonic()))
                    break
                await self.refresh()

    def start(self, master: str) -> None:
        self.stopping = False
        self.master = master
        self._tasks = [asyncio.create_task(self.worker(w)) for w in range(self.workers)]

    async def halt(self) -> None:
        """Stop sending: each worker ends after its send in flight (a wedged one is cut)."""
        self.stopping = True
        _, late = await asyncio.wait(self._tasks, timeout=10) if self._tasks else (set(), set())
        for t in late:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def close(self) -> None:
        for c in self._opened:
            await c.close()


def send_header(group: str, queue_id: int) -> dict[str, object]:
    """SEND_MESSAGE_V2's fields ``a``..``n`` (research/broker.md §3), WAIT=true."""
    return {
        "a": "fo-producer", "b": TOPIC, "c": "TBW102", "d": QUEUES, "e": queue_id, "f": 0,
        "g": int(time.time() * 1000), "h": 0, "i": properties_text({"WAIT": "true"}), "j": 0,
        "k": False,
        "m": False, "n": group,
    }  # fmt: skip


async def request(addr: str, code: int, ext: dict[str, object], timeout: float = 5.0) -> Any:
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port))
    try:
        return await c.request(code, ext, timeout_s=timeout)
    finally:
        await c.close()


async def runtime_info(addr: str) -> dict[str, str]:
    reply = await request(addr, RequestCode.GET_BROKER_RUNTIME_INFO, {})
    assert reply.code == 0, reply.remark
    table: dict[str, str] = json.loads(reply.body)["table"]
    return table


async def max_offset(addr: str, queue_id: int) -> int:
    reply = await request(addr, RequestCode.GET_MAX_OFFSET, {"topic": TOPIC, "queueId": queue_id})
    assert reply.code == 0, reply.remark
    return int(reply.ext_fields["offset"])


async def pull_all(addr: str, deadline_s: float = 30.0) -> list[bytes]:
    """Every body of every queue of the topic on ``addr``, from offset 0 to the queue's max."""
    host, _, port = addr.rpartition(":")
    c = await RemotingConnection.connect(host, int(port))
    bodies: list[bytes] = []
    try:
        for q in range(QUEUES):
            end = await max_offset(addr, q)
            offset, deadline = 0, time.monotonic() + deadline_s
            while offset < end:
                assert time.monotonic() < deadline, f"queue {q}: stuck at {offset} of {end}"
                reply = await c.request(
                    RequestCode.PULL_MESSAGE,
                    {
                        "consumerGroup": "fo-checker", "topic": TOPIC, "queueId": q,
                        "queueOffset": offset, "maxMsgNums": 32, "sysFlag": 0x4, "commitOffset": 0,
                        "suspendTimeoutMillis": 0, "subscription": "*", "subVersion": 0,
                        "expressionType": "TAG",
                    },
                )  # fmt: skip
                if reply.code == 0:
                    bodies += (m.body for m in decode_records(reply.body))
                elif reply.code not in (19, 20, 21):
                    raise AssertionError(f"pull queue {q} at {offset}: {reply.code} {reply.remark}")
                else:
                    await asyncio.sleep(0.05)
                offset = int(reply.ext_fields.get("nextBeginOffset", offset))
    finally:
        await c.close()
    return bodies


async def until(pred: Callable[[], Any], timeout: float, what: str, every: float = 0.1) -> Any:
    """Poll ``pred`` (sync or async) until truthy; an exception counts as not yet."""
    deadline, last = time.monotonic() + timeout, None
    while True:
        try:
            value = pred()
            if asyncio.iscoroutine(value):
                value = await value
        except (OSError, ConnectionFailure, TimeoutError, NotFound, KeyError) as exc:
            value = last = exc
        else:
            last = value
        if value and not isinstance(value, BaseException):
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what}: not within {timeout:g} s (last: {last!r})")
        await asyncio.sleep(every)


@dataclass
class Result:
    """One kill: where, how long until the new master's first PUT_OK, what was found."""

    kill_after: int
    acked_at_kill: int
    failover_s: float
    acked: int
    duplicates: int
    old_id: int
    new_id: int
    cut_bytes: int
    log_end: int
    codes: dict[str, int]

    def line(self) -> str:
        return (
            f"kill after {self.kill_after} acks ({self.acked_at_kill} in all): failover"
            f" {self.failover_s:.2f} s, so far {self.acked} acked, {self.duplicates} duplicates,"
            f" master {self.old_id} -> {self.new_id}, old master's tail cut {self.cut_bytes} B,"
            f" all at {self.log_end} B; answers {self.codes}"
        )


async def run_failover(
    root: Path, endpoints: list[str], group: str, kill_points: list[int], rng: random.Random
) -> list[Result]:
    """A fresh group ``group`` (data dirs and logs under ``root``) whose master is killed
    once per entry of ``kill_points``, each time after that many more acknowledged sends;
    the killed master is restarted and caught up before the next kill. At the end every
    replica stops and their commit-log files are compared."""
    client = Client(endpoints, timeout_s=5.0)
    reps = [Replica(root, endpoints, group, i) for i in range(3)]
    producer = Producer(client, group)
    try:
        await setup_group(reps, client, group)
        results = []
        for kill_after in kill_points:
            results.append(await kill_round(reps, client, group, producer, kill_after, rng))
        for r in reps:
            assert await asyncio.to_thread(r.stop) == 0, r.log_tail()
        logs = [await asyncio.to_thread(r.commit_log) for r in reps]
        assert [len(x) for x in logs] == [results[-1].log_end] * 3
        assert logs[0] == logs[1] == logs[2], "commit logs differ"
        return results
    finally:
        await producer.halt()
        await producer.close()
        for r in reps:
            r.stop()
        client.close()


def group_info(client: Client, group: str) -> ReplicaGroupInfo:
    return client.replica_group(group)


async def setup_group(reps: list[Replica], client: Client, group: str) -> None:
    call = asyncio.to_thread
    # replica 0 first: the first to register is the master; the policy before the slaves
    await call(reps[0].start)
    await until(lambda: group_info(client, group).master_address == reps[0].addr, 20, "r0 master")
    await call(client.replica_set_policy, group, GroupPolicy(3, 2, 1, False, 1 << 30))
    for r in reps[1:]:
        await call(r.start)
    try:
        await until(
            lambda: len(group_info(client, group).sync_state_set) == 3, 60, "in-sync set of 3"
        )
    except AssertionError as exc:  # say which replica stayed out, and what each one logged
        tails = "\n".join(f"----- {r.log_path.name} -----\n{r.log_tail()}" for r in reps)
        raise AssertionError(f"{exc}\ngroup: {group_info(client, group)}\n{tails}") from None
    await until(
        lambda: client.route_topic_create(TOPIC, [QueueData(group, QUEUES, QUEUES, 6)]),
        20,
        "topic created on the group",
    )


async def _commit_offsets(client: Client, group: str, master: str) -> dict[int, int]:
    """A consumer group commits each queue's current end; returned once durable (flushed
    to metaledger, where a new master loads them)."""
    committed: dict[int, int] = {}
    for q in range(QUEUES):
        committed[q] = await max_offset(master, q)
        reply = await request(
            master,
            RequestCode.UPDATE_CONSUMER_OFFSET,
            {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC, "queueId": q,
             "commitOffset": committed[q]},
        )  # fmt: skip
        assert reply.code == 0, reply.remark
    prefix = f"/brokers/{group}/offsets/{CONSUMER_GROUP}/{TOPIC}/"

    def flushed() -> bool:
        kvs = client.get(prefix, prefix=True).kvs
        stored = {int(kv.key.decode().rsplit("/", 1)[1]): int(kv.value) for kv in kvs}
        return all(stored.get(q, -1) >= v for q, v in committed.items())

    await until(flushed, 10, "offsets flushed to metaledger")
    return committed


async def kill_round(
    reps: list[Replica],
    client: Client,
    group: str,
    producer: Producer,
    kill_after: int,
    rng: random.Random,
) -> Result:
    call = asyncio.to_thread
    before = await call(group_info, client, group)
    assert len(before.sync_state_set) == 3, before
    producer.start(before.master_address)
    start = len(producer.acked)
    await until(lambda: len(producer.acked) >= start + 20, 60, "first sends")
    committed = await _commit_offsets(client, group, before.master_address)

    # the kill point: `kill_after` acknowledged sends later and a random fraction of a second
    base = len(producer.acked)
    await until(lambda: len(producer.acked) >= base + kill_after, 60, f"{kill_after} more acks")
    await asyncio.sleep(rng.uniform(0, 0.3))
    before = await call(group_info, client, group)
    old = next(r for r in reps if r.addr == before.master_address)
    assert old.proc is not None
    os.kill(old.proc.pid, signal.SIGKILL)
    killed_at = time.monotonic()
    old.proc.wait(10)
    acked_at_kill = len(producer.acked)

    def first_new_ack() -> float | None:
        return next((t for _, a, t in producer.acked if a != old.addr and t >= killed_at), None)

    t_new = await until(first_new_ack, FAILOVER_DEADLINE_S, "first PUT_OK on a new master")
    failover_s = t_new - killed_at
    await until(lambda: len(producer.acked) >= acked_at_kill + 40, 20, "sends after failover")
    await producer.halt()

    after = await call(group_info, client, group)
    assert after.master_id != before.master_id, "a new master"
    assert after.master_id in before.sync_state_set, (before.sync_state_set, after.master_id)
    assert after.master_epoch > before.master_epoch
    new = next(r for r in reps if r.addr == after.master_address)

    # every acknowledged message is there, at least once
    got = collections.Counter(await pull_all(new.addr))
    acked = [b for b, _, _ in producer.acked]
    missing = [b[:12] for b in acked if got[b] == 0]
    assert not missing, f"{len(missing)} acknowledged messages lost: {missing[:5]}"
    assert len(set(acked)) == len(acked), "each body acknowledged once"
    duplicates = sum(n - 1 for n in got.values() if n > 1)

    # offsets never go backwards
    for q, v in committed.items():
        reply = await request(
            new.addr,
            RequestCode.QUERY_CONSUMER_OFFSET,
            {"consumerGroup": CONSUMER_GROUP, "topic": TOPIC, "queueId": q},
        )
        assert reply.code == 0, (q, reply.code, reply.remark)
        assert int(reply.ext_fields["offset"]) >= v, (q, reply.ext_fields, v)

    # the old master comes back on its data dir: a slave, its tail cut, caught up
    old_log = await call(old.commit_log)
    await call(old.start)
    await until(
        lambda: any(
            r.broker_id == before.master_id and r.alive for r in group_info(client, group).replicas
        ),
        20,
        "old master alive again",
    )
    end = int((await runtime_info(new.addr))["commitLogMaxOffset"])

    async def all_at_end() -> bool:
        infos = [await runtime_info(r.addr) for r in reps]
        return all(int(i["commitLogMaxOffset"]) == end for i in infos)

    await until(all_at_end, 30, f"every replica's commit log at {end}")
    info = await runtime_info(old.addr)
    assert info["writable"] == "false", info
    final = await until(
        lambda: (g := group_info(client, group)) and len(g.sync_state_set) == 3 and g,
        30,
        "the old master back in the in-sync set",
    )
    assert final.master_id == after.master_id, "the old master did not take over"
    # the new master's log, read from its files while nothing is written
    now = await call(new.commit_log)
    assert len(now) == end, (len(now), end)
    common = 0
    while common < min(len(old_log), end) and old_log[common] == now[common]:
        common += 1
    return Result(
        kill_after,
        acked_at_kill,
        failover_s,
        len(acked),
        duplicates,
        before.master_id,
        after.master_id,
        len(old_log) - common,
        end,
        dict(producer.codes),
    )
