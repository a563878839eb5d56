"""A RocketMQ replication job's settings (``metaledger replicate rocketmq``), checked before
anything connects, and the two mappings they define: which source topics are replicated
under which destination name, and which destination queue a source message goes to.

Topics are a list (``--topics a,b``) or a pattern (``--topic-pattern 'orders-.*'``, a full
match against the source nameserver's topic list, re-read every ``refresh_s``). Retry
(``%RETRY%<group>``) and dead-letter (``%DLQ%<group>``) topics match a pattern only with
``include_retry`` / ``include_dlq`` (RocketMQ Replicator 2.0 always skips them); named in
``--topics`` they are replicated. The heartbeat topic is always replicated when heartbeats
are on (its counts are kept apart from the user topics').

Queue mapping (the config says which):

- ``same``: source read queue ``i`` (RocketMQ client order: broker name, then queue id) goes
  to destination write queue ``i mod n``. One source queue feeds one destination queue in
  order, so an orderly topic keeps its per-queue order and offset translation is exact per
  queue; this is the default and the only mode for orderly topics.
- ``hash``: by crc32 of the message's keys (its message id when it has none), mod n: a key's
  messages stay together on the destination whatever the source queue.
"""

from __future__ import annotations

import os
import re
import socket
import zlib
from dataclasses import dataclass, field
from typing import Any, Final

from nameserver.client import SessionCredentials
from replicator.rocketmq.errors import ConfigError

__all__ = ["HEARTBEAT_TOPIC", "RocketMQReplicatorConfig", "dest_queue", "loop_names", "namesrv_set"]

#: RIP-45's inner topic, in both clusters
HEARTBEAT_TOPIC: Final = "rmq_sys_replicator_heartbeat"
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
QUEUE_MAPS: Final = ("same", "hash")
DISMISS_POLICIES: Final = ("none", "log")
OFFSET_LOST_POLICIES: Final = ("earliest", "stop")
_CLUSTER_NAME = re.compile(r"[A-Za-z0-9_%|-]{1,127}")


def _default_worker() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class RocketMQReplicatorConfig:
    source_namesrv: str
    dest_namesrv: str
    job: str
    endpoints: list[str]
    topics: tuple[str, ...] = ()
    topic_pattern: str = ""
    #: source topic → destination topic (others keep their name)
    rename: dict[str, str] = field(default_factory=dict)
    queue_map: str = "same"
    #: the RocketMQ cluster names; "" = the ``cluster`` of the routes' broker groups. Loop
    #: prevention uses them, or NAME@nameservers when both are the same (:attr:`trail_names`)
    source_cluster: str = ""
    dest_cluster: str = ""
    worker: str = field(default_factory=_default_worker)
    lease_ttl_s: int = 10
    #: "none": a message the destination refuses stops its queue's commit (and is retried);
    #: "log": it is dismissed: counted, reported (log, status, metrics), then passed
    dismiss: str = "none"
    #: the source deleted messages below the committed offset: resume at the earliest offset
    #: and raise an alarm ("earliest"), or stop the queue ("stop"); never a silent skip
    on_offset_lost: str = "earliest"
    include_retry: bool = False
    include_dlq: bool = False
    max_in_flight: int = 4096
    #: messages per second over the whole worker; 0 = unlimited
    rate_limit: float = 0.0
    #: messages asked for per pull; the broker caps it (RocketMQ: 32 messages, 256 KiB)
    pull_batch: int = 256
    #: record an offset-sync at least every this many source offsets per destination queue
    #: (beside the newest at each commit): the translation's precision
    offset_sync_every: int = 100
    commit_interval_s: float = 1.0
    refresh_s: float = 5.0
    heartbeat_interval_s: float = 10.0  # 0 = no heartbeats
    #: a link is down when no heartbeat arrived for this many intervals
    heartbeat_down_after: float = 3.0
    sync_config: bool = True
    config_interval_s: float = 30.0
    dest_read_only: bool = False
    #: consumer groups whose offsets the checkpoint connector translates
    groups: tuple[str, ...] = ()
    checkpoint_interval_s: float = 10.0
    sync_group_offsets: bool = False
    status_interval_s: float = 1.0
    #: the metaledger client's user, password and TLS files (``--user``, ``--cacert`` …,
    #: :meth:`nameserver.client.ConnectionOptions.client_kwargs`); not in repr (a password)
    client_options: dict[str, Any] = field(default_factory=dict, repr=False)
    #: RocketMQ ACL 1.0 session credentials (``--access-key``/``--secret-key``): requests
    #: that change state on a nameserver are signed with them (AclClientRPCHook)
    access_key: str = ""
    secret_key: str = field(default="", repr=False)
    #: reach the source's / destination's nameserver over TLS (a metaledger node's remoting
    #: port under ``--cert-file``), with the ``cacert``/``cert``/``key`` of client_options
    source_namesrv_tls: bool = False
    dest_namesrv_tls: bool = False

    @property
    def trail_names(self) -> tuple[str, str]:
        """(source, destination) names in ``ROCKETMQ_REPLICATOR_SOURCE``: :func:`loop_names`."""
        return loop_names(
            self.source_cluster, self.source_namesrv, self.dest_cluster, self.dest_namesrv
        )

    def session_credentials(self) -> SessionCredentials | None:
        """The destination nameserver's ACL credentials, None unless given."""
        if not self.access_key:
            return None
        return SessionCredentials(self.access_key, self.secret_key)

    def validate(self) -> None:
        if not self.job or "/" in self.job:
            raise ConfigError(f"job: a non-empty name without '/', got {self.job!r}")
        if bool(self.access_key) != bool(self.secret_key):
            raise ConfigError("access_key: --access-key and --secret-key go together")
        if (self.source_namesrv_tls or self.dest_namesrv_tls) and not self.client_options.get(
            "cacert"
        ):
            raise ConfigError("namesrv_tls: --source/--dest-namesrv-tls need --cacert")
        for name in ("source_namesrv", "dest_namesrv"):
            if not getattr(self, name):
                raise ConfigError(f"{name}: HOST:PORT of the cluster's nameserver is required")
        if not self.endpoints:
            raise ConfigError("endpoints: the metaledger cluster that keeps the job's state")
        if bool(self.topics) == bool(self.topic_pattern):
            raise ConfigError("topics: give either a topic list or a topic pattern (not both)")
        if self.topic_pattern:
            try:
                re.compile(self.topic_pattern)
            except re.error as exc:
                raise ConfigError(f"topic_pattern: {exc}") from None
        for src, dst in self.rename.items():
            if not src or not dst:
                raise ConfigError(f"rename: SOURCE=DEST with both names, got {src!r}={dst!r}")
        if len(set(self.rename.values())) != len(self.rename):
            raise ConfigError("rename: two source topics renamed to one destination topic")
        if self.queue_map not in QUEUE_MAPS:
            raise ConfigError(f"queue_map: one of {', '.join(QUEUE_MAPS)}, got {self.queue_map!r}")
        if self.dismiss not in DISMISS_POLICIES:
            raise ConfigError(
                f"dismiss: one of {', '.join(DISMISS_POLICIES)}, got {self.dismiss!r}"
            )
        if self.on_offset_lost not in OFFSET_LOST_POLICIES:
            raise ConfigError(
                f"on_offset_lost: one of {', '.join(OFFSET_LOST_POLICIES)},"
                f" got {self.on_offset_lost!r}"
            )
        for name in ("source_cluster", "dest_cluster"):
            value = getattr(self, name)
            if value and not _CLUSTER_NAME.fullmatch(value):
                raise ConfigError(f"{name}: 1-127 of [A-Za-z0-9_%|-], got {value!r}")
            if "," in value:
                raise ConfigError(f"{name}: a cluster name cannot hold ','")
        if self.source_cluster and self.source_cluster == self.dest_cluster:
            raise ConfigError(
                f"source_cluster and dest_cluster are both {self.source_cluster!r}: loop"
                " prevention needs two names (leave them out to tell the clusters apart by"
                " their nameservers)"
            )
        if namesrv_set(self.source_namesrv) == namesrv_set(self.dest_namesrv):
            raise ConfigError(
                "dest_namesrv: the source's nameservers: replicate between two clusters"
            )
        for name in ("lease_ttl_s", "max_in_flight", "pull_batch", "offset_sync_every"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be at least 1, got {getattr(self, name)}")
        for name in ("commit_interval_s", "refresh_s", "config_interval_s", "status_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be > 0, got {getattr(self, name)}")
        for name in ("rate_limit", "heartbeat_interval_s", "checkpoint_interval_s"):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name}: must be >= 0, got {getattr(self, name)}")
        if self.heartbeat_down_after < 1:
            raise ConfigError("heartbeat_down_after: at least 1 interval")
        if self.sync_group_offsets and not self.groups:
            raise ConfigError("sync_group_offsets: name the consumer groups (groups)")

    # --- topics ----------------------------------------------------------------------

    def wants(self, topic: str) -> bool:
        """Is source ``topic`` replicated (heartbeats aside)?"""
        if self.topics:
            return topic in self.topics
        if topic.startswith(RETRY_PREFIX) and not self.include_retry:
            return False
        if topic.startswith(DLQ_PREFIX) and not self.include_dlq:
            return False
        if topic == HEARTBEAT_TOPIC:
            return False
        return re.fullmatch(self.topic_pattern, topic) is not None

    def dest_topic(self, topic: str) -> str:
        return self.rename.get(topic, topic)

    @property
    def heartbeats(self) -> bool:
        return self.heartbeat_interval_s > 0


def namesrv_set(namesrv: str) -> tuple[str, ...]:
    """``HOST:PORT;HOST:PORT`` as a sorted tuple of its addresses (order and repeats aside)."""
    return tuple(sorted({a.strip() for a in namesrv.split(";") if a.strip()}))


def loop_names(
    source_cluster: str, source_namesrv: str, dest_cluster: str, dest_namesrv: str
) -> tuple[str, str]:
    """The (source, destination) names loop prevention writes into and looks for in
    ``ROCKETMQ_REPLICATOR_SOURCE``: the RocketMQ cluster names, or, when both are the same
    (every fresh RocketMQ deployment is ``DefaultCluster``), ``NAME@HOST:PORT[;HOST:PORT]``
    with each side's nameservers, so two default clusters replicate both ways. A job the
    other way round, given the same addresses, computes the same two names."""
    if source_cluster != dest_cluster:
        return source_cluster, dest_cluster
    return (
        f"{source_cluster}@{';'.join(namesrv_set(source_namesrv))}",
        f"{dest_cluster}@{';'.join(namesrv_set(dest_namesrv))}",
    )


def dest_queue(mode: str, source_index: int, keys: str, msg_id: str, dest_count: int) -> int:
    """The destination write queue of a message (see the module docstring)."""
    if mode == "same":
        return source_index % dest_count
    basis = keys.split(" ", 1)[0] if keys else msg_id
    return zlib.crc32(basis.encode()) % dest_count
