"""The KV surface (etcd's KV service): results, request builders, txn guards and the calls.

Keys and values are ``str`` (encoded as UTF-8; undecodable bytes that arrived through
``surrogateescape`` round-trip) or ``bytes``; results always hold ``bytes``::

    c.put("config/a", "1")
    r = c.get("config/", prefix=True)
    t = c.txn([Compare.mod("config/a") == r.kvs[0].mod_revision],
              success=[Op.put("config/a", "2")], failure=[Op.get("config/a")])
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, get_args

from nameserver.client.errors import InvalidArgument, UnknownError
from nameserver.client.transport import Transport
from protos.etcdserverpb import kv_pb2, rpc_pb2

__all__ = [
    "Bytesish",
    "Compare",
    "CompareOp",
    "CompareTarget",
    "Comparison",
    "DeleteResult",
    "KeyValue",
    "KvApi",
    "Op",
    "PutResult",
    "RangeResult",
    "SortOrder",
    "SortTarget",
    "TxnResult",
    "key_range",
    "prefix_range_end",
    "to_bytes",
]

Bytesish: TypeAlias = str | bytes
SortOrder = Literal["NONE", "ASCEND", "DESCEND"]
SortTarget = Literal["KEY", "VERSION", "CREATE", "MOD", "VALUE"]

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


def key_range(key: Bytesish, range_end: Bytesish | None, prefix: bool) -> tuple[bytes, bytes]:
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
    k, end = key_range(key, range_end, prefix)
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
    k, end = key_range(key, range_end, prefix)
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
        k, end = key_range(key, range_end, prefix)
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


class KvApi(Transport):
    """Put, Range, DeleteRange and Txn; writes carry the client id and sequence (retries)."""

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
