"""A broker replica's metrics (docs/broker.md, "Metrics"), as Prometheus text on
``--listen-metrics``.

Per replica: its role and epoch, the commit log's max and confirm offsets, each slave's
acknowledged offset and lag (master only), the in-sync set's size, sends by status and pull
latency, consumer lag and POP messages in flight per consumer group and queue
(:mod:`broker.admin.consume_stats`), and the connected clients by protocol (remoting, grpc), language and version
(:mod:`broker.clients`). State that the replica already holds (role, offsets, slaves) is read when scraped,
through :class:`View` (a scrape never waits on the store or on metaledger); what happens
per request (sends, pulls) is counted as it happens.

``prometheus_client`` does the text format, the histogram buckets and the HTTP server (a
thread); each replica has its own registry, so several replicas can live in one process
(tests do that).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import astuple, dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from broker.clients import ClientKey
from rmq.consume_stats import QueueOffsets

__all__ = ["BrokerMetrics", "SlaveView", "View"]

ROLES = ("MASTER", "SLAVE", "FENCED", "STARTING")


@dataclass(frozen=True)
class SlaveView:
    broker_id: int
    acked_offset: int
    connected: bool


@dataclass(frozen=True)
class View:
    """What a scrape reads from the replica."""

    role: str = "STARTING"
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    in_sync_replicas: int = 1
    slaves: list[SlaveView] = field(default_factory=list)
    #: connected clients by (protocol, language, version)
    clients: Mapping[ClientKey, int] = field(default_factory=dict)
    #: (group, queue row) of every queue a group committed an offset of here
    #: (:func:`broker.admin.consume_stats.consumer_queues`)
    consumer_queues: Sequence[tuple[str, QueueOffsets]] = ()


class _StateCollector(Collector):
    def __init__(self, labels: dict[str, str], view: Callable[[], View]) -> None:
        self._labels = labels
        self._view = view

    def collect(self) -> Iterator[Metric]:
        v = self._view()
        names, values = list(self._labels), list(self._labels.values())
        role = GaugeMetricFamily(
            "metaledger_broker_role",
            "1 for the replica's current role (MASTER, SLAVE, FENCED, STARTING)",
            labels=[*names, "role"],
        )
        for r in ROLES:
            role.add_metric([*values, r], 1.0 if v.role == r else 0.0)
        yield role
        for name, text, value in (
            ("metaledger_broker_epoch", "the master epoch this replica follows", v.epoch),
            ("metaledger_broker_commitlog_max_offset", "commit log end (bytes)", v.max_offset),
            (
                "metaledger_broker_confirm_offset",
                "commit-log offset consumers may read up to",
                v.confirm_offset,
            ),
            (
                "metaledger_broker_in_sync_replicas",
                "in-sync set size, the master included",
                v.in_sync_replicas,
            ),
        ):
            g = GaugeMetricFamily(name, text, labels=names)
            g.add_metric(values, float(value))
            yield g
        acked = GaugeMetricFamily(
            "metaledger_broker_slave_acked_offset",
            "each slave's last acknowledged commit-log offset (master only)",
            labels=[*names, "slave_id"],
        )
        lag = GaugeMetricFamily(
            "metaledger_broker_slave_lag_bytes",
            "how far each slave is behind the master's commit log (master only)",
            labels=[*names, "slave_id"],
        )
        connected = GaugeMetricFamily(
            "metaledger_broker_slave_connected",
            "1 while the slave's HA connection is open (master only)",
            labels=[*names, "slave_id"],
        )
        for s in v.slaves:
            sid = str(s.broker_id)
            acked.add_metric([*values, sid], float(s.acked_offset))
            lag.add_metric([*values, sid], float(max(0, v.max_offset - s.acked_offset)))
            connected.add_metric([*values, sid], 1.0 if s.connected else 0.0)
        yield acked
        yield lag
        yield connected
        clients = GaugeMetricFamily(
            "metaledger_broker_clients",
            "connected clients by protocol (remoting: open connections; grpc: client ids),"
            " language and version",
            labels=[*names, "protocol", "language", "version"],
        )
        for key, n in sorted(v.clients.items(), key=lambda kv: astuple(kv[0])):
            clients.add_metric([*values, key.protocol, key.language, key.version], float(n))
        yield clients
        yield from _lag_gauges(names, values, v.consumer_queues)


def _lag_gauges(
    names: list[str], values: list[str], queues: Sequence[tuple[str, QueueOffsets]]
) -> Iterator[Metric]:
    """Consumer lag per (consumer group, topic, queue): pull, POP and gRPC groups alike. The
    label ``group`` is the replica's broker name, as on every series; the consumer group is
    ``consumer_group``."""
    labels = [*names, "consumer_group", "topic", "queue"]
    lag = GaugeMetricFamily(
        "metaledger_broker_consumer_lag",
        "messages of the queue the consumer group has not consumed (in flight included)",
        labels=labels,
    )
    inflight = GaugeMetricFamily(
        "metaledger_broker_consumer_inflight",
        "messages of the queue the consumer group popped and did not ack yet (POP, gRPC)",
        labels=labels,
    )
    for group, row in queues:
        key = [*values, group, row.topic, str(row.queue_id)]
        lag.add_metric(key, float(row.lag))
        inflight.add_metric(key, float(row.inflight))
    yield lag
    yield inflight


class BrokerMetrics:
    """One replica's registry: counters the handlers bump, gauges read from :class:`View`."""

    def __init__(self, group: str, view: Callable[[], View] = View) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        labels = {"group": group}
        self._labels = labels
        self.sends = Counter(
            "metaledger_broker_sends",
            "sends answered, by put status (PUT_OK, FLUSH_SLAVE_TIMEOUT, ...)",
            ["group", "status"],
            registry=self.registry,
        )
        self.pull_latency = Histogram(
            "metaledger_broker_pull_latency_seconds",
            "time to answer a PULL_MESSAGE that found messages (long polls excluded)",
            ["group"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry,
        )
        self._sends: dict[str, Any] = {}
        self._collector = _StateCollector(labels, view)
        self.registry.register(self._collector)
        self._server: object | None = None

    def set_view(self, view: Callable[[], View]) -> None:
        self._collector._view = view

    def sent(self, status: str) -> None:
        child = self._sends.get(status)
        if child is None:  # labels() once per status, not per send
            child = self._sends[status] = self.sends.labels(self._labels["group"], status)
        child.inc()

    def pulled(self, seconds: float) -> None:
        self.pull_latency.labels(self._labels["group"]).observe(seconds)

    def serve(self, host: str, port: int) -> None:
        """Serve ``GET /metrics`` on ``host:port`` from a daemon thread."""
        server, _thread = start_http_server(port, host, registry=self.registry)
        self._server = server

    def close(self) -> None:
        server = self._server
        if server is not None:
            server.shutdown()  # type: ignore[attr-defined]
            server.server_close()  # type: ignore[attr-defined]
            self._server = None
