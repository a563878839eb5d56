"""The metrics endpoint (metrics HTTP, ``--listen-metrics``): Prometheus text.

``GET /metrics`` answers the node's offsets, role, term, group-commit counters, watchers
and route reads in the Prometheus text exposition format (version 0.0.4); anything else
is a 404.

``GET /health`` answers as etcd's does: 200 ``{"health":"true"}`` while the node is OK,
503 ``{"health":"false","reason":"..."}`` while it is degraded (a full disk, I/O errors;
:mod:`raftlog.health`), so a load balancer or an orchestrator can tell. It is a few lines of asyncio (one request per connection, then close) rather
than a dependency: the values are all in memory, and a scrape must never wait on the
replicated log. Route reads are eventual by design (RIP-18), so the apply offset here is
what tells how far behind the serving node's routes may be.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable, Iterable
from ssl import SSLContext

from nameserver.tls import tls_arguments
from raftlog.health import Health, State

log = logging.getLogger(__name__)

#: A metric: (name, help, type, [(labels, value)]).
Metric = tuple[str, str, str, list[tuple[dict[str, str], float]]]
#: What ``GET /health`` reports: "" when healthy, else why not.
HealthCheck = Callable[[], str]

MAX_REQUEST_HEAD_BYTES = 8192
READ_TIMEOUT_S = 5.0


def render(metrics: Iterable[Metric]) -> str:
    """The Prometheus text format of ``metrics``."""
    out: list[str] = []
    for name, help_text, kind, samples in metrics:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            label_text = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels.items()))
            shown = repr(float(value)) if not float(value).is_integer() else str(int(value))
            out.append(f"{name}{{{label_text}}} {shown}" if label_text else f"{name} {shown}")
    return "\n".join(out) + "\n"


def health_metrics(health: Health, labels: dict[str, str]) -> list[Metric]:
    """``metaledger_degraded{cause}`` (0/1 per cause) and ``metaledger_alarm_nospace``."""
    states = {f.state for f in health.faults()}
    return [
        (
            "metaledger_degraded",
            "1 while a transient fault on a durable path lasts, by cause (nospace, io_error).",
            "gauge",
            [
                ({**labels, "cause": state.name.lower()}, 1 if state in states else 0)
                for state in (State.NOSPACE, State.IO_ERROR)
            ],
        ),
        (
            "metaledger_alarm_nospace",
            "1 while this node's disk is full and it refuses writes (etcd's NOSPACE alarm).",
            "gauge",
            [(labels, 1 if health.refuses_writes else 0)],
        ),
    ]


class Rejections:
    """Requests refused for a reason of the client's own (bad input, a quota, a fence, an
    unknown lease, no leader at the moment, ...), counted by API (``grpc``, ``remoting``),
    gRPC status and error class. A refusal is answered to the client and logged at DEBUG
    only: it is no fault of the node. Counted on the event loop that answers (one per
    front), so plain dict updates suffice."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str], int] = {}

    def count(self, api: str, code: str, error: str) -> None:
        key = (api, code, error)
        self._counts[key] = self._counts.get(key, 0) + 1

    def total(self) -> int:
        return sum(self._counts.values())

    def metric(self, labels: dict[str, str]) -> Metric:
        """``metaledger_requests_rejected_total{api,code,error}``."""
        return (
            "metaledger_requests_rejected_total",
            "Client requests refused (answered with an error status), by API, gRPC status "
            "and error class; logged at DEBUG only.",
            "counter",
            [
                ({**labels, "api": api, "code": code, "error": error}, value)
                for (api, code, error), value in sorted(self._counts.items())
            ],
        )


#: This process's refusals (a process serves one node; the node's metrics show them).
REJECTIONS = Rejections()


def health_body(reason: str) -> tuple[bytes, bytes]:
    """(body, status line) of ``GET /health``: etcd's ``{"health":"true"}`` when
    ``reason`` is empty, else 503 with the reason."""
    if not reason:
        return b'{"health":"true","reason":""}\n', b"200 OK"
    body = json.dumps({"health": "false", "reason": reason}, separators=(",", ":"))
    return body.encode() + b"\n", b"503 Service Unavailable"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class MetricsServer:
    """Serves ``collect()`` at ``GET /metrics`` and ``health()`` at ``GET /health``."""

    def __init__(
        self,
        collect: Callable[[], Iterable[Metric]],
        health: HealthCheck | None = None,
        ssl: SSLContext | None = None,
    ) -> None:
        self._ssl = ssl  # HTTPS (nameserver.tls)
        self._collect = collect
        self._health = health
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(
            self._handle, host, port, **tls_arguments(self._ssl)
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
            self._server = None

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            if len(head) > MAX_REQUEST_HEAD_BYTES:
                raise ValueError("request head too large")
            parts = head.split(b"\r\n", 1)[0].split()
            path = parts[1].split(b"?")[0] if len(parts) == 3 and parts[0] == b"GET" else b""
            if path == b"/metrics":
                body = render(self._collect()).encode()
                status = b"200 OK"
                ctype = b"text/plain; version=0.0.4; charset=utf-8"
            elif path == b"/health":
                body, status = health_body(self._health() if self._health is not None else "")
                ctype = b"application/json"
            else:
                body, status, ctype = (
                    b"not found: try GET /metrics or GET /health\n",
                    b"404 Not Found",
                    b"text/plain",
                )
            writer.write(
                b"HTTP/1.1 " + status + b"\r\nContent-Type: " + ctype
                + b"\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n" + body
            )  # fmt: skip
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ValueError):
            pass  # a broken or slow request: just close
        except Exception:  # a bug in a collector must not take the endpoint down
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
