"""TLS configuration (nameserver.tls, ServerConfig.validate): a file that cannot be used is
refused at start with the flag named; pysyncobj refuses peer TLS; the throwaway CA's
certificates verify and name the loopback hosts; the client library's TLS arguments; node
channels plain or TLS."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import grpc
import pytest

from nameserver.cli.ca import make_ca
from nameserver.cli.certs import ensure_ca, how_to_reach
from nameserver.client import Client, InvalidArgument
from nameserver.client.transport import channel_credentials
from nameserver.config import ServerConfig
from nameserver.tls import TlsFiles, client_context, node_channel, server_context
from raftlog import ConfigError


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("pki")
    make_ca(str(root / "ca"), ["n0", "n1"])
    make_ca(str(root / "other"), ["n0"])
    return root


def _config(**kw: object) -> ServerConfig:
    return ServerConfig(node_id="n0", data_dir="/tmp/x", cluster_password="pw", **kw)  # type: ignore[arg-type]


def _refused(field: str, flag_text: str, **kw: object) -> None:
    with pytest.raises(ConfigError) as exc:
        _config(**kw).validate()
    assert exc.value.field == field
    assert flag_text in str(exc.value)


def test_a_complete_set_validates(pki: Path) -> None:
    ca = str(pki / "ca")
    _config(
        cert_file=f"{ca}/n0.pem",
        key_file=f"{ca}/n0-key.pem",
        trusted_ca_file=f"{ca}/ca.pem",
        client_cert_auth=True,
        peer_cert_file=f"{ca}/n0.pem",
        peer_key_file=f"{ca}/n0-key.pem",
        peer_trusted_ca_file=f"{ca}/ca.pem",
        peer_client_cert_auth=True,
    ).validate()
    assert _config(cert_file="x").client_url.startswith("https://")
    assert _config().client_url.startswith("http://")


def test_files_that_cannot_be_used_are_refused_naming_the_flag(pki: Path, tmp_path: Path) -> None:
    ca = str(pki / "ca")
    pair = {"cert_file": f"{ca}/n0.pem", "key_file": f"{ca}/n0-key.pem"}
    _refused(
        "cert_file", "--cert-file /nope: cannot read", cert_file="/nope", key_file=pair["key_file"]
    )
    _refused("key_file", "--cert-file needs --key-file", cert_file=pair["cert_file"])
    _refused("cert_file", "--key-file needs --cert-file", key_file=pair["key_file"])
    _refused(
        "key_file",
        "the key does not match the certificate",
        cert_file=pair["cert_file"],
        key_file=f"{ca}/n1-key.pem",
    )
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("hello")
    _refused(
        "peer_cert_file",
        "--peer-cert-file",
        peer_cert_file=str(not_pem),
        peer_key_file=pair["key_file"],
    )
    _refused("trusted_ca_file", "--trusted-ca-file /nope", **pair, trusted_ca_file="/nope")
    _refused("client_cert_auth", "needs --trusted-ca-file", **pair, client_cert_auth=True)
    _refused("trusted_ca_file", "needs --cert-file", trusted_ca_file=f"{ca}/ca.pem")
    _refused(
        "peer_cert_file",
        "needs the native consensus engine",
        consensus="pysyncobj",
        peer_cert_file=pair["cert_file"],
        peer_key_file=pair["key_file"],
    )


def test_an_encrypted_key_is_refused_not_asked_for(pki: Path, tmp_path: Path) -> None:
    from cryptography.hazmat.primitives import serialization

    ca = pki / "ca"
    key = serialization.load_pem_private_key((ca / "n0-key.pem").read_bytes(), None)
    encrypted = tmp_path / "enc-key.pem"
    encrypted.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"secret"),
        )
    )
    _refused(
        "key_file",
        "an encrypted key is not supported",
        cert_file=str(ca / "n0.pem"),
        key_file=str(encrypted),
    )


def test_contexts_require_a_client_certificate_only_under_client_cert_auth(pki: Path) -> None:
    ca = str(pki / "ca")
    files = TlsFiles(f"{ca}/n0.pem", f"{ca}/n0-key.pem", f"{ca}/ca.pem", False)
    ctx = server_context(files)
    assert ctx is not None and ctx.verify_mode == ssl.CERT_NONE
    strict = server_context(TlsFiles(f"{ca}/n0.pem", f"{ca}/n0-key.pem", f"{ca}/ca.pem", True))
    assert strict is not None and strict.verify_mode == ssl.CERT_REQUIRED
    dial = client_context(files)
    assert dial is not None and dial.check_hostname
    assert server_context(TlsFiles()) is None and client_context(TlsFiles()) is None


def test_the_throwaway_ca_certificates_verify_for_loopback(pki: Path) -> None:
    from cryptography import x509

    ca = pki / "ca"
    cert = x509.load_pem_x509_certificate((ca / "n0.pem").read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert {str(ip) for ip in sans.get_values_for_type(x509.IPAddress)} == {"127.0.0.1", "::1"}
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    ctx = ssl.create_default_context(cafile=str(ca / "ca.pem"))
    ctx.load_cert_chain(str(ca / "n0.pem"), str(ca / "n0-key.pem"))  # key matches
    assert (ca / "n0-key.pem").stat().st_mode & 0o777 == 0o600


def test_ensure_ca_makes_once_then_reuses(tmp_path: Path) -> None:
    files = ensure_ca(str(tmp_path / "tls"), ["n0"])
    before = Path(files["cacert"]).read_bytes()
    assert ensure_ca(str(tmp_path / "tls"), ["n0"]) == files
    assert Path(files["cacert"]).read_bytes() == before
    text = how_to_reach("127.0.0.1:1,127.0.0.1:2", files)
    assert (
        "https://127.0.0.1:1,https://127.0.0.1:2" in text and f"--cacert {files['cacert']}" in text
    )


def test_client_tls_arguments(pki: Path) -> None:
    ca = pki / "ca"
    assert channel_credentials(None, None, None) is None
    assert channel_credentials(None, None, None, https=True) is not None
    assert channel_credentials(ca / "ca.pem", None, None) is not None
    assert channel_credentials((ca / "ca.pem").read_bytes(), ca / "n0.pem", str(ca / "n0-key.pem"))
    with pytest.raises(InvalidArgument, match="cert and key go together"):
        channel_credentials(None, ca / "n0.pem", None)
    with pytest.raises(InvalidArgument, match="cacert /nope: cannot read"):
        Client(["127.0.0.1:1"], cacert="/nope")


def test_node_channels_plain_and_tls(pki: Path) -> None:
    ca = str(pki / "ca")

    async def both() -> None:
        plain = node_channel("127.0.0.1:1", TlsFiles())
        secure = node_channel(
            "127.0.0.1:1", TlsFiles(f"{ca}/n0.pem", f"{ca}/n0-key.pem", f"{ca}/ca.pem")
        )
        for channel in (plain, secure):
            assert isinstance(channel, grpc.aio.Channel)
            await channel.close()

    asyncio.run(both())
