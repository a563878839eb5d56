"""nameserver.client helpers (ranges, Compare/Op builders, errors, failover) and the txn parser.

Pure: no server; the failover test swaps the client's stubs for fakes.
"""

from __future__ import annotations

from typing import Any

import grpc
import pytest

from nameserver.cli.exitcodes import ExitCode, for_error
from nameserver.cli.txn import (
    TxnSyntaxError,
    argify,
    go_unquote,
    parse_compare,
    parse_op,
    parse_txn,
)
from nameserver.client import (
    CLIENT_ID_METADATA,
    SEQ_METADATA,
    Client,
    ClientError,
    Compare,
    Comparison,
    DeadlineExceeded,
    DeleteResult,
    InvalidArgument,
    NotFound,
    Op,
    PutResult,
    RangeResult,
    ResourceExhausted,
    TxnResult,
    Unavailable,
    UnknownError,
    error_from_rpc,
    prefix_range_end,
    to_bytes,
)
from protos.etcdserverpb import kv_pb2, rpc_pb2

# --------------------------------------------------------------------------- ranges


@pytest.mark.parametrize(
    ("prefix", "end"),
    [
        (b"a", b"b"),
        (b"foo/", b"foo0"),
        (b"a\xff", b"b"),
        (b"a\xfe", b"a\xff"),
        (b"a\xff\xff", b"b"),
        (b"\xff", b"\x00"),
        (b"\xff\xff", b"\x00"),
        (b"", b"\x00"),
        ("foo", b"fop"),
    ],
)
def test_prefix_range_end(prefix: bytes | str, end: bytes) -> None:
    assert prefix_range_end(prefix) == end


def test_to_bytes_round_trips_surrogateescape() -> None:
    raw = b"k\xff\x00"
    assert to_bytes(raw.decode("utf-8", "surrogateescape")) == raw
    assert to_bytes("é") == "é".encode()
    with pytest.raises(TypeError):
        to_bytes(3)  # type: ignore[arg-type]


def test_get_prefix_and_empty_prefix() -> None:
    r = Op.get("dir/", prefix=True).request.request_range
    assert (r.key, r.range_end) == (b"dir/", b"dir0")
    everything = Op.get("", prefix=True).request.request_range
    assert (everything.key, everything.range_end) == (b"\x00", b"\x00")


def test_range_and_prefix_together_is_invalid() -> None:
    with pytest.raises(InvalidArgument):
        Op.get("a", "b", prefix=True)
    with pytest.raises(InvalidArgument):
        Op.put("", "v")


# --------------------------------------------------------------------------- Compare / Op


def test_compare_builders() -> None:
    c = (Compare.value("k") == "v").to_proto()
    assert (c.target, c.result, c.key, c.value) == (
        rpc_pb2.Compare.VALUE,
        rpc_pb2.Compare.EQUAL,
        b"k",
        b"v",
    )
    assert c.WhichOneof("target_union") == "value"

    v = (Compare.version("k") > 3).to_proto()
    assert (v.target, v.result, v.version) == (rpc_pb2.Compare.VERSION, rpc_pb2.Compare.GREATER, 3)
    m = (Compare.mod(b"k") < 5).to_proto()
    assert (m.target, m.result, m.mod_revision) == (rpc_pb2.Compare.MOD, rpc_pb2.Compare.LESS, 5)
    cr = (Compare.create("k") != 0).to_proto()
    assert (cr.target, cr.result, cr.WhichOneof("target_union")) == (
        rpc_pb2.Compare.CREATE,
        rpc_pb2.Compare.NOT_EQUAL,
        "create_revision",
    )
    le = (Compare.lease("k") == 7).to_proto()
    assert (le.target, le.lease) == (rpc_pb2.Compare.LEASE, 7)


def test_compare_over_a_prefix() -> None:
    c = (Compare.version("dir/", prefix=True) == 0).to_proto()
    assert (c.key, c.range_end) == (b"dir/", b"dir0")


def test_compare_operand_types_are_checked() -> None:
    with pytest.raises(TypeError):
        Compare.version("k") == "3"  # noqa: B015
    with pytest.raises(TypeError):
        Compare.value("k") == 3  # noqa: B015
    with pytest.raises(TypeError):
        Compare.mod("k") == True  # noqa: B015, E712
    with pytest.raises(TypeError):
        hash(Compare.mod("k"))


def test_comparison_is_a_plain_value() -> None:
    assert (Compare.mod("k") == 3) == Comparison("mod", b"k", "=", 3)


def test_op_builders() -> None:
    put = Op.put("k", b"v", lease=5, prev_kv=True).request
    assert put.WhichOneof("request") == "request_put"
    assert (put.request_put.key, put.request_put.value, put.request_put.lease) == (b"k", b"v", 5)
    assert put.request_put.prev_kv

    get = Op.get("a", "c", limit=2, sort_order="DESCEND", sort_target="MOD").request.request_range
    assert (get.key, get.range_end, get.limit) == (b"a", b"c", 2)
    assert get.sort_order == rpc_pb2.RangeRequest.DESCEND
    assert get.sort_target == rpc_pb2.RangeRequest.MOD

    delete = Op.delete("p/", prefix=True, prev_kv=True).request.request_delete_range
    assert (delete.key, delete.range_end, delete.prev_kv) == (b"p/", b"p0", True)

    nested = Op.txn([Compare.version("k") == 0], [Op.put("k", "v")], [Op.get("k")]).request
    assert len(nested.request_txn.compare) == 1
    assert nested.request_txn.success[0] == Op.put("k", "v").request


def test_txn_result_from_proto() -> None:
    kv = kv_pb2.KeyValue(key=b"k", value=b"v", create_revision=2, mod_revision=3, version=2)
    resp = rpc_pb2.TxnResponse(
        header=rpc_pb2.ResponseHeader(revision=9),
        succeeded=False,
        responses=[
            rpc_pb2.ResponseOp(response_range=rpc_pb2.RangeResponse(kvs=[kv], count=1)),
            rpc_pb2.ResponseOp(response_put=rpc_pb2.PutResponse()),
            rpc_pb2.ResponseOp(response_delete_range=rpc_pb2.DeleteRangeResponse(deleted=1)),
            rpc_pb2.ResponseOp(response_txn=rpc_pb2.TxnResponse(succeeded=True)),
        ],
    )
    r = TxnResult.from_proto(resp)
    assert (r.revision, r.succeeded) == (9, False)
    assert [type(x) for x in r.responses] == [RangeResult, PutResult, DeleteResult, TxnResult]
    rng = r.responses[0]
    assert isinstance(rng, RangeResult) and rng.kvs[0].key == b"k" and rng.kvs[0].mod_revision == 3
    put = r.responses[1]
    assert isinstance(put, PutResult) and put.prev_kv is None


# --------------------------------------------------------------------------- errors


class FakeRpcError(grpc.RpcError):  # type: ignore[misc]
    def __init__(self, code: grpc.StatusCode, details: str = "boom") -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize("code", [c for c in grpc.StatusCode if c != grpc.StatusCode.OK])
def test_every_status_code_has_its_class(code: grpc.StatusCode) -> None:
    exc = error_from_rpc(FakeRpcError(code, "etcdserver: no leader"), "h:1")
    assert isinstance(exc, ClientError)
    assert type(exc).code == code
    assert exc.endpoint == "h:1"
    assert str(exc) == f"{code.name.lower()}: etcdserver: no leader [h:1]"


def test_error_classes_carry_behaviour() -> None:
    assert Unavailable.retriable and ResourceExhausted.retriable and DeadlineExceeded.retriable
    assert not InvalidArgument.retriable and not NotFound.retriable
    assert isinstance(error_from_rpc(grpc.RpcError()), UnknownError)


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        (Unavailable("x"), ExitCode.UNAVAILABLE),
        (NotFound("x"), ExitCode.NOT_FOUND),
        (InvalidArgument("x"), ExitCode.INVALID),
        (DeadlineExceeded("x"), ExitCode.TIMEOUT),
        (UnknownError("x"), ExitCode.ERROR),
    ],
)
def test_exit_code_for_error(exc: ClientError, code: ExitCode) -> None:
    assert for_error(exc) == code


# --------------------------------------------------------------------------- failover


class FakeMethod:
    def __init__(self, endpoint: str, calls: list[tuple[str, Any]], fails: set[str]) -> None:
        self.endpoint, self.calls, self.fails = endpoint, calls, fails

    def __call__(self, request: Any, timeout: float, metadata: Any) -> Any:
        self.calls.append((self.endpoint, metadata))
        if self.endpoint in self.fails:
            raise FakeRpcError(grpc.StatusCode.UNAVAILABLE, "connection refused")
        return rpc_pb2.PutResponse(header=rpc_pb2.ResponseHeader(revision=7))


class FakeStubs:
    def __init__(self, endpoint: str, calls: list[tuple[str, Any]], fails: set[str]) -> None:
        self.kv = type("KV", (), {})()
        self.kv.Put = FakeMethod(endpoint, calls, fails)


def _fake_client(fails: set[str], timeout_s: float = 5.0) -> tuple[Client, list[tuple[str, Any]]]:
    client = Client(["http://a:1", "b:2/", "c:3"], timeout_s=timeout_s)
    calls: list[tuple[str, Any]] = []
    client._stubs_for = lambda ep: FakeStubs(ep, calls, fails)  # type: ignore[assignment,method-assign,return-value]
    return client, calls


def test_failover_moves_on_and_reuses_the_sequence_number() -> None:
    client, calls = _fake_client(fails={"a:1", "b:2"})
    assert client.endpoints == ("a:1", "b:2", "c:3")
    assert client.put("k", "v").revision == 7
    assert [ep for ep, _ in calls] == ["a:1", "b:2", "c:3"]
    metadata = {tuple(md) for _, md in calls}
    assert metadata == {((CLIENT_ID_METADATA, client.client_id), (SEQ_METADATA, "1"))}

    calls.clear()
    client.put("k", "v")  # sticks to the endpoint that answered; a new request, a new number
    assert calls == [("c:3", ((CLIENT_ID_METADATA, client.client_id), (SEQ_METADATA, "2")))]


def test_all_endpoints_down_is_unavailable_after_the_deadline() -> None:
    client, calls = _fake_client(fails={"a:1", "b:2", "c:3"}, timeout_s=0.2)
    with pytest.raises(Unavailable) as info:
        client.put("k", "v")
    assert "a:1: connection refused" in str(info.value)
    assert len(calls) >= 3
    assert len({md for _, md in calls}) == 1  # every retry carried the same seq


def test_other_errors_do_not_fail_over() -> None:
    client = Client(["a:1", "b:2"])
    calls: list[str] = []

    class Stubs:
        class kv:
            @staticmethod
            def Put(request: Any, timeout: float, metadata: Any) -> Any:
                calls.append("put")
                raise FakeRpcError(grpc.StatusCode.INVALID_ARGUMENT, "too large")

    client._stubs_for = lambda ep: Stubs  # type: ignore[assignment,method-assign,return-value]
    with pytest.raises(InvalidArgument, match="too large"):
        client.put("k", "v")
    assert calls == ["put"]


def test_client_validates_its_arguments() -> None:
    with pytest.raises(InvalidArgument):
        Client([])
    with pytest.raises(InvalidArgument):
        Client(["a:1"], timeout_s=0)


# --------------------------------------------------------------------------- txn syntax


def test_go_unquote() -> None:
    assert go_unquote('"plain"') == b"plain"
    assert go_unquote(r'"a\tb\n\"q\"\\"') == b'a\tb\n"q"\\'
    assert go_unquote(r'"\x00\xff\101\u00e9"') == b"\x00\xffA\xc3\xa9"
    assert go_unquote("`raw \\n`") == b"raw \\n"
    for bad in ('"open', "noquotes", r'"\q"', r'"\x1"'):
        with pytest.raises(TxnSyntaxError):
            go_unquote(bad)


def test_argify() -> None:
    assert argify("put k v") == ["put", "k", "v"]
    assert argify('put "a key" "a\\tvalue" --prev-kv') == ["put", "a key", "a\tvalue", "--prev-kv"]
    assert argify("put 'single quoted' x") == ["put", "single quoted", "x"]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ('value("k") = "v"', Compare.value("k") == "v"),
        ('val("k") != "v"', Compare.value("k") != "v"),
        ('mod("k") > "5"', Compare.mod("k") > 5),
        ('m("k") < "5"', Compare.mod("k") < 5),
        ('version("k") = "0"', Compare.version("k") == 0),
        ('ver("k")="2"', Compare.version("k") == 2),
        ('create("k") != "3"', Compare.create("k") != 3),
        ('c("k") = "3"', Compare.create("k") == 3),
        ('lease("k") = "1"', Compare.lease("k") == 1),
        ('mod("k") > 5', Compare.mod("k") > 5),
        ('value("a b\\n") = "x y"', Compare.value(b"a b\n") == b"x y"),
    ],
)
def test_parse_compare(line: str, expected: Comparison) -> None:
    assert parse_compare(line) == expected


@pytest.mark.parametrize(
    "line",
    ['value("k" = "v"', 'size("k") = "1"', 'mod("k") > "x"', 'mod("k") >= "1"', 'value("") = "v"'],
)
def test_parse_compare_rejects(line: str) -> None:
    with pytest.raises(TxnSyntaxError, match="malformed comparison"):
        parse_compare(line)


def test_parse_op() -> None:
    assert parse_op("put k v") == Op.put("k", "v")
    assert parse_op('put "k" "v w" --prev-kv') == Op.put("k", "v w", prev_kv=True)
    assert parse_op("get k --prefix --limit 3") == Op.get("k", prefix=True, limit=3)
    assert parse_op("get a c --sort-by MODIFY --order DESCEND") == Op.get(
        "a", "c", sort_order="DESCEND", sort_target="MOD"
    )
    assert parse_op("del k --prefix --prev-kv") == Op.delete("k", prefix=True, prev_kv=True)
    assert parse_op("put k v --lease 1a") == Op.put("k", "v", lease=0x1A)
    for bad in ("watch k", "put k", "get k --nope", "get a b --prefix"):
        with pytest.raises(TxnSyntaxError):
            parse_op(bad)


def test_parse_txn_sections() -> None:
    text = 'value("k") = "v"\nmod("k") > "0"\n\nput k x\nget k\n\ndel k\n'
    spec = parse_txn(text)
    assert spec.compares == [Compare.value("k") == "v", Compare.mod("k") > 0]
    assert spec.success == [Op.put("k", "x"), Op.get("k")]
    assert spec.failure == [Op.delete("k")]


def test_parse_txn_without_compares_or_failure() -> None:
    spec = parse_txn("\nput k v\n")
    assert spec.compares == [] and spec.success == [Op.put("k", "v")] and spec.failure == []
    assert parse_txn("") == parse_txn("\n\n\n")
    # like etcdctl, reading stops after the failure section's blank line
    assert parse_txn("\n\nget k\n\nput ignored x\n").failure == [Op.get("k")]


def test_parse_txn_names_the_line() -> None:
    with pytest.raises(TxnSyntaxError, match=r"^line 3: "):
        parse_txn('value("k") = "v"\n\nbogus k\n')
