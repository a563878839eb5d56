"""Both RocketMQ sinks against a real ``metaledger broker`` registered in a real metaledger node:
bodies with all 256 byte values, keys, tags and properties read back from the broker (PULL)
byte-exact and in order per queue, each future's result the queue offset PULL shows the
message at (single sends and batches), a given UNIQ_KEY and flag kept; a broker killed
mid-stream: every message confirmed is in the broker's log after its restart, at the offset
its future gave, and nothing is confirmed that is not."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import threading

import pytest

from nameserver.client import Client
from replicator.sinks.base import OutMessage, Sink
from replicator.sinks.errors import QueueFailed, SinkError
from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig
from tests.integration.replicator.broker_env import QUEUES, Env, pull_all

pytestmark = [pytest.mark.integration]


def messages(topic: str, n: int) -> list[OutMessage]:
    out = []
    for i in range(n):
        body = bytes(range(256))[i % 256 :] + bytes(range(256))[: i % 256] + i.to_bytes(4, "big")
        props = {"REDIS_START": str(i), "REDIS_DB": str(i % 16), "note": "δ ünïcode ✓"}
        out.append(OutMessage(topic, i % QUEUES, body, "SET", f"key-{i} k2", props, i + 1))
    return out


def with_ids(msgs: list[OutMessage]) -> list[OutMessage]:
    """Two messages in three carry their own UNIQ_KEY (the RocketMQ replicator keeps the
    source id) and a flag (the codec sink only: the wheel's core can do neither)."""
    return [
        dataclasses.replace(m, uniq_key=f"SRC{i:08X}", flag=i) if i % 3 else m
        for i, m in enumerate(msgs)
    ]


async def send_all(sink: Sink, msgs: list[OutMessage]) -> list[int | BaseException]:
    await sink.start()
    try:
        assert sink.queue_count(msgs[0].topic) == QUEUES
        futures = [await sink.submit(m) for m in msgs]
        return await asyncio.gather(*futures, return_exceptions=True)
    finally:
        await sink.close()


def check_read_back(env: Env, msgs: list[OutMessage], offsets: list[int | BaseException]) -> None:
    topic = msgs[0].topic
    for q in range(QUEUES):
        stored = pull_all(env.broker.addr, topic, q)
        sent = [m for m in msgs if m.queue_id == q]
        # each future gave the queue offset the broker shows its message at
        at = [o for m, o in zip(msgs, offsets, strict=True) if m.queue_id == q]
        assert at == [s.queue_offset for s in stored], f"queue {q}: offsets"
        assert [s.body for s in stored] == [m.body for m in sent], (
            f"queue {q}",
            [int.from_bytes(s.body[-4:], "big") for s in stored][:20],
        )
        for s, m in zip(stored, sent, strict=True):
            assert s.properties["KEYS"] == m.keys and s.tags == m.tags
            assert {k: s.properties[k] for k in m.properties} == m.properties
            assert s.queue_id == q and "UNIQ_KEY" in s.properties
            if m.uniq_key:
                assert s.properties["UNIQ_KEY"] == m.uniq_key
            assert s.flag == m.flag


@pytest.mark.parametrize("batch", [1, 64], ids=["single", "batched"])
def test_codec_sink_round_trip_byte_exact(env: Env, batch: int) -> None:
    topic = env.topic(f"SinkCodec{batch}")
    msgs = with_ids(messages(topic, 300))
    with Client(env.node.endpoints, timeout_s=10) as routes:
        config = RocketMQSinkConfig(topics=(topic,), max_batch_messages=batch)
        sink = RocketMQSink(config, routes)
        results = asyncio.run(send_all(sink, msgs))
        assert all(isinstance(r, int) for r in results), results[:5]
        assert [sink.confirmed(topic, q) for q in range(QUEUES)] == [75] * QUEUES
        assert sink.confirmed_offset(topic, 3) == 300
    check_read_back(env, msgs, results)


def test_wheel_sink_round_trip_byte_exact(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("rocketmq.client", reason="pip install rocketmq==0.4.4")
    from replicator.sinks.wheel import WheelSink, WheelSinkConfig

    monkeypatch.setenv("HOME", str(env.root))  # the C++ core logs to $HOME/logs/rocketmq-cpp
    msgs = messages(env.topic("SinkWheel"), 120)
    with Client(env.node.endpoints, timeout_s=10) as routes:
        sink = WheelSink(WheelSinkConfig(env.namesrv, ("SinkWheel",), threads=4), routes)
        results = asyncio.run(send_all(sink, msgs))
        assert all(isinstance(r, int) for r in results), results[:5]
        assert [sink.confirmed("SinkWheel", q) for q in range(QUEUES)] == [30] * QUEUES
    check_read_back(env, msgs, results)


@pytest.mark.parametrize("comes_back", [True, False], ids=["restarted", "gone"])
def test_broker_killed_mid_stream_never_confirms_falsely(env: Env, comes_back: bool) -> None:
    """kill -9 with messages in flight. Restarted at once: every message is confirmed in the
    end, after resends. Gone: the sends after the kill fail (bounded attempts). Either way
    every confirmed message is in the log after a restart, in order."""
    topic = env.topic(f"SinkKill{comes_back}")
    msgs = messages(topic, 3000)
    results: list[int | BaseException] = []
    killed = threading.Event()

    async def run() -> None:
        with Client(env.node.endpoints, timeout_s=10) as routes:
            config = RocketMQSinkConfig(
                topics=(topic,), max_in_flight=256, send_timeout_ms=3000,
                max_attempts=30 if comes_back else 3,
                retry_backoff_ms=100, max_backoff_ms=500, connect_timeout_ms=1000,
            )  # fmt: skip
            sink = RocketMQSink(config, routes)
            await sink.start()
            futures: list[asyncio.Future[int]] = []
            for i, m in enumerate(msgs):
                try:
                    futures.append(await sink.submit(m))
                except QueueFailed as exc:  # the queue failed for good: later submits refused
                    failed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
                    failed.set_exception(exc)
                    futures.append(failed)
                if i == 1000:
                    # kill -9 mid-stream (messages in flight), restart on a thread
                    loop = asyncio.get_running_loop()
                    loop.run_in_executor(None, kill_and_restart)
            results.extend(await asyncio.gather(*futures, return_exceptions=True))
            for q in range(QUEUES):
                # confirmed counts are exactly the leading run of successes per queue
                per_queue = [r for m, r in zip(msgs, results, strict=True) if m.queue_id == q]
                lead = next(
                    (i for i, r in enumerate(per_queue) if not isinstance(r, int)), len(per_queue)
                )
                assert sink.confirmed(topic, q) == lead
            assert sink.resends > 0 or not comes_back
            print(f"resends: {sink.resends}")
            await sink.close()

    def kill_and_restart() -> None:
        assert env.broker.proc is not None
        os.kill(env.broker.proc.pid, signal.SIGKILL)
        env.broker.proc.wait(10)
        killed.set()
        if comes_back:
            restart(env)

    try:
        asyncio.run(run())
    finally:
        if env.broker.proc is not None and env.broker.proc.poll() is not None:
            restart(env)  # the read-back below and the module's later tests need it
    assert killed.is_set()
    assert all(isinstance(r, int | SinkError) for r in results)
    confirmed = [m for m, r in zip(msgs, results, strict=True) if isinstance(r, int)]
    if comes_back:
        assert len(confirmed) == len(msgs)  # the broker came back within the retries
    else:
        assert 0 < len(confirmed) < len(msgs)
    logs = {q: pull_all(env.broker.addr, topic, q) for q in range(QUEUES)}
    for m, r in zip(msgs, results, strict=True):
        if isinstance(r, int):  # the offset given is the confirmed copy's (after rewinds too)
            s = logs[m.queue_id][r]
            assert (s.queue_offset, s.body) == (r, m.body), f"{m.offset}: offset {r}"
    for q in range(QUEUES):
        stored = [s.body for s in logs[q]]
        sent = [m.body for m in confirmed if m.queue_id == q]
        assert set(sent) <= set(stored), f"queue {q}: a confirmed message is not in the log"
        # in order: the confirmed messages are a subsequence of the log (copies of a rewound
        # tail may come before their last run)
        assert _in_order(stored, sent), f"queue {q}: not in order"


def restart(env: Env) -> None:
    """Start the killed broker and wait for its role: until metaledger tells a restarted
    replica it is the master, it knows no confirm offset and shows consumers nothing (a pull
    answers PULL_NOT_FOUND at the offset asked), which would read back as an empty queue."""
    env.broker.start()
    env.broker.wait_logged(b"broker: master now")


def _in_order(stored: list[bytes], sent: list[bytes]) -> bool:
    it = iter(stored)
    return all(any(b == s for b in it) for s in sent)
