"""bench/report.py: the one writer of benchmark results (file names, JSON and markdown)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.report import fmt, machine, result_stem, timestamp, write_report


def test_write_report_names_files_by_benchmark_and_date(tmp_path: Path) -> None:
    report = {"date": "2026-11-26T10:02:34", "machine": machine(), "rows": [1, 2]}
    json_path, md_path = write_report("compare_etcd", report, "# title\n\n| a |", tmp_path / "r")
    assert json_path == tmp_path / "r" / "compare_etcd-2026-11-26T10-02-34.json"
    assert md_path == json_path.with_suffix(".md")
    assert json.loads(json_path.read_text()) == report
    assert json_path.read_text().endswith("}\n")
    assert md_path.read_text() == "# title\n\n| a |\n"  # one final newline, however given


def test_stem_timestamp_and_cells(tmp_path: Path) -> None:
    date = timestamp()
    assert len(date) == 19 and date[10] == "T" and date.count(":") == 2
    stem = result_stem("restart", date, tmp_path / "new")
    assert stem.parent.is_dir() and ":" not in stem.name and stem.name.startswith("restart-")
    assert (fmt(None), fmt(1234.6), fmt(-0.01, ".1f"), fmt(0.256, ".2f")) == (
        "-",
        "1235",
        "0.0",
        "0.26",
    )
    assert {"nproc", "cpu_model", "kernel", "python"} <= machine().keys()
