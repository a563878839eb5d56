"""A Redis replication job's metrics (docs/redis-replicator.md, "Metrics and progress"),
served as Prometheus text on
``metaledger replicate redis --listen-metrics HOST:PORT``, and the full-sync progress line.

Per job (label ``job``), the same numbers ``metaledger replicate status`` shows:

- gauges, refreshed from the pass's status document each status interval (1 s) on the event
  loop (a scrape thread never reads the pipeline's state): parsed, confirmed, acked and
  checkpoint offsets, lag in bytes and seconds, messages in flight, spooled bytes;
  ``active`` (1 while this worker holds the job's lease and runs a pass);
- counters, bumped as things happen: messages sent and confirmed, full syncs, partial
  resyncs (``+CONTINUE``), passes, RDB bytes received;
- the current full sync: RDB bytes so far and the total when the master said it
  (``$len``: disk transfers; a diskless ``$EOF:`` transfer has no total, the sample is absent),
  ``full_sync_in_progress``.

Offsets are the master's replication offsets; "RDB bytes received" counts what the pipeline
took in (after the link's spool). :class:`SyncProgress` writes the progress of a full sync
on stderr at most once a second: a bar when stderr is a terminal, else a log line.

``prometheus_client`` does the text format and the HTTP server (a daemon thread); each
:class:`RedisMetrics` has its own registry, as broker/metrics.py does.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TextIO

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
from prometheus_client.core import CounterMetricFamily, Metric

__all__ = ["RedisMetrics", "SyncProgress"]

log = logging.getLogger(__name__)

PREFIX = "metaledger_redis_"

#: gauges refreshed from the status document: (metric suffix, status field, help)
STATUS_GAUGES = (
    ("parsed_offset", "parsed_offset", "master replication offset parsed from the stream"),
    ("confirmed_offset", "confirmed_offset", "offset up to which the sink confirmed everything"),
    ("acked_offset", "acked_offset", "offset last sent to the master in REPLCONF ACK"),
    ("checkpoint_offset", "checkpoint_offset", "offset of the stored (fenced) checkpoint"),
    ("lag_bytes", "lag_bytes", "parsed offset minus confirmed offset"),
    ("lag_seconds", "lag_s", "age of the oldest batch the sink has not confirmed"),
    ("in_flight_messages", "in_flight", "messages sent and not yet confirmed"),
    ("spooled_bytes", "spooled_bytes", "bytes read from the master and not yet processed"),
)


class SyncProgress:
    """The progress of a full sync, written at most every ``interval_s`` while bytes arrive.

    ``stream`` a terminal: one ``\\r``-rewritten bar; otherwise a log line each interval
    (``log`` at INFO, which the CLI sends to stderr).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        tty: bool | None = None,
    ) -> None:
        self._stream = stream
        self._tty = tty if tty is not None else bool(stream is not None and stream.isatty())
        self._interval = interval_s
        self._clock = clock
        self._total: int | None = None
        self._done = 0
        self._start = self._last = 0.0
        self._last_done = 0
        self.lines = 0  # how many progress lines were written (tests)

    def begin(self, total: int | None) -> None:
        self._total, self._done, self._last_done = total, 0, 0
        self._start = self._last = self._clock()

    def advance(self, n: int) -> None:
        self._done += n
        now = self._clock()
        if now - self._last >= self._interval:
            rate = (self._done - self._last_done) / (now - self._last)
            self._last, self._last_done = now, self._done
            self._write(self.render(rate), final=False)

    def end(self) -> None:
        elapsed = max(self._clock() - self._start, 1e-9)
        self._total = self._done
        self._write(self.render(self._done / elapsed) + f" in {elapsed:.1f} s", final=True)

    def render(self, rate: float) -> str:
        mb, total = self._done / 1e6, self._total
        if total:
            frac = min(self._done / total, 1.0)
            text = f"{mb:.1f} of {total / 1e6:.1f} MB ({frac:.0%}), {rate / 1e6:.1f} MB/s"
            if self._tty:
                width = 30
                bar = "#" * int(frac * width)
                return f"RDB [{bar:<{width}}] {text}"
            return f"full sync: RDB {text}"
        text = f"{mb:.1f} MB (size unknown: diskless), {rate / 1e6:.1f} MB/s"
        return f"RDB {text}" if self._tty else f"full sync: RDB {text}"

    def _write(self, line: str, *, final: bool) -> None:
        self.lines += 1
        if self._tty and self._stream is not None:
            self._stream.write("\r" + line + ("\n" if final else "\x1b[K"))
            self._stream.flush()
        else:
            log.info("%s%s", line, " (done)" if final else "")


class _Tally:
    """A counter the event loop bumps as a plain int and the scrape thread reads (an int
    read is atomic under the GIL; the value only grows)."""

    def __init__(self, name: str, documentation: str, job: str) -> None:
        self.name = name
        self.documentation = documentation
        self.job = job
        self.value = 0

    def collect(self) -> Iterable[Metric]:
        family = CounterMetricFamily(self.name, self.documentation, labels=["job"])
        family.add_metric([self.job], self.value)
        yield family

    def describe(self) -> Iterable[Metric]:
        return self.collect()


class RedisMetrics:
    """One job's registry; the pipeline calls the event methods, :meth:`observe` the rest."""

    def __init__(self, job: str, progress: SyncProgress | None = None) -> None:
        self.job = job
        self.progress = progress
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry

        def counter(name: str, text: str) -> Any:
            return Counter(PREFIX + name, text, ["job"], registry=r).labels(job)

        def gauge(name: str, text: str) -> Gauge:
            return Gauge(PREFIX + name, text, ["job"], registry=r)

        # one per replicated write, twice: plain ints, read at scrape time (_Tally), cost
        # ~0.1 µs an event where a prometheus Counter.inc (a lock) costs ~1.7 µs
        self._sent = _Tally(PREFIX + "messages_sent", "messages submitted to the sink", job)
        self._confirmed = _Tally(PREFIX + "messages_confirmed", "messages the sink confirmed", job)
        r.register(self._sent)
        r.register(self._confirmed)
        self._full_syncs = counter("full_syncs", "full syncs (+FULLRESYNC) begun")
        self._partial = counter("partial_resyncs", "partial resyncs (+CONTINUE)")
        self._passes = counter("passes", "active passes begun (each one connects anew)")
        self._rdb_received = counter("rdb_received_bytes", "RDB payload bytes taken in")
        self._gauges = {field: (gauge(name, text), field) for name, field, text in STATUS_GAUGES}
        self._active = gauge("active", "1 while this worker is the job's active one")
        self._rdb_bytes = gauge("rdb_bytes", "RDB bytes taken in by the current/last full sync")
        self._rdb_total = gauge(
            "rdb_total_bytes", "size of the RDB being transferred (disk transfers only)"
        )
        self._syncing = gauge("full_sync_in_progress", "1 while an RDB is being transferred")
        self._active.labels(job).set(0)
        self._syncing.labels(job).set(0)
        self._rdb_bytes_child = self._rdb_bytes.labels(job)
        self._rdb_bytes_child.set(0)
        self._server: Any = None

    # ---- events (called on the event loop) -------------------------------------------

    def pass_started(self) -> None:
        self._passes.inc()
        self._active.labels(self.job).set(1)

    def pass_ended(self) -> None:
        self._active.labels(self.job).set(0)
        self._syncing.labels(self.job).set(0)

    def sent(self, n: int = 1) -> None:
        self._sent.value += n

    def confirmed(self, n: int = 1) -> None:
        self._confirmed.value += n

    def full_sync(self) -> None:
        self._full_syncs.inc()

    def partial_resync(self) -> None:
        self._partial.inc()

    def rdb_begin(self, size: int | None) -> None:
        self._rdb_bytes_child.set(0)
        self._syncing.labels(self.job).set(1)
        if size is None:
            if self._has_total():
                self._rdb_total.remove(self.job)
        else:
            self._rdb_total.labels(self.job).set(size)
        if self.progress is not None:
            self.progress.begin(size)

    def rdb_received(self, n: int) -> None:
        self._rdb_received.inc(n)
        self._rdb_bytes_child.inc(n)
        if self.progress is not None:
            self.progress.advance(n)

    def rdb_end(self) -> None:
        self._syncing.labels(self.job).set(0)
        if self.progress is not None:
            self.progress.end()

    def observe(self, status: Mapping[str, Any]) -> None:
        """Refresh the gauges from a pass's status document (``_Pass.status()``)."""
        for gauge, field in self._gauges.values():
            value = status.get(field)
            if isinstance(value, int | float):
                gauge.labels(self.job).set(value)

    # ---- serving ---------------------------------------------------------------------

    def serve(self, host: str, port: int) -> None:
        """Serve ``GET /metrics`` on ``host:port`` from a daemon thread."""
        server, _thread = start_http_server(port, host, registry=self.registry)
        self._server = server

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def value(self, name: str) -> float | None:
        """The current value of one of this job's samples (``metaledger_redis_`` omitted)."""
        return self.registry.get_sample_value(PREFIX + name, {"job": self.job})

    def _has_total(self) -> bool:
        return self.value("rdb_total_bytes") is not None
