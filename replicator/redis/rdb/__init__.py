"""Streaming, sans-I/O reader of Redis RDB files (versions 1-10, Redis 7.0) and the replay
of their contents as Redis commands.

    parser.py     RdbParser: feed(bytes) -> next_event() -> events.py records | NEED_DATA
    events.py     the events (values come in bounded parts)
    values.py     length/string primitives and the per-type readers
    streams.py    the stream type (entries, consumer groups, PEL, consumers)
    encodings.py  LZF, listpack, ziplist, intset, zipmap
    crc64.py      Redis's CRC-64 (Jones), the trailer's checksum
    commands.py   events -> replayable commands (argv lists of bounded size)
    dump.py       DUMP payloads (RESTORE's argument) -> the same events
"""

from replicator.redis.rdb.parser import MAX_VERSION, NEED_DATA, NeedData, RdbParser

__all__ = ["MAX_VERSION", "NEED_DATA", "NeedData", "RdbParser"]
