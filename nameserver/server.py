"""Server wiring: one metaledger node (`metaledger serve`).

A little over 500 lines: the log, the state machine, every service and its ports are started
and stopped in one order, which reads best whole.
"""

# ruff: noqa: E402  (gRPC core's environment is set before `import grpc`, below)
from __future__ import annotations

import asyncio
import gc
import hashlib
import logging
import os
import secrets
import signal
from contextlib import suppress
from typing import Any

from nameserver.grpc.env import apply_server_defaults

apply_server_defaults()  # before grpc is imported: gRPC reads these once, at start

import grpc

from nameserver import accept_errors, tls
from nameserver.auth.check import Authorizer
from nameserver.auth.service import AuthExtraService, AuthService
from nameserver.auth.tokens import node_credential
from nameserver.auth.tokens import provider as token_provider
from nameserver.cluster.corrupt import inconsistency
from nameserver.cluster.corrupt_check import CorruptChecker, tamper_kv
from nameserver.cluster.learner import learner_gate
from nameserver.cluster.liveness import DiskAlarm
from nameserver.cluster.records import Member, alarm_text
from nameserver.cluster.removal import RemovedMember
from nameserver.cluster.revision_switch import RevisionSwitch
from nameserver.cluster.service import ClusterService
from nameserver.config import ServerConfig
from nameserver.errors import Rejected
from nameserver.grpc.accept import HOT_METHODS, Acceptors
from nameserver.grpc.admin import AdminService, MaintenanceService
from nameserver.grpc.front import GoFront
from nameserver.grpc.gateway import Gateway
from nameserver.grpc.methods import MethodTable
from nameserver.kinds import REGISTRY
from nameserver.kv.compactor import AutoCompactor
from nameserver.kv.history_rebuild import open_history
from nameserver.kv.service import KVService
from nameserver.leases.expiry import LeaseKeeper
from nameserver.leases.service import LeaseService
from nameserver.locks.service import ElectionService, LockService
from nameserver.metrics import MetricsServer
from nameserver.node import NodeFacade
from nameserver.node_metrics import node_metrics
from nameserver.offsets.service import OffsetsService
from nameserver.quotas.service import QuotasService
from nameserver.remoting.server import remoting_server
from nameserver.replica_groups.liveness import ReplicaLiveness
from nameserver.replica_groups.service import ReplicaGroupsService
from nameserver.routing.liveness import BrokerKeeper
from nameserver.routing.ops import RoutingNode
from nameserver.routing.remoting import NameserverRemoting
from nameserver.routing.service import RoutingService
from nameserver.startup import (
    StartupError,
    binding,
    check_bindable,
    claim_data_dir,
    prepare_data_dir,
    warn_default_token,
)
from nameserver.state.machine import MetadataStateMachine
from nameserver.state.snapshotting import StoreSink, drop_incomplete_last_offset, restore
from nameserver.watch.events import FLOOR_FILE
from nameserver.watch.history import SegmentHistory, read_floor
from nameserver.watch.hub import WatchHub
from nameserver.watch.service import WatchService, add_watch_service
from protos.etcdserverpb import rpc_pb2_grpc, v3election_pb2_grpc, v3lock_pb2_grpc
from protos.metaledger.v1 import (
    admin_pb2_grpc,
    auth_pb2_grpc,
    offsets_pb2_grpc,
    quotas_pb2_grpc,
    replica_groups_pb2_grpc,
    routing_pb2_grpc,
)
from raftlog import (
    ApplyObserver,
    Change,
    ConsensusEngine,
    Entry,
    NativeConfig,
    NativeEngine,
    PySyncObjConfig,
    PySyncObjEngine,
    ReplicatedLog,
    SegmentConfig,
    SegmentLog,
)
from raftlog.log import Captured, leader_stamp, leader_takes_over
from snapshots import FileSnapshotStore

log = logging.getLogger("metaledger")

GRPC_MAX_MESSAGE_BYTES = (
    16 * 1024 * 1024
)  # above max_request_bytes, so we answer with our own error


#: Calls that may wait for the server to take them (gRPC's default, 1,000, cancels the rest).
GRPC_MAX_PENDING_CALLS = 20_000
#: The client gRPC server's options (the noop measuring stick in ``bench/noop_kv.py`` uses
#: them too, so it measures the configuration the server runs).
GRPC_SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", GRPC_MAX_MESSAGE_BYTES),
    ("grpc.max_send_message_length", GRPC_MAX_MESSAGE_BYTES),
    ("grpc.so_reuseport", 0),
    # gRPC's C core cancels (status CANCELLED, nothing logged) every call that arrives
    # while 1,000 calls already wait for the asyncio server to pick them up: a busy event
    # loop (a burst of writes, a large watch fan-out) turned into silently cancelled writes.
    # Queue them instead, as etcd does; a request still waiting at its deadline times out
    # on its own.
    ("grpc.server.max_pending_requests", GRPC_MAX_PENDING_CALLS),
    # clients ping every few seconds while a call is open (nameserver.client's keepalive:
    # 6 s; etcd clients' DialKeepAliveTime): allowed, as etcd allows one per 5 s,
    # rather than answered with GOAWAY "too many pings" after gRPC's 5-minute default
    ("grpc.http2.min_ping_interval_without_data_ms", 4000),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.server.max_pending_requests_hard_limit", 2 * GRPC_MAX_PENDING_CALLS),
]


def uint64_id(text: str) -> int:
    """A stable, positive 63-bit id for a name (cluster token, peer address)."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") & 0x7FFF_FFFF_FFFF_FFFF


class MemberNames:
    """Passes every apply group on to the watch hub and, when the member records changed,
    tells the engine its members' names: the engine knows peer addresses (and its peers'
    names at start), the names of members added since are in their member records."""

    def __init__(
        self, engine: ConsensusEngine, state: MetadataStateMachine, then: ApplyObserver
    ) -> None:
        self._engine, self._state, self._then = engine, state, then
        self._named: object = None  # the members sub-image last named (shared while unchanged)
        self.name_members()

    def name_members(self) -> None:
        members = self._state.image.members
        if members is self._named:
            return
        self._named = members
        for m in members.members.values():
            self._engine.name_member(m.id, m.peer_address)

    def on_applied(self, before: Captured, last_offset: int, changes: list[Change]) -> None:
        self._then.on_applied(before, last_offset, changes)
        self.name_members()

    def on_installed(self, offset: int) -> None:
        self._then.on_installed(offset)
        self.name_members()


class Node:
    """One metaledger node: the replicated log, the state machine and the gRPC server."""

    def __init__(self, config: ServerConfig) -> None:
        config.validate()
        self.config = config
        peers = config.peers
        self.cluster_id = uint64_id("cluster:" + config.cluster_token)
        prepare_data_dir(config.data_dir)
        claim_data_dir(config.data_dir, config.node_id, self.cluster_id, config.cluster_token)
        segments = SegmentLog.open(
            os.path.join(config.data_dir, "log"),
            SegmentConfig(
                segment_max_bytes=config.segment_max_bytes,
                fsync_policy=config.fsync_policy,  # type: ignore[arg-type]  # validated
                fsync_interval_ms=config.fsync_interval_ms,
            ),
        )
        drop_incomplete_last_offset(segments)
        common: dict[str, Any] = {
            "node_id": config.node_id,
            "peers": peers,
            "journal_dir": os.path.join(config.data_dir, "raft"),
            "password": config.cluster_password,
            "election_timeout_min_ms": config.election_timeout_min_ms,
            "election_timeout_max_ms": config.election_timeout_max_ms,
            "leader_step_down_ms": config.leader_step_down_ms,
            "snapshot_every_items": config.snapshot_every_items,
        }
        engine: NativeEngine | PySyncObjEngine
        shared = config.consensus == "native" and config.consensus_loop == "shared"
        if config.consensus == "native":
            engine = NativeEngine(
                NativeConfig(
                    **common,
                    shared_loop=shared,
                    force_new_cluster=config.force_new_cluster,
                    peer_handshake_timeout_ms=config.peer_handshake_timeout_ms,
                    peer_idle_timeout_ms=config.peer_idle_timeout_ms,
                    peer_frame_timeout_ms=config.peer_frame_timeout_ms,
                    peer_max_connections=config.peer_max_connections,
                    peer_dead_timeout_ms=config.peer_dead_timeout_ms,
                    peer_paths=config.peer_paths,
                    peer_ssl_server=tls.server_context(config.peer_tls),
                    peer_ssl_client=tls.client_context(config.peer_tls),
                    stamp_forwarded=leader_stamp,  # time enters the log from the leader only
                    on_lead=leader_takes_over,  # the log's time before it stamps
                )
            )
        else:
            engine = PySyncObjEngine(PySyncObjConfig(**common, stamp_forwarded=leader_stamp))
        store = FileSnapshotStore(os.path.join(config.data_dir, "snap"), keep=config.snapshot_keep)
        cluster_hex = f"{self.cluster_id:016x}"
        image, engine_base = restore(store, segments, engine.dump_file, cluster_hex, REGISTRY)
        if config.debug_corrupt_kv:  # tests only: a member whose state differs
            image = tamper_kv(image, config.debug_corrupt_kv)
        self.state = MetadataStateMachine(image)
        self.log = ReplicatedLog(
            engine,
            self.state,
            segments,
            config.node_id,
            batch_window_s=config.batch_window_ms / 1000,
            max_in_flight=config.items_in_flight,
            apply_on_loop=shared,
            refusals=(Rejected,),
        )
        if config.snapshot_every_items > 0:
            self.log.enable_snapshots(
                StoreSink(
                    store,
                    engine.dump_file,
                    cluster_hex,
                    segments,
                    in_child=config.snapshot_writer == "process",
                ),
                engine_base,
                every_bytes=config.snapshot_every_bytes,
                segment_retention_s=config.segment_retention_s,
                segment_archive_dir=config.segment_archive_dir or None,
            )
        self.store = store
        self.ctx = NodeFacade(config, self.log, self.state, self.cluster_id, engine)
        # the Go front passes a verified client certificate's name on with this key
        self._front_key = (
            secrets.token_hex(16)
            if config.grpc_front == "go" and config.client_tls.client_cert_auth
            else ""
        )
        self.authorizer = Authorizer(
            lambda: self.state.image,
            token_provider(config.auth_token, config.auth_token_ttl_s),
            node_credential(config.cluster_password or ""),
            cert_names=config.client_tls.client_cert_auth,
            front_key=self._front_key or None,
        )
        floor_path = os.path.join(config.data_dir, FLOOR_FILE)
        self.watch_hub = WatchHub(
            SegmentHistory(segments, store, floor_path),
            lambda: self.state.image,
            self.state.last_offset,
            self.ctx.header,
            config.max_request_bytes,
            floor_path,
        )
        self.kv_history = open_history(
            self.state, self.watch_hub, store, segments, read_floor(floor_path)
        )
        self.ctx.history = self.kv_history
        self.ctx.space.history_bytes = lambda: self.kv_history.version_bytes
        self.compactor = AutoCompactor(
            self.ctx, config.auto_compaction_mode, config.auto_compaction_retention
        )
        self.corrupt_checker = CorruptChecker(
            self.ctx,
            config.corrupt_check_time_s,
            lambda address: tls.node_channel(address, config.client_tls),
        )
        self.revision_switch = RevisionSwitch(
            self.ctx, lambda address: tls.node_channel(address, config.client_tls)
        )
        self.log.set_observer(MemberNames(engine, self.state, self.kv_history))
        self.leases = LeaseKeeper(
            self.log, self.state, config.election_timeout_max_ms, self.ctx.timeout_s
        )
        self.replica_liveness = ReplicaLiveness(self.log, self.state, self.ctx.timeout_s)
        self.disk_alarm = DiskAlarm(
            self.log, self.state, engine, self.ctx.member_id, self.ctx.timeout_s
        )
        self.removal = RemovedMember(self.log, config.node_id)
        self.replica_groups = ReplicaGroupsService(self.ctx, self.replica_liveness)
        self.brokers = BrokerKeeper(
            self.log,
            self.state,
            self.ctx.timeout_s,
            self.leader_client_address,
            dial=lambda address: tls.node_channel(address, config.client_tls),
            node_metadata=self.ctx.node_metadata,
        )
        self.routes = RoutingNode(self.ctx, self.brokers)
        self.remoting = remoting_server(
            NameserverRemoting(self.routes),
            idle_timeout_s=self.config.remoting_idle_timeout_ms / 1000,
            frame_timeout_s=self.config.remoting_frame_timeout_ms / 1000,
            max_connections=self.config.remoting_max_connections,
            ssl=tls.server_context(config.client_tls),
        )
        self.metrics = MetricsServer(
            lambda: node_metrics(self),
            self._health_reason,
            ssl=tls.server_context(config.client_tls),
        )
        self.server: grpc.aio.Server | None = None
        self.acceptors: Acceptors | None = None
        self.front: GoFront | None = None  # --grpc-front go
        self._announce_task: asyncio.Task[None] | None = None

    def leader_client_address(self) -> str | None:
        """The leader's gRPC address from its member record (None: unknown, or this node)."""
        status = self.log.engine_status()
        if not status.leader_id or status.role == "leader":
            return None
        leader = self.state.image.members.find(status.leader_id)
        return leader.client_address if leader is not None else None

    async def start(self) -> None:
        for field in ("listen_peer", "listen_client", "listen_remoting", "listen_metrics"):
            check_bindable(field, getattr(self.config, field))  # before anything starts
        front = (  # finds the binary (or says where it looked) before anything starts
            GoFront(
                self.config.listen_client,
                HOT_METHODS,
                GRPC_MAX_MESSAGE_BYTES,
                self.config.client_tls,
                self._front_key,
            )
            if self.config.grpc_front == "go"
            else None
        )
        if self.config.initial_corrupt_check and not await self.corrupt_checker.initial():
            # etcd checks before its server starts: nothing served, nothing written
            raise StartupError(
                f"{inconsistency(self.ctx.member_id)} (--experimental-initial-corrupt-check)"
            )
        self.watch_hub.attach(asyncio.get_running_loop())
        with binding("listen_peer", self.config.listen_peer):
            self.log.start()
        server = grpc.aio.server(options=GRPC_SERVER_OPTIONS)
        table = MethodTable(
            self.config.max_request_bytes,
            learner_gate(self.ctx.engine.is_learner, self.authorizer.check),
        )
        rpc_pb2_grpc.add_KVServicer_to_server(KVService(self.ctx), table)
        rpc_pb2_grpc.add_LeaseServicer_to_server(LeaseService(self.ctx, self.leases), table)
        rpc_pb2_grpc.add_ClusterServicer_to_server(ClusterService(self.ctx), table)
        rpc_pb2_grpc.add_MaintenanceServicer_to_server(MaintenanceService(self.ctx), table)
        admin_pb2_grpc.add_AdminServicer_to_server(AdminService(self.ctx), table)
        add_watch_service(
            WatchService(
                self.watch_hub,
                self.config.watch_progress_notify_interval_ms / 1000,
                self.authorizer.watch_refusal,
            ),
            table,
        )
        offsets_pb2_grpc.add_OffsetsServicer_to_server(OffsetsService(self.ctx, self.leases), table)
        quotas_pb2_grpc.add_QuotasServicer_to_server(QuotasService(self.ctx), table)
        replica_groups_pb2_grpc.add_ReplicaGroupsServicer_to_server(self.replica_groups, table)
        v3lock_pb2_grpc.add_LockServicer_to_server(LockService(self.ctx), table)
        v3election_pb2_grpc.add_ElectionServicer_to_server(ElectionService(self.ctx), table)
        routing_pb2_grpc.add_RoutingServicer_to_server(RoutingService(self.routes), table)
        rpc_pb2_grpc.add_AuthServicer_to_server(
            AuthService(self.ctx, self.authorizer, self.config.bcrypt_cost), table
        )
        auth_pb2_grpc.add_AuthExtraServicer_to_server(AuthExtraService(self.ctx), table)
        server.add_generic_rpc_handlers((table,))
        self.metrics.gateway = Gateway(table.handler)  # etcd's JSON gateway, on this port
        acceptors = Acceptors(  # none with the Go front: it hands the hot methods over
            server,
            table.methods(HOT_METHODS),
            (table,),
            self.config.grpc_acceptors if front is None else 0,
        )
        acceptors.register()
        with binding("listen_client", self.config.listen_client):
            if front is not None:  # the Go front proxies to this server (abstract socket)
                bound = front.bind_backend(server)
            elif self.config.client_tls.enabled:
                creds = tls.grpc_server_credentials(self.config.client_tls)
                bound = server.add_secure_port(self.config.listen_client, creds)
            else:
                bound = server.add_insecure_port(self.config.listen_client)
            if bound == 0:
                raise RuntimeError(f"cannot bind {self.config.listen_client}")
        await server.start()
        self.server, self.acceptors = server, acceptors
        acceptors.start()
        if front is not None:
            self.front = front
            with binding("listen_client", self.config.listen_client):
                await front.start(table.handler)
        self._announce_task = asyncio.get_running_loop().create_task(self._announce())
        self.leases.start()
        self.replica_liveness.start()
        self.disk_alarm.start()
        self.removal.start()
        self.compactor.start()
        self.corrupt_checker.start()
        if self.config.etcd_revisions:
            self.revision_switch.start()
        host, _, port = self.config.listen_remoting.rpartition(":")
        with binding("listen_remoting", self.config.listen_remoting):
            await self.remoting.start(host.strip("[]"), int(port))
        self.brokers.start()
        host, _, port = self.config.listen_metrics.rpartition(":")
        with binding("listen_metrics", self.config.listen_metrics):
            await self.metrics.start(host.strip("[]"), int(port))
        log.info(
            "node %s serving: client %s, peer %s, remoting %s, metrics %s, data %s",
            self.config.node_id,
            self.config.listen_client,
            self.config.listen_peer,
            self.config.listen_remoting,
            self.config.listen_metrics,
            self.config.data_dir,
        )
        warn_default_token(self.config.cluster_token)

    def _health_reason(self) -> str:
        """Why ``/health`` says false: this node's own faults, else the alarms raised in the
        log (etcd's /health is false while any alarm is raised); "" when healthy."""
        reason = self.log.health.reason()
        if reason:
            return reason
        raised = self.state.image.alarms.list()
        if raised:
            return "alarm raised: " + ", ".join(
                alarm_text(a.member_id, a.alarm).strip() for a in raised
            )
        return ""

    async def _announce(self) -> None:
        """Write this node's member record (client URLs) into the log once a leader exists."""
        me = Member(
            id=self.config.node_id,
            member_id=self.ctx.member_id,
            peer_url=("https://" if self.config.peer_cert_file else "http://")
            + self.config.listen_peer,
            client_urls=self.config.client_urls,
        )
        delay = 0.2
        while True:
            if self.state.image.members.members.get(me.id) == me:
                return
            if self.log.engine_status().leader_id:
                with suppress(Exception):
                    await self.log.propose(
                        [Entry(type="member", key=me.id.encode(), value=me.to_record())],
                        self.ctx.timeout_s,
                    )
                    continue
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def stop(self) -> None:
        if self._announce_task is not None:
            self._announce_task.cancel()
        await self.leases.stop()
        await self.replica_liveness.stop()
        await self.disk_alarm.stop()
        await self.removal.stop()
        await self.compactor.stop()
        await self.corrupt_checker.stop()
        await self.revision_switch.stop()
        await self.brokers.stop()
        await self.remoting.close()
        await self.metrics.close()
        if self.front is not None:  # no new calls before the server stops
            await self.front.stop()
        if self.server is not None:
            await self.server.stop(grace=1.0)
        if self.acceptors is not None:
            await self.acceptors.stop()
        await self.replica_groups.close()
        self.log.stop()


async def _serve(config: ServerConfig) -> tuple[str, int]:
    """Run until a signal, or until the node cannot go on: then its reason and exit code."""
    node = Node(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    fatal: list[tuple[str, int]] = []

    def on_fatal(reason: str, code: int = FATAL_EXIT_CODE) -> None:  # any thread
        fatal.append((reason, code))
        with suppress(RuntimeError):  # the loop is closing anyway
            loop.call_soon_threadsafe(stop.set)

    node.log.set_on_fatal(on_fatal)
    node.removal.on_removed = lambda reason: on_fatal(reason, REMOVED_EXIT_CODE)
    try:
        await node.start()
    except BaseException:
        with suppress(Exception):  # what did start is stopped; the start error is the news
            await node.stop()
        raise
    _tune_gc()
    try:
        await stop.wait()
    finally:
        log.info("node %s stopping", config.node_id)
        await node.stop()
    return fatal[0] if fatal else ("", 0)


#: Allocations between young-generation collections (CPython's default is 700). A request
#: allocates ~100 objects that live for its ~10-40 ms: at 700 most of them were still alive
#: at each collection, got scanned and promoted, and the collector took ~6% of the gRPC
#: loop's time at 64 clients. At 50,000 most die first.
GC_THRESHOLD = (50_000, 20, 100)


def _tune_gc() -> None:
    """After start-up: move what exists (the restored image above all) out of the
    collector's generations, and collect young objects less often."""
    gc.collect(1)
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)


#: The exit status of a node that stopped because it could not go on (a bug or damage on
#: the apply path): non-zero, so a supervisor restarts it or a human looks.
FATAL_EXIT_CODE = 70  # EX_SOFTWARE
#: The exit status of a node removed from the cluster (``member remove``): a supervisor
#: should not start it again on the same data dir.
REMOVED_EXIT_CODE = 77  # EX_NOPERM: no longer a member


def run(config: ServerConfig) -> int:
    """Run one node until SIGINT/SIGTERM. Returns the process exit code."""
    config.validate()
    accept_errors.install()  # descriptors run out: a line now and then, not a flood
    if config.use_uvloop:
        try:
            import uvloop

            uvloop.install()
        except ImportError:  # pragma: no cover
            pass
    reason, code = asyncio.run(_serve(config))
    if reason:
        log.critical("node %s stopped: %s", config.node_id, reason)
    return code
