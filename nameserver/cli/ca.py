"""A throwaway certificate authority for local clusters (``metaledger cluster up --tls``;
the file layout and the command lines are :mod:`nameserver.cli.certs`).

Writes, with ``cryptography``, into one directory: ``ca.pem`` (the CA certificate: what
``--trusted-ca-file``, ``--peer-trusted-ca-file`` and a client's ``--cacert`` take) and,
per name, ``NAME.pem`` + ``NAME-key.pem``. Every leaf certificate names 127.0.0.1, ::1
and localhost (subject alternative names: gRPC and etcdctl check the host name against
them) and may serve and authenticate as a client (extended key usages serverAuth and
clientAuth), so a node uses one pair on every port and to dial other nodes, as etcd's
own test certificates do. Keys are ECDSA P-256, written unencrypted with mode 0600; the
CA key is not kept (nothing can sign more certificates later: make a new cluster).
These are for local use only; a real deployment brings its own PKI.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["CertPair", "make_ca"]

VALID_DAYS = 365
CA_FILE = "ca.pem"


@dataclass(frozen=True)
class CertPair:
    cert_file: str
    key_file: str


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "metaledger cluster up"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write(path: str, data: bytes, private: bool = False) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


class _Ca:
    def __init__(self, common_name: str) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        self.name = _name(common_name)
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(self.name)
            .issuer_name(self.name)
            .public_key(self.key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, common_name: str, hosts: tuple[str, ...]) -> tuple[bytes, bytes]:
        """(certificate PEM, key PEM) of a leaf for ``hosts`` (IPs and DNS names)."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        sans: list[x509.GeneralName] = []
        for host in hosts:
            try:
                sans.append(x509.IPAddress(ipaddress.ip_address(host)))
            except ValueError:
                sans.append(x509.DNSName(host))
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name))
            .issuer_name(self.name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=VALID_DAYS))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
                ),
                critical=False,
            )
            .sign(self.key, hashes.SHA256())
        )
        key_pem = key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        return cert.public_bytes(serialization.Encoding.PEM), key_pem


LOCAL_HOSTS = ("127.0.0.1", "::1", "localhost")


def make_ca(
    directory: str, names: list[str], hosts: tuple[str, ...] = LOCAL_HOSTS
) -> dict[str, CertPair]:
    """A new CA in ``directory/ca.pem`` and one certificate pair per name (a node id, or
    ``client`` for the command line), each good for ``hosts``. Returns name → pair."""
    os.makedirs(directory, exist_ok=True)
    ca = _Ca(f"metaledger throwaway CA {os.path.basename(os.path.abspath(directory))}")
    _write(os.path.join(directory, CA_FILE), ca.cert.public_bytes(serialization.Encoding.PEM))
    out = {}
    for name in names:
        cert, key = ca.issue(name, hosts)
        pair = CertPair(
            os.path.join(directory, f"{name}.pem"), os.path.join(directory, f"{name}-key.pem")
        )
        _write(pair.cert_file, cert)
        _write(pair.key_file, key, private=True)
        out[name] = pair
    return out
