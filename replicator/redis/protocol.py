"""The replica side of Redis replication as a sans-I/O object: bytes in, events and bytes out.

One table drives it (as h11's ``_state.py`` and etcd raft's ``r.step``): :data:`PHASES` maps
each phase to the method that reads it, and :data:`TRANSITIONS` says which phase may follow which::

    HANDSHAKE          [AUTH [user] password] → PING → [REPLCONF listening-port <port>]
                       → [REPLCONF capa eof capa psync2]; one request at a time, each reply
                       checked (Redis 7.0's ``syncWithMaster``)
    AWAIT_PSYNC_REPLY  PSYNC <replid> <offset+1> | PSYNC ? -1  →  +FULLRESYNC <replid> <offset>
                       (→ RDB_PAYLOAD) or +CONTINUE [<new replid>] (→ COMMAND_STREAM)
    RDB_PAYLOAD        $<len>\\r\\n + len bytes (disk), or $EOF:<40-byte mark>\\r\\n … <mark>
                       (diskless); the mark is found across chunk boundaries and never
                       handed out as payload (``rdbSaveRioWithEOFMark``)
    COMMAND_STREAM     RESP arrays of bulk strings; every byte counts toward the offset

AUTH goes first, before PING (a real 7.0 replica pings first and accepts ``-NOAUTH``): then
every refusal after AUTH is a real one, and PING checks the ACL user's ``+ping``.

Bare ``\\n`` keepalives, which the master writes while it prepares the payload (before
``+FULLRESYNC`` and before ``$``), are skipped and not counted (redis-replicator's parser bugs
leonchen83/redis-replicator#3 and #27 were on these).

Offsets: :attr:`ReplicaProtocol.offset` is the replication offset *processed*, in the master's
``master_repl_offset`` terms: the ``+FULLRESYNC`` offset, then plus the bytes of every
command consumed. A command is ``StreamCommand(argv, start, end)`` with ``end - start`` its
exact size on the wire. Resuming from a processed offset ``o`` sends ``PSYNC <replid> o+1``
(``cached_master->reploff+1``, as ``syncWithMaster``). ``REPLCONF GETACK *`` is part of the stream:
it is a ``StreamCommand`` (counted, as the master counts it) followed by :class:`GetAck`.

Errors: bytes that break the protocol raise ``ProtocolError`` whose ``offset`` is the
replication offset in COMMAND_STREAM and the byte position on the connection before it; a
refused step raises ``HandshakeError`` (``AuthError`` for AUTH and permission replies,
``MasterNotReady`` for -LOADING/-NOMASTERLINK/-MASTERDOWN, which are worth a retry) naming the
step. Nothing else is raised for any input, and after an error the object stays broken: the
connection must be closed.

This module imports neither ``socket`` nor ``asyncio`` (``tests/unit/replicator/redis/
test_protocol.py`` checks it).
"""

from __future__ import annotations

import enum
import re
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeAlias

from replicator.redis.errors import (
    AuthError,
    ConfigError,
    HandshakeError,
    MasterNotReady,
    ProtocolError,
)
from replicator.redis.resp import (
    MAX_BULK_BYTES,
    MAX_LINE_BYTES,
    NEED_DATA,
    NeedData,
    RespParser,
    encode_command,
)

EOF_MARK_BYTES: Final = 40
"""``RDB_EOF_MARK_SIZE`` (``replication.c``): the diskless payload's end mark."""

_REPLID: Final = re.compile(r"[0-9a-f]{40}")
_OFFSET: Final = re.compile(rb"-?[0-9]{1,19}")
_NOT_READY: Final = frozenset({"LOADING", "NOMASTERLINK", "MASTERDOWN"})
_AUTH_KINDS: Final = frozenset({"NOAUTH", "NOPERM", "WRONGPASS"})


class Phase(enum.Enum):
    HANDSHAKE = "handshake"
    AWAIT_PSYNC_REPLY = "await psync reply"
    RDB_PAYLOAD = "rdb payload"
    COMMAND_STREAM = "command stream"


# --- events ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FullSync:
    """``+FULLRESYNC``: an RDB follows; the stream after it starts at ``offset``."""

    replid: str
    offset: int


@dataclass(frozen=True, slots=True)
class Continue:
    """``+CONTINUE``: the stream goes on from the resume offset. ``replid`` is the master's
    new id when it sent one (psync2; persist it at once), else None."""

    replid: str | None


@dataclass(frozen=True, slots=True)
class RdbBegin:
    size: int | None  # None: diskless, the payload ends at the EOF mark


@dataclass(frozen=True, slots=True)
class RdbChunk:
    data: bytes


@dataclass(frozen=True, slots=True)
class RdbEnd:
    pass


@dataclass(frozen=True, slots=True)
class StreamCommand:
    argv: list[bytes]
    start: int  # master offsets: [start, end)
    end: int


@dataclass(frozen=True, slots=True)
class GetAck:
    """The master sent ``REPLCONF GETACK *``: answer with an ACK at once."""


Event: TypeAlias = FullSync | Continue | RdbBegin | RdbChunk | RdbEnd | StreamCommand | GetAck


# --- settings --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """What the replica says in its handshake. ``resume`` is ``(replid, processed offset)``
    from a previous link (PSYNC asks for ``offset + 1``), or None for ``PSYNC ? -1``."""

    password: str | None = None
    username: str | None = None
    listening_port: int | None = None
    capa_eof: bool = True
    capa_psync2: bool = True
    resume: tuple[str, int] | None = None
    max_bulk_bytes: int = MAX_BULK_BYTES

    def validate(self) -> None:
        if self.username is not None and self.password is None:
            raise ConfigError("username", "an ACL user needs a password")
        if self.listening_port is not None and not 0 <= self.listening_port <= 65535:
            raise ConfigError("listening_port", f"{self.listening_port} is not a TCP port")
        if self.max_bulk_bytes < 1:
            raise ConfigError("max_bulk_bytes", "must be positive")
        if self.resume is not None:
            replid, offset = self.resume
            if not _REPLID.fullmatch(replid) or replid == "0" * 40:
                # forty zeros is a cleared replid2, which PSYNC matches
                # (``masterTryPartialResynchronization``)
                raise ConfigError("resume", f"{replid!r} is not a 40-hex-digit replication id")
            if offset < 0:
                raise ConfigError("resume", f"offset {offset} is negative")

    def handshake(self) -> list[tuple[str, list[bytes]]]:
        """The steps before PSYNC: (name, argv)."""
        steps: list[tuple[str, list[bytes]]] = []
        if self.password is not None:
            who = [] if self.username is None else [self.username.encode()]
            steps.append(("AUTH", [b"AUTH", *who, self.password.encode()]))
        steps.append(("PING", [b"PING"]))
        if self.listening_port is not None:
            port = str(self.listening_port).encode()
            steps.append(("REPLCONF listening-port", [b"REPLCONF", b"listening-port", port]))
        capa = [b"capa", b"eof"] * self.capa_eof + [b"capa", b"psync2"] * self.capa_psync2
        if capa:
            steps.append(("REPLCONF capa", [b"REPLCONF", *capa]))
        return steps

    def psync(self) -> list[bytes]:
        if self.resume is None:
            return [b"PSYNC", b"?", b"-1"]
        replid, offset = self.resume
        return [b"PSYNC", replid.encode(), str(offset + 1).encode()]


# --- the protocol object ----------------------------------------------------------------


class ReplicaProtocol:
    """``receive_data(bytes)``, then ``next_event()`` until NEED_DATA, then send
    ``data_to_send()`` (h11 style). ``ack(offset)`` builds a ``REPLCONF ACK``."""

    def __init__(self, config: ReplicaConfig) -> None:
        config.validate()
        self.config = config
        self.phase = Phase.HANDSHAKE
        self.replid: str | None = config.resume[0] if config.resume else None
        self.offset: int = config.resume[1] if config.resume else -1
        self._steps = config.handshake()
        self._step = 0
        self._buf = bytearray()
        self._pos = 0
        self._dropped = 0
        self._out = bytearray()
        self._events: deque[Event] = deque()
        self._mark: bytes | None = None  # diskless EOF mark, once $EOF: was read
        self._remaining = -1  # disk payload bytes still to come; -1 before the header
        self._stream: RespParser | None = None
        self._stream_base = 0
        self._error: Exception | None = None
        self.keepalives = 0
        """Bare ``\\n`` the master sent while preparing the payload (skipped, not counted)."""
        self._send(self._steps[0][1])

    # --- the surface --------------------------------------------------------------------

    @property
    def current_step(self) -> str:
        """The request whose reply is awaited (for logs and errors)."""
        if self.phase is Phase.HANDSHAKE:
            return self._steps[self._step][0]
        if self.phase is Phase.AWAIT_PSYNC_REPLY:
            return "PSYNC"
        return str(self.phase.value)

    def receive_data(self, data: bytes) -> None:
        if self._error is not None:
            raise self._error
        if self._stream is not None:
            self._stream.feed(data)
            return
        if self._pos and self._pos > len(self._buf) // 2:
            del self._buf[: self._pos]
            self._dropped += self._pos
            self._pos = 0
        self._buf += data

    def next_event(self) -> Event | NeedData:
        if self._error is not None:
            raise self._error
        try:
            while not self._events:
                if not PHASES[self.phase](self):
                    return NEED_DATA
            return self._events.popleft()
        except (ProtocolError, HandshakeError) as exc:
            self._error = exc
            raise

    def events(self, data: bytes = b"") -> list[Event]:
        """``receive_data(data)`` and every event it completes."""
        self.receive_data(data)
        out: list[Event] = []
        while not isinstance(event := self.next_event(), NeedData):
            out.append(event)
        return out

    def data_to_send(self) -> bytes:
        out = bytes(self._out)
        self._out.clear()
        return out

    def ack(self, offset: int) -> bytes:
        """``REPLCONF ACK <offset>``; only in COMMAND_STREAM and never past what was read
        (ValueError: a caller's bug, not the master's)."""
        if self.phase is not Phase.COMMAND_STREAM:
            raise ValueError(f"no ACK in phase {self.phase.value}")
        if not 0 <= offset <= self.offset:
            raise ValueError(f"ACK {offset} is outside [0, {self.offset}] (processed offset)")
        return encode_command([b"REPLCONF", b"ACK", str(offset).encode()])

    # --- shared helpers ----------------------------------------------------------------

    def _send(self, argv: list[bytes]) -> None:
        self._out += encode_command(argv)

    def _become(self, phase: Phase) -> None:
        if phase not in TRANSITIONS[self.phase]:
            raise ProtocolError(
                f"illegal transition {self.phase.value} -> {phase.value}", self._here()
            )
        self.phase = phase

    def _here(self) -> int:
        return self._dropped + self._pos

    def _skip_keepalives(self) -> None:
        while self._pos < len(self._buf) and self._buf[self._pos] == 0x0A:
            self._pos += 1
            self.keepalives += 1

    def _line(self) -> bytes | None:
        end = self._buf.find(b"\r\n", self._pos, self._pos + MAX_LINE_BYTES + 2)
        if end < 0:
            if len(self._buf) - self._pos > MAX_LINE_BYTES + 1:
                raise ProtocolError(
                    f"a reply to {self.current_step} longer than {MAX_LINE_BYTES} bytes",
                    self._here(),
                )
            return None
        line = bytes(self._buf[self._pos : end])
        self._pos = end + 2
        return line

    def _status(self, step: str) -> bytes | None:
        """The next ``+`` reply line (without ``+``); an error reply raises the matching
        HandshakeError; anything else is a ProtocolError."""
        start = self._here()
        line = self._line()
        if line is None:
            return None
        if line.startswith(b"+"):
            return line[1:]
        if line.startswith(b"-"):
            raise _refusal(step, line[1:].decode("utf-8", errors="replace"))
        raise ProtocolError(f"reply to {step} is not a status or error line: {line[:60]!r}", start)

    # --- the phases --------------------------------------------------------------------

    def _read_handshake(self) -> bool:
        step = self._steps[self._step][0]
        if self._status(step) is None:
            return False
        self._step += 1
        if self._step < len(self._steps):
            self._send(self._steps[self._step][1])
        else:
            self._send(self.config.psync())
            self._become(Phase.AWAIT_PSYNC_REPLY)
        return True

    def _read_psync_reply(self) -> bool:
        self._skip_keepalives()
        start = self._here()
        reply = self._status("PSYNC")
        if reply is None:
            return False
        words = reply.split(b" ")
        if words[0] == b"FULLRESYNC" and len(words) == 3:
            replid = words[1].decode("latin-1")
            if not _REPLID.fullmatch(replid) or not _OFFSET.fullmatch(words[2]):
                raise ProtocolError(f"malformed +FULLRESYNC reply {reply[:100]!r}", start)
            offset = int(words[2])
            if offset < 0:
                raise ProtocolError(f"+FULLRESYNC offset {offset} is negative", start)
            self.replid, self.offset = replid, offset
            self._events.append(FullSync(replid, offset))
            self._become(Phase.RDB_PAYLOAD)
            return True
        if words[0] == b"CONTINUE" and len(words) <= 2 and self.config.resume is not None:
            new = words[1].decode("latin-1") if len(words) == 2 else None
            if new is not None and not _REPLID.fullmatch(new):
                raise ProtocolError(f"malformed +CONTINUE reply {reply[:100]!r}", start)
            if new is not None:
                self.replid = new
            self._events.append(Continue(new))
            self._start_stream()
            return True
        raise ProtocolError(f"unexpected reply to PSYNC: +{reply[:100]!r}", start)

    def _read_rdb(self) -> bool:
        if self._mark is None and self._remaining < 0:
            return self._read_rdb_header()
        if self._mark is not None:
            return self._read_diskless()
        available = len(self._buf) - self._pos
        if self._remaining and not available:
            return False
        take = min(self._remaining, available)
        if take:
            self._events.append(RdbChunk(bytes(self._buf[self._pos : self._pos + take])))
            self._pos += take
            self._remaining -= take
        if self._remaining == 0:
            self._end_rdb()
        return True

    def _read_rdb_header(self) -> bool:
        self._skip_keepalives()
        start = self._here()
        line = self._line()
        if line is None:
            return False
        if line.startswith(b"-"):
            # readSyncBulkPayload: "MASTER aborted replication with an error"
            raise _refusal("RDB transfer", line[1:].decode("utf-8", errors="replace"))
        if line.startswith(b"$EOF:"):
            mark = line[5:]
            if len(mark) != EOF_MARK_BYTES:
                raise ProtocolError(
                    f"diskless EOF mark of {len(mark)} bytes (expected {EOF_MARK_BYTES})", start
                )
            self._mark = mark
            self._events.append(RdbBegin(None))
            return True
        if line.startswith(b"$") and _OFFSET.fullmatch(line[1:]) and int(line[1:]) >= 0:
            self._remaining = int(line[1:])
            self._events.append(RdbBegin(self._remaining))
            return True
        raise ProtocolError(
            f"expected the RDB header ($<len> or $EOF:<mark>): {line[:60]!r}", start
        )

    def _read_diskless(self) -> bool:
        assert self._mark is not None
        found = self._buf.find(self._mark, self._pos)
        if found >= 0:
            if found > self._pos:
                self._events.append(RdbChunk(bytes(self._buf[self._pos : found])))
            self._pos = found + EOF_MARK_BYTES
            self._end_rdb()
            return True
        # Hold back what could be the start of a mark split across chunks.
        safe = len(self._buf) - (EOF_MARK_BYTES - 1)
        if safe <= self._pos:
            return False
        self._events.append(RdbChunk(bytes(self._buf[self._pos : safe])))
        self._pos = safe
        return True

    def _end_rdb(self) -> None:
        self._events.append(RdbEnd())
        self._start_stream()

    def _start_stream(self) -> None:
        self._become(Phase.COMMAND_STREAM)
        self._stream = RespParser(
            max_bulk_bytes=self.config.max_bulk_bytes, base_offset=self.offset
        )
        self._stream_base = self.offset
        self._stream.feed(bytes(self._buf[self._pos :]))
        self._buf = bytearray()
        self._pos = 0

    def _read_stream(self) -> bool:
        assert self._stream is not None
        start = self.offset
        item = self._stream.next_item()
        if isinstance(item, NeedData):
            return False
        if (
            not isinstance(item, list)
            or not item
            or not all(type(arg) is bytes for arg in item)  # a SimpleString is not a bulk
        ):
            raise ProtocolError(
                f"the command stream holds {_describe(item)} where a command (a non-empty "
                "array of bulk strings) belongs",
                start,
            )
        argv: list[bytes] = item  # type: ignore[assignment]  # checked just above
        self.offset = self._stream_base + self._stream.consumed
        self._events.append(StreamCommand(argv, start, self.offset))
        if len(argv) >= 2 and argv[0].lower() == b"replconf" and argv[1].lower() == b"getack":
            self._events.append(GetAck())
        return True


def _refusal(step: str, reply: str) -> HandshakeError:
    kind = reply.split(" ", 1)[0]
    if kind in _NOT_READY:
        return MasterNotReady(step, reply)
    if step == "AUTH" or kind in _AUTH_KINDS or reply.startswith("ERR operation not permitted"):
        return AuthError(step, reply)
    return HandshakeError(step, reply)


def _describe(item: object) -> str:
    if isinstance(item, list):
        return "an empty array" if not item else "an array holding a non-bulk element"
    return f"a {type(item).__name__}"


PHASES: Final[dict[Phase, Callable[[ReplicaProtocol], bool]]] = {
    Phase.HANDSHAKE: ReplicaProtocol._read_handshake,
    Phase.AWAIT_PSYNC_REPLY: ReplicaProtocol._read_psync_reply,
    Phase.RDB_PAYLOAD: ReplicaProtocol._read_rdb,
    Phase.COMMAND_STREAM: ReplicaProtocol._read_stream,
}
"""Each phase's reader: consumes what it can, queues events, returns whether it progressed."""

TRANSITIONS: Final[dict[Phase, frozenset[Phase]]] = {
    Phase.HANDSHAKE: frozenset({Phase.AWAIT_PSYNC_REPLY}),
    Phase.AWAIT_PSYNC_REPLY: frozenset({Phase.RDB_PAYLOAD, Phase.COMMAND_STREAM}),
    Phase.RDB_PAYLOAD: frozenset({Phase.COMMAND_STREAM}),
    Phase.COMMAND_STREAM: frozenset(),
}
