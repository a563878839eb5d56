"""nameserver.grpc.gateway_json: request messages round-trip through the gateway's JSON
(bytes as padded base64, 64-bit integers as strings, either field spelling), and any body
at all is either decoded or refused with a BadRequest, never another error."""

from __future__ import annotations

import json

from google.protobuf import json_format
from hypothesis import given, settings
from hypothesis import strategies as st

from nameserver.grpc.gateway_json import METHODS, BadRequest, decode, encode
from protos.etcdserverpb import rpc_pb2

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
keys = st.binary(max_size=40)

puts = st.builds(
    rpc_pb2.PutRequest,
    key=keys,
    value=st.binary(max_size=200),
    lease=int64,
    prev_kv=st.booleans(),
    ignore_value=st.booleans(),
    ignore_lease=st.booleans(),
)
ranges = st.builds(
    rpc_pb2.RangeRequest,
    key=keys,
    range_end=keys,
    limit=int64,
    revision=int64,
    sort_order=st.sampled_from([0, 1, 2]),
    sort_target=st.sampled_from([0, 1, 2, 3, 4]),
    serializable=st.booleans(),
    keys_only=st.booleans(),
    count_only=st.booleans(),
    min_mod_revision=int64,
    max_create_revision=int64,
)
compares = st.builds(
    rpc_pb2.Compare,
    result=st.sampled_from([0, 1, 2, 3]),
    target=st.sampled_from([0, 1, 2, 3, 4]),
    key=keys,
    version=int64,
    range_end=keys,
)
txns = st.builds(
    rpc_pb2.TxnRequest,
    compare=st.lists(compares, max_size=3),
    success=st.lists(st.builds(rpc_pb2.RequestOp, request_put=puts), max_size=3),
    failure=st.lists(st.builds(rpc_pb2.RequestOp, request_range=ranges), max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(puts, ranges, txns), st.booleans())
def test_requests_round_trip_through_the_gateways_json(message: object, camel: bool) -> None:
    assert hasattr(message, "DESCRIPTOR")
    body = encode(message)  # type: ignore[arg-type]
    if camel:  # the other spelling (protobuf's JSON names) reads the same
        body = json_format.MessageToJson(message).encode()  # type: ignore[arg-type]
    (back,) = decode(body, type(message))  # type: ignore[arg-type]
    assert back == message


@settings(max_examples=500, deadline=None)
@given(
    st.sampled_from(sorted(METHODS)),
    st.one_of(
        st.binary(max_size=200),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
            lambda inner: (
                st.lists(inner, max_size=4)
                | st.dictionaries(
                    st.sampled_from(
                        ["key", "value", "range_end", "ID", "TTL", "compare", "success"]
                    )
                    | st.text(max_size=8),
                    inner,
                    max_size=4,
                )
            ),
            max_leaves=20,
        ).map(lambda v: json.dumps(v).encode()),
    ),
)
def test_any_body_is_decoded_or_refused_with_a_bad_request(route: str, body: bytes) -> None:
    method = METHODS[route]
    try:
        messages = decode(body, method.request, many=method.client_streaming)
    except BadRequest as exc:
        assert str(exc)
        return
    assert messages and all(isinstance(m, method.request) for m in messages)
