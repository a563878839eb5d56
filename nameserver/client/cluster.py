"""The cluster surface: members (etcd's Cluster service), leadership transfer, node status
(metaledger's Admin service), alarms and snapshots (etcd's Maintenance service).

``member_add`` and ``member_remove`` go to any member and fail over like writes (a change
refused because another one is in progress is UNAVAILABLE, so it is retried until the
deadline). ``move_leader`` must reach the leader: it asks every endpoint's Admin.Status who
leads, sends Maintenance.MoveLeader there, and waits until the old leader names a new one.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import grpc

from nameserver.client.errors import (
    ClientError,
    DeadlineExceeded,
    InvalidArgument,
    Unavailable,
    error_from_rpc,
)
from nameserver.client.transport import Transport, normalize_endpoint
from protos.etcdserverpb import rpc_pb2
from protos.metaledger.v1 import admin_pb2

#: the call metadata that asks Maintenance.Snapshot for metaledger's own format
SNAPSHOT_FORMAT_METADATA = "x-ml-snapshot-format"

__all__ = ["ClusterApi", "LeaderTransfer", "Member", "NodeStatus", "normalize_peer_url"]


@dataclass(frozen=True, slots=True)
class NodeStatus:
    """Admin.Status of one node. The first eight fields are the CLI's JSON contract, in order."""

    id: str
    endpoint: str
    role: str
    term: int
    leader: str
    end_offset: int
    commit_offset: int
    apply_offset: int
    applied_lag: int = 0
    segment_flushed_offset: int = 0
    has_quorum: bool = False
    cluster_id: str = ""
    member_id: int = 0
    db_size_bytes: int = 0
    peer_url: str = ""
    client_urls: list[str] = field(default_factory=list)

    @classmethod
    def from_proto(cls, r: admin_pb2.StatusResponse, endpoint: str) -> NodeStatus:
        return cls(
            id=r.id,
            endpoint=endpoint,
            role=r.role,
            term=r.term,
            leader=r.leader,
            end_offset=r.end_offset,
            commit_offset=r.commit_offset,
            apply_offset=r.apply_offset,
            applied_lag=r.applied_lag,
            segment_flushed_offset=r.segment_flushed_offset,
            has_quorum=r.has_quorum,
            cluster_id=r.cluster_id,
            member_id=r.member_id,
            db_size_bytes=r.db_size_bytes,
            peer_url=r.peer_url,
            client_urls=list(r.client_urls),
        )


@dataclass(frozen=True, slots=True)
class Member:
    """A member as etcd's Cluster.MemberList reports it (``name`` is the node id)."""

    member_id: int
    name: str
    peer_urls: list[str]
    client_urls: list[str]
    is_learner: bool = False

    @classmethod
    def from_proto(cls, m: rpc_pb2.Member) -> Member:
        return cls(m.ID, m.name, list(m.peerURLs), list(m.clientURLs), m.isLearner)


@dataclass(frozen=True, slots=True)
class LeaderTransfer:
    """A finished Maintenance.MoveLeader: node ids of the leader before and after."""

    previous: str
    leader: str


def normalize_peer_url(address: str) -> str:
    """``host:port`` or ``http://host:port`` → ``http://host:port`` (what MemberAdd takes)."""
    url = address.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    scheme, _, hostport = url.partition("://")
    host, sep, port = hostport.rpartition(":")
    if scheme != "http" or not sep or not host or not port.isdigit() or "/" in hostport:
        raise InvalidArgument(f"peer URL {address!r} is not http://host:port")
    return url


class ClusterApi(Transport):
    """Membership, leadership transfer, Admin.Status and snapshots."""

    _TRANSFER_WAIT_S = 3.0  # how long one MoveLeader attempt waits for the new leader

    def members(self) -> list[Member]:
        """Cluster.MemberList (the etcd protocol, so it works against etcd too)."""
        resp = self._call(lambda s: s.cluster.MemberList, rpc_pb2.MemberListRequest(), write=False)
        return [Member.from_proto(m) for m in resp.members]

    def member_add(self, peer_url: str, learner: bool = False) -> Member:
        """Cluster.MemberAdd: a voting member at ``peer_url`` (``http://host:port``; a bare
        ``host:port`` gets ``http://``), or with ``learner`` a non-voting one (etcd 3.4's
        learner: it gets the log, votes once promoted). The new node runs (before or after
        the add) with every current member and itself in ``--initial-cluster``. Returns the
        new member (no name until it has started). A retry of an add that did happen answers
        FailedPrecondition (the peer URL already exists)."""
        req = rpc_pb2.MemberAddRequest(peerURLs=[normalize_peer_url(peer_url)], isLearner=learner)
        resp = self._call(lambda s: s.cluster.MemberAdd, req, write=True)
        return Member.from_proto(resp.member)

    def member_promote(self, member_id: int) -> list[Member]:
        """Cluster.MemberPromote: the learner ``member_id`` becomes a voter; returns the
        members afterwards. FailedPrecondition while its log is behind the leader's (etcd's
        "can only promote a learner member which is in sync with leader"), or when it is
        not a learner."""
        req = rpc_pb2.MemberPromoteRequest(ID=member_id)
        resp = self._call(lambda s: s.cluster.MemberPromote, req, write=True)
        return [Member.from_proto(m) for m in resp.members]

    def member_remove(self, member_id: int) -> list[Member]:
        """Cluster.MemberRemove by member id; returns the members afterwards.

        A node cannot remove itself, so the request avoids the endpoints that are the
        member's own client URLs (unless every endpoint is: then the server refuses it with
        FailedPrecondition)."""
        if member_id <= 0:
            raise InvalidArgument(f"member id must be > 0, got {member_id}")
        own = {
            normalize_endpoint(url)
            for m in self.members()
            if m.member_id == member_id
            for url in m.client_urls
        }
        avoid = frozenset(own & set(self.endpoints))
        if avoid == set(self.endpoints):
            avoid = frozenset()
        req = rpc_pb2.MemberRemoveRequest(ID=member_id)
        resp = self._call(lambda s: s.cluster.MemberRemove, req, write=True, avoid=avoid)
        return [Member.from_proto(m) for m in resp.members]

    def move_leader(self, target_id: int = 0) -> LeaderTransfer:
        """Maintenance.MoveLeader to member ``target_id`` (0: the most caught-up follower).

        Finds the leader through Admin.Status of the endpoints (or of the client URL of the
        leader they name), sends the request there and waits until the old leader names
        another one. A refusal that may pass (no leader, a leader change, a target that is
        not caught up yet: UNAVAILABLE) is retried, as is a transfer the old leader survived,
        until the deadline (``timeout_s``, covering all attempts)."""
        if target_id < 0:
            raise InvalidArgument(f"target id must be >= 0, got {target_id}")
        deadline = time.monotonic() + self.timeout_s
        backoff = self._BACKOFF_FIRST_S
        last: ClientError = Unavailable(f"leadership not transferred within {self.timeout_s:g}s")
        while True:
            try:
                leader = self._find_leader(deadline)
                if target_id and leader.member_id == target_id:
                    return LeaderTransfer(leader.id, leader.id)
                self._call_once(
                    leader.endpoint,
                    lambda s: s.maintenance.MoveLeader,
                    rpc_pb2.MoveLeaderRequest(targetID=target_id),
                    deadline,
                )
                attempt_deadline = min(deadline, time.monotonic() + self._TRANSFER_WAIT_S)
                new_leader = self._await_new_leader(leader, attempt_deadline)
                if new_leader:
                    return LeaderTransfer(leader.id, new_leader)
                last = DeadlineExceeded(
                    f"leader {leader.id} accepted the transfer but still leads", leader.endpoint
                )
            except ClientError as exc:
                if not exc.retriable:
                    raise
                last = exc
            if time.monotonic() + backoff >= deadline:
                raise last
            time.sleep(backoff)
            backoff = min(backoff * 2, self._BACKOFF_MAX_S)

    def status(self) -> NodeStatus:
        """Admin.Status of the first endpoint that answers."""
        resp, endpoint = self._call_at(
            lambda s: s.admin.Status, admin_pb2.StatusRequest(), write=False
        )
        return NodeStatus.from_proto(resp, endpoint)

    def status_all(self) -> list[NodeStatus | ClientError]:
        """Admin.Status of every endpoint, in order: one attempt each, no failover."""
        out: list[NodeStatus | ClientError] = []
        for endpoint in self.endpoints:
            try:
                resp = self._stubs_for(endpoint).admin.Status(
                    admin_pb2.StatusRequest(), timeout=self.timeout_s
                )
                out.append(NodeStatus.from_proto(resp, endpoint))
            except grpc.RpcError as err:
                out.append(error_from_rpc(err, endpoint))
        return out

    def alarms(self) -> list[tuple[int, str]]:
        """Maintenance.Alarm GET: every raised alarm as ``(member_id, name)`` (``NOSPACE``,
        ``CORRUPT``), read by the first endpoint that answers (etcdctl's ``alarm list``)."""
        req = rpc_pb2.AlarmRequest(action=rpc_pb2.AlarmRequest.GET)
        resp = self._call(lambda s: s.maintenance.Alarm, req, write=False)
        names = rpc_pb2.AlarmType.Name
        return [(a.memberID, names(a.alarm)) for a in resp.alarms]

    def snapshot(self, path: str, progress: Callable[[int, int], None] | None = None) -> int:
        """Maintenance.Snapshot: save a fresh snapshot of the first reachable endpoint's image
        in metaledger's own format (``x-ml-snapshot-format: metaledger``; without it a node
        streams etcd's) to ``path`` (written to ``path + '.part'`` and renamed); returns its
        size in bytes. ``progress(received, total)`` is called per chunk."""
        deadline = time.monotonic() + max(self.timeout_s, 60.0)
        failures: dict[str, str] = {}
        for endpoint in self.endpoints:
            part = path + ".part"
            try:
                stream = self._stubs_for(endpoint).maintenance.Snapshot(
                    rpc_pb2.SnapshotRequest(),
                    timeout=deadline - time.monotonic(),
                    metadata=((SNAPSHOT_FORMAT_METADATA, "metaledger"),),
                )
                received = 0
                with open(part, "wb") as f:
                    for chunk in stream:
                        f.write(chunk.blob)
                        received += len(chunk.blob)
                        if progress is not None:
                            progress(received, received + chunk.remaining_bytes)
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(part, path)
                return received
            except grpc.RpcError as err:
                exc = error_from_rpc(err, endpoint)
                if not isinstance(exc, Unavailable):
                    raise exc from None
                failures[endpoint] = exc.message
            finally:
                if os.path.exists(part):
                    os.unlink(part)
        raise Unavailable(f"no endpoint could send a snapshot: {failures}")

    def _find_leader(self, deadline: float) -> NodeStatus:
        """Admin.Status of the leader: an endpoint that says it leads, else the client URL
        of the leader an endpoint names (looked up in that endpoint's member list)."""
        status = admin_pb2.StatusRequest()
        named: dict[str, str] = {}  # leader's node id -> endpoint that named it
        for endpoint in self.endpoints:
            try:
                resp = self._call_once(endpoint, lambda s: s.admin.Status, status, deadline)
            except Unavailable:
                continue
            if resp.role == "leader":
                return NodeStatus.from_proto(resp, endpoint)
            if resp.leader:
                named.setdefault(resp.leader, endpoint)
        for leader_id, endpoint in named.items():  # a node id, or a peer address
            for m in self._members_at(endpoint, deadline):
                is_leader = leader_id in (m.name, *(normalize_endpoint(u) for u in m.peer_urls))
                for url in m.client_urls if is_leader else ():
                    ep = normalize_endpoint(url)
                    resp = self._call_once(ep, lambda s: s.admin.Status, status, deadline)
                    if resp.role == "leader":
                        return NodeStatus.from_proto(resp, ep)
        raise Unavailable("no endpoint is, or can reach, the leader")

    def _members_at(self, endpoint: str, deadline: float) -> list[Member]:
        try:
            resp = self._call_once(
                endpoint, lambda s: s.cluster.MemberList, rpc_pb2.MemberListRequest(), deadline
            )
        except Unavailable:
            return []
        return [Member.from_proto(m) for m in resp.members]

    def _await_new_leader(self, old: NodeStatus, deadline: float) -> str:
        """Poll the old leader's Admin.Status until it names another leader (returned), or
        ``deadline`` passes (``""``)."""
        while True:
            try:
                st = self._call_once(
                    old.endpoint, lambda s: s.admin.Status, admin_pb2.StatusRequest(), deadline
                )
                if st.leader and st.leader != old.id:
                    return str(st.leader)
            except (Unavailable, DeadlineExceeded):
                pass
            if time.monotonic() + self._BACKOFF_FIRST_S >= deadline:
                return ""
            time.sleep(self._BACKOFF_FIRST_S)
