"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK (36).

Facts (RocketMQ's ``SendMessageProcessor``): bornHost = the peer, storeHost = the broker's
reachable ``ip:port`` (C++ clients send CONSUMER_SEND_MSG_BACK there); ``queueId < 0`` picks a
random write queue; the batch-or-not decision is the header's ``batch`` field for every send code
(C++ sends batches as code 10 with ``"batch":"1"``); a message for ``%RETRY%<group>`` whose
``reconsumeTimes`` reached the maximum (header ``maxReconsumeTimes`` else the group's
``retryMaxTimes``) goes to ``%DLQ%<group>`` queue 0; a ``DELAY`` level > 0 goes to
SCHEDULE_TOPIC_XXXX queue ``level-1`` with ``REAL_TOPIC``/``REAL_QID``; a timer message
(``TIMER_DELIVER_MS``/``TIMER_DELAY_MS``/``TIMER_DELAY_SEC``) to ``rmq_sys_wheel_timer``
(:mod:`broker.timer`). The answer's ``msgId`` is
the offset message id (batches: comma-joined), ``queueId`` and ``queueOffset`` (the first), all
strings (as RocketMQ's ``SendMessageResponseHeader``: C++ 1.x reads only JSON strings); the status
maps to a code by ``broker.replication.RESPONSE``.

A transaction's half message (property ``TRAN_MSG=true``, or a sysflag of the prepared type)
is stored on the half topic (:func:`broker.transactions.half.to_half`), invisible until
END_TRANSACTION commits it (:mod:`broker.transactions`); RocketMQ's ``SendMessageProcessor``
exempts a retried message of a client older than 4.6.1 (reconsumeTimes and a DELAY level both
> 0). A batch whose header or any message says so is refused with NO_PERMISSION and RocketMQ's
``rejectTransactionMessage`` remark, storing nothing (RocketMQ's ``CommitLog.asyncPutMessages``
refuses transactional batches too).

A topic not in the table and not in the routes is created from the request's
``defaultTopic`` (TBW102) when auto-creation is on (``BrokerConfig.auto_create_topic``,
RocketMQ's ``AbstractSendMessageProcessor.msgCheck``): ``defaultTopicQueueNums`` queues,
capped by the default topic's write queues (:meth:`broker.topics.TopicTable.create_from_default`);
the table's change registers it in metaledger's routes. Otherwise TOPIC_NOT_EXIST.
"""

from __future__ import annotations

import functools
import ipaddress
import logging
import random

from broker.admin.topics import check_topic_name
from broker.core import BrokerCore, now_ms
from broker.remoting.errors import (
    BrokerRequestError,
    NoPermission,
    ServiceNotAvailable,
    TopicNotExist,
)
from broker.replication import RESPONSE, PutStatus
from broker.store import PutResult, StoreError
from broker.timer.message import park, to_timer
from broker.topics import (
    DLQ_PREFIX,
    REPLICATOR_SOURCE,
    RETRY_PREFIX,
    SCHEDULE_TOPIC,
    TopicConfig,
)
from broker.transactions.half import to_half
from rmq.batch import BatchItem, decode_batch
from rmq.codec import BadRequest, RemotingCommand
from rmq.codes import RequestCode, ResponseCode
from rmq.headers import (
    DEFAULT_TOPIC,
    SendBackHeader,
    SendMessageHeader,
    SendMessageResponseHeader,
)
from rmq.message import (
    LOCALHOST,
    PROPERTY_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_MASK,
    SYSFLAG_TRANSACTION_PREPARED,
    Host,
    MalformedMessage,
    MessageError,
    StoredMessage,
    decode,
    parse_properties,
)
from rmq.msgid import offset_msg_id
from rmq.server import Handler, Peer

log = logging.getLogger(__name__)


def peer_host(peer: Peer) -> Host:
    return _born_host(peer.host, peer.port)


@functools.lru_cache(maxsize=4096)
def _born_host(host: str, port: int) -> Host:
    """The peer as a message's bornHost (parsed once per connection, not per send)."""
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return Host("127.0.0.1", 0)
    return Host(host, port)


def check_replica(topic: str, cluster: str, props: dict[str, str]) -> None:
    """A topic that is a replica of ``cluster`` takes only what the RocketMQ replicator
    brought from there (``TopicConfig.replica_of``): NO_PERMISSION otherwise."""
    trail = props.get(REPLICATOR_SOURCE, "")
    if cluster not in trail.split(","):
        raise NoPermission(
            f"the topic[{topic}] is read-only for producers: it is a replica of cluster "
            f"{cluster} (only the replicator writes it)"
        )


def is_half_message(sys_flag: int, reconsume_times: int, props: dict[str, str]) -> bool:
    """A transaction's prepare half: ``TRAN_MSG=true`` (Java's ``Boolean.parseBoolean``) or a
    sysflag of the prepared type (what a producer sets for it), except a retried message from
    a client older than 4.6.1, which keeps the property (reconsumeTimes and DELAY both > 0:
    RocketMQ's ``SendMessageProcessor`` exempts it)."""
    prepared = props.get(PROPERTY_TRANSACTION_PREPARED, "").lower() == "true"
    if not prepared and sys_flag & SYSFLAG_TRANSACTION_MASK != SYSFLAG_TRANSACTION_PREPARED:
        return False
    delay = props.get("DELAY", "").strip()
    return not (reconsume_times > 0 and delay.isdigit() and int(delay) > 0)


class SendProcessor:
    def __init__(self, core: BrokerCore) -> None:
        self.core = core

    def handlers(self) -> dict[int, Handler]:
        return {
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
        }

    # ------------------------------------------------------------------ send
    async def _topic(self, h: SendMessageHeader) -> TopicConfig:
        name = h.topic
        topics = self.core.topics
        config = await topics.lookup(name)
        if config is None and name.startswith((RETRY_PREFIX, DLQ_PREFIX)) and len(name) > 7:
            config = topics.ensure(name, 1)
        if config is None:
            config = self._auto_create(h)
        if not config.writable:
            raise NoPermission(f"the topic[{name}] sending message is forbidden")
        return config

    def _auto_create(self, h: SendMessageHeader) -> TopicConfig:
        """The unknown topic created from the request's default topic (TBW102) when
        auto-creation is on; TopicNotExist otherwise, saying why."""
        name = h.topic
        missing = f"topic[{name}] not exist, apply first please!"
        c = self.core.config
        if not c.auto_create_topic:
            raise TopicNotExist(missing)
        try:
            check_topic_name(name, frozenset({c.cluster, c.broker_name}))
        except BrokerRequestError as exc:
            raise TopicNotExist(f"{missing} (not created automatically: {exc})") from None
        default = h.default_topic or DEFAULT_TOPIC
        config = self.core.topics.create_from_default(name, default, h.default_topic_queue_nums)
        if config is None:
            raise TopicNotExist(
                f"{missing} (not created automatically: the default topic[{default}] is not "
                "here or does not let topics inherit from it)"
            )
        log.info(
            "topic %s created on first send (from %s, %d queues)",
            name,
            default,
            config.write_queue_nums,
        )
        return config

    def _refuse_half_messages(self, h: SendMessageHeader, props: list[dict[str, str]]) -> None:
        """NO_PERMISSION for a batch holding a transaction's prepare half (RocketMQ's
        ``rejectTransactionMessage`` remark), before anything is created or stored."""
        if any(is_half_message(h.sys_flag, h.reconsume_times, p) for p in props):
            raise NoPermission(
                f"the broker[{self.core.config.advertised_host}] sending transaction message is "
                "forbidden (a transaction's half message cannot be part of a batch)"
            )

    async def send(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = SendMessageHeader.from_command(request)
        if h.batch:
            items = _batch(request.body)
            self._refuse_half_messages(h, [it.properties for it in items])
        else:
            props = parse_properties(h.properties)
        config, queue_id = await self.target(h)
        born = peer_host(peer)
        replica_of = config.replica_of
        if h.batch:
            if h.topic.startswith(RETRY_PREFIX):
                raise BrokerRequestError("batch message does not support retry group")
            if replica_of:
                for it in items:
                    check_replica(h.topic, replica_of, it.properties)
            messages = [
                self._message(h, h.topic, queue_id, it.body, it.flag, it.properties, born)
                for it in items
            ]
            status, results = await self.core.put_batch(messages)
            return self._answer(request, status, results, queue_id)
        status, results, queue_id = await self.put_one(
            h, request.body, props, born, config, queue_id
        )
        return self._answer(request, status, results, queue_id)

    async def target(self, h: SendMessageHeader) -> tuple[TopicConfig, int]:
        """The topic's config and the queue a send goes to (``queueId < 0``: a random write
        queue); refusals (not writable, no such topic, a bad queue) raise."""
        why = self.core.replication.writable()
        if why is not None:
            raise ServiceNotAvailable(why)
        config = await self._topic(h)
        queue_id = h.queue_id
        if queue_id < 0:
            queue_id = random.randrange(config.write_queue_nums)
        if queue_id >= max(config.write_queue_nums, config.read_queue_nums):
            raise BrokerRequestError(
                f"request queueId[{queue_id}] is illegal, topic {h.topic} has "
                f"{config.write_queue_nums} write queues"
            )
        return config, queue_id

    async def put_one(
        self,
        h: SendMessageHeader,
        body: bytes,
        props: dict[str, str],
        born: Host,
        config: TopicConfig,
        queue_id: int,
    ) -> tuple[PutStatus, list[PutResult], int]:
        """One message (not a batch) to ``queue_id`` of ``config`` (from :meth:`target`): the
        replica check, retry to DLQ, a timer, DELAY (a transaction's prepare: the half topic
        instead), then the store and the group's quorum; the status, the result and the queue
        it went to. The RocketMQ 5 gRPC front sends through it too."""
        replica_of = config.replica_of
        if replica_of:
            check_replica(h.topic, replica_of, props)
        topic = h.topic
        if topic.startswith(RETRY_PREFIX):
            limit = h.max_reconsume_times
            if limit is None:
                limit = self.core.config.retry_max_times
            if h.reconsume_times >= limit:
                topic = DLQ_PREFIX + topic[len(RETRY_PREFIX) :]
                self.core.topics.ensure(topic, 1)
                queue_id = 0
        message = self._message(h, topic, queue_id, body, h.flag, props, born)
        if is_half_message(h.sys_flag, h.reconsume_times, props):
            message = to_half(message)  # RocketMQ's prepareMessage: no delay for a half
        else:
            message = to_timer(message, now_ms(), self.core.config.timer_max_delay_sec)
            message = self.delayed(message)
        status, result = await self.core.put(message)
        return status, [result] if result else [], queue_id

    def _message(
        self,
        h: SendMessageHeader,
        topic: str,
        queue_id: int,
        body: bytes,
        flag: int,
        props: dict[str, str],
        born: Host,
    ) -> StoredMessage:
        # by position: a batch builds one a message, and keywords cost twice as much
        return StoredMessage(
            topic,
            body,
            queue_id,
            flag,
            0,  # queue_offset: the store's
            0,  # physical_offset: the store's
            h.sys_flag & ~SYSFLAG_TRANSACTION_MASK if h.batch else h.sys_flag,
            h.born_timestamp,
            born,
            0,  # store_timestamp: the store's
            LOCALHOST,  # store_host: the store's
            h.reconsume_times,
            0,  # prepared_tx_offset
            props,
        )

    def delayed(self, m: StoredMessage) -> StoredMessage:
        """A message with a DELAY level > 0 goes to SCHEDULE_TOPIC_XXXX, queue level-1."""
        level_text = m.properties.get("DELAY", "")
        if m.topic == SCHEDULE_TOPIC or not level_text.strip().lstrip("-").isdigit():
            return m
        level = int(level_text)
        if level <= 0:
            return m
        level = min(level, len(self.core.config.delay_levels_ms))
        props = dict(m.properties)
        props["DELAY"] = str(level)
        return park(m, SCHEDULE_TOPIC, level - 1, props)

    def _answer(
        self, request: RemotingCommand, status: PutStatus, results: list[PutResult], queue_id: int
    ) -> RemotingCommand:
        code, remark = RESPONSE[status]
        if not results or code not in (
            ResponseCode.SUCCESS,
            ResponseCode.FLUSH_DISK_TIMEOUT,
            ResponseCode.FLUSH_SLAVE_TIMEOUT,
            ResponseCode.SLAVE_NOT_AVAILABLE,
        ):
            return request.response(code, remark or status.value)
        host = self.core.config
        msg_ids = ",".join(
            offset_msg_id(host.advertised_host, host.listen_port, r.physical_offset)
            for r in results
        )
        return SendMessageResponseHeader(msg_ids, queue_id, results[0].queue_offset).response(
            request, code, remark
        )

    # ------------------------------------------------------------- send back
    async def send_back(self, request: RemotingCommand, peer: Peer) -> RemotingCommand:
        h = SendBackHeader.from_command(request)
        why = self.core.replication.writable()
        if why is not None:
            raise ServiceNotAvailable(why)
        try:
            raw = await self.core.run(self.core.store.read_record, h.offset)
            original = decode(raw)
        except (StoreError, MessageError, OSError, ValueError) as exc:
            raise BrokerRequestError(f"look message by offset failed, {h.offset}: {exc}") from None
        if original.physical_offset != h.offset:
            raise BrokerRequestError(
                f"look message by offset failed, {h.offset}: not a record start"
            )
        group = h.group
        retry_topic = RETRY_PREFIX + group
        self.core.topics.ensure(retry_topic, 1)
        props = dict(original.properties)
        props.setdefault("RETRY_TOPIC", original.topic)
        props.pop("DELAY", None)
        props.pop("REAL_TOPIC", None)
        props.pop("REAL_QID", None)
        limit = h.max_reconsume_times
        if limit is None:
            limit = self.core.config.retry_max_times
        delay = h.delay_level
        if original.reconsume_times >= limit or delay < 0:
            topic, queue_id = DLQ_PREFIX + group, 0
            self.core.topics.ensure(topic, 1)
        else:
            topic, queue_id = retry_topic, 0
            if delay == 0:
                delay = 3 + original.reconsume_times
            props["DELAY"] = str(delay)
        if "ORIGIN_MESSAGE_ID" not in props:
            props["ORIGIN_MESSAGE_ID"] = h.origin_msg_id or offset_msg_id(
                original.store_host.ip, original.store_host.port, original.physical_offset
            )
        message = StoredMessage(
            topic=topic,
            body=original.body,
            queue_id=queue_id,
            flag=original.flag,
            sysflag=original.sysflag,
            born_timestamp=original.born_timestamp,
            born_host=original.born_host,
            reconsume_times=original.reconsume_times + 1,
            properties=props,
        )
        log.debug(
            "send back: group %s offset %d (%s, reconsumeTimes %d, delayLevel %d) -> %s",
            group,
            h.offset,
            original.topic,
            original.reconsume_times,
            h.delay_level,
            topic,
        )
        status, _ = await self.core.put(self.delayed(message), wait_replicas=False)
        if status is not PutStatus.PUT_OK:
            return request.response(ResponseCode.SYSTEM_ERROR, status.value)
        return request.response(ResponseCode.SUCCESS)


def _batch(body: bytes) -> list[BatchItem]:
    """A batch body's messages; one that does not parse is a bad request (SYSTEM_ERROR with
    the decoder's words as the remark, the connection kept)."""
    try:
        return decode_batch(body)
    except MalformedMessage as exc:
        raise BadRequest(str(exc)) from None
