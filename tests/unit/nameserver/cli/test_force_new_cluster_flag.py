"""``metaledger serve --force-new-cluster``: the flag reaches the engine's configuration,
and only the native engine takes it (the engine side: tests/unit/raftlog/native/test_core_recovery.py and
tests/cluster/test_membership_faults.py)."""

from __future__ import annotations

import pytest

from nameserver import cli
from nameserver.cli import serve
from nameserver.config import ServerConfig
from raftlog import ConfigError, NativeConfig


def build(*argv: str) -> ServerConfig:
    args = cli.build_parser().parse_args(["serve", "--id", "n0", "--data-dir", "/d", *argv])
    return serve.build_config(args)


def test_the_flag_is_off_unless_given() -> None:
    assert build().force_new_cluster is False
    assert (
        NativeConfig(node_id="n0", peers={"n0": "127.0.0.1:1"}, journal_dir="/d").force_new_cluster
        is False
    )
    assert build("--force-new-cluster").force_new_cluster is True


def test_only_the_native_engine_can_force_a_new_cluster() -> None:
    config = build("--force-new-cluster", "--consensus", "pysyncobj", "--cluster-password", "x")
    with pytest.raises(ConfigError, match=r"^force_new_cluster: needs the native consensus"):
        config.validate()
