"""Record-stream format, snapshots and offline compaction (DESIGN.md §4).

This package imports no other metaledger package.
"""

from snapshots._recordstream import (
    FORMAT_VERSION,
    FRAME_OVERHEAD_BYTES,
    HEADER_BYTES,
    MAGIC,
    MAX_BODY_BYTES,
    BadHeaderError,
    CorruptRecordError,
    Record,
    RecordReader,
    RecordStreamError,
    StreamHeader,
    StreamKind,
    TornTailError,
    decode_header,
    encode_header,
    encode_record,
)

__all__ = [
    "FORMAT_VERSION",
    "FRAME_OVERHEAD_BYTES",
    "HEADER_BYTES",
    "MAGIC",
    "MAX_BODY_BYTES",
    "BadHeaderError",
    "CorruptRecordError",
    "Record",
    "RecordReader",
    "RecordStreamError",
    "StreamHeader",
    "StreamKind",
    "TornTailError",
    "decode_header",
    "encode_header",
    "encode_record",
]
