"""Independent RocketMQ "clusters" for the RocketMQ replicator's tests and benchmark.

Each :class:`RmqCluster` is one real metaledger node (its nameserver: routes over gRPC, and
RocketMQ remoting on the node's remoting port, which is what ``--source-namesrv`` /
``--dest-namesrv`` name) and one real ``metaledger broker`` registered in it under the
cluster's own RocketMQ cluster name (broker config ``cluster``, ``metaledger broker
--cluster``): loop prevention compares those names, so clusters may be named so that one
contains another ("A" and "AB"). Nothing is shared between two clusters but the machine.

What a test does with one: create topics in its routes (:meth:`RmqCluster.topic`), produce
real messages straight to its broker (:meth:`RmqCluster.produce`: SEND_MESSAGE_V2 (310),
research/broker.md §3.1; only SUCCESS = PUT_OK is a stored message, and its answer names
the queue, the queue offset and the broker's msgId), read every stored record back
byte for byte (:meth:`RmqCluster.pull_all`, PULL_MESSAGE 11), and take the broker away:
stopped (SIGTERM or SIGKILL) and started again on the same port and data directory, or
frozen with SIGSTOP and thawed with SIGCONT. Every process is stopped by its PID in
:meth:`RmqCluster.close`; ports are picked free on 127.0.0.1 (``tests.harness``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nameserver.client import Client, QueueData, Route
from rmq.codes import RequestCode, ResponseCode
from rmq.connection import RemotingConnection
from rmq.message import StoredMessage, checked_properties_text
from rmq.msgid import uniq_key
from tests.harness import Cluster
from tests.integration.broker.conftest import BrokerProcess, wait_for
from tests.integration.replicator.broker_env import pull_all, scan

__all__ = [
    "Message",
    "ProduceError",
    "RmqCluster",
    "Stored",
    "close_all",
    "running_clusters",
    "start_clusters",
]

#: sends answered with these did not store the message: tried again until the deadline
#: (a broker that has not loaded a new topic's route yet, or a busy one)
_RETRY_CODES = frozenset({ResponseCode.TOPIC_NOT_EXIST, ResponseCode.SYSTEM_BUSY})


@dataclass(frozen=True, slots=True)
class Message:
    """One message to produce. ``queue`` None: round robin over the topic's write queues.
    ``properties`` are user properties; a ``UNIQ_KEY`` among them is kept as the message id
    (else one is made, as the Java producer does)."""

    body: bytes
    tags: str = ""
    keys: str = ""
    properties: Mapping[str, str] = field(default_factory=dict)
    queue: int | None = None
    flag: int = 0


@dataclass(frozen=True, slots=True)
class Stored:
    """Where the broker stored a produced message (its SEND answer)."""

    queue: int
    offset: int  # the queue offset
    msg_id: str  # UNIQ_KEY: the id consumers and the replicator see
    offset_msg_id: str  # the broker's msgId (store host + commit log offset)


class ProduceError(Exception):
    """A send answered with a code other than SUCCESS (and not retried)."""

    def __init__(self, code: int, remark: str | None) -> None:
        super().__init__(f"send answered {code}: {remark or ''}")
        self.code = code


def _properties(msg: Message) -> tuple[str, str]:
    """``(text, uniq key)``: ``k 0x01 v 0x02`` for KEYS, TAGS, the user properties, UNIQ_KEY
    and WAIT (research/rocketmq-clients.md §1.6)."""
    props: dict[str, str] = {}
    if msg.keys:
        props["KEYS"] = msg.keys
    if msg.tags:
        props["TAGS"] = msg.tags
    props.update(msg.properties)
    props.setdefault("UNIQ_KEY", uniq_key())
    props["WAIT"] = "true"
    return checked_properties_text(props), props["UNIQ_KEY"]  # BadProperty: not sendable


class RmqCluster:
    """One metaledger node and one broker named ``broker_name`` in RocketMQ cluster ``name``.

    ``node``: an already started (not necessarily ready) one-node :class:`Cluster` to take
    over, so several clusters' nodes can boot at once (:func:`start_clusters`). On a failed
    start everything started is stopped again."""

    def __init__(
        self,
        root: Path,
        name: str,
        broker_name: str = "",
        node: Cluster | None = None,
        broker_args: Sequence[str] = (),
    ) -> None:
        self.name = name
        self.root = root
        self.broker_name = broker_name or f"broker-{name.lower()}"
        self.node = node if node is not None else Cluster(root / "node", n=1)
        self.broker: BrokerProcess | None = None
        self.client: Client | None = None
        self._down = False  # stopped on purpose: its exit code is not a failure
        self._paused = False
        try:
            self.node.wait_ready(60)
            self.broker = BrokerProcess(
                root, self.endpoints, self.broker_name, "--cluster", name, *broker_args
            )
            self.client = Client(self.endpoints, timeout_s=10)
            self.wait_registered()
        except BaseException:
            with contextlib.suppress(AssertionError):  # the start's error is the one to see
                self.close(failed=True)
            raise

    # ---- addresses ------------------------------------------------------------------

    @property
    def namesrv(self) -> str:
        """``127.0.0.1:<remoting port of the node>``: what RocketMQ clients call the nameserver."""
        return f"127.0.0.1:{self.node.nodes[0].remoting_port}"

    @property
    def endpoints(self) -> list[str]:
        """The node's gRPC endpoints (``nameserver.client.Client``, ``--endpoints``)."""
        return self.node.endpoints

    @property
    def broker_addr(self) -> str:
        assert self.broker is not None
        return self.broker.addr

    @property
    def routes(self) -> Client:
        assert self.client is not None
        return self.client

    def __repr__(self) -> str:
        return f"RmqCluster({self.name!r}, namesrv={self.namesrv}, broker={self.broker_addr})"

    def wait_registered(self, timeout: float = 30) -> None:
        """Until the node's routes list the broker in this cluster."""
        wait_for(
            f"{self.broker_name} registered in cluster {self.name}",
            lambda: (
                self.broker_name in self.routes.route_cluster_info().clusters.get(self.name, [])
            ),
            timeout,
        )

    # ---- topics and messages --------------------------------------------------------

    def topic(self, name: str, queues: int = 4, perm: int = 6, order: bool = False) -> str:
        """Create (or update) ``name`` on this cluster's broker: ``queues`` read and write
        queues, ``perm`` (6 = read + write), ``order`` (an orderly topic); returns ``name``."""
        self.routes.route_topic_create(
            name, [QueueData(self.broker_name, queues, queues, perm, 0, order)]
        )
        return name

    def route(self, topic: str) -> Route:
        return self.routes.route_get(topic)

    def _queue_data(self, topic: str) -> QueueData:
        for q in self.route(topic).queues:
            if q.broker_name == self.broker_name:
                return q
        raise LookupError(f"topic {topic} has no queues on {self.broker_name} in {self.name}")

    def produce(
        self, topic: str, messages: Sequence[Message | bytes], timeout: float = 30
    ) -> list[Stored]:
        """Send ``messages`` (plain bytes: a body with nothing else) and wait for every
        answer; returns where each was stored, in the order given. Messages of one queue
        are sent one after the other (so they are stored in the order given), queues in
        parallel. ProduceError on a failed send."""
        return asyncio.run(self.produce_async(topic, messages, timeout))

    async def produce_async(
        self, topic: str, messages: Sequence[Message | bytes], timeout: float = 30
    ) -> list[Stored]:
        msgs = [m if isinstance(m, Message) else Message(m) for m in messages]
        queues = self._queue_data(topic).write_queue_nums
        lanes: dict[int, list[int]] = {}
        for i, m in enumerate(msgs):
            queue = i % queues if m.queue is None else m.queue
            lanes.setdefault(queue, []).append(i)
        out: list[Stored | None] = [None] * len(msgs)
        host, _, port = self.broker_addr.rpartition(":")
        conn = await RemotingConnection.connect(host, int(port))
        deadline = time.monotonic() + timeout

        async def lane(queue: int, indexes: list[int]) -> None:
            for i in indexes:
                out[i] = await self._send(conn, topic, queue, queues, msgs[i], deadline)

        try:
            await asyncio.gather(*(lane(q, ix) for q, ix in lanes.items()))
        finally:
            await conn.close()
        return [s for s in out if s is not None]

    async def _send(
        self,
        conn: RemotingConnection,
        topic: str,
        queue: int,
        queues: int,
        msg: Message,
        deadline: float,
    ) -> Stored:
        props, uniq = _properties(msg)
        header = {
            "a": "metaledger-test-producer", "b": topic, "c": "TBW102", "d": queues,
            "e": queue, "f": 0, "g": int(time.time() * 1000), "h": msg.flag, "i": props,
            "j": 0, "k": False, "m": False, "n": self.broker_name,
        }  # fmt: skip
        while True:
            r = await conn.request(RequestCode.SEND_MESSAGE_V2, header, msg.body, timeout_s=10)
            if r.code == ResponseCode.SUCCESS:
                ext = r.ext_fields
                return Stored(int(ext["queueId"]), int(ext["queueOffset"]), uniq, str(ext["msgId"]))
            if r.code not in _RETRY_CODES or time.monotonic() > deadline:
                raise ProduceError(r.code, r.remark)
            await asyncio.sleep(0.1)

    def pull_all(self, topic: str, queue: int, start: int = 0) -> list[StoredMessage]:
        """Every stored record of the queue from queue offset ``start`` on (PULL_MESSAGE)."""
        return pull_all(self.broker_addr, topic, queue, start)

    def all_messages(self, topic: str) -> list[StoredMessage]:
        """Every stored record of the topic: queue 0 in offset order, then queue 1, ..."""
        queues = self._queue_data(topic).read_queue_nums
        return [m for q in range(queues) for m in self.pull_all(topic, q)]

    def scan(self, topic: str, on_message: Callable[[StoredMessage], None]) -> int:
        """``on_message`` for every stored record of the topic (in :meth:`all_messages`'
        order), none kept: for a big topic. Returns how many there were."""
        seen = 0

        def count(m: StoredMessage) -> None:
            nonlocal seen
            seen += 1
            on_message(m)

        for q in range(self._queue_data(topic).read_queue_nums):
            scan(self.broker_addr, topic, q, count)
        return seen

    # ---- outages --------------------------------------------------------------------

    def stop_broker(self, sig: int = signal.SIGTERM) -> int | None:
        """Stop the broker by its PID (SIGKILL: kill -9); returns its exit code."""
        assert self.broker is not None
        self.resume_broker()
        self._down = True
        return self.broker.stop(sig)

    def start_broker(self, timeout: float = 30) -> None:
        """Start the broker again: same port, same data directory; returns once it serves
        and is registered."""
        assert self.broker is not None
        self.broker.start(timeout)
        self._down = False
        self.wait_registered(timeout)

    def pause_broker(self) -> None:
        """SIGSTOP the broker: connections stay open, nothing is answered."""
        assert self.broker is not None and self.broker.proc is not None
        os.kill(self.broker.proc.pid, signal.SIGSTOP)
        self._paused = True

    def resume_broker(self) -> None:
        """SIGCONT the broker (a no-op unless paused)."""
        if self._paused and self.broker is not None and self.broker.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.broker.proc.pid, signal.SIGCONT)
        self._paused = False

    @property
    def broker_pid(self) -> int | None:
        return None if self.broker is None or self.broker.proc is None else self.broker.proc.pid

    def close(self, failed: bool = False) -> None:
        """Stop the broker, then the node, each by PID. AssertionError afterwards when the
        broker had exited on its own with a failure code (not stopped by the test)."""
        code: int | None = None
        try:
            if self.broker is not None:
                self.resume_broker()
                was_down = self._down
                code = self.broker.stop()
                if failed or (code not in (0, None) and not was_down):
                    print(f"--- broker {self.name}:\n{self.broker.log_tail()}", file=sys.stderr)
                if was_down:
                    code = None
        finally:
            if self.client is not None:
                self.client.close()
            self.node.close(failed=failed)
        assert code in (0, None), f"broker of cluster {self.name} exited {code}"


def start_clusters(
    root: Path, names: Sequence[str], broker_args: Sequence[str] = ()
) -> list[RmqCluster]:
    """One :class:`RmqCluster` per name under ``root/<name>``; the nodes boot together. On a
    failure every process started is stopped."""
    nodes: dict[str, Cluster] = {}
    out: list[RmqCluster] = []
    try:
        for name in names:
            nodes[name] = Cluster(root / name / "node", n=1)
        for name in names:
            out.append(RmqCluster(root / name, name, node=nodes.pop(name), broker_args=broker_args))
    except BaseException:
        with contextlib.suppress(AssertionError):
            close_all(out, failed=True)
        for node in nodes.values():
            node.close(failed=True)
        raise
    return out


@contextlib.contextmanager
def running_clusters(
    root: Path, names: Sequence[str], broker_args: Sequence[str] = ()
) -> Iterator[list[RmqCluster]]:
    """:func:`start_clusters`, and every one closed at the end (log tails on an error)."""
    clusters = start_clusters(root, names, broker_args)
    failed = False
    try:
        yield clusters
    except BaseException:
        failed = True
        raise
    finally:
        close_all(clusters, failed)


def close_all(clusters: Sequence[RmqCluster], failed: bool = False) -> None:
    """Close every cluster (each process by PID), then raise the first AssertionError (a
    broker that had exited with a failure) unless ``failed`` (an error is on its way)."""
    errors: list[AssertionError] = []
    for c in clusters:
        try:
            c.close(failed=failed)
        except AssertionError as exc:
            errors.append(exc)
    if errors and not failed:
        raise errors[0]
