"""nameserver.grpc.guard through nameserver.server.MethodTable, on a real grpc.aio server on
loopback (no metaledger node): undecodable requests of every handler kind answer
INVALID_ARGUMENT naming the message, unimplemented methods UNIMPLEMENTED naming the method,
and nothing is logged above DEBUG."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import grpc.aio
import pytest

from nameserver.errors import InvalidArgument, UndecodableRequest
from nameserver.grpc.guard import Undecodable, guard_handler, lenient
from nameserver.grpc.methods import MethodTable
from nameserver.grpc.status import to_status
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc

GARBAGE = b"\x0f"  # a field of wire type 7: no message decodes it


class _KV(rpc_pb2_grpc.KVServicer):  # type: ignore[misc]
    async def Put(self, request: Any, context: Any) -> Any:
        return rpc_pb2.PutResponse(prev_kv={"key": request.key})


class _Lease(rpc_pb2_grpc.LeaseServicer):  # type: ignore[misc]
    """LeaseKeepAlive turns errors into statuses itself (as the real one does)."""

    async def LeaseKeepAlive(self, requests: Any, context: Any) -> Any:
        try:
            async for request in requests:
                yield rpc_pb2.LeaseKeepAliveResponse(ID=request.ID, TTL=5)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:
            code, message = to_status(exc)
            await context.abort(code, message)


class _Maintenance(rpc_pb2_grpc.MaintenanceServicer):  # type: ignore[misc]
    async def Snapshot(self, request: Any, context: Any) -> Any:
        yield rpc_pb2.SnapshotResponse(blob=b"x")


def _swallowing_stream() -> grpc.GenericRpcHandler:
    """A stream handler that ends quietly on any error (as Watch's reader does)."""

    async def chat(requests: Any, context: Any) -> AsyncIterator[Any]:
        try:
            async for request in requests:
                yield rpc_pb2.RangeResponse(count=len(request.key))
        except InvalidArgument:
            return

    async def total(requests: Any, context: Any) -> Any:
        n = 0
        async for request in requests:
            n += len(request.key)
        return rpc_pb2.RangeResponse(count=n)

    handlers = {
        "Chat": grpc.stream_stream_rpc_method_handler(
            chat,
            request_deserializer=rpc_pb2.RangeRequest.FromString,
            response_serializer=rpc_pb2.RangeResponse.SerializeToString,
        ),
        "Total": grpc.stream_unary_rpc_method_handler(
            total,
            request_deserializer=rpc_pb2.RangeRequest.FromString,
            response_serializer=rpc_pb2.RangeResponse.SerializeToString,
        ),
    }
    return grpc.method_handlers_generic_handler("test.Streams", handlers)


def _run(body: Callable[[grpc.aio.Channel], Awaitable[None]]) -> None:
    async def main() -> None:
        server = grpc.aio.server()
        table = MethodTable()
        rpc_pb2_grpc.add_KVServicer_to_server(_KV(), table)
        rpc_pb2_grpc.add_LeaseServicer_to_server(_Lease(), table)
        rpc_pb2_grpc.add_MaintenanceServicer_to_server(_Maintenance(), table)
        table.add_generic_rpc_handlers((_swallowing_stream(),))
        server.add_generic_rpc_handlers((table,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                await body(channel)
        finally:
            await server.stop(None)

    asyncio.run(main())


async def _refused(call: Awaitable[Any]) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await call
    return err.value


async def _drain(call: Any) -> list[Any]:
    return [item async for item in call]


def test_every_handler_kind_refuses_undecodable_requests(caplog: pytest.LogCaptureFixture) -> None:
    async def body(channel: grpc.aio.Channel) -> None:
        cases = [
            (channel.unary_unary("/etcdserverpb.KV/Put")(GARBAGE, timeout=5), "PutRequest"),
            (
                _drain(channel.unary_stream("/etcdserverpb.Maintenance/Snapshot")(GARBAGE)),
                "SnapshotRequest",
            ),
            (
                _drain(
                    channel.stream_stream("/etcdserverpb.Lease/LeaseKeepAlive")(
                        iter([rpc_pb2.LeaseKeepAliveRequest(ID=7).SerializeToString(), GARBAGE])
                    )
                ),
                "LeaseKeepAliveRequest",
            ),
            (
                _drain(channel.stream_stream("/test.Streams/Chat")(iter([GARBAGE]), timeout=5)),
                "RangeRequest",
            ),
            (
                channel.stream_unary("/test.Streams/Total")(iter([b"", GARBAGE]), timeout=5),
                "RangeRequest",
            ),
        ]
        for call, message in cases:
            err = await _refused(call)
            assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, (message, err)
            assert err.details().startswith(f"request: cannot decode etcdserverpb.{message}")
        # decodable requests still reach the handlers
        put = channel.unary_unary(
            "/etcdserverpb.KV/Put",
            request_serializer=rpc_pb2.PutRequest.SerializeToString,
            response_deserializer=rpc_pb2.PutResponse.FromString,
        )
        assert (await put(rpc_pb2.PutRequest(key=b"k"), timeout=5)).prev_kv.key == b"k"

    with caplog.at_level(logging.DEBUG):
        _run(body)
    loud = [r for r in caplog.records if r.levelno > logging.DEBUG and "grpc" in r.name]
    assert not loud, [r.getMessage() for r in loud]
    assert "cannot decode etcdserverpb.PutRequest" in caplog.text  # at DEBUG


def test_unimplemented_methods_name_themselves_without_an_error_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(channel: grpc.aio.Channel) -> None:
        stub = rpc_pb2_grpc.KVStub(channel)
        err = await _refused(stub.Range(rpc_pb2.RangeRequest(key=b"k"), timeout=5))
        assert err.code() == grpc.StatusCode.UNIMPLEMENTED
        assert (
            err.details() == "metaledger: /etcdserverpb.KV/Range is not implemented by this server"
        )
        m = rpc_pb2_grpc.MaintenanceStub(channel)
        err = await _refused(m.HashKV(rpc_pb2.HashKVRequest(), timeout=5))
        assert err.code() == grpc.StatusCode.UNIMPLEMENTED and "HashKV" in err.details()

    with caplog.at_level(logging.INFO):
        _run(body)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


def test_lenient_deserializer_names_the_message_and_depth() -> None:
    parse = lenient(rpc_pb2.TxnRequest.FromString, "/etcdserverpb.KV/Txn")
    assert isinstance(parse(b""), rpc_pb2.TxnRequest)
    bad = parse(GARBAGE)
    assert isinstance(bad, Undecodable)
    assert bad.message == (
        "request: cannot decode etcdserverpb.TxnRequest: the payload is not a valid "
        "protobuf message of this type (1 bytes)"
    )
    op = rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"k")).SerializeToString()
    deep = _field(2, op)  # TxnRequest.success (2) holds RequestOp.request_txn (4) ...
    for _ in range(60):
        deep = _field(2, _field(4, deep))
    too_deep = parse(deep)
    assert isinstance(too_deep, Undecodable)
    assert "nested deeper than protobuf's limit" in too_deep.message


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, body: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(body)) + body


def test_decoded_requests_keep_no_unknown_fields() -> None:
    parse = lenient(rpc_pb2.PutRequest.FromString, "/etcdserverpb.KV/Put")
    group = b""
    for _ in range(99):  # field 15 as a group, nested: decodes here, not one level deeper
        group = bytes([15 << 3 | 3]) + group + bytes([15 << 3 | 4])
    known = rpc_pb2.PutRequest(key=b"k", value=b"v").SerializeToString()
    request = parse(known + group + b"\xa0\x01\x07")  # and field 20 = 7, a varint
    assert isinstance(request, rpc_pb2.PutRequest)
    assert request.SerializeToString() == known


def test_guarding_twice_changes_nothing() -> None:
    handler = grpc.unary_unary_rpc_method_handler(
        lambda r, c: r, request_deserializer=rpc_pb2.PutRequest.FromString
    )
    once = guard_handler(handler, "/x/Y")
    assert guard_handler(once, "/x/Y") is once
    assert once.request_deserializer is not handler.request_deserializer


def test_undecodable_request_is_an_invalid_request() -> None:
    code, message = to_status(UndecodableRequest("request: cannot decode x"))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and message == "request: cannot decode x"


def test_a_table_with_a_request_limit_refuses_larger_payloads_undecoded() -> None:
    async def main() -> None:
        server = grpc.aio.server()
        table = MethodTable(max_request_bytes=100)
        rpc_pb2_grpc.add_KVServicer_to_server(_KV(), table)
        table.add_generic_rpc_handlers((_swallowing_stream(),))
        server.add_generic_rpc_handlers((table,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                put = channel.unary_unary("/etcdserverpb.KV/Put")
                at_limit = rpc_pb2.PutRequest(key=b"k", value=b"v" * 95).SerializeToString()
                assert len(at_limit) == 100
                await put(at_limit, timeout=5)
                # one byte more: refused, even though it is not even a valid message
                err = await _refused(put(at_limit + b"\x0f", timeout=5))
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.details() == (
                    "etcdserver: request is too large: 101 bytes > limit max_request_bytes=100"
                )
                chat = channel.stream_stream("/test.Streams/Chat")
                err = await _refused(_drain(chat(iter([b"\x0a\x01k", b"x" * 101]), timeout=5)))
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "max_request_bytes=100" in err.details()
        finally:
            await server.stop(None)

    asyncio.run(main())
