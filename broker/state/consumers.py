"""Consumer groups: who is in each group, on which connection, subscribed to what.

RocketMQ's ``ConsumerManager`` (RocketMQ 4.9's ``broker/client/ConsumerManager.java``): a HEART_BEAT
registers each of the client's consumer groups with its subscriptions; a client leaves on
UNREGISTER_CLIENT, when its connection closes, or after ``client_expiry_ms`` without a heartbeat
(120 s). A change of a group's members answers with the group's name, so the caller can send
NOTIFY_CONSUMER_IDS_CHANGED to the others. Subscriptions are parsed as TAG expressions (``*``/empty
= all, else ``a || b``, FilterAPI.java:39-64); the tag hash is the broker's own (C++ 1.x clients
send ``atoi(tag)`` as codeSet: rocketmq-client-cpp ``SubscriptionData.cpp``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from broker.remoting.errors import BrokerRequestError
from rmq.codes import ResponseCode
from rmq.server import Peer


@dataclass(frozen=True)
class Subscription:
    topic: str
    expression: str
    tags: frozenset[str] | None  # None = every message

    def matches(self, tags: str) -> bool:
        return self.tags is None or tags in self.tags


def parse_expression(
    topic: str, expression: str | None, expression_type: str = "TAG"
) -> Subscription:
    """A TAG subscription (SQL92 is refused: this broker has no property filter)."""
    if expression_type and expression_type.upper() != "TAG":
        raise BrokerRequestError(
            f"The broker does not support consumer to filter message by {expression_type}",
            ResponseCode.SYSTEM_ERROR,
        )
    text = (expression or "").strip()
    if text in ("", "*"):
        return Subscription(topic, "*", None)
    tags = frozenset(t.strip() for t in text.split("||") if t.strip())
    return Subscription(topic, text, tags or None)


@dataclass
class Member:
    client_id: str
    peer: Peer
    last_seen_ms: int
    language: str = "JAVA"  # the heartbeat's language and version header fields
    version: int = 0


@dataclass
class ConsumerGroup:
    name: str
    members: dict[str, Member] = field(default_factory=dict)
    subscriptions: dict[str, Subscription] = field(default_factory=dict)
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""


def _enum(value: Any, names: dict[int, str]) -> str:
    """C++ sends enum ordinals, ali-ons and Java names: accept both."""
    if isinstance(value, int) and not isinstance(value, bool):
        return names.get(value, str(value))
    return str(value or "")


CONSUME_TYPES = {0: "CONSUME_ACTIVELY", 1: "CONSUME_PASSIVELY"}
MESSAGE_MODELS = {0: "BROADCASTING", 1: "CLUSTERING"}
CONSUME_FROM = {
    0: "CONSUME_FROM_LAST_OFFSET",
    1: "CONSUME_FROM_FIRST_OFFSET",
    2: "CONSUME_FROM_TIMESTAMP",
}


class ConsumerRegistry:
    def __init__(self, client_expiry_ms: int = 120_000) -> None:
        self.client_expiry_ms = client_expiry_ms
        self.groups: dict[str, ConsumerGroup] = {}

    def heartbeat(
        self,
        client_id: str,
        peer: Peer,
        data: dict[str, Any],
        now_ms: int,
        language: str = "JAVA",
        version: int = 0,
    ) -> list[str]:
        """Register one consumerData entry of a heartbeat; returns [group] if its members or
        subscriptions changed (RocketMQ 4.9's ``ConsumerManager.registerConsumer``:
        ``r1 || r2``)."""
        name = data.get("groupName")
        if not isinstance(name, str) or not name:
            raise BrokerRequestError("heartbeat: a consumerData entry has no groupName")
        group = self.groups.setdefault(name, ConsumerGroup(name))
        subs = {}
        for s in data.get("subscriptionDataSet") or []:
            if not isinstance(s, dict) or not isinstance(s.get("topic"), str):
                raise BrokerRequestError(f"heartbeat: group {name}: a subscription has no topic")
            subs[s["topic"]] = parse_expression(
                s["topic"], str(s.get("subString") or "*"), str(s.get("expressionType") or "TAG")
            )
        resubscribed = group.subscriptions != subs  # RocketMQ notifies on r1 || r2
        group.subscriptions = subs
        group.consume_type = _enum(data.get("consumeType"), CONSUME_TYPES)
        group.message_model = _enum(data.get("messageModel"), MESSAGE_MODELS)
        group.consume_from_where = _enum(data.get("consumeFromWhere"), CONSUME_FROM)
        old = group.members.get(client_id)
        group.members[client_id] = Member(client_id, peer, now_ms, language, version)
        changed = old is None or old.peer.connection_id != peer.connection_id
        return [name] if changed or resubscribed else []

    def unregister(self, client_id: str, group_name: str | None) -> list[str]:
        changed = []
        for group in list(self.groups.values()):
            if group_name is not None and group.name != group_name:
                continue
            if group.members.pop(client_id, None) is not None:
                changed.append(group.name)
        return changed

    def connection_closed(self, peer: Peer) -> list[str]:
        changed = []
        for group in self.groups.values():
            gone = [
                c for c, m in group.members.items() if m.peer.connection_id == peer.connection_id
            ]
            for c in gone:
                del group.members[c]
            if gone:
                changed.append(group.name)
        return changed

    def expire(self, now_ms: int) -> list[str]:
        changed = []
        for group in self.groups.values():
            gone = [
                c
                for c, m in group.members.items()
                if now_ms - m.last_seen_ms > self.client_expiry_ms
            ]
            for c in gone:
                del group.members[c]
            if gone:
                changed.append(group.name)
        return changed

    def client_ids(self, group_name: str) -> list[str]:
        group = self.groups.get(group_name)
        return sorted(group.members) if group else []

    def peers(self, group_name: str) -> list[Peer]:
        group = self.groups.get(group_name)
        return [m.peer for m in group.members.values()] if group else []

    def subscription(self, group_name: str, topic: str) -> Subscription | None:
        group = self.groups.get(group_name)
        return group.subscriptions.get(topic) if group else None
