"""nameserver.grpc.accept.Acceptors: extra pending accepts for hot methods, on a real
grpc.aio server on loopback (no metaledger node)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import grpc
import grpc.aio
import pytest

from nameserver.grpc import accept as grpc_accept
from nameserver.grpc.accept import HOT_METHODS, Acceptors
from nameserver.grpc.methods import MethodTable
from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc


class _KV(rpc_pb2_grpc.KVServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.gate = asyncio.Event()

    async def Put(self, request: Any, context: Any) -> Any:
        if request.key == b"wait":
            await self.gate.wait()
        if request.key == b"fail":
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "key: fail")
        resp = rpc_pb2.PutResponse()
        resp.header.revision = len(request.value)
        return resp


async def _serve(per_method: int) -> tuple[grpc.aio.Server, Acceptors, _KV, int]:
    server = grpc.aio.server()
    table = MethodTable()
    kv = _KV()
    rpc_pb2_grpc.add_KVServicer_to_server(kv, table)
    server.add_generic_rpc_handlers((table,))
    acceptors = Acceptors(server, table.methods(HOT_METHODS), (table,), per_method)
    acceptors.register()
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    acceptors.start()
    return server, acceptors, kv, port


def test_this_grpcio_supports_extra_acceptors() -> None:
    # the pinned grpcio: if this fails after an upgrade, the server silently lost the gain
    assert grpc_accept.unsupported() is None


def test_hot_calls_go_through_the_acceptors_concurrently_and_keep_grpc_semantics(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        server, acceptors, kv, port = await _serve(per_method=3)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                stub = rpc_pb2_grpc.KVStub(channel)
                # more calls blocked in handlers at once than acceptors per method: each
                # acceptor hands its call over and asks for the next at once
                blocked = [
                    asyncio.ensure_future(
                        stub.Put(rpc_pb2.PutRequest(key=b"wait", value=b"x" * i), timeout=10)
                    )
                    for i in range(20)
                ]
                done = await asyncio.gather(
                    *(
                        stub.Put(rpc_pb2.PutRequest(key=b"k", value=b"ab"), timeout=10)
                        for _ in range(30)
                    )
                )
                assert all(r.header.revision == 2 for r in done)
                assert not any(f.done() for f in blocked)
                kv.gate.set()
                assert sorted(r.header.revision for r in await asyncio.gather(*blocked)) == list(
                    range(20)
                )
                # statuses, and methods the servicer does not implement, as gRPC gives them
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Put(rpc_pb2.PutRequest(key=b"fail"), timeout=10)
                assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert err.value.details() == "key: fail"
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Range(rpc_pb2.RangeRequest(key=b"k"), timeout=10)
                assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
                # a non-hot method still reaches its handler through gRPC's own loop
                with pytest.raises(grpc.aio.AioRpcError) as err:
                    await stub.Compact(rpc_pb2.CompactionRequest(revision=1), timeout=10)
                assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
            # gRPC's own loop keeps one pending accept per registered method too, so it
            # takes a share; 3 of every 4 pending accepts for Put are ours
            assert acceptors.accepted >= 20
        finally:
            await server.stop(None)
            await acceptors.stop(timeout_s=5)
        assert not acceptors._acceptors
        # nothing logged: not by the acceptors, nor the unimplemented methods (the method
        # table's guard answers them, nameserver.grpc.guard)
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text

    with caplog.at_level(logging.WARNING):
        asyncio.run(main())


async def _served_without_extra_accepts(per_method: int) -> None:
    """A Put answered by gRPC's own accept loop alone."""
    server, acceptors, _, port = await _serve(per_method)
    try:
        assert not acceptors.enabled
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            resp = await rpc_pb2_grpc.KVStub(channel).Put(
                rpc_pb2.PutRequest(key=b"k", value=b"abc"), timeout=10
            )
        assert resp.header.revision == 3 and acceptors.accepted == 0
    finally:
        await server.stop(None)
        await acceptors.stop()


def test_zero_acceptors_leaves_the_server_as_grpc_ships_it() -> None:
    asyncio.run(_served_without_extra_accepts(per_method=0))


def test_another_grpcio_is_detected_and_the_server_still_serves(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from grpc._cython import cygrpc

    async def renamed(rpc_coro: Any, state: Any, loop: Any, method: Any) -> None:
        raise AssertionError("must not be called")

    monkeypatch.setattr(cygrpc, "_schedule_rpc_coro", renamed, raising=True)
    assert grpc_accept.unsupported() == (
        "grpc._cython.cygrpc._schedule_rpc_coro is missing or takes other parameters"
    )
    monkeypatch.undo()
    monkeypatch.setattr(grpc_accept, "unsupported", lambda: "grpc 9 moved things")

    with caplog.at_level(logging.WARNING):
        asyncio.run(_served_without_extra_accepts(per_method=4))
    assert "one at a time as gRPC ships it (grpc 9 moved things)" in caplog.text


def test_streaming_methods_are_refused_naming_the_method() -> None:
    stream = grpc.stream_stream_rpc_method_handler(lambda it, ctx: it)
    with pytest.raises(ValueError, match=r"^methods: /etcdserverpb.Watch/Watch streams"):
        Acceptors(None, {"/etcdserverpb.Watch/Watch": stream}, (), 2)  # type: ignore[arg-type]


def test_undecodable_hot_calls_are_invalid_argument_through_the_acceptors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The acceptors serve the method table's guarded handlers (nameserver.grpc.guard):
    garbage on a hot method is the client's mistake, answered and not logged."""

    async def main() -> None:
        server, acceptors, _, port = await _serve(per_method=4)
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                put = channel.unary_unary("/etcdserverpb.KV/Put")
                results = await asyncio.gather(
                    *(put(b"\x0f", timeout=10) for _ in range(20)), return_exceptions=True
                )
            for err in results:
                assert isinstance(err, grpc.aio.AioRpcError), err
                assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert err.details().startswith("request: cannot decode etcdserverpb.PutRequest")
            assert acceptors.accepted > 0  # some went through the extra accepts
        finally:
            await server.stop(None)
            await acceptors.stop(timeout_s=5)

    with caplog.at_level(logging.INFO):
        asyncio.run(main())
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
