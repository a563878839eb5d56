"""What a producer sends to end its transaction (``metaledger send --transaction``): the
prepare's properties and END_TRANSACTION built from the prepare's answer, as RocketMQ's
``DefaultMQProducerImpl.endTransaction`` does (the half's commit-log offset from the answer's
offset message id, its queue offset as ``tranStateTableOffset``)."""

from __future__ import annotations

from broker.transactions.half import PRODUCER_GROUP, Resolution, physical_offset
from rmq.codec import BadRequest, RemotingCommand
from rmq.headers import EndTransactionHeader
from rmq.message import PROPERTY_TRANSACTION_PREPARED, SYSFLAG_TRANSACTION_PREPARED

PREPARED_SYSFLAG = SYSFLAG_TRANSACTION_PREPARED


def mark_prepare(props: dict[str, str], producer_group: str) -> None:
    props[PROPERTY_TRANSACTION_PREPARED] = "true"
    props[PRODUCER_GROUP] = producer_group


def end_request(answer: RemotingCommand, producer_group: str, resolution: str) -> RemotingCommand:
    """END_TRANSACTION (``resolution`` "commit" or "rollback") for the prepare ``answer``
    acknowledged; BadRequest when the answer names no half."""
    msg_id = answer.ext_fields.get("msgId", "")
    offset = physical_offset(msg_id)
    queue_offset = answer.ext_fields.get("queueOffset", "")
    if offset is None or not queue_offset.isdigit():
        raise BadRequest(f"the prepare's answer names no half message: {answer.ext_fields}")
    return EndTransactionHeader(
        producer_group=producer_group,
        tran_state_table_offset=int(queue_offset),
        commit_log_offset=offset,
        commit_or_rollback=int(Resolution[resolution.upper()]),
        from_transaction_check=False,
        msg_id=msg_id,
    ).request()
