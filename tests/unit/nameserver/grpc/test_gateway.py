"""nameserver.grpc.gateway and gateway_json: etcd's JSON gateway, translation and HTTP, against fake handlers.

The shapes asserted here are what etcd 3.4.23's gateway answered to the same bodies (the
side-by-side run with the real binary is tests/integration/test_etcd_gateway.py).
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from nameserver.errors import InvalidArgument
from nameserver.grpc.gateway import Gateway, GatewayContext
from nameserver.grpc.gateway_json import (
    METHODS,
    ROUTES,
    BadRequest,
    decode,
    encode,
    error_body,
)
from nameserver.grpc.guard import guard_handler
from nameserver.grpc.status import rpc
from nameserver.metrics import MetricsServer
from protos.etcdserverpb import kv_pb2, rpc_pb2

HEADER = rpc_pb2.ResponseHeader(cluster_id=2**63 + 5, member_id=7, revision=2, raft_term=3)


def test_every_route_names_a_method_of_etcds_protos() -> None:
    assert set(METHODS) == set(ROUTES)
    assert METHODS["watch"].client_streaming and METHODS["watch"].server_streaming
    assert METHODS["kv/range"].request is rpc_pb2.RangeRequest
    assert METHODS["election/observe"].server_streaming


def test_requests_take_either_spelling_int64_as_string_or_number_and_ignore_unknowns() -> None:
    (request,) = decode(
        b'{"key":"Zm9v","rangeEnd":"Zm9w","limit":"3","revision":2,"bogus":1,'
        b'"sort_order":"DESCEND","sort_target":3}',
        rpc_pb2.RangeRequest,
    )
    assert request == rpc_pb2.RangeRequest(
        key=b"foo",
        range_end=b"fop",
        limit=3,
        revision=2,
        sort_order=rpc_pb2.RangeRequest.DESCEND,
        sort_target=rpc_pb2.RangeRequest.MOD,
    )


def test_empty_body_is_the_empty_request_and_a_unary_body_reads_one_object() -> None:
    assert decode(b"", rpc_pb2.RangeRequest) == [rpc_pb2.RangeRequest()]
    assert decode(b'{"key":"YQ=="}{"key":"Yg=="}', rpc_pb2.RangeRequest) == [
        rpc_pb2.RangeRequest(key=b"a")
    ]
    many = decode(b'{"key":"YQ=="}\n{"key":"Yg=="}', rpc_pb2.RangeRequest, many=True)
    assert [m.key for m in many] == [b"a", b"b"]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b'{"key":"@@"}', "illegal base64 data at input byte 0"),
        (b'{"key":"Zm9"}', "illegal base64 data at input byte 0"),
        (b'{"key":"YQ="}', "illegal base64 data at input byte 3"),
        (b'{"success":[{"requestPut":{"key":"a!"}}]}', "illegal base64 data at input byte"),
        (b"[]", "cannot unmarshal array into Go value"),
        (b'{"key":', "invalid JSON"),
        (b'{"limit":"x"}', "limit"),
        (b"\xff", "invalid UTF-8"),
    ],
)
def test_bad_bodies_are_refused_naming_what_is_wrong(body: bytes, why: str) -> None:
    cls = rpc_pb2.TxnRequest if b"success" in body else rpc_pb2.RangeRequest
    with pytest.raises(BadRequest, match=why):
        decode(body, cls)


def test_answers_as_etcds_gateway_writes_them() -> None:
    response = rpc_pb2.RangeResponse(
        header=HEADER,
        kvs=[
            kv_pb2.KeyValue(key=b"foo", create_revision=2, mod_revision=2, version=1, value=b"bar")
        ],
        count=1,
    )
    assert encode(response) == (
        b'{"header":{"cluster_id":"9223372036854775813","member_id":"7","revision":"2",'
        b'"raft_term":"3"},"kvs":[{"key":"Zm9v","create_revision":"2","mod_revision":"2",'
        b'"version":"1","value":"YmFy"}],"count":"1"}'
    )
    assert (
        encode(rpc_pb2.StatusResponse(dbSize=3, raftIndex=4)) == b'{"dbSize":"3","raftIndex":"4"}'
    )
    assert encode(rpc_pb2.HashResponse(hash=4294926463)) == b'{"hash":4294926463}'
    event = rpc_pb2.WatchResponse(watch_id=-1, created=True)
    assert encode(event) == b'{"watch_id":"-1","created":true}'
    assert error_body(grpc.StatusCode.NOT_FOUND, "etcdserver: requested lease not found") == (
        b'{"error":"etcdserver: requested lease not found",'
        b'"message":"etcdserver: requested lease not found","code":5}'
    )


def test_the_authorization_header_is_the_calls_token() -> None:
    assert GatewayContext({"authorization": "abc.1"}).invocation_metadata() == (("token", "abc.1"),)
    assert GatewayContext({}).invocation_metadata() == ()


# ----------------------------------------------------------------- over HTTP, fake handlers


class FakeKV:
    def __init__(self) -> None:
        self.tokens: list[Any] = []

    @rpc
    async def Range(self, request: rpc_pb2.RangeRequest, context: Any) -> rpc_pb2.RangeResponse:
        self.tokens.append(context.invocation_metadata())
        if not request.key:
            raise InvalidArgument("etcdserver: key is not provided")
        return rpc_pb2.RangeResponse(header=HEADER, count=1)

    async def Watch(self, requests: AsyncIterator[Any], context: Any) -> AsyncIterator[Any]:
        async for request in requests:
            yield rpc_pb2.WatchResponse(header=HEADER, created=True)
            yield rpc_pb2.WatchResponse(header=HEADER, watch_id=request.create_request.watch_id)
        self.watching = True
        await asyncio.Event().wait()  # a half-closed watch stays open

    async def Broken(self, request: Any, context: Any) -> Any:
        raise RuntimeError("a bug")


def _lookup(kv: FakeKV) -> Any:
    handlers = {
        "/etcdserverpb.KV/Range": grpc.unary_unary_rpc_method_handler(
            kv.Range,
            request_deserializer=rpc_pb2.RangeRequest.FromString,
            response_serializer=rpc_pb2.RangeResponse.SerializeToString,
        ),
        "/etcdserverpb.KV/Put": grpc.unary_unary_rpc_method_handler(
            kv.Broken,
            request_deserializer=rpc_pb2.PutRequest.FromString,
            response_serializer=rpc_pb2.PutResponse.SerializeToString,
        ),
        "/etcdserverpb.Watch/Watch": grpc.stream_stream_rpc_method_handler(
            kv.Watch,
            request_deserializer=rpc_pb2.WatchRequest.FromString,
            response_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
        ),
    }
    guarded = {path: guard_handler(h, path, max_request_bytes=1000) for path, h in handlers.items()}
    return guarded.get


async def _exchange(port: int, request: bytes, until_close: bool = True) -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), 10) if until_close else b""
    writer.close()
    return data


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return (
        f"POST {path} HTTP/1.1\r\nHost: x\r\n{extra}Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def _split(answer: bytes) -> tuple[str, bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n")[0].decode(), body


def test_over_http_unary_errors_routes_and_streams() -> None:
    kv = FakeKV()

    async def main() -> None:
        server = MetricsServer(lambda: [], gateway=Gateway(_lookup(kv)))
        await server.start("127.0.0.1", 0)
        assert server._server is not None
        port = server._server.sockets[0].getsockname()[1]
        try:
            status, body = _split(
                await _exchange(
                    port, _post("/v3/kv/range", b'{"key":"Zm9v"}', "Authorization: t.1\r\n")
                )
            )
            assert status == "HTTP/1.1 200 OK"
            assert json.loads(body)["count"] == "1"
            assert kv.tokens[-1] == (("token", "t.1"),)
            # v3beta as etcd 3.4 serves it; 100-continue answered; a chunked body read
            status, _ = _split(
                await _exchange(
                    port, _post("/v3beta/kv/range", b'{"key":"Zm9v"}', "Expect: 100-continue\r\n")
                )
            )
            assert status == "HTTP/1.1 100 Continue"
            chunked = (
                b"POST /v3/kv/range HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                b'5\r\n{"key\r\n9\r\n":"Zm9v"}\r\n0\r\n\r\n'
            )
            assert _split(await _exchange(port, chunked))[0] == "HTTP/1.1 200 OK"
            status, body = _split(await _exchange(port, _post("/v3/kv/range", b"{}")))
            assert status == "HTTP/1.1 400 Bad Request"
            assert json.loads(body) == {
                "error": "etcdserver: key is not provided",
                "message": "etcdserver: key is not provided",
                "code": 3,
            }
            status, body = _split(await _exchange(port, _post("/v3/kv/range", b'{"key":"@@"}')))
            assert (status, json.loads(body)["code"]) == ("HTTP/1.1 400 Bad Request", 3)
            # through the guard's deserializer as a gRPC call is: the request limit holds
            big = b'{"key":"' + base64.b64encode(b"k" * 2000) + b'"}'
            status, body = _split(await _exchange(port, _post("/v3/kv/range", big)))
            assert status == "HTTP/1.1 400 Bad Request"
            assert "request is too large" in json.loads(body)["message"]
            status, body = _split(await _exchange(port, _post("/v3/kv/put", b"{}")))
            assert status == "HTTP/1.1 500 Internal Server Error"  # a bug answers, never kills
            assert json.loads(body)["code"] == 13
            assert _split(await _exchange(port, _post("/v3/nothing", b"{}")))[0] == (
                "HTTP/1.1 404 Not Found"
            )
            assert _split(await _exchange(port, _post("/v3/kv/txn", b"{}")))[0] == (
                "HTTP/1.1 404 Not Found"  # no handler for it here
            )
            get = b"GET /v3/kv/range HTTP/1.1\r\n\r\n"
            assert _split(await _exchange(port, get))[0] == "HTTP/1.1 405 Method Not Allowed"
            assert (
                _split(await _exchange(port, b"garbage\r\n\r\n"))[0] == "HTTP/1.1 400 Bad Request"
            )
            # a watch: JSON lines, chunked, open until the client closes
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/v3/watch", b'{"create_request":{"key":"YQ==","watch_id":4}}'))
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            assert b"Transfer-Encoding: chunked" in head
            lines = []
            for _ in range(2):
                size = int(await asyncio.wait_for(reader.readuntil(b"\r\n"), 10), 16)
                lines.append(json.loads((await reader.readexactly(size + 2))[:-2]))
            assert lines[0]["result"]["created"] is True
            assert lines[1]["result"]["watch_id"] == "4"
            writer.close()
            for _ in range(100):  # the server sees the close and ends the handler
                if not server._server.sockets or not _open_streams():
                    break
                await asyncio.sleep(0.02)
            assert _open_streams() == 0
        finally:
            await server.close()

    asyncio.run(main())


def _open_streams() -> int:
    return sum(1 for t in asyncio.all_tasks() if "pump" in repr(t.get_coro()))
