"""The Redis full-sync benchmark's pure parts: the medians over rounds and their report."""

from __future__ import annotations

from typing import Any

import pytest

from bench.redis_replicate import render, summarize

MB = 1_000_000


def _run(sync_s: float, raw_s: float, worker: float, rss: float | None = 100.0) -> dict[str, Any]:
    return {
        "full_sync_s": sync_s,
        "full_sync_mb_per_s": 100 / sync_s,
        "rdb_phase_s": sync_s - 1,
        "messages": 1000,
        "replicator_peak_rss_mib": rss,
        "worker_cpu_s_per_mb": worker,
        "ratio_to_raw": sync_s / raw_s,
    }


def _rounds() -> list[dict[str, Any]]:
    # the host slows down in round 2: raw and sync both take longer, their ratio less so
    raws = [10.0, 20.0, 11.0]
    this = [30.0, 50.0, 34.0]
    base = [40.0, 66.0, 41.0]
    return [
        {
            "raw_transfer_s": raw,
            "runs": {"baseline": _run(b, raw, 0.03), "this tree": _run(t, raw, 0.02 + i / 100)},
        }
        for i, (raw, t, b) in enumerate(zip(raws, this, base, strict=True))
    ]


def test_the_ratio_is_the_median_of_each_rounds_ratio_not_a_ratio_of_medians() -> None:
    got = summarize(_rounds(), "this tree", 100 * MB)
    # the rounds' ratios 3.0, 2.5, 3.09: the median 3.0, not 34 / 11 (the medians' ratio)
    assert got["ratio_to_raw"] == pytest.approx(3.0)
    assert got["full_sync_s"] == 34.0
    assert got["raw_transfer_s"] == 11.0
    assert got["raw_mb_per_s"] == pytest.approx(100 / 11)
    assert got["worker_cpu_s_per_mb"] == pytest.approx(0.03)
    base = summarize(_rounds(), "baseline", 100 * MB)
    assert base["ratio_to_raw"] == pytest.approx(41 / 11)  # 4.0, 3.3, 3.73
    assert base["full_sync_s"] == 41.0


def test_one_round_reports_that_round() -> None:
    (one,) = _rounds()[:1]
    got = summarize([one], "this tree", 100 * MB)
    assert got["full_sync_s"] == 30.0
    assert got["ratio_to_raw"] == pytest.approx(3.0)
    assert got["raw_transfer_s"] == 10.0


def test_a_missing_number_in_a_round_takes_the_first_rounds_value() -> None:
    rounds = _rounds()
    rounds[1]["runs"]["this tree"]["replicator_peak_rss_mib"] = None
    assert summarize(rounds, "this tree", 100 * MB)["replicator_peak_rss_mib"] == 100.0


def test_the_report_shows_each_round_and_the_medians() -> None:
    rounds = _rounds()
    sync = {"keys": 1000, "value_bytes": 512, "rdb_bytes": 100 * MB, "rounds": 3}
    sync |= summarize(rounds, "this tree", 100 * MB) | {"each_round": rounds}
    sync["worker_sync_cpu_s_per_mb"] = 0.02
    sync["broker_cpu_s_per_mb"] = 0.03
    base = summarize(rounds, "baseline", 100 * MB) | {"tree": "/old"}
    base |= {"worker_sync_cpu_s_per_mb": 0.03, "broker_cpu_s_per_mb": 0.03}
    sync["baseline"] = base
    report = {
        "date": "2026-12-07T22:00:00",
        "machine": {"nproc": 2, "cpu_model": "test", "python": "3.11"},
        "args": {"queues": 4},
        "sync": sync,
    }
    md = render(report)
    assert "Ratio full sync / raw transfer: **3.0x**" in md
    assert "Medians of 3 rounds" in md
    assert "| 2 | 20.00 | 66.00 (3.30x) | 50.00 (2.50x) |" in md
    assert "**3.7x** the raw transfer" in md
