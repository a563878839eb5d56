"""Half and op records (broker.transactions.half): what a prepare, a commit, a check's copy and
an op look like, and how ops are matched to halves (a copy through its root)."""

from __future__ import annotations

from broker.transactions.half import (
    HALF_TOPIC,
    OP_TOPIC,
    Ended,
    Resolution,
    check_times,
    immunity_ms,
    op_offsets,
    op_record,
    op_resolution,
    physical_offset,
    renewed,
    root_offset,
    to_half,
    to_real,
)
from rmq.message import Host, StoredMessage, decode, encode
from rmq.msgid import offset_msg_id

HOST = Host("10.0.0.1", 10911)


def stored(m: StoredMessage, queue_offset: int, physical: int = 1000) -> StoredMessage:
    """``m`` as the store gives it back."""
    return decode(encode(m._replace(queue_offset=queue_offset, physical_offset=physical)))


def prepare() -> StoredMessage:
    return StoredMessage(
        topic="T",
        body=b"payload",
        queue_id=3,
        flag=7,
        sysflag=0x4 | 0x1,
        born_timestamp=1_000,
        born_host=HOST,
        properties={"TRAN_MSG": "true", "PGROUP": "PG", "UNIQ_KEY": "U1", "TAGS": "a"},
    )


def test_half_hides_the_real_place_and_commit_restores_it() -> None:
    half = to_half(prepare())
    assert (half.topic, half.queue_id, half.sysflag) == (HALF_TOPIC, 0, 0x1)
    assert half.properties["REAL_TOPIC"] == "T" and half.properties["REAL_QID"] == "3"
    assert half.properties["__transactionId__"] == "U1"
    h = stored(half, 5)
    real = to_real(h)
    assert (real.topic, real.queue_id, real.flag, real.body) == ("T", 3, 7, b"payload")
    assert real.sysflag == 0x1 | 0x8  # compressed kept, the commit type
    assert real.prepared_tx_offset == 1000
    assert real.properties == {"PGROUP": "PG", "UNIQ_KEY": "U1", "TAGS": "a"}
    assert real.born_timestamp == 1_000 and real.born_host == HOST


def test_a_checks_copy_counts_and_keeps_its_root() -> None:
    h = stored(to_half(prepare()), 5)
    assert (check_times(h), root_offset(h)) == (0, 5)
    c1 = stored(renewed(h), 9)
    assert (check_times(c1), root_offset(c1)) == (1, 5)
    c2 = stored(renewed(c1), 12)
    assert (check_times(c2), root_offset(c2)) == (2, 5)
    assert "TRANSACTION_CHECK_TIMES" not in to_real(c2).properties
    assert "TRAN_PREPARED_QUEUE_OFFSET" not in to_real(c2).properties


def test_an_op_ends_the_half_and_every_copy_of_its_root() -> None:
    h = stored(to_half(prepare()), 5)
    c1 = stored(renewed(h), 9)
    c2 = stored(renewed(c1), 12)
    op = stored(op_record(c1, Resolution.COMMIT, HOST, 2_000), 0)
    assert op.topic == OP_TOPIC and op.tags == "d"
    assert op_offsets(op) == [5, 9] and op_resolution(op) is Resolution.COMMIT
    ended = Ended()
    assert ended.of(h) is None
    ended.replay(op)
    assert [ended.of(x) for x in (h, c1, c2)] == [Resolution.COMMIT] * 3
    other = stored(to_half(prepare()), 6)
    assert ended.of(other) is None
    # a first end wins; RocketMQ's own ops (no resolution, several offsets) still end
    ended.add([5], Resolution.ROLLBACK)
    assert ended.of(h) is Resolution.COMMIT
    rocketmq_op = StoredMessage(topic=OP_TOPIC, body=b"6,7", properties={"TAGS": "d"})
    ended.replay(rocketmq_op)
    assert ended.of(other) is Resolution.UNKNOWN
    assert op_offsets(StoredMessage(topic=OP_TOPIC, body=b"8", properties={"TAGS": "x"})) == []


def test_immunity_is_the_timeout_or_the_longer_custom_time() -> None:
    h = to_half(prepare())
    assert immunity_ms(h, 6000) == 6000
    custom = h._replace(properties={**h.properties, "CHECK_IMMUNITY_TIME_IN_SECONDS": "60"})
    assert immunity_ms(custom, 6000) == 60_000
    short = h._replace(properties={**h.properties, "CHECK_IMMUNITY_TIME_IN_SECONDS": "1"})
    assert immunity_ms(short, 6000) == 6000
    junk = h._replace(properties={**h.properties, "CHECK_IMMUNITY_TIME_IN_SECONDS": "soon"})
    assert immunity_ms(junk, 6000) == 6000


def test_physical_offset_of_an_offset_message_id() -> None:
    assert physical_offset(offset_msg_id("10.0.0.1", 10911, 123456789)) == 123456789
    assert physical_offset(offset_msg_id("::1", 10911, 42)) == 42
    assert physical_offset("U1") is None
    assert physical_offset("Z" * 32) is None
