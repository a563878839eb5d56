"""Commands of the replication stream → messages for the sink (sans-I/O: no sockets, no clock).

:class:`EventBuilder` takes what the protocol object emits (``argv``, ``start``, ``end``: the
master's offsets, ``[start, end)``) and the replid, and returns each time a :class:`Batch` of
:class:`OutMessage` (often empty) with the checkpoint it allows. What it keeps (the stream's
offsets and SELECTs as Redis 7.0's ``replication.c`` writes them):

- **The db.** ``SELECT n`` changes it and makes no message. The master sends SELECT only when
  the next command's db differs from what it last told this replica; after a full sync it
  always does, but after ``+CONTINUE`` it does not (the replica "already has this state"), so
  the db carries over: a restart builds its builder from the checkpoint
  (``EventBuilder(…, replid, db=cp.db, offset=cp.offset)``), and a reconnect in the same
  process calls :meth:`EventBuilder.on_continue` with the checkpoint's offset and db.
- **Transactions.** ``MULTI … EXEC`` (also what EVAL with several writes becomes in 7.0): the
  messages are held until EXEC and released together; each carries ``REDIS_TXID`` (replid and
  the MULTI's start offset), ``REDIS_TXCOUNT`` (effect commands in the transaction) and
  ``REDIS_TXINDEX`` (1-based), and its checkpoint ``offset`` is the EXEC's end, so no
  checkpoint falls inside a transaction. SELECT may appear inside one.
- **Non-effects** (PING, ``REPLCONF GETACK``, SELECT, MULTI, EXEC, PUBLISH) make no message,
  but every Batch reports ``boundary``: the end of the last command outside a transaction, with
  the db there. Everything before ``boundary`` has been handed out in this or earlier batches.
- **The history's name.** ``REDIS_REPLID`` on a message is the replid its offsets were first
  given under: the FULLRESYNC's, kept across ``+CONTINUE <newid>``. PSYNC2 renames a history
  without changing its offsets (a promoted replica, a master restarted after SHUTDOWN SAVE),
  and a resume resends what was unconfirmed; labelled with the new id, a consumer deduping by
  ``(replid, start)`` would apply those commands twice. ``Batch.replid`` is the master's
  current id (what a checkpoint resumes with); ``history`` is the label.
- **Snapshots.** A full sync is framed: :meth:`begin_snapshot` sends ``SNAPSHOT_BEGIN`` to every
  queue, :meth:`snapshot_entry` routes the RDB's commands by key (``REDIS_KIND=snapshot``,
  ``REDIS_SEQ`` numbers them), :meth:`end_snapshot` sends ``SNAPSHOT_END`` to every queue.
  ``REDIS_SNAPSHOT`` (the caller's id, unique per full sync) tells two snapshots apart that
  have the same replid and offset: a replicator killed in the middle of one gets the next
  from the same point when nothing was written in between, yet its RDB may list the keys in
  another order (the master's dict was rehashed or reloaded meanwhile), so ``REDIS_SEQ`` n
  of one is not entry n of the other and a consumer must not drop it as a duplicate.

``OutMessage.offset`` is the checkpoint a message completes: the command's end (the EXEC's end
inside a transaction; the FULLRESYNC offset for SNAPSHOT_END) or -1 for "none" (snapshot
entries and SNAPSHOT_BEGIN: a crash before SNAPSHOT_END must give a new full sync). Offsets of
the messages handed out are non-decreasing apart from -1, and several messages may share one
(the pieces of a split command, a transaction, the copies of a broadcast): a checkpointer may
store offset ``o`` once every message handed out with an offset ≤ ``o`` and every message
handed out before them is confirmed, i.e. at the end of a whole :class:`Batch`.

Cross-db commands keep their db: MOVE, COPY … DB and SWAPDB are applied in the db of the
SELECT before them (``REDIS_DB``); ``REDIS_DBS`` lists every db the command touches when that
is more than ``REDIS_DB`` (``*`` for FLUSHALL). Routing hashes only the key, so MOVE and COPY
stay on the key's queue in both dbs; SWAPDB and FLUSHALL go to every queue.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from replicator.redis.commands import CommandSpec, CommandTable, snapshot
from replicator.redis.errors import ProtocolError
from replicator.redis.resp import encode_command as encode_command  # re-exported
from replicator.redis.routing import Piece, plan, queue_of
from replicator.sinks.base import OutMessage as OutMessage  # re-exported: the shared record
from rmq.message import BadProperty, checked_properties_text

KIND_COMMAND = "command"
KIND_SNAPSHOT = "snapshot"
KIND_MARKER = "marker"
SNAPSHOT_BEGIN = "SNAPSHOT_BEGIN"
SNAPSHOT_END = "SNAPSHOT_END"
NO_CHECKPOINT = -1
KEYS_MAX_CHARS = 1024
#: RocketMQ's default maxMessageSize (4 MiB): a longer command goes as fragments
MAX_BODY_BYTES = 4 * 1024 * 1024
FRAGMENT_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Batch:
    """What one call handed out, and the checkpoint it makes possible: ``(replid, boundary,
    db)`` may be stored once these messages and all before them are confirmed. ``boundary`` is
    the end of the last command outside MULTI…EXEC accounted for, -1 during a full sync (no
    checkpoint until SNAPSHOT_END); ``db`` is the db selected there (CONTINUE sends no SELECT)."""

    messages: tuple[OutMessage, ...]
    replid: str
    boundary: int
    db: int


def keys_header(keys: Sequence[bytes], max_chars: int = KEYS_MAX_CHARS) -> str:
    """RocketMQ KEYS: the keys space-separated, or "" when one is not printable UTF-8 without
    spaces (KEYS is a space-separated string index; a binary key would corrupt it). Only the
    first keys that fit in ``max_chars`` are named: the broker limits a message's properties
    to 32 KiB in all, and DEL or MSET can name any number of keys."""
    out: list[str] = []
    used = -1
    for key in keys:
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            return ""
        if not text or not text.isprintable() or " " in text:
            return ""
        used += len(text) + 1
        if used > max_chars:
            break
        out.append(text)
    return " ".join(out)


def _int_arg(argv: Sequence[bytes], i: int, what: str) -> int:
    try:
        return int(argv[i])
    except (IndexError, ValueError):
        raise ProtocolError(f"{what}: bad argument in {_show(argv)}") from None


def _show(argv: Sequence[bytes]) -> str:
    return " ".join(a[:32].decode("utf-8", "replace") for a in argv[:6])


def _copy_dbs(argv: Sequence[bytes]) -> list[int]:
    for i in range(3, len(argv) - 1):
        if argv[i].upper() == b"DB":
            return [_int_arg(argv, i + 1, "COPY … DB")]
    return []


# What a command does to the stream's db or to other dbs, keyed by NAME: Redis's command table
# describes a command to a client (its keys, its flags), not which db it switches a replica
# to or which other dbs it writes; these few commands are where that matters.
OTHER_DBS: dict[str, Callable[[Sequence[bytes]], list[int] | str]] = {
    "move": lambda argv: [_int_arg(argv, 2, "MOVE db")],  # MOVE key db
    "copy": _copy_dbs,  # COPY src dst [DB n] [REPLACE]
    "swapdb": lambda argv: [_int_arg(argv, 1, "SWAPDB"), _int_arg(argv, 2, "SWAPDB")],
    "flushall": lambda argv: "*",
}


class _Held(NamedTuple):
    pieces: list[Piece]
    props: dict[str, str]
    tag: str


@dataclass(slots=True)
class _Tx:
    start: int
    db_before: int
    entries: list[_Held] = field(default_factory=list)


class EventBuilder:
    def __init__(
        self,
        topic: str,
        queue_count: int,
        replid: str,
        db: int = 0,
        offset: int = 0,
        table: CommandTable | None = None,
        max_body_bytes: int = MAX_BODY_BYTES,
        fragment_bytes: int = FRAGMENT_BYTES,
        history: str | None = None,
    ) -> None:
        """``replid``, ``offset`` and ``db``: where the stream starts (a checkpoint's, after a
        restart; the db carries over because the master sends no SELECT after CONTINUE).
        A command whose encoding is longer than ``max_body_bytes`` (a 100 MB SET is a valid
        Redis write; a RocketMQ message is 4 MiB at most) becomes consecutive messages of one
        queue with ``REDIS_FRAGMENT "i/n"`` whose bodies concatenate to the command."""
        if queue_count < 1:
            raise ValueError(f"queue_count must be >= 1, got {queue_count}")
        self.topic = topic
        self.queue_count = queue_count
        if not 0 < fragment_bytes <= max_body_bytes:
            raise ValueError(f"fragment_bytes must be in (0, max_body_bytes], got {fragment_bytes}")
        self.max_body_bytes = max_body_bytes
        self.fragment_bytes = fragment_bytes
        self.replid = replid
        #: what messages carry as REDIS_REPLID: the replid of the full sync the stream's
        #: history began with; a PSYNC2 rename (``on_continue`` with a new id) keeps it
        self.history = history or replid
        self.db = db
        self.table = table if table is not None else snapshot()
        self.boundary = offset
        self.boundary_db = db
        self._tx: _Tx | None = None
        self._snapshot: tuple[str, int] | None = None
        self._snapshot_id = ""
        self._snapshot_heads: dict[int, dict[str, str]] = {}
        #: per db: the snapshot properties before and after REDIS_SEQ, and their texts
        self._snapshot_templates: dict[
            int, tuple[dict[str, str], dict[str, str], tuple[str, str] | None]
        ] = {}
        #: argv[0] → its tag when argv[1] is the command's one key, else None (learnt)
        self._one_key: dict[bytes, str | None] = {}
        self._seq = 0
        # the stream's control commands, keyed by NAME (they change this builder's state and
        # are never messages): SELECT (db), MULTI/EXEC/DISCARD (transaction framing)
        self._control: dict[str, Callable[[Sequence[bytes], int, int], list[OutMessage]]] = {
            "select": self._select,
            "multi": self._multi,
            "exec": self._exec,
            "discard": self._discard,
        }

    @property
    def in_transaction(self) -> bool:
        return self._tx is not None

    # ---- the command stream ----

    def on_command(self, argv: Sequence[bytes], start: int, end: int) -> Batch:
        if not argv:
            raise ProtocolError("empty command in the replication stream", start)
        if self._snapshot is not None:
            raise ProtocolError("a stream command before SNAPSHOT_END", start)
        name = argv[0].decode("utf-8", "replace").lower()
        control = self._control.get(name)
        if control is not None:
            messages = control(argv, start, end)
        else:
            messages = self._effect(argv, start, end)
        if self._tx is None:
            self.boundary, self.boundary_db = end, self.db
        return self._batch(messages)

    def _batch(self, messages: Sequence[OutMessage]) -> Batch:
        return Batch(tuple(messages), self.replid, self.boundary, self.boundary_db)

    def on_continue(self, offset: int, db: int, new_replid: str | None = None) -> None:
        """``+CONTINUE [newid]`` after ``PSYNC replid offset+1``: the master resends from
        ``offset`` (our checkpoint, a boundary outside any transaction) without SELECT, so the
        db is the checkpoint's ``db``; a transaction cut by the broken link is dropped (it comes
        again whole). A new replid names the master's history from here on (``Batch.replid``);
        messages keep the ``history`` label, the offsets being the same."""
        if new_replid:
            self.replid = new_replid  # the history (REDIS_REPLID) stays: its offsets go on
        self._tx = None
        self._snapshot = None
        self.boundary, self.boundary_db, self.db = offset, db, db

    def _select(self, argv: Sequence[bytes], start: int, end: int) -> list[OutMessage]:
        self.db = _int_arg(argv, 1, "SELECT")
        return []

    def _multi(self, argv: Sequence[bytes], start: int, end: int) -> list[OutMessage]:
        if self._tx is not None:
            raise ProtocolError("MULTI inside MULTI in the replication stream", start)
        self._tx = _Tx(start, self.db)
        return []

    def _discard(self, argv: Sequence[bytes], start: int, end: int) -> list[OutMessage]:
        if self._tx is not None:
            self.db = self._tx.db_before
        self._tx = None
        return []

    def _exec(self, argv: Sequence[bytes], start: int, end: int) -> list[OutMessage]:
        tx, self._tx = self._tx, None
        if tx is None:
            raise ProtocolError("EXEC without MULTI in the replication stream", start)
        txid = f"{self.history}-{tx.start}"
        out: list[OutMessage] = []
        for index, held in enumerate(tx.entries, start=1):
            extra = {
                "REDIS_TXID": txid,
                "REDIS_TXCOUNT": str(len(tx.entries)),
                "REDIS_TXINDEX": str(index),
            }
            out += self._messages(held.pieces, {**held.props, **extra}, held.tag, KIND_COMMAND, end)
        return out

    def _effect(self, argv: Sequence[bytes], start: int, end: int) -> list[OutMessage]:
        spec = self.table.lookup(argv)
        if spec is not None and not spec.is_effect:
            return []
        _route, pieces = plan(spec, argv, self.queue_count)
        props = self._props(start, end, self.db)
        name = spec.name.split("|")[0] if spec is not None else argv[0].decode("utf-8", "replace")
        lower = name.lower()
        if lower in OTHER_DBS:
            dbs = OTHER_DBS[lower](argv)
            props["REDIS_DBS"] = (
                dbs if isinstance(dbs, str) else ",".join(str(d) for d in sorted({self.db, *dbs}))
            )
        tag = name.upper()
        if self._tx is not None:
            self._tx.entries.append(_Held(pieces, props, tag))
            return []
        return self._messages(pieces, props, tag, KIND_COMMAND, end)

    def _props(self, start: int, end: int, db: int) -> dict[str, str]:
        return {
            "REDIS_REPLID": self.history,
            "REDIS_START": str(start),
            "REDIS_END": str(end),
            "REDIS_DB": str(db),
        }

    def _messages(
        self, pieces: list[Piece], props: dict[str, str], tag: str, kind: str, offset: int
    ) -> list[OutMessage]:
        out = []
        for piece in pieces:
            if len(pieces) == 1:
                p = props  # every caller passes a dict of its own: no copy for one piece
                p["REDIS_KIND"] = kind
            else:
                p = {**props, "REDIS_KIND": kind}
            if piece.part:
                p["REDIS_PART"] = piece.part
            body = encode_command(piece.argv)
            keys = keys_header(piece.keys)
            if len(body) <= self.max_body_bytes:
                out.append(OutMessage(self.topic, piece.queue_id, body, tag, keys, p, offset))
                continue
            size = self.fragment_bytes
            n = -(-len(body) // size)
            for i in range(n):
                part = body[i * size : (i + 1) * size]
                fp = {**p, "REDIS_FRAGMENT": f"{i + 1}/{n}"}
                out.append(OutMessage(self.topic, piece.queue_id, part, tag, keys, fp, offset))
        return out

    # ---- full sync ----

    def begin_snapshot(self, replid: str, offset: int, snapshot_id: str = "") -> Batch:
        """``+FULLRESYNC replid offset``: the RDB that follows replaces everything. Sends
        SNAPSHOT_BEGIN to every queue; a transaction cut by the broken link is dropped.
        ``snapshot_id`` (``REDIS_SNAPSHOT`` on the snapshot's messages) must differ between
        two full syncs of one job: see the module's docstring."""
        self.replid = self.history = replid
        self._tx = None
        self._snapshot = (replid, offset)
        self._snapshot_id = snapshot_id
        self._snapshot_heads = {}
        self._snapshot_templates = {}
        self._seq = 0
        self.boundary = NO_CHECKPOINT
        return self._batch(self._markers(SNAPSHOT_BEGIN, offset, NO_CHECKPOINT))

    def snapshot_entry(self, db: int, argv: Sequence[bytes]) -> Batch:
        """One replayable command rebuilt from the RDB (rdb/commands.py), in ``db``."""
        return self._batch(self.snapshot_messages(db, argv))

    def snapshot_messages(self, db: int, argv: Sequence[bytes]) -> list[OutMessage]:
        """:meth:`snapshot_entry`'s messages without their Batch (there is no checkpoint
        inside a snapshot: the caller accounts them to the snapshot's boundary)."""
        if self._snapshot is None:
            raise ProtocolError("a snapshot entry outside SNAPSHOT_BEGIN…SNAPSHOT_END")
        self._seq += 1
        one_key = self._one_key.get(argv[0]) if argv else None
        if one_key is not None and len(argv) > 1:
            # what plan() and _messages() make of a command whose one key is argv[1] (SET,
            # RPUSH, HSET, … : what the RDB replays to), without the Piece and its key refs
            key = argv[1]
            body = encode_command(argv)
            if len(body) <= self.max_body_bytes:
                props, text = self._snapshot_props_of(db)
                return [
                    OutMessage(
                        self.topic,
                        queue_of(key, self.queue_count),
                        body,
                        one_key,
                        keys_header((key,)),
                        props,
                        NO_CHECKPOINT,
                        properties_text=text,
                    )
                ]
        _replid, offset = self._snapshot
        spec = self.table.lookup(argv)
        _route, pieces = plan(spec, argv, self.queue_count)
        # the same properties, in the same order, as _props + _snapshot_props: only REDIS_DB
        # and REDIS_SEQ change within a snapshot, so the head is built once per db
        head = self._snapshot_heads.get(db)
        if head is None:
            head = self._snapshot_heads[db] = self._props(offset, offset, db)
        props = head.copy()
        props["REDIS_SEQ"] = str(self._seq)
        if self._snapshot_id:
            props["REDIS_SNAPSHOT"] = self._snapshot_id
        tag = (spec.name.split("|")[0] if spec else argv[0].decode("utf-8", "replace")).upper()
        if spec is not None and argv[0] not in self._one_key and len(self._one_key) < 1024:
            self._learn_one_key(argv[0], spec, tag)
        return self._messages(pieces, props, tag, KIND_SNAPSHOT, NO_CHECKPOINT)

    def _snapshot_props_of(self, db: int) -> tuple[dict[str, str], str]:
        """A one-piece snapshot entry's properties (as the general path orders them: _props,
        REDIS_SEQ, REDIS_SNAPSHOT, REDIS_KIND) and their properties text, from a template
        per db; an empty text (the sink encodes and checks the dict) if the template's
        values would not pass ``checked_properties_text``."""
        template = self._snapshot_templates.get(db)
        if template is None:
            assert self._snapshot is not None
            _replid, offset = self._snapshot
            head = self._props(offset, offset, db)
            tail = {"REDIS_KIND": KIND_SNAPSHOT}
            if self._snapshot_id:
                tail = {"REDIS_SNAPSHOT": self._snapshot_id, **tail}
            try:
                text = (checked_properties_text(head), checked_properties_text(tail))
            except BadProperty:
                text = None
            template = self._snapshot_templates[db] = (head, tail, text)
        head, tail, texts = template
        seq = str(self._seq)
        props = head.copy()
        props["REDIS_SEQ"] = seq
        props.update(tail)
        if texts is None:
            return props, ""
        return props, f"{texts[0]}REDIS_SEQ\x01{seq}\x02{texts[1]}"

    def _learn_one_key(self, name: bytes, spec: CommandSpec, tag: str) -> None:
        """Whether every ``name …`` command names argv[1] as its only key (one key spec:
        index 1, range of one, no ``not_key``/``incomplete``), remembered by ``name``."""
        ks = spec.key_specs
        one = (
            not spec.subcommands
            and len(ks) == 1
            and ks[0].begin_search == "index"
            and ks[0].index == 1
            and ks[0].find_keys == "range"
            and ks[0].lastkey == 0
            and ks[0].keystep >= 1
            and not {"not_key", "incomplete"} & ks[0].flags
        )
        self._one_key[bytes(name)] = tag if one else None

    def end_snapshot(self) -> Batch:
        """The RDB was read whole: SNAPSHOT_END to every queue, carrying the FULLRESYNC offset
        as the checkpoint; the stream's commands follow from there (the master sends SELECT
        first)."""
        if self._snapshot is None:
            raise ProtocolError("SNAPSHOT_END without SNAPSHOT_BEGIN")
        _replid, offset = self._snapshot
        self._snapshot = None
        self.boundary, self.boundary_db = offset, self.db
        return self._batch(self._markers(SNAPSHOT_END, offset, offset))

    def _markers(self, tag: str, offset: int, checkpoint: int) -> list[OutMessage]:
        """``tag replid offset`` to every queue, as copies of one event (BEGIN is the first
        event of the snapshot, REDIS_SEQ 0; END follows the last entry)."""
        seq = 0 if tag == SNAPSHOT_BEGIN else self._seq + 1
        props = {**self._props(offset, offset, self.db), **self._snapshot_props(seq)}
        argv = (tag.encode(), self.history.encode(), str(offset).encode())
        part = f"*/{self.queue_count}" if self.queue_count > 1 else ""
        pieces = [Piece(q, argv, (), part) for q in range(self.queue_count)]
        return self._messages(pieces, props, tag, KIND_MARKER, checkpoint)

    def _snapshot_props(self, seq: int) -> dict[str, str]:
        props = {"REDIS_SEQ": str(seq)}
        if self._snapshot_id:
            props["REDIS_SNAPSHOT"] = self._snapshot_id
        return props
