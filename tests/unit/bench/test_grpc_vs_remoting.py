"""bench.grpc_vs_remoting's pure parts: the batch ack body the broker's BATCH_ACK_MESSAGE
reads, the ratios, the Markdown table and the arguments."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench import grpc_vs_remoting as bench
from broker.pop.processor import _bits
from rmq.headers import PopMessageResponseHeader
from rmq.message import StoredMessage


def test_batch_ack_body_names_each_popped_offset_from_its_queue_start() -> None:
    header = PopMessageResponseHeader(
        pop_time=1000, invisible_time=60000, revive_qid=0, rest_num=0,
        start_offset_info="0 1 5;0 3 0", msg_offset_info="0 1 5,7,20;0 3 0",
    )  # fmt: skip
    records = [
        StoredMessage(topic="T", body=b"", queue_id=q, queue_offset=o)
        for q, o in ((1, 5), (1, 7), (1, 20))
    ] + [StoredMessage(topic="T", body=b"", queue_id=3, queue_offset=0)]
    doc = json.loads(bench.batch_ack_body("G", "T", "broker-a", header, records))
    assert doc["brokerName"] == "broker-a"
    acks = {a["q"]: a for a in doc["acks"]}
    assert {q: (a["so"], _bits(a["b"])) for q, a in acks.items()} == {
        1: (5, [0, 2, 15]),
        3: (0, [0]),
    }
    assert all(
        (a["c"], a["t"], a["pt"], a["it"], a["rq"]) == ("G", "T", 1000, 60000, 0)
        for a in acks.values()
    )


def result(path: str, ops: int, **kw: Any) -> dict[str, Any]:
    return {
        "path": path, "ops_per_s": ops, "p50_ms": 1.0, "p99_ms": 2.0, "max_ms": 3.0,
        "errors": {}, "client_cpu_pct": 50, "server_cpu_pct": 60, **kw,
    }  # fmt: skip


def test_ratios_and_the_table_name_every_path() -> None:
    results = [
        result("grpc-send", 500),
        result("remoting-send", 1000, errors={"code 1": 2}),
        {"path": "client5-send", "skipped": "no --rmq5-venv given"},
        result("grpc-receive", 300),
        result("remoting-pop", 600),
        {"path": "remoting-pull", "failed": "OSError: boom"},
    ]
    ratios = bench.ratios(results)
    assert ratios == [
        {"of": "grpc-send", "to": "remoting-send", "ratio": 0.5},
        {"of": "grpc-receive", "to": "remoting-pop", "ratio": 0.5},
    ]
    args = bench.parse_args([])
    report = {
        "date": "2026-12-05T17:00:00",
        "machine": {"nproc": 2, "cpu_model": "cpu"},
        "params": {k: getattr(args, k) for k in (
            "size", "concurrency", "duration", "warmup", "count", "connections", "queues",
            "messages", "loop",
        )},
        "results": results,
        "ratios": ratios,
    }  # fmt: skip
    md = bench.markdown(report)
    assert "| grpc-send | 500 | 1.00 | 2.00 | 3.0 | 0 | 50 | 60 |" in md
    assert "| remoting-send | 1000 | 1.00 | 2.00 | 3.0 | code 1: 2 | 50 | 60 |" in md
    assert "| client5-send | no --rmq5-venv given |" in md
    assert "| remoting-pull | FAILED: OSError: boom |" in md
    assert "| grpc-send / remoting-send | 0.5 |" in md


def test_arguments_are_checked() -> None:
    args = bench.parse_args(["--paths", "grpc-send, remoting-pop"])
    assert args.paths == ["grpc-send", "remoting-pop"] and args.e2e is False
    for bad in (["--paths", "nope"], ["--size", "4"], ["--messages", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(bad)
