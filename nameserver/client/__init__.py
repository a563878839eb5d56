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
    users           user and role administration (auth)
    acl             RocketMQ ACL 1.0 request signing (SessionCredentials)
    connection      ConnectionOptions: endpoints, credentials and TLS files from values, the
                    environment ($METALEDGER_ENDPOINTS ...) and the one default endpoint

Other programs (the broker, the replicators, the benchmarks, applications) import from this
package only, never from its modules: ``__all__`` below is the public surface, pinned by
``tests/unit/nameserver/client/test_exported_members.py`` and held by import-linter.

The package imports only ``grpc``, the generated ``protos`` and the standard library (an
import-linter contract in ``pyproject.toml`` holds it to that), and importing it changes
nothing in the process: no environment variable, no server module.
"""

from nameserver.client._client import Client
from nameserver.client.acl import SessionCredentials
from nameserver.client.cluster import LeaderTransfer, Member, NodeStatus, normalize_peer_url
from nameserver.client.connection import (
    DEFAULT_CLIENT_PORT,
    DEFAULT_ENDPOINTS,
    DEFAULT_TIMEOUT_S,
    ENDPOINTS_ENV,
    TLS_ENV,
    USER_ENV,
    ConnectionOptions,
    OptionError,
    remoting_tls,
    resolve_endpoints,
)
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
from nameserver.client.leases import KeepAlive, Lease, LeaseTimeToLive
from nameserver.client.locks import Election, HeldLock, LeaderKey
from nameserver.client.offsets import CommittedOffset, OffsetList, OffsetWrite, QuotaUsage
from nameserver.client.replica_groups import (
    GroupPolicy,
    GroupReplica,
    NeedAck,
    ReplicaGroupInfo,
    ReplicaGroupWrite,
    ReplicaHeartbeat,
)
from nameserver.client.routing import (
    BrokerGroup,
    BrokerInfo,
    ClusterInfo,
    QueueData,
    Route,
    TopicList,
)
from nameserver.client.transport import CLIENT_ID_METADATA, SEQ_METADATA
from nameserver.client.users import PERM_TYPES, Permission
from nameserver.client.watch import SNAPSHOT_END, Watch, WatchEvent

__all__ = [
    "CLIENT_ID_METADATA",
    "DEFAULT_CLIENT_PORT",
    "DEFAULT_ENDPOINTS",
    "DEFAULT_TIMEOUT_S",
    "ENDPOINTS_ENV",
    "PERM_TYPES",
    "SEQ_METADATA",
    "SNAPSHOT_END",
    "TLS_ENV",
    "USER_ENV",
    "Aborted",
    "AlreadyExists",
    "BrokerGroup",
    "BrokerInfo",
    "Bytesish",
    "Cancelled",
    "Client",
    "ClientError",
    "ClusterInfo",
    "CommittedOffset",
    "Compare",
    "CompareOp",
    "CompareTarget",
    "Comparison",
    "ConnectionOptions",
    "DataLoss",
    "DeadlineExceeded",
    "DeleteResult",
    "Election",
    "FailedPrecondition",
    "GroupPolicy",
    "GroupReplica",
    "HeldLock",
    "Internal",
    "InvalidArgument",
    "KeepAlive",
    "KeyValue",
    "LeaderKey",
    "LeaderTransfer",
    "Lease",
    "LeaseLost",
    "LeaseTimeToLive",
    "Member",
    "NeedAck",
    "NodeStatus",
    "NotFound",
    "OffsetList",
    "OffsetWrite",
    "Op",
    "OptionError",
    "OutOfRange",
    "Permission",
    "PermissionDenied",
    "PutResult",
    "QueueData",
    "QuotaUsage",
    "RangeResult",
    "ReplicaGroupInfo",
    "ReplicaGroupWrite",
    "ReplicaHeartbeat",
    "ResourceExhausted",
    "Route",
    "SessionCredentials",
    "SortOrder",
    "SortTarget",
    "TopicList",
    "TxnResult",
    "Unauthenticated",
    "Unavailable",
    "Unimplemented",
    "UnknownError",
    "Watch",
    "WatchCompacted",
    "WatchEvent",
    "error_from_rpc",
    "normalize_peer_url",
    "prefix_range_end",
    "remoting_tls",
    "resolve_endpoints",
    "to_bytes",
]
