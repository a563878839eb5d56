"""etcd's JSON gateway, the translation (sans-I/O): routes, JSON ↔ request and response
messages as etcd 3.4's grpc-gateway reads and writes them, its error bodies and HTTP
statuses. The serving side is :mod:`nameserver.grpc.gateway`.
"""

from __future__ import annotations

import binascii
import json
from dataclasses import dataclass
from typing import Any

import grpc
from google.protobuf import json_format, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import Message

from protos.etcdserverpb import rpc_pb2, v3election_pb2, v3lock_pb2

#: The gateway's URL prefixes (etcd 3.4 serves both; v3beta is deprecated there).
PREFIXES = ("/v3/", "/v3beta/")

#: grpc-gateway's HTTPStatusFromCode (v1, as etcd 3.4 vendors it).
HTTP_STATUS = {
    grpc.StatusCode.OK: (200, "OK"),
    grpc.StatusCode.CANCELLED: (408, "Request Timeout"),
    grpc.StatusCode.UNKNOWN: (500, "Internal Server Error"),
    grpc.StatusCode.INVALID_ARGUMENT: (400, "Bad Request"),
    grpc.StatusCode.DEADLINE_EXCEEDED: (504, "Gateway Timeout"),
    grpc.StatusCode.NOT_FOUND: (404, "Not Found"),
    grpc.StatusCode.ALREADY_EXISTS: (409, "Conflict"),
    grpc.StatusCode.PERMISSION_DENIED: (403, "Forbidden"),
    grpc.StatusCode.UNAUTHENTICATED: (401, "Unauthorized"),
    grpc.StatusCode.RESOURCE_EXHAUSTED: (429, "Too Many Requests"),
    grpc.StatusCode.FAILED_PRECONDITION: (412, "Precondition Failed"),
    grpc.StatusCode.ABORTED: (409, "Conflict"),
    grpc.StatusCode.OUT_OF_RANGE: (400, "Bad Request"),
    grpc.StatusCode.UNIMPLEMENTED: (501, "Not Implemented"),
    grpc.StatusCode.INTERNAL: (500, "Internal Server Error"),
    grpc.StatusCode.UNAVAILABLE: (503, "Service Unavailable"),
    grpc.StatusCode.DATA_LOSS: (500, "Internal Server Error"),
}

_SERVICES = {
    "etcdserverpb": rpc_pb2.DESCRIPTOR,
    "v3lockpb": v3lock_pb2.DESCRIPTOR,
    "v3electionpb": v3election_pb2.DESCRIPTOR,
}

#: The routes of etcd 3.4's gateway (``rpc.pb.gw.go``, ``v3lock.pb.gw.go``,
#: ``v3election.pb.gw.go``): path under the prefix → gRPC method.
ROUTES: dict[str, str] = {
    "kv/range": "/etcdserverpb.KV/Range",
    "kv/put": "/etcdserverpb.KV/Put",
    "kv/deleterange": "/etcdserverpb.KV/DeleteRange",
    "kv/txn": "/etcdserverpb.KV/Txn",
    "kv/compaction": "/etcdserverpb.KV/Compact",
    "watch": "/etcdserverpb.Watch/Watch",
    "lease/grant": "/etcdserverpb.Lease/LeaseGrant",
    "lease/revoke": "/etcdserverpb.Lease/LeaseRevoke",
    "kv/lease/revoke": "/etcdserverpb.Lease/LeaseRevoke",
    "lease/keepalive": "/etcdserverpb.Lease/LeaseKeepAlive",
    "lease/timetolive": "/etcdserverpb.Lease/LeaseTimeToLive",
    "kv/lease/timetolive": "/etcdserverpb.Lease/LeaseTimeToLive",
    "lease/leases": "/etcdserverpb.Lease/LeaseLeases",
    "kv/lease/leases": "/etcdserverpb.Lease/LeaseLeases",
    "cluster/member/add": "/etcdserverpb.Cluster/MemberAdd",
    "cluster/member/remove": "/etcdserverpb.Cluster/MemberRemove",
    "cluster/member/update": "/etcdserverpb.Cluster/MemberUpdate",
    "cluster/member/list": "/etcdserverpb.Cluster/MemberList",
    "maintenance/alarm": "/etcdserverpb.Maintenance/Alarm",
    "maintenance/status": "/etcdserverpb.Maintenance/Status",
    "maintenance/defragment": "/etcdserverpb.Maintenance/Defragment",
    "maintenance/hash": "/etcdserverpb.Maintenance/Hash",
    "maintenance/snapshot": "/etcdserverpb.Maintenance/Snapshot",
    "maintenance/transfer-leadership": "/etcdserverpb.Maintenance/MoveLeader",
    "auth/enable": "/etcdserverpb.Auth/AuthEnable",
    "auth/disable": "/etcdserverpb.Auth/AuthDisable",
    "auth/authenticate": "/etcdserverpb.Auth/Authenticate",
    "auth/user/add": "/etcdserverpb.Auth/UserAdd",
    "auth/user/get": "/etcdserverpb.Auth/UserGet",
    "auth/user/list": "/etcdserverpb.Auth/UserList",
    "auth/user/delete": "/etcdserverpb.Auth/UserDelete",
    "auth/user/changepw": "/etcdserverpb.Auth/UserChangePassword",
    "auth/user/grant": "/etcdserverpb.Auth/UserGrantRole",
    "auth/user/revoke": "/etcdserverpb.Auth/UserRevokeRole",
    "auth/role/add": "/etcdserverpb.Auth/RoleAdd",
    "auth/role/get": "/etcdserverpb.Auth/RoleGet",
    "auth/role/list": "/etcdserverpb.Auth/RoleList",
    "auth/role/delete": "/etcdserverpb.Auth/RoleDelete",
    "auth/role/grant": "/etcdserverpb.Auth/RoleGrantPermission",
    "auth/role/revoke": "/etcdserverpb.Auth/RoleRevokePermission",
    "lock/lock": "/v3lockpb.Lock/Lock",
    "lock/unlock": "/v3lockpb.Lock/Unlock",
    "election/campaign": "/v3electionpb.Election/Campaign",
    "election/proclaim": "/v3electionpb.Election/Proclaim",
    "election/leader": "/v3electionpb.Election/Leader",
    "election/observe": "/v3electionpb.Election/Observe",
    "election/resign": "/v3electionpb.Election/Resign",
}


@dataclass(frozen=True)
class Method:
    """One gRPC method as the gateway calls it."""

    path: str
    request: type[Message]
    response: type[Message]
    client_streaming: bool
    server_streaming: bool


def method_of(grpc_path: str) -> Method:
    """The request and response classes of ``/package.Service/Method``."""
    service, _, name = grpc_path.lstrip("/").rpartition("/")
    package, _, service_name = service.rpartition(".")
    desc = _SERVICES[package].services_by_name[service_name].methods_by_name[name]
    return Method(
        grpc_path,
        message_factory.GetMessageClass(desc.input_type),
        message_factory.GetMessageClass(desc.output_type),
        desc.client_streaming,
        desc.server_streaming,
    )


METHODS: dict[str, Method] = {route: method_of(path) for route, path in ROUTES.items()}


class BadRequest(Exception):
    """A body that is not the method's request in JSON (etcd: code 3, HTTP 400)."""


_JSON_KINDS = {list: "array", str: "string", int: "number", float: "number", bool: "bool"}


def decode(body: bytes, cls: type[Message], many: bool = False) -> list[Message]:
    """The request message(s) in ``body``: one JSON object (trailing data ignored, as
    grpc-gateway's decoder does), or with ``many`` every object in turn. An empty body is
    the empty message. Raises :class:`BadRequest` naming what is wrong."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest(f"invalid UTF-8 in the request body at byte {exc.start}") from None
    decoder = json.JSONDecoder()
    out: list[Message] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos] in " \t\r\n":
            pos += 1
        if pos == len(text):
            break
        try:
            value, pos = decoder.raw_decode(text, pos)
        except json.JSONDecodeError as exc:
            raise BadRequest(f"invalid JSON: {exc}") from None
        except RecursionError:
            raise BadRequest("invalid JSON: nested too deep") from None
        if value is None:
            value = {}  # Go reads null as the empty message
        if not isinstance(value, dict):  # Go's words (grpc-gateway decodes into a map first)
            kind = _JSON_KINDS.get(type(value), "value")
            raise BadRequest(
                f"json: cannot unmarshal {kind} into Go value of type map[string]json.RawMessage"
            )
        message = cls()
        try:
            check_base64(value, cls.DESCRIPTOR)  # type: ignore[arg-type]  # upb's is one too
            json_format.ParseDict(value, message, ignore_unknown_fields=True)
        except (json_format.ParseError, ValueError, TypeError) as exc:
            raise BadRequest(str(exc)) from None
        except RecursionError:
            raise BadRequest(f"{cls.DESCRIPTOR.full_name}: messages nested too deep") from None
        out.append(message)
        if not many:
            break
    return out or [cls()]


_BASE64 = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def check_base64(value: dict[str, Any], descriptor: Descriptor) -> None:
    """Raise :class:`BadRequest` as Go does (``illegal base64 data at input byte N``) for a
    bytes field that is not standard, padded base64: protobuf's Python parser would skip
    the characters it does not know and read ``"@@"`` as an empty key."""
    for name, item in value.items():
        field = descriptor.fields_by_name.get(name) or _by_json_name(descriptor, name)
        if field is None or item is None:
            continue
        items = item if isinstance(item, list) else [item]
        if field.type == FieldDescriptor.TYPE_BYTES:
            for text in items:
                if isinstance(text, str):
                    _strict_base64(text)
        elif field.type == FieldDescriptor.TYPE_MESSAGE:
            sub_descriptor = field.message_type
            if sub_descriptor is None or sub_descriptor.GetOptions().map_entry:
                continue  # a map's keys and values are strings and scalars here
            for sub in items:
                if isinstance(sub, dict):
                    check_base64(sub, sub_descriptor)


def _by_json_name(descriptor: Descriptor, name: str) -> FieldDescriptor | None:
    for field in descriptor.fields:
        if field.json_name == name:
            return field
    return None


def _strict_base64(text: str) -> None:
    raw = text.encode("utf-8", errors="replace")
    body = raw.rstrip(b"=")
    pads = len(raw) - len(body)
    for i, byte in enumerate(body):
        if byte not in _BASE64:
            raise BadRequest(f"illegal base64 data at input byte {i}")
    if len(raw) % 4 or pads > 2:  # where Go's decoder stops: the short quantum, or the end
        raise BadRequest(
            f"illegal base64 data at input byte {len(raw) if pads else len(raw) // 4 * 4}"
        )
    try:
        binascii.a2b_base64(raw, strict_mode=True)
    except binascii.Error:
        raise BadRequest(f"illegal base64 data at input byte {len(body)}") from None


def encode(message: Message) -> bytes:
    """``message`` as etcd's gateway writes it (proto field names, int64 as strings,
    defaults left out, compact)."""
    as_dict = json_format.MessageToDict(message, preserving_proto_field_name=True)
    return json.dumps(as_dict, separators=(",", ":"), ensure_ascii=False).encode()


def error_body(code: grpc.StatusCode, message: str) -> bytes:
    """grpc-gateway's error answer (``runtime.DefaultHTTPError``)."""
    number = code.value[0]
    return json.dumps(
        {"error": message, "message": message, "code": number},
        separators=(",", ":"),
        ensure_ascii=False,
    ).encode()


def stream_error(code: grpc.StatusCode, message: str) -> bytes:
    """grpc-gateway's error chunk in a stream (``streamChunk``)."""
    http_code, http_text = HTTP_STATUS.get(code, (500, "Internal Server Error"))
    chunk = {
        "error": {
            "grpc_code": code.value[0],
            "http_code": http_code,
            "message": message,
            "http_status": http_text,
        }
    }
    return json.dumps(chunk, separators=(",", ":"), ensure_ascii=False).encode()
