"""The connection options every client program shares (their flags: nameserver/cli/connection.py;
their environment and defaults: nameserver/client/connection.py) and the one RocketMQ ACL 1.0
signer (nameserver/client/acl.py) the server's check also uses."""

from __future__ import annotations

import argparse
import base64
import hashlib
import hmac
import io
import ssl
import sys
from pathlib import Path

import pytest

from nameserver.auth import acl as server_acl
from nameserver.cli import connection as options
from nameserver.cli.ca import make_ca
from nameserver.client import ConnectionOptions, OptionError, acl, remoting_tls


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    options.add_tls_options(parser)
    options.add_auth_options(parser)
    return parser.parse_args(argv)


def client_options(args: argparse.Namespace) -> dict[str, object]:
    """What ``Client(endpoints, **...)`` gets of the parsed flags and the environment."""
    return options.connection_options(args).client_kwargs()


@pytest.fixture(autouse=True)
def no_endpoints_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("METALEDGER_ENDPOINTS", raising=False)


def test_client_options_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("METALEDGER_USER", "METALEDGER_CACERT", "METALEDGER_CERT", "METALEDGER_KEY"):
        monkeypatch.delenv(env, raising=False)
    assert client_options(parse()) == {}
    got = client_options(parse("--user", "b:pw", "--cacert", "ca.pem"))
    assert got == {"user": "b", "password": "pw", "cacert": "ca.pem"}
    assert client_options(parse("--user", "b:x", "--password", "y"))["password"] == "y"
    monkeypatch.setenv("METALEDGER_USER", "e:epw")
    monkeypatch.setenv("METALEDGER_CERT", "c.pem")
    monkeypatch.setenv("METALEDGER_KEY", "k.pem")
    got = client_options(parse())
    assert got == {"user": "e", "password": "epw", "cert": "c.pem", "key": "k.pem"}


def test_unusable_options_are_option_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("METALEDGER_USER", "METALEDGER_CERT", "METALEDGER_KEY"):
        monkeypatch.delenv(env, raising=False)
    with pytest.raises(OptionError, match="--cert and --key go together"):
        client_options(parse("--cert", "c.pem"))
    with pytest.raises(OptionError, match="user name is empty"):
        client_options(parse("--user", ":pw"))
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # a service: no terminal to ask
    with pytest.raises(OptionError, match="no password"):
        client_options(parse("--user", "broker-a"))


def test_remoting_tls_context(tmp_path: Path) -> None:
    make_ca(str(tmp_path), ["client"])
    assert remoting_tls({}) is None
    files = {
        "cacert": str(tmp_path / "ca.pem"),
        "cert": str(tmp_path / "client.pem"),
        "key": str(tmp_path / "client-key.pem"),
    }
    context = remoting_tls(files)
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    with pytest.raises(OptionError, match="cannot use the TLS files"):
        remoting_tls({"cacert": str(tmp_path / "missing.pem")})


def test_one_signer_for_clients_and_the_server_check() -> None:
    ext = {"topic": "T", "namespace": "ns", "b": "2"}
    acl.sign("ak", "sk", ext, b"BODY")
    # by field name as Java's TreeMap orders them: AccessKey, b, namespace, topic
    content = ("ak" + "2" + "ns" + "T").encode() + b"BODY"
    mac = hmac.new(b"sk", content, hashlib.sha1).digest()
    assert ext["Signature"] == base64.b64encode(mac).decode()
    assert server_acl.signature is acl.signature and server_acl.sign is acl.sign
    signed = {"k": "v"}
    acl.SessionCredentials("ak", "sk").sign(signed, None)
    assert signed["AccessKey"] == "ak"
    assert signed["Signature"] == acl.signature("sk", {"k": "v", "AccessKey": "ak"}, b"")
    with pytest.raises(ValueError, match="go together"):
        acl.SessionCredentials("ak", "")


def test_connection_options_resolve_values_then_environment_then_defaults() -> None:
    assert ConnectionOptions.resolve(environ={}) == ConnectionOptions()
    assert ConnectionOptions().endpoints == ("127.0.0.1:9877",)
    env = {"METALEDGER_ENDPOINTS": "h1:1, http://h2:2", "METALEDGER_USER": "u:s3cret"}
    got = ConnectionOptions.resolve(environ=env, timeout_s=2.0)
    assert (got.endpoints, got.timeout_s, got.user, got.password) == (
        ("h1:1", "h2:2"), 2.0, "u", "s3cret"
    )  # fmt: skip
    assert "s3cret" not in repr(got)  # no password in logs
    assert ConnectionOptions.resolve(endpoints="x:3", environ=env).endpoints == ("x:3",)
    asked = ConnectionOptions.resolve(user="v", environ={}, ask_password=lambda name: name + "!")
    assert asked.client_kwargs() == {"user": "v", "password": "v!"}
    with pytest.raises(OptionError, match="METALEDGER_ENDPOINTS: endpoint 'nope' is not HOST"):
        ConnectionOptions.resolve(environ={"METALEDGER_ENDPOINTS": "nope"})
    with pytest.raises(OptionError, match="--endpoints: no endpoint given"):
        ConnectionOptions.resolve(endpoints=",", environ={})
