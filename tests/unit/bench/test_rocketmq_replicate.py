"""The RocketMQ replicator benchmark's pure parts: its arguments and its report (every run
beside the ceiling, as a fraction of its msgs/s). The processes are tried by running it."""

from __future__ import annotations

from typing import Any

import pytest

from bench import rocketmq_replicate
from bench.report import machine


def run(name: str, stored_rate: float | None, **more: Any) -> dict[str, Any]:
    return {
        "name": name, "msgs_per_s": 41_000.0, "confirmed": 100, "failed": {"SinkTimeout": 2},
        "ack_p50_ms": 1.25, "ack_p99_ms": 9.0, "e2e_p50_ms": 2.0, "e2e_p99_ms": 11.0,
        "e2e_max_ms": 20.0, "stored": 100, "stored_per_s": stored_rate,
        "cpu_s": {"producer": 1.5, "broker B": 2.25}, **more,
    }  # fmt: skip


def test_render_puts_each_run_beside_the_ceiling() -> None:
    args = vars(rocketmq_replicate.parse_args(["--duration", "5", "--rate", "1000"]))
    report = {
        "date": "2026-11-26T20:00:00",
        "machine": machine(),
        "args": args,
        "note": "a note",
        "runs": [
            run("ceiling", 40_000.0, cpu_us_per_msg={"broker B": 22.5}),
            run(
                "replicated A -> B",
                30_000.0,
                offered_rate=20_000,
                offered_share=0.5,
                producing_per_s=28_000.0,
                draining_per_s=35_000.0,
            ),
            run("x", None),
        ],
    }
    md = rocketmq_replicate.render(report)
    rows = [ln for ln in md.splitlines() if ln.startswith("| ")][1:]
    # the share is of the destination's view (stored/s), the same for every run
    assert (
        rows[0]
        == "| ceiling | 40000 | 1.00 | 41000 | 100 | 2 | 1.2 | 9.0 | 2.0 | 11.0 | 20.0 | 100 |"
    )
    assert rows[1].startswith("| replicated A -> B | 30000 | 0.75 | 41000 |")
    assert rows[2].startswith("| x | - | - | 41000 |")
    assert all(r.endswith("| 20.0 | 100 |") for r in rows)
    assert "paced at 1000 msgs/s" in md and "Note: a note" in md
    nproc = machine()["nproc"]
    assert (
        "CPU s during ceiling: broker B 2.2 (22.5 µs/msg), producer 1.5; all of them 22.5 µs/msg,"
        f" so at most {nproc * 1e6 / 22.5:.0f} msgs/s on {nproc} CPUs." in md
    )
    assert "producer paced at 20000 msgs/s (0.5x the ceiling's stored/s)" in md
    assert "while the producer ran: 28000/s; draining the backlog after it: 35000/s" in md


@pytest.mark.parametrize(
    "argv",
    [
        ["--size", "7"], ["--duration", "0"], ["--rate", "-1"], ["--max-in-flight", "0"],
        ["--parts", "replicated"], ["--parts", "ceiling,nope"], ["--offered", "0"],
        ["--slow-duty", "0"], ["--slow-duty", "1.5"], ["--limit-rate", "0"],
    ],
)  # fmt: skip
def test_bad_arguments_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        rocketmq_replicate.parse_args(argv)


def test_parts_are_put_in_their_order() -> None:
    args = rocketmq_replicate.parse_args(["--parts", "rate,ceiling", "--offered", "1,0.25"])
    assert args.parts == "ceiling,rate" and args.offered == [1.0, 0.25]
