"""A RocketMQ replication worker's Prometheus metrics (docs/rocketmq-replicator.md, "Status and
metrics"), served on
``metaledger replicate rocketmq --listen-metrics HOST:PORT``.

Everything comes from the worker's status document (the one ``replicate status`` shows),
handed over on the event loop every status interval; a scrape reads that snapshot only.
Per source queue (labels ``job``, ``partition``): committed offset, lag in messages and
seconds, in-flight messages, dismissed messages, the ``offset_lost`` alarm. Per job: messages
sent and acknowledged (``kind`` = ``user`` or ``heartbeat``, so heartbeats stay out of the
user counts), messages skipped by loop prevention, the heartbeat round trip and
``link_up`` (0 when no heartbeat came through within the configured intervals; only from the
worker that runs the heartbeats, the job's leader, and not at all without heartbeats).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["RocketMQMetrics"]

PREFIX = "metaledger_rocketmq_replicator_"

#: per-queue gauges: (metric suffix, status field, help)
QUEUE_GAUGES = (
    ("committed_offset", "committed_offset", "next source offset committed in metaledger"),
    ("source_max_offset", "max_offset", "end of the source queue at the last pull"),
    ("lag_messages", "lag_messages", "source messages not yet committed"),
    ("lag_seconds", "lag_s", "age of the oldest in-flight message"),
    ("in_flight_messages", "in_flight", "sent and not yet acknowledged by the destination"),
    ("dismissed_messages", "dismissed", "messages passed by the dismiss policy (total)"),
)


class RocketMQMetrics:
    def __init__(self, job: str) -> None:
        self.job = job
        self.registry = CollectorRegistry()
        self._doc: Mapping[str, Any] = {}
        self._server: Any = None
        self.registry.register(self)

    def observe(self, status: Mapping[str, Any]) -> None:
        self._doc = status

    def serve(self, host: str, port: int) -> None:
        self._server = start_http_server(port, addr=host, registry=self.registry)

    def close(self) -> None:
        if self._server is not None:
            server = self._server[0] if isinstance(self._server, tuple) else self._server
            server.shutdown()
            self._server = None

    # --- prometheus_client's collector interface ---------------------------------------

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        doc = self._doc
        job = self.job
        queues = list(doc.get("queues", []))
        for suffix, field, text in QUEUE_GAUGES:
            g = GaugeMetricFamily(PREFIX + suffix, text, labels=["job", "partition"])
            for q in queues:
                g.add_metric([job, str(q.get("partition"))], float(q.get(field) or 0))
            yield g
        alarm = GaugeMetricFamily(
            PREFIX + "offset_lost_alarm",
            "1 when the source deleted messages below the committed offset",
            labels=["job", "partition"],
        )
        for q in queues:
            lost = any(str(a).startswith("offset_lost") for a in q.get("alarms", []))
            alarm.add_metric([job, str(q.get("partition"))], 1.0 if lost else 0.0)
        yield alarm
        for name, field, text in (
            ("sent_messages", "sent", "messages handed to the destination producer"),
            ("acked_messages", "acked", "messages the destination acknowledged"),
            ("looped_messages", "looped", "messages not sent back (loop prevention)"),
        ):
            c = CounterMetricFamily(PREFIX + name, text, labels=["job", "kind"])
            for kind in ("user", "heartbeat"):
                total = sum(
                    int(q.get(field) or 0)
                    for q in queues
                    if bool(q.get("heartbeat")) == (kind == "heartbeat")
                )
                c.add_metric([job, kind], float(total))
            yield c
        hb = doc.get("heartbeat") or {}
        up = GaugeMetricFamily(
            PREFIX + "link_up", "0 while no heartbeat gets through", labels=["job"]
        )
        if hb.get("enabled"):  # the worker running the heartbeats judges the link
            up.add_metric([job], 0.0 if hb.get("link_down") else 1.0)
        yield up
        rtt = GaugeMetricFamily(
            PREFIX + "heartbeat_rtt_seconds",
            "last heartbeat's trip source -> destination",
            labels=["job"],
        )
        if hb.get("rtt_ms") is not None:
            rtt.add_metric([job], float(hb["rtt_ms"]) / 1000)
        yield rtt
        owned = GaugeMetricFamily(
            PREFIX + "queues", "source queues this worker replicates", labels=["job"]
        )
        owned.add_metric([job], float(len(queues)))
        yield owned

    def value(self, name: str, **labels: str) -> float | None:
        return self.registry.get_sample_value(PREFIX + name, {"job": self.job, **labels})
