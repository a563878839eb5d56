"""END_TRANSACTION (37) over remoting (RocketMQ's ``EndTransactionProcessor.processRequest``).

``commitOrRollback`` 8 commits, 12 rolls back (through :meth:`TransactionService.end`); 0 (the
producer does not know yet) changes nothing: RocketMQ answers nothing, here a request that
waits for an answer gets SUCCESS saying the half stays and will be checked. Clients send
END_TRANSACTION oneway, so most answers go nowhere; a refusal (unknown offset, another
group's half, a different queue offset, ended the other way) is a SYSTEM_ERROR with the reason
and nothing written. A slave refuses with SERVICE_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging

from broker.transactions.half import Resolution
from broker.transactions.service import PAST, EndRequest, TransactionService
from rmq.codec import BadRequest, RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import EndTransactionHeader
from rmq.server import Handler, Peer

log = logging.getLogger(__name__)


class TransactionProcessor:
    def __init__(self, service: TransactionService) -> None:
        self.service = service

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.END_TRANSACTION: self.end_transaction}

    async def end_transaction(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = EndTransactionHeader.from_command(request)
        try:
            resolution = Resolution(h.commit_or_rollback)
        except ValueError:
            raise BadRequest(
                f"the custom field <commitOrRollback> is {h.commit_or_rollback}: 0 (unknown), "
                "8 (commit) or 12 (rollback)"
            ) from None
        if resolution is Resolution.UNKNOWN:
            log.info(
                "transactions: producer %s does not know the state of %s yet (from check: %s)",
                peer.address,
                h.msg_id,
                h.from_transaction_check,
            )
            return request.response(
                ResponseCode.SUCCESS, "the transaction stays open: its half will be checked"
            )
        result = await self.service.end(
            EndRequest(
                h.commit_log_offset,
                resolution,
                producer_group=h.producer_group,
                queue_offset=h.tran_state_table_offset,
                from_check=h.from_transaction_check,
            )
        )
        remark = None if result.written else f"already {PAST[resolution]}: nothing written"
        return request.response(ResponseCode.SUCCESS, remark)
