"""Broker liveness as a lease: heartbeats live in the leader's memory; the log
records only changes of state (registered, expired, unregistered).

KRaft does the same with broker heartbeats. Per broker record (``broker`` type) the log
holds the registration that made it (``registered_offset``, ``registered_ms``) and its
``heartbeat_timeout_ms`` (120 s unless the broker sent ``heartbeatTimeoutMillis``).

* **Heartbeats** (an unchanged REGISTER_BROKER re-registration, QUERY_DATA_VERSION 322,
  BROKER_HEARTBEAT 904, ``Routing.Heartbeat``) arrive on any node and are noted in its
  memory (:meth:`BrokerKeeper.heartbeat`). A follower forwards what it saw to the leader
  every :data:`FORWARD_INTERVAL_S` as one batched ``Routing.Heartbeat(forwarded=true)``
  call to the leader's client address (from its member record), like the lease keeper
  batches keepalive checkpoints, but without a log entry: one small unary RPC per
  follower per interval whatever the number of brokers (100 brokers heartbeating every
  30 s through a follower cost about 7 heartbeats per call at most); a failed call keeps
  the batch for the next one. The leader counts a forwarded heartbeat at its own clock
  when the call arrives (a little late, never early), not at the follower's ``seen_ms``.
* **Expiry** is decided by the leader every :data:`EXPIRE_INTERVAL_S`: a broker whose
  ``max(registered_ms, last heartbeat seen, leadership start) + timeout`` passed by the
  leader's clock is proposed in one ``ExpireBrokersOp``; apply re-checks that the record
  is still the registration the leader saw and that the timeout passed by the entry's
  own timestamp, so a re-registration applied in between wins.
* **A new leader** grants every broker a full timeout from the moment it took over
  (``leadership start`` above): heartbeats the old leader held in memory are lost with
  it, so nobody is expired for their absence.

Bound: a broker disappears from routes on every node between its timeout and its timeout
+ ``EXPIRE_INTERVAL_S`` + one commit after its last heartbeat reached the leader (a
heartbeat received by a follower reaches the leader within ``FORWARD_INTERVAL_S``).
Only the leader's clock counts: registrations carry its stamp (it stamps what followers
forward) and a new leader counts from its own leadership start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import grpc

from nameserver.routing.apply import routing_entry
from nameserver.routing.records import Broker, broker_key
from nameserver.state.duties import PeriodicDuties, now_ms
from nameserver.state.machine import MetadataStateMachine
from protos import records_pb2
from protos.metaledger.v1 import routing_pb2, routing_pb2_grpc
from raftlog import ReplicatedLog

log = logging.getLogger(__name__)

#: How often a follower forwards the heartbeats it received to the leader.
FORWARD_INTERVAL_S = 0.5
#: How often the leader looks for brokers whose timeout passed.
EXPIRE_INTERVAL_S = 0.5
#: At most this many brokers per ExpireBrokersOp.
MAX_BROKERS_PER_ENTRY = 1000


class BrokerKeeper(PeriodicDuties):
    """Notes heartbeats; on followers forwards them, on the leader expires brokers."""

    def __init__(
        self,
        rlog: ReplicatedLog,
        state: MetadataStateMachine,
        propose_timeout_s: float,
        leader_client_address: Callable[[], str | None],
        clock_ms: Callable[[], int] = now_ms,
        dial: Callable[[str], grpc.aio.Channel] = grpc.aio.insecure_channel,
        node_metadata: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(rlog, clock_ms)
        self._dial = dial  # the leader's client port (TLS when the node's ports use it)
        self.state = state
        self.node_metadata = node_metadata  # the node credential (auth) on forwarded calls
        self.timeout_s = propose_timeout_s
        self.leader_client_address = leader_client_address
        self._seen: dict[bytes, int] = {}  # broker key -> latest heartbeat known here
        self._unsent: dict[bytes, tuple[str, int, str, int]] = {}  # to forward to the leader
        self._channel: tuple[str, grpc.aio.Channel] | None = None
        self.forwarded_calls = 0
        """Forwarding RPCs sent (a metric and a test hook)."""

    # ------------------------------------------------------------ heartbeats
    def heartbeat(self, broker_name: str, broker_id: int, addr: str, at_ms: int = 0) -> bool:
        """Note a heartbeat of a registered broker; False if this node's image has no such
        broker at ``addr`` (it must register again)."""
        key = broker_key(broker_name, broker_id)
        b = self.state.image.brokers.get(key)
        if b is None or (addr and b.addr != addr):
            return False
        at = at_ms or self.clock_ms()
        if at > self._seen.get(key, 0):
            self._seen[key] = at
        if self._leader_since_ms is None:  # not the leader (as of the last expiry round)
            self._unsent[key] = (broker_name, broker_id, b.addr, at)
        return True

    def last_seen_ms(self, b: Broker) -> int:
        return max(b.registered_ms, self._seen.get(b.key, 0))

    # ------------------------------------------------------------------ tasks
    def start(self) -> None:
        self.run_every((FORWARD_INTERVAL_S, self.forward), (EXPIRE_INTERVAL_S, self.expire))

    async def stop(self) -> None:
        await self.stop_jobs()
        if self._channel is not None:
            await self._channel[1].close()
            self._channel = None

    def _stub(self, address: str) -> routing_pb2_grpc.RoutingStub:
        if self._channel is None or self._channel[0] != address:
            if self._channel is not None:
                asyncio.get_running_loop().create_task(self._channel[1].close())
            self._channel = (address, self._dial(address))
        return routing_pb2_grpc.RoutingStub(self._channel[1])

    async def forward(self) -> None:
        """On a follower: send the heartbeats received since the last call to the leader."""
        if self._leader_since_ms is not None:  # the leader keeps its own heartbeats
            self._unsent.clear()
        if not self._unsent:
            return
        address = self.leader_client_address()
        if not address:
            return
        batch, self._unsent = self._unsent, {}
        request = routing_pb2.HeartbeatRequest(forwarded=True)
        request.heartbeats.extend(
            routing_pb2.BrokerHeartbeat(broker_name=n, broker_id=i, addr=a, seen_ms=t)
            for n, i, a, t in batch.values()
        )
        try:
            await self._stub(address).Heartbeat(
                request, timeout=self.timeout_s, metadata=self.node_metadata
            )
            self.forwarded_calls += 1
        except BaseException:
            for key, beat in batch.items():  # try again with the next batch
                self._unsent.setdefault(key, beat)
            raise

    def due_for_expiry(self, now: int) -> list[Broker]:
        since = self._leader_since_ms or 0
        due = []
        for b in self.state.image.brokers.values():
            if now >= max(self.last_seen_ms(b), since) + b.heartbeat_timeout_ms:
                due.append(b)
        return due[:MAX_BROKERS_PER_ENTRY]

    async def expire(self) -> None:
        """On the leader: propose the expiry of brokers whose timeout passed."""
        if self.lead() is None:
            return
        brokers = self.state.image.brokers
        self._seen = {k: t for k, t in self._seen.items() if brokers.get(k) is not None}
        due = self.due_for_expiry(self.clock_ms())
        if not due:
            return
        op = records_pb2.RoutingOperation()
        op.expire_brokers.brokers.extend(
            records_pb2.ExpiredBroker(
                broker_name=b.broker_name,
                broker_id=b.broker_id,
                registered_offset=b.registered_offset,
            )
            for b in due
        )
        applied = await self.log.propose([routing_entry(op)], self.timeout_s)
        if isinstance(applied.result, list) and applied.result:
            log.info("brokers expired (no heartbeat): %s", ", ".join(applied.result))
