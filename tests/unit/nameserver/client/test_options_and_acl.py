"""The connection options every client program shares (nameserver/client/options.py) and the
one RocketMQ ACL 1.0 signer (nameserver/client/acl.py) the server's check also uses."""

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
from nameserver.cli.ca import make_ca
from nameserver.client import acl, options


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    options.add_tls_options(parser)
    options.add_auth_options(parser)
    return parser.parse_args(argv)


def test_client_options_from_flags_and_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("METALEDGER_USER", "METALEDGER_CACERT", "METALEDGER_CERT", "METALEDGER_KEY"):
        monkeypatch.delenv(env, raising=False)
    assert options.client_options(parse()) == {}
    got = options.client_options(parse("--user", "b:pw", "--cacert", "ca.pem"))
    assert got == {"user": "b", "password": "pw", "cacert": "ca.pem"}
    assert options.client_options(parse("--user", "b:x", "--password", "y"))["password"] == "y"
    monkeypatch.setenv("METALEDGER_USER", "e:epw")
    monkeypatch.setenv("METALEDGER_CERT", "c.pem")
    monkeypatch.setenv("METALEDGER_KEY", "k.pem")
    got = options.client_options(parse())
    assert got == {"user": "e", "password": "epw", "cert": "c.pem", "key": "k.pem"}


def test_unusable_options_are_option_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    for env in ("METALEDGER_USER", "METALEDGER_CERT", "METALEDGER_KEY"):
        monkeypatch.delenv(env, raising=False)
    with pytest.raises(options.OptionError, match="--cert and --key go together"):
        options.client_options(parse("--cert", "c.pem"))
    with pytest.raises(options.OptionError, match="user name is empty"):
        options.client_options(parse("--user", ":pw"))
    monkeypatch.setattr(sys, "stdin", io.StringIO())  # a service: no terminal to ask
    with pytest.raises(options.OptionError, match="no password"):
        options.client_options(parse("--user", "broker-a"))


def test_remoting_tls_context(tmp_path: Path) -> None:
    make_ca(str(tmp_path), ["client"])
    assert options.remoting_tls({}) is None
    files = {
        "cacert": str(tmp_path / "ca.pem"),
        "cert": str(tmp_path / "client.pem"),
        "key": str(tmp_path / "client-key.pem"),
    }
    context = options.remoting_tls(files)
    assert isinstance(context, ssl.SSLContext) and context.check_hostname
    with pytest.raises(options.OptionError, match="cannot use the TLS files"):
        options.remoting_tls({"cacert": str(tmp_path / "missing.pem")})


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
