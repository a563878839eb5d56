"""Command modules of other packages come in through the ``metaledger.commands`` entry points."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

import nameserver.cli as cli
from nameserver.cli.connection import CommonOptions


@dataclass
class FakeEntryPoint:
    name: str
    value: str
    target: Any

    def load(self) -> Any:
        if isinstance(self.target, Exception):
            raise self.target
        return self.target


def test_entry_points_register_commands_and_a_broken_one_is_skipped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def register(sub: Any, common: CommonOptions) -> None:
        p = sub.add_parser("hello", parents=[common.parent])
        p.set_defaults(run=lambda args: 0)

    eps = [
        FakeEntryPoint("hello", "x:register", register),
        FakeEntryPoint("hello", "y:register", ImportError("shadowed, never loaded")),
        FakeEntryPoint("broken", "z:register", ImportError("no module named z")),
    ]
    monkeypatch.setattr(
        cli, "entry_points", lambda group: eps if group == cli.COMMANDS_GROUP else []
    )
    assert cli.main(["hello"]) == 0
    err = capsys.readouterr().err
    assert "'broken' (z:register) not loaded: no module named z" in err
    assert "shadowed" not in err
    assert cli.main(["status", "--help"]) == 0  # the built-in commands still work
