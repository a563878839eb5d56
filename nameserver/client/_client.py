"""The :class:`Client`: every surface on one transport."""

from __future__ import annotations

from nameserver.client.cluster import ClusterApi
from nameserver.client.kv import KvApi
from nameserver.client.leases import LeasesApi
from nameserver.client.locks import LocksApi
from nameserver.client.offsets import OffsetsApi
from nameserver.client.replica_groups import ReplicaGroupsApi
from nameserver.client.routing import RoutingApi
from nameserver.client.users import UsersApi
from nameserver.client.watch import WatchApi

__all__ = ["Client"]


class Client(
    KvApi,
    WatchApi,
    LeasesApi,
    LocksApi,
    ClusterApi,
    RoutingApi,
    OffsetsApi,
    ReplicaGroupsApi,
    UsersApi,
):
    """A synchronous, thread-safe client for one metaledger (or etcd) cluster.

    ``Client(endpoints, timeout_s=5.0, *, cacert=None, cert=None, key=None, user=None,
    password=None)``: ``endpoints`` is a list (or a comma-separated string) of
    ``host:port``; ``timeout_s`` bounds each request, failover included; ``cacert``,
    ``cert``, ``key`` (PEM bytes or file paths) turn TLS on (docs/tls.md); with ``user``,
    every call carries that user's auth token (:mod:`~nameserver.client.auth`). Each
    base class is one surface and its module documents it: :mod:`~nameserver.client.kv`,
    :mod:`~nameserver.client.watch`, :mod:`~nameserver.client.leases`,
    :mod:`~nameserver.client.locks`, :mod:`~nameserver.client.cluster`,
    :mod:`~nameserver.client.routing`, :mod:`~nameserver.client.offsets`,
    :mod:`~nameserver.client.replica_groups`; all share
    :class:`~nameserver.client.transport.Transport` (channels and failover).
    """
