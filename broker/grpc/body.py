"""A 5.x producer's message body as the broker stores it: :func:`stored_body`.

A v2 message says how its body is encoded (``SystemProperties.body_encoding``). IDENTITY is
stored as it came. GZIP is what a 5.x client sets when it compressed a body above its
threshold (the Java client's 4 KiB, with ``java.util.zip.Deflater``: a zlib stream; the C#
and Go clients' ``GZipStream`` / ``gzip.Writer``: gzip members). RocketMQ's proxy stores such
a body as it came with the COMPRESSED sysflag (``SendMessageActivity.buildSysFlag``), which a
4.x consumer inflates with zlib; a gzip member stored so would not inflate there. So here:

- a **zlib stream** is stored as it came, with :data:`~rmq.message.SYSFLAG_COMPRESSED` (as the
  proxy, and as a 4.x producer's compressed body): 4.x consumers inflate it, the gRPC front
  inflates it for 5.x consumers (:func:`broker.grpc.convert.to_message`);
- **gzip members** are stored inflated (sysflag 0): every consumer gets the original bytes;
- either must inflate completely to at most the broker's max body size, else the message is
  refused: MESSAGE_CORRUPTED (not a zlib or gzip stream, truncated, trailing bytes) or
  MESSAGE_BODY_TOO_LARGE, naming the field. Nothing is stored then.

Any other encoding (a newer enum value) is UNSUPPORTED.
"""

from __future__ import annotations

import zlib

from protos.apache.rocketmq.v2 import definition_pb2 as v2
from rmq.message import SYSFLAG_COMPRESSED

GZIP_MAGIC = b"\x1f\x8b"
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ZLIB_WBITS = zlib.MAX_WBITS


class BadBody(Exception):
    """A body refused: ``code`` is its v2 code, the message names the field."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def stored_body(body: bytes, encoding: int, field: str, max_body_bytes: int) -> tuple[bytes, int]:
    """``(stored body, sysflag bits)`` of a message's ``body`` sent with ``encoding``;
    :class:`BadBody` when it cannot be stored. ``field``: the message's field name
    (``messages[0]``)."""
    if encoding in (v2.IDENTITY, v2.ENCODING_UNSPECIFIED):
        return body, 0
    if encoding != v2.GZIP:
        raise BadBody(
            v2.UNSUPPORTED,
            f"{field}.system_properties.body_encoding: {encoding} is not supported"
            " (IDENTITY or GZIP)",
        )
    if body.startswith(GZIP_MAGIC):
        return _inflate(body, _GZIP_WBITS, field, max_body_bytes), 0
    _inflate(body, _ZLIB_WBITS, field, max_body_bytes)
    return body, SYSFLAG_COMPRESSED


def _inflate(body: bytes, wbits: int, field: str, max_body_bytes: int) -> bytes:
    """``body`` inflated: one zlib stream, or one or more gzip members (as ``gzip.decompress``),
    to at most ``max_body_bytes``."""
    where = f"{field}.body (body_encoding GZIP)"
    parts: list[bytes] = []
    size = 0
    rest = body
    while True:
        inflater = zlib.decompressobj(wbits)
        try:
            out = inflater.decompress(rest, max_body_bytes - size + 1)
        except zlib.error as exc:
            kind = "gzip" if wbits == _GZIP_WBITS else "zlib"
            raise BadBody(v2.MESSAGE_CORRUPTED, f"{where}: not a {kind} stream: {exc}") from None
        size += len(out)
        if size > max_body_bytes or inflater.unconsumed_tail:
            raise BadBody(
                v2.MESSAGE_BODY_TOO_LARGE,
                f"{where}: inflates past the limit of {max_body_bytes} bytes",
            )
        if not inflater.eof:
            raise BadBody(v2.MESSAGE_CORRUPTED, f"{where}: the compressed stream is truncated")
        parts.append(out)
        rest = inflater.unused_data
        if not rest:
            break
        if wbits != _GZIP_WBITS or not rest.startswith(GZIP_MAGIC):
            raise BadBody(
                v2.MESSAGE_CORRUPTED,
                f"{where}: {len(rest)} bytes after the end of the compressed stream",
            )
    inflated = b"".join(parts)
    if not inflated:
        raise BadBody(v2.MESSAGE_BODY_EMPTY, f"{where}: inflates to an empty body")
    return inflated


__all__ = ["BadBody", "stored_body"]
