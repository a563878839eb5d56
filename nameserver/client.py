"""The metaledger client library: a synchronous client over gRPC.

It speaks the etcd v3 KV, Cluster and Maintenance services plus metaledger's own Admin service,
so the same client works against any member of a metaledger cluster (and, for KV, against etcd)::

    with Client(["127.0.0.1:12370", "127.0.0.1:12380"]) as c:
        c.put("config/a", "1")
        r = c.get("config/", prefix=True)
        t = c.txn([Compare.mod("config/a") == r.kvs[0].mod_revision],
                  success=[Op.put("config/a", "2")], failure=[Op.get("config/a")])

Keys and values are ``str`` (encoded as UTF-8; undecodable bytes that arrived through
``surrogateescape`` round-trip) or ``bytes``; results always hold ``bytes``.

Failover: a request goes to the current endpoint; on UNAVAILABLE (which includes a refused
connection) the client moves on to the next endpoint, cycling with a short backoff until the
request's deadline (``timeout_s``, covering all attempts) passes. Writes carry the gRPC metadata
``x-ml-client-id`` (one uuid per Client) and ``x-ml-seq`` (one number per request, the same on
every retry of it), so the server can de-duplicate a write that a retry sent twice.

Membership: ``member_add`` and ``member_remove`` go to any member and fail over like writes
(a change refused because another one is in progress is UNAVAILABLE, so it is retried until the
deadline). ``move_leader`` must reach the leader: it asks every endpoint's Admin.Status who
leads, sends Maintenance.MoveLeader there, and waits until the old leader names a new one.

Errors (every gRPC status has its class; ``code`` and ``retriable`` are class attributes)::

    ClientError                  code: grpc.StatusCode, retriable: bool; endpoint: str | None
    ├── Cancelled                CANCELLED
    ├── UnknownError             UNKNOWN (and errors that carry no status)
    ├── InvalidArgument          INVALID_ARGUMENT: bad request (too large, too many txn ops, ...)
    ├── DeadlineExceeded         DEADLINE_EXCEEDED: a write may still be applied (retriable)
    ├── NotFound                 NOT_FOUND (e.g. an unknown lease)
    ├── AlreadyExists            ALREADY_EXISTS
    ├── PermissionDenied         PERMISSION_DENIED
    ├── ResourceExhausted        RESOURCE_EXHAUSTED: the server is overloaded (retriable)
    ├── FailedPrecondition       FAILED_PRECONDITION
    ├── Aborted                  ABORTED (retriable)
    ├── OutOfRange               OUT_OF_RANGE (e.g. a compacted revision)
    ├── Unimplemented            UNIMPLEMENTED
    ├── Internal                 INTERNAL
    ├── Unavailable              UNAVAILABLE: no endpoint answered in time (retriable)
    ├── DataLoss                 DATA_LOSS
    └── Unauthenticated          UNAUTHENTICATED

``error_from_rpc`` is the one place that turns a ``grpc.RpcError`` into this tree.
"""

from __future__ import annotations

import itertools
import math
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeAlias, TypeVar, get_args

import grpc

from protos.etcdserverpb import kv_pb2, rpc_pb2, rpc_pb2_grpc
from protos.metaledger.v1 import admin_pb2, admin_pb2_grpc

if TYPE_CHECKING:
    from nameserver.offsets_client import CommittedOffset, OffsetList, OffsetWrite, QuotaUsage
    from nameserver.replica_groups_client import (
        GroupPolicy,
        ReplicaGroupInfo,
        ReplicaGroupWrite,
        ReplicaHeartbeat,
    )
    from nameserver.routing_client import ClusterInfo, QueueData, Route, TopicList
    from nameserver.watch_client import Watch

__all__ = [
    "Aborted",
    "AlreadyExists",
    "Cancelled",
    "Client",
    "ClientError",
    "Compare",
    "CompareOp",
    "CompareTarget",
    "Comparison",
    "DataLoss",
    "DeadlineExceeded",
    "DeleteResult",
    "FailedPrecondition",
    "Internal",
    "InvalidArgument",
    "KeyValue",
    "LeaderTransfer",
    "Member",
    "NodeStatus",
    "NotFound",
    "Op",
    "OutOfRange",
    "PermissionDenied",
    "PutResult",
    "RangeResult",
    "ResourceExhausted",
    "SortOrder",
    "SortTarget",
    "TxnResult",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UnknownError",
    "error_from_rpc",
    "normalize_peer_url",
    "prefix_range_end",
    "to_bytes",
]

CLIENT_ID_METADATA = "x-ml-client-id"
SEQ_METADATA = "x-ml-seq"

Bytesish: TypeAlias = str | bytes
SortOrder = Literal["NONE", "ASCEND", "DESCEND"]
SortTarget = Literal["KEY", "VERSION", "CREATE", "MOD", "VALUE"]

T = TypeVar("T")


# --------------------------------------------------------------------------- errors


class ClientError(Exception):
    """Root of the client's errors: one class per gRPC status code."""

    code: ClassVar[grpc.StatusCode] = grpc.StatusCode.UNKNOWN
    retriable: ClassVar[bool] = False

    def __init__(self, message: str, endpoint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.endpoint = endpoint

    def __str__(self) -> str:
        where = f" [{self.endpoint}]" if self.endpoint else ""
        return f"{self.code.name.lower()}: {self.message}{where}"


class Cancelled(ClientError):
    code = grpc.StatusCode.CANCELLED


class UnknownError(ClientError):
    code = grpc.StatusCode.UNKNOWN


class InvalidArgument(ClientError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class DeadlineExceeded(ClientError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    retriable = True


class NotFound(ClientError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(ClientError):
    code = grpc.StatusCode.ALREADY_EXISTS


class PermissionDenied(ClientError):
    code = grpc.StatusCode.PERMISSION_DENIED


class ResourceExhausted(ClientError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    retriable = True


class FailedPrecondition(ClientError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class Aborted(ClientError):
    code = grpc.StatusCode.ABORTED
    retriable = True


class OutOfRange(ClientError):
    code = grpc.StatusCode.OUT_OF_RANGE


class Unimplemented(ClientError):
    code = grpc.StatusCode.UNIMPLEMENTED


class Internal(ClientError):
    code = grpc.StatusCode.INTERNAL


class Unavailable(ClientError):
    code = grpc.StatusCode.UNAVAILABLE
    retriable = True


class DataLoss(ClientError):
    code = grpc.StatusCode.DATA_LOSS


class Unauthenticated(ClientError):
    code = grpc.StatusCode.UNAUTHENTICATED


_ERROR_BY_CODE: dict[grpc.StatusCode, type[ClientError]] = {
    cls.code: cls for cls in ClientError.__subclasses__()
}


def error_from_rpc(err: grpc.RpcError, endpoint: str | None = None) -> ClientError:
    """The one conversion from a gRPC error to this module's error tree."""
    code_of, details_of = getattr(err, "code", None), getattr(err, "details", None)
    code = code_of() if callable(code_of) else None
    details = (details_of() if callable(details_of) else None) or str(err) or "no details"
    return _ERROR_BY_CODE.get(code, UnknownError)(details, endpoint)


# --------------------------------------------------------------------------- bytes and ranges


def to_bytes(value: Bytesish) -> bytes:
    """``str`` → UTF-8 (``surrogateescape``, so bytes that came in through argv round-trip)."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogateescape")
    raise TypeError(f"expected str or bytes, got {type(value).__name__}")


def prefix_range_end(prefix: Bytesish) -> bytes:
    """etcd's range end for "every key starting with prefix".

    The last byte below 0xff is incremented and everything after it dropped; a prefix of only
    0xff bytes (or an empty one) has no upper bound, which etcd spells ``b"\\x00"``.
    """
    end = bytearray(to_bytes(prefix))
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"


def _key_range(key: Bytesish, range_end: Bytesish | None, prefix: bool) -> tuple[bytes, bytes]:
    k = to_bytes(key)
    if prefix:
        if range_end is not None:
            raise InvalidArgument("give either range_end or prefix, not both")
        if not k:  # clientv3.WithPrefix: an empty prefix means every key
            return b"\x00", b"\x00"
        return k, prefix_range_end(k)
    if not k:
        raise InvalidArgument("key must not be empty")
    return k, to_bytes(range_end) if range_end is not None else b""


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class KeyValue:
    key: bytes
    value: bytes
    create_revision: int
    mod_revision: int
    version: int
    lease: int

    @classmethod
    def from_proto(cls, kv: kv_pb2.KeyValue) -> KeyValue:
        return cls(kv.key, kv.value, kv.create_revision, kv.mod_revision, kv.version, kv.lease)


@dataclass(frozen=True, slots=True)
class PutResult:
    revision: int
    prev_kv: KeyValue | None = None

    @classmethod
    def from_proto(cls, r: rpc_pb2.PutResponse) -> PutResult:
        prev = KeyValue.from_proto(r.prev_kv) if r.HasField("prev_kv") else None
        return cls(r.header.revision, prev)


@dataclass(frozen=True, slots=True)
class RangeResult:
    revision: int
    kvs: list[KeyValue]
    more: bool
    count: int

    @classmethod
    def from_proto(cls, r: rpc_pb2.RangeResponse) -> RangeResult:
        return cls(r.header.revision, [KeyValue.from_proto(kv) for kv in r.kvs], r.more, r.count)


@dataclass(frozen=True, slots=True)
class DeleteResult:
    revision: int
    deleted: int
    prev_kvs: list[KeyValue]

    @classmethod
    def from_proto(cls, r: rpc_pb2.DeleteRangeResponse) -> DeleteResult:
        return cls(r.header.revision, r.deleted, [KeyValue.from_proto(kv) for kv in r.prev_kvs])


OpResult: TypeAlias = "PutResult | RangeResult | DeleteResult | TxnResult"


@dataclass(frozen=True, slots=True)
class TxnResult:
    revision: int
    succeeded: bool
    responses: list[OpResult]

    @classmethod
    def from_proto(cls, r: rpc_pb2.TxnResponse) -> TxnResult:
        return cls(r.header.revision, r.succeeded, [_op_result(op) for op in r.responses])


def _op_result(op: rpc_pb2.ResponseOp) -> OpResult:
    kind = op.WhichOneof("response")
    if kind == "response_put":
        return PutResult.from_proto(op.response_put)
    if kind == "response_range":
        return RangeResult.from_proto(op.response_range)
    if kind == "response_delete_range":
        return DeleteResult.from_proto(op.response_delete_range)
    if kind == "response_txn":
        return TxnResult.from_proto(op.response_txn)
    raise UnknownError(f"txn response holds an unknown operation result {kind!r}")


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


# --------------------------------------------------------------------------- request builders


def _put_request(key: Bytesish, value: Bytesish, lease: int, prev_kv: bool) -> rpc_pb2.PutRequest:
    k = to_bytes(key)
    if not k:
        raise InvalidArgument("key must not be empty")
    return rpc_pb2.PutRequest(key=k, value=to_bytes(value), lease=lease, prev_kv=prev_kv)


def _range_request(
    key: Bytesish,
    range_end: Bytesish | None = None,
    prefix: bool = False,
    serializable: bool = False,
    limit: int = 0,
    keys_only: bool = False,
    count_only: bool = False,
    sort_order: SortOrder = "NONE",
    sort_target: SortTarget = "KEY",
    revision: int = 0,
) -> rpc_pb2.RangeRequest:
    k, end = _key_range(key, range_end, prefix)
    if limit < 0:
        raise InvalidArgument("limit must be >= 0")
    if sort_order not in get_args(SortOrder) or sort_target not in get_args(SortTarget):
        raise InvalidArgument(f"unknown sort order/target {sort_order!r}/{sort_target!r}")
    return rpc_pb2.RangeRequest(
        key=k,
        range_end=end,
        limit=limit,
        revision=revision,
        sort_order=sort_order,
        sort_target=sort_target,
        serializable=serializable,
        keys_only=keys_only,
        count_only=count_only,
    )


def _delete_request(
    key: Bytesish, range_end: Bytesish | None, prefix: bool, prev_kv: bool
) -> rpc_pb2.DeleteRangeRequest:
    k, end = _key_range(key, range_end, prefix)
    return rpc_pb2.DeleteRangeRequest(key=k, range_end=end, prev_kv=prev_kv)


def _txn_request(
    compares: Iterable[Comparison], success: Iterable[Op], failure: Iterable[Op]
) -> rpc_pb2.TxnRequest:
    return rpc_pb2.TxnRequest(
        compare=[c.to_proto() for c in compares],
        success=[op.request for op in success],
        failure=[op.request for op in failure],
    )


_TARGETS = {
    "version": rpc_pb2.Compare.VERSION,
    "create": rpc_pb2.Compare.CREATE,
    "mod": rpc_pb2.Compare.MOD,
    "value": rpc_pb2.Compare.VALUE,
    "lease": rpc_pb2.Compare.LEASE,
}
_OPERAND_FIELD = {
    "version": "version",
    "create": "create_revision",
    "mod": "mod_revision",
    "value": "value",
    "lease": "lease",
}
_RESULTS = {
    "=": rpc_pb2.Compare.EQUAL,
    "!=": rpc_pb2.Compare.NOT_EQUAL,
    ">": rpc_pb2.Compare.GREATER,
    "<": rpc_pb2.Compare.LESS,
}
CompareOp = Literal["=", "!=", ">", "<"]
TargetName = Literal["version", "create", "mod", "value", "lease"]


@dataclass(frozen=True, slots=True)
class Comparison:
    """One txn guard: ``<target>(key) <op> operand``, built by :class:`Compare`."""

    target: TargetName
    key: bytes
    op: CompareOp
    operand: int | bytes
    range_end: bytes = b""

    def __post_init__(self) -> None:
        if self.target not in _TARGETS:
            raise ValueError(f"unknown compare target {self.target!r}")
        if self.op not in _RESULTS:
            raise ValueError(f"unknown compare operator {self.op!r}")
        if self.target == "value":
            if not isinstance(self.operand, bytes):
                raise TypeError("value(key) compares with str or bytes")
        elif isinstance(self.operand, bool) or not isinstance(self.operand, int):
            raise TypeError(f"{self.target}(key) compares with an int")

    def to_proto(self) -> rpc_pb2.Compare:
        pb = rpc_pb2.Compare(
            result=_RESULTS[self.op],
            target=_TARGETS[self.target],
            key=self.key,
            range_end=self.range_end,
        )
        setattr(pb, _OPERAND_FIELD[self.target], self.operand)
        return pb


@dataclass(frozen=True, slots=True, eq=False)
class CompareTarget:
    """The left side of a comparison; ``==``, ``!=``, ``<`` and ``>`` make a :class:`Comparison`."""

    target: TargetName
    key: bytes
    range_end: bytes = b""

    def compare(self, op: CompareOp, operand: object) -> Comparison:
        """``target.compare("!=", 3)`` is ``target != 3``."""
        value: object = operand
        if self.target == "value" and isinstance(operand, str):
            value = to_bytes(operand)
        return Comparison(self.target, self.key, op, value, self.range_end)  # type: ignore[arg-type]

    def __eq__(self, operand: object) -> Comparison:  # type: ignore[override]
        return self.compare("=", operand)

    def __ne__(self, operand: object) -> Comparison:  # type: ignore[override]
        return self.compare("!=", operand)

    def __gt__(self, operand: object) -> Comparison:
        return self.compare(">", operand)

    def __lt__(self, operand: object) -> Comparison:
        return self.compare("<", operand)

    __hash__ = None  # type: ignore[assignment]


class Compare:
    """Builders for txn guards: ``Compare.value("k") == "v"``, ``Compare.mod("k") > 3``.

    ``range_end``/``prefix`` make the guard hold for every key in the range.
    """

    @staticmethod
    def _target(
        target: TargetName, key: Bytesish, range_end: Bytesish | None, prefix: bool
    ) -> CompareTarget:
        k, end = _key_range(key, range_end, prefix)
        return CompareTarget(target, k, end)

    @staticmethod
    def value(
        key: Bytesish, range_end: Bytesish | None = None, prefix: bool = False
    ) -> CompareTarget:
        return Compare._target("value", key, range_end, prefix)

    @staticmethod
    def version(
        key: Bytesish, range_end: Bytesish | None = None, prefix: bool = False
    ) -> CompareTarget:
        return Compare._target("version", key, range_end, prefix)

    @staticmethod
    def create(
        key: Bytesish, range_end: Bytesish | None = None, prefix: bool = False
    ) -> CompareTarget:
        return Compare._target("create", key, range_end, prefix)

    @staticmethod
    def mod(
        key: Bytesish, range_end: Bytesish | None = None, prefix: bool = False
    ) -> CompareTarget:
        return Compare._target("mod", key, range_end, prefix)

    @staticmethod
    def lease(
        key: Bytesish, range_end: Bytesish | None = None, prefix: bool = False
    ) -> CompareTarget:
        return Compare._target("lease", key, range_end, prefix)


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of a txn branch; build it with ``Op.put``, ``Op.get``, ``Op.delete``, ``Op.txn``."""

    request: rpc_pb2.RequestOp

    @staticmethod
    def put(key: Bytesish, value: Bytesish, lease: int = 0, prev_kv: bool = False) -> Op:
        return Op(rpc_pb2.RequestOp(request_put=_put_request(key, value, lease, prev_kv)))

    @staticmethod
    def get(
        key: Bytesish,
        range_end: Bytesish | None = None,
        prefix: bool = False,
        serializable: bool = False,
        limit: int = 0,
        keys_only: bool = False,
        count_only: bool = False,
        sort_order: SortOrder = "NONE",
        sort_target: SortTarget = "KEY",
        revision: int = 0,
    ) -> Op:
        req = _range_request(
            key,
            range_end,
            prefix,
            serializable,
            limit,
            keys_only,
            count_only,
            sort_order,
            sort_target,
            revision,
        )
        return Op(rpc_pb2.RequestOp(request_range=req))

    @staticmethod
    def delete(
        key: Bytesish,
        range_end: Bytesish | None = None,
        prefix: bool = False,
        prev_kv: bool = False,
    ) -> Op:
        req = _delete_request(key, range_end, prefix, prev_kv)
        return Op(rpc_pb2.RequestOp(request_delete_range=req))

    @staticmethod
    def txn(
        compares: Sequence[Comparison], success: Sequence[Op] = (), failure: Sequence[Op] = ()
    ) -> Op:
        return Op(rpc_pb2.RequestOp(request_txn=_txn_request(compares, success, failure)))


# --------------------------------------------------------------------------- the client


@dataclass(slots=True)
class _Stubs:
    channel: grpc.Channel
    kv: Any
    cluster: Any
    maintenance: Any
    admin: Any


def _normalize_endpoint(endpoint: str) -> str:
    ep = endpoint.strip()
    for scheme in ("http://", "https://"):
        if ep.startswith(scheme):
            ep = ep[len(scheme) :]
    ep = ep.rstrip("/")
    if not ep:
        raise InvalidArgument(f"empty endpoint in {endpoint!r}")
    return ep


class Client:
    """A synchronous, thread-safe client for one metaledger (or etcd) cluster."""

    _BACKOFF_FIRST_S = 0.05
    _BACKOFF_MAX_S = 0.5
    _TRANSFER_WAIT_S = 3.0  # how long one MoveLeader attempt waits for the new leader

    def __init__(self, endpoints: Sequence[str], timeout_s: float = 5.0) -> None:
        if isinstance(endpoints, str):
            endpoints = endpoints.split(",")
        eps = [_normalize_endpoint(e) for e in endpoints if e.strip()]
        if not eps:
            raise InvalidArgument("no endpoints given")
        if timeout_s <= 0:
            raise InvalidArgument("timeout_s must be > 0")
        self.endpoints: tuple[str, ...] = tuple(eps)
        self.timeout_s = timeout_s
        self.client_id = str(uuid.uuid4())
        self._seq = itertools.count(1)
        self._lock = threading.Lock()
        self._current = 0
        self._stubs: dict[str, _Stubs] = {}

    # -- lifecycle

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            stubs, self._stubs = list(self._stubs.values()), {}
        for s in stubs:
            s.channel.close()

    # -- KV

    def put(
        self, key: Bytesish, value: Bytesish, lease: int = 0, prev_kv: bool = False
    ) -> PutResult:
        req = _put_request(key, value, lease, prev_kv)
        return PutResult.from_proto(self._call(lambda s: s.kv.Put, req, write=True))

    def get(
        self,
        key: Bytesish,
        range_end: Bytesish | None = None,
        prefix: bool = False,
        serializable: bool = False,
        limit: int = 0,
        keys_only: bool = False,
        count_only: bool = False,
        sort_order: SortOrder = "NONE",
        sort_target: SortTarget = "KEY",
        revision: int = 0,
    ) -> RangeResult:
        req = _range_request(
            key,
            range_end,
            prefix,
            serializable,
            limit,
            keys_only,
            count_only,
            sort_order,
            sort_target,
            revision,
        )
        return RangeResult.from_proto(self._call(lambda s: s.kv.Range, req, write=False))

    def delete(
        self,
        key: Bytesish,
        range_end: Bytesish | None = None,
        prefix: bool = False,
        prev_kv: bool = False,
    ) -> DeleteResult:
        req = _delete_request(key, range_end, prefix, prev_kv)
        return DeleteResult.from_proto(self._call(lambda s: s.kv.DeleteRange, req, write=True))

    def txn(
        self,
        compares: Sequence[Comparison],
        success: Sequence[Op] = (),
        failure: Sequence[Op] = (),
    ) -> TxnResult:
        req = _txn_request(compares, success, failure)
        return TxnResult.from_proto(self._call(lambda s: s.kv.Txn, req, write=True))

    # -- cluster and admin

    def members(self) -> list[Member]:
        """Cluster.MemberList (the etcd protocol, so it works against etcd too)."""
        resp = self._call(lambda s: s.cluster.MemberList, rpc_pb2.MemberListRequest(), write=False)
        return [Member.from_proto(m) for m in resp.members]

    def member_add(self, peer_url: str) -> Member:
        """Cluster.MemberAdd: a voting member at ``peer_url`` (``http://host:port``; a bare
        ``host:port`` gets ``http://``). The new node runs (before or after the add) with
        every current member and itself in ``--initial-cluster``. Returns the new member (no
        name until it has started). A retry of an add that did happen answers FailedPrecondition (the peer URL
        already exists)."""
        req = rpc_pb2.MemberAddRequest(peerURLs=[normalize_peer_url(peer_url)])
        resp = self._call(lambda s: s.cluster.MemberAdd, req, write=True)
        return Member.from_proto(resp.member)

    def member_remove(self, member_id: int) -> list[Member]:
        """Cluster.MemberRemove by member id; returns the members afterwards.

        A node cannot remove itself, so the request avoids the endpoints that are the
        member's own client URLs (unless every endpoint is: then the server refuses it with
        FailedPrecondition)."""
        if member_id <= 0:
            raise InvalidArgument(f"member id must be > 0, got {member_id}")
        own = {
            _normalize_endpoint(url)
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

    def snapshot(self, path: str, progress: Callable[[int, int], None] | None = None) -> int:
        """Maintenance.Snapshot: save a fresh snapshot of the first reachable endpoint's image
        to ``path`` (written to ``path + '.part'`` and renamed); returns its size in bytes.
        ``progress(received, total)`` is called per chunk."""
        deadline = time.monotonic() + max(self.timeout_s, 60.0)
        failures: dict[str, str] = {}
        for endpoint in self.endpoints:
            part = path + ".part"
            try:
                stream = self._stubs_for(endpoint).maintenance.Snapshot(
                    rpc_pb2.SnapshotRequest(), timeout=deadline - time.monotonic()
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

    # -- Watch

    def watch(
        self,
        key: Bytesish,
        prefix: bool = False,
        range_end: Bytesish | None = None,
        start_revision: int = 0,
        prev_kv: bool = False,
        filters: Iterable[str] = (),
        snapshot_if_compacted: bool = False,
        progress_notify: bool = False,
        record_type: str = "",
    ) -> Watch:
        """Watch a key or range: an iterator of events that resumes on another endpoint from
        the last revision + 1 when its node fails (:mod:`nameserver.watch_client`).
        ``record_type`` watches records of another type than kv (e.g. ``replica_group``:
        key = broker name, value = ``records.ReplicaGroupRecord`` bytes)."""
        from nameserver.watch_client import Watch

        return Watch(
            self,
            key,
            prefix=prefix,
            range_end=range_end,
            start_revision=start_revision,
            prev_kv=prev_kv,
            filters=filters,
            snapshot_if_compacted=snapshot_if_compacted,
            progress_notify=progress_notify,
            record_type=record_type,
        )

    # -- replicator offsets and quotas (nameserver.offsets_client)

    def offsets_commit(
        self,
        job: str,
        partition: str,
        offset: Bytesish,
        *,
        lease_id: int,
        fencing_token: int,
        position: int = 0,
        expected_version: int = 0,
        epoch: int = 0,
        keepalive: bool = False,
    ) -> OffsetWrite:
        """Offsets.Commit: a compare-and-set of (job, partition), fenced by the lease and
        token; ``keepalive`` also keeps the lease alive (``ttl`` of the answer)."""
        from nameserver import offsets_client

        return offsets_client.commit(
            self,
            job,
            partition,
            offset,
            lease_id=lease_id,
            fencing_token=fencing_token,
            position=position,
            expected_version=expected_version,
            epoch=epoch,
            keepalive=keepalive,
        )

    def offsets_fetch(self, job: str, partition: str) -> CommittedOffset:
        from nameserver import offsets_client

        return offsets_client.fetch(self, job, partition)

    def offsets_list(self, job: str, prefix: bool = False) -> OffsetList:
        from nameserver import offsets_client

        return offsets_client.list_offsets(self, job, prefix)

    def offsets_reset(
        self,
        job: str,
        partition: str,
        offset: Bytesish,
        *,
        position: int = 0,
        expected_version: int = 0,
    ) -> OffsetWrite:
        from nameserver import offsets_client

        return offsets_client.reset(
            self, job, partition, offset, position=position, expected_version=expected_version
        )

    def quota_set(self, record_type: str, max_keys: int = 0, max_bytes: int = 0) -> int:
        from nameserver import offsets_client

        return offsets_client.quota_set(self, record_type, max_keys, max_bytes)

    def quota_list(self) -> list[QuotaUsage]:
        from nameserver import offsets_client

        return offsets_client.quota_list(self)

    # -- replica groups (nameserver.replica_groups_client)

    def replica_register(
        self,
        cluster_name: str,
        broker_name: str,
        address: str,
        broker_id: int = 0,
        heartbeat_timeout_ms: int = 0,
    ) -> ReplicaGroupWrite:
        """ReplicaGroups.Register: assigns (``broker_id`` 0) or keeps a broker id."""
        from nameserver import replica_groups_client

        return replica_groups_client.register(
            self, cluster_name, broker_name, address, broker_id, heartbeat_timeout_ms
        )

    def replica_heartbeat(
        self, broker_name: str, broker_id: int, max_offset: int = 0, epoch: int = 0
    ) -> ReplicaHeartbeat:
        from nameserver import replica_groups_client

        return replica_groups_client.heartbeat(self, broker_name, broker_id, max_offset, epoch)

    def replica_alter_isr(
        self,
        broker_name: str,
        *,
        master_id: int,
        master_epoch: int,
        sync_state_set_epoch: int,
        sync_state_set: Sequence[int],
    ) -> ReplicaGroupWrite:
        """ReplicaGroups.AlterSyncStateSet: a compare-and-set fenced by both epochs."""
        from nameserver import replica_groups_client

        return replica_groups_client.alter_isr(
            self,
            broker_name,
            master_id=master_id,
            master_epoch=master_epoch,
            sync_state_set_epoch=sync_state_set_epoch,
            sync_state_set=sync_state_set,
        )

    def replica_elect(
        self, broker_name: str, broker_id: int = 0, unclean: bool = False
    ) -> ReplicaGroupWrite:
        from nameserver import replica_groups_client

        return replica_groups_client.elect(self, broker_name, broker_id, unclean)

    def replica_group(self, broker_name: str) -> ReplicaGroupInfo:
        """ReplicaGroups.GetGroup: the member group and its need_ack_nums."""
        from nameserver import replica_groups_client

        return replica_groups_client.get_group(self, broker_name)

    def replica_groups(self, cluster_name: str = "") -> list[ReplicaGroupInfo]:
        from nameserver import replica_groups_client

        return replica_groups_client.list_groups(self, cluster_name)

    def replica_set_policy(
        self, broker_name: str, policy: GroupPolicy, cluster_name: str = ""
    ) -> ReplicaGroupWrite:
        from nameserver import replica_groups_client

        return replica_groups_client.set_policy(self, broker_name, policy, cluster_name)

    # -- RocketMQ route data (nameserver.routing_client; reads are eventual)

    def route_get(self, topic: str) -> Route:
        from nameserver import routing_client

        return routing_client.get_route(self, topic)

    def route_cluster_info(self) -> ClusterInfo:
        from nameserver import routing_client

        return routing_client.cluster_info(self)

    def route_topics(self, cluster: str = "", system: bool = False) -> TopicList:
        from nameserver import routing_client

        return routing_client.list_topics(self, cluster, system)

    def route_topic_create(self, topic: str, queues: list[QueueData]) -> int:
        from nameserver import routing_client

        return routing_client.create_topic(self, topic, queues)

    def route_topic_delete(self, topic: str, cluster: str = "") -> tuple[int, int]:
        from nameserver import routing_client

        return routing_client.delete_topic(self, topic, cluster)

    def broker_unregister(
        self, cluster: str, broker_name: str, addr: str = "", broker_id: int = 0
    ) -> tuple[int, int]:
        from nameserver import routing_client

        return routing_client.unregister_broker(self, cluster, broker_name, addr, broker_id)

    def broker_heartbeat(self, broker_name: str, broker_id: int, addr: str) -> bool:
        from nameserver import routing_client

        return routing_client.heartbeat(self, broker_name, broker_id, addr)

    def kvconfig_put(self, namespace: str, key: str, value: str) -> int:
        from nameserver import routing_client

        return routing_client.kv_put(self, namespace, key, value)

    def kvconfig_get(self, namespace: str, key: str) -> str:
        from nameserver import routing_client

        return routing_client.kv_get(self, namespace, key)

    def kvconfig_delete(self, namespace: str, key: str) -> bool:
        from nameserver import routing_client

        return routing_client.kv_delete(self, namespace, key)

    def kvconfig_list(self, namespace: str) -> dict[str, str]:
        from nameserver import routing_client

        return routing_client.kv_list(self, namespace)

    # -- leases, locks and elections (the recipes live in nameserver.coordination)

    def lease_grant(self, ttl_s: int, lease_id: int = 0) -> coordination.Lease:
        """LeaseGrant (``lease_id`` 0: the server picks one); the result's ``fencing_token``
        is the grant's revision."""
        return coordination.lease_grant(self, ttl_s, lease_id)

    def lease_revoke(self, lease_id: int) -> int:
        return coordination.lease_revoke(self, lease_id)

    def lease_time_to_live(self, lease_id: int, keys: bool = False) -> coordination.LeaseTimeToLive:
        return coordination.lease_time_to_live(self, lease_id, keys)

    def lease_leases(self) -> list[int]:
        return coordination.lease_leases(self)

    def lease_keep_alive_once(self, lease_id: int) -> int:
        return coordination.lease_keep_alive_once(self, lease_id)

    def keep_alive(
        self,
        lease_id: int,
        on_lost: Callable[[str], None] | None = None,
        on_renew: Callable[[int], None] | None = None,
    ) -> coordination.KeepAlive:
        """A background keeper for the lease (``with client.keep_alive(id) as k:`` or
        ``.start()``/``.stop()``); ``k.lost`` is set when the lease is gone."""
        return coordination.KeepAlive(self, lease_id, on_lost, on_renew)

    def lock(
        self,
        name: Bytesish,
        ttl_s: int = 10,
        timeout_s: float | None = None,
        on_lost: Callable[[str], None] | None = None,
    ) -> AbstractContextManager[coordination.HeldLock]:
        """``with client.lock(name) as held:`` hold the lock (``held.token`` fences writes)."""
        return coordination.lock(self, name, ttl_s, timeout_s, on_lost)

    def election(self, name: Bytesish) -> coordination.Election:
        return coordination.Election(self, name)

    # -- plumbing

    def _call_once(
        self,
        endpoint: str,
        method: Callable[[_Stubs], Callable[..., T]],
        request: Any,
        deadline: float,
    ) -> T:
        """One request to one endpoint, no failover (errors converted, as everywhere)."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise DeadlineExceeded(f"no answer within {self.timeout_s:g}s", endpoint)
        try:
            return method(self._stubs_for(endpoint))(request, timeout=remaining)
        except grpc.RpcError as err:
            raise error_from_rpc(err, endpoint) from None

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
                is_leader = leader_id in (m.name, *(_normalize_endpoint(u) for u in m.peer_urls))
                for url in m.client_urls if is_leader else ():
                    ep = _normalize_endpoint(url)
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

    def _stubs_for(self, endpoint: str) -> _Stubs:
        with self._lock:
            stubs = self._stubs.get(endpoint)
            if stubs is None:
                channel = grpc.insecure_channel(endpoint)
                stubs = _Stubs(
                    channel,
                    rpc_pb2_grpc.KVStub(channel),
                    rpc_pb2_grpc.ClusterStub(channel),
                    rpc_pb2_grpc.MaintenanceStub(channel),
                    admin_pb2_grpc.AdminStub(channel),
                )
                self._stubs[endpoint] = stubs
            return stubs

    def _write_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((CLIENT_ID_METADATA, self.client_id), (SEQ_METADATA, str(next(self._seq))))

    def _call(
        self,
        method: Callable[[_Stubs], Callable[..., T]],
        request: Any,
        *,
        write: bool,
        avoid: frozenset[str] = frozenset(),
        timeout_s: float | None = None,
    ) -> T:
        return self._call_at(method, request, write=write, avoid=avoid, timeout_s=timeout_s)[0]

    def _call_at(
        self,
        method: Callable[[_Stubs], Callable[..., T]],
        request: Any,
        *,
        write: bool,
        avoid: frozenset[str] = frozenset(),
        timeout_s: float | None = None,
    ) -> tuple[T, str]:
        """Send one request, failing over between endpoints on UNAVAILABLE until the deadline.

        Endpoints in ``avoid`` are skipped (it must leave at least one). ``timeout_s``
        replaces the client's deadline for this request (``math.inf``: none, for requests
        that block until something happens, like Lock). Returns the response and the
        endpoint that gave it.
        """
        metadata = self._write_metadata() if write else None
        budget_s = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + budget_s
        backoff = self._BACKOFF_FIRST_S
        failures: dict[str, str] = {}
        n = len(self.endpoints)
        while True:
            for _ in range(n):
                index = self._current
                endpoint = self.endpoints[index]
                if endpoint in avoid:
                    self._current = (index + 1) % n
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                try:
                    response = method(self._stubs_for(endpoint))(
                        request,
                        timeout=None if math.isinf(remaining) else remaining,
                        metadata=metadata,
                    )
                    return response, endpoint
                except grpc.RpcError as err:
                    exc = error_from_rpc(err, endpoint)
                    if not isinstance(exc, Unavailable):
                        raise exc from None
                    failures[endpoint] = exc.message
                    if self._current == index:
                        self._current = (index + 1) % n
            if time.monotonic() + backoff >= deadline:
                break
            time.sleep(backoff)
            backoff = min(backoff * 2, self._BACKOFF_MAX_S)
        tried = "; ".join(f"{ep}: {msg}" for ep, msg in failures.items())
        if failures:
            raise Unavailable(f"no endpoint answered within {budget_s:g}s ({tried})")
        raise DeadlineExceeded(f"no answer within {budget_s:g}s")


# Last: the recipes module imports this one's errors and results, and Client's methods only
# reach it at call time, so either module may be imported first.
from nameserver import coordination  # noqa: E402
