"""GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201): every consumer group this broker knows.

RocketMQ's ``AdminBrokerProcessor.getAllSubscriptionGroup`` answers its
``SubscriptionGroupManager`` as a ``SubscriptionGroupWrapper``: ``{"subscriptionGroupTable":
{name: SubscriptionGroupConfig}, "forbiddenTable": {}, "dataVersion": {...}}`` (what
rocketmq-dashboard's consumer list and ``mqadmin consumerProgress`` without a group read).
RocketMQ creates a group's config the first time the group is seen (``autoCreateSubscriptionGroup``);
metaledger keeps no such table, so the groups are the ones the broker holds anything of:

- committed offsets (pull groups, and POP groups' committed lows: ``core.offsets``),
- a POP book (remoting POP, and the gRPC SimpleConsumer/PushConsumer: open or on disk),
- a live connection (a remoting consumer's heartbeat, a gRPC consumer's heartbeat).

Each config is RocketMQ's defaults (consume enabled, 1 retry queue, 16 retries, read from
broker 0) with the group's name; ``dataVersion``'s counter is the number of groups and its
timestamp the answer's time (the set is computed, not versioned).
"""

from __future__ import annotations

import json

from broker.clients import GrpcClients
from broker.core import BrokerCore, now_ms
from broker.pop.service import PopService
from rmq.codec import RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.server import Handler, Peer

__all__ = ["GroupsProcessor", "subscription_group_config"]


def subscription_group_config(name: str) -> dict[str, object]:
    """RocketMQ's ``SubscriptionGroupConfig`` with its defaults, as fastjson writes it."""
    return {
        "attributes": {},
        "brokerId": 0,
        "consumeBroadcastEnable": True,
        "consumeEnable": True,
        "consumeFromMinEnable": True,
        "consumeMessageOrderly": False,
        "consumeTimeoutMinute": 15,
        "groupName": name,
        "groupRetryPolicy": {"type": "CUSTOMIZED"},
        "groupSysFlag": 0,
        "notifyConsumerIdsChangedEnable": True,
        "retryMaxTimes": 16,
        "retryQueueNums": 1,
        "whichBrokerWhenConsumeSlowly": 1,
    }


class GroupsProcessor:
    def __init__(self, core: BrokerCore, pop: PopService | None, grpc: GrpcClients) -> None:
        self.core = core
        self.pop = pop
        self.grpc = grpc

    def handlers(self) -> dict[int, Handler]:
        return {RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_groups}

    def _popped(self) -> set[str]:
        """Groups with a POP book open or on disk (blocking: on the store's pool)."""
        if self.pop is None:
            return set()
        table = self.pop.table
        names = {g for g, _t, _q in list(table.books)}
        try:
            names.update(g for g, _t, _q in table.keys_on_disk())
        except OSError:  # a directory removed while listed: the open books stand
            pass
        return names

    async def groups(self) -> list[str]:
        """Every group with committed offsets, a POP book or a live consumer here."""
        names = {g for g, _t, _q in self.core.offsets.keys()}
        names.update(n for n, g in list(self.core.consumers.groups.items()) if g.members)
        names.update(self.grpc.groups())
        names.update(await self.core.run(self._popped))
        return sorted(n for n in names if n)

    async def all_groups(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        names = await self.groups()
        doc = {
            "dataVersion": {"counter": len(names), "stateVersion": 0, "timestamp": now_ms()},
            "forbiddenTable": {},
            "subscriptionGroupTable": {n: subscription_group_config(n) for n in names},
        }
        body = json.dumps(doc, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
        return request.response(ResponseCode.SUCCESS, body=body.encode())
