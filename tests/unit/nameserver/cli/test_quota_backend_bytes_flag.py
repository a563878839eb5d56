"""``metaledger serve --quota-backend-bytes``: etcd's flag reaches the node's space check
(0 = etcd's default 2 GiB, negative = no quota; the check: tests/unit/nameserver/cluster)."""

from __future__ import annotations

from nameserver import cli
from nameserver.cli import serve
from nameserver.cluster.nospace import DEFAULT_QUOTA_BYTES, SpaceCheck
from nameserver.config import ServerConfig


def build(*argv: str) -> ServerConfig:
    args = cli.build_parser().parse_args(["serve", "--id", "n0", "--data-dir", "/d", *argv])
    return serve.build_config(args)


def test_the_default_is_etcds_two_gib() -> None:
    config = build("--cluster-password", "x")
    assert config.quota_backend_bytes == 0
    config.validate()
    assert SpaceCheck(config.quota_backend_bytes).quota == DEFAULT_QUOTA_BYTES == 2 << 30


def test_the_flag_sets_the_quota_and_a_negative_one_turns_it_off() -> None:
    assert SpaceCheck(build("--quota-backend-bytes", "65536").quota_backend_bytes).quota == 65536
    assert SpaceCheck(build("--quota-backend-bytes=-1").quota_backend_bytes).quota < 0
