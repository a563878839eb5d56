"""The console's flags and its sampler: configuration errors name the flag, the sampler's
memory is a fixed ring, commits/s is the difference of consecutive samples, and losing a
cluster is one log line (and one more when it is back)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from console.clusters import Sample, Sampler
from console.config import ClusterSpec, ConsoleConfig, parse_cluster, parse_listen
from nameserver.client import ConnectionOptions


def test_listen_and_cluster_flags() -> None:
    assert parse_listen("0.0.0.0:9870") == ("0.0.0.0", 9870)
    assert parse_listen("[::1]:80") == ("::1", 80)
    assert parse_cluster("prod=10.0.0.1:9877,10.0.0.2:9877") == (
        "prod",
        "10.0.0.1:9877,10.0.0.2:9877",
    )
    for bad in ("9870", "host:", "host:99999"):
        with pytest.raises(ValueError, match="--listen"):
            parse_listen(bad)
    for bad in ("prod", "=a:1", "prod=", "a b=h:1"):
        with pytest.raises(ValueError, match="--cluster"):
            parse_cluster(bad)


def _config(**kw: Any) -> ConsoleConfig:
    spec = ClusterSpec("c", ConnectionOptions(endpoints=("127.0.0.1:1",)))
    return ConsoleConfig(clusters=(spec,), **kw)


def test_config_validate_names_the_field() -> None:
    with pytest.raises(ValueError, match="clusters"):
        ConsoleConfig().validate()
    with pytest.raises(ValueError, match="samples_kept"):
        _config(samples_kept=1).validate()
    spec = ClusterSpec("c", ConnectionOptions(endpoints=("127.0.0.1:1",)))
    with pytest.raises(ValueError, match="twice"):
        ConsoleConfig(clusters=(spec, spec)).validate()


class FakeView:
    name = "c"
    endpoints = ["127.0.0.1:1"]

    def __init__(self) -> None:
        self.answers: list[dict[str, Any]] = []

    def status(self) -> dict[str, Any]:
        return self.answers.pop(0)


def test_the_ring_is_bounded_and_the_rate_is_the_difference() -> None:
    sampler = Sampler([FakeView()], _config(samples_kept=10))  # type: ignore[list-item]
    now = time.time()
    for i in range(100):
        sampler.rings["c"].append(Sample(now - 100 + i, 10 * i, i % 3))
    assert len(sampler.rings["c"]) == 10
    series = sampler.series("c", 5)
    assert series["commits_per_s"] == [10.0] * len(series["t"]) and len(series["t"]) == 4


def test_losing_the_cluster_is_one_log_line(caplog: pytest.LogCaptureFixture) -> None:
    view = FakeView()
    sampler = Sampler([view], _config())  # type: ignore[list-item]
    down = {"cluster": "c", "reachable": False, "error": "connection refused"}
    up = {"cluster": "c", "reachable": True, "sampled_at": 1.0, "commit_offset": 5, "apply_lag": 0}
    view.answers = [down, down, down, up, up]
    with caplog.at_level(logging.INFO, logger="console"):
        for _ in range(5):
            sampler.sample_once()
    lines = [r.getMessage() for r in caplog.records]
    assert len([line for line in lines if "unreachable" in line]) == 1
    assert len([line for line in lines if "reachable again" in line]) == 1
    assert sampler.last["c"] is up and len(sampler.rings["c"]) == 2
