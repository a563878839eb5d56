"""``metaledger snapshot ...`` builds the parser of its group alone (nothing else imported):
what it parses is what the whole command line parses, and its help is the same."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nameserver import cli

ARGVS = [
    ["snapshot", "restore", "--from-etcd", "etcd.db", "--data-dir", "/d"],
    ["snapshot", "restore", "ml.snap", "--data-dir", "/d", "--output", "json"],
    ["snapshot", "inspect", "ml.snap", "--verify"],
    ["snapshot", "list", "--data-dir", "/d"],
]


def _vars(args: argparse.Namespace) -> dict[str, object]:
    return {k: v for k, v in vars(args).items() if k != "run"} | {"run": args.run.__name__}


@pytest.mark.parametrize("argv", ARGVS)
def test_the_group_alone_parses_what_the_whole_line_parses(argv: list[str]) -> None:
    whole = cli.build_parser().parse_args(argv)
    alone = cli.build_parser(argv[0]).parse_args(argv)
    assert _vars(alone) == _vars(whole)


def test_each_alone_command_is_its_groups_only_command() -> None:
    for name in cli._ALONE:
        sub = cli.build_parser(name)._subparsers
        assert sub is not None
        (action,) = sub._group_actions
        assert isinstance(action, argparse._SubParsersAction)
        assert list(action.choices) == [name]


def test_a_snapshot_command_imports_no_other_group_or_plugin() -> None:
    code = (
        "import json, sys; from nameserver import cli; cli.main(['snapshot', 'list', "
        "'--data-dir', '/nonexistent']); print(json.dumps(sorted(m for m in sys.modules if "
        "m.startswith(('broker', 'replicator', 'console', 'nameserver.cli.')))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "nameserver.cli.snapshot" in loaded
    assert not [m for m in loaded if m.startswith(("broker", "replicator", "console"))]
    assert not {f"nameserver.cli.{g}" for g in cli._GROUPS if g != "snapshot"} & set(loaded)


def test_seeding_from_etcd_imports_no_client_grpc_raftlog_or_state_machine(
    tmp_path: Path,
) -> None:
    """``snapshot restore --from-etcd`` is a command's whole run: its start is part of the
    time it takes (the client library and gRPC were 0.12 s of it, raftlog and the state
    machine 0.1 s; ``importlib.metadata``, through the crc32c package, 10-15 ms, the
    snapshot reader, stores, replay and auth records a few ms each)."""
    from snapshots.etcdfmt import EtcdImage, KeyRevision, write_etcd_snapshot

    etcd = tmp_path / "etcd.db"
    keys = (KeyRevision(2, 0, b"a", b"1", 2, 2, 1),)
    etcd.write_bytes(write_etcd_snapshot(EtcdImage(keys=keys, consistent_index=2)))
    code = (
        "import json, sys; from nameserver import cli; code = cli.main(['snapshot', 'restore', "
        f"'--from-etcd', {str(etcd)!r}, '--data-dir', {str(tmp_path / 'd')!r}]); "
        "print(json.dumps([code, sorted(sys.modules)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    code_, loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert code_ == 0 and (tmp_path / "d" / "snap").is_dir()
    unwanted = ("grpc", "raftlog", "nameserver.client", "nameserver.state.machine")
    assert not [m for m in loaded if m.startswith(unwanted)]
    lazy = {
        "importlib.metadata",
        "snapshots._reader",
        "snapshots._replay",
        "snapshots._store",
        "snapshots._tail",
        "nameserver.auth.records",
    }
    assert not lazy & set(loaded)
