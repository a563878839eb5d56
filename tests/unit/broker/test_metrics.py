"""The broker's metrics: what a scrape shows, read from the replica's view and its counters."""

from __future__ import annotations

import socket
import urllib.request

from broker.metrics import BrokerMetrics, SlaveView, View


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_scrape_shows_role_offsets_slaves_sends_and_pull_latency() -> None:
    view = View(
        role="MASTER",
        epoch=3,
        max_offset=5000,
        confirm_offset=4000,
        in_sync_replicas=2,
        slaves=[SlaveView(1, 4000, True), SlaveView(2, 1000, False)],
    )
    m = BrokerMetrics("broker-a", lambda: view)
    m.sent("PUT_OK")
    m.sent("PUT_OK")
    m.sent("FLUSH_SLAVE_TIMEOUT")
    m.pulled(0.002)
    port = _free_port()
    m.serve("127.0.0.1", port)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    finally:
        m.close()
    lines = set(text.splitlines())
    assert 'metaledger_broker_role{group="broker-a",role="MASTER"} 1.0' in lines
    assert 'metaledger_broker_role{group="broker-a",role="SLAVE"} 0.0' in lines
    assert 'metaledger_broker_epoch{group="broker-a"} 3.0' in lines
    assert 'metaledger_broker_commitlog_max_offset{group="broker-a"} 5000.0' in lines
    assert 'metaledger_broker_in_sync_replicas{group="broker-a"} 2.0' in lines
    assert 'metaledger_broker_slave_lag_bytes{group="broker-a",slave_id="1"} 1000.0' in lines
    assert 'metaledger_broker_slave_lag_bytes{group="broker-a",slave_id="2"} 4000.0' in lines
    assert 'metaledger_broker_slave_connected{group="broker-a",slave_id="2"} 0.0' in lines
    assert 'metaledger_broker_sends_total{group="broker-a",status="PUT_OK"} 2.0' in lines
    assert (
        'metaledger_broker_sends_total{group="broker-a",status="FLUSH_SLAVE_TIMEOUT"} 1.0' in lines
    )
    assert 'metaledger_broker_pull_latency_seconds_count{group="broker-a"} 1.0' in lines


def test_the_view_is_read_at_each_scrape() -> None:
    state = {"offset": 1}
    m = BrokerMetrics("g", lambda: View(role="SLAVE", max_offset=state["offset"]))
    from prometheus_client import generate_latest

    assert b'metaledger_broker_commitlog_max_offset{group="g"} 1.0' in generate_latest(m.registry)
    state["offset"] = 7
    assert b'metaledger_broker_commitlog_max_offset{group="g"} 7.0' in generate_latest(m.registry)


def test_scrape_shows_clients_by_protocol_language_and_version() -> None:
    from prometheus_client import generate_latest

    from broker.clients import ClientKey

    view = View(
        clients={
            ClientKey("remoting", "java", "v4_9_4"): 2,
            ClientKey("grpc", "node_js", "1.0.8"): 1,
        }
    )
    lines = set(generate_latest(BrokerMetrics("g", lambda: view).registry).decode().splitlines())
    assert (
        'metaledger_broker_clients{group="g",language="java",protocol="remoting",'
        'version="v4_9_4"} 2.0' in lines
    )
    assert (
        'metaledger_broker_clients{group="g",language="node_js",protocol="grpc",'
        'version="1.0.8"} 1.0' in lines
    )


def test_scrape_shows_consumer_lag_and_inflight_per_group_and_queue() -> None:
    from prometheus_client import generate_latest

    from rmq.consume_stats import QueueOffsets

    view = View(
        consumer_queues=[
            ("PULL", QueueOffsets("T", "g", 0, 10, 3, 3)),
            ("POP", QueueOffsets("T", "g", 1, 10, 2, 6, inflight=2)),
        ]
    )
    lines = set(generate_latest(BrokerMetrics("g", lambda: view).registry).decode().splitlines())
    assert (
        'metaledger_broker_consumer_lag{consumer_group="PULL",group="g",queue="0",topic="T"} 7.0'
        in lines
    )
    assert (
        'metaledger_broker_consumer_lag{consumer_group="POP",group="g",queue="1",topic="T"} 6.0'
        in lines
    )
    assert (
        'metaledger_broker_consumer_inflight{consumer_group="POP",group="g",queue="1",topic="T"}'
        " 2.0" in lines
    )
