"""What ``serve`` and ``cluster up`` say is what they do (issue 29): the listen defaults the
help and docs/operations.md print are ServerConfig's (loopback), ``--id`` and ``--data-dir``
read as required, the default cluster token is warned about and ``cluster up`` makes one per
cluster, ``cluster up --log-level`` lists its choices."""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from nameserver import cli
from nameserver.cli import cluster as cluster_cmd
from nameserver.cli import serve
from nameserver.cli.exitcodes import ExitCode
from nameserver.config import ServerConfig
from nameserver.startup import Identity, warn_default_token, write_identity
from raftlog.native.auth import create_password_file

ROOT = Path(__file__).resolve().parents[4]
LISTEN = ("client", "peer", "remoting", "metrics")


def subparser(*path: str) -> argparse.ArgumentParser:
    parser = cli.build_parser()
    for name in path:
        action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
    return parser


def flag_help(parser: argparse.ArgumentParser, flag: str) -> str:
    action = next(a for a in parser._actions if flag in a.option_strings)
    return " ".join((action.help or "").split())


def test_serve_listen_defaults_are_server_configs_and_loopback() -> None:
    config = ServerConfig("n0", "/d")
    parser = subparser("serve")
    for name in LISTEN:
        default = getattr(config, f"listen_{name}")
        assert default.startswith("127.0.0.1:")  # the safe default: this machine only
        text = flag_help(parser, f"--listen-{name}")
        assert f"(default {default}: this machine only" in text, text
        port = default.rpartition(":")[2]
        assert f"0.0.0.0:{port} for other hosts" in text, text


def test_operations_md_prints_the_same_listen_defaults() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    parser = subparser("serve")
    for name in LISTEN:
        flag = f"--listen-{name}"
        row = next(line for line in doc.splitlines() if line.startswith(f"| `{flag} HOST:PORT`"))
        assert flag_help(parser, flag) in row, row
    assert not re.search(r"default :\d", doc)  # ":9876" read as every interface


def test_the_separate_machines_example_listens_where_other_hosts_reach() -> None:
    doc = (ROOT / "docs" / "operations.md").read_text()
    example = doc.split("## Nodes on separate machines", 1)[1].split("```bash", 1)[1]
    example = example.split("```", 1)[0]
    for name in ("client", "remoting"):
        assert re.search(rf"--listen-{name} (0\.0\.0\.0|10\.0\.0\.1):", example), example
    assert "--advertise-client 10.0.0.1:9877" in example  # not 0.0.0.0, which others can't use


def test_serve_usage_shows_id_and_data_dir_as_required(capsys: pytest.CaptureFixture[str]) -> None:
    usage = " ".join(subparser("serve").format_usage().split())
    assert "--id NODE_ID --data-dir DATA_DIR" in usage and "[--id" not in usage, usage
    assert cli.main(["serve"]) == ExitCode.USAGE
    assert "required: --id, --data-dir" in capsys.readouterr().err


def test_a_node_at_the_default_cluster_token_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        warn_default_token(ServerConfig("n0", "/d").cluster_token)
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "--initial-cluster-token is the default" in warned[0], warned
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        warn_default_token("orders-eu")
    assert not caplog.records, caplog.text


def test_cluster_up_makes_one_token_per_cluster_and_keeps_it(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for d in (one, two):
        d.mkdir()
    token = cluster_cmd.cluster_token(one, ["n0", "n1"])
    assert token != ServerConfig("n0", "/d").cluster_token
    assert cluster_cmd.cluster_token(one, ["n0", "n1"]) == token  # reused by later starts
    assert cluster_cmd.cluster_token(two, ["n0", "n1"]) != token  # another cluster, another id
    create_password_file(one / cluster_cmd.PASSWORD_FILE)
    nodes = cluster_cmd.layout(3, 12370)
    argv = cluster_cmd.serve_argv(nodes[0], nodes, one, token=token)
    args = cli.build_parser().parse_args(argv[3:])
    assert serve.build_config(args).cluster_token == token


def test_cluster_up_keeps_the_token_an_older_cluster_up_started_with(tmp_path: Path) -> None:
    (tmp_path / "n1").mkdir(parents=True)
    write_identity(str(tmp_path / "n1"), Identity("n1", "21bc8f61315e0f14", "metaledger", "x"))
    assert cluster_cmd.cluster_token(tmp_path, ["n0", "n1"]) == "metaledger"
    assert (tmp_path / cluster_cmd.TOKEN_FILE).read_text() == "metaledger\n"


def test_cluster_up_log_level_lists_its_choices(capsys: pytest.CaptureFixture[str]) -> None:
    up = subparser("cluster", "up")
    assert "--log-level {DEBUG,INFO,WARNING,ERROR}" in up.format_help()
    with pytest.raises(SystemExit):
        up.parse_args(["--data-dir", "d", "--log-level", "LOUD"])
    assert "invalid choice: 'LOUD'" in capsys.readouterr().err
    args: Any = up.parse_args(["--data-dir", "d", "--log-level", "debug"])
    assert args.log_level == "DEBUG"


def test_every_numeric_default_serve_prints_is_server_configs() -> None:
    """A flag's help that ends "(default N)" says ServerConfig's own default (the flags
    left unset take the dataclass's); the Raft engine's own config agrees on those it
    shares (``--peer-paths``: 2 in all three since two paths became the default)."""
    from raftlog.native.config import NativeConfig

    config = ServerConfig("n0", "/d")
    parser = subparser("serve")
    checked = []
    for action in parser._actions:
        field = serve._OPTIONAL_FIELDS.get(action.dest)
        match = re.search(r"\(default (-?[\d.]+)\)$", " ".join((action.help or "").split()))
        if field is None or match is None:
            continue
        assert float(match[1]) == getattr(config, field), (action.dest, match[1])
        checked.append(field)
    assert "peer_paths" in checked and "peer_dead_timeout_ms" in checked, checked
    assert NativeConfig.peer_paths == config.peer_paths
