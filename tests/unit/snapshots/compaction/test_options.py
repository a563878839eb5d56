"""Option parsing of the compaction's memory settings (``metaledger compact``, the job's
``parse_memory_size``) and of ``bench/compact_scaling.py``'s data-set and budget flags."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from bench import compact_scaling
from nameserver import cli
from nameserver.cli.exitcodes import ExitCode
from snapshots.compaction import parse_memory_size, shuffle_partitions
from snapshots.compaction._job import in_waves


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
        ["--read-tasks", "0"],
        ["--read-tasks", "-2"],
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
            spark("spark1-cpu1", 8.0, 5.0, [4.9]),
            spark("spark2", 6.0, 3.6, [2.8]),
        ],
    }  # fmt: skip
    text = compact_scaling.report(doc)
    # warm job: the best of the re-runs; ratios to the fold's 4.0 s (4 us per entry)
    assert "| 1e6 | spark1 | - | ok | 7.4 | 1.3 / 4.7 / 0.4 | 5.1 | 4.4, 4.2 |" in text
    assert "| 7.40 / 5.10 / 4.20 | 1.85 / 1.28 / 1.05 |" in text
    assert "| 2.8 | 6.00 / 4.00 / 2.80 | 1.50 / 1.00 / 0.70 |" in text
    assert "| 1e6 | spark1 | 7.4 -> 6.0 (1.23x) | 5.1 -> 4.0 (1.28x) | 4.2 -> 2.8 (1.50x) |" in text
    # and from one CPU (the whole local[1] tree confined to it)
    assert (
        "| 1e6 | spark1-cpu1 | 8.0 -> 6.0 (1.33x) | 5.4 -> 4.0 (1.35x) | 4.9 -> 2.8 (1.75x) |"
        in text
    )


class _FakeRDD:
    def __init__(self, parts: list[list[int]]) -> None:
        self.parts = parts

    def getNumPartitions(self) -> int:
        return len(self.parts)


class _FakeContext:
    """runJob and setJobGroup as a SparkContext offers them, over lists (unit test only)."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        self.jobs: list[list[int]] = []
        self.groups: list[tuple[str, str]] = []

    def setJobGroup(self, group: str, description: str) -> None:
        self.groups.append((threading.current_thread().name, group))

    def runJob(self, rdd: _FakeRDD, fn: Any, partitions: range) -> list[int]:
        self.jobs.append(list(partitions))
        if self.fail_at in partitions:
            raise RuntimeError(f"partition {self.fail_at} failed")
        return [x for p in partitions for x in fn(iter(rdd.parts[p]))]


def test_write_waves_keep_partition_order_and_run_a_wave_per_job() -> None:
    rdd = _FakeRDD([[p * 10 + i for i in range(p % 3)] for p in range(7)])
    sc = _FakeContext()
    got = list(in_waves(sc, rdd, 3, "g1"))  # type: ignore[arg-type]
    assert got == [x for part in rdd.parts for x in part]
    assert sc.jobs == [[0, 1, 2], [3, 4, 5], [6]]
    assert sc.groups == [("compaction-write-waves", "g1")]  # the jobs' thread, in the group
    assert list(in_waves(_FakeContext(), _FakeRDD([]), 2, "g")) == []  # type: ignore[arg-type]


def test_write_waves_raise_a_jobs_error_and_stop_when_closed() -> None:
    rdd = _FakeRDD([[p] for p in range(10)])
    sc = _FakeContext(fail_at=5)
    got = []
    with pytest.raises(RuntimeError, match="partition 5 failed"):
        for x in in_waves(sc, rdd, 2, "g"):  # type: ignore[arg-type]
            got.append(x)
    assert got == [0, 1, 2, 3]  # the waves before the failed one, then its error
    sc = _FakeContext()
    waves = in_waves(sc, rdd, 2, "g")  # type: ignore[arg-type]
    assert next(waves) == 0
    waves.close()  # the writer failed: the thread stops after the wave it is running
    assert not any(t.name == "compaction-write-waves" for t in threading.enumerate())
    assert len(sc.jobs) < 5


def test_shuffle_partitions_are_a_multiple_of_the_cores() -> None:
    mib = 2**20
    assert shuffle_partitions(10 * mib, 2) == 4  # at least 2 per core
    assert shuffle_partitions(844 * mib, 2) == 8  # 7 by size, then a whole wave
    assert shuffle_partitions(844 * mib, 1) == 7
    assert shuffle_partitions(844 * mib, 3) == 9
    assert shuffle_partitions(100 * mib, 2, partition_bytes=10 * mib) == 10
    assert shuffle_partitions(0, 0) == 2  # no cores reported: one


def test_ceiling_bench_runs_the_read_work_alone_and_in_pairs(tmp_path: Path) -> None:
    import json

    from bench import compact_ceiling

    argv = ["--size", "2e4", "--tasks", "2", "--rounds", "1", "--data-dir", str(tmp_path)]
    assert compact_ceiling.main([*argv, "--out-dir", str(tmp_path / "out")]) == 0
    (result,) = (tmp_path / "out").glob("compact_ceiling-*.json")
    doc = json.loads(result.read_text())
    assert len(doc["alone_s"]) == 1 and len(doc["together_s"]) == 2
    (alone,) = doc["rounds"][0]["alone"]
    assert alone[2] > 0 and alone[3] > 0  # records through the pre-fold, bytes pickled
    assert doc["scaling"] == pytest.approx(2 / doc["slowdown"])
    with pytest.raises(SystemExit):
        compact_ceiling.main(["--tasks", "1"])
