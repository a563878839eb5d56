"""Seeded random and malformed inputs for the fuzz run against a node's ports
(``tests/integration/test_fuzz_ports.py``, issue 20: "with random and malformed input the
node stays up, answers others, never answers UNKNOWN/INTERNAL with a Python traceback").

Sans-I/O: every generator takes a ``random.Random`` and returns ``(kind, bytes)`` cases, so a
seed replays a run exactly (``METALEDGER_FUZZ_SEED``; ``METALEDGER_FUZZ_CASES`` scales how
many). Nothing here opens a socket.

- gRPC: every method of every service the node serves, enumerated from the generated
  protos (:func:`served_methods`), and payloads for each (:func:`grpc_payloads`): random
  bytes, valid messages truncated or bit-flipped, valid messages with random field values
  (huge and negative numbers, empty and huge keys, enums out of range), invalid UTF-8 in a
  string field, nesting past protobuf's limit along the message's own recursion or as
  unknown groups, an empty payload.
- Remoting (RocketMQ frames, ``rmq/codec.py``): bad lengths, bad headers
  (JSON and the binary "ROCKETMQ" one), unknown codes, and each code the nameserver serves
  with garbage ext fields and bodies (:func:`remoting_cases`).
- Peer port (``raftlog/native``): frames to send after a valid handshake
  (:func:`peer_frames`).
- Metrics (HTTP): :func:`http_cases`.
- TLS: a real ClientHello (made with ``ssl.MemoryBIO``) cut short at every interesting
  point (:func:`client_hello_cut_short`), for any port.
"""

from __future__ import annotations

import json
import math
import os
import random
import ssl
import struct
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from google.protobuf import descriptor as _d
from google.protobuf import message_factory
from google.protobuf.message import Message as ProtoMessage

from nameserver.remoting.codes import NAMESERVER_REQUEST_CODES
from protos.etcdserverpb import rpc_pb2, v3election_pb2, v3lock_pb2
from protos.metaledger.v1 import (
    admin_pb2,
    offsets_pb2,
    quotas_pb2,
    replica_groups_pb2,
    routing_pb2,
)
from rmq.codes import LanguageCode, RequestCode

SEED_ENV = "METALEDGER_FUZZ_SEED"
CASES_ENV = "METALEDGER_FUZZ_CASES"

Case = tuple[str, bytes]

#: The generated modules of every service a node serves on its client port.
SERVICE_MODULES: tuple[ModuleType, ...] = (
    rpc_pb2,
    v3lock_pb2,
    v3election_pb2,
    admin_pb2,
    offsets_pb2,
    quotas_pb2,
    replica_groups_pb2,
    routing_pb2,
)


def fuzz_seed() -> int:
    """``METALEDGER_FUZZ_SEED`` if set (to replay a run), else a fresh one."""
    text = os.environ.get(SEED_ENV, "").strip()
    return int(text) if text else random.SystemRandom().randrange(1 << 32)


def fuzz_scale(default: int = 1) -> int:
    """``METALEDGER_FUZZ_CASES``: how many times the default number of cases to run."""
    text = os.environ.get(CASES_ENV, "").strip()
    return max(1, int(text)) if text else default


# ----------------------------------------------------------------------------- gRPC
@dataclass(frozen=True)
class Method:
    path: str  # /package.Service/Method
    request: type[ProtoMessage]
    client_streaming: bool
    server_streaming: bool


def served_methods(modules: tuple[ModuleType, ...] = SERVICE_MODULES) -> list[Method]:
    out = []
    for module in modules:
        for service in module.DESCRIPTOR.services_by_name.values():
            for m in service.methods:
                out.append(
                    Method(
                        f"/{service.full_name}/{m.name}",
                        message_factory.GetMessageClass(m.input_type),
                        m.client_streaming,
                        m.server_streaming,
                    )
                )
    return out


_INTS: dict[int, tuple[int, ...]] = {
    _d.FieldDescriptor.CPPTYPE_INT32: (0, 1, -1, 2**31 - 1, -(2**31)),
    _d.FieldDescriptor.CPPTYPE_INT64: (0, 1, -1, 2**63 - 1, -(2**63), 2**53 + 1),
    _d.FieldDescriptor.CPPTYPE_UINT32: (0, 1, 2**32 - 1),
    _d.FieldDescriptor.CPPTYPE_UINT64: (0, 1, 2**63, 2**64 - 1),
}
_INT_RANGES: dict[int, tuple[int, int]] = {
    _d.FieldDescriptor.CPPTYPE_INT32: (-(2**31), 2**31 - 1),
    _d.FieldDescriptor.CPPTYPE_INT64: (-(2**63), 2**63 - 1),
    _d.FieldDescriptor.CPPTYPE_UINT32: (0, 2**32 - 1),
    _d.FieldDescriptor.CPPTYPE_UINT64: (0, 2**64 - 1),
}
_STRINGS = ("", "a", "\x00", "/", "..", "../../etc/passwd", "http://", "http://[::1]:x",
            "%s%n", "\u202e\ufeff", "日本語", "-1", "9" * 40)  # fmt: skip


def random_text(rng: random.Random, n: int) -> str:
    alphabet = "abc/-_.:%\x00 \t\n\u00e9\u4e2d\U0001f600"
    return "".join(rng.choice(alphabet) for _ in range(n))


def _size(rng: random.Random) -> int:
    """Mostly small, sometimes big (up to 256 KiB: a batch stays quick)."""
    return rng.choice((0, 1, 3, 16, 255, 256, 1024, 65_536, rng.randrange(1, 262_144)))


def _scalar(rng: random.Random, f: _d.FieldDescriptor) -> Any:
    t = f.cpp_type
    if t in _INTS:
        if rng.random() < 0.7:
            return rng.choice(_INTS[t])
        lo, hi = _INT_RANGES[t]
        return rng.randint(lo, hi)
    if t == _d.FieldDescriptor.CPPTYPE_BOOL:
        return rng.random() < 0.5
    if t in (_d.FieldDescriptor.CPPTYPE_DOUBLE, _d.FieldDescriptor.CPPTYPE_FLOAT):
        return rng.choice((0.0, -1.0, math.inf, -math.inf, math.nan, 1e308, 5e-324))
    if t == _d.FieldDescriptor.CPPTYPE_ENUM:
        known = [v.number for v in f.enum_type.values]
        return rng.choice([*known, -1, max(known) + 1, 2**31 - 1, rng.randint(-1000, 1000)])
    # Names that exist, so requests get past validation. Never a host:port: MemberAdd of a
    # valid peer URL to a one-node cluster is a valid request that loses quorum (as in etcd).
    plausible = rng.random() < 0.3
    if f.type == _d.FieldDescriptor.TYPE_STRING:
        if plausible:
            return rng.choice(("fuzz", "broker-a", "DefaultCluster", "g"))
        return rng.choice(_STRINGS) if rng.random() < 0.5 else random_text(rng, _size(rng))
    if plausible:
        return rng.choice((b"/fuzz/a", b"/fuzz/b", b"/fuzz0", b"/fuzz/alive"))
    return rng.choice((b"", b"\x00", b"\xff" * 8, rng.randbytes(_size(rng))))


def random_message(rng: random.Random, cls: type[ProtoMessage], depth: int = 0) -> ProtoMessage:
    """A valid message of ``cls`` whose fields are set at random to awkward values."""
    msg = cls()
    for f in cls.DESCRIPTOR.fields:
        if rng.random() < 0.4:
            continue
        is_msg = f.cpp_type == _d.FieldDescriptor.CPPTYPE_MESSAGE
        if is_msg and depth >= 4:
            continue
        sub_cls = message_factory.GetMessageClass(f.message_type) if is_msg else None
        if f.is_repeated:
            items = rng.choice((0, 1, 2, 3, 20 if depth == 0 else 2))
            field = getattr(msg, f.name)
            if sub_cls is not None and f.message_type.GetOptions().map_entry:
                key_f, value_f = (
                    f.message_type.fields_by_name["key"],
                    f.message_type.fields_by_name["value"],
                )
                for _ in range(items):
                    key = _scalar(rng, key_f)
                    if value_f.cpp_type == _d.FieldDescriptor.CPPTYPE_MESSAGE:
                        value_cls = message_factory.GetMessageClass(value_f.message_type)
                        field[key].CopyFrom(random_message(rng, value_cls, depth + 1))
                    else:
                        field[key] = _scalar(rng, value_f)
            elif sub_cls is not None:
                for _ in range(items):
                    field.add().CopyFrom(random_message(rng, sub_cls, depth + 1))
            else:
                field.extend(_scalar(rng, f) for _ in range(items))
        elif sub_cls is not None:
            getattr(msg, f.name).CopyFrom(random_message(rng, sub_cls, depth + 1))
        else:
            setattr(msg, f.name, _scalar(rng, f))
    return msg


def _varint(n: int) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _delimited(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def recursion_path(desc: _d.Descriptor) -> list[int] | None:
    """Field numbers leading from ``desc`` back to ``desc`` (TxnRequest: success, then
    request_txn), or None when the message does not contain itself."""

    def walk(d: _d.Descriptor, seen: set[str], path: list[int]) -> list[int] | None:
        for f in d.fields:
            if f.cpp_type != _d.FieldDescriptor.CPPTYPE_MESSAGE:
                continue
            sub = f.message_type
            if sub.full_name == desc.full_name:
                return [*path, f.number]
            if sub.full_name not in seen:
                found = walk(sub, seen | {sub.full_name}, [*path, f.number])
                if found:
                    return found
        return None

    return walk(desc, {desc.full_name}, [])


def nested(desc: _d.Descriptor, levels: int) -> bytes:
    """``desc`` containing itself ``levels`` times along its recursion, or (if it has none)
    unknown groups nested ``levels`` deep."""
    path = recursion_path(desc)
    if path is None:
        field = 19_999  # an unknown field number, start-group ... end-group
        return _varint(field << 3 | 3) * levels + _varint(field << 3 | 4) * levels
    payload = b""
    for _ in range(levels):
        for number in reversed(path):
            payload = _delimited(number, payload)
    return payload


def _bad_utf8(desc: _d.Descriptor) -> bytes | None:
    for f in desc.fields:
        if f.type == _d.FieldDescriptor.TYPE_STRING:
            return _delimited(f.number, b"\xff\xfe\xc0\x80")
    return None


def grpc_payloads(rng: random.Random, method: Method, n: int) -> list[Case]:
    """About ``n`` payloads for ``method`` (more for a larger ``n``), kinds mixed."""
    desc = method.request.DESCRIPTOR
    cases: list[Case] = [("empty", b"")]
    for _ in range(max(1, n // 4)):
        cases.append(("random-bytes", rng.randbytes(rng.choice((1, 2, 7, 64, 1000)))))
    for _ in range(max(1, n // 4)):
        valid = random_message(rng, method.request).SerializeToString()
        if len(valid) > 1:
            cases.append(("truncated", valid[: rng.randrange(1, len(valid))]))
            flipped = bytearray(valid)
            for _ in range(rng.randint(1, 4)):
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            cases.append(("bit-flipped", bytes(flipped)))
    for _ in range(max(2, n // 2)):
        cases.append(("random-fields", random_message(rng, method.request).SerializeToString()))
    # every string and bytes field huge: errors that quote a field must stay sendable
    huge = random_message(rng, method.request)
    for f in desc.fields:
        if not f.is_repeated and f.type == _d.FieldDescriptor.TYPE_STRING:
            setattr(huge, f.name, "\u00e9" * 100_000)
        elif not f.is_repeated and f.type == _d.FieldDescriptor.TYPE_BYTES:
            setattr(huge, f.name, b"k" * 200_000)
    cases.append(("huge-fields", huge.SerializeToString()))
    bad = _bad_utf8(desc)
    if bad is not None:
        cases.append(("bad-utf8", bad))
    levels = rng.choice((17, 33, 99, 101, 200))
    cases.append((f"nested-{levels}", nested(desc, levels)))
    return cases


# ----------------------------------------------------------------------------- remoting
_I32 = struct.Struct(">i")
_U32 = struct.Struct(">I")


def remoting_frame(header: bytes, body: bytes = b"", serialize_type: int = 0) -> bytes:
    """A frame as RocketMQ lays it out, lengths computed right."""
    return (
        _I32.pack(4 + len(header) + len(body))
        + _U32.pack((serialize_type << 24 | len(header)) & 0xFFFFFFFF)
        + header
        + body
    )


def json_header(code: Any, ext: Any = None, **fields: Any) -> bytes:
    header: dict[str, Any] = {"code": code, "flag": 0, "language": "JAVA", "opaque": 7,
                              "serializeTypeCurrentRPC": "JSON", "version": 479}  # fmt: skip
    if ext is not None:
        header["extFields"] = ext
    header.update(fields)
    return json.dumps(header).encode()


_GARBAGE_VALUES: tuple[Any, ...] = ("", "-1", "99999999999999999999999", "1e9", "true", "null",
                                   "{", "127.0.0.1:99999", -1, 2**70, 1.5, None, [],
                                   {"a": [1, {"b": None}]})  # fmt: skip


def _garbage_value(rng: random.Random) -> Any:
    if rng.random() < 0.7:
        return rng.choice(_GARBAGE_VALUES)
    return random_text(rng, rng.choice((1, 64, 5000))) if rng.random() < 0.5 else "x" * 70_000


def _ext_names() -> list[str]:
    """Every ext field name the nameserver reads (RocketMQ's header classes)."""
    return ["topic", "brokerName", "brokerAddr", "clusterName", "haServerAddr", "brokerId",
            "namespace", "key", "value", "heartbeatTimeoutMillis", "enableActingMaster",
            "compressed", "bodyCrc32", "electionPriority", "acceptStandardJsonOnly",
            "topicSeq", "count", "clusterAcceptor", "epoch", "maxOffset", "confirmOffset",
            "Signature", "AccessKey"]  # fmt: skip


_GARBAGE_BODIES: tuple[bytes, ...] = (
    b"", b"{", b"null", b"[]",
    b'{"topicConfigSerializeWrapper": 5, "filterServerList": {}}',
    b'{"topicConfigTable": {"t": {"readQueueNums": -1, "perm": "x"}}}',
    b'{"dataVersion": {"counter": "a", "timestamp": []}}',
    b'{"queueDatas": [{"brokerName": null, "readQueueNums": 1e400}]}',
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
)  # fmt: skip


def _garbage_body(rng: random.Random) -> bytes:
    if rng.random() < 0.3:
        return rng.randbytes(rng.choice((1, 100, 4096)))
    return rng.choice(_GARBAGE_BODIES)


def _binary(code: int, language: int, rest: bytes) -> bytes:
    """A frame with the binary "ROCKETMQ" header: fixed fields, then ``rest``."""
    return remoting_frame(struct.pack(">hbhii", code, language, 479, 1, 0) + rest, serialize_type=1)


def remoting_cases(rng: random.Random, n: int) -> list[Case]:
    """Frames for the remoting port: about ``n`` per served code, plus framing and header
    garbage. Each case is what one connection sends before it half-closes."""
    cases: list[Case] = [
        ("length-negative", _I32.pack(-1) + b"\x00" * 8),
        ("length-min-int", _I32.pack(-(2**31))),
        ("length-zero", _I32.pack(0)),
        ("length-three", _I32.pack(3) + b"abc"),
        ("length-huge", _I32.pack(2**31 - 1) + b"\x00" * 64),
        ("length-over-limit", _I32.pack(16 * 1024 * 1024 + 1)),
        ("header-longer-than-frame", _I32.pack(8) + _I32.pack(1000) + b"{}{}"),
        ("header-length-24-bits", _I32.pack(8) + _I32.pack(0x00FFFFFF) + b"{}{}"),
        ("header-field-negative", _I32.pack(8) + _I32.pack(-1) + b"{}{}"),
        ("serialize-type-unknown", remoting_frame(json_header(105), serialize_type=7)),
        ("serialize-type-255", remoting_frame(json_header(105), serialize_type=255)),
        ("header-not-json", remoting_frame(b"{code: 105")),
        ("header-not-utf8", remoting_frame(b'{"code": 105, "remark": "\xff\xfe"}')),
        ("header-json-array", remoting_frame(b"[1, 2, 3]")),
        ("header-json-null", remoting_frame(b"null")),
        ("header-json-deep", remoting_frame(b"[" * 100_000 + b"]" * 100_000)),
        ("header-empty", remoting_frame(b"")),
        ("header-no-code", remoting_frame(b'{"opaque": 1}')),
        ("code-string", remoting_frame(json_header("105"))),
        ("code-float", remoting_frame(json_header(105.5))),
        ("code-huge", remoting_frame(json_header(2**80))),
        ("code-null", remoting_frame(json_header(None))),
        ("code-negative", remoting_frame(json_header(-105))),
        ("code-unknown", remoting_frame(json_header(rng.randrange(1000, 2**31)))),
        ("opaque-huge", remoting_frame(json_header(105, opaque=2**70))),
        ("flag-string", remoting_frame(json_header(105, flag="x"))),
        ("language-unknown", remoting_frame(json_header(105, language="COBOL"))),
        ("language-number", remoting_frame(json_header(105, language=3))),
        ("version-string", remoting_frame(json_header(105, version="v1"))),
        ("ext-list", remoting_frame(json_header(105, ext=[1, 2]))),
        ("ext-string", remoting_frame(json_header(105, ext="topic=x"))),
        ("ext-nested", remoting_frame(json_header(105, ext={"topic": {"a": [1]}}))),
        ("remark-object", remoting_frame(json_header(105, remark={"a": 1}))),
        ("binary-header-short", remoting_frame(b"\x00\x69", serialize_type=1)),
        ("binary-header-bad-lengths", _binary(105, 0, _I32.pack(2**31 - 1) + b"xx")),
        ("binary-header-bad-language", _binary(105, 99, _I32.pack(0) + _I32.pack(0))),
        (
            "binary-ext-bad-lengths",
            _binary(105, 0, _I32.pack(0) + _I32.pack(12) + struct.pack(">h", 30000) + b"topic"),
        ),
        ("two-frames-then-garbage", remoting_frame(json_header(206)) * 2 + rng.randbytes(9)),
    ]
    for _ in range(max(1, n)):
        cases.append(("random-bytes", rng.randbytes(rng.choice((1, 4, 8, 100, 5000)))))
        cases.append(
            ("random-after-length", _I32.pack(rng.randrange(4, 2000)) + rng.randbytes(2000))
        )
    codes = [*sorted(NAMESERVER_REQUEST_CODES), RequestCode.SEND_MESSAGE, RequestCode.PULL_MESSAGE]
    names = _ext_names()
    for code in codes:
        cases.append((f"{code.name}-no-fields", remoting_frame(json_header(int(code)))))
        for _ in range(max(1, n)):
            ext = {name: _garbage_value(rng) for name in rng.sample(names, rng.randint(1, 8))}
            flag = rng.choice((0, 0, 0, 1, 2, 3))  # sometimes "a response", or oneway
            language = rng.choice(["JAVA", "CPP", "GO", *(x.name for x in LanguageCode)])
            header = json_header(int(code), ext, flag=flag, language=language)
            cases.append((f"{code.name}-garbage", remoting_frame(header, _garbage_body(rng))))
    return cases


# ----------------------------------------------------------------------------- peer
_PEER_HEAD = struct.Struct("<BBQQQQQQI")
_PEER_ENTRY = struct.Struct("<QQBI")


def _peer_len(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "little") + payload


def peer_message(
    mtype: int, term: int, *, kind: int = 0, offset: int = 0, data: bytes = b""
) -> bytes:
    """One framed message without entries."""
    return _peer_len(_PEER_HEAD.pack(mtype, kind << 4, term, 0, 0, 0, 0, offset, 0) + data)


def peer_frames(
    rng: random.Random, n: int, *, max_term: int, members: tuple[str, ...] = ()
) -> list[Case]:
    """Frames to send on an authenticated Raft connection (``raftlog/native/messages.py``
    wire: 4-byte little-endian length, then a message). Terms stay at or below
    ``max_term`` where the frame decodes as a message: a frame carrying a higher term is a
    legitimate (authenticated) new term, which no fuzz must be blamed for. PROPOSE (10) is
    taken at any term: a garbage item whose first four bytes claim 1.6 billion requests
    (it stalled every node applying it), and membership changes of ``members``."""
    propose = 10
    cases: list[Case] = [
        ("keepalives", b"\x00\x00\x00\x00" * 5),
        ("length-over-limit", (64 * 1024 * 1024 + 1).to_bytes(4, "little")),
        ("length-max", b"\xff\xff\xff\xff"),
        ("shorter-than-head", _peer_len(b"\x01\x00\x00")),
        ("propose-garbage-item", peer_message(propose, 0, offset=77, data=b"garbage-not-an-item")),
        ("propose-bad-config", peer_message(propose, 0, kind=2, data=b"\xff\xfe nothing")),
    ]
    for member in members:
        data = f"remove {member}".encode()
        cases.append(("propose-remove-member", peer_message(propose, 0, kind=2, data=data)))
    for _ in range(max(1, n)):
        mtype = rng.choice((0, 1, 7, 11, 15, 16, 17, 63, 200, 255, rng.randrange(256)))
        term = rng.randint(0, max_term)
        fields = [rng.choice((0, 1, 2**63, 2**64 - 1, rng.randrange(2**64))) for _ in range(5)]
        count = rng.choice((0, 1, 3, 2**32 - 1))
        head = _PEER_HEAD.pack(mtype, rng.randrange(256), term, *fields, count)
        entries = b""
        for _ in range(min(count, 3)):
            data = rng.randbytes(rng.choice((0, 8, 100)))
            entries += _PEER_ENTRY.pack(
                rng.randrange(2**64), rng.randint(0, max_term), rng.randrange(256), len(data)
            )
            entries += data
        tail = rng.randbytes(rng.choice((0, 3, 40)))
        cases.append((f"message-type-{mtype}", _peer_len(head + entries + tail)))
        cases.append(("entry-runs-past", _peer_len(head[:-4] + (5).to_bytes(4, "little")
                                                   + _PEER_ENTRY.pack(1, 0, 0, 2**31))))  # fmt: skip
        cases.append(("random-payload", _peer_len(rng.randbytes(rng.randrange(1, 300)))))
    return cases


# ----------------------------------------------------------------------------- HTTP
def _gateway_post(path: bytes, body: bytes) -> bytes:
    """A request to etcd's JSON gateway (served on the metrics port)."""
    return b"POST %s HTTP/1.1\r\nContent-Length: %d\r\n\r\n%s" % (path, len(body), body)


def http_cases(rng: random.Random, n: int) -> list[Case]:
    cases: list[Case] = [
        ("no-path", b"GET\r\n\r\n"),
        ("bare-lf", b"GET /metrics HTTP/1.1\n\n"),
        ("post", b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"),
        ("http2-preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        ("http09", b"GET /metrics\r\n\r\n"),
        ("nul-bytes", b"GET /\x00\x00 HTTP/1.1\r\n\r\n"),
        ("not-utf8", b"GET /\xff\xfe HTTP/1.1\r\nHost: \xc0\x80\r\n\r\n"),
        ("huge-path", b"GET /" + b"a" * 200_000 + b" HTTP/1.1\r\n\r\n"),
        ("huge-header", b"GET /metrics HTTP/1.1\r\nX: " + b"b" * 100_000 + b"\r\n\r\n"),
        ("many-headers", b"GET /health HTTP/1.1\r\n" + b"X-A: 1\r\n" * 10_000 + b"\r\n"),
        ("query-garbage", b"GET /metrics?%%%%&&==\xff HTTP/1.1\r\n\r\n"),
        ("health-spaces", b"GET  /health  HTTP/1.1\r\n\r\n"),
        ("no-end-of-head", b"GET /metrics HTTP/1.1\r\nHost: x\r\n"),
        ("empty", b""),
        ("gateway-deep-json", _gateway_post(b"/v3/kv/range", b"[" * 100_000)),
        ("gateway-deep-txn", _gateway_post(b"/v3/kv/txn", b'{"success":[{"request_txn":' * 200)),
        ("gateway-watch-garbage", _gateway_post(b"/v3/watch", b'{"create_request":{"key":7}}')),
        ("gateway-bad-length", b"POST /v3/kv/put HTTP/1.1\r\nContent-Length: -1\r\n\r\n"),
        ("gateway-huge-length", b"POST /v3/kv/put HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\n"),
        (
            "gateway-bad-chunk",
            b"POST /v3/kv/put HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        ),
    ]
    for _ in range(max(1, n)):
        path = rng.choice((b"/v3/kv/range", b"/v3/kv/put", b"/v3/kv/txn", b"/v3/lease/grant"))
        cases.append(
            ("gateway-random-body", _gateway_post(path, rng.randbytes(rng.choice((1, 50)))))
        )
        cases.append(("random-bytes", rng.randbytes(rng.choice((1, 10, 1000)))))
        cases.append(("random-head", b"GET /" + rng.randbytes(50) + b"\r\n\r\n"))
    return cases


# ----------------------------------------------------------------------------- TLS
def client_hello() -> bytes:
    """A real TLS ClientHello record (what a TLS client sends first), from Python's ssl
    module through memory BIOs."""
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_hostname="metaledger.invalid")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return outgoing.read()


def client_hello_cut_short(rng: random.Random) -> list[Case]:
    """A ClientHello cut off: inside the record header, inside the handshake header, in
    the middle, one byte short; and a record header announcing more than comes."""
    hello = client_hello()
    cuts = sorted(
        {1, 3, 5, 6, 9, 44, len(hello) // 2, len(hello) - 1, rng.randrange(1, len(hello))}
    )
    cases: list[Case] = [(f"client-hello-{cut}-of-{len(hello)}", hello[:cut]) for cut in cuts]
    cases.append(("record-claims-16k", hello[:3] + b"\x40\x00" + hello[5:]))
    cases.append(("client-hello-bit-flipped", _flip(rng, hello)))
    return cases


def _flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(4):
        out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)
