"""What a user of ``metaledger`` meets: the default endpoint, endpoint checks, ``put`` from stdin
or a file, ``status`` of every member, help texts, options where they apply, the exit-code table.

Pure: commands get fake clients; nothing listens.
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver import cli
from nameserver.cli import _common, cluster_restart, kv, route, status
from nameserver.cli import cluster as cluster_cmd
from nameserver.cli.exitcodes import MEANINGS, ExitCode, table
from nameserver.client import DEFAULT_ENDPOINTS, Member, NodeStatus, Unavailable


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METALEDGER_ENDPOINTS", raising=False)


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


def walk(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ("metaledger",)
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from walk(sub, (*path, name))


# --------------------------------------------------------------------------- endpoints


def test_the_default_endpoint_is_cluster_ups_node_n0(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _common.endpoints(parse("status")) == ["127.0.0.1:9877"]
    n0 = cluster_cmd.layout(3)[0]
    assert n0.client_endpoint == DEFAULT_ENDPOINTS
    assert parse("cluster", "up", "--data-dir", "d").base_port == 9877
    monkeypatch.setenv("METALEDGER_ENDPOINTS", "h:1, http://h:2")
    assert _common.endpoints(parse("status")) == ["h:1", "h:2"]
    assert _common.endpoints(parse("status", "--endpoints", "x:3")) == ["x:3"]  # flag wins
    assert _common.endpoints(parse("--endpoints", "[::1]:4", "status")) == ["[::1]:4"]


@pytest.mark.parametrize("bad", ["h", "http://h", "h:", "h:x", "h:0", "h:70000", "::1", ":5"])
def test_an_endpoint_without_a_valid_port_is_a_usage_error_naming_it(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["get", "k", "--endpoints", f"127.0.0.1:1,{bad}"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith("metaledger: --endpoints: endpoint") and repr(bad) in err
    assert err.count("\n") == 1


def test_a_bad_endpoint_in_the_environment_is_named_with_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("METALEDGER_ENDPOINTS", "example.com")
    assert cli.main(["status"]) == ExitCode.USAGE
    assert (
        "METALEDGER_ENDPOINTS: endpoint 'example.com' is not HOST:PORT" in capsys.readouterr().err
    )


# --------------------------------------------------------------------------- put's value


class _Stdin(io.BytesIO):
    def __init__(self, data: bytes, tty: bool) -> None:
        super().__init__(data)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_put_takes_its_value_from_the_argument_stdin_or_a_file(tmp_path: Path) -> None:
    big = bytes(range(256)) * 4096  # 1 MiB, not UTF-8
    path = tmp_path / "v"
    path.write_bytes(big)
    assert kv.put_value(parse("put", "k", "v"), _Stdin(b"ignored", False)) == "v"
    assert kv.put_value(parse("put", "k", "-"), _Stdin(big, True)) == big
    assert kv.put_value(parse("put", "k"), _Stdin(big, False)) == big
    assert kv.put_value(parse("put", "k", "--from-file", str(path)), _Stdin(b"", True)) == big
    with pytest.raises(_common.UsageError, match="no VALUE"):
        kv.put_value(parse("put", "k"), _Stdin(b"", True))
    with pytest.raises(_common.UsageError, match="not both"):
        kv.put_value(parse("put", "k", "v", "--from-file", str(path)), _Stdin(b"", True))
    with pytest.raises(_common.UsageError, match=r"--from-file .*missing"):
        kv.put_value(parse("put", "k", "--from-file", str(tmp_path / "missing")), _Stdin(b"", True))


def test_put_sends_the_stdin_value(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sent: dict[str, Any] = {}

    class Client:
        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def put(self, **kwargs: Any) -> Any:
            sent.update(kwargs)
            from nameserver.client import PutResult

            return PutResult(7)

    monkeypatch.setattr(kv, "make_client", lambda args: Client())
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(_Stdin(b"x" * 200_000, False)))
    assert cli.main(["put", "k"]) == ExitCode.OK
    assert sent["value"] == b"x" * 200_000 and capsys.readouterr().out == "OK\n"


def test_a_txn_put_line_still_needs_its_value() -> None:
    from nameserver.cli.txn import TxnSyntaxError, parse_txn

    with pytest.raises(TxnSyntaxError):
        parse_txn("\nput k\n\n\n")


# --------------------------------------------------------------------------- get --rev, errors


def test_get_rev_says_only_the_current_revision_is_kept() -> None:
    text = " ".join(dict(walk(cli.build_parser()))[("metaledger", "get")].format_help().split())
    assert "only the current revision is kept" in text and "past revision is refused" in text


def test_a_server_message_with_its_own_prefix_is_printed_with_one() -> None:
    exc = Unavailable("metaledger: reading at a past revision (3) is not supported")
    assert _common.error_line(exc).count("metaledger:") == 1


# --------------------------------------------------------------------------- status


def _node(nid: str, endpoint: str) -> NodeStatus:
    return NodeStatus(nid, endpoint, "leader" if nid == "n0" else "follower", 2, "n0", 9, 9, 9)


MEMBERS = [
    Member(1, "n0", ["http://127.0.0.1:9878"], ["http://127.0.0.1:9877"]),
    Member(2, "n1", ["http://127.0.0.1:9888"], ["http://127.0.0.1:9887"]),
    Member(3, "n2", ["http://127.0.0.1:9898"], ["http://127.0.0.1:9897"]),
]


class _StatusClient:
    def __init__(self, endpoints: list[str], answers: dict[str, NodeStatus | Exception]) -> None:
        self.endpoints = endpoints
        self.answers = answers

    def __enter__(self) -> _StatusClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def status_all(self) -> list[Any]:
        return [self.answers[e] for e in self.endpoints]

    def members(self) -> list[Member]:
        return MEMBERS


def _use_cluster(
    monkeypatch: pytest.MonkeyPatch, answers: dict[str, NodeStatus | Exception]
) -> list[list[str]]:
    asked: list[list[str]] = []

    def make(args: argparse.Namespace, at: list[str] | None = None) -> _StatusClient:
        eps = at if at is not None else _common.endpoints(args)
        asked.append(eps)
        return _StatusClient(eps, answers)

    monkeypatch.setattr(status, "make_client", make)
    return asked


def test_status_through_one_endpoint_reports_every_member(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers: dict[str, Any] = {
        f"127.0.0.1:{p}": _node(f"n{i}", f"127.0.0.1:{p}") for i, p in enumerate((9877, 9887, 9897))
    }
    asked = _use_cluster(monkeypatch, answers)
    assert cli.main(["status"]) == ExitCode.OK
    assert asked == [["127.0.0.1:9877"], ["127.0.0.1:9887", "127.0.0.1:9897"]]
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split()[0] for r in rows] == ["n0", "n1", "n2"]


def test_status_exits_member_down_and_names_the_member(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers: dict[str, Any] = {
        "127.0.0.1:9877": _node("n0", "127.0.0.1:9877"),
        "127.0.0.1:9887": Unavailable("connection refused", "127.0.0.1:9887"),
        "127.0.0.1:9897": _node("n2", "127.0.0.1:9897"),
    }
    _use_cluster(monkeypatch, answers)
    assert cli.main(["status"]) == ExitCode.MEMBER_DOWN
    out, err = capsys.readouterr()
    assert "metaledger: member n1 (127.0.0.1:9887) is down: connection refused" in err
    down = [r.split() for r in out.splitlines() if r.startswith("n1")]
    assert down == [["n1", "127.0.0.1:9887", "down", "-", "-", "-", "-", "-", "-"]]

    assert cli.main(["status", "-w", "json"]) == ExitCode.MEMBER_DOWN
    doc = json.loads(capsys.readouterr().out)
    assert [(n["id"], n["role"]) for n in doc["nodes"]] == [
        ("n0", "leader"),
        ("n2", "follower"),
        ("n1", "down"),
    ]


def test_status_with_nothing_answering_is_unavailable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _use_cluster(monkeypatch, {"127.0.0.1:9877": Unavailable("connection refused")})
    assert cli.main(["status"]) == ExitCode.UNAVAILABLE
    assert "connection refused" in capsys.readouterr().err


# --------------------------------------------------------------------------- topic delete


def test_deleting_a_missing_topic_says_so_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    class Client:
        def __enter__(self) -> Client:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def route_topic_delete(self, topic: str, cluster: str) -> tuple[int, int]:
            return 12, 0

    monkeypatch.setattr(route, "make_client", lambda args: Client())
    assert cli.main(["route", "topic", "delete", "T"]) == ExitCode.OK
    assert capsys.readouterr().out == "topic T: no queues, nothing to delete\n"


# --------------------------------------------------------------------------- cluster restart


def test_cluster_restart_needs_a_cluster_up_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["cluster", "restart", "n1", "--data-dir", str(tmp_path)]) == ExitCode.USAGE
    assert "cluster.json not found" in capsys.readouterr().err
    cluster_restart.write_cluster_file(
        tmp_path, {"n0": ["serve", "--id", "n0"]}, {"n0": "127.0.0.1:9877"}
    )
    assert cli.main(["cluster", "restart", "n1", "--data-dir", str(tmp_path)]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "no node 'n1'" in err and "(nodes: n0)" in err
    assert cluster_restart.read_cluster_file(tmp_path)["n0"]["argv"] == ["serve", "--id", "n0"]


# --------------------------------------------------------------------------- help and options

_INTERNALS = re.compile(r"_register|:class:|:func:|:mod:|DESIGN|§|``|\bissue\b|\bround\b")


def test_help_texts_show_no_internals() -> None:
    for path, parser in walk(cli.build_parser()):
        text = parser.format_help()
        assert not _INTERNALS.search(text), (path, _INTERNALS.search(text))


CLUSTER_OPTIONS = ("--endpoints", "--timeout")
LOCAL = {
    ("metaledger", "serve"),
    ("metaledger", "compact"),
    ("metaledger", "cluster", "up"),
    ("metaledger", "cluster", "restart"),
    ("metaledger", "snapshot", "inspect"),
    ("metaledger", "snapshot", "list"),
    ("metaledger", "snapshot", "restore"),
}


def test_cluster_options_only_on_commands_that_talk_to_a_cluster() -> None:
    leaves = {
        path: parser
        for path, parser in walk(cli.build_parser())
        if len(path) > 1
        and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions)
    }
    assert LOCAL <= set(leaves)
    for path, parser in leaves.items():
        flags = {f for a in parser._actions for f in a.option_strings}
        if path in LOCAL:
            assert not flags & set(CLUSTER_OPTIONS), path
            assert ("--output" in flags) == (path != ("metaledger", "serve")), path
        else:
            assert set(CLUSTER_OPTIONS) <= flags, path


# --------------------------------------------------------------------------- exit codes


def test_every_exit_code_is_in_the_table_and_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert set(MEANINGS) == set(ExitCode)
    assert cli.main(["--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "exit codes:" in out and table() in out
    for code in ExitCode:
        assert re.search(rf"^\s+{int(code)}\s+\S", out, re.M), code


def test_commands_return_only_named_exit_codes() -> None:
    """A command (``run_*``) returns ExitCode members, never a bare number."""
    root = Path(cli.__file__).parent
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, ast.FunctionDef) and fn.name.startswith("run_"):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Return) and isinstance(node.value, ast.Constant):
                        raise AssertionError(f"{path.name}:{node.lineno} returns a bare number")


def test_status_names_a_member_that_has_not_announced_itself(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    answers: dict[str, Any] = {"127.0.0.1:9877": _node("n0", "127.0.0.1:9877")}
    _use_cluster(monkeypatch, answers)
    monkeypatch.setattr(
        _StatusClient, "members", lambda self: [MEMBERS[0], Member(0xAB, "", ["http://h:1"], [])]
    )
    assert cli.main(["status"]) == ExitCode.MEMBER_DOWN
    out, err = capsys.readouterr()
    assert "member ab (unstarted) has not announced its client URL (starting, or down)" in err
    assert [r.split()[:3] for r in out.splitlines()[1:]] == [
        ["n0", "127.0.0.1:9877", "leader"],
        ["ab", "-", "down"],
    ]
