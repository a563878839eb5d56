"""raftlog.native.auth and raftlog.native.conns, sans I/O: the peer handshake refuses every
hello that does not prove the password (a zero MAC, an empty hello, another address, a
replay against another nonce); each end proves itself; password files are 0600 and
reused; the inbound connection table caps and times out connections; no engine config
without a password validates."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver.config import ServerConfig
from raftlog import ConfigError, NativeConfig, PySyncObjConfig
from raftlog.native.auth import (
    GREETING_BYTES,
    MAC_BYTES,
    MAGIC,
    NONCE_BYTES,
    Dialer,
    Listener,
    PeerAuthError,
    PeerKey,
    create_password_file,
    read_password_file,
)
from raftlog.native.conns import HANDSHAKE, IDLE, InboundConnections, RateLimitedLog

KEY = PeerKey("s3cret")
ME = "127.0.0.1:7001"


def hello_for(address: str, greeting: bytes, key: PeerKey = KEY) -> bytes:
    return Dialer(key, address).receive_greeting(greeting)


def handshake(listener_key: PeerKey, dialer_key: PeerKey) -> str:
    listener, dialer = Listener(listener_key), Dialer(dialer_key, ME)
    proof = listener.receive_hello(dialer.receive_greeting(listener.greeting()))
    dialer.receive_proof(proof)
    return listener.address


# --------------------------------------------------------------------------- handshake
def test_members_with_the_same_password_authenticate_each_other() -> None:
    assert handshake(KEY, PeerKey("s3cret")) == ME


def test_a_wrong_password_fails_on_the_listener_naming_the_claimed_address() -> None:
    with pytest.raises(PeerAuthError, match="bad password") as info:
        handshake(KEY, PeerKey("guess"))
    assert info.value.address == ME


def test_a_listener_without_the_password_cannot_prove_itself_to_the_dialer() -> None:
    dialer = Dialer(KEY, ME)
    dialer.receive_greeting(MAGIC + bytes(NONCE_BYTES))
    for proof in (bytes(MAC_BYTES), b"", os.urandom(MAC_BYTES)):
        with pytest.raises(PeerAuthError, match="does not know the cluster password"):
            dialer.receive_proof(proof)


def test_the_dialers_own_mac_is_not_a_valid_listener_proof() -> None:
    """A fake listener that echoes the dialer's MAC back gets nowhere (labels differ)."""
    listener_nonce = os.urandom(NONCE_BYTES)
    dialer = Dialer(KEY, ME)
    hello = dialer.receive_greeting(MAGIC + listener_nonce)
    with pytest.raises(PeerAuthError):
        dialer.receive_proof(hello[-MAC_BYTES:])


@pytest.mark.parametrize("password", ["", None])
def test_an_empty_password_is_no_key(password: str | None) -> None:
    with pytest.raises(ConfigError, match=r"^password: .*must not be empty"):
        PeerKey(password)  # type: ignore[arg-type]


def test_a_zero_mac_is_refused() -> None:
    """Today's attack: the MAC of "no password" was 32 zero bytes."""
    listener = Listener(KEY)
    addr = ME.encode()
    hello = len(addr).to_bytes(2, "little") + addr + bytes(NONCE_BYTES) + bytes(MAC_BYTES)
    with pytest.raises(PeerAuthError, match="bad password"):
        listener.receive_hello(hello)
    old_style = len(addr).to_bytes(2, "little") + addr + bytes(MAC_BYTES)  # no dialer nonce
    with pytest.raises(PeerAuthError):
        Listener(KEY).receive_hello(old_style)


@pytest.mark.parametrize(
    "hello",
    [b"", b"\x00", b"\x00\x00", bytes(2 + NONCE_BYTES + MAC_BYTES), b"\xff\xff" + bytes(100)],
    ids=["empty", "one-byte", "zero-length-address", "all-zero", "huge-length"],
)
def test_an_empty_or_truncated_hello_is_refused(hello: bytes) -> None:
    with pytest.raises(PeerAuthError):
        Listener(KEY).receive_hello(hello)


def test_a_hello_claiming_another_address_is_refused() -> None:
    listener = Listener(KEY)
    hello = hello_for("127.0.0.1:7001", listener.greeting())
    forged = hello.replace(b"7001", b"7002")  # same length, another member's address
    with pytest.raises(PeerAuthError, match="bad password") as info:
        listener.receive_hello(forged)
    assert info.value.address == "127.0.0.1:7002"


def test_a_recorded_hello_replayed_against_another_nonce_is_refused() -> None:
    first = Listener(KEY)
    hello = hello_for(ME, first.greeting())
    first.receive_hello(hello)  # genuine the first time
    with pytest.raises(PeerAuthError, match="bad password"):
        Listener(KEY).receive_hello(hello)  # a fresh nonce: the recording is worthless


@pytest.mark.parametrize(
    "address", [b"\xff\xfe:1", b"host\n:1", b"x" * 301], ids=["not-ascii", "control", "too-long"]
)
def test_an_unprintable_or_overlong_address_is_refused(address: bytes) -> None:
    hello = len(address).to_bytes(2, "little") + address + bytes(NONCE_BYTES + MAC_BYTES)
    with pytest.raises(PeerAuthError):
        Listener(KEY).receive_hello(hello)


def test_the_dialer_refuses_a_greeting_that_is_not_ours() -> None:
    for greeting in (b"", os.urandom(NONCE_BYTES), b"XXXX" + bytes(NONCE_BYTES)):
        with pytest.raises(PeerAuthError, match="did not greet"):
            Dialer(KEY, ME).receive_greeting(greeting)
    assert len(Listener(KEY).greeting()) == GREETING_BYTES


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400))
def test_any_bytes_as_a_hello_raise_only_peer_auth_error(data: bytes) -> None:
    try:
        Listener(KEY).receive_hello(data)
    except PeerAuthError:
        return
    pytest.fail(f"{data!r} passed the handshake")


def test_the_key_is_not_shown_by_repr() -> None:
    assert "s3cret" not in repr(KEY)


# --------------------------------------------------------------------------- password files
def test_a_created_password_file_is_0600_random_and_reused(tmp_path: Path) -> None:
    path = tmp_path / "cluster-password"
    password = create_password_file(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(password) >= 40 and path.read_text() == password + "\n"
    assert create_password_file(path) == password  # reused, not replaced
    assert create_password_file(tmp_path / "other") != password
    assert read_password_file(path) == password


def test_an_existing_password_file_is_kept_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("chosen by the operator\n")
    assert create_password_file(path) == "chosen by the operator"


@pytest.mark.parametrize(
    ("content", "message"), [(b"", "is empty"), (b" \n", "is empty"), (b"\xff", "not UTF-8")]
)
def test_a_bad_password_file_is_refused_naming_the_field(
    tmp_path: Path, content: bytes, message: str
) -> None:
    path = tmp_path / "pw"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=rf"^cluster_password_file: .*{message}"):
        read_password_file(path)
    with pytest.raises(ConfigError, match=r"^cluster_password_file: cannot read"):
        read_password_file(tmp_path / "missing")


# --------------------------------------------------------------------------- configs
PEERS = {"n0": "127.0.0.1:7001"}


@pytest.mark.parametrize("config_type", [NativeConfig, PySyncObjConfig])
@pytest.mark.parametrize("password", [None, ""])
def test_no_engine_runs_without_a_password_even_on_loopback(
    config_type: type[NativeConfig] | type[PySyncObjConfig], password: str | None
) -> None:
    with pytest.raises(ConfigError, match=r"^password: .*loopback included"):
        config_type("n0", PEERS, "/j", password=password).validate()
    config_type("n0", PEERS, "/j", password="pw").validate()


def test_a_server_config_without_a_password_is_refused_on_loopback() -> None:
    with pytest.raises(ConfigError, match=r"^cluster_password: required.*cluster-password-file"):
        ServerConfig("n0", "/d", listen_peer="127.0.0.1:9878").validate()
    ServerConfig("n0", "/d", cluster_password="pw").validate()


@pytest.mark.parametrize(
    "field",
    [
        "peer_handshake_timeout_ms",
        "peer_idle_timeout_ms",
        "peer_frame_timeout_ms",
        "peer_max_connections",
    ],
)
def test_peer_limits_must_be_positive(field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}: must be > 0"):
        NativeConfig("n0", PEERS, "/j", password="pw", **{field: 0}).validate()  # type: ignore[arg-type]


def test_an_idle_timeout_within_two_heartbeats_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^peer_idle_timeout_ms: must be more than twice"):
        NativeConfig("n0", PEERS, "/j", password="pw", peer_idle_timeout_ms=150).validate()


# --------------------------------------------------------------------------- connection table
class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_connections_past_the_cap_are_refused_with_a_rate_limited_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = Clock()
    conns = InboundConnections(2, 5.0, 30.0, 30.0, clock=clock, log_every_s=10.0)
    aborted: list[int] = []
    assert conns.open(lambda: aborted.append(1)) is not None
    assert conns.open(lambda: aborted.append(2)) is not None
    with caplog.at_level(logging.WARNING):
        for _ in range(50):
            assert conns.open(lambda: aborted.append(3)) is None
        clock.now += 11
        assert conns.open(lambda: aborted.append(4)) is None
    lines = [r.getMessage() for r in caplog.records if "peer_max_connections" in r.getMessage()]
    assert len(lines) == 2 and "49 more" in lines[1]
    assert len(conns) == 2 and aborted == []  # refusing is the caller's close, not an abort


def test_a_sweep_aborts_exactly_the_connections_past_their_deadline() -> None:
    clock = Clock()
    conns = InboundConnections(10, 5.0, 30.0, 20.0, clock=clock)
    aborted: list[str] = []
    handshaking = conns.open(lambda: aborted.append("handshaking"))
    idle = conns.open(lambda: aborted.append("idle"))
    assert handshaking is not None and idle is not None
    idle.waiting_for, idle.deadline = IDLE, clock.now + 30.0
    assert handshaking.waiting_for == HANDSHAKE
    clock.now += 4.9
    assert conns.sweep() == 0 and aborted == []
    clock.now += 0.2
    assert conns.sweep() == 1 and aborted == ["handshaking"] and len(conns) == 1
    clock.now += 30
    assert conns.sweep() == 1 and aborted == ["handshaking", "idle"] and len(conns) == 0
    assert 0.01 <= conns.sweep_interval_s <= 1.0


def test_a_connection_whose_abort_fails_is_still_dropped() -> None:
    conns = InboundConnections(10, 0.5, 1.0, 1.0)

    def boom() -> None:
        raise RuntimeError("transport already closed")

    assert conns.open(boom) is not None
    assert conns.sweep(now=1e12) == 1 and len(conns) == 0


def test_the_rate_limited_log_counts_what_it_held_back(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    warn = RateLimitedLog(5.0, clock)
    with caplog.at_level(logging.WARNING):
        assert warn.warning("a", "first %s", "x")
        assert not warn.warning("a", "second")
        assert warn.warning("b", "another reason")
        clock.now += 5
        assert warn.warning("a", "third")
    assert [r.getMessage() for r in caplog.records] == [
        "first x",
        "another reason",
        "third (and 1 more like it since the last such line)",
    ]
