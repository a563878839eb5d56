"""Automatic compaction (nameserver/kv/compactor.py): etcd's retention formats and what each
mode compacts at, on a fake clock (v3compactor's periodic.go and revision.go)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from nameserver.config import ServerConfig, parse_auto_compaction_retention
from nameserver.kv.compactor import REVISION_CHECK_S, AutoCompactor
from raftlog import ConfigError


def compactor(mode: str, retention: str) -> AutoCompactor:
    node: Any = SimpleNamespace(log=None)
    return AutoCompactor(node, mode, retention)


@pytest.mark.parametrize(
    ("mode", "text", "value"),
    [
        ("periodic", "0", 0.0),
        ("periodic", "1", 3600.0),  # a bare number is hours (etcd)
        ("periodic", "30m", 1800.0),
        ("periodic", "1h30m", 5400.0),
        ("periodic", "1.5s", 1.5),
        ("revision", "1000", 1000.0),
    ],
)
def test_retention_formats_are_etcds(mode: str, text: str, value: float) -> None:
    assert parse_auto_compaction_retention(mode, text) == value


@pytest.mark.parametrize(
    ("mode", "text"), [("revision", "1h"), ("periodic", "1x"), ("periodic", ""), ("periodic", "-1")]
)
def test_bad_retention_names_the_field(mode: str, text: str) -> None:
    config = ServerConfig(
        node_id="n", data_dir="/d", auto_compaction_mode=mode, auto_compaction_retention=text
    )
    with pytest.raises(ConfigError, match="auto_compaction_retention"):
        config.validate()


def test_an_unknown_mode_names_the_field() -> None:
    config = ServerConfig(node_id="n", data_dir="/d", auto_compaction_mode="daily")
    with pytest.raises(ConfigError, match="auto_compaction_mode"):
        config.validate()


def test_revision_mode_keeps_the_last_n_revisions() -> None:
    c = compactor("revision", "10")
    assert c.enabled and c.interval_s == REVISION_CHECK_S
    assert c.target(0.0, 5) == 0
    assert c.target(1.0, 25) == 15


def test_periodic_mode_compacts_at_the_newest_revision_at_least_the_retention_old() -> None:
    c = compactor("periodic", "10s")
    assert c.interval_s == 1.0  # a tenth of the retention
    revs = {t: 100 + 7 * t for t in range(0, 45)}
    got = {}
    for t in range(0, 45):
        got[t] = c.target(float(t), revs[t])
        if got[t] and t != 20:  # the one at 20 failed: retried at the next tick
            c.done(float(t))
    assert all(got[t] == 0 for t in range(0, 10))  # nothing before a full period has passed
    assert got[10] == revs[0]  # then at the revision of one retention ago...
    assert [t for t in range(11, 45) if got[t]] == [20, 21, 31, 41]  # ...every retention
    assert got[20] == revs[10] and got[21] == revs[11] and got[31] == revs[21]


def test_off_by_default() -> None:
    assert not compactor("periodic", "0").enabled
