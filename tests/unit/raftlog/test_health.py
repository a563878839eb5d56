"""raftlog.health: states, one log line per transition, rate-limited reminders, backoff."""

from __future__ import annotations

import errno
import logging

import pytest

from raftlog.health import Backoff, Health, State

ENOSPC = OSError(errno.ENOSPC, "No space left on device")
EIO = OSError(errno.EIO, "Input/output error")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def lines(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str, bool]]:
    return [(r.levelno, r.getMessage(), r.exc_info is not None) for r in caplog.records]


def test_a_fault_is_logged_once_reminded_and_cleared_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    health = Health(reminder_s=30, clock=clock)
    caplog.set_level(logging.INFO, logger="raftlog.health")
    assert health.state == State.OK and health.reason() == "" and not health.refuses_writes
    assert health.fault("raft-log", ENOSPC)
    for _ in range(100):  # every retry reports again: no new line
        clock.now += 0.25
        assert not health.fault("raft-log", ENOSPC)
    assert health.state == State.NOSPACE and health.refuses_writes
    assert "NOSPACE (ENOSPC) on the Raft log" in health.reason()
    clock.now += 10
    health.fault("raft-log", ENOSPC)  # 35 s after entering: one reminder
    assert health.clear("raft-log")
    assert not health.clear("raft-log")
    got = lines(caplog)
    assert [level for level, _, _ in got] == [logging.WARNING, logging.WARNING, logging.INFO]
    assert "degraded: NOSPACE (ENOSPC) on the Raft log" in got[0][1]
    assert "still degraded after 35s" in got[1][1]
    assert "works again after 35.0s" in got[2][1]
    assert not any(exc for _, _, exc in got)  # known errnos: no traceback
    assert health.state == State.OK


def test_the_worst_source_wins_and_only_write_paths_refuse_writes() -> None:
    health = Health()
    health.fault("snapshot", ENOSPC)
    assert health.state == State.NOSPACE and not health.refuses_writes
    health.fault("change-log", EIO)
    assert [f.source for f in health.faults()] == ["snapshot", "change-log"]
    assert not health.refuses_writes
    health.fault("change-log", ENOSPC)  # the cause changed: one line, since kept
    assert health.refuses_writes
    health.clear("change-log")
    health.clear("snapshot")
    assert health.state == State.OK


def test_an_unknown_errno_gets_its_traceback_once(caplog: pytest.LogCaptureFixture) -> None:
    health = Health()
    try:
        raise OSError(errno.EROFS, "Read-only file system")
    except OSError as exc:
        health.fault("change-log", exc)
        health.fault("change-log", exc)
    assert [exc for _, _, exc in lines(caplog)] == [True]
    assert health.state == State.IO_ERROR


def test_backoff_doubles_to_its_cap_and_resets() -> None:
    b = Backoff(0.1, 1.0)
    assert not b.failing and b.due(0.0)
    delays = [b.failed(10.0) for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.failing and not b.due(10.5) and b.due(11.0)
    b.reset()
    assert not b.failing and b.due(0.0)


def test_metrics_and_health_endpoint_bodies() -> None:
    from nameserver.metrics import health_body, health_metrics, render

    health = Health()
    assert health_body(health.reason()) == (b'{"health":"true","reason":""}\n', b"200 OK")
    health.fault("raft-log", ENOSPC)
    body, status = health_body(health.reason())
    assert status == b"503 Service Unavailable"
    assert body.startswith(b'{"health":"false","reason":"NOSPACE (ENOSPC) on the Raft log')
    text = render(health_metrics(health, {"node": "n0"}))
    assert 'metaledger_degraded{cause="nospace",node="n0"} 1' in text
    assert 'metaledger_degraded{cause="io_error",node="n0"} 0' in text
    assert 'metaledger_alarm_nospace{node="n0"} 1' in text
    health.clear("raft-log")
    assert 'metaledger_alarm_nospace{node="n0"} 0' in render(health_metrics(health, {"node": "n0"}))
