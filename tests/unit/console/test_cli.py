"""``metaledger console``'s command line: --endpoints is the cluster called ``default``,
each --cluster adds one by name with the same credentials, and a bad flag is a usage error
naming it (exit 2), before anything listens."""

from __future__ import annotations

import argparse

import pytest

from console.cli import build_config, register, run_console
from nameserver.cli._common import common_options
from nameserver.cli.connection import CommonOptions


def _parse(*argv: str) -> tuple[argparse.Namespace, CommonOptions]:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    common = common_options()
    register(sub, common)
    return parser.parse_args(["console", *argv]), common


def test_endpoints_and_named_clusters() -> None:
    args, common = _parse(
        "--endpoints", "127.0.0.1:1,127.0.0.1:2", "--cluster", "dr=10.0.0.1:9877",
        "--user", "root:pw", "--listen", "0.0.0.0:8080", "--allow-writes",
    )  # fmt: skip
    config = build_config(args, common)
    assert (config.host, config.port, config.allow_writes) == ("0.0.0.0", 8080, True)
    assert [(c.name, c.connection.endpoints) for c in config.clusters] == [
        ("default", ("127.0.0.1:1", "127.0.0.1:2")),
        ("dr", ("10.0.0.1:9877",)),
    ]
    assert {c.connection.user for c in config.clusters} == {"root"}


def test_only_named_clusters_leave_out_the_default() -> None:
    args, common = _parse("--cluster", "a=127.0.0.1:1", "--cluster", "b=127.0.0.1:2")
    config = build_config(args, common)
    assert [c.name for c in config.clusters] == ["a", "b"] and not config.allow_writes


@pytest.mark.parametrize(
    "argv",
    [
        ("--listen", "nowhere"),
        ("--cluster", "noequals"),
        ("--cluster", "a=h:1", "--cluster", "a=h:2"),
    ],
)
def test_a_bad_flag_is_a_usage_error(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    args, common = _parse(*argv)
    assert run_console(args, common) == 2
    assert capsys.readouterr().err.startswith("metaledger console: ")
