"""nameserver.server.MethodTable: every service behind one generic handler, served by a
real grpc.aio server on loopback (no metaledger node)."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc
import grpc.aio
import pytest

from nameserver.grpc.methods import MethodTable
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc


class _KV(rpc_pb2_grpc.KVServicer):  # type: ignore[misc]
    async def Put(self, request: Any, context: Any) -> Any:
        resp = rpc_pb2.PutResponse()
        resp.header.revision = len(request.value)
        return resp


def _watch_only_generic() -> grpc.GenericRpcHandler:
    """A service registered the way the Watch service is: a generic handler only."""

    async def echo(request: Any, context: Any) -> Any:
        return rpc_pb2.RangeResponse(count=len(request.key))

    handler = grpc.unary_unary_rpc_method_handler(
        echo,
        request_deserializer=rpc_pb2.RangeRequest.FromString,
        response_serializer=rpc_pb2.RangeResponse.SerializeToString,
    )
    return grpc.method_handlers_generic_handler("test.Generic", {"Echo": handler})


def test_lookup_by_path_registered_then_generic_then_none() -> None:
    table = MethodTable()
    rpc_pb2_grpc.add_KVServicer_to_server(_KV(), table)
    table.add_generic_rpc_handlers((_watch_only_generic(),))

    class Details(grpc.HandlerCallDetails):  # type: ignore[misc]
        def __init__(self, method: str) -> None:
            self.method = method
            self.invocation_metadata = ()

    assert table.service(Details("/etcdserverpb.KV/Put")) is not None
    assert table.service(Details("/etcdserverpb.KV/Range")) is not None  # unimplemented, known
    assert table.service(Details("/test.Generic/Echo")) is not None
    assert table.service(Details("/etcdserverpb.KV/Nope")) is None
    assert table.service(Details("/no.Such/Thing")) is None


def test_a_server_behind_the_table_answers_and_refuses_unknown_methods() -> None:
    async def main() -> None:
        server = grpc.aio.server()
        table = MethodTable()
        rpc_pb2_grpc.add_KVServicer_to_server(_KV(), table)
        table.add_generic_rpc_handlers((_watch_only_generic(),))
        server.add_generic_rpc_handlers((table,))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                kv = rpc_pb2_grpc.KVStub(channel)
                resp = await kv.Put(rpc_pb2.PutRequest(key=b"k", value=b"abc"), timeout=5)
                assert resp.header.revision == 3
                echo = channel.unary_unary(
                    "/test.Generic/Echo",
                    request_serializer=rpc_pb2.RangeRequest.SerializeToString,
                    response_deserializer=rpc_pb2.RangeResponse.FromString,
                )
                assert (await echo(rpc_pb2.RangeRequest(key=b"four"), timeout=5)).count == 4
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await kv.Range(rpc_pb2.RangeRequest(key=b"k"), timeout=5)
                assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
                unknown = channel.unary_unary("/no.Such/Thing")
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await unknown(b"", timeout=5)
                assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
                # undecodable payloads, registered and generic methods alike (grpc_guard)
                for path, message in (
                    ("/etcdserverpb.KV/Put", "etcdserverpb.PutRequest"),
                    ("/test.Generic/Echo", "etcdserverpb.RangeRequest"),
                ):
                    with pytest.raises(grpc.aio.AioRpcError) as err:
                        await channel.unary_unary(path)(b"\x0f", timeout=5)
                    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                    assert err.value.details().startswith(f"request: cannot decode {message}")
        finally:
            await server.stop(None)

    asyncio.run(main())
