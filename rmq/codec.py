"""Sans-I/O codec of the RocketMQ 4.x remoting protocol: bytes in, commands out, no sockets.

A frame (``RemotingCommand.java`` ``encode``/``decode``, ``NettyDecoder.java``)::

    int32 BE  length           = 4 + header length + body length (does not count itself)
    int32 BE  header field     = serialize type << 24 | header length
    header                     JSON (type 0) or the "ROCKETMQ" binary header (type 1)
    body                       the rest

Both header types are decoded; commands are always encoded as JSON, because the C++
clients read the header length field without masking the serialize type off.

Over 500 lines on purpose: this is the one protocol module brokers and replicators share,
so framing, both header encodings and the command type stay in one import.

Brokers and replicators share this module with the nameserver (docs/architecture.md,
"Folders"), so it imports nothing from metaledger and touches neither sockets nor asyncio
(``tests/unit/rmq/test_codec.py`` checks that).

Errors::

    RemotingError
    ├── ProtocolError        the byte stream is broken: close that connection only
    │   ├── FrameTooLarge    a frame over the limit (16 MiB, RocketMQ's default)
    │   └── MalformedFrame   lengths that do not add up, a header that does not parse
    └── BadRequest           one well-framed command is unusable (an ext field missing or
                             of the wrong type): answer SYSTEM_ERROR, keep the connection

``closes_connection`` says which is which, so the server needs no isinstance chains.
"""

from __future__ import annotations

import dataclasses
import json
import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, TypeVar

T = TypeVar("T")

MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
"""RocketMQ's ``com.rocketmq.remoting.frameMaxLength`` default: the whole frame, length
field included (Netty's LengthFieldBasedFrameDecoder counts it)."""

SERIALIZE_JSON: Final = 0
SERIALIZE_ROCKETMQ: Final = 1

RPC_TYPE_RESPONSE: Final = 1 << 0
"""``flag`` bit 0: the command is a response."""
RPC_ONEWAY: Final = 1 << 1
"""``flag`` bit 1: a oneway request, which the receiver must never answer."""

SERVER_LANGUAGE: Final = "JAVA"
SERVER_VERSION: Final = 479
"""We answer as RocketMQ's current nameserver does (V5_3_3); clients ignore both."""

#: ``LanguageCode.java`` by byte, for the binary header (which carries the byte, while JSON
#: carries the name). Kept here rather than imported from ``codes`` so the codec stands alone.
_LANGUAGES: Final = (
    "JAVA CPP DOTNET PYTHON DELPHI ERLANG RUBY OTHER HTTP GO PHP OMS RUST NODE_JS".split()
)

_INT32: Final = struct.Struct(">i")
#: An integer ext field: decimal ASCII digits, at most 20 (a Java long has 19).
_DECIMAL: Final = re.compile(r"[-+]?[0-9]{1,20}", re.ASCII)
_BINARY_FIXED: Final = struct.Struct(">hbhii")  # code, language, version, opaque, flag
#: ``json.dumps(..., separators=(",", ":"), ensure_ascii=False)`` made once, not per frame
_JSON_ENCODER: Final = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
#: The C encoder ``_JSON_ENCODER.encode`` builds anew for every call, built once (without
#: the circular-reference check: a header is strings and ints). None without ``_json``.
_C_MAKE_ENCODER: Any = getattr(json.encoder, "c_make_encoder", None)
_HEADER_CHUNKS: Any = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(
        None, _JSON_ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
        False, False, True,
    )
)  # fmt: skip


def _json_text(obj: dict[str, object]) -> str:
    """``_JSON_ENCODER.encode(obj)``, without its per-call set-up (every answer's header)."""
    if _HEADER_CHUNKS is None:
        return _JSON_ENCODER.encode(obj)
    return "".join(_HEADER_CHUNKS(obj, 0))


class RemotingError(Exception):
    closes_connection: ClassVar[bool] = False


class ProtocolError(RemotingError):
    closes_connection: ClassVar[bool] = True


class FrameTooLarge(ProtocolError):
    pass


class MalformedFrame(ProtocolError):
    pass


class BadRequest(RemotingError):
    """Answered with SYSTEM_ERROR (code 1) and this message as the remark, as RocketMQ
    answers a RemotingCommandException from header decoding."""

    response_code: ClassVar[int] = 1


@dataclass(frozen=True)
class RemotingCommand:
    """One request or response. ``ext_fields`` values are always strings (RocketMQ's
    ``HashMap<String, String>``); the decoder coerces what lenient clients send."""

    code: int
    language: str = SERVER_LANGUAGE
    version: int = SERVER_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def is_response(self) -> bool:
        return bool(self.flag & RPC_TYPE_RESPONSE)

    @property
    def is_oneway(self) -> bool:
        return bool(self.flag & RPC_ONEWAY)

    @classmethod
    def request(
        cls,
        code: int,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes = b"",
        *,
        opaque: int = 0,
        oneway: bool = False,
        language: str = SERVER_LANGUAGE,
        version: int = SERVER_VERSION,
    ) -> RemotingCommand:
        """A request; ext field values are written as Java's ``toString`` would (None
        dropped, booleans lower case), as ``makeCustomHeaderToNet`` does."""
        return cls(
            code=code,
            language=language,
            version=version,
            opaque=opaque,
            flag=RPC_ONEWAY if oneway else 0,
            ext_fields=ext_strings(ext_fields or {}),
            body=body,
        )

    def response(
        self,
        code: int,
        remark: str | None = None,
        ext_fields: Mapping[str, object] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The answer to this request: same ``opaque``, response bit set."""
        return _command(
            code,
            SERVER_LANGUAGE,
            SERVER_VERSION,
            self.opaque,
            RPC_TYPE_RESPONSE,
            remark,
            ext_strings(ext_fields or {}),
            body,
        )

    def replace(self, **changes: Any) -> RemotingCommand:
        return dataclasses.replace(self, **changes)

    # Typed access to ext fields, with RocketMQ's own error text for a missing @CFNotNull field.

    def ext_str(self, name: str, default: str | None = None) -> str:
        return self._ext(name, default, lambda _name, value: value)

    def ext_int(self, name: str, default: int | None = None) -> int:
        return self._ext(name, default, parse_int_field)

    def ext_bool(self, name: str, default: bool | None = None) -> bool:
        return self._ext(name, default, parse_bool_field)

    def _ext(self, name: str, default: T | None, parse: Callable[[str, str], T]) -> T:
        value = self.ext_fields.get(name)
        if value is not None:
            return parse(name, value)
        if default is None:
            raise BadRequest(f"the custom field <{name}> is null")
        return default


#: an answer's remark longer than this keeps its head and tail (:func:`bounded_remark`)
MAX_REMARK_CHARS: Final = 1024


def bounded_remark(remark: str) -> str:
    """``remark`` when at most :data:`MAX_REMARK_CHARS` characters, else its first 512 and
    last 256 with how many were left out between: a remark quoting what a client sent (a
    topic, a group, a key of any length) stays short and keeps its sentence's two ends."""
    if len(remark) <= MAX_REMARK_CHARS:
        return remark
    return f"{remark[:512]}… ({len(remark) - 768} characters left out) …{remark[-256:]}"


def parse_int_field(name: str, value: str) -> int:
    if value.isdigit() and value.isascii() and len(value) <= 20:  # what clients send
        return int(value)
    text = value.strip()
    if not _DECIMAL.fullmatch(text):
        raise BadRequest(f"the custom field <{name}> must be an integer, got {_brief(value)}")
    return int(text)


def parse_bool_field(name: str, value: str) -> bool:
    """C++ 2.x builds disagree on booleans ("0"/"1" versus "false"/"true"), so both forms
    are accepted, in any case."""
    lowered = value.strip().lower()
    if lowered in ("true", "1"):
        return True
    if lowered in ("false", "0"):
        return False
    raise BadRequest(
        f"the custom field <{name}> must be a boolean (true/false/1/0), got {_brief(value)}"
    )


def ext_strings(fields: Mapping[str, object]) -> dict[str, str]:
    """Ext field values as the strings Java would put on the wire (None dropped)."""
    if type(fields) is dict and all(type(v) is str for v in fields.values()):
        return dict(fields)  # every value a string already (the usual header)
    out: dict[str, str] = {}
    for key, value in fields.items():
        if value is None:
            continue
        out[key] = _java_string(value)
    return out


def _java_string(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    # fastjson's castToString of a nested object is its JSON text.
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _compiled() -> bool:
    """True when this module runs compiled by mypyc (its functions carry no Python code)."""
    return not hasattr(_compiled, "__code__")


_COMPILED = _compiled()


def _command(
    code: int,
    language: str,
    version: int,
    opaque: int,
    flag: int,
    remark: str | None,
    ext_fields: dict[str, str],
    body: bytes,
) -> RemotingCommand:
    """``RemotingCommand(...)`` of every field, without the frozen dataclass's eight
    ``object.__setattr__`` calls (once or twice per request on the hot paths). Compiled by
    mypyc, the class is native (no instance ``__dict__``) and its constructor is cheap."""
    if _COMPILED:
        return RemotingCommand(code, language, version, opaque, flag, remark, ext_fields, body)
    command = object.__new__(RemotingCommand)
    command.__dict__.update(
        code=code,
        language=language,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
    )
    return command


# --- encoding -------------------------------------------------------------------------


def encode_header(command: RemotingCommand) -> bytes:
    """The JSON header as fastjson writes it: keys in alphabetical order, nulls and an
    empty extFields left out, ``serializeTypeCurrentRPC`` included."""
    header: dict[str, object] = {"code": command.code}
    if command.ext_fields:
        header["extFields"] = command.ext_fields
    header["flag"] = command.flag
    header["language"] = command.language
    header["opaque"] = command.opaque
    if command.remark is not None:
        header["remark"] = command.remark
    header["serializeTypeCurrentRPC"] = "JSON"
    header["version"] = command.version
    return _json_text(header).encode("utf-8")


def encode(command: RemotingCommand) -> bytes:
    """One frame (always a JSON header, serialize type 0)."""
    header = encode_header(command)
    if len(header) > 0xFFFFFF:
        raise ValueError(f"header of {len(header)} bytes does not fit the 24-bit header length")
    length = 4 + len(header) + len(command.body)
    if length + 4 > MAX_FRAME_BYTES:
        raise ValueError(f"frame of {length + 4} bytes exceeds the {MAX_FRAME_BYTES}-byte limit")
    return b"".join(
        (_INT32.pack(length), _INT32.pack(SERIALIZE_JSON << 24 | len(header)), header, command.body)
    )


# --- decoding -------------------------------------------------------------------------


class _NeedData:
    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = _NeedData()
"""``next_event`` found no complete frame in the buffer; feed more bytes."""


class FrameDecoder:
    """Frames out of a byte stream, h11 style: ``receive_data`` then ``next_event`` until
    NEED_DATA, or ``feed`` for both. After a ProtocolError the decoder stays broken
    (every later call raises the same error): the connection must be closed, since
    nothing after a bad frame can be trusted to start on a frame boundary."""

    def __init__(self, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._pos = 0
        self._error: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf) - self._pos

    def receive_data(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if self._pos and self._pos > len(self._buf) // 2:
            # Drop consumed bytes once they are most of the buffer: amortised O(1) per byte.
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def next_event(self) -> RemotingCommand | _NeedData:
        if self._error is not None:
            raise self._error
        try:
            return self._next()
        except ProtocolError as exc:
            self._error = exc
            raise

    def feed(self, data: bytes) -> list[RemotingCommand]:
        self.receive_data(data)
        out: list[RemotingCommand] = []
        while True:
            event = self.next_event()
            if isinstance(event, _NeedData):
                return out
            out.append(event)

    def _next(self) -> RemotingCommand | _NeedData:
        available = len(self._buf) - self._pos
        if available < 4:
            return NEED_DATA
        (length,) = _INT32.unpack_from(self._buf, self._pos)
        # Checked before the frame is buffered, so an oversized frame costs no memory.
        if length < 4:
            raise MalformedFrame(
                f"frame length {length} is less than 4 (it must count the header length field)"
            )
        if length + 4 > self.max_frame_bytes:
            raise FrameTooLarge(
                f"frame of {length + 4} bytes exceeds the {self.max_frame_bytes}-byte limit"
            )
        if available < 4 + length:
            return NEED_DATA
        start = self._pos + 4
        frame = bytes(self._buf[start : start + length])
        self._pos = start + length
        return decode_frame(frame)


def decode_frame(frame: bytes) -> RemotingCommand:
    """One frame without its leading length field."""
    (header_field,) = _INT32.unpack_from(frame, 0)
    serialize_type = (header_field >> 24) & 0xFF
    header_length = header_field & 0xFFFFFF
    if header_length > len(frame) - 4:
        raise MalformedFrame(
            f"header length {header_length} exceeds the {len(frame) - 4} bytes left in the frame"
        )
    header = frame[4 : 4 + header_length]
    body = frame[4 + header_length :]
    if serialize_type == SERIALIZE_JSON:
        return _decode_json_header(header, body)
    if serialize_type == SERIALIZE_ROCKETMQ:
        return _decode_binary_header(header, body)
    raise MalformedFrame(f"unknown serialize type {serialize_type} (0 = JSON, 1 = ROCKETMQ)")


def _decode_json_header(header: bytes, body: bytes) -> RemotingCommand:
    try:
        obj = json.loads(header.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise MalformedFrame(f"JSON header is not UTF-8: {exc}") from None
    except json.JSONDecodeError as exc:
        raise MalformedFrame(f"JSON header does not parse: {exc}") from None
    except RecursionError:
        raise MalformedFrame("JSON header is nested too deeply") from None
    except ValueError:  # an integer of more digits than Python converts (4,300)
        raise MalformedFrame("JSON header holds a number with too many digits") from None
    if not isinstance(obj, dict):
        raise MalformedFrame(f"JSON header must be an object, got {type(obj).__name__}")
    if obj.get("code") is None:
        raise MalformedFrame("JSON header has no code")
    language = obj.get("language", SERVER_LANGUAGE)
    if isinstance(language, int) and not isinstance(language, bool):
        language = _language_name(language)
    elif not isinstance(language, str):
        raise MalformedFrame(f"JSON header field language must be a string, got {_brief(language)}")
    remark = obj.get("remark")
    if remark is not None and not isinstance(remark, str):
        remark = _nested_string(remark, "remark")
    return _command(
        _header_int(obj, "code"),
        language,
        _header_int(obj, "version"),
        _header_int(obj, "opaque"),
        _header_int(obj, "flag"),
        remark,
        _ext_fields(obj.get("extFields")),
        body,
    )


def _header_int(obj: dict[str, Any], name: str) -> int:
    """Header integers; a decimal string is accepted too (lenient, like fastjson)."""
    value = obj.get(name)
    if type(value) is int and -(2**31) <= value < 2**31:  # the usual header
        return value
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise MalformedFrame(f"JSON header field {name} must be an integer, got {_brief(value)}")
    try:
        number = int(value)
    except ValueError:
        raise MalformedFrame(
            f"JSON header field {name} must be an integer, got {_brief(value)}"
        ) from None
    if not -(2**31) <= number < 2**31:
        raise MalformedFrame(
            f"JSON header field {name} is out of the int32 range: {_brief(number)}"
        )
    return number


def _ext_fields(value: object) -> dict[str, str]:
    """Real clients put JSON numbers and booleans in extFields (C++ clients, ali-ons):
    every value becomes the string Java would hold; null values are dropped."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MalformedFrame(f"JSON header field extFields must be an object, got {_brief(value)}")
    try:
        return ext_strings(value)
    except (RecursionError, ValueError):
        raise MalformedFrame(
            "JSON header field extFields has a value too deep or too long"
        ) from None


def _nested_string(value: object, name: str) -> str:
    try:
        return _java_string(value)
    except (RecursionError, ValueError):
        raise MalformedFrame(f"JSON header field {name} is too deep or too long") from None


def _brief(value: object) -> str:
    """A repr short enough for a log line (containers are only named: no recursion)."""
    if isinstance(value, dict | list):
        return f"a JSON {'object' if isinstance(value, dict) else 'list'}"
    text = (
        repr(value) if not isinstance(value, int) or value.bit_length() < 200 else "a long number"
    )
    return text if len(text) <= 64 else text[:60] + "..."


def _language_name(code: int) -> str:
    if 0 <= code < len(_LANGUAGES):
        return _LANGUAGES[code]
    return "OTHER"


def _decode_binary_header(header: bytes, body: bytes) -> RemotingCommand:
    """The "ROCKETMQ" header (``RocketMQSerializable.java``); ``short`` fields are signed
    there, so codes above 32767 do not exist in this form."""
    try:
        code, language, version, opaque, flag = _BINARY_FIXED.unpack_from(header, 0)
        pos = _BINARY_FIXED.size
        remark_bytes, pos = _binary_block(header, pos, "remark")
        ext_bytes, pos = _binary_block(header, pos, "extFields")
    except struct.error:
        raise MalformedFrame(
            f"ROCKETMQ binary header of {len(header)} bytes is truncated"
        ) from None
    if pos != len(header):
        raise MalformedFrame(
            f"ROCKETMQ binary header has {len(header) - pos} bytes after its extFields"
        )
    ext: dict[str, str] = {}
    i = 0
    try:
        while i < len(ext_bytes):
            (key_len,) = struct.unpack_from(">h", ext_bytes, i)
            i += 2
            key = _binary_text(ext_bytes, i, key_len, "extFields key")
            i += key_len
            (value_len,) = _INT32.unpack_from(ext_bytes, i)
            i += 4
            ext[key] = _binary_text(ext_bytes, i, value_len, f"extFields value of {key!r}")
            i += value_len
    except struct.error:
        raise MalformedFrame("ROCKETMQ binary header: extFields map is truncated") from None
    remark = remark_bytes.decode("utf-8", errors="replace") if remark_bytes else None
    return RemotingCommand(
        code=code,
        language=_language_name(language),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
    )


def _binary_block(header: bytes, pos: int, what: str) -> tuple[bytes, int]:
    (length,) = _INT32.unpack_from(header, pos)
    pos += 4
    if length < 0 or pos + length > len(header):
        raise MalformedFrame(
            f"ROCKETMQ binary header: {what} length {length} exceeds the header "
            f"({len(header)} bytes)"
        )
    return header[pos : pos + length], pos + length


def _binary_text(data: bytes, pos: int, length: int, what: str) -> str:
    if length < 0 or pos + length > len(data):
        raise MalformedFrame(f"ROCKETMQ binary header: {what} length {length} is out of bounds")
    try:
        return data[pos : pos + length].decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedFrame(f"ROCKETMQ binary header: {what} is not UTF-8") from None


# --- fastjson bodies ------------------------------------------------------------------


def wants_standard_json(command: RemotingCommand) -> bool:
    """Whether a route body for this request must be standard JSON. RocketMQ's
    ClientRequestProcessor answers old clients (``version`` < V4_9_4 = 401) in fastjson's
    own dialect, integer map keys unquoted, unless they set ``acceptStandardJsonOnly``."""
    flag = command.ext_fields.get("acceptStandardJsonOnly")
    if flag is not None and parse_bool_field("acceptStandardJsonOnly", flag):
        return True
    return command.version >= 401


def dumps_fastjson(obj: object, *, standard: bool) -> bytes:
    """JSON the way RocketMQ's nameserver writes bodies.

    ``standard=False`` is fastjson's default dialect: integer map keys unquoted
    (``{0:"127.0.0.1:10911"}``), UTF-8 text as is. ``standard=True`` is what
    ``BrowserCompatible`` writes: integer keys quoted, non-ASCII escaped as ``\\uXXXX``.
    Dict order is kept (callers sort where fastjson would).
    """
    parts: list[str] = []
    _dump(obj, standard, parts)
    return "".join(parts).encode("utf-8")


def _dump(obj: object, standard: bool, out: list[str]) -> None:
    if isinstance(obj, Mapping):
        out.append("{")
        for i, (key, value) in enumerate(obj.items()):
            if i:
                out.append(",")
            if isinstance(key, int) and not isinstance(key, bool) and not standard:
                out.append(str(key))
            else:
                out.append(json.dumps(_java_string(key), ensure_ascii=standard))
            out.append(":")
            _dump(value, standard, out)
        out.append("}")
    elif isinstance(obj, list | tuple):
        out.append("[")
        for i, value in enumerate(obj):
            if i:
                out.append(",")
            _dump(value, standard, out)
        out.append("]")
    else:
        out.append(json.dumps(obj, ensure_ascii=standard, separators=(",", ":")))


# A JSON string, or a bare integer object key (after "{" or ","), which fastjson writes.
_BARE_KEY = re.compile(r'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.DOTALL)


def loads_lenient(data: bytes | str) -> Any:
    """Parse a body written by fastjson or by a standard JSON writer: bare integer keys
    are quoted first (strings are skipped whole, so their contents are never touched)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data

    def quote(match: re.Match[str]) -> str:
        if match.group(2) is None:
            return match.group(0)
        return f'{match.group(1)}"{match.group(2)}"{match.group(3)}'

    return json.loads(_BARE_KEY.sub(quote, text))
