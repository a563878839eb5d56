"""The RocketMQ replicator benchmark's pure parts: its arguments and its report (every run
beside the ceiling, as a fraction of its msgs/s). The processes are tried by running it."""

from __future__ import annotations

from typing import Any

import pytest

from bench import rocketmq_replicate
from bench.report import machine


def run(name: str, rate: float | None) -> dict[str, Any]:
    return {
        "name": name, "msgs_per_s": rate, "confirmed": 100, "failed": {"SinkTimeout": 2},
        "ack_p50_ms": 1.25, "ack_p99_ms": 9.0, "e2e_p50_ms": 2.0, "e2e_p99_ms": 11.0,
        "e2e_max_ms": 20.0, "stored": 100, "stored_per_s": 39_000.0, "cpu_s": {"producer": 1.5, "broker B": 2.25},
    }  # fmt: skip


def test_render_puts_each_run_beside_the_ceiling() -> None:
    args = vars(rocketmq_replicate.parse_args(["--duration", "5", "--rate", "1000"]))
    report = {
        "date": "2026-11-26T20:00:00",
        "machine": machine(),
        "args": args,
        "note": "a note",
        "runs": [run("ceiling", 40_000.0), run("replicated A -> B", 30_000.0), run("x", None)],
    }
    md = rocketmq_replicate.render(report)
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")][1:]
    assert rows[0].startswith("| ceiling | 40000 | 1.00 | 100 | 2 | 1.2 | 9.0 | 2.0 | 11.0 |")
    assert rows[1].startswith("| replicated A -> B | 30000 | 0.75 |")
    assert rows[2].startswith("| x | - | - |")
    assert all(r.endswith("| 100 | 39000 |") for r in rows)
    assert "paced at 1000 msgs/s" in md and "Note: a note" in md
    assert "CPU s during ceiling: broker B 2.2, producer 1.5." in md


@pytest.mark.parametrize(
    "argv", [["--size", "7"], ["--duration", "0"], ["--rate", "-1"], ["--max-in-flight", "0"]]
)
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        rocketmq_replicate.parse_args(argv)
