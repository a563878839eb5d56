"""The native engine's peer messages and log entries, and their wire codec.

What :mod:`raftlog.native.core` reads and writes: :class:`Message` (one per Raft RPC,
field use by type below), :class:`LogEntry`, the entry kinds, the struct-packed wire form
(never pickled), the voters' encoding in a configuration entry, and the configuration
entry ``--force-new-cluster`` appends.
"""

from __future__ import annotations

import enum
import json
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

#: Entry kinds: only NORMAL entries reach the state machine.
KIND_NORMAL = 0
KIND_NOOP = 1  # a new leader's first entry (commits the previous terms' entries, §3.6.2)
KIND_CONFIG = 2  # data: the configuration after this change (encode_config)


class MsgType(enum.IntEnum):
    APPEND = 1
    APPEND_RESP = 2
    VOTE = 3
    VOTE_RESP = 4
    PRE_VOTE = 5
    PRE_VOTE_RESP = 6
    SNAPSHOT = 7
    SNAPSHOT_RESP = 8
    TIMEOUT_NOW = 9
    PROPOSE = 10
    PROPOSE_RESP = 11
    READ_INDEX = 12
    READ_INDEX_RESP = 13


class NotLeader(Exception):
    """A proposal reached a node that is not (or no longer, or not yet able to act as) leader."""


class ChangeRefused(Exception):
    """A membership change the current configuration cannot take now."""


class LearnerNotReady(ChangeRefused):
    """A learner's promotion while its log is still far behind the leader's (etcd 3.4
    promotes one that holds at least 90% of the leader's log)."""


class UnsafeChange(ChangeRefused):
    """A membership change that would leave fewer started members than a quorum (strict
    reconfiguration check): trying again does not help until more members run."""


@dataclass(slots=True)
class LogEntry:
    index: int
    term: int
    kind: int
    data: bytes


@dataclass(slots=True)
class Message:
    """One peer message. Field use by type:

    * APPEND: ``index``/``log_term`` = the entry before ``entries``; ``commit``; ``offset``
      = the leader's newest read round (§6.4), which the follower echoes in APPEND_RESP.
    * APPEND_RESP: ``index`` = the follower's last index matching the leader; ``reject``
      with ``hint`` = where the leader should retry from (the follower's last index), and
      with ``flag`` set, ``index`` = the follower's last index (so the leader sees a
      follower that lost entries it had acknowledged).
    * VOTE / PRE_VOTE: ``index``/``log_term`` = the candidate's last entry; ``flag`` = a
      transfer (voters ignore leader stickiness). *_RESP: ``reject``.
    * SNAPSHOT: ``index``/``log_term`` = the snapshot's last entry; ``offset`` + ``data`` one
      chunk of the file; ``flag`` = the last chunk. SNAPSHOT_RESP: ``index``; ``reject``.
    * PROPOSE: ``offset`` = request id, ``kind``, ``data``. PROPOSE_RESP: ``offset``,
      ``index``/``log_term`` where it landed, or ``reject`` with ``hint`` (1 not leader,
      2 change refused) and the reason in ``data``.
    * READ_INDEX: ``offset`` = the asker's read id. READ_INDEX_RESP: ``offset``, ``index`` =
      the read index, or ``reject`` (not the leader, or it stepped down meanwhile).
    """

    type: int
    term: int
    index: int = 0
    log_term: int = 0
    commit: int = 0
    hint: int = 0
    offset: int = 0
    reject: bool = False
    flag: bool = False
    kind: int = 0
    data: bytes = b""
    entries: list[LogEntry] = field(default_factory=list)
    src: str = ""  # set by the receiving driver from the connection's handshake


# ---------------------------------------------------------------------- wire codec
_HEAD = struct.Struct("<BBQQQQQQI")  # type, flags, term, index, log_term, commit, hint, offset, n
_ENTRY = struct.Struct("<QQBI")  # index, term, kind, len(data)
_FLAG_REJECT = 1
_FLAG_FLAG = 2


def encode_message(m: Message) -> bytes:
    """The message as bytes (the driver frames them with a length)."""
    flags = (_FLAG_REJECT if m.reject else 0) | (_FLAG_FLAG if m.flag else 0) | (m.kind << 4)
    parts = [
        _HEAD.pack(
            m.type, flags, m.term, m.index, m.log_term, m.commit, m.hint, m.offset, len(m.entries)
        )
    ]
    pack = _ENTRY.pack
    for e in m.entries:
        parts.append(pack(e.index, e.term, e.kind, len(e.data)))
        parts.append(e.data)
    parts.append(m.data)
    return b"".join(parts)


def decode_message(buf: bytes | memoryview) -> Message:
    """Raises ValueError on a malformed message."""
    try:
        mtype, flags, term, index, log_term, commit, hint, offset, n = _HEAD.unpack_from(buf, 0)
        pos = _HEAD.size
        entries = []
        unpack = _ENTRY.unpack_from
        size = _ENTRY.size
        for _ in range(n):
            eindex, eterm, kind, length = unpack(buf, pos)
            pos += size
            if pos + length > len(buf):
                raise ValueError("entry runs past the message")
            entries.append(LogEntry(eindex, eterm, kind, bytes(buf[pos : pos + length])))
            pos += length
    except struct.error as exc:
        raise ValueError(f"malformed raft message: {exc}") from None
    return Message(
        type=mtype,
        term=term,
        index=index,
        log_term=log_term,
        commit=commit,
        hint=hint,
        offset=offset,
        reject=bool(flags & _FLAG_REJECT),
        flag=bool(flags & _FLAG_FLAG),
        kind=flags >> 4,
        data=bytes(buf[pos:]),
        entries=entries,
    )


def encode_voters(voters: Iterable[str]) -> bytes:
    return json.dumps(sorted(voters)).encode()


def encode_config(voters: Iterable[str], learners: Iterable[str] = ()) -> bytes:
    """A configuration entry's data: the JSON list of the voters' addresses, as it always
    was while there is no learner (so a log without learners reads the same to an older
    build); with learners (non-voting members, etcd 3.4's), ``{"voters": [...],
    "learners": [...]}``."""
    learners = sorted(learners)
    if not learners:
        return encode_voters(voters)
    return json.dumps({"voters": sorted(voters), "learners": learners}).encode()


def _addresses(value: object, data: bytes) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"not a list of member addresses: {data!r}")
    return tuple(sorted(value))


def decode_config(data: bytes) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(voters, learners) of a configuration entry; raises ValueError on anything else."""
    value = json.loads(data)
    if isinstance(value, dict):
        return _addresses(value.get("voters"), data), _addresses(value.get("learners", []), data)
    return _addresses(value, data), ()


def decode_voters(data: bytes) -> tuple[str, ...]:
    return decode_config(data)[0]


def standalone_config(
    me: str,
    voters: Sequence[str],
    entries: Sequence[LogEntry],
    snap_index: int,
    snap_term: int,
    term: int,
) -> LogEntry | None:
    """``serve --force-new-cluster`` (etcd's disaster recovery): the configuration entry
    that, appended to this member's log, leaves it the only voter; None if it already is.

    ``voters`` are the snapshot's; ``entries`` the log as loaded (entries inside the snapshot
    are ignored). Nothing is dropped: every entry this member holds, committed or not, stays
    and commits once it leads alone (its commit index on disk is only a hint, and entries
    past it may have been acknowledged to clients)."""
    log_ = [e for e in entries if e.index > snap_index]
    current: tuple[tuple[str, ...], tuple[str, ...]] = (tuple(sorted(voters)), ())
    for e in reversed(log_):
        if e.kind == KIND_CONFIG:
            current = decode_config(e.data)
            break
    if current == ((me,), ()):
        return None
    last_index, last_term = (log_[-1].index, log_[-1].term) if log_ else (snap_index, snap_term)
    return LogEntry(last_index + 1, max(term, last_term), KIND_CONFIG, encode_voters([me]))
