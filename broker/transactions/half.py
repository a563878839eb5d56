"""Half and op records: what a transaction writes, and how the two are matched (pure).

RocketMQ's design (``broker/.../transaction/queue/TransactionalMessageBridge.java``,
``TransactionalMessageUtil.java``, ``EndTransactionProcessor.java``):

- the prepare is stored on ``RMQ_SYS_TRANS_HALF_TOPIC`` queue 0 with ``REAL_TOPIC``/``REAL_QID``
  and ``__transactionId__`` (its UNIQ_KEY), the transaction bits of its sysflag cleared
  (``parseHalfMessageInner``, TransactionalMessageBridge.java:219-233): no consumer of the
  real topic sees it;
- a commit stores the real message from the half: real topic and queue, ``REAL_*`` and
  ``TRAN_MSG`` removed (RocketMQ ≥ 4.6.1 clears ``TRAN_MSG``, #1649: a retried copy would
  otherwise be taken for a new prepare), sysflag of the commit type (0x8), the same UNIQ_KEY
  (``endMessageTransaction``, EndTransactionProcessor.java:250-273);
- commit and rollback both write an op record on ``RMQ_SYS_TRANS_OP_HALF_TOPIC`` queue 0, tag
  ``d``, body the half's queue offset(s), comma-separated (``TransactionalMessageUtil.REMOVE_TAG``,
  ``OFFSET_SEPARATOR``);
- the check puts a half back at the queue's end with ``TRANSACTION_CHECK_TIMES`` + 1 before
  asking the producer (``renewHalfMessageInner``), so the count travels with the log.

metaledger's addition, so nothing is visible twice: a copy carries its original's queue offset
in ``TRAN_PREPARED_QUEUE_OFFSET`` (RocketMQ sets it for immunity copies only), the *root*; an op
names both the half it ended and its root, so every copy of one prepare is ended by one op,
and its ``TRAN_RESOLUTION`` property says which way (a second end answers from it).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

from rmq.message import (
    PROPERTY_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_MASK,
    Host,
    StoredMessage,
)

HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
#: the check's consumer group for the half and op queues' progress (``MixAll.CID_SYS_RMQ_TRANS``)
CHECK_GROUP = "CID_RMQ_SYS_TRANS"
REMOVE_TAG = "d"
TRANSACTION_ID = "__transactionId__"
PRODUCER_GROUP = "PGROUP"
CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
CHECK_IMMUNITY = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
#: metaledger's: on an op record, COMMIT or ROLLBACK
RESOLUTION = "TRAN_RESOLUTION"
REAL_TOPIC, REAL_QID = "REAL_TOPIC", "REAL_QID"


class Resolution(enum.IntEnum):
    """``MessageSysFlag``'s transaction types, as END_TRANSACTION's ``commitOrRollback``."""

    UNKNOWN = 0x0  # TRANSACTION_NOT_TYPE: the producer does not know yet
    COMMIT = 0x8
    ROLLBACK = 0xC


def to_half(m: StoredMessage) -> StoredMessage:
    """The prepare as stored: on the half topic, queue 0, the real place in properties."""
    props = dict(m.properties)
    uniq = props.get("UNIQ_KEY")
    if uniq:
        props[TRANSACTION_ID] = uniq
    props[REAL_TOPIC] = m.topic
    props[REAL_QID] = str(m.queue_id)
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    return m._replace(
        topic=HALF_TOPIC,
        queue_id=0,
        sysflag=m.sysflag & ~SYSFLAG_TRANSACTION_MASK,
        properties=props,
    )


def to_real(half: StoredMessage) -> StoredMessage:
    """The committed message from a stored half."""
    props = dict(half.properties)
    topic = props.pop(REAL_TOPIC, "")
    qid = props.pop(REAL_QID, "0")
    for name in (PROPERTY_TRANSACTION_PREPARED, TRANSACTION_ID, PREPARED_QUEUE_OFFSET, CHECK_TIMES):
        props.pop(name, None)
    return StoredMessage(
        topic=topic,
        body=half.body,
        queue_id=int(qid) if qid.isdigit() else 0,
        flag=half.flag,
        sysflag=(half.sysflag & ~SYSFLAG_TRANSACTION_MASK) | Resolution.COMMIT,
        born_timestamp=half.born_timestamp,
        born_host=half.born_host,
        reconsume_times=half.reconsume_times,
        prepared_tx_offset=half.physical_offset,
        properties=props,
    )


def renewed(half: StoredMessage) -> StoredMessage:
    """The copy a check puts back at the half queue's end: one more check counted, its root
    kept."""
    props = dict(half.properties)
    props[CHECK_TIMES] = str(check_times(half) + 1)
    props[PREPARED_QUEUE_OFFSET] = str(root_offset(half))
    return half._replace(topic=HALF_TOPIC, queue_id=0, properties=props)


def op_record(
    half: StoredMessage, resolution: Resolution, host: Host, now_ms: int
) -> StoredMessage:
    """The ``d`` op that ends ``half`` (and every copy of its root)."""
    offsets = sorted({half.queue_offset, root_offset(half)})
    return StoredMessage(
        topic=OP_TOPIC,
        body=",".join(str(o) for o in offsets).encode(),
        queue_id=0,
        born_timestamp=now_ms,
        born_host=host,
        properties={"TAGS": REMOVE_TAG, RESOLUTION: resolution.name},
    )


def op_offsets(op: StoredMessage) -> list[int]:
    """The half queue offsets an op record ends (an op of another tag ends none)."""
    if op.properties.get("TAGS") != REMOVE_TAG:
        return []
    out = []
    for part in op.body.decode("ascii", "replace").split(","):
        part = part.strip()
        if part.isdigit():
            out.append(int(part))
    return out


def op_resolution(op: StoredMessage) -> Resolution:
    """COMMIT or ROLLBACK (an op of RocketMQ's own, without the property: UNKNOWN)."""
    name = op.properties.get(RESOLUTION, "")
    return Resolution[name] if name in ("COMMIT", "ROLLBACK") else Resolution.UNKNOWN


def root_offset(half: StoredMessage) -> int:
    """The queue offset of the prepare this half is (a copy of)."""
    text = half.properties.get(PREPARED_QUEUE_OFFSET, "")
    return int(text) if text.isdigit() else half.queue_offset


def check_times(half: StoredMessage) -> int:
    text = half.properties.get(CHECK_TIMES, "")
    return int(text) if text.isdigit() else 0


def immunity_ms(half: StoredMessage, timeout_ms: int) -> int:
    """How long after its birth a half is left alone: the transaction timeout, or the
    producer's ``CHECK_IMMUNITY_TIME_IN_SECONDS`` when longer
    (``TransactionalMessageUtil.getImmunityTime``)."""
    text = half.properties.get(CHECK_IMMUNITY, "").strip()
    custom = int(text) * 1000 if text.isdigit() else 0
    return max(custom, timeout_ms)


class Ended:
    """Which roots have an op, and how they ended: ``root -> Resolution``, built from op
    records in any order (an op is idempotent)."""

    def __init__(self) -> None:
        self.roots: dict[int, Resolution] = {}

    def add(self, offsets: Iterable[int], resolution: Resolution) -> None:
        for o in offsets:
            self.roots.setdefault(o, resolution)

    def replay(self, op: StoredMessage) -> None:
        self.add(op_offsets(op), op_resolution(op))

    def of(self, half: StoredMessage) -> Resolution | None:
        """How ``half`` (or its root) ended; None while open."""
        got = self.roots.get(half.queue_offset)
        if got is None:
            got = self.roots.get(root_offset(half))
        return got


def physical_offset(offset_msg_id: str) -> int | None:
    """The commit-log offset in an offset message id (its last 16 hex digits); None if it is
    not one."""
    text = offset_msg_id.strip()
    if len(text) not in (32, 56):
        return None
    try:
        return int(text[-16:], 16)
    except ValueError:
        return None
