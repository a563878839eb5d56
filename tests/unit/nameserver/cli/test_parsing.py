"""The ``metaledger`` command line: argparse per command, exit codes, ConfigError → USAGE.

Pure: commands that would talk to a server get a fake client; ``serve`` gets a fake
``nameserver.server.run``.
"""

from __future__ import annotations

import argparse
import io
import json
from typing import Any

import pytest

from nameserver import cli
from nameserver.cli import _common, kv, serve, status, txn
from nameserver.cli import cluster as cluster_cmd
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import (
    KeyValue,
    NodeStatus,
    Op,
    PutResult,
    RangeResult,
    TxnResult,
    Unavailable,
)
from nameserver.config import ConfigError
from raftlog.native.auth import create_password_file


def parse(*argv: str) -> argparse.Namespace:
    return cli.build_parser().parse_args(list(argv))


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("METALEDGER_ENDPOINTS", "METALEDGER_CLUSTER_PASSWORD", "METALEDGER_PARENT_PID"):
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------- exit codes


def test_exit_code_numbers_are_stable() -> None:
    assert [
        ExitCode.OK,
        ExitCode.ERROR,
        ExitCode.USAGE,
        ExitCode.UNAVAILABLE,
        ExitCode.NOT_FOUND,
        ExitCode.TXN_FAILED,
        ExitCode.INVALID,
    ] == [0, 1, 2, 3, 4, 5, 6]


def test_usage_errors_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == ExitCode.USAGE
    assert cli.main(["get"]) == ExitCode.USAGE  # KEY missing
    assert cli.main(["bench", "scan"]) == ExitCode.USAGE
    assert cli.main(["get", "k", "--limit", "-1"]) == ExitCode.USAGE
    assert cli.main(["--help"]) == ExitCode.OK
    assert "COMMAND" in capsys.readouterr().out


# --------------------------------------------------------------------------- common options


def test_common_options_before_or_after_the_command(monkeypatch: pytest.MonkeyPatch) -> None:
    args = parse("get", "k")
    assert _common.endpoints(args) == ["127.0.0.1:9877"]
    assert _common.output(args) == "table"
    assert _common.timeout_s(args) == 5.0

    monkeypatch.setenv("METALEDGER_ENDPOINTS", "h1:1, h2:2")
    assert _common.endpoints(parse("get", "k")) == ["h1:1", "h2:2"]

    before = parse("--endpoints", "a:1,b:2", "-w", "json", "--timeout", "2", "get", "k")
    after = parse("get", "k", "--endpoints", "a:1,b:2", "--output", "json", "--timeout", "2")
    for args in (before, after):
        assert _common.endpoints(args) == ["a:1", "b:2"]
        assert _common.output(args) == "json"
        assert _common.timeout_s(args) == 2.0


# --------------------------------------------------------------------------- put / get / del


def test_put_arguments() -> None:
    args = parse("put", "k", "v", "--lease", "0x1f", "--prev-kv")
    assert kv.put_kwargs(args) == {"key": "k", "value": "v", "lease": 31, "prev_kv": True}
    assert parse("put", "k", "v").lease == 0


def test_get_arguments() -> None:
    args = parse("get", "a", "z", "--serializable", "--limit", "5", "--keys-only", "--rev", "4")
    assert kv.get_kwargs(args) == {
        "key": "a",
        "range_end": "z",
        "prefix": False,
        "serializable": True,
        "limit": 5,
        "keys_only": True,
        "count_only": False,
        "sort_order": "NONE",
        "sort_target": "KEY",
        "revision": 4,
    }
    sorted_args = kv.get_kwargs(
        parse("get", "p", "--prefix", "--count-only", "--sort-by", "modify")
    )
    assert (sorted_args["sort_target"], sorted_args["sort_order"]) == ("MOD", "ASCEND")
    assert sorted_args["prefix"] and sorted_args["count_only"]
    desc = kv.get_kwargs(parse("get", "p", "--order", "DESCEND"))
    assert (desc["sort_target"], desc["sort_order"]) == ("KEY", "DESCEND")


def test_del_arguments() -> None:
    args = parse("del", "p/", "--prefix", "--prev-kv")
    assert kv.del_kwargs(args) == {"key": "p/", "range_end": None, "prefix": True, "prev_kv": True}


class FakeClient:
    """Stands in for nameserver.client.Client in commands."""

    def __init__(self, **results: Any) -> None:
        self.results = results
        self.calls: list[tuple[str, Any]] = []
        self.endpoints = ["h:1"]

    def __enter__(self) -> FakeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def _answer(self, name: str, args: Any) -> Any:
        self.calls.append((name, args))
        result = self.results[name]
        if isinstance(result, Exception):
            raise result
        return result

    def put(self, **kwargs: Any) -> Any:
        return self._answer("put", kwargs)

    def get(self, **kwargs: Any) -> Any:
        return self._answer("get", kwargs)

    def txn(self, compares: Any, success: Any, failure: Any) -> Any:
        return self._answer("txn", (compares, success, failure))

    def status_all(self) -> Any:
        return self._answer("status_all", None)

    def members(self) -> Any:
        return self._answer("members", None) if "members" in self.results else []


def use_client(monkeypatch: pytest.MonkeyPatch, module: Any, client: FakeClient) -> None:
    monkeypatch.setattr(module, "make_client", lambda args, at=None: client)


def test_get_prints_like_etcdctl(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    kv1 = KeyValue(b"k1", b"v1", 2, 2, 1, 0)
    use_client(monkeypatch, kv, FakeClient(get=RangeResult(5, [kv1], False, 1)))
    assert cli.main(["get", "k1"]) == ExitCode.OK
    assert capsys.readouterr().out == "k1\nv1\n"

    use_client(monkeypatch, kv, FakeClient(get=RangeResult(5, [], False, 0)))
    assert cli.main(["get", "missing"]) == ExitCode.OK  # like etcdctl: no output, exit 0
    assert capsys.readouterr().out == ""


def test_client_errors_are_caught_once_and_printed_plainly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    use_client(monkeypatch, kv, FakeClient(put=Unavailable("connection refused", "h:1")))
    assert cli.main(["put", "k", "v"]) == ExitCode.UNAVAILABLE
    err = capsys.readouterr().err
    assert err == "metaledger: unavailable: connection refused [h:1]\n"


# --------------------------------------------------------------------------- txn


TXN_TEXT = 'value("k") = "v"\n\nput k x\n\nget k\n'


def test_txn_arguments() -> None:
    args = parse("txn", "--file", "t.txt", "--exit-code-on-failure", "-i")
    assert (args.file, args.exit_code_on_failure, args.interactive) == ("t.txt", True, True)
    assert parse("txn").exit_code_on_failure is False


@pytest.mark.parametrize(
    ("succeeded", "flag", "code", "out"),
    [
        (True, [], ExitCode.OK, "SUCCESS\n\nOK\n"),
        (False, [], ExitCode.OK, "FAILURE\n\nOK\n"),
        (False, ["--exit-code-on-failure"], ExitCode.TXN_FAILED, "FAILURE\n\nOK\n"),
    ],
)
def test_txn_reads_stdin_and_prints_like_etcdctl(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    succeeded: bool,
    flag: list[str],
    code: ExitCode,
    out: str,
) -> None:
    client = FakeClient(txn=TxnResult(3, succeeded, [PutResult(3)]))
    use_client(monkeypatch, txn, client)
    monkeypatch.setattr("sys.stdin", io.StringIO(TXN_TEXT))
    assert cli.main(["txn", *flag]) == code
    assert capsys.readouterr().out == out
    (_, (compares, success, failure)), *_ = client.calls
    assert len(compares) == 1 and success == [Op.put("k", "x")] and failure == [Op.get("k")]


def test_txn_syntax_error_is_invalid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO('value("k") ~ "v"\n'))
    assert cli.main(["txn"]) == ExitCode.INVALID
    assert capsys.readouterr().err.startswith("metaledger: txn: line 1: malformed comparison")


def test_read_txn_prompts_per_section() -> None:
    prompts = io.StringIO()
    text = txn.read_txn(io.StringIO(TXN_TEXT + "\nignored\n"), prompts)
    assert text == TXN_TEXT + "\n"
    assert prompts.getvalue().count("requests") == 2


# --------------------------------------------------------------------------- status


def node(nid: str, endpoint: str, role: str) -> NodeStatus:
    return NodeStatus(nid, endpoint, role, 2, "n0", 10, 9, 8, has_quorum=True)


def test_status_json_contract(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    results = [node("n0", "h:1", "leader"), Unavailable("refused", "h:2")]
    use_client(monkeypatch, status, FakeClient(status_all=results))
    assert cli.main(["status", "-w", "json", "--endpoints", "h:1,h:2"]) == ExitCode.MEMBER_DOWN
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert list(doc) == ["nodes"]
    keys = list(doc["nodes"][0])
    assert keys[:8] == [
        "id",
        "endpoint",
        "role",
        "term",
        "leader",
        "end_offset",
        "commit_offset",
        "apply_offset",
    ]
    assert doc["nodes"][0]["apply_offset"] == 8
    assert "h:2" in captured.err


def test_status_table_and_none_reachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [node("n0", "h:1", "leader"), node("n1", "h:2", "follower")]
    use_client(monkeypatch, status, FakeClient(status_all=nodes))
    assert cli.main(["status"]) == ExitCode.OK
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["ID", "ENDPOINT", "ROLE"] and len(lines) == 3

    use_client(monkeypatch, status, FakeClient(status_all=[Unavailable("refused", "h:1")]))
    assert cli.main(["status"]) == ExitCode.UNAVAILABLE


# --------------------------------------------------------------------------- member, bench


def test_member_list_and_bench_arguments() -> None:
    assert parse("member", "list", "-w", "json").run.__name__ == "run_member_list"
    args = parse("bench", "txn", "--clients", "16", "--duration", "3", "--warmup", "0.5")
    assert (args.op, args.clients, args.duration, args.warmup) == ("txn", 16, 3.0, 0.5)
    assert parse("bench", "get-ser").op == "get-ser"
    from nameserver import loadgen

    spec = loadgen.spec_from_args(args, args.op, ["a:1"])
    spec.validate()
    assert spec.endpoints == ("a:1",)


# --------------------------------------------------------------------------- serve


def test_serve_defaults_come_from_server_config() -> None:
    config = serve.build_config(parse("serve", "--id", "n0", "--data-dir", "/d"))
    assert (config.listen_client, config.listen_peer) == ("127.0.0.1:9877", "127.0.0.1:9878")
    assert (config.listen_remoting, config.listen_metrics) == ("127.0.0.1:9876", "127.0.0.1:9879")
    assert config.cluster_password is None
    assert config.consensus_loop == "shared"
    assert config.grpc_acceptors == 32
    with pytest.raises(ConfigError, match=r"^cluster_password: required.*--cluster-password-file"):
        config.validate()  # the peer port always authenticates, loopback included


def test_etcd_revision_count_is_the_default_and_offset_revisions_opts_out() -> None:
    base = ("serve", "--id", "n0", "--data-dir", "/d")
    assert serve.build_config(parse(*base)).etcd_revisions
    assert not serve.build_config(parse(*base, "--offset-revisions")).etcd_revisions
    # the flag of the days it was opt-in is still accepted, and changes nothing
    assert serve.build_config(parse(*base, "--experimental-etcd-revisions")).etcd_revisions


def test_a_consensus_loop_other_than_shared_or_thread_is_refused_naming_the_field() -> None:
    from nameserver.config import ConfigError, ServerConfig

    with pytest.raises(ConfigError, match=r"^consensus_loop: 'both': must be shared or thread"):
        ServerConfig(node_id="n0", data_dir="/d", consensus_loop="both").validate()


def test_grpc_acceptors_parse_and_a_negative_count_is_refused_naming_the_field() -> None:
    from nameserver.config import ConfigError, ServerConfig

    args = parse("serve", "--id", "n0", "--data-dir", "/d", "--grpc-acceptors", "0")
    assert serve.build_config(args).grpc_acceptors == 0
    with pytest.raises(ConfigError, match=r"^grpc_acceptors: must be between 0 and 64"):
        ServerConfig(node_id="n0", data_dir="/d", grpc_acceptors=-1).validate()


def test_serve_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METALEDGER_CLUSTER_PASSWORD", "s3cret")
    args = parse(
        "serve",
        "--id=n1",
        "--data-dir=/d/n1",
        "--listen-client=0.0.0.0:2379",
        "--listen-peer=10.0.0.2:2380",
        "--listen-remoting=0.0.0.0:9876",
        "--listen-metrics=0.0.0.0:9100",
        "--initial-cluster=n0=10.0.0.1:2380,n1=10.0.0.2:2380",
        "--advertise-client=10.0.0.2:2379",
        "--fsync-policy=always",
        "--batch-window-ms=0.5",
        "--consensus-loop=thread",
        "--log-level=debug",
    )
    config = serve.build_config(args)
    assert config.consensus_loop == "thread"
    assert config.node_id == "n1" and config.data_dir == "/d/n1"
    assert config.initial_cluster == {"n0": "10.0.0.1:2380", "n1": "10.0.0.2:2380"}
    assert config.cluster_password == "s3cret"
    assert config.advertise_client == "10.0.0.2:2379" and config.fsync_policy == "always"
    assert args.log_level == "DEBUG" and config.batch_window_ms == 0.5
    config.validate()


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        # missing, they are argparse's "required" (test_help_defaults.py); empty, the config's
        (["serve", "--id", "", "--data-dir", "/d"], "node_id"),
        (["serve", "--id", "n0", "--data-dir", ""], "data_dir"),
        (["serve", "--id", "n0", "--data-dir", "/d", "--initial-cluster", "n0"], "initial_cluster"),
        (
            ["serve", "--id", "n0", "--data-dir", "/d", "--listen-peer", "10.1.1.1:1"],
            "cluster_password",
        ),
        (["serve", "--id", "n0", "--data-dir", "/d"], "cluster_password"),
        (
            ["serve", "--id", "n0", "--data-dir", "/d", "--peer-max-connections", "0"],
            "peer_max_connections",
        ),
        (
            ["serve", "--id", "n0", "--data-dir", "/d", "--peer-idle-timeout-ms", "-1"],
            "peer_idle_timeout_ms",
        ),
        (["serve", "--id", "n0", "--data-dir", "/d", "--peer-paths", "5"], "peer_paths"),
        (["serve", "--id", "n0", "--data-dir", "/d", "--peer-paths", "0"], "peer_paths"),
        (
            ["serve", "--id", "n0", "--data-dir", "/d", "--fsync-policy", "sometimes"],
            "fsync_policy",
        ),
        (
            ["serve", "--id", "n0", "--data-dir", "/d", "--batch-window-ms", "-1"],
            "batch_window_ms",
        ),
    ],
)
def test_serve_config_error_is_usage(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    field: str,
) -> None:
    monkeypatch.setattr("nameserver.server.run", lambda config: pytest.fail("must not run"))
    assert cli.main(argv) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err.startswith(f"metaledger: {field}: ") and "Traceback" not in err


def test_serve_runs_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Any] = []

    def fake_run(config: Any) -> int:
        seen.append(config)
        return 0

    monkeypatch.setattr("nameserver.server.run", fake_run)
    monkeypatch.setenv("METALEDGER_CLUSTER_PASSWORD", "s3cret")
    assert cli.main(["serve", "--id", "n0", "--data-dir", "/d"]) == ExitCode.OK
    assert [c.node_id for c in seen] == ["n0"]


def test_serve_takes_the_cluster_password_from_a_file_flag_or_env(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pw"
    path.write_text("from-file\n")
    base = ["serve", "--id", "n0", "--data-dir", "/d"]
    monkeypatch.setenv("METALEDGER_CLUSTER_PASSWORD", "from-env")
    assert serve.build_config(parse(*base)).cluster_password == "from-env"
    config = serve.build_config(parse(*base, "--cluster-password-file", str(path)))
    assert config.cluster_password == "from-file"  # a flag beats the environment
    assert serve.build_config(parse(*base, "--cluster-password", "x")).cluster_password == "x"
    with pytest.raises(SystemExit):  # one or the other
        parse(*base, "--cluster-password", "x", "--cluster-password-file", str(path))
    capsys.readouterr()
    path.write_text(" \n")
    with pytest.raises(ConfigError, match=r"^cluster_password_file: .* is empty"):
        serve.build_config(parse(*base, "--cluster-password-file", str(path)))


# --------------------------------------------------------------------------- cluster up


def test_cluster_up_arguments() -> None:
    args = parse("cluster", "up", "--nodes", "5", "--data-dir", "/tmp/x", "--base-port", "20000")
    assert (args.nodes, args.data_dir, args.base_port) == (5, "/tmp/x", 20000)
    defaults = parse("cluster", "up", "--data-dir", "/tmp/x")
    assert (defaults.nodes, defaults.base_port) == (3, 9877)  # n0's client port: the default
    with pytest.raises(SystemExit):
        parse("cluster", "up", "--nodes", "0", "--data-dir", "/tmp/x")


def test_cluster_layout_is_the_design_contract() -> None:
    nodes = cluster_cmd.layout(3, 12370)
    assert [n.id for n in nodes] == ["n0", "n1", "n2"]
    assert [n.client_endpoint for n in nodes] == [
        "127.0.0.1:12370",
        "127.0.0.1:12380",
        "127.0.0.1:12390",
    ]
    assert nodes[1].ports() == {"client": 12380, "peer": 12381, "remoting": 12382, "metrics": 12383}
    with pytest.raises(ValueError):
        cluster_cmd.layout(3, 65530)


def test_cluster_up_passes_the_consensus_engine_on(tmp_path: Any) -> None:
    create_password_file(tmp_path / cluster_cmd.PASSWORD_FILE)
    nodes = cluster_cmd.layout(3, 12370)
    argv = cluster_cmd.serve_argv(nodes[0], nodes, tmp_path, consensus="pysyncobj")
    assert serve.build_config(parse(*argv[3:])).consensus == "pysyncobj"
    assert parse("cluster", "up", "--data-dir", "d", "--consensus", "native").consensus == "native"
    with pytest.raises(SystemExit):
        parse("cluster", "up", "--data-dir", "d", "--consensus", "raft")


def test_serve_and_cluster_up_take_the_grpc_front(tmp_path: Any) -> None:
    base = ("serve", "--id", "n0", "--data-dir", "/d")
    assert serve.build_config(parse(*base)).grpc_front == "python"
    assert serve.build_config(parse(*base, "--grpc-front", "go")).grpc_front == "go"
    with pytest.raises(SystemExit):
        parse(*base, "--grpc-front", "rust")
    create_password_file(tmp_path / cluster_cmd.PASSWORD_FILE)
    nodes = cluster_cmd.layout(3, 12370)
    argv = cluster_cmd.serve_argv(nodes[0], nodes, tmp_path, grpc_front="go")
    assert serve.build_config(parse(*argv[3:])).grpc_front == "go"
    assert "--grpc-front" not in cluster_cmd.serve_argv(nodes[0], nodes, tmp_path)
    assert parse("cluster", "up", "--data-dir", "d", "--grpc-front", "go").grpc_front == "go"


def test_cluster_up_starts_valid_serve_commands(tmp_path: Any) -> None:
    password = create_password_file(tmp_path / cluster_cmd.PASSWORD_FILE)
    nodes = cluster_cmd.layout(3, 12370)
    argv = cluster_cmd.serve_argv(nodes[2], nodes, tmp_path)
    assert argv[1:4] == ["-m", "nameserver.cli", "serve"]
    config = serve.build_config(parse(*argv[3:]))
    config.validate()
    assert config.node_id == "n2" and config.data_dir == str(tmp_path / "n2")
    assert config.listen_client == "127.0.0.1:12390" and config.listen_peer == "127.0.0.1:12391"
    assert config.initial_cluster == {
        "n0": "127.0.0.1:12371",
        "n1": "127.0.0.1:12381",
        "n2": "127.0.0.1:12391",
    }
    # the password reaches the node through its file, never on the command line
    assert config.cluster_password == password and password not in " ".join(argv)
    assert argv[argv.index("--cluster-password-file") + 1] == str(tmp_path / "cluster-password")
