"""bench.broker_failover and bench.broker_catchup: their arguments and report tables (the
runs themselves start real processes: ``python -m bench.broker_failover``, ``.broker_catchup``)."""

from __future__ import annotations

import pytest

from bench import broker_catchup, broker_failover


def test_failover_arguments_and_table() -> None:
    args = broker_failover.parse_args(["--runs", "3", "--heartbeat-timeout-ms", "1500"])
    assert (args.runs, args.mode, args.heartbeat_timeout_ms) == (3, "quorum2of3", 1500)
    with pytest.raises(SystemExit):
        broker_failover.parse_args(["--mode", "single"])  # nothing to fail over to
    with pytest.raises(SystemExit):
        broker_failover.parse_args(["--runs", "0"])
    run = {"kill_after_s": 1.2, "acked_before_kill": 900, "old_master": "a:1", "errors": {}}
    report = {
        "date": "2026-11-26T14:00:00",
        "params": {
            "mode": "quorum2of3",
            "heartbeat_timeout_ms": 2000,
            "concurrency": 8,
            "size": 1024,
            "timeout": 60.0,
        },
        "runs": [
            {**run, "failover_s": 3.2, "new_master": "b:2", "errors": {"code 1": 5}},
            {**run, "failover_s": None, "new_master": None},
        ],
        "summary": {"runs": 2, "failed": 1, "p50_s": 3.2, "max_s": 3.2},
    }
    md = broker_failover.markdown(report)
    assert "| 1 | 1.2 | 900 | 3.200 | b:2 | code 1 5 |" in md
    assert "| 2 | 1.2 | 900 | - | - |  |" in md
    assert "p50 3.200 s, max 3.200 s over 2 runs (1 without a new master within 60.0 s)" in md


def test_catchup_arguments_and_table() -> None:
    assert broker_catchup.parse_args([]).count == 100_000
    assert broker_catchup.parse_args(["--count", "1000000"]).count == 1_000_000
    with pytest.raises(SystemExit):
        broker_catchup.parse_args(["--batch", "0"])
    report = {
        "date": "2026-11-26T14:00:00",
        "params": {"mode": "single", "count": 10, "size": 1024, "queues": 4, "batch": 32},
        "result": {
            "messages": 10,
            "pulls": 4,
            "seconds": 0.1,
            "msgs_per_s": 100,
            "body_mb_per_s": 0.1,
            "wire_mb_per_s": 0.2,
            "fill_msgs_per_s": 50,
        },
    }
    md = broker_catchup.markdown(report)
    assert "| 10 | 4 | 0.1 | 100 | 0.1 | 0.2 |" in md and "filled at 50 msgs/s" in md
