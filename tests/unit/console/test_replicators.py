"""The Replicators page's fold of the records replicator jobs keep in metaledger: one row
per job with its workers (the active or leading one marked), source and destination, lag,
heartbeat round trip and alarms."""

from __future__ import annotations

import json
from typing import Any

from console import replicators
from console.replicators import ELECTIONS, RECORDS, fold

NOW = 1_000.0


def _kv(key: str, doc: Any, created: int = 1) -> tuple[bytes, bytes, int]:
    value = doc if isinstance(doc, str) else json.dumps(doc)
    return key.encode(), value.encode(), created


def _redis_status(**over: Any) -> dict[str, Any]:
    doc = {
        "kind": "redis", "job": "orders", "worker": "w1", "updated": NOW - 1.0,
        "source": "redis://127.0.0.1:6379", "topic": "orders-events", "phase": "streaming",
        "parsed_offset": 900, "confirmed_offset": 800, "acked_offset": 800,
        "checkpoint_offset": 700, "lag_bytes": 100, "lag_s": 0.25, "in_flight": 3,
        "sent": 40, "confirmed": 37, "last_error": None,
    }  # fmt: skip
    doc.update(over)
    return doc


def test_a_redis_job_has_its_active_worker_first_and_its_standbys() -> None:
    out = fold(
        [
            _kv(f"{ELECTIONS.decode()}orders/{0x2A:x}", "w2", created=9),
            _kv(f"{ELECTIONS.decode()}orders/{0x1F:x}", "w1", created=5),
            _kv(f"{RECORDS.decode()}redis/orders/status", _redis_status()),
        ],
        NOW,
    )
    (job,) = out["jobs"]
    assert job["kind"] == "redis" and job["job"] == "orders"
    assert [(w["name"], w["lease"], w["active"]) for w in job["workers"]] == [
        ("w1", "1f", True),
        ("w2", "2a", False),
    ]
    assert job["source"] == "redis://127.0.0.1:6379"
    assert job["destination"] == "topic orders-events"
    assert (job["lag_bytes"], job["lag_s"], job["in_flight"]) == (100, 0.25, 3)
    assert job["offsets"]["checkpoint_offset"] == 700
    assert job["age_s"] == 1.0
    assert job["alarms"] == []


def test_a_redis_job_with_an_error_a_stale_status_or_none_raises_alarms() -> None:
    out = fold([_kv("/replicators/redis/a/status", _redis_status(job="a", last_error="EOF",
                                                                updated=NOW - 30))], NOW)  # fmt: skip
    assert out["jobs"][0]["alarms"] == ["EOF", "a: status not updated for 30 s"]
    out = fold([_kv("replicators/redis/b/7", "w9")], NOW)
    (job,) = out["jobs"]
    assert job["active"] == "w9" and job["alarms"] == ["no active worker publishes a status"]


def _rmq_status(worker: str, leader: bool, queues: list[dict[str, Any]], **over: Any) -> Any:
    doc = {
        "kind": "rocketmq", "job": "mirror", "worker": worker, "updated": NOW - 0.5,
        "source": "127.0.0.1:9876", "dest": "127.0.0.1:9886", "source_cluster": "A",
        "dest_cluster": "B", "last_failure": "", "leader": leader, "queues": queues,
        "heartbeat": {"enabled": leader, "rtt_ms": 4.5, "link_down": False, "last_seen_s": 0.4},
    }  # fmt: skip
    doc.update(over)
    return doc


def _queue(partition: str, lag: int, lag_s: float, **over: Any) -> dict[str, Any]:
    q = {"partition": partition, "dest_topic": "t", "max_offset": 10 + lag, "pulled_offset": 10,
         "committed_offset": 10, "lag_messages": lag, "lag_s": lag_s, "in_flight": 1, "sent": 5,
         "acked": 4, "alarms": [], "stopped": None}  # fmt: skip
    q.update(over)
    return q


def test_a_rocketmq_job_sums_its_workers_queues() -> None:
    p = "/replicators/rocketmq/mirror"
    out = fold(
        [
            _kv(f"{p}/workers/w1", "", created=3),
            _kv(f"{p}/workers/w2", "", created=4),
            _kv(f"{p}/claims/t/broker-a/0", "w1"),
            _kv(f"{p}/claims/t/broker-a/1", "w2"),
            _kv(f"{p}/w/w1/status", _rmq_status("w1", True, [_queue("t/broker-a/0", 3, 1.5)])),
            _kv(f"{p}/w/w2/status", _rmq_status("w2", False, [
                _queue("t/broker-a/1", 2, 0.5, alarms=["offset lost"], stopped="gone")])),
        ],
        NOW,
    )  # fmt: skip
    (job,) = out["jobs"]
    assert [(w["name"], w["active"]) for w in job["workers"]] == [("w1", True), ("w2", False)]
    assert job["source"] == "127.0.0.1:9876 (cluster A)"
    assert job["destination"] == "127.0.0.1:9886 (cluster B)"
    assert (job["lag_messages"], job["lag_s"], job["in_flight"]) == (5, 1.5, 2)
    assert (job["sent"], job["confirmed"], job["claims"]) == (10, 8, 2)
    assert job["rtt_ms"] == 4.5
    assert [q["partition"] for q in job["queues"]] == ["t/broker-a/0", "t/broker-a/1"]
    assert job["queues"][1]["worker"] == "w2"
    assert job["alarms"] == ["t/broker-a/1: offset lost", "t/broker-a/1: stopped (gone)"]


def test_a_rocketmq_heartbeat_link_down_and_a_failure_are_alarms() -> None:
    hb = {"enabled": True, "rtt_ms": None, "link_down": True, "last_seen_s": 31.0}
    doc = _rmq_status("w1", True, [], heartbeat=hb, last_failure="SinkError: refused")
    (job,) = fold([_kv("/replicators/rocketmq/mirror/w/w1/status", doc)], NOW)["jobs"]
    assert job["rtt_ms"] is None
    assert job["alarms"] == [
        "w1: SinkError: refused",
        "w1: heartbeat link down (last seen 31.0 s ago)",
    ]


def test_records_that_are_not_json_or_of_no_known_shape_are_skipped() -> None:
    out = fold([_kv("/replicators/redis/x/status", "{not json"),
                _kv("/replicators/other", "1"), _kv("/replicators/rocketmq/j/w/w1/status", "[]")],
               NOW)  # fmt: skip
    kinds = [(j["kind"], j["job"], j["alarms"]) for j in out["jobs"]]
    assert kinds == [
        ("redis", "x", ["no active worker publishes a status"]),
        ("rocketmq", "j", ["no worker publishes a status"]),
    ]


def test_overview_reads_both_prefixes_bounded() -> None:
    from nameserver.client import KeyValue, RangeResult

    calls: list[tuple[bytes, int, int]] = []

    class Fake:
        def get(self, key: bytes, prefix: bool = False, limit: int = 0, keys_only: bool = False,
                revision: int = 0) -> RangeResult:  # fmt: skip
            calls.append((key, limit, revision))
            if key == RECORDS:
                kv = KeyValue(b"/replicators/redis/j/status", json.dumps(_redis_status()).encode(),
                              3, 3, 1, 0)  # fmt: skip
                return RangeResult(42, [kv], False, 1)
            return RangeResult(42, [], True, 0)

    out = replicators.overview(Fake(), now=NOW)  # type: ignore[arg-type]
    assert calls == [(RECORDS, replicators.MAX_KEYS, 0), (ELECTIONS, replicators.MAX_KEYS, 42)]
    assert out["revision"] == 42 and out["truncated"] is True
    assert [j["job"] for j in out["jobs"]] == ["j"]
