"""Option parsing of the compaction's memory settings (``metaledger compact``, the job's
``parse_memory_size``) and of ``bench/compact_scaling.py``'s data-set and budget flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import compact_scaling
from nameserver import cli
from nameserver.cli.exitcodes import ExitCode
from snapshots.compaction import parse_memory_size, shuffle_partitions


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("512m", 512 * 2**20),
        ("2g", 2 * 2**30),
        ("2G", 2 * 2**30),
        ("300k", 300 * 2**10),
        ("64mb", 64 * 2**20),
        ("1048576", 2**20),
        (" 1t ", 2**40),
    ],
)
def test_parse_memory_size(text: str, expected: int) -> None:
    assert parse_memory_size(text) == expected


@pytest.mark.parametrize("text", ["", "m", "lots", "0", "0m", "-1m", "1.5g", "12x", "5 mib"])
def test_parse_memory_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="memory size") as info:
        parse_memory_size(text)
    assert repr(text) in str(info.value)


def _compact(tmp_path: Path, *extra: str) -> list[str]:
    return ["compact", "--segments", str(tmp_path), "--upto", "5", "--out", "x.snap", *extra]


def test_compact_cli_memory_flags(tmp_path: Path) -> None:
    args = cli.build_parser().parse_args(
        _compact(
            tmp_path, "--driver-memory", "1g", "--executor-memory", "4g", "--worker-memory", "128m"
        )
    )
    assert (args.driver_memory, args.executor_memory, args.worker_memory) == ("1g", "4g", "128m")
    args = cli.build_parser().parse_args(_compact(tmp_path))
    assert (args.driver_memory, args.executor_memory, args.worker_memory) == (None, None, None)


@pytest.mark.parametrize("flag", ["--driver-memory", "--executor-memory", "--worker-memory"])
def test_compact_cli_bad_memory_is_a_usage_error(
    tmp_path: Path, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(_compact(tmp_path, flag, "lots")) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert flag in err and "memory size 'lots'" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--distinct", "0"],
        ["--distinct", "1.5"],
        ["--distinct", "x"],
        ["--memory-budget-mb", "0"],
        ["--memory-budget-mb", "1.5"],
        ["--warm-jobs", "-1"],
        ["--warm-jobs", "two"],
    ],
)
def test_bench_rejects_bad_flags(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        compact_scaling.main(argv)
    assert info.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_generate_distinct_fraction(tmp_path: Path) -> None:
    """``--distinct`` sets the key space: 0.5 of N draws about 0.5 N (1 - e^-2) keys."""
    from snapshots import read_segments

    info = compact_scaling.generate(tmp_path / "d", 4000, distinct=0.5)
    assert info["entries"] == 4000 and info["distinct"] == 0.5
    keys = {r.key for r in read_segments(tmp_path / "d", 10**9)}
    assert 1500 < len(keys) <= 2000
    few = compact_scaling.generate(tmp_path / "f", 4000)
    assert len({r.key for r in read_segments(tmp_path / "f", 10**9)}) <= 400
    assert few["distinct"] == 0.1


def test_report_shows_warm_jobs_per_entry_and_from_one_core_to_two() -> None:
    def spark(engine: str, wall: float, fold: float, warm: list[float]) -> dict[str, object]:
        return {
            "n": 1_000_000, "engine": engine, "status": "ok", "wall_s": wall, "cpu_s": 8.0,
            "peak_rss_mb": 600, "peak_pss_mb": 550, "session_s": 1.3, "fold_s": fold,
            "write_s": 0.4, "warm_job_s": warm, "records": 90_000,
        }  # fmt: skip

    doc = {
        "date": "d", "host": {"cpus": 2, "mem_gb": 1, "load1_before": 0, "python": "3"},
        "datasets": {}, "hashes_equal": True,
        "runs": [
            {"n": 1_000_000, "engine": "local", "status": "ok", "wall_s": 4.0, "cpu_s": 4.0,
             "peak_rss_mb": 70, "peak_pss_mb": 60, "records": 90_000},
            spark("spark1", 7.4, 4.7, [4.4, 4.2]),
            spark("spark2", 6.0, 3.6, [2.8]),
        ],
    }  # fmt: skip
    text = compact_scaling.report(doc)
    # warm job: the best of the re-runs; ratios to the fold's 4.0 s (4 us per entry)
    assert "| 1e6 | spark1 | - | ok | 7.4 | 1.3 / 4.7 / 0.4 | 5.1 | 4.4, 4.2 |" in text
    assert "| 7.40 / 5.10 / 4.20 | 1.85 / 1.28 / 1.05 |" in text
    assert "| 2.8 | 6.00 / 4.00 / 2.80 | 1.50 / 1.00 / 0.70 |" in text
    assert "| 4.2 -> 2.8 (1.50x) |" in text  # the scaling table's warm column


def test_shuffle_partitions_are_a_multiple_of_the_cores() -> None:
    mib = 2**20
    assert shuffle_partitions(10 * mib, 2) == 4  # at least 2 per core
    assert shuffle_partitions(844 * mib, 2) == 8  # 7 by size, then a whole wave
    assert shuffle_partitions(844 * mib, 1) == 7
    assert shuffle_partitions(844 * mib, 3) == 9
    assert shuffle_partitions(100 * mib, 2, partition_bytes=10 * mib) == 10
    assert shuffle_partitions(0, 0) == 2  # no cores reported: one
