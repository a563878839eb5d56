"""bench.broker_send's JetStream part with tiny counts, so the benchmark cannot rot: real
nats-server processes (3 clustered, then 1), acked publishes through nats-py, a report
written, every server stopped by PID."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from bench import broker_send, jetstream

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(jetstream.nats_server_path() is None, reason="nats-server is not installed"),
]


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_jetstream_part_runs_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clusters: list[jetstream.NatsCluster] = []
    pids: list[int] = []
    start, stop = jetstream.NatsCluster.start, jetstream.NatsCluster.stop

    def start_spy(self: jetstream.NatsCluster, timeout_s: float = 30.0) -> None:
        clusters.append(self)
        start(self, timeout_s)
        pids.extend(self.pids)

    def stop_spy(self: jetstream.NatsCluster, grace_s: float = jetstream.STOP_GRACE_S) -> None:
        stop(self, grace_s)
        assert all(_gone(pid) for pid in self.pids)

    monkeypatch.setattr(jetstream.NatsCluster, "start", start_spy)
    monkeypatch.setattr(jetstream.NatsCluster, "stop", stop_spy)
    argv = [
        "--systems=jetstream-r3,jetstream-r1",
        "--concurrency=4",
        "--connections=2",
        "--warmup=0.2",
        "--duration=5",
        "--count=200",
        "--e2e",
        "--no-plot",
        f"--out-dir={tmp_path}",
    ]
    assert broker_send.main(argv) == 0

    assert [c.size for c in clusters] == [3, 1]
    assert len(pids) == 4 and all(_gone(pid) for pid in pids)
    assert all(not c.root.exists() for c in clusters)
    (json_path,) = tmp_path.glob("broker_send-*.json")
    report: dict[str, Any] = json.loads(json_path.read_text())
    by_name = {r["system"]: r for r in report["results"]}
    for name in ("jetstream-r3", "jetstream-r1"):
        r = by_name[name]
        assert r["sends"] >= 200 and r["errors"] == {}, r
        assert 0 < r["p50_ms"] <= r["p99_ms"]
        assert r["e2e_received"] > 0 and r["e2e_p50_ms"] > 0
    assert [x["of"] for x in report["ratios"]] == ["jetstream-r3"]
    md = json_path.with_suffix(".md").read_text()
    assert "| jetstream-r3 | 3 nats-server, stream R3" in md
    out = capsys.readouterr().out
    assert "jetstream-r3: starting 3 nats-server -js" in out
    assert "jetstream-r1:" in out and "sends/s" in out
