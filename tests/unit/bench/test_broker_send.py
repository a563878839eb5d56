"""The broker benchmark's load side against an in-test fake broker, and its pure parts.

The fake answers SEND_MESSAGE_V2 like a broker that stored the message (SUCCESS with msgId,
queueId, queueOffset), out of order within each read, so replies must be matched by opaque;
it can refuse every n-th send and close a connection on request. No server process runs.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
from pathlib import Path
from typing import Any

import pytest

from bench import broker_send, broker_send_report
from bench.rmq_client import (
    PULL_MESSAGE,
    PULL_NOT_FOUND,
    SEND_MESSAGE_V2,
    RemotingConnection,
    RmqTarget,
    SendFailed,
    record_bodies,
    send_batch_request,
    send_v2_request,
)
from rmq.batch import BatchItem, decode_batch
from rmq.codec import FrameDecoder, RemotingCommand, decode_frame, encode
from rmq.message import Host, StoredMessage, encode_properties, parse_properties
from rmq.message import encode as encode_record

V2_FIELDS = set("abcdefghijkmn")  # l (maxReconsumeTimes) only for retry topics


class FakeBroker:
    """Answers SEND_MESSAGE_V2 with SUCCESS (every ``refuse_every``-th send with code 1) and
    keeps the message per queue; answers GET_MAX_OFFSET, HEART_BEAT and PULL_MESSAGE (stored
    records, or PULL_NOT_FOUND after waiting up to 50 ms for a message) like a broker."""

    def __init__(self, refuse_every: int = 0, refuse_first: int = 0) -> None:
        self.refuse_every = refuse_every
        self.refuse_first = refuse_first
        self.requests: list[RemotingCommand] = []
        self.queues: dict[int, list[bytes]] = collections.defaultdict(list)
        self.arrived = asyncio.Event()
        self.writers: list[asyncio.StreamWriter] = []
        self.max_batch = 0  # most requests decoded from one read: pipelining
        self.server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> str:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", port)
        return f"127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.append(writer)
        decoder = FrameDecoder()
        while data := await reader.read(65536):
            requests = decoder.feed(data)
            self.max_batch = max(self.max_batch, len(requests))
            answers = [await self._answer(request) for request in requests]
            writer.write(b"".join(encode(a) for a in reversed(answers)))
        writer.close()

    async def _answer(self, request: RemotingCommand) -> RemotingCommand:
        self.requests.append(request)
        n = len(self.requests)
        if request.code == SEND_MESSAGE_V2:
            if n <= self.refuse_first:
                return request.response(17, "topic[BenchTopic] not exist, apply first please!")
            if self.refuse_every and n % self.refuse_every == 0:
                return request.response(1, "in-sync replicas not enough")
            queue = self.queues[int(request.ext_fields["e"])]
            queue.append(request.body)
            self.arrived.set()
            fields = {"msgId": f"{n:032X}", "queueId": request.ext_fields["e"]}
            return request.response(0, ext_fields={**fields, "queueOffset": len(queue) - 1})
        if request.code == 30:  # GET_MAX_OFFSET
            queue = self.queues[int(request.ext_fields["queueId"])]
            return request.response(0, ext_fields={"offset": len(queue)})
        if request.code == PULL_MESSAGE:
            f = request.ext_fields
            queue, offset = self.queues[int(f["queueId"])], int(f["queueOffset"])
            if offset >= len(queue):
                self.arrived.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.arrived.wait(), 0.05)
            got = queue[offset : offset + int(f["maxMsgNums"])]
            records = b"".join(
                encode_record(StoredMessage(topic=f["topic"], body=b, queue_offset=offset + i))
                for i, b in enumerate(got)
            )
            code = 0 if got else PULL_NOT_FOUND
            return request.response(
                code, ext_fields={"nextBeginOffset": offset + len(got)}, body=records
            )
        return request.response(0, request.body.decode())  # HEART_BEAT, echo tests

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.close()
        await self.server.wait_closed()


def bench_args(**over: Any) -> argparse.Namespace:
    args = broker_send.parse_args(["--no-plot"])
    args.duration, args.warmup, args.progress, args.concurrency = 0.4, 0.1, 0.2, 8
    for k, v in over.items():
        setattr(args, k, v)
    return args


def test_send_v2_request_carries_the_v2_header() -> None:
    request = send_v2_request("T", 3, b"body", "broker-a", queue_nums=4)
    frame = encode(request)
    decoded = decode_frame(frame[4:])
    assert decoded.code == SEND_MESSAGE_V2 == 310
    assert set(decoded.ext_fields) == V2_FIELDS
    f = decoded.ext_fields
    assert (f["a"], f["b"], f["c"], f["d"], f["e"], f["n"]) == (
        "bench-producer",
        "T",
        "TBW102",
        "4",
        "3",
        "broker-a",
    )
    assert (f["f"], f["h"], f["j"], f["k"], f["m"]) == ("0", "0", "0", "false", "false")
    props = parse_properties(f["i"])
    assert props["WAIT"] == "true" and len(props["UNIQ_KEY"]) == 32
    assert decoded.body == b"body"
    other = send_v2_request("T", 3, b"", "broker-a").ext_fields["i"]
    assert other != f["i"]  # a new UNIQ_KEY per message


def test_send_batch_request_carries_the_v2_header_with_batch() -> None:
    items = [(0, b"one", encode_properties({"UNIQ_KEY": "A" * 32, "KEYS": "k1"}))]
    items.append((0, b"two", encode_properties({"UNIQ_KEY": "B" * 32})))
    decoded = decode_frame(encode(send_batch_request("T", 2, items, "broker-a"))[4:])
    assert decoded.code == 320  # SEND_BATCH_MESSAGE
    f = decoded.ext_fields
    v2 = send_v2_request("T", 2, b"", "broker-a").ext_fields  # the same header but for:
    same = set(V2_FIELDS) - {"g", "i", "m"}  # bornTimestamp, properties, batch
    assert set(f) == V2_FIELDS and {k: f[k] for k in same} == {k: v2[k] for k in same}
    assert f["m"] == "true"
    assert f["i"] == "WAIT\x01true\x02"  # the header's properties: WAIT only
    assert decode_batch(decoded.body) == [
        BatchItem(0, b"one", {"UNIQ_KEY": "A" * 32, "KEYS": "k1"}),
        BatchItem(0, b"two", {"UNIQ_KEY": "B" * 32}),
    ]


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])  # the script's default is uvloop
def test_load_against_a_fake_broker_counts_acked_sends_and_latency(loop: str) -> None:
    fake = FakeBroker()

    async def run() -> dict[str, Any]:
        address = await fake.start()
        try:
            target = RmqTarget(address, "BenchTopic", "broker-a", queues=4, connections=2)
            lines: list[str] = []
            result = await broker_send.measure(
                "fake", target, bench_args(), lambda: 0.0, lines.append
            )
            assert lines and all(line.startswith("  fake:") for line in lines)
            return result
        finally:
            await fake.stop()

    result = broker_send._run_loop(run(), loop)
    assert result["sends"] > 0 and result["errors"] == {}
    assert result["sends_per_s"] == round(result["sends"] / result["window_s"])
    assert 0 < result["p50_ms"] <= result["p99_ms"] <= result["max_ms"]
    sends = [r for r in fake.requests if r.code == SEND_MESSAGE_V2]
    assert len(sends) >= result["sends"] + 1  # + the warm-up send
    assert {r.ext_fields["e"] for r in sends} == {"0", "1", "2", "3"}
    assert all(len(r.body) == 1024 for r in sends[1:])
    # 8 producers pipelined on 2 connections: several requests per connection in flight
    assert fake.max_batch > 1


def test_replies_are_matched_by_opaque_not_by_order() -> None:
    fake = FakeBroker()  # answers each read's requests in reverse order

    async def run() -> None:
        address = await fake.start()
        conn = await RemotingConnection.open(address)
        try:
            bodies = [f"request {i}" for i in range(20)]
            replies = await asyncio.gather(
                *(conn.call(RemotingCommand.request(99, body=b.encode())) for b in bodies)
            )
            assert [r.remark for r in replies] == bodies
            assert fake.max_batch > 1
        finally:
            conn.close()
            await fake.stop()

    asyncio.run(run())


def test_e2e_consumes_through_pull_and_measures_produce_to_consume() -> None:
    fake = FakeBroker()

    async def run() -> dict[str, Any]:
        address = await fake.start()
        try:
            target = RmqTarget(address, "BenchTopic", "broker-a", queues=4, connections=2)
            return await broker_send.measure(
                "fake", target, bench_args(e2e=True), lambda: 0.0, print
            )
        finally:
            await fake.stop()

    result = asyncio.run(run())
    assert result["sends"] > 0 and result["errors"] == {}
    # every message acked inside the window was pulled (the fake stores before it answers)
    assert result["e2e_received"] >= result["sends"]
    assert 0 < result["e2e_p50_ms"] <= result["e2e_p99_ms"]
    heartbeats = [r for r in fake.requests if r.code == 34]
    assert len(heartbeats) == 1 and b"bench-consumer" in heartbeats[0].body
    pulls = [r for r in fake.requests if r.code == PULL_MESSAGE]
    assert {r.ext_fields["queueId"] for r in pulls} == {"0", "1", "2", "3"}


def test_refused_sends_are_counted_by_code_not_as_acked() -> None:
    fake = FakeBroker(refuse_every=3)

    async def run() -> dict[str, Any]:
        address = await fake.start()
        try:
            target = RmqTarget(address, "BenchTopic", "broker-a", connections=1)
            return await broker_send.measure("fake", target, bench_args(), lambda: 0.0, print)
        finally:
            await fake.stop()

    result = asyncio.run(run())
    sends = len([r for r in fake.requests if r.code == SEND_MESSAGE_V2])
    assert result["errors"]["code 1"] > 0
    assert result["sends"] + result["errors"]["code 1"] <= sends
    assert result["errors"]["code 1"] >= sends // 3 - 64  # refusals near the window are cut


def test_open_waits_for_the_port_and_the_first_put_ok() -> None:
    """The broker's port opens late and its first sends are refused (the topic is not
    there yet): ``open`` retries both, then the warm-up send is acknowledged."""
    from tests.harness import free_ports

    fake = FakeBroker(refuse_first=3)
    port = free_ports(1)[0]

    async def run() -> None:
        target = RmqTarget(f"127.0.0.1:{port}", "BenchTopic", "broker-a", connections=2)
        opening = asyncio.create_task(target.open(timeout_s=20))
        await asyncio.sleep(0.5)
        assert not opening.done()
        await fake.start(port)
        try:
            await asyncio.wait_for(opening, 20)
            await target.send(0, b"after")
        finally:
            await target.close()
            await fake.stop()

    asyncio.run(run())
    codes = [(r.body, r.code) for r in fake.requests]
    assert codes == [(b"warm-up", SEND_MESSAGE_V2)] * 4 + [(b"after", SEND_MESSAGE_V2)]


def test_send_failed_names_the_code() -> None:
    exc = SendFailed(12, "flush slave timeout")
    assert exc.code == 12 and str(exc) == "code 12: flush slave timeout"
    assert broker_send._reason(exc) == "code 12"
    assert broker_send._reason(TimeoutError()) == "TimeoutError"


def test_record_bodies_splits_a_pull_answer() -> None:
    host = Host("127.0.0.1", 10911)

    def record(i: int, body: bytes) -> bytes:
        return encode_record(
            StoredMessage(
                topic="BenchTopic",
                queue_id=0,
                queue_offset=i,
                physical_offset=1000 * i,
                body=body,
                born_timestamp=1,
                born_host=host,
                store_timestamp=2,
                store_host=host,
            )
        )

    bodies = [b"", b"\x00\xff" * 10, bytes(range(256))]
    assert record_bodies(b"".join(record(i, b) for i, b in enumerate(bodies))) == bodies


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert broker_send.percentile(values, 0.5) == 50
    assert broker_send.percentile(values, 0.99) == 99
    assert broker_send.percentile([7.0], 0.99) == 7
    assert broker_send.percentile([], 0.5) is None
    assert broker_send.latency_summary([2_000_000, 1_000_000], "e2e_") == {
        "e2e_p50_ms": 1.0,
        "e2e_p99_ms": 2.0,
        "e2e_max_ms": 2.0,
    }


def test_ratios_and_report_name_every_system() -> None:
    results = [
        {"system": "jetstream-r3", "sends_per_s": 2000},
        {"system": "async", "sends_per_s": 1000},
        {"system": "quorum2of3", "sends_per_s": 900},
        {"system": "sync2", "skipped": "metaledger broker not available"},
    ]
    got = {(r["of"], r["to"]): r["ratio"] for r in broker_send_report.ratios(results)}
    assert got == {("quorum2of3", "jetstream-r3"): 0.45, ("quorum2of3", "async"): 0.9}
    for r in results[:3]:
        r.update(
            setup="s", p50_ms=1.0, p99_ms=2.0, max_ms=3.0, errors={}, client_cpu_pct=1,
            server_cpu_pct=2,
        )  # fmt: skip
    args = bench_args()
    report = {
        "date": "2026-11-26T14:00:00",
        "machine": {"nproc": 2, "cpu_model": "x"},
        "params": {k: getattr(args, k) for k in collections.ChainMap(vars(args))},
        "results": results,
        "ratios": broker_send_report.ratios(results),
    }
    text = broker_send_report.markdown(report)
    assert "| sync2 | skipped: metaledger broker not available |" in text
    assert "| quorum2of3 / jetstream-r3 | 0.45 |" in text


def test_median_run_and_failed_rounds() -> None:
    runs = [{"system": "a", "sends_per_s": v} for v in (30, 10, 20, 40)]
    assert broker_send_report.median_run(runs) == {
        "system": "a",
        "sends_per_s": 20,
        "rounds_sends_per_s": [30, 10, 20, 40],
    }
    assert broker_send_report.median_run(runs[:1]) == {"system": "a", "sends_per_s": 30}
    failed = {"system": "a", "failed": "RuntimeError: x"}
    assert broker_send_report.median_run([runs[0], failed]) == failed
    skipped = {"system": "a", "skipped": "why"}
    assert broker_send_report.median_run([skipped, skipped]) == skipped


def test_a_missing_broker_is_a_skipped_line_not_a_pass(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import broker_group

    monkeypatch.setattr(
        broker_group, "unavailable_reason", lambda: "metaledger broker not available"
    )
    result = broker_send.run_system("quorum2of3", bench_args())
    assert result == {"system": "quorum2of3", "skipped": "metaledger broker not available"}
    assert "quorum2of3: skipped: metaledger broker not available" in capsys.readouterr().out


def test_the_group_command_lines_parse_with_the_metaledger_cli(tmp_path: Path) -> None:
    """The commands bench.broker_group runs (but the broker's own, whose CLI is new) are
    valid ``metaledger`` command lines, with the values meant."""
    from bench import broker_group as bg
    from nameserver.cli import build_parser

    parser = build_parser()

    def parse(argv: list[str]) -> argparse.Namespace:
        assert argv[:3] == bg.cli()
        return parser.parse_args(argv[3:])

    mode = bg.MODES["quorum2of3"]
    up = parse(bg.cluster_up_argv(23000, tmp_path))
    assert (up.nodes, up.base_port, up.data_dir) == (1, 23000, str(tmp_path))
    policy = parse(bg.policy_argv(mode, "127.0.0.1:23000"))
    assert (policy.name, policy.cluster, policy.endpoints) == (
        bg.GROUP,
        bg.CLUSTER,
        "127.0.0.1:23000",
    )
    assert (policy.total_replicas, policy.in_sync_replicas, policy.min_in_sync_replicas) == (
        3,
        2,
        2,
    )
    topic = parse(bg.topic_argv(4, "127.0.0.1:23000"))
    assert (topic.topic, topic.broker, topic.read_queues, topic.write_queues) == (
        bg.TOPIC,
        [bg.GROUP],
        4,
        4,
    )
    route = parse(bg.route_argv("127.0.0.1:23000"))
    assert (route.topic, route.output) == (bg.TOPIC, "json")
    doc = {
        "brokerDatas": [
            {"brokerName": "other", "brokerAddrs": {"0": "10.0.0.9:10911"}},
            {"brokerName": bg.GROUP, "brokerAddrs": {"0": "127.0.0.1:23010", "1": "x:1"}},
        ]
    }
    assert bg.master_of(doc) == "127.0.0.1:23010"
    assert bg.master_of({"brokerDatas": [{"brokerName": bg.GROUP, "brokerAddrs": {}}]}) == ""
    replica = bg.replica_argv(mode, tmp_path / "r1", 23010, "127.0.0.1:23000")
    assert "--broker-id" not in replica  # metaledger assigns ids and names the master
    assert replica[3:5] == ["broker", "--group"] and "SYNC_MASTER" in replica
    assert [(m.replicas, m.in_sync_replicas) for m in bg.MODES.values()] == [
        (1, 1),
        (2, 1),
        (3, 1),
        (2, 2),
        (3, 2),
    ]


def test_arguments_are_checked() -> None:
    with pytest.raises(SystemExit):
        broker_send.parse_args(["--systems", "kafka"])
    with pytest.raises(SystemExit):
        broker_send.parse_args(["--size", "4"])
    assert broker_send.parse_args(["--systems", "jetstream-r3, single"]).systems == [
        "jetstream-r3",
        "single",
    ]
