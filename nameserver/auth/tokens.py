"""Auth tokens, etcd's two kinds (``auth/simple_token.go``, ``auth/jwt.go``, ``options.go``).

* ``simple``: a random token kept in memory on the node that issued it, valid there only,
  for ``--auth-token-ttl`` seconds (default 300) from its last use (etcd renews a simple
  token on every use); forgotten when auth is disabled or the user's password changes or
  the user is deleted.
* ``jwt,sign-method=HS256|RS256|ES256,priv-key=F,pub-key=F,ttl=5m``: a signed JSON Web
  Token carrying etcd's claims ``username``, ``revision``, ``exp``; any node holding the
  key verifies it, so a token from one node works on every node. HS256 signs with the
  bytes of ``priv-key`` (etcd's HMAC key file); RS256/ES256 with a PEM key pair (a node with
  ``pub-key`` only verifies).

A token provider is sans-I/O but for reading key files at start; the clock is injectable.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Callable
from typing import Any, Protocol

from nameserver.checks import parse_go_duration
from nameserver.errors import InvalidArgument

DEFAULT_SIMPLE_TTL_S = 300  # etcd's simpleTokenTTLDefault
DEFAULT_JWT_TTL_S = 300  # etcd's DefaultTTL (5m)
SIGN_METHODS = ("HS256", "RS256", "ES256")


class TokenProvider(Protocol):
    def assign(self, user: str, revision: int) -> str:
        """A new token for ``user`` (authenticated at auth ``revision``)."""
        ...

    def info(self, token: str) -> tuple[str, int] | None:
        """(user, revision) of a valid token; None if unknown, forged or expired."""
        ...

    def invalidate_user(self, user: str) -> None: ...

    def disable(self) -> None: ...


class SimpleTokens:
    """etcd's simple tokens: random, node-local, TTL renewed on use."""

    def __init__(
        self, ttl_s: float = DEFAULT_SIMPLE_TTL_S, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.ttl_s = ttl_s
        self._now = now
        self._tokens: dict[str, tuple[str, int, float]] = {}  # token -> user, revision, expiry
        self._index = 0

    def assign(self, user: str, revision: int) -> str:
        self._index += 1
        token = "".join(
            secrets.choice("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
            for _ in range(16)
        )
        token = f"{token}.{self._index}"  # etcd: 16 letters "." raft index
        self._tokens[token] = (user, revision, self._now() + self.ttl_s)
        self._expire()
        return token

    def info(self, token: str) -> tuple[str, int] | None:
        found = self._tokens.get(token)
        if found is None:
            return None
        user, revision, expiry = found
        now = self._now()
        if now >= expiry:
            del self._tokens[token]
            return None
        self._tokens[token] = (user, revision, now + self.ttl_s)  # renewed on use
        return user, revision

    def invalidate_user(self, user: str) -> None:
        for token in [t for t, (u, _, _) in self._tokens.items() if u == user]:
            del self._tokens[token]

    def disable(self) -> None:
        self._tokens.clear()

    def _expire(self) -> None:
        if len(self._tokens) % 1024:
            return  # sweep now and then; info() drops an expired token it meets
        now = self._now()
        for token in [t for t, (_, _, e) in self._tokens.items() if e <= now]:
            del self._tokens[token]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class JwtTokens:
    """etcd's JWT tokens (claims ``username``, ``revision``, ``exp``)."""

    def __init__(
        self,
        sign_method: str,
        priv_key: bytes | None,
        pub_key: bytes | None,
        ttl_s: float = DEFAULT_JWT_TTL_S,
        now: Callable[[], float] = time.time,
    ) -> None:
        if sign_method not in SIGN_METHODS:
            raise InvalidArgument(
                f"auth-token: sign-method {sign_method!r} is not one of {', '.join(SIGN_METHODS)}"
            )
        self.sign_method, self.ttl_s, self._now = sign_method, ttl_s, now
        self._hmac_key: bytes | None = None
        self._private: Any = None
        self._public: Any = None
        if sign_method == "HS256":
            if not priv_key:
                raise InvalidArgument("auth-token: HS256 needs priv-key (the HMAC key file)")
            self._hmac_key = priv_key
        else:
            from cryptography.hazmat.primitives import serialization

            if priv_key:
                self._private = serialization.load_pem_private_key(priv_key, password=None)
                self._public = self._private.public_key()
            if pub_key:
                self._public = serialization.load_pem_public_key(pub_key)
            if self._public is None:
                raise InvalidArgument(f"auth-token: {sign_method} needs pub-key or priv-key")

    def _sign(self, data: bytes) -> bytes:
        if self._hmac_key is not None:
            return hmac.new(self._hmac_key, data, hashlib.sha256).digest()
        if self._private is None:
            raise InvalidArgument("etcdserver: token signing attempted with verify-only key")
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

        if self.sign_method == "RS256":
            sig: bytes = self._private.sign(data, padding.PKCS1v15(), hashes.SHA256())
            return sig
        der = self._private.sign(data, ec.ECDSA(hashes.SHA256()))
        r, s = utils.decode_dss_signature(der)
        return r.to_bytes(32, "big") + s.to_bytes(32, "big")  # JWS: raw r || s

    def _verify(self, data: bytes, sig: bytes) -> bool:
        if self._hmac_key is not None:
            return hmac.compare_digest(sig, hmac.new(self._hmac_key, data, hashlib.sha256).digest())
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec, padding, utils

        try:
            if self.sign_method == "RS256":
                self._public.verify(sig, data, padding.PKCS1v15(), hashes.SHA256())
            else:
                if len(sig) != 64:
                    return False
                der = utils.encode_dss_signature(
                    int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:], "big")
                )
                self._public.verify(der, data, ec.ECDSA(hashes.SHA256()))
        except InvalidSignature:
            return False
        return True

    def assign(self, user: str, revision: int) -> str:
        header = _b64(
            json.dumps({"alg": self.sign_method, "typ": "JWT"}, separators=(",", ":")).encode()
        )
        claims = {"exp": int(self._now() + self.ttl_s), "revision": revision, "username": user}
        payload = _b64(json.dumps(claims, separators=(",", ":")).encode())
        signing_input = f"{header}.{payload}".encode()
        return f"{header}.{payload}.{_b64(self._sign(signing_input))}"

    def info(self, token: str) -> tuple[str, int] | None:
        try:
            header, payload, sig = token.split(".")
            if json.loads(_unb64(header)).get("alg") != self.sign_method:
                return None
            if not self._verify(f"{header}.{payload}".encode(), _unb64(sig)):
                return None
            claims = json.loads(_unb64(payload))
            user, revision, exp = claims["username"], claims["revision"], claims["exp"]
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        if (
            not isinstance(user, str)
            or not isinstance(revision, int | float)
            or not isinstance(exp, int | float)
        ):
            return None
        if self._now() >= exp:
            return None
        return user, int(revision)

    def invalidate_user(self, user: str) -> None:
        return None  # a JWT is valid until it expires (as etcd's)

    def disable(self) -> None:
        return None


def parse_duration_s(text: str) -> float:
    """Go's ``time.ParseDuration`` for the forms etcd's ``ttl=`` takes ("5m", "1h30m", "10s")."""
    try:
        return parse_go_duration(text)
    except ValueError:
        raise InvalidArgument(
            f"auth-token: ttl {text!r} is not a duration (e.g. 5m, 300s)"
        ) from None


def parse_token_spec(spec: str) -> dict[str, str]:
    """``--auth-token`` (etcd's format) -> its options, ``type`` included; raises
    InvalidArgument naming what is wrong."""
    kind, _, rest = spec.partition(",")
    opts = {"type": kind}
    if kind == "simple":
        if rest:
            raise InvalidArgument("auth-token: simple takes no options")
        return opts
    if kind != "jwt":
        raise InvalidArgument(f"auth-token: {kind!r} is not simple or jwt")
    for part in filter(None, rest.split(",")):
        name, sep, value = part.partition("=")
        if not sep or name not in ("sign-method", "priv-key", "pub-key", "ttl"):
            raise InvalidArgument(f"auth-token: unknown jwt option {part!r}")
        opts[name] = value
    if "sign-method" not in opts:
        raise InvalidArgument("auth-token: jwt needs sign-method=HS256|RS256|ES256")
    if opts["sign-method"] not in SIGN_METHODS:
        raise InvalidArgument(
            f"auth-token: sign-method {opts['sign-method']!r} is not one of {', '.join(SIGN_METHODS)}"
        )
    if "ttl" in opts:
        parse_duration_s(opts["ttl"])
    return opts


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def provider(spec: str, simple_ttl_s: float = DEFAULT_SIMPLE_TTL_S) -> TokenProvider:
    """The token provider ``--auth-token`` names (key files read here, at start)."""
    opts = parse_token_spec(spec)
    if opts["type"] == "simple":
        return SimpleTokens(simple_ttl_s)
    ttl = parse_duration_s(opts["ttl"]) if "ttl" in opts else DEFAULT_JWT_TTL_S
    return JwtTokens(
        opts["sign-method"], _read(opts.get("priv-key")), _read(opts.get("pub-key")), ttl
    )


def node_credential(cluster_password: str) -> str:
    """The token one member presents to another (acts as root): derived from the cluster
    password, so every member computes the same one and no client can without it."""
    digest = hmac.new(cluster_password.encode(), b"metaledger node credential v1", hashlib.sha256)
    return "ml-node." + digest.hexdigest()
