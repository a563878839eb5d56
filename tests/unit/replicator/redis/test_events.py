"""EventBuilder (replicator/redis/events.py): db across SELECT, MULTI/EXEC, markers, offsets."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replicator.redis.errors import ProtocolError
from replicator.redis.events import (
    NO_CHECKPOINT,
    SNAPSHOT_BEGIN,
    SNAPSHOT_END,
    Batch,
    EventBuilder,
    OutMessage,
    encode_command,
    keys_header,
)
from replicator.redis.routing import queue_of

REPLID = "a" * 40


class Stream:
    """Feeds commands with offsets as the master counts them (each command's RESP length)."""

    def __init__(self, builder: EventBuilder, offset: int = 100) -> None:
        self.builder = builder
        self.offset = offset

    def __call__(self, *argv: bytes) -> Batch:
        start = self.offset
        self.offset += len(encode_command(argv))
        return self.builder.on_command(list(argv), start, self.offset)


def make(n: int = 4, db: int = 0) -> tuple[EventBuilder, Stream]:
    b = EventBuilder("T", n, REPLID, db=db)
    return b, Stream(b)


def test_a_write_becomes_one_message_with_its_offsets() -> None:
    _b, send = make()
    batch = send(b"SET", b"k", b"v")
    (m,) = batch.messages
    assert m == OutMessage(
        topic="T",
        queue_id=queue_of(b"k", 4),
        body=b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
        tags="SET",
        keys="k",
        properties={
            "REDIS_REPLID": REPLID,
            "REDIS_START": "100",
            "REDIS_END": str(100 + len(m.body)),
            "REDIS_DB": "0",
            "REDIS_KIND": "command",
        },
        offset=100 + len(m.body),
    )
    assert batch.boundary == m.offset and batch.db == 0


def test_non_writes_make_nothing_but_advance_the_boundary() -> None:
    _b, send = make()
    for argv in (
        (b"ping",),
        (b"REPLCONF", b"GETACK", b"*"),
        (b"PUBLISH", b"ch", b"hello"),
        (b"SELECT", b"3"),
    ):
        before = send.offset
        batch = send(*argv)
        assert batch.messages == ()
        assert batch.boundary == send.offset > before
    assert batch.db == 3
    (m,) = send(b"INCR", b"n").messages
    assert m.properties["REDIS_DB"] == "3"


def test_multi_exec_is_held_until_exec_and_carries_tx_headers() -> None:
    b, send = make()
    send(b"SET", b"x", b"0")
    before = send.offset
    multi_start = send.offset
    assert send(b"MULTI").messages == ()
    batch = send(b"SET", b"t1", b"1")
    assert batch.messages == () and batch.boundary == before and b.in_transaction
    send(b"SELECT", b"2")  # SELECT inside MULTI (probed on 7.0.15)
    assert send(b"INCR", b"t2").messages == ()
    assert send(b"DEL", b"t1", b"t2", b"t3").boundary == before
    batch = send(b"EXEC")
    assert batch.boundary == send.offset and batch.db == 2 and not b.in_transaction
    txid = f"{REPLID}-{multi_start}"
    assert all(m.properties["REDIS_TXID"] == txid for m in batch.messages)
    assert all(m.properties["REDIS_TXCOUNT"] == "3" for m in batch.messages)
    assert all(m.offset == send.offset for m in batch.messages)  # the EXEC's end
    assert [m.properties["REDIS_TXINDEX"] for m in batch.messages][:2] == ["1", "2"]
    assert [m.properties["REDIS_DB"] for m in batch.messages][:2] == ["0", "2"]
    assert [m.tags for m in batch.messages][:2] == ["SET", "INCR"]
    # the DEL split into pieces: each piece of command 3 says so
    assert {m.properties["REDIS_TXINDEX"] for m in batch.messages[2:]} == {"3"}
    assert all("REDIS_PART" in m.properties for m in batch.messages[2:])


def test_empty_transaction_and_transaction_of_non_writes() -> None:
    _b, send = make()
    send(b"MULTI")
    send(b"PING")
    assert send(b"EXEC").messages == ()


def test_continue_keeps_the_db_and_drops_a_half_transaction() -> None:
    b, send = make()
    send(b"SELECT", b"5")
    boundary = send(b"SET", b"a", b"1").boundary
    send(b"MULTI")
    send(b"SELECT", b"6")
    send(b"SET", b"b", b"1")
    # the link breaks; PSYNC from the boundary gets +CONTINUE with a new replid and no SELECT
    b.on_continue(boundary, 5, "b" * 40)
    assert b.db == 5 and not b.in_transaction
    send.offset = boundary
    batch = send(b"SET", b"c", b"1")
    (m,) = batch.messages
    # the checkpoint resumes with the new id; the message keeps the history's first name, so
    # a command resent after the rename has the key it had before it
    assert batch.replid == "b" * 40
    assert m.properties["REDIS_DB"] == "5" and m.properties["REDIS_REPLID"] == REPLID
    # a restart builds its builder with the checkpoint's db and history: the same
    b2 = EventBuilder("T", 4, "b" * 40, db=5, offset=boundary, origin=REPLID)
    end = int(m.properties["REDIS_END"])
    (m2,) = b2.on_command([b"SET", b"c", b"1"], boundary, end).messages
    assert m2.properties == m.properties


def test_cross_db_commands_name_every_db_they_touch() -> None:
    _b, send = make()
    send(b"SELECT", b"1")
    (m,) = send(b"MOVE", b"k", b"4").messages
    assert m.properties["REDIS_DB"] == "1" and m.properties["REDIS_DBS"] == "1,4"
    assert m.queue_id == queue_of(b"k", 4)  # the key's queue in both dbs
    msgs = send(b"COPY", b"k", b"k", b"DB", b"0").messages
    assert {x.properties["REDIS_DBS"] for x in msgs} == {"0,1"}
    msgs = send(b"SWAPDB", b"2", b"3").messages
    assert len(msgs) == 4 and {x.properties["REDIS_DBS"] for x in msgs} == {"1,2,3"}
    assert {x.properties["REDIS_PART"] for x in msgs} == {"*/4"}
    msgs = send(b"FLUSHALL").messages
    assert len(msgs) == 4 and {x.properties["REDIS_DBS"] for x in msgs} == {"*"}
    msgs = send(b"COPY", b"k", b"k2").messages  # no DB: only the current one
    assert msgs and {x.properties["REDIS_DBS"] for x in msgs} == {"1"}


def test_scripts_are_effects_routed_by_their_declared_keys() -> None:
    _b, send = make()
    msgs = send(b"EVAL", b"redis.call('set', KEYS[1], 1)", b"1", b"k").messages
    assert [(m.queue_id, m.tags) for m in msgs] == [(queue_of(b"k", 4), "EVAL")]
    assert len(send(b"FCALL", b"f", b"0").messages) == 4
    assert len(send(b"FUNCTION", b"LOAD", b"#!lua name=l\n").messages) == 4


def test_snapshot_is_framed_by_markers_on_every_queue() -> None:
    b, _send = make()
    begin = b.begin_snapshot("c" * 40, 5000)
    assert [m.queue_id for m in begin.messages] == [0, 1, 2, 3]
    assert {m.tags for m in begin.messages} == {SNAPSHOT_BEGIN}
    assert all(m.properties["REDIS_KIND"] == "marker" for m in begin.messages)
    assert all(m.offset == NO_CHECKPOINT for m in begin.messages)
    assert begin.boundary == NO_CHECKPOINT and begin.replid == "c" * 40
    with pytest.raises(ProtocolError):  # the stream starts after the RDB
        b.on_command([b"SET", b"k", b"v"], 5000, 5020)
    e1 = b.snapshot_entry(0, [b"SET", b"k", b"v"]).messages
    e2 = b.snapshot_entry(3, [b"RPUSH", b"l", b"a", b"b"]).messages
    assert [m.properties["REDIS_KIND"] for m in e1 + e2] == ["snapshot", "snapshot"]
    assert [m.properties["REDIS_SEQ"] for m in e1 + e2] == ["1", "2"]
    assert e2[0].properties["REDIS_DB"] == "3"
    assert all(m.offset == NO_CHECKPOINT for m in e1 + e2)
    end = b.end_snapshot()
    assert {m.tags for m in end.messages} == {SNAPSHOT_END}
    assert all(m.offset == 5000 for m in end.messages) and end.boundary == 5000
    assert end.messages[0].body == encode_command([b"SNAPSHOT_END", b"c" * 40, b"5000"])
    assert end.messages[0].keys == ""
    # the stream goes on from the FULLRESYNC offset, with the new replid
    (m,) = b.on_command([b"SET", b"k", b"w"], 5000, 5030).messages
    assert m.properties["REDIS_REPLID"] == "c" * 40


def test_protocol_violations_raise_protocol_error() -> None:
    b, send = make()
    with pytest.raises(ProtocolError):
        send(b"EXEC")
    with pytest.raises(ProtocolError):
        send(b"SELECT", b"x")
    send(b"MULTI")
    with pytest.raises(ProtocolError):
        send(b"MULTI")
    with pytest.raises(ProtocolError):
        b.on_command([], 0, 0)
    with pytest.raises(ProtocolError):
        EventBuilder("T", 2, REPLID).snapshot_entry(0, [b"SET", b"k", b"v"])
    with pytest.raises(ValueError):
        EventBuilder("T", 0, REPLID)


def test_keys_header_is_empty_for_binary_or_spaced_keys() -> None:
    assert keys_header([b"a", b"b:1"]) == "a b:1"
    assert keys_header([b"a b"]) == ""
    assert keys_header([b"\xff"]) == ""
    assert keys_header([b"\x00"]) == ""
    assert keys_header([]) == ""
    # only the keys that fit: a DEL of 10k keys must not make a message the broker refuses
    assert keys_header([b"a", b"bb", b"c"], max_chars=4) == "a bb"
    assert len(keys_header([b"k%d" % i for i in range(10_000)])) <= 1024


def test_sans_io_modules_import_no_sockets_or_event_loops() -> None:
    import ast
    import importlib

    for mod in ("events", "routing", "commands", "replay"):
        module = importlib.import_module(f"replicator.redis.{mod}")
        assert module.__file__ is not None
        tree = ast.parse(open(module.__file__, encoding="utf-8").read())
        imported = {
            (node.module or "") if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import | ast.ImportFrom)
            for alias in node.names
        }
        roots = {name.split(".")[0] for name in imported}
        assert not roots & {"socket", "asyncio", "redis", "selectors"}, (mod, roots)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.lists(
            st.one_of(
                st.sampled_from(
                    [
                        b"SET",
                        b"MULTI",
                        b"EXEC",
                        b"SELECT",
                        b"MOVE",
                        b"COPY",
                        b"SWAPDB",
                        b"EVAL",
                        b"MSET",
                        b"DEL",
                        b"XGROUP",
                        b"FUNCTION",
                        b"ZUNIONSTORE",
                        b"DB",
                        b"-1",
                        b"2",
                    ]
                ),
                st.binary(max_size=6),
            ),
            max_size=7,
        ),
        max_size=12,
    ),
    st.integers(1, 5),
)
def test_any_argv_gives_messages_or_a_protocol_error_only(
    commands: list[list[bytes]], queues: int
) -> None:
    b = EventBuilder("T", queues, REPLID)
    offset = 0
    for argv in commands:
        end = offset + len(encode_command(argv))
        try:
            batch = b.on_command(argv, offset, end)
        except ProtocolError:
            b = EventBuilder("T", queues, REPLID)  # a new connection, a new builder
            continue
        assert all(0 <= m.queue_id < queues for m in batch.messages)
        offset = end
