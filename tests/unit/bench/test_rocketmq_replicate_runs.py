"""The RocketMQ replicator benchmark's pure helpers for the runs with a real worker: the
steady rate of the rate-limit run, the RSS against the backlog of the slow-destination run,
the phase rates of a replicated run, VmRSS parsing, and their report sections."""

from __future__ import annotations

from typing import Any

import pytest

from bench import rocketmq_replicate
from bench import rocketmq_replicate_runs as runs
from bench.report import machine

STATUS = "Name:\tpython3\nVmHWM:\t   61440 kB\nVmRSS:\t   53248 kB\nThreads:\t4\n"


def test_vm_rss_is_read_in_mib() -> None:
    assert runs.vm_rss_mib(STATUS) == 52.0
    assert runs.vm_rss_mib(STATUS, "VmHWM") == 60.0
    assert runs.vm_rss_mib("Name:\tx\n") is None


def test_steady_rate_leaves_out_the_first_and_last_second() -> None:
    # a burst of 500 at the start, then 2000/s for 10 s, then a straggler tail of 3
    stamps = [0] * 500 + [1000 + i // 2 for i in range(20_000)] + [11_400, 11_500, 11_600]
    out = runs.steady_rate(stamps)
    # window [1000, 10_600): 9.6 s at 2 per ms
    assert out["steady_window_s"] == pytest.approx(9.6)
    assert out["steady_messages"] == 19_200
    assert out["steady_rate"] == pytest.approx(2000.0)


@pytest.mark.parametrize("stamps", [[], [5, 5, 5], [0, 1500]])
def test_steady_rate_of_too_short_a_span_is_unknown(stamps: list[int]) -> None:
    assert runs.steady_rate(stamps)["steady_rate"] is None


def test_rss_summary_sets_the_rss_against_the_backlog() -> None:
    samples: list[dict[str, Any]] = [
        {"t": 0, "rss_mib": 50.0, "backlog": 0},
        {"t": 1, "rss_mib": None, "backlog": 10},  # a missed reading is left out
        {"t": 2, "rss_mib": 53.0, "backlog": 40_960},
        {"t": 3, "rss_mib": 54.0, "backlog": 1000},
    ]
    out = runs.rss_summary(samples, size=1024)
    assert out["rss_first_mib"] == 50.0 and out["rss_peak_mib"] == 54.0
    assert out["rss_growth_mib"] == 4.0
    assert out["backlog_peak"] == 40_960 and out["backlog_peak_mib"] == 40.0
    assert out["rss_at_backlog_peak_mib"] == 53.0
    assert runs.rss_summary([{"t": 0, "rss_mib": None}], 1024)["rss_peak_mib"] is None


def test_behind_and_per_second() -> None:
    assert runs.behind(100, 40) == 60 and runs.behind(40, 100) == 0
    assert runs.behind(None, 1) is None and runs.behind(1, None) is None
    samples: list[dict[str, Any]] = [{"t": 0.0, "stored": 0}, {"t": 0.5, "stored": 100}, {"t": 1.5, "stored": None},
               {"t": 2.5, "stored": 700}]  # fmt: skip
    assert runs.per_second(samples) == [200.0]


def test_phase_rates_split_at_the_producers_end() -> None:
    samples = [{"t": float(t), "stored": n} for t, n in
               enumerate([0, 1000, 2000, 3000, 6000, 9000, 9000])]  # fmt: skip
    out = runs.phase_rates(samples, ended_t=3.0)
    assert out["producing_per_s"] == 1000.0  # 0 -> 3000 over 3 s
    assert out["draining_per_s"] == 3000.0  # 3000 -> 9000 over 2 s (t=5, first at the end)
    assert runs.phase_rates(samples, None) == {"producing_per_s": None, "draining_per_s": None}


def test_render_shows_the_slow_and_rate_sections() -> None:
    slow: dict[str, Any] = {
        "name": "slow destination (30% duty), --max-in-flight 256", "offered_rate": 20_000,
        "duty": 0.3, "acked_after_drain": 62_396,
        **runs.rss_summary([{"rss_mib": 52.8, "backlog": 0}, {"rss_mib": 53.9, "backlog": 42_236}], 1024),
        "vm_hwm_mib": 54.0, "drain_s": 2.0,
    }  # fmt: skip
    rate = {
        "name": "--rate 2000",
        "limit": 2000,
        **runs.steady_rate([i // 2 for i in range(20_000)]),
    }
    rate["error"] = (rate["steady_rate"] - 2000) / 2000
    report = {
        "date": "2026-11-26T20:00:00", "machine": machine(),
        "args": vars(rocketmq_replicate.parse_args([])), "note": "", "runs": [],
        "slow": slow, "rate": rate,
    }  # fmt: skip
    md = rocketmq_replicate.render(report)
    assert "SIGSTOPped for 70% of every second" in md and "(all 62396 acknowledged)" in md
    assert "| 52.8 | 53.9 | 1.1 | 42236 | 41.2 | 53.9 | 54.0 | 2 |" in md
    assert "| 2000 | 2000.0 | +0.00% | 8.0 | 15998 |" in md
