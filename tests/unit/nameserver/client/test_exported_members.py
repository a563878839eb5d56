"""The client library's public surface (httpx's tests/test_exported_members.py): what other
programs (the broker, the replicators, the benchmarks, applications) may import is exactly
``nameserver.client.__all__``, and import-linter keeps them out of its modules.

Changing the surface is changing this list on purpose: a name added to the package without
it, or dropped from it, fails here.
"""

from __future__ import annotations

import types

import nameserver.client

#: the public surface, name by name
SURFACE = [
    "CLIENT_ID_METADATA", "DEFAULT_CLIENT_PORT", "DEFAULT_ENDPOINTS", "DEFAULT_TIMEOUT_S",
    "ENDPOINTS_ENV", "PERM_TYPES", "SEQ_METADATA", "SNAPSHOT_END", "TLS_ENV", "USER_ENV", "Aborted",
    "AlreadyExists", "BrokerGroup", "BrokerInfo", "Bytesish", "Cancelled", "Client",
    "ClientError", "ClusterInfo", "CommittedOffset", "Compare", "CompareOp", "CompareTarget",
    "Comparison", "ConnectionOptions", "DataLoss", "DeadlineExceeded", "DeleteResult",
    "Election", "FailedPrecondition", "GroupPolicy", "GroupReplica", "HeldLock", "Internal",
    "InvalidArgument", "KeepAlive", "KeyValue", "LeaderKey", "LeaderTransfer", "Lease",
    "LeaseLost", "LeaseTimeToLive", "Member", "NeedAck", "NodeStatus", "NotFound", "OffsetList",
    "OffsetWrite", "Op", "OptionError", "OutOfRange", "Permission", "PermissionDenied", "PutResult",
    "QueueData", "QuotaUsage", "RangeResult", "ReplicaGroupInfo", "ReplicaGroupWrite",
    "ReplicaHeartbeat", "ResourceExhausted", "Route", "SessionCredentials", "SortOrder",
    "SortTarget", "TopicList", "TxnResult", "Unauthenticated", "Unavailable", "Unimplemented",
    "UnknownError", "Watch", "WatchCompacted", "WatchEvent", "error_from_rpc",
    "normalize_peer_url", "prefix_range_end", "remoting_tls", "resolve_endpoints", "to_bytes",
]  # fmt: skip


def test_every_name_in_all_exists_and_is_exported() -> None:
    namespace: dict[str, object] = {}
    exec("from nameserver.client import *", namespace)
    for name in nameserver.client.__all__:
        assert hasattr(nameserver.client, name), name
        assert namespace[name] is getattr(nameserver.client, name)


def test_nothing_public_is_missing_from_all() -> None:
    public = {
        name
        for name, value in vars(nameserver.client).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public == set(nameserver.client.__all__)
    assert nameserver.client.__all__ == sorted(nameserver.client.__all__, key=_order)


def test_all_is_the_pinned_surface() -> None:
    assert nameserver.client.__all__ == SURFACE


def _order(name: str) -> tuple[int, str]:
    """ruff's order of ``__all__`` (RUF022): CONSTANTS, then Classes, then functions."""
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)
