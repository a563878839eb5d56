"""One broker replica's settings: a frozen dataclass, units in the names, ``validate()``.

Defaults are RocketMQ's (RocketMQ 4.9's ``BrokerConfig.java``, ``MessageStoreConfig.java``,
``SubscriptionGroupConfig.java``): port 10911, retryMaxTimes 16,
the 18 delay levels, long polling with a 15 s client suspend, 60 s queue locks.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
from dataclasses import dataclass

from broker.store import FlushMode

DEFAULT_PORT = 10911
#: RocketMQ 5 gRPC (the RocketMQ proxy's default port; DESIGN §6)
DEFAULT_GRPC_LISTEN = "127.0.0.1:8081"
DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
BROKER_ROLES = ("ASYNC_MASTER", "SYNC_MASTER", "SLAVE")
_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_NAME = re.compile(r"[A-Za-z0-9_%|-]{1,127}")


class ConfigError(ValueError):
    """A setting that cannot be used; the message names the field."""


@functools.lru_cache(maxsize=16)
def parse_delay_levels(text: str) -> tuple[int, ...]:
    """``messageDelayLevel`` ("1s 5s ... 2h") as milliseconds per level (level 1 first).
    Cached: the delay-level service reads the levels ten times a second."""
    out = []
    for item in text.split():
        m = re.fullmatch(r"(\d+)(ms|s|m|h|d)", item)
        if m is None:
            raise ConfigError(f"message_delay_levels: {item!r} is not a duration like 5s or 2m")
        out.append(int(m.group(1)) * _UNITS_MS[m.group(2)])
    if not out:
        raise ConfigError("message_delay_levels: at least one level is needed")
    return tuple(out)


def _ram_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return 8 << 30


@dataclass(frozen=True)
class BrokerConfig:
    broker_name: str
    data_dir: str
    cluster: str = "DefaultCluster"
    broker_id: int = 0
    listen_host: str = "0.0.0.0"
    listen_port: int = DEFAULT_PORT
    #: the address clients and STOREHOST get (brokerIP1); must be reachable (C++ clients send
    #: CONSUMER_SEND_MSG_BACK to a record's STOREHOST)
    advertised_host: str = "127.0.0.1"
    flush_mode: FlushMode = FlushMode.ASYNC_FLUSH
    broker_role: str = "ASYNC_MASTER"
    #: metaledger gRPC endpoints; empty = no registration (tests, a lone broker)
    endpoints: tuple[str, ...] = ()
    #: a send to a topic nobody created creates it (RocketMQ's autoCreateTopicEnable, on by
    #: default as in RocketMQ; production turns it off): the default topic TBW102 has
    #: ``default_queue_nums`` queues, a new topic at most that many
    auto_create_topic: bool = True
    default_queue_nums: int = 4
    retry_max_times: int = 16
    #: consumer groups that consume in order (RocketMQ's subscription group
    #: ``consumeMessageOrderly``): their 5.x consumers get FIFO settings, assignments and POP
    fifo_groups: tuple[str, ...] = ()
    #: the invisible time of a RocketMQ 5 ``auto_renew`` receive (the push consumers': the
    #: proxy's ``defaultInvisibleTimeMills``, 60 s); the replica renews it until the ack
    pop_auto_renew_invisible_ms: int = 60_000
    message_delay_levels: str = DEFAULT_DELAY_LEVELS
    #: timer messages: the furthest delivery time a send may ask for (RocketMQ's
    #: timerMaxDelaySec, 3 days); a later one is refused with MESSAGE_ILLEGAL
    timer_max_delay_sec: int = 3 * 86_400
    long_polling: bool = True
    short_polling_ms: int = 1000
    lock_expiry_ms: int = 60_000
    client_expiry_ms: int = 120_000
    offset_flush_interval_ms: int = 1000
    register_interval_ms: int = 30_000
    #: routes: a heartbeat this often; the route drops the broker after the timeout
    heartbeat_interval_ms: int = 2000
    heartbeat_timeout_ms: int = 30_000
    segment_size_bytes: int = 1024 * 1024 * 1024
    #: reads from slaves (RocketMQ slaveReadEnable): a consumer more than
    #: ``slave_read_lag_bytes`` behind the commit log's end is told to pull from an in-sync
    #: slave, and back from the master once it caught up (RocketMQ: 40 % of the RAM)
    slave_read_enable: bool = False
    slave_read_lag_bytes: int = dataclasses.field(default_factory=lambda: _ram_bytes() * 2 // 5)
    #: retention (RocketMQ fileReservedTime, 72 h): closed commit-log segments older than this
    #: go, and with ``retention_bytes`` (0 = no limit) the oldest while the log is bigger;
    #: checked every ``retention_check_interval_ms``
    retention_hours: float = 72.0
    retention_bytes: int = 0
    retention_check_interval_ms: int = 60_000
    #: a pull answer's caps (RocketMQ's maxTransferCountOnMessageInMemory and
    #: maxTransferBytesOnMessageInMemory: 32 messages, 256 KiB); a consumer that asks for
    #: more (a replicator's pull batch) gets at most these
    max_transfer_count: int = 32
    max_transfer_bytes: int = 256 * 1024
    #: HA port (RocketMQ's haListenPort); 0: the remoting port + 1, where slaves look for it
    ha_port: int = 0
    #: HA bind host ("" = the listen host)
    ha_host: str = ""
    #: metrics HTTP ``host:port`` ("" = none)
    metrics_listen: str = ""
    #: RocketMQ 5 gRPC ``host:port`` ("" = none); the CLI's default is 127.0.0.1:8081 (DESIGN
    #: §6), which, being a default, is skipped with a warning when something else holds it
    grpc_listen: str = ""
    grpc_listen_is_default: bool = False
    #: replica group: a heartbeat this often; metaledger declares the replica dead (and a
    #: master is re-elected) after the timeout without one; a master fences itself then
    replica_heartbeat_interval_ms: int = 1000
    replica_heartbeat_timeout_ms: int = 10_000
    #: SYNC_MASTER: how long a send waits for slaves (RocketMQ slaveTimeout)
    slave_timeout_ms: int = 3000
    #: in-sync set: a slave not caught up this long is dropped (haMaxTimeSlaveNotCatchup)
    ha_max_time_slave_not_catchup_ms: int = 15_000
    #: SYNC_MASTER with inSyncReplicas <= 1 (RocketMQ 4.x haSlaveFallbehindMax): a slave this
    #: many bytes behind is not available (SLAVE_NOT_AVAILABLE)
    ha_slave_fallbehind_max_bytes: int = 256 * 1024 * 1024
    #: HA connections: heartbeat frame interval and idle timeout (RocketMQ: 5 s, 20 s; here
    #: etcd's 5 s peer deadline, so a partitioned stream is noticed and dialled again soon
    #: after a heal; the idle timeout also bounds unacknowledged writes, TCP_USER_TIMEOUT)
    ha_heartbeat_interval_ms: int = 1000
    ha_idle_timeout_ms: int = 5000
    #: transactions (RocketMQ 5's BrokerConfig): a half without an end is checked back with its
    #: producer once this old (transactionTimeOut; a message's CHECK_IMMUNITY_TIME_IN_SECONDS
    #: may ask more), every ``transaction_check_interval_ms`` (transactionCheckInterval), at
    #: most ``transaction_check_max`` times (transactionCheckMax), then left
    transaction_timeout_ms: int = 6000
    transaction_check_interval_ms: int = 30_000
    transaction_check_max: int = 15

    @property
    def ha_listen_port(self) -> int:
        return self.ha_port or self.listen_port + 1

    @property
    def address(self) -> str:
        """``ip:port`` as registered in routes and written as STOREHOST."""
        return f"{self.advertised_host}:{self.listen_port}"

    @property
    def delay_levels_ms(self) -> tuple[int, ...]:
        return parse_delay_levels(self.message_delay_levels)

    def validate(self) -> BrokerConfig:
        if not _NAME.fullmatch(self.broker_name):
            raise ConfigError(f"broker_name: {self.broker_name!r} must be 1-127 of [A-Za-z0-9_%|-]")
        if not _NAME.fullmatch(self.cluster):
            raise ConfigError(f"cluster: {self.cluster!r} must be 1-127 of [A-Za-z0-9_%|-]")
        if self.broker_role not in BROKER_ROLES:
            raise ConfigError(f"broker_role: {self.broker_role!r} is not one of {BROKER_ROLES}")
        if not 0 <= self.listen_port <= 65535:
            raise ConfigError(f"listen_port: {self.listen_port} is not a port")
        if self.grpc_listen:
            host, _, port = self.grpc_listen.rpartition(":")
            if not host or not port.isdigit() or not 0 <= int(port) <= 65535:
                raise ConfigError(f"grpc_listen: {self.grpc_listen!r} is not HOST:PORT")
        if self.advertised_host in ("", "0.0.0.0", "::"):
            raise ConfigError("advertised_host: must be an address clients can reach")
        for name in (
            "default_queue_nums",
            "offset_flush_interval_ms",
            "register_interval_ms",
            "heartbeat_interval_ms",
            "heartbeat_timeout_ms",
            "lock_expiry_ms",
            "client_expiry_ms",
            "short_polling_ms",
            "segment_size_bytes",
            "retention_hours",
            "slave_read_lag_bytes",
            "retention_check_interval_ms",
            "max_transfer_count",
            "max_transfer_bytes",
            "replica_heartbeat_interval_ms",
            "replica_heartbeat_timeout_ms",
            "slave_timeout_ms",
            "ha_max_time_slave_not_catchup_ms",
            "ha_slave_fallbehind_max_bytes",
            "ha_heartbeat_interval_ms",
            "ha_idle_timeout_ms",
            "transaction_timeout_ms",
            "transaction_check_interval_ms",
            "transaction_check_max",
            "pop_auto_renew_invisible_ms",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name}: must be > 0, got {getattr(self, name)}")
        bad = [g for g in self.fifo_groups if not _NAME.fullmatch(g)]
        if bad:
            raise ConfigError(f"fifo_groups: {bad} must be 1-127 of [A-Za-z0-9_%|-]")
        if self.retry_max_times < 0:
            raise ConfigError(f"retry_max_times: must be >= 0, got {self.retry_max_times}")
        if self.retention_bytes < 0:
            raise ConfigError(
                f"retention_bytes: must be >= 0 (0: no limit), got {self.retention_bytes}"
            )
        if self.offset_flush_interval_ms > 1000:
            raise ConfigError("offset_flush_interval_ms: consumer offsets are flushed within 1 s")
        if self.timer_max_delay_sec <= 0:
            raise ConfigError(f"timer_max_delay_sec: must be > 0, got {self.timer_max_delay_sec}")
        self.delay_levels_ms  # noqa: B018  (raises ConfigError when malformed)
        return self
