"""GET_BROKER_RUNTIME_INFO (28): ``{"table": {name: value}}``, every value a string, as
RocketMQ's ``BrokerController.getRuntimeInfo`` writes its KVTable (admin tools only).

On a replica group's master, one more row per slave connected to its HA service:
``slaveAckOffset_<broker id>``, the last commit-log offset that slave acknowledged (the
``slaveAckOffset`` of RocketMQ's ``HARuntimeInfo``; -1 before its first ack)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping

from broker.core import BrokerCore, now_ms
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.server import Handler, Peer

VERSION_DESC = "V5_3_3"  # the protocol generation the front answers as (codec.SERVER_VERSION)


class AdminProcessor:
    def __init__(
        self, core: BrokerCore, slave_acks: Callable[[], Mapping[int, int]] | None = None
    ) -> None:
        self.core = core
        #: each connected slave's acknowledged offset by broker id (the HA master's), if any
        self.slave_acks = slave_acks or dict

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info}

    def table(self) -> dict[str, str]:
        core = self.core
        store = core.store
        limit = core.replication.readable_limit()
        table = {
            "brokerVersionDesc": VERSION_DESC,
            "brokerName": core.config.broker_name,
            "brokerRole": core.config.broker_role,
            "brokerAddr": core.config.address,
            "commitLogMinOffset": str(store.log.min_offset),
            "commitLogMaxOffset": str(store.log.end_offset),
            "confirmOffset": str(store.log.end_offset if limit is None else limit),
            "bootTimestamp": str(core.stats.started_ms),
            "runtime": f"{(now_ms() - core.stats.started_ms) // 1000} s",
            "pullMessagesTotal": str(core.stats.pulled_messages),
            "parkedPulls": str(core.hold.parked),
            "writable": "true" if core.replication.writable() is None else "false",
            "consumerGroups": str(len(core.consumers.groups)),
            "topics": str(len(core.topics.all())),
        }
        for status, n in sorted(core.stats.puts_by_status.items()):
            table[f"putStatus_{status}"] = str(n)
        for broker_id, acked in sorted(self.slave_acks().items()):
            table[f"slaveAckOffset_{broker_id}"] = str(acked)
        table["msgPutTotalTodayNow"] = str(core.stats.puts_by_status.get("PUT_OK", 0))
        return table

    async def runtime_info(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        body = json.dumps({"table": self.table()}, sort_keys=True).encode()
        return request.response(ResponseCode.SUCCESS, body=body)
