"""One default endpoint, in one place, for every command (issue 29): without ``--endpoints``
and without ``$METALEDGER_ENDPOINTS`` every command that talks to a cluster, the broker's and
the replicators' included, connects to ``127.0.0.1:9877`` and says so in its help; with the
variable set, to what it names. Each command runs until it resolves its endpoints through the
client library's one resolver (:func:`nameserver.client.resolve_endpoints`), which is stopped
there, so nothing connects."""

from __future__ import annotations

import argparse
import io
import sys
from collections.abc import Iterator

import pytest

import nameserver.cli._common as common_module
import nameserver.client.connection as connection_module
from nameserver import cli
from nameserver.client import DEFAULT_ENDPOINTS, ENDPOINTS_ENV

NAMESRVS = ["--source-namesrv", "127.0.0.1:1", "--dest-namesrv", "127.0.0.1:2"]

#: a command line of every command that takes --endpoints (its required arguments only)
COMMANDS = {
    "status": [],
    "put": ["k", "v"],
    "get": ["k"],
    "del": ["k"],
    "txn": [],
    "watch": ["k"],
    "member add": ["http://127.0.0.1:1"],
    "member promote": ["1"],
    "member remove": ["1"],
    "member list": [],
    "leader transfer": [],
    "lease grant": ["10"],
    "lease revoke": ["1"],
    "lease keep-alive": ["1"],
    "lease ttl": ["1"],
    "lease list": [],
    "lock": ["name", "true"],
    "elect": ["name", "--listen"],
    "snapshot save": ["out.db"],
    "bench": ["put"],
    "offsets commit": ["job", "0", "1", "--lease", "1", "--token", "1"],
    "offsets fetch": ["job", "0"],
    "offsets list": [],
    "offsets reset": ["job", "0", "1"],
    "quota set": ["kv"],
    "quota list": [],
    "replica-group show": ["g"],
    "replica-group list": [],
    "replica-group elect": ["g"],
    "replica-group alter-isr": ["g", "--master-epoch", "1", "--isr-epoch", "1", "--isr", "1"],
    "replica-group policy": ["g"],
    "route get": ["T"],
    "route clusters": [],
    "route brokers": [],
    "route topics": [],
    "route topic create": ["T", "--broker", "b"],
    "route topic delete": ["T"],
    "kvconfig get": ["ns", "k"],
    "kvconfig put": ["ns", "k", "v"],
    "kvconfig delete": ["ns", "k"],
    "kvconfig list": ["ns"],
    "user set-secret-key": ["u", "sk"],
    "broker": ["--group", "g", "--data-dir", "DATA"],
    "send": ["T", "body"],
    "consume": ["T", "--group", "g"],
    "console": [],
    "message get": ["--key", "k", "--topic", "T"],
    "consumer lag": ["--group", "g"],
    "replicate status": [],
    "replicate redis": ["--source", "redis://127.0.0.1:1", "--topic", "T", "--job", "j"],
    "replicate rocketmq": [*NAMESRVS, "--topics", "T", "--job", "j"],
    "replicate translate": [*NAMESRVS, "--job", "j", "--group", "g"],
}


class Resolved(Exception):
    """Raised where a command resolved its endpoints (nothing connects)."""

    def __init__(self, endpoints: tuple[str, ...]) -> None:
        super().__init__(endpoints)
        self.endpoints = endpoints


def leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[
    tuple[str, argparse.ArgumentParser]
]:  # fmt: skip
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from leaves(sub, (*path, name))


def with_endpoints() -> dict[str, argparse.ArgumentParser]:
    return {
        name: parser
        for name, parser in leaves(cli.build_parser())
        if any("--endpoints" in a.option_strings for a in parser._actions)
    }


@pytest.fixture(autouse=True)
def resolver(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every resolution of endpoints goes through the one resolver; stop each there."""
    real = connection_module.resolve_endpoints

    def resolve(given: str | None, environ: object = None) -> tuple[str, ...]:
        raise Resolved(real(given))

    monkeypatch.setattr(connection_module, "resolve_endpoints", resolve)
    monkeypatch.setattr(common_module, "resolve_endpoints", resolve)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    for env in (ENDPOINTS_ENV, "METALEDGER_USER", "METALEDGER_CACERT"):
        monkeypatch.delenv(env, raising=False)


def resolved(command: str, tmp_path: object) -> tuple[str, ...]:
    argv = [*command.split(), *(str(a).replace("DATA", str(tmp_path)) for a in COMMANDS[command])]
    with pytest.raises(Resolved) as got:
        cli.main(argv)
    return got.value.endpoints


def test_every_command_with_endpoints_is_listed_here() -> None:
    assert sorted(with_endpoints()) == sorted(COMMANDS)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_one_default_endpoint(command: str, tmp_path: object) -> None:
    assert resolved(command, tmp_path) == (DEFAULT_ENDPOINTS,)
    endpoints = next(
        a for a in with_endpoints()[command]._actions if "--endpoints" in a.option_strings
    )
    assert f"env {ENDPOINTS_ENV}; default {DEFAULT_ENDPOINTS}" in str(endpoints.help)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_the_environment_then_the_flag(
    command: str, tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENDPOINTS_ENV, "127.0.0.1:1,127.0.0.1:2")
    assert resolved(command, tmp_path) == ("127.0.0.1:1", "127.0.0.1:2")
    flagged = [*command.split(), "--endpoints", "127.0.0.1:3", *COMMANDS[command]]
    with pytest.raises(Resolved) as got:
        cli.main([str(a).replace("DATA", str(tmp_path)) for a in flagged])
    assert got.value.endpoints == ("127.0.0.1:3",)


def test_the_top_level_help_names_the_default() -> None:
    assert DEFAULT_ENDPOINTS in str(cli.build_parser().description)
