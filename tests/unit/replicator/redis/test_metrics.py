"""replicator.redis.metrics: the job's Prometheus samples and the full-sync progress line."""

from __future__ import annotations

import io
import logging
import socket
import urllib.request

import pytest

from replicator.cli import parse_listen
from replicator.redis.metrics import RedisMetrics, SyncProgress


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_event_counters_and_active() -> None:
    m = RedisMetrics("job1")
    assert m.value("active") == 0
    assert m.value("messages_sent_total") == 0
    m.pass_started()
    assert m.value("active") == 1 and m.value("passes_total") == 1
    for _ in range(3):
        m.sent()
    m.confirmed()
    m.full_sync()
    m.partial_resync()
    m.partial_resync()
    assert m.value("messages_sent_total") == 3
    assert m.value("messages_confirmed_total") == 1
    assert m.value("full_syncs_total") == 1
    assert m.value("partial_resyncs_total") == 2
    m.pass_ended()
    assert m.value("active") == 0
    m.pass_started()
    assert m.value("passes_total") == 2


def test_rdb_bytes_and_total_only_when_known() -> None:
    m = RedisMetrics("j")
    m.rdb_begin(1000)
    assert m.value("rdb_total_bytes") == 1000 and m.value("full_sync_in_progress") == 1
    m.rdb_received(400)
    m.rdb_received(600)
    assert m.value("rdb_bytes") == 1000
    m.rdb_end()
    assert m.value("full_sync_in_progress") == 0
    # a diskless transfer has no size: the total's sample goes away; this sync's bytes restart
    m.rdb_begin(None)
    assert m.value("rdb_total_bytes") is None
    assert m.value("rdb_bytes") == 0
    m.rdb_received(5)
    assert m.value("rdb_bytes") == 5
    assert m.value("rdb_received_bytes_total") == 1005  # the counter never goes back


def test_observe_sets_gauges_from_status_and_skips_missing() -> None:
    m = RedisMetrics("j")
    m.observe(
        {
            "parsed_offset": 500,
            "confirmed_offset": 450,
            "acked_offset": 400,
            "checkpoint_offset": None,  # nothing committed yet: the gauge keeps no value
            "lag_bytes": 50,
            "lag_s": 0.25,
            "in_flight": 7,
            "spooled_bytes": 4096,
        }
    )
    assert m.value("parsed_offset") == 500
    assert m.value("confirmed_offset") == 450
    assert m.value("acked_offset") == 400
    assert m.value("checkpoint_offset") is None
    assert m.value("lag_bytes") == 50
    assert m.value("lag_seconds") == 0.25
    assert m.value("in_flight_messages") == 7
    assert m.value("spooled_bytes") == 4096
    m.observe({"parsed_offset": 900, "checkpoint_offset": 450})
    assert m.value("parsed_offset") == 900 and m.value("checkpoint_offset") == 450


def test_two_jobs_in_one_process_do_not_share_a_registry() -> None:
    a, b = RedisMetrics("a"), RedisMetrics("b")
    a.sent()
    assert a.value("messages_sent_total") == 1 and b.value("messages_sent_total") == 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_serve_prometheus_text() -> None:
    m = RedisMetrics("served")
    port = free_port()
    m.serve("127.0.0.1", port)
    try:
        m.pass_started()
        m.observe({"lag_bytes": 12})
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    finally:
        m.close()
    assert 'metaledger_redis_active{job="served"} 1.0' in text
    assert 'metaledger_redis_lag_bytes{job="served"} 12.0' in text
    assert 'metaledger_redis_passes_total{job="served"} 1.0' in text


def test_parse_listen() -> None:
    assert parse_listen("127.0.0.1:9121") == ("127.0.0.1", 9121)
    assert parse_listen("[::1]:80") == ("::1", 80)
    for bad in ("9121", ":9121", "host:", "host:x", "host:70000"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_progress_log_lines_once_a_second(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    p = SyncProgress(io.StringIO(), clock=clock, tty=False)
    with caplog.at_level(logging.INFO, logger="replicator.redis.metrics"):
        p.begin(10_000_000)
        for _ in range(10):  # 1 MB every 0.25 s: a line every 4 chunks
            clock.now += 0.25
            p.advance(1_000_000)
        p.end()
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3 == p.lines  # at 1.0 s, 2.0 s, then the final one
    assert lines[0] == "full sync: RDB 4.0 of 10.0 MB (40%), 4.0 MB/s"
    assert lines[1] == "full sync: RDB 8.0 of 10.0 MB (80%), 4.0 MB/s"
    assert lines[2].startswith("full sync: RDB 10.0 of 10.0 MB (100%), 4.0 MB/s in 2.5 s")


def test_progress_bar_on_a_terminal_and_diskless_without_total() -> None:
    clock = FakeClock()
    out = io.StringIO()
    p = SyncProgress(out, clock=clock, tty=True)
    p.begin(None)
    clock.now += 2
    p.advance(3_000_000)
    p.end()
    text = out.getvalue()
    assert text.startswith("\rRDB 3.0 MB (size unknown: diskless), 1.5 MB/s")
    assert text.endswith("in 2.0 s\n")
    out2 = io.StringIO()
    p2 = SyncProgress(out2, clock=clock, tty=True)
    p2.begin(4_000_000)
    clock.now += 1
    p2.advance(1_000_000)
    assert "[#######                       ] 1.0 of 4.0 MB (25%)" in out2.getvalue()


def test_metrics_drive_the_progress() -> None:
    clock = FakeClock()
    p = SyncProgress(io.StringIO(), clock=clock, tty=True)
    m = RedisMetrics("j", p)
    m.rdb_begin(2_000_000)
    clock.now += 1.5
    m.rdb_received(1_000_000)
    m.rdb_end()
    assert p.lines == 2
