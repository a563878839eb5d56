"""bench.grpc_vs_remoting with tiny counts, so the benchmark cannot rot: a real metaledger node
and broker, every path (the 5.x Python client's through the session's venv) with sends and
receives that succeed, a report with the ratios, every process stopped by PID."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import broker_group
from bench import grpc_vs_remoting as bench

pytestmark = [pytest.mark.integration]


def test_every_path_runs_end_to_end(
    rocketmq5_python: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    groups: list[broker_group.BrokerGroup] = []
    stop = broker_group.BrokerGroup.stop

    def stop_spy(
        self: broker_group.BrokerGroup, grace_s: float = broker_group.STOP_GRACE_S
    ) -> None:
        groups.append(self)
        stop(self, grace_s)

    monkeypatch.setattr(broker_group.BrokerGroup, "stop", stop_spy)
    argv = [
        "--concurrency=4", "--connections=2", "--warmup=0.2", "--duration=3", "--count=100",
        "--messages=400", f"--rmq5-venv={rocketmq5_python.parent.parent}", "--no-plot",
        f"--out-dir={tmp_path}",
    ]  # fmt: skip
    assert bench.main(argv) == 0

    (group,) = groups
    assert all(p.poll() is not None for p in group.procs.values())
    assert not group.root.exists()
    (json_path,) = tmp_path.glob("grpc_vs_remoting-*.json")
    report: dict[str, Any] = json.loads(json_path.read_text())
    by_path = {r["path"]: r for r in report["results"]}
    assert list(by_path) == list(bench.PATHS)
    for r in by_path.values():
        assert r["ops"] > 0 and r["errors"] == {}, r
        assert 0 < r["p50_ms"] <= r["p99_ms"], r
    for name in bench.SENDS:
        assert by_path[name]["ops"] >= 100
    assert [(x["of"], x["to"]) for x in report["ratios"]] == list(bench.RATIOS)
    md = json_path.with_suffix(".md").read_text()
    assert "| grpc-send / remoting-send |" in md
    out = capsys.readouterr().out
    assert "sending 400 messages for the receive paths" in out and "grpc-receive:" in out
