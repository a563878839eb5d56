"""The Raft peer port's handshake: both ends prove they know the cluster password.

A connection to the peer port starts with a mutual challenge-response; nothing else is
read before it succeeds::

    listener -> dialer    MAGIC (4) + listener nonce (16)                          GREETING
    dialer   -> listener  address length (2, LE) + address + dialer nonce (16)
                          + HMAC-SHA256(key, b"dial" + nonces + address) (32)      HELLO
    listener -> dialer    HMAC-SHA256(key, b"accept" + nonces + address) (32)      PROOF

The dialer's MAC binds the listener's fresh nonce and the address it claims (a recorded
hello does not pass against another nonce, nor for another address); the listener's proof
binds the dialer's nonce, so a process that took over a member's port without the password
cannot collect the messages meant for it. The two MACs carry different labels, so one can
never be reflected as the other. MACs are compared with :func:`hmac.compare_digest`.

There is no "no password" mode: :class:`PeerKey` refuses an empty password, so a zero or
empty key can never be agreed on. The frames after the handshake are not encrypted (run
the peer port on a private network).

The handshake itself is sans-I/O (:class:`Listener`, :class:`Dialer`: bytes in, bytes
out); :func:`accept` and :func:`dial` drive it over asyncio streams for the native engine.
Password files (what ``cluster up`` creates and ``serve --cluster-password-file`` reads)
are here too: :func:`create_password_file`, :func:`read_password_file`.

Errors: :class:`PeerAuthError` (a :class:`~raftlog.errors.RaftLogError`) for a handshake
that fails; a bad password or password file is a :class:`~raftlog.errors.ConfigError`.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import os
import secrets

from raftlog.errors import ConfigError, RaftLogError

MAGIC = b"MLP1"
NONCE_BYTES = 16
MAC_BYTES = 32
#: the longest address a dialer may claim (host:port; a DNS name is at most 253 bytes)
MAX_ADDRESS_BYTES = 300
GREETING_BYTES = len(MAGIC) + NONCE_BYTES
HELLO_HEAD_BYTES = 2
PROOF_BYTES = MAC_BYTES
_DIAL = b"metaledger peer dial\x00"
_ACCEPT = b"metaledger peer accept\x00"
#: the bytes of a password ``cluster up`` generates (secrets.token_urlsafe: 43 characters)
GENERATED_PASSWORD_BYTES = 32
PASSWORD_FILE_MODE = 0o600


class PeerAuthError(RaftLogError):
    """A peer handshake failed: bad format, wrong password, or the other end's proof.

    ``address`` is the address the dialer claimed, when it got that far (for the log)."""

    def __init__(self, message: str, address: str = "") -> None:
        super().__init__(message)
        self.address = address


class PeerKey:
    """The cluster password as an HMAC key. Never empty; its repr does not show it."""

    __slots__ = ("_key",)

    def __init__(self, password: str) -> None:
        if not isinstance(password, str) or not password:
            raise ConfigError(
                "password",
                "the cluster password must not be empty (the peer port always authenticates)",
            )
        self._key = password.encode()

    def __repr__(self) -> str:
        return "PeerKey(<hidden>)"

    def dial_mac(self, listener_nonce: bytes, dialer_nonce: bytes, address: bytes) -> bytes:
        """What the dialer sends: proves the password, bound to the listener's nonce."""
        msg = _DIAL + listener_nonce + dialer_nonce + address
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def accept_mac(self, listener_nonce: bytes, dialer_nonce: bytes, address: bytes) -> bytes:
        """What the listener answers: proves the password, bound to the dialer's nonce."""
        msg = _ACCEPT + listener_nonce + dialer_nonce + address
        return hmac.new(self._key, msg, hashlib.sha256).digest()


def _check_address(raw: bytes) -> str:
    if not 0 < len(raw) <= MAX_ADDRESS_BYTES:
        raise PeerAuthError(f"a claimed address of {len(raw)} bytes")
    try:
        address = raw.decode("ascii")
    except UnicodeDecodeError:
        raise PeerAuthError("a claimed address that is not ASCII") from None
    if not address.isprintable():
        raise PeerAuthError("a claimed address with control characters")
    return address


class Listener:
    """The listener's side of one handshake."""

    def __init__(self, key: PeerKey, nonce: bytes | None = None) -> None:
        self._key = key
        self.nonce = os.urandom(NONCE_BYTES) if nonce is None else nonce
        self.address = ""  # the dialer's claimed address, once its hello checked out

    def greeting(self) -> bytes:
        return MAGIC + self.nonce

    @staticmethod
    def hello_rest_bytes(head: bytes) -> int:
        """How many bytes of the hello follow its 2-byte head; raises on a bad length."""
        if len(head) != HELLO_HEAD_BYTES:
            raise PeerAuthError("a truncated hello")
        n = int.from_bytes(head, "little")
        if not 0 < n <= MAX_ADDRESS_BYTES:
            raise PeerAuthError(f"a claimed address of {n} bytes")
        return n + NONCE_BYTES + MAC_BYTES

    def receive_hello(self, hello: bytes) -> bytes:
        """Check the dialer's whole hello (head included); return the proof to send back.

        Raises :class:`PeerAuthError` on a malformed hello or a wrong MAC (whose
        ``address`` says who the dialer claimed to be)."""
        rest = self.hello_rest_bytes(hello[:HELLO_HEAD_BYTES])
        if len(hello) != HELLO_HEAD_BYTES + rest:
            raise PeerAuthError("a hello of the wrong length")
        end = len(hello) - NONCE_BYTES - MAC_BYTES
        raw = hello[HELLO_HEAD_BYTES:end]
        address = _check_address(raw)
        dialer_nonce = hello[end : end + NONCE_BYTES]
        mac = hello[end + NONCE_BYTES :]
        expected = self._key.dial_mac(self.nonce, dialer_nonce, raw)
        if not hmac.compare_digest(mac, expected):
            raise PeerAuthError("bad password", address)
        self.address = address
        return self._key.accept_mac(self.nonce, dialer_nonce, raw)


class Dialer:
    """The dialer's side of one handshake (``address``: its own peer address)."""

    def __init__(self, key: PeerKey, address: str, nonce: bytes | None = None) -> None:
        self._key = key
        self._address = address.encode("ascii")
        _check_address(self._address)
        self.nonce = os.urandom(NONCE_BYTES) if nonce is None else nonce
        self._listener_nonce = b""

    def receive_greeting(self, greeting: bytes) -> bytes:
        """The listener's greeting in; the hello to send out."""
        if len(greeting) != GREETING_BYTES or greeting[: len(MAGIC)] != MAGIC:
            raise PeerAuthError("the peer port did not greet with the metaledger handshake")
        self._listener_nonce = greeting[len(MAGIC) :]
        mac = self._key.dial_mac(self._listener_nonce, self.nonce, self._address)
        head = len(self._address).to_bytes(HELLO_HEAD_BYTES, "little")
        return head + self._address + self.nonce + mac

    def receive_proof(self, proof: bytes) -> None:
        """Raises :class:`PeerAuthError` unless the listener knows the password."""
        if not self._listener_nonce:
            raise PeerAuthError("a proof before the greeting")
        expected = self._key.accept_mac(self._listener_nonce, self.nonce, self._address)
        if len(proof) != PROOF_BYTES or not hmac.compare_digest(proof, expected):
            raise PeerAuthError("the peer port does not know the cluster password")


# --------------------------------------------------------------------------- over asyncio
async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: PeerKey) -> str:
    """Run the listener's side; return the dialer's (authenticated) address.

    Raises :class:`PeerAuthError`, or the stream's errors (``IncompleteReadError``,
    ``ConnectionError``) when the dialer goes away; bounding the time is the caller's."""
    side = Listener(key)
    writer.write(side.greeting())
    head = await reader.readexactly(HELLO_HEAD_BYTES)
    rest = await reader.readexactly(side.hello_rest_bytes(head))
    writer.write(side.receive_hello(head + rest))
    return side.address


async def dial(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, key: PeerKey, me: str
) -> None:
    """Run the dialer's side as member ``me``; return once the listener proved itself."""
    side = Dialer(key, me)
    writer.write(side.receive_greeting(await reader.readexactly(GREETING_BYTES)))
    side.receive_proof(await reader.readexactly(PROOF_BYTES))


# --------------------------------------------------------------------------- password files
def create_password_file(path: str | os.PathLike[str]) -> str:
    """The password in ``path``, created (mode 0600, a random URL-safe token) if absent.

    Created with ``O_CREAT | O_EXCL`` and mode 0600 in one step, so it is never readable by
    others, not even for a moment, and two processes never write two passwords."""
    password = secrets.token_urlsafe(GENERATED_PASSWORD_BYTES)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, PASSWORD_FILE_MODE)
    except FileExistsError:
        return read_password_file(path)
    try:
        os.write(fd, (password + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return password


def read_password_file(path: str | os.PathLike[str]) -> str:
    """The password a file holds (surrounding whitespace and the newline dropped).

    Raises :class:`ConfigError` (field ``cluster_password_file``) when it cannot be read,
    is not text, or is empty."""
    field = "cluster_password_file"
    try:
        with open(path, "rb") as f:
            raw = f.read(64 * 1024 + 1)
    except OSError as exc:
        raise ConfigError(field, f"cannot read {os.fspath(path)}: {exc.strerror}") from None
    if len(raw) > 64 * 1024:
        raise ConfigError(field, f"{os.fspath(path)} is larger than 64 KiB")
    try:
        password = raw.decode().strip()
    except UnicodeDecodeError:
        raise ConfigError(field, f"{os.fspath(path)} is not UTF-8 text") from None
    if not password:
        raise ConfigError(field, f"{os.fspath(path)} is empty")
    return password
