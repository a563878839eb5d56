"""The metaledger client library: a synchronous client over gRPC.

It speaks the etcd v3 KV, Watch, Lease, Lock, Election, Cluster and Maintenance services plus
metaledger's own Admin, Routing, Offsets, Quotas and ReplicaGroups services, so the same client
works against any member of a metaledger cluster (and, for the etcd services, against etcd)::

    with Client(["127.0.0.1:9877", "127.0.0.1:9887"]) as c:
        c.put("config/a", "1")
        r = c.get("config/", prefix=True)
        t = c.txn([Compare.mod("config/a") == r.kvs[0].mod_revision],
                  success=[Op.put("config/a", "2")], failure=[Op.get("config/a")])

TLS: ``Client(endpoints, cacert=..., cert=..., key=...)`` (PEM bytes or file paths; etcdctl's
``--cacert``, ``--cert``, ``--key``), see :mod:`~nameserver.client.transport`.

One module per surface, each a part of :class:`Client` and the home of its records::

    transport       endpoints, channels, failover, write de-duplication metadata
    errors          the one error tree (ClientError and a class per gRPC status)
    kv              put/get/delete/txn; KeyValue, results, Compare and Op builders
    watch           watch(); Watch, WatchEvent (resumes on another endpoint)
    leases          lease_*, keep_alive(); Lease, KeepAlive
    locks           lock(), election(); HeldLock, Election, acquire/release
    cluster         members, member_add/remove, move_leader, status, snapshot
    routing         route_*, broker_*, kvconfig_* (RocketMQ route data)
    offsets         offsets_*, quota_* (replicator offsets and quotas)
    replica_groups  replica_* (RocketMQ 5 replica groups)

The package imports only ``grpc``, the generated ``protos`` and the standard library (an
import-linter contract in ``pyproject.toml`` holds it to that), and importing it changes
nothing in the process: no environment variable, no server module.
"""

from nameserver.client._client import Client
from nameserver.client.cluster import LeaderTransfer, Member, NodeStatus, normalize_peer_url
from nameserver.client.errors import (
    Aborted,
    AlreadyExists,
    Cancelled,
    ClientError,
    DataLoss,
    DeadlineExceeded,
    FailedPrecondition,
    Internal,
    InvalidArgument,
    LeaseLost,
    NotFound,
    OutOfRange,
    PermissionDenied,
    ResourceExhausted,
    Unauthenticated,
    Unavailable,
    Unimplemented,
    UnknownError,
    WatchCompacted,
    error_from_rpc,
)
from nameserver.client.kv import (
    Bytesish,
    Compare,
    CompareOp,
    CompareTarget,
    Comparison,
    DeleteResult,
    KeyValue,
    Op,
    PutResult,
    RangeResult,
    SortOrder,
    SortTarget,
    TxnResult,
    prefix_range_end,
    to_bytes,
)
from nameserver.client.transport import CLIENT_ID_METADATA, SEQ_METADATA

__all__ = [
    "CLIENT_ID_METADATA",
    "SEQ_METADATA",
    "Aborted",
    "AlreadyExists",
    "Bytesish",
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
    "LeaseLost",
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
    "WatchCompacted",
    "error_from_rpc",
    "normalize_peer_url",
    "prefix_range_end",
    "to_bytes",
]
