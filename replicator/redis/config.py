"""The Redis replicator's settings, its source and the parts it builds from them.

``RedisReplicatorConfig`` is what ``metaledger replicate redis`` fills from its flags;
``parse_source`` reads ``redis://[[user]:password@]host[:port]``; ``make_sink`` builds the
configured sink and ``load_command_table`` the source's own command table (the 7.0.15 snapshot
when the source does not allow ``COMMAND``).
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

from nameserver.client import Client
from replicator.redis.cluster import parse_shard
from replicator.redis.commands import CommandTable, snapshot
from replicator.redis.errors import ConfigError
from replicator.sinks.base import Sink

__all__ = [
    "RedisReplicatorConfig",
    "Source",
    "load_command_table",
    "make_sink",
    "parse_source",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Source:
    host: str
    port: int
    username: str | None = None
    password: str | None = None

    def __str__(self) -> str:
        return f"redis://{self.host}:{self.port}"


def parse_source(url: str) -> Source:
    """``redis://[[user]:password@]host[:port]`` (the password also from ``$REDISCLI_AUTH``)."""
    parts = urlsplit(url)
    if parts.scheme != "redis":
        raise ConfigError("source", f"{url!r}: only redis:// URLs (rediss:// is not supported)")
    if not parts.hostname:
        raise ConfigError("source", f"{url!r} has no host")
    try:
        port = parts.port or 6379
    except ValueError as exc:
        raise ConfigError("source", f"{url!r}: {exc}") from None
    password = unquote(parts.password) if parts.password else os.environ.get("REDISCLI_AUTH")
    username = unquote(parts.username) if parts.username else None
    if username and not password:
        raise ConfigError("source", "an ACL user needs a password")
    return Source(parts.hostname, port, username, password)


@dataclass
class RedisReplicatorConfig:
    source: Source
    topic: str
    job: str
    endpoints: list[str]
    worker: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    capa_eof: bool = True
    capa_psync2: bool = True
    lease_ttl_s: int = 10
    commit_interval_s: float = 0.2
    status_interval_s: float = 1.0
    retry_delay_s: float = 1.0
    spool_dir: str | None = None
    spool_memory_bytes: int = 64 * 1024 * 1024
    read_timeout_s: float = 60.0
    client_timeout_s: float = 10.0
    sink: Literal["rocketmq", "wheel", "file"] = "rocketmq"
    sink_path: str | None = None  # the file sink's file (None: stdout)
    namesrv: str | None = None  # the wheel sink's nameserver (a metaledger remoting port)
    max_in_flight: int = 4096
    cluster_shard: str | None = None  # a Redis Cluster: a slot or a node id (cluster.py)
    cluster_check_interval_s: float = 2.0  # how often a pass checks its node is still master
    #: the metaledger client's user, password and TLS files (``--user``, ``--cacert`` …,
    #: :meth:`nameserver.client.ConnectionOptions.client_kwargs`); not in repr (a password)
    client_options: dict[str, Any] = field(default_factory=dict, repr=False)

    def validate(self) -> None:
        if not self.topic:
            raise ConfigError("topic", "is empty")
        if not self.job or "/" in self.job:
            raise ConfigError("job", f"{self.job!r}: a non-empty name without '/'")
        if self.lease_ttl_s < 2:
            raise ConfigError("lease_ttl_s", "at least 2 seconds")
        if self.max_in_flight < 1:
            raise ConfigError("max_in_flight", "at least 1")
        if self.sink == "wheel" and not self.namesrv:
            raise ConfigError("namesrv", "the wheel sink needs the nameserver's HOST:PORT")
        if self.cluster_shard is not None:
            parse_shard(self.cluster_shard)


def load_command_table(source: Source) -> CommandTable:
    """The source's own command table (modules' commands included), else the 7.0.15 one."""
    import redis

    try:
        r = redis.Redis(
            host=source.host,
            port=source.port,
            username=source.username,
            password=source.password,
            socket_timeout=5,
        )
        try:
            return CommandTable.from_server(r)
        finally:
            r.close()
    except Exception as exc:  # no COMMAND permission, an older server: the snapshot
        log.warning("COMMAND DOCS from %s failed (%s): using the 7.0.15 table", source, exc)
        return snapshot()


def make_sink(config: RedisReplicatorConfig, client: Client) -> Sink:
    if config.sink == "file":
        from replicator.sinks.file import FileSink

        return FileSink(config.sink_path, {config.topic: 1})
    if config.sink == "wheel":
        from replicator.sinks.wheel import WheelSink, WheelSinkConfig

        assert config.namesrv is not None
        return WheelSink(WheelSinkConfig(namesrv=config.namesrv, topics=(config.topic,)), client)
    from replicator.sinks.rocketmq import RocketMQSink, RocketMQSinkConfig

    return RocketMQSink(
        RocketMQSinkConfig(topics=(config.topic,), max_in_flight=config.max_in_flight), client
    )
