"""RocketMQ ACL 1.0 request signing (``AclClientRPCHook``), for every remoting client.

A client holding session credentials (access key, secret key) adds two ext fields to each
request it sends (RocketMQ's ``AclClientRPCHook.doBeforeRequest``, ``AclUtils``)::

    content   = the values of every ext field but Signature, ordered by field name, as UTF-8,
                followed by the body bytes                      (combineRequestContent)
    Signature = base64(HmacSHA1(secretKey, content))             (calSignature)

The nameserver's remoting ACL (``nameserver/auth/acl.py``) recomputes the same signature with
these functions, so signer and checker are one implementation. Sans-I/O, standard library
only: the broker and the replicators import it (their import-linter contract allows
``nameserver.client``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass

ACCESS_KEY = "AccessKey"  # SessionCredentials.ACCESS_KEY
SIGNATURE = "Signature"  # SessionCredentials.SIGNATURE


def content(ext_fields: Mapping[str, str], body: bytes | None) -> bytes:
    """``AclUtils.combineRequestContent``: sorted ext field values but Signature, then body."""
    text = "".join(v for k, v in sorted(ext_fields.items()) if k != SIGNATURE)
    return text.encode() + (body or b"")


def signature(secret_key: str, ext_fields: Mapping[str, str], body: bytes | None) -> str:
    """``AclUtils.calSignature`` of a request: base64 of HmacSHA1(secret key, content)."""
    mac = hmac.new(secret_key.encode(), content(ext_fields, body), hashlib.sha1).digest()
    return base64.b64encode(mac).decode()


def sign(access_key: str, secret_key: str, ext_fields: dict[str, str], body: bytes | None) -> None:
    """Add ``AccessKey`` and ``Signature`` to ``ext_fields`` as ``AclClientRPCHook`` does."""
    ext_fields[ACCESS_KEY] = access_key
    ext_fields.pop(SIGNATURE, None)
    ext_fields[SIGNATURE] = signature(secret_key, ext_fields, body)


@dataclass(frozen=True)
class SessionCredentials:
    """RocketMQ's ``SessionCredentials``: what a remoting client signs its requests with."""

    access_key: str
    secret_key: str

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("access key and secret key go together and may not be empty")

    def sign(self, ext_fields: dict[str, str], body: bytes | None) -> None:
        sign(self.access_key, self.secret_key, ext_fields, body)
