"""``metaledger status`` reaches a member at any of the client URLs it advertises (in order),
and ``serve --advertise-client`` takes several (docker-compose.yml: the container's name for
the members, then the host's published port for ``metaledger status`` on the host)."""

from __future__ import annotations

from typing import Any

import pytest

from nameserver import cli
from nameserver.cli import serve, status
from nameserver.cli.exitcodes import ExitCode
from nameserver.client import Member, NodeStatus, Unavailable
from nameserver.config import ConfigError

MEMBERS = [
    Member(0x1, "n0", ["http://ml0:9878"], ["http://ml0:9877", "http://127.0.0.1:9877"]),
    Member(0x2, "n1", ["http://ml1:9878"], ["http://ml1:9877", "http://127.0.0.1:9887"]),
    Member(0x3, "n2", ["http://ml2:9878"], ["http://ml2:9877", "http://127.0.0.1:9897"]),
]


def node(nid: str, endpoint: str, member_id: int) -> NodeStatus:
    return NodeStatus(nid, endpoint, "follower", 2, "n0", 10, 9, 8, member_id=member_id)


class Network:
    """What the host reaches: the published ports, not the container names."""

    def __init__(self, up: dict[str, NodeStatus]) -> None:
        self.up = up
        self.asked: list[list[str]] = []

    def client(self, args: Any, at: list[str] | None = None) -> Any:
        network, endpoints = self, at or ["127.0.0.1:9877"]
        network.asked.append(endpoints)

        class Fake:
            def __enter__(self) -> Any:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def status_all(self) -> list[Any]:
                return [network.up.get(e) or Unavailable("unreachable", e) for e in endpoints]

            def members(self) -> list[Member]:
                return MEMBERS

        fake = Fake()
        fake.endpoints = endpoints  # type: ignore[attr-defined]
        return fake


def reachable(monkeypatch: pytest.MonkeyPatch, *endpoints: str) -> Network:
    """``metaledger status`` in a network where the members answer at ``endpoints`` only."""
    up = {}
    for e in endpoints:
        m = next(m for m in MEMBERS if any(u.endswith("//" + e) for u in m.client_urls))
        up[e] = node(m.name, e, m.member_id)
    net = Network(up)
    monkeypatch.setattr(status, "make_client", net.client)
    return net


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METALEDGER_ENDPOINTS", raising=False)


def test_status_tries_each_advertised_url_in_turn(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    net = reachable(monkeypatch, "127.0.0.1:9877", "127.0.0.1:9887", "127.0.0.1:9897")
    assert cli.main(["status"]) == ExitCode.OK, capsys.readouterr().err
    out = capsys.readouterr().out
    assert all(f"n{i}" in out for i in range(3)), out
    assert net.asked[1:] == [["ml1:9877", "ml2:9877"], ["127.0.0.1:9887", "127.0.0.1:9897"]]


def test_a_member_down_at_every_url_is_named_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    reachable(monkeypatch, "127.0.0.1:9877", "ml1:9877")
    assert cli.main(["status"]) == ExitCode.MEMBER_DOWN
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["metaledger: member n2 (ml2:9877,127.0.0.1:9897) is down: unreachable"], err


def test_serve_advertises_several_client_urls() -> None:
    base = ["serve", "--id", "n1", "--data-dir", "/d", "--listen-client", "0.0.0.0:9877"]
    args = cli.build_parser().parse_args([*base, "--advertise-client", "ml1:9877,127.0.0.1:9887"])
    config = serve.build_config(args)
    assert config.client_urls == ("http://ml1:9877", "http://127.0.0.1:9887")
    assert config.client_url == "http://ml1:9877"  # where the other members forward to
    config = serve.build_config(cli.build_parser().parse_args(base))
    assert config.client_urls == ("http://0.0.0.0:9877",)
    args = cli.build_parser().parse_args([*base, "--advertise-client", "ml1:9877,ml1"])
    with pytest.raises(ConfigError, match=r"^advertise_client: 'ml1' is not host:port"):
        serve.build_config(args).validate()
