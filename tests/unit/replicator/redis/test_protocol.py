"""The replica protocol's phases, replies, payloads and offsets (research §3.1-3.4)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replicator.redis.errors import (
    AuthError,
    ConfigError,
    HandshakeError,
    MasterNotReady,
    ProtocolError,
)
from replicator.redis.protocol import (
    PHASES,
    TRANSITIONS,
    Continue,
    Event,
    FullSync,
    GetAck,
    Phase,
    RdbBegin,
    RdbChunk,
    RdbEnd,
    ReplicaConfig,
    ReplicaProtocol,
    StreamCommand,
)
from replicator.redis.resp import NEED_DATA, encode_command

DATA = Path(__file__).parent / "data"
REPLID = "0123456789abcdef0123456789abcdef01234567"
NEWID = "fedcba9876543210fedcba9876543210fedcba98"
MARK = b"d23d682377be291cf9a7a03712dd2b713c23927b"
RDB = b"REDIS0010\xfa\x09redis-ver\x067.0.15\xff" + bytes(8)
SET = encode_command([b"SET", b"k", b"v"])
GETACK = encode_command([b"REPLCONF", b"GETACK", b"*"])


def cmd(*argv: bytes) -> bytes:
    return encode_command(list(argv))


def merged(events: list[Event]) -> list[Event]:
    """RDB chunks joined: chunk boundaries depend on how bytes arrived, nothing else does."""
    out: list[Event] = []
    for e in events:
        if isinstance(e, RdbChunk) and out and isinstance(out[-1], RdbChunk):
            out[-1] = RdbChunk(out[-1].data + e.data)
        else:
            out.append(e)
    return out


def at_psync(config: ReplicaConfig | None = None) -> ReplicaProtocol:
    """A protocol whose handshake went through, PSYNC sent."""
    p = ReplicaProtocol(config or ReplicaConfig())
    while p.phase is Phase.HANDSHAKE:
        assert p.data_to_send()
        assert p.events(b"+PONG\r\n" if p.current_step == "PING" else b"+OK\r\n") == []
    return p


def streaming(offset: int = 100) -> ReplicaProtocol:
    p = at_psync()
    p.data_to_send()
    assert p.events(b"+FULLRESYNC %s %d\r\n$0\r\n" % (REPLID.encode(), offset)) == [
        FullSync(REPLID, offset),
        RdbBegin(0),
        RdbEnd(),
    ]
    return p


# --- handshake -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "requests"),
    [
        (ReplicaConfig(), [cmd(b"PING"), cmd(b"REPLCONF", b"capa", b"eof", b"capa", b"psync2")]),
        (
            ReplicaConfig(password="pw", listening_port=6380, capa_eof=False),
            [
                cmd(b"AUTH", b"pw"),
                cmd(b"PING"),
                cmd(b"REPLCONF", b"listening-port", b"6380"),
                cmd(b"REPLCONF", b"capa", b"psync2"),
            ],
        ),
        (
            ReplicaConfig(username="repl", password="pw", capa_eof=False, capa_psync2=False),
            [cmd(b"AUTH", b"repl", b"pw"), cmd(b"PING")],
        ),
    ],
)
def test_handshake_steps_one_at_a_time(config: ReplicaConfig, requests: list[bytes]) -> None:
    p = ReplicaProtocol(config)
    for request in requests:
        assert p.phase is Phase.HANDSHAKE
        assert p.data_to_send() == request
        assert p.data_to_send() == b"", "the next request waits for this one's reply"
        assert p.next_event() is NEED_DATA
        assert p.events(b"+OK\r\n") == []
    assert p.phase is Phase.AWAIT_PSYNC_REPLY
    assert p.data_to_send() == cmd(b"PSYNC", b"?", b"-1")


def test_psync_resumes_at_processed_offset_plus_one() -> None:
    p = at_psync(ReplicaConfig(resume=(REPLID, 1000)))
    assert p.data_to_send() == cmd(b"PSYNC", REPLID.encode(), b"1001")
    assert p.offset == 1000 and p.replid == REPLID


@pytest.mark.parametrize(
    ("config", "step", "reply", "error"),
    [
        (
            ReplicaConfig(password="bad"),
            "AUTH",
            b"-WRONGPASS invalid username-password pair",
            AuthError,
        ),
        (
            ReplicaConfig(password="pw"),
            "AUTH",
            b"-ERR AUTH <password> called without any password",
            AuthError,
        ),
        (ReplicaConfig(), "PING", b"-NOAUTH Authentication required.", AuthError),
        (
            ReplicaConfig(),
            "PING",
            b"-LOADING Redis is loading the dataset in memory",
            MasterNotReady,
        ),
        (ReplicaConfig(), "PING", b"-MASTERDOWN Link with MASTER is down", MasterNotReady),
        (ReplicaConfig(), "REPLCONF capa", b"-NOPERM this user has no permissions", AuthError),
        (ReplicaConfig(listening_port=1), "REPLCONF listening-port", b"-ERR nope", HandshakeError),
    ],
)
def test_a_refused_step_is_named(
    config: ReplicaConfig, step: str, reply: bytes, error: type[HandshakeError]
) -> None:
    p = ReplicaProtocol(config)
    while p.current_step != step:
        p.events(b"+OK\r\n")
    with pytest.raises(error) as e:
        p.events(reply + b"\r\n")
    assert type(e.value) is error and e.value.step == step
    assert e.value.reply == reply[1:].decode()
    assert e.value.retriable is (error is MasterNotReady)
    with pytest.raises(error):  # the link is dead
        p.next_event()


def test_config_is_validated_naming_the_field() -> None:
    with pytest.raises(ConfigError, match="username"):
        ReplicaProtocol(ReplicaConfig(username="u"))
    with pytest.raises(ConfigError, match="listening_port"):
        ReplicaConfig(listening_port=70000).validate()
    with pytest.raises(ConfigError, match="resume"):
        ReplicaConfig(resume=("0" * 40, 5)).validate()  # a cleared replid2 matches PSYNC
    with pytest.raises(ConfigError, match="resume"):
        ReplicaConfig(resume=("xyz", 5)).validate()
    with pytest.raises(ConfigError, match="resume"):
        ReplicaConfig(resume=(REPLID, -1)).validate()


# --- PSYNC replies -------------------------------------------------------------------


def test_fullresync_after_keepalive_newlines_which_are_not_counted() -> None:
    p = at_psync()
    assert p.events(b"\n\n\n") == []
    assert p.events(b"\n+FULLRESYNC %s 4242\r\n" % REPLID.encode()) == [FullSync(REPLID, 4242)]
    assert (p.phase, p.offset, p.replid) == (Phase.RDB_PAYLOAD, 4242, REPLID)
    assert p.keepalives == 4


@pytest.mark.parametrize(
    ("reply", "event", "replid"),
    [
        (b"+CONTINUE", Continue(None), REPLID),
        (b"+CONTINUE " + NEWID.encode(), Continue(NEWID), NEWID),
    ],
)
def test_continue_goes_straight_to_the_stream(reply: bytes, event: Continue, replid: str) -> None:
    p = at_psync(ReplicaConfig(resume=(REPLID, 500)))
    events = p.events(reply + b"\r\n" + SET)
    assert events == [event, StreamCommand([b"SET", b"k", b"v"], 500, 500 + len(SET))]
    assert (p.phase, p.replid, p.offset) == (Phase.COMMAND_STREAM, replid, 500 + len(SET))


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (b"-NOMASTERLINK Can't SYNC while not connected with my master", MasterNotReady),
        (b"-LOADING Redis is loading the dataset in memory", MasterNotReady),
        (b"-ERR unknown command 'PSYNC'", HandshakeError),
    ],
)
def test_psync_refusals(reply: bytes, error: type[HandshakeError]) -> None:
    p = at_psync()
    with pytest.raises(error) as e:
        p.events(reply + b"\r\n")
    assert e.value.step == "PSYNC"


@pytest.mark.parametrize(
    "reply",
    [
        b"+FULLRESYNC xyz 0",
        b"+FULLRESYNC %s -5" % REPLID.encode(),
        b"+FULLRESYNC %s" % REPLID.encode(),
        b"+CONTINUE",  # without a resume point there is nothing to continue
        b"+OK",
        b":1",
    ],
)
def test_malformed_psync_replies_are_protocol_errors(reply: bytes) -> None:
    p = at_psync()
    with pytest.raises(ProtocolError):
        p.events(reply + b"\r\n")


# --- RDB payload ---------------------------------------------------------------------


def test_disk_payload_with_newlines_before_the_length_and_no_trailing_crlf() -> None:
    p = at_psync()
    wire = b"+FULLRESYNC %s 7\r\n\n\n$%d\r\n" % (REPLID.encode(), len(RDB)) + RDB + SET
    events = merged(p.events(wire))
    assert events == [
        FullSync(REPLID, 7),
        RdbBegin(len(RDB)),
        RdbChunk(RDB),
        RdbEnd(),
        StreamCommand([b"SET", b"k", b"v"], 7, 7 + len(SET)),
    ]


def test_diskless_mark_is_found_across_chunks_and_never_emitted() -> None:
    p = at_psync()
    p.events(b"+FULLRESYNC %s 0\r\n$EOF:%s\r\n" % (REPLID.encode(), MARK))
    body = RDB + MARK
    out: list[Event] = []
    for i in range(0, len(body), 7):  # the mark arrives split in several pieces
        out += p.events(body[i : i + 7])
        payload = b"".join(e.data for e in out if isinstance(e, RdbChunk))
        assert not payload.endswith(MARK[:1]) or payload == RDB[: len(payload)]
    assert merged(out) == [RdbChunk(RDB), RdbEnd()]
    assert p.phase is Phase.COMMAND_STREAM and p.offset == 0
    # the stream starts (after our ACK) right after the mark
    assert p.events(SET) == [StreamCommand([b"SET", b"k", b"v"], 0, len(SET))]


def test_diskless_payload_shorter_than_the_mark() -> None:
    p = at_psync()
    events = p.events(b"+FULLRESYNC %s 0\r\n$EOF:%s\r\nab%s" % (REPLID.encode(), MARK, MARK))
    assert events == [FullSync(REPLID, 0), RdbBegin(None), RdbChunk(b"ab"), RdbEnd()]


@pytest.mark.parametrize(
    "header",
    [b"$EOF:short", b"$-1", b"$abc", b"+OK", b"*1"],
)
def test_bad_rdb_headers(header: bytes) -> None:
    p = at_psync()
    p.events(b"+FULLRESYNC %s 0\r\n" % REPLID.encode())
    with pytest.raises(ProtocolError):
        p.events(header + b"\r\n")


def test_master_aborting_the_transfer_is_a_refusal() -> None:
    p = at_psync()
    p.events(b"+FULLRESYNC %s 0\r\n" % REPLID.encode())
    with pytest.raises(HandshakeError, match="RDB transfer"):
        p.events(b"-ERR fork failed\r\n")


# --- command stream ------------------------------------------------------------------


def test_offsets_advance_by_exactly_the_bytes_of_each_command() -> None:
    p = streaming(100)
    select = cmd(b"SELECT", b"0")
    ping = cmd(b"ping")
    wire = select + SET + ping + GETACK + SET
    events = p.events(wire)
    ends = [100 + len(select), 0, 0, 0, 0]
    ends[1] = ends[0] + len(SET)
    ends[2] = ends[1] + len(ping)
    ends[3] = ends[2] + len(GETACK)
    ends[4] = ends[3] + len(SET)
    assert events == [
        StreamCommand([b"SELECT", b"0"], 100, ends[0]),
        StreamCommand([b"SET", b"k", b"v"], ends[0], ends[1]),
        StreamCommand([b"ping"], ends[1], ends[2]),
        StreamCommand([b"REPLCONF", b"GETACK", b"*"], ends[2], ends[3]),
        GetAck(),
        StreamCommand([b"SET", b"k", b"v"], ends[3], ends[4]),
    ]
    assert len(GETACK) == 37  # research §3.4
    assert p.offset == 100 + len(wire)


def test_a_partial_command_is_not_counted() -> None:
    p = streaming(0)
    assert p.events(SET[:-1]) == [] and p.offset == 0
    assert p.events(SET[-1:]) == [StreamCommand([b"SET", b"k", b"v"], 0, len(SET))]


@pytest.mark.parametrize(
    ("wire", "where"),
    [
        (b"+OK\r\n", 0),
        (b"*0\r\n", 0),
        (b"*1\r\n:1\r\n", 0),
        (b"*1\r\n+PING\r\n", 0),
        (b"\n", 0),
        (SET + b"$x\r\n", len(SET)),
    ],
)
def test_bytes_that_break_the_stream_raise_with_the_replication_offset(
    wire: bytes, where: int
) -> None:
    p = streaming(1000)
    with pytest.raises(ProtocolError) as e:
        p.events(wire)
    assert e.value.offset == 1000 + where
    with pytest.raises(ProtocolError):
        p.events(SET)


def test_ack_is_built_only_for_what_was_read() -> None:
    p = at_psync()
    with pytest.raises(ValueError, match="no ACK in phase"):
        p.ack(0)
    p = streaming(10)
    assert p.ack(10) == cmd(b"REPLCONF", b"ACK", b"10")
    with pytest.raises(ValueError, match="outside"):
        p.ack(11)


def test_phase_table_covers_every_phase_and_only_goes_forward() -> None:
    assert set(PHASES) == set(Phase) == set(TRANSITIONS)
    order = list(Phase)
    for phase, nexts in TRANSITIONS.items():
        assert all(order.index(n) > order.index(phase) for n in nexts)


@pytest.mark.parametrize(
    ("name", "config", "size"),
    [
        ("diskless-7.0.15.bin", ReplicaConfig(listening_port=7777), None),
        ("disk-7.0.15.bin", ReplicaConfig(listening_port=7777), 201),
    ],
)
def test_recorded_sessions_of_redis_7_0_15(
    name: str, config: ReplicaConfig, size: int | None
) -> None:
    """Bytes a real master sent (newlines before +FULLRESYNC in the diskless one)."""
    p = ReplicaProtocol(config)
    events = merged(p.events((DATA / name).read_bytes()))
    assert isinstance(events[0], FullSync) and events[0].offset == 0
    assert events[1] == RdbBegin(size)
    assert isinstance(events[2], RdbChunk) and events[2].data.startswith(b"REDIS0010")
    assert len(events[2].data) == 201 and events[3] == RdbEnd()
    assert events[4:] == [
        StreamCommand([b"SELECT", b"0"], 0, 23),
        StreamCommand([b"SET", b"b", b"2"], 23, 50),
        StreamCommand([b"INCRBY", b"c", b"1"], 50, 80),
    ]
    assert p.offset == 80  # INFO replication master_repl_offset when it was recorded
