"""A fuzz run against each port of real nodes (issue 20, "What must hold"): with random and
malformed input the node stays up, answers others, and never answers UNKNOWN or INTERNAL
nor shows a Python traceback, to the client or in its log.

- client (gRPC): every method of every service the node serves, enumerated from the
  generated protos, gets random bytes, truncated and bit-flipped messages, messages with
  random field values, invalid UTF-8, nesting past protobuf's limit, an oversized payload;
  unary and streaming, through identity serializers. After each service's batch the node
  still answers Put, Range and Admin.Status.
- remoting: bad frame lengths, bad headers, unknown codes, every request code the
  nameserver serves with garbage ext fields and bodies. Each connection gets answers that
  are not internal errors, or is closed; GET_ROUTEINFO_BY_TOPIC keeps being answered on
  another connection.
- metrics (HTTP): garbage requests, huge heads, slow partial requests (bounded).
- peer: ``test_fuzz_peer_port.py`` (3 nodes).
- TLS: ClientHellos cut short, through :func:`fuzz_handshakes`, on every port of a node
  serving TLS with client certificates (then a real TLS client is served on each), and on
  the plain-text ports (where they are garbage from a TLS client pointed at the wrong port).

Seeded: each test prints its seed; ``METALEDGER_FUZZ_SEED=<seed>`` replays it and
``METALEDGER_FUZZ_CASES=<k>`` runs k times the cases (the ``slow`` tests run 4 times).
Inputs come from :mod:`tests.fuzz_inputs`.
"""

from __future__ import annotations

import contextlib
import random
import socket
import ssl
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2
from raftlog.native.auth import GREETING_BYTES, MAGIC
from rmq.codec import FrameDecoder, RemotingCommand, encode
from rmq.codes import RequestCode, ResponseCode
from tests import fuzz_inputs as fz
from tests.harness import CHANNEL_OPTIONS, Cluster
from tests.integration.peer_wire import connect, recv_exactly, wait_closed
from tests.tls_harness import Pki, TlsCluster

pytestmark = pytest.mark.integration

BAD_CODES = (grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL)
#: details that mean the client never got the node's status (or got Python's insides)
BAD_DETAILS = ("Traceback", "metadata size exceeds")
CALL_TIMEOUT_S = 3.0  # a unary call; streams get STREAM_TIMEOUT_S, then DEADLINE_EXCEEDED
STREAM_TIMEOUT_S = 1.0
CLOSE_TIMEOUT_S = 15.0  # a fuzzed connection must be answered and closed within this
WORKERS = 8
#: marks of a fault of the node itself in its log: none may appear while it is fuzzed
FAULT_MARKS = ("Traceback", " ERROR ", " CRITICAL ")


@dataclass
class Fuzzed:
    """What one test saw: failures (each names its input) and counts by outcome."""

    seed: int
    failures: list[str]
    outcomes: dict[str, int]

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def check(self) -> None:
        print(f"fuzz seed {self.seed}: outcomes {sorted(self.outcomes.items())}")
        assert not self.failures, (
            f"{len(self.failures)} fuzz failures (replay: {fz.SEED_ENV}={self.seed}):\n"
            + "\n".join(self.failures[:30])
        )


def start_fuzz(name: str) -> tuple[random.Random, Fuzzed]:
    seed = fz.fuzz_seed()
    print(f"{name}: {fz.SEED_ENV}={seed}")
    return random.Random(f"{seed}:{name}"), Fuzzed(seed, [], {})


def brief(data: bytes, n: int = 48) -> str:
    return f"{len(data)} bytes {data[:n]!r}{'...' if len(data) > n else ''}"


def log_mark(c: Cluster, i: int) -> int:
    return c.nodes[i].log_path.stat().st_size


def log_faults(c: Cluster, i: int, mark: int) -> list[str]:
    """Lines of node i's log since ``mark`` that show a fault of the node (an ERROR, a
    traceback), with the three lines after each."""
    with open(c.nodes[i].log_path, "rb") as f:
        f.seek(mark)
        lines = f.read().decode(errors="replace").splitlines()
    return [
        "\n".join(lines[k : k + 4])
        for k, line in enumerate(lines)
        if any(m in line for m in FAULT_MARKS)
    ]


def assert_clean_log(c: Cluster, i: int, mark: int, fuzzed: Fuzzed) -> None:
    faults = log_faults(c, i, mark)
    assert not faults, (
        f"{c.nodes[i].id} logged faults while fuzzed (replay: {fz.SEED_ENV}={fuzzed.seed}):\n"
        + "\n---\n".join(faults[:10])
    )


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("fuzz"), n=1)
    failed = True
    try:
        c.wait_ready(60)
        yield c
        failed = False
    finally:
        c.close(failed=failed)


def assert_serving(c: Cluster, i: int = 0) -> None:
    """Node i still answers a write, a linearizable read and Admin.Status."""
    proc = c.procs[i]
    assert c.is_running(i), (
        f"{c.nodes[i].id} exited with {proc.returncode if proc else None}:\n{c.log_tail(i)}"
    )
    c.disarm_alarms(i)
    c.put_retrying(i, b"/fuzz/alive", b"yes")
    resp = c.stub(i).Range(rpc_pb2.RangeRequest(key=b"/fuzz/alive"), timeout=10)
    assert [kv.value for kv in resp.kvs] == [b"yes"]
    assert c.status(i, timeout=10).has_quorum


# --------------------------------------------------------------------------- gRPC
def grpc_call(channel: grpc.Channel, method: fz.Method, payload: bytes) -> tuple[str, str]:
    """(status code name, details) of one call of ``method`` with raw ``payload``."""
    path = method.path
    try:
        if method.client_streaming:
            # one to three messages on the stream: the payload, then valid or empty ones
            call = channel.stream_stream(path)
            responses = call(iter([payload, b"", payload][: 1 + len(payload) % 3]),
                             timeout=STREAM_TIMEOUT_S)  # fmt: skip
            for _ in responses:
                pass
        elif method.server_streaming:
            for _ in channel.unary_stream(path)(payload, timeout=STREAM_TIMEOUT_S):
                pass
        else:
            channel.unary_unary(path)(payload, timeout=CALL_TIMEOUT_S)
    except grpc.RpcError as exc:
        return exc.code().name, exc.details() or ""
    return "OK", ""


def fuzz_grpc(c: Cluster, scale: int, name: str) -> Fuzzed:
    rng, fuzzed = start_fuzz(name)
    mark = log_mark(c, 0)
    methods = fz.served_methods()
    by_service: dict[str, list[fz.Method]] = {}
    for m in methods:
        by_service.setdefault(m.path.split("/")[1], []).append(m)
    oversized = set(rng.sample([m.path for m in methods], 3))
    # methods nobody serves (a client of another version, a typo): UNIMPLEMENTED
    by_service["unknown"] = [
        fz.Method(path, rpc_pb2.RangeRequest, streaming, streaming)
        for path in ("/etcdserverpb.KV/Nope", "/nope.Nope/Range", "/etcdserverpb.KV/", "/x")
        for streaming in (False, True)
    ]
    channel = grpc.insecure_channel(c.endpoints[0], options=CHANNEL_OPTIONS)
    try:
        with ThreadPoolExecutor(WORKERS) as pool:
            for service, group in by_service.items():
                jobs = []
                for method in group:
                    cases = fz.grpc_payloads(rng, method, 8 * scale)
                    if method.path in oversized:  # over the node's 2 MiB request limit
                        cases.append(("oversized", rng.randbytes(2 * 1024 * 1024 + 1)))
                    for kind, payload in cases:
                        jobs.append(
                            (
                                method,
                                kind,
                                payload,
                                pool.submit(grpc_call, channel, method, payload),
                            )
                        )
                for method, kind, payload, job in jobs:
                    code, details = job.result()
                    fuzzed.count(code)
                    unknown_ok = service != "unknown" or code == "UNIMPLEMENTED"
                    if (
                        code in (b.name for b in BAD_CODES)
                        or any(bad in details for bad in BAD_DETAILS)
                        or not unknown_ok
                    ):
                        fuzzed.failures.append(
                            f"{method.path} {kind} ({brief(payload)}): {code} {details[:300]!r}"
                        )
                try:
                    assert_serving(c)
                except (AssertionError, grpc.RpcError) as exc:
                    fuzzed.failures.append(
                        f"after the {service} batch the node stopped serving: {exc!r}"
                    )
                    break
    finally:
        channel.close()
    fuzzed.check()
    assert_clean_log(c, 0, mark, fuzzed)
    return fuzzed


def test_every_grpc_method_answers_malformed_requests_cleanly(node: Cluster) -> None:
    fuzzed = fuzz_grpc(node, fz.fuzz_scale(), "grpc")
    assert fuzzed.outcomes.get("INVALID_ARGUMENT", 0) > 0  # the inputs did reach decoding


@pytest.mark.slow
def test_every_grpc_method_answers_malformed_requests_cleanly_many_cases(node: Cluster) -> None:
    fuzz_grpc(node, 4 * fz.fuzz_scale(), "grpc-slow")


# --------------------------------------------------------------------------- raw sockets
def send_and_drain(port: int, data: bytes, timeout: float = CLOSE_TIMEOUT_S) -> tuple[bytes, bool]:
    """Send ``data`` on a new connection, half-close it, read what comes until the node
    closes it. Returns (what came, whether the node closed it within ``timeout``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        # OSError: the node may have closed it already (ENOTCONN at the shutdown)
        with contextlib.suppress(OSError):
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)  # no more: the node sees the end at once
        got = bytearray()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(got), False
            s.settimeout(left)
            try:
                chunk = s.recv(65_536)
            except TimeoutError:
                return bytes(got), False
            except OSError:  # reset, broken pipe, or not connected any more: closed
                return bytes(got), True
            if not chunk:
                return bytes(got), True
            got += chunk


# --------------------------------------------------------------------------- remoting
ROUTE_PROBE = RemotingCommand.request(
    RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "fuzz-probe"}, opaque=1
)


def remoting_answers(port: int, sock: socket.socket | None = None) -> RemotingCommand:
    """GET_ROUTEINFO_BY_TOPIC's answer (on ``sock``, else a new connection)."""
    own = sock is None
    s = sock or socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.settimeout(10)
        s.sendall(encode(ROUTE_PROBE))
        decoder = FrameDecoder()
        while True:
            data = s.recv(65_536)
            if not data:
                raise ConnectionError("the node closed the probe connection")
            replies = decoder.feed(data)
            if replies:
                return replies[0]
    finally:
        if own:
            s.close()


def check_remoting_case(port: int, kind: str, data: bytes) -> tuple[list[str], list[str]]:
    """(problems, outcomes) of one connection sending ``data``."""
    got, closed = send_and_drain(port, data)
    what = f"remoting {kind} ({brief(data)})"
    problems: list[str] = []
    if not closed:
        problems.append(f"{what}: the connection was neither answered and closed")
    try:
        replies = FrameDecoder().feed(got)
    except Exception as exc:
        return [*problems, f"{what}: the answer does not decode: {exc!r} ({brief(got)})"], []
    outcomes = [ResponseCode(r.code).name if r.code in ResponseCode._value2member_map_
                else str(r.code) for r in replies] or ["closed"]  # fmt: skip
    for r in replies:
        remark = r.remark or ""
        if not r.is_response:
            problems.append(f"{what}: an answer without the response flag: {r}")
        if "internal error" in remark or "Traceback" in remark:
            problems.append(f"{what}: answered {r.code} {remark[:300]!r}")
        if r.code != ResponseCode.SUCCESS and not remark:
            problems.append(f"{what}: answered code {r.code} with no remark naming the problem")
    return problems, outcomes


def fuzz_remoting(c: Cluster, scale: int, name: str) -> Fuzzed:
    rng, fuzzed = start_fuzz(name)
    mark = log_mark(c, 0)
    port = c.nodes[0].remoting_port
    cases = fz.remoting_cases(rng, 2 * scale)
    rng.shuffle(cases)
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as held,
        ThreadPoolExecutor(WORKERS) as pool,
    ):
        for start in range(0, len(cases), 40):
            batch = cases[start : start + 40]
            for problems, outcomes in pool.map(
                lambda case: check_remoting_case(port, *case), batch
            ):
                for outcome in outcomes:
                    fuzzed.count(outcome)
                fuzzed.failures.extend(problems)
            # the node keeps serving others: on a connection held open, and on a new one
            for probe in (remoting_answers(port, held), remoting_answers(port)):
                if probe.code not in (ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST):
                    fuzzed.failures.append(f"the route probe got {probe.code} {probe.remark!r}")
    assert_serving(c)
    fuzzed.check()
    assert_clean_log(c, 0, mark, fuzzed)
    return fuzzed


def test_the_remoting_port_answers_malformed_frames_cleanly(node: Cluster) -> None:
    fuzz_remoting(node, fz.fuzz_scale(), "remoting")


@pytest.mark.slow
def test_the_remoting_port_answers_malformed_frames_cleanly_many_cases(node: Cluster) -> None:
    fuzz_remoting(node, 4 * fz.fuzz_scale(), "remoting-slow")


# --------------------------------------------------------------------------- metrics
def scrape_ok(port: int) -> bool:
    got, closed = send_and_drain(port, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", 10)
    return closed and got.startswith(b"HTTP/1.1 200 OK") and b"metaledger_" in got


def test_the_metrics_port_survives_garbage_http_and_slow_requests(node: Cluster) -> None:
    rng, fuzzed = start_fuzz("metrics")
    mark = log_mark(node, 0)
    port = node.nodes[0].metrics_port
    cases = fz.http_cases(rng, 10 * fz.fuzz_scale())
    with ThreadPoolExecutor(WORKERS) as pool:
        for (kind, data), (got, closed) in zip(
            cases, pool.map(lambda case: send_and_drain(port, case[1]), cases), strict=True
        ):
            fuzzed.count(kind)
            if not closed:
                fuzzed.failures.append(f"http {kind} ({brief(data)}): not closed")
            if got and not got.startswith(b"HTTP/1.1 "):
                fuzzed.failures.append(f"http {kind}: answered {brief(got)}")
            if b"Traceback" in got:
                fuzzed.failures.append(f"http {kind}: answered a traceback {brief(got, 300)}")
    # slowloris, bounded: 40 connections dribbling a head never finished; the node serves
    # a scrape meanwhile and closes each of them (metrics.READ_TIMEOUT_S, 5 s)
    slow = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(40)]
    try:
        for s in slow:
            s.sendall(b"GET /metrics HTTP/1.1\r\n")
        for _ in range(3):
            for s in slow:
                with contextlib.suppress(OSError):
                    s.sendall(b"X-Slow: 1\r\n")
            if not scrape_ok(port):
                fuzzed.failures.append("a scrape failed while 40 slow requests were open")
            time.sleep(0.2)  # the dribble's pace (not a wait for a condition)
        for s in slow:
            if wait_closed(s, 20.0) is None:
                fuzzed.failures.append("a slow request was never closed")
                break
    finally:
        for s in slow:
            s.close()
    if not scrape_ok(port):
        fuzzed.failures.append("the metrics port stopped answering")
    fuzzed.check()
    assert_serving(node)
    assert_clean_log(node, 0, mark, fuzzed)


# --------------------------------------------------------------------------- TLS hook
def fuzz_handshakes(
    port: int, *, tls: bool, rng: random.Random, fuzzed: Fuzzed, probe: object
) -> None:
    """ClientHellos cut short (each on its own connection, then half-closed) to ``port``:
    each connection must be closed by the node within CLOSE_TIMEOUT_S, nothing it sends
    may be a traceback, and ``probe()`` (a request on a fresh connection) must still
    succeed afterwards. With ``tls=True`` the port serves TLS, and the cut hellos are what
    a broken TLS client sends; with ``tls=False`` they are garbage to a plain-text port
    (a TLS client pointed at it); the TLS run's probes complete a real TLS handshake."""
    for kind, data in fz.client_hello_cut_short(rng):
        got, closed = send_and_drain(port, data)
        fuzzed.count(f"{'tls' if tls else 'plain'}-{kind.split('-')[0]}")
        if not closed:
            fuzzed.failures.append(f"port {port} (tls={tls}) {kind}: not closed")
        if b"Traceback" in got:
            fuzzed.failures.append(f"port {port} (tls={tls}) {kind}: {brief(got, 300)}")
    assert callable(probe)
    try:
        probe()
    except Exception as exc:
        fuzzed.failures.append(f"port {port} (tls={tls}): the probe failed after: {exc!r}")


def test_client_hellos_cut_short_on_every_port(node: Cluster) -> None:
    """Plain-text ports (a TLS client pointed at them): client, remoting, metrics, peer."""
    rng, fuzzed = start_fuzz("tls-hello")
    mark = log_mark(node, 0)
    spec = node.nodes[0]

    def peer_greets() -> None:
        with connect(spec.peer_port) as s:
            assert recv_exactly(s, GREETING_BYTES).startswith(MAGIC)

    probes = {
        spec.client_port: lambda: node.status(0, timeout=10),
        spec.remoting_port: lambda: remoting_answers(spec.remoting_port),
        spec.metrics_port: lambda: scrape_ok(spec.metrics_port) or 1 / 0,
        spec.peer_port: peer_greets,
    }
    for port, probe in probes.items():
        fuzz_handshakes(port, tls=False, rng=rng, fuzzed=fuzzed, probe=probe)
    fuzzed.check()
    assert_serving(node)
    assert_clean_log(node, 0, mark, fuzzed)


def test_client_hellos_cut_short_on_every_tls_port(tmp_path: Path) -> None:
    """The same cut ClientHellos against a node serving TLS (client certificates required)
    on all four ports; after them a real TLS client is served on each."""
    pki = Pki.make(tmp_path / "pki", nodes=1)
    c = TlsCluster(tmp_path / "c", 1, pki, pki.serve_flags(peer=True))
    failed = True
    try:
        c.wait_ready(60)
        rng, fuzzed = start_fuzz("tls-hello-tls")
        mark = log_mark(c, 0)
        spec = c.nodes[0]
        ctx = pki.ssl_context()

        def tls_socket(port: int) -> ssl.SSLSocket:
            raw = socket.create_connection(("127.0.0.1", port), timeout=10)
            return ctx.wrap_socket(raw, server_hostname="127.0.0.1")

        def remoting_over_tls() -> None:
            with tls_socket(spec.remoting_port) as s:
                remoting_answers(spec.remoting_port, s)

        def metrics_over_tls() -> None:
            with tls_socket(spec.metrics_port) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                got = b""
                while chunk := s.recv(65_536):
                    got += chunk
            assert got.startswith(b"HTTP/1.1 200 OK") and b"metaledger_" in got, got[:200]

        def peer_over_tls() -> None:
            with tls_socket(spec.peer_port) as s:
                assert recv_exactly(s, GREETING_BYTES).startswith(MAGIC)

        probes = {
            spec.client_port: lambda: c.status(0, timeout=10),
            spec.remoting_port: remoting_over_tls,
            spec.metrics_port: metrics_over_tls,
            spec.peer_port: peer_over_tls,
        }
        for port, probe in probes.items():
            fuzz_handshakes(port, tls=True, rng=rng, fuzzed=fuzzed, probe=probe)
        fuzzed.check()
        assert_serving(c)
        assert_clean_log(c, 0, mark, fuzzed)
        failed = False
    finally:
        c.close(failed=failed)


def test_the_client_port_survives_raw_bytes_below_grpc(node: Cluster) -> None:
    """Bytes that are no HTTP/2 (or HTTP/2 frames that are garbage) on the gRPC port: each
    connection is closed, and the node answers a real client after."""
    rng, fuzzed = start_fuzz("client-raw")
    mark = log_mark(node, 0)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    cases = [
        ("http1", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
        ("preface-cut", preface[:10]),
        ("preface-then-garbage", preface + rng.randbytes(200)),
        # a frame header announcing 16 MiB of a SETTINGS frame, then nothing
        ("preface-huge-frame", preface + b"\xff\xff\xff\x04\x00\x00\x00\x00\x00"),
        ("preface-bad-settings", preface + b"\x00\x00\x05\x04\x00\x00\x00\x00\x00" + b"\x01" * 5),
    ]
    cases += [("random", rng.randbytes(rng.choice((1, 24, 500)))) for _ in range(10)]
    for kind, data in cases:
        got, closed = send_and_drain(node.nodes[0].client_port, data)
        fuzzed.count(kind)
        if not closed:
            fuzzed.failures.append(f"client port {kind} ({brief(data)}): not closed")
        if b"Traceback" in got:
            fuzzed.failures.append(f"client port {kind}: {brief(got, 300)}")
    fuzzed.check()
    assert_serving(node)
    assert_clean_log(node, 0, mark, fuzzed)
