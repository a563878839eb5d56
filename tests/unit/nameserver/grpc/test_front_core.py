"""nameserver.grpc.front.FrontCore: the core endpoint over a socketpair, with a small
guarded handler table, speaking the frames the Go front speaks."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import pytest

from nameserver.config import ServerConfig
from nameserver.grpc import front_process as front_module
from nameserver.grpc.front import FrontCore
from nameserver.grpc.front_wire import FrontResponse, ResponseDecoder, encode_request
from nameserver.grpc.guard import guard_handler
from nameserver.startup import StartupError
from protos.etcdserverpb import rpc_pb2
from raftlog import ConfigError

MAX_REQUEST_BYTES = 200
OK, NOT_FOUND = grpc.StatusCode.OK.value[0], grpc.StatusCode.NOT_FOUND.value[0]
INVALID_ARGUMENT = grpc.StatusCode.INVALID_ARGUMENT.value[0]
INTERNAL = grpc.StatusCode.INTERNAL.value[0]
DEADLINE_EXCEEDED = grpc.StatusCode.DEADLINE_EXCEEDED.value[0]


class Behaviours:
    """The fake methods (index = position in METHODS)."""

    def __init__(self) -> None:
        self.release: dict[int, asyncio.Event] = {}
        self.cancelled: list[int] = []

    async def ok(self, request: rpc_pb2.RangeRequest, context: Any) -> rpc_pb2.RangeResponse:
        return rpc_pb2.RangeResponse(count=request.limit)

    async def abort(self, request: rpc_pb2.RangeRequest, context: Any) -> None:
        await context.abort(grpc.StatusCode.NOT_FOUND, "etcdserver: not here")

    async def echo(self, request: rpc_pb2.RangeRequest, context: Any) -> bytes:
        left = context.time_remaining()
        context.set_trailing_metadata(
            (
                ("token", dict(context.invocation_metadata()).get("token", "-")),
                ("peer", context.peer()),
                ("deadline", "none" if left is None else "set"),
                ("auth", repr(context.auth_context())),
            )
        )
        return rpc_pb2.RangeResponse(count=7).SerializeToString()  # pre-encoded: passed on

    async def boom(self, request: rpc_pb2.RangeRequest, context: Any) -> None:
        raise RuntimeError("boom")

    async def wait(self, request: rpc_pb2.RangeRequest, context: Any) -> rpc_pb2.RangeResponse:
        event = self.release.setdefault(request.limit, asyncio.Event())
        try:
            await event.wait()
        except asyncio.CancelledError:
            self.cancelled.append(request.limit)
            raise
        return rpc_pb2.RangeResponse(count=request.limit)


METHODS = ["/t.T/Ok", "/t.T/Abort", "/t.T/Echo", "/t.T/Boom", "/t.T/Wait"]


def _table(b: Behaviours) -> dict[str, grpc.RpcMethodHandler]:
    behaviours: list[Callable[..., Awaitable[Any]]] = [b.ok, b.abort, b.echo, b.boom, b.wait]
    return {
        path: guard_handler(
            grpc.unary_unary_rpc_method_handler(
                fn,
                request_deserializer=rpc_pb2.RangeRequest.FromString,
                response_serializer=rpc_pb2.RangeResponse.SerializeToString,
            ),
            path,
            MAX_REQUEST_BYTES,
        )
        for path, fn in zip(METHODS, behaviours, strict=True)
    }


class Front:
    """The test's end of the socketpair: writes requests, reads responses."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.decoder = ResponseDecoder()
        self.got: list[FrontResponse] = []

    async def responses(self, n: int, timeout: float = 5.0) -> list[FrontResponse]:
        async def read() -> None:
            while len(self.got) < n:
                data = await self.reader.read(65536)
                assert data, "the core closed the connection"
                self.decoder.receive_data(data)
                self.got.extend(self.decoder)

        await asyncio.wait_for(read(), timeout)
        out, self.got = self.got[:n], self.got[n:]
        return out


async def until(condition: Callable[[], bool], what: str, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, f"waited {timeout} s for {what}"
        await asyncio.sleep(0.002)


def run(test: Callable[[FrontCore, Front, Behaviours], Awaitable[None]]) -> None:
    async def main() -> None:
        behaviours = Behaviours()
        core = FrontCore(_table(behaviours).get, METHODS)
        ours, theirs = socket.socketpair()
        loop = asyncio.get_running_loop()
        await loop.connect_accepted_socket(core.connection, ours)
        reader, writer = await asyncio.open_connection(sock=theirs)
        try:
            await test(core, Front(reader, writer), behaviours)
        finally:
            writer.close()
            await core.close()

    asyncio.run(main())


def test_an_ok_call_answers_with_the_serialized_response() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        front.writer.write(encode_request(1, 0, rpc_pb2.RangeRequest(limit=3).SerializeToString()))
        (r,) = await front.responses(1)
        assert (r.call_id, r.code, r.details, r.trailers) == (1, OK, "", ())
        assert rpc_pb2.RangeResponse.FromString(r.payload).count == 3

    run(test)


def test_an_abort_is_its_code_and_details() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        front.writer.write(encode_request(2, 1, b""))
        (r,) = await front.responses(1)
        assert (r.call_id, r.code, r.details, r.payload) == (
            2,
            NOT_FOUND,
            "etcdserver: not here",
            b"",
        )

    run(test)


def test_token_peer_deadline_and_trailing_metadata() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        peer = "ipv4:127.0.0.1:54321"
        front.writer.write(
            encode_request(3, 2, b"", timeout_ms=5000, metadata=(("token", "tok.1"),), peer=peer)
        )
        front.writer.write(encode_request(4, 2, b"", peer=peer))
        r, s = sorted(await front.responses(2))
        assert r.code == OK and rpc_pb2.RangeResponse.FromString(r.payload).count == 7
        assert dict(r.trailers) == {"token": "tok.1", "peer": peer, "deadline": "set", "auth": "{}"}
        assert dict(s.trailers)["token"] == "-" and dict(s.trailers)["deadline"] == "none"

    run(test)


def test_an_exception_is_internal_logged_and_the_core_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        with caplog.at_level(logging.ERROR, logger="nameserver.grpc.front"):
            front.writer.write(encode_request(5, 3, b""))
            (r,) = await front.responses(1)
        assert r.code == INTERNAL and r.details == "metaledger: internal error: RuntimeError: boom"
        assert "/t.T/Boom failed" in caplog.text and "RuntimeError: boom" in caplog.text
        front.writer.write(encode_request(6, 0, b""))
        assert (await front.responses(1))[0].code == OK

    run(test)


def test_undecodable_and_too_large_requests_are_invalid_argument() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        front.writer.write(encode_request(7, 0, b"\xff\xff\xff"))
        front.writer.write(encode_request(8, 0, b"\x0a\xc8\x01" + b"k" * 200))  # key: 200 bytes
        r, s = sorted(await front.responses(2))
        assert r.code == INVALID_ARGUMENT
        assert r.details.startswith("request: cannot decode etcdserverpb.RangeRequest")
        assert s.code == INVALID_ARGUMENT
        assert s.details == (
            "etcdserver: request is too large: 203 bytes > limit max_request_bytes=200"
        )

    run(test)


def test_answers_go_out_as_calls_end_not_in_request_order() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        for call_id in (10, 11, 12):
            request = rpc_pb2.RangeRequest(limit=call_id).SerializeToString()
            front.writer.write(encode_request(call_id, 4, request))
        await until(lambda: len(b.release) == 3, "three calls started")
        for call_id in (12, 10, 11):
            b.release[call_id].set()
            (r,) = await front.responses(1)
            assert (r.call_id, r.code) == (call_id, OK)

    run(test)


def test_a_call_past_its_deadline_is_answered_cancelled_and_its_id_free_again() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        request = rpc_pb2.RangeRequest(limit=13).SerializeToString()
        front.writer.write(encode_request(13, 4, request, timeout_ms=30))
        (r,) = await front.responses(1)
        assert (r.call_id, r.code, r.details) == (13, DEADLINE_EXCEEDED, "Deadline Exceeded")
        await until(lambda: bool(b.cancelled), "the handler cancelled")
        assert b.cancelled == [13]  # the handler's work ended, as grpc.aio ends it
        request = rpc_pb2.RangeRequest(limit=14).SerializeToString()
        front.writer.write(encode_request(13, 4, request, timeout_ms=5000))  # the id again
        await until(lambda: 14 in b.release, "call 14 started")
        b.release[14].set()
        (r,) = await front.responses(1)
        assert (r.call_id, r.code) == (13, OK)
        assert rpc_pb2.RangeResponse.FromString(r.payload).count == 14

    run(test)


def test_answers_of_one_turn_are_one_write() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        (connection,) = core.connections
        transport = connection._transport
        assert transport is not None
        writes: list[int] = []
        real = transport.write

        def counted(data: Any) -> None:
            writes.append(len(data))
            real(data)

        transport.write = counted  # type: ignore[method-assign]
        front.writer.write(b"".join(encode_request(i, 0, b"") for i in range(20)))
        got = await front.responses(20)
        assert sorted(r.call_id for r in got) == list(range(20))
        assert len(writes) == 1, writes

    run(test)


def test_a_malformed_frame_closes_the_connection(caplog: pytest.LogCaptureFixture) -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        with caplog.at_level(logging.ERROR, logger="nameserver.grpc.front"):
            front.writer.write(encode_request(14, 9, b""))  # method 9: there are 5
            assert await asyncio.wait_for(front.reader.read(), 5) == b""
        assert "method index 9" in caplog.text and "closing the connection" in caplog.text

    run(test)


def test_a_second_call_with_an_id_in_flight_is_a_malformed_frame() -> None:
    async def test(core: FrontCore, front: Front, b: Behaviours) -> None:
        front.writer.write(encode_request(15, 4, b"") + encode_request(15, 4, b""))
        assert await asyncio.wait_for(front.reader.read(), 5) == b""

    run(test)


def test_methods_are_looked_up_once_and_must_be_unary() -> None:
    table = _table(Behaviours())
    with pytest.raises(ValueError, match=r"/t\.T/Missing has no handler"):
        FrontCore(table.get, ["/t.T/Ok", "/t.T/Missing"])
    table["/t.T/Stream"] = grpc.unary_stream_rpc_method_handler(lambda r, c: iter(()))
    with pytest.raises(ValueError, match="streams"):
        FrontCore(table.get, ["/t.T/Stream"])


def test_a_missing_binary_is_one_line_naming_where_it_looked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(front_module.BINARY_ENV, "/nonexistent/metaledger-front")
    monkeypatch.setattr(front_module, "BINARY_NAME", "metaledger-front-not-built")
    with pytest.raises(StartupError) as caught:
        front_module.find_binary()
    message = str(caught.value)
    assert "\n" not in message and message.startswith("--grpc-front go: no front binary (")
    assert "$METALEDGER_FRONT=/nonexistent/metaledger-front" in message
    assert "front/bin/metaledger-front-not-built" in message and "on PATH" in message
    assert message.endswith("build it with scripts/build_front.sh")


def test_an_unknown_front_is_refused() -> None:
    with pytest.raises(ConfigError, match="must be python or go"):
        ServerConfig(node_id="n0", data_dir="/tmp/x", grpc_front="rust").validate()


def test_the_fronts_tls_flags_are_the_nodes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Go front gets etcd's client TLS flags as the node has them; the identity key
    flag only beside --client-cert-auth's key (which the node writes to its stdin)."""
    from nameserver.grpc.front import GoFront
    from nameserver.tls import TlsFiles

    monkeypatch.setenv(front_module.BINARY_ENV, "/bin/true")
    plain = GoFront("127.0.0.1:1", [], 1024)
    assert plain._tls_args() == []
    files = TlsFiles("c.pem", "k.pem", "ca.pem", client_cert_auth=False)
    assert GoFront("127.0.0.1:1", [], 1024, files)._tls_args() == [
        *("--cert-file", "c.pem", "--key-file", "k.pem", "--trusted-ca-file", "ca.pem")
    ]
    auth = TlsFiles("c.pem", "k.pem", "ca.pem", client_cert_auth=True)
    assert GoFront("127.0.0.1:1", [], 1024, auth, "ab" * 16)._tls_args()[-2:] == [
        "--client-cert-auth",
        "--identity-key-stdin",
    ]
