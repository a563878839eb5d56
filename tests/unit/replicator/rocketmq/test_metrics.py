"""The RocketMQ worker's Prometheus metrics from a status document: per-queue gauges,
user and heartbeat traffic counted apart (``kind``), ``link_up`` from the heartbeat state."""

from __future__ import annotations

from replicator.rocketmq.metrics import RocketMQMetrics

QUEUE = {
    "partition": "T/broker-a/0",
    "committed_offset": 40,
    "max_offset": 52,
    "lag_messages": 12,
    "lag_s": 1.5,
    "in_flight": 3,
    "dismissed": 1,
    "sent": 50,
    "acked": 47,
    "looped": 2,
    "heartbeat": False,
    "alarms": ["offset_lost: T/broker-a/0: ..."],
}
BEATS = {
    "partition": "rmq_sys_replicator_heartbeat/broker-a/0",
    "committed_offset": 7,
    "max_offset": 7,
    "lag_messages": 0,
    "sent": 7,
    "acked": 7,
    "heartbeat": True,
    "alarms": [],
}


def test_queue_gauges_and_kinds() -> None:
    m = RocketMQMetrics("j")
    m.observe(
        {
            "queues": [QUEUE, BEATS],
            "heartbeat": {"enabled": True, "rtt_ms": 250.0, "link_down": False},
        }
    )
    p = {"partition": "T/broker-a/0"}
    assert m.value("committed_offset", **p) == 40
    assert m.value("source_max_offset", **p) == 52
    assert m.value("lag_messages", **p) == 12
    assert m.value("lag_seconds", **p) == 1.5
    assert m.value("in_flight_messages", **p) == 3
    assert m.value("dismissed_messages", **p) == 1
    assert m.value("offset_lost_alarm", **p) == 1
    assert m.value("offset_lost_alarm", partition="rmq_sys_replicator_heartbeat/broker-a/0") == 0
    assert m.value("sent_messages_total", kind="user") == 50
    assert m.value("sent_messages_total", kind="heartbeat") == 7
    assert m.value("acked_messages_total", kind="user") == 47
    assert m.value("looped_messages_total", kind="user") == 2
    assert m.value("link_up") == 1
    assert m.value("heartbeat_rtt_seconds") == 0.25
    assert m.value("queues") == 2


def test_link_down_and_empty_document() -> None:
    m = RocketMQMetrics("j")
    assert m.value("link_up") is None  # nothing published yet: no verdict
    assert m.value("heartbeat_rtt_seconds") is None
    assert m.value("queues") == 0
    m.observe({"queues": [], "heartbeat": {"enabled": True, "rtt_ms": None, "link_down": True}})
    assert m.value("link_up") == 0
    assert m.value("heartbeat_rtt_seconds") is None
    # a worker that does not run the heartbeats (not the leader, or none configured)
    m.observe({"queues": [], "heartbeat": {"enabled": False, "link_down": False}})
    assert m.value("link_up") is None
