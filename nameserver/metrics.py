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
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from ssl import SSLContext
from typing import Protocol

from nameserver.tls import tls_arguments
from raftlog.health import Health, State

log = logging.getLogger(__name__)

#: A metric: (name, help, type, [(labels, value)]).
Metric = tuple[str, str, str, list[tuple[dict[str, str], float]]]
#: What ``GET /health`` reports: "" when healthy, else why not.
HealthCheck = Callable[[], str]

MAX_REQUEST_HEAD_BYTES = 8192
READ_TIMEOUT_S = 5.0
#: The largest request body read (the JSON gateway's; etcd's gRPC limit is 1.5 MiB of
#: protobuf, which base64 and JSON make at most ~3x larger).
MAX_REQUEST_BODY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class HttpRequest:
    """One HTTP/1.1 request: header names lower-case, the body read whole."""

    method: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    peer: str = ""


class HttpHandler(Protocol):
    """Requests the metrics server hands on (the JSON gateway): ``handles(path)`` says
    which, ``serve`` answers one on the writer (the server closes the connection after)."""

    def handles(self, path: str) -> bool: ...

    def serve(
        self, request: HttpRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Awaitable[None]: ...


class BadHttp(ValueError):
    """A request this server cannot read: answered with ``status`` and closed."""

    def __init__(self, status: bytes, why: str) -> None:
        super().__init__(why)
        self.status = status


def parse_head(head: bytes) -> tuple[str, str, dict[str, str]]:
    """(method, path without the query, headers) of a request head (up to the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split()
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadHttp(b"400 Bad Request", "not an HTTP/1.x request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadHttp(b"400 Bad Request", f"malformed header line {line[:40]!r}")
        headers[name.lower()] = value.strip()
    return parts[0], parts[1].split("?")[0], headers


async def read_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, headers: dict[str, str]
) -> bytes:
    """The request body (Content-Length or chunked), at most MAX_REQUEST_BODY_BYTES;
    answers ``Expect: 100-continue`` first."""
    if headers.get("expect", "").lower() == "100-continue":
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = bytearray()
        while True:
            size_line = await reader.readuntil(b"\r\n")
            try:
                size = int(size_line.split(b";")[0].strip(), 16)
            except ValueError:
                raise BadHttp(b"400 Bad Request", "malformed chunk size") from None
            if len(body) + size > MAX_REQUEST_BODY_BYTES:
                raise BadHttp(b"413 Payload Too Large", "request body too large")
            if size == 0:
                while await reader.readuntil(b"\r\n") != b"\r\n":
                    pass  # trailers
                return bytes(body)
            body += await reader.readexactly(size)
            await reader.readexactly(2)
    length_text = headers.get("content-length", "0")
    if not length_text.isdigit():
        raise BadHttp(b"400 Bad Request", "malformed Content-Length")
    length = int(length_text)
    if length > MAX_REQUEST_BODY_BYTES:
        raise BadHttp(b"413 Payload Too Large", "request body too large")
    return await reader.readexactly(length) if length else b""


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
    """Serves ``collect()`` at ``GET /metrics``, ``health()`` at ``GET /health`` and hands
    the paths ``gateway`` handles to it (etcd's JSON gateway: :mod:`nameserver.grpc.gateway`)."""

    def __init__(
        self,
        collect: Callable[[], Iterable[Metric]],
        health: HealthCheck | None = None,
        ssl: SSLContext | None = None,
        gateway: HttpHandler | None = None,
    ) -> None:
        self._ssl = ssl  # HTTPS (nameserver.tls)
        self._collect = collect
        self._health = health
        self.gateway = gateway
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
            method, path_text, headers = parse_head(head)
            gateway = self.gateway
            if gateway is not None and gateway.handles(path_text):
                body = await asyncio.wait_for(read_body(reader, writer, headers), READ_TIMEOUT_S)
                peer = writer.get_extra_info("peername")
                request = HttpRequest(method, path_text, headers, body, str(peer or ""))
                await gateway.serve(request, reader, writer)
                return
            path = path_text.encode() if method == "GET" else b""
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
        except BadHttp as exc:
            with contextlib.suppress(Exception):
                why = str(exc).encode() + b"\n"
                writer.write(
                    b"HTTP/1.1 " + exc.status + b"\r\nContent-Type: text/plain\r\n"
                    + b"Content-Length: " + str(len(why)).encode()
                    + b"\r\nConnection: close\r\n\r\n" + why
                )  # fmt: skip
                await writer.drain()
        except (
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            TimeoutError,
            ValueError,
            ConnectionError,
        ):
            pass  # a broken or slow request, or a client gone: just close
        except Exception:  # a bug in a collector must not take the endpoint down
            log.exception("metrics request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
