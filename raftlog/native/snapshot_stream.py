"""Snapshots in the native engine: taken on its trigger, the log compacted behind them,
streamed to a follower that is behind the leader's compacted log.

The engine asks the snapshot hooks (:class:`raftlog.consensus.EngineSnapshots`) for a
snapshot every ``snapshot_every_items`` delivered entries (plus a margin kept in the log),
and once it is written, rewrites the WAL without the entries it covers. A follower that
needs entries the leader no longer holds gets the dump file in 1 MiB SNAPSHOT chunks on
the leader's outbound connection; the follower writes them to a temp file, fsyncs,
installs it and restores the core to it.

The leader checks the whole dump (CRCs and checksums, as the follower's install does)
before it sends a byte of it. A damaged dump is never sent: the leader logs an ERROR naming
the file and the byte, takes a fresh snapshot of its state (which replaces the dump; the
follower gets that one when the core asks again), and if that fails too hands leadership
to another member so that member serves the follower.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from raftlog.consensus import EngineSnapshots
from raftlog.native.config import NativeConfig
from raftlog.native.core import RaftCore, Role
from raftlog.native.messages import ChangeRefused, Message, MsgType, NotLeader, encode_message
from raftlog.native.transport import LEN, Peer, Transport
from raftlog.native.wal import RaftWal

log = logging.getLogger(__name__)

_CHUNK = 1024 * 1024


class SnapshotStream:
    """Taking, compacting behind, sending and receiving snapshots (on the engine's loop)."""

    def __init__(
        self,
        config: NativeConfig,
        loop: asyncio.AbstractEventLoop,
        core: RaftCore,
        wal: RaftWal,
        snapshots: EngineSnapshots | None,
        dump_file: str,
        transport: Transport,
        on_installed: Callable[[int], None],
    ) -> None:
        """``snapshots``: the hooks (None: snapshots are off); ``dump_file``: the current
        snapshot; ``transport``: where chunks go; ``on_installed(index)``: the leader's
        snapshot up to ``index`` replaced this node's log."""
        self._config = config
        self._loop = loop
        self._core = core
        self._wal = wal
        self._snapshots = snapshots
        self._dump_file = dump_file
        self._transport = transport
        self._on_installed = on_installed
        self._snap_pending: int | None = None
        self._snap_forced = False
        self._incoming: tuple[str, Any, int] | None = None  # (leader, file, next offset)
        self._sending: dict[str, asyncio.Task[None]] = {}  # snapshot transfers, per peer
        # the dump found damaged ((device, inode): a fresh one is a new file), not sent again
        self._damaged: tuple[int, int] | None = None
        self._retaking = False  # a fresh snapshot asked for to replace a damaged dump

    def force(self) -> None:
        self._snap_forced = True
        self.maybe_snapshot()

    def maybe_snapshot(self) -> None:
        core, snapshots = self._core, self._snapshots
        if snapshots is None or self._snap_pending is not None:
            return
        since = core.delivered - core.snap_index
        every = self._config.snapshot_every_items
        if since < 0 or (since == 0 and not self._retaking):
            return  # (a damaged dump is replaced even when nothing was delivered since)
        if not (self._snap_forced or since >= every + self._margin()):
            return
        self._snap_forced = False
        index = core.delivered
        voters, learners = core.membership_at(index)
        meta: dict[str, object] = {
            "index": index,
            "term": core.term_at(index),
            "voters": list(voters),
        }
        if learners:
            meta["learners"] = list(learners)  # (absent without learners: as older builds wrote)
        self._snap_pending = index
        snapshots.take(index, json.dumps(meta).encode())

    def _margin(self) -> int:
        return min(self._config.snapshot_margin_items, self._config.snapshot_every_items)

    def poll(self) -> None:
        """Tick: a snapshot asked for was written: compact the log behind it."""
        snapshots, index = self._snapshots, self._snap_pending
        if snapshots is None or index is None:
            return
        state = snapshots.state()
        if state == "done":
            self._snap_pending = None
            self._retaking = False
            core = self._core
            keep_from = max(core.snap_index, index - self._margin())
            core.compact(keep_from)
            try:
                self._wal.rewrite(core.term, core.vote, core.commit, core.log)
            except OSError as exc:  # the old file stays the log (a superset): next time
                log.warning("raft log not compacted behind the snapshot at %d: %s", index, exc)
                return
            log.info("raft log compacted behind the snapshot at index %d", index)
        elif state == "failed":
            self._snap_pending = None
            if self._retaking:
                self._retaking = False
                self._hand_over()

    def _retake(self) -> None:
        """The dump is damaged: take a fresh snapshot to replace it."""
        self._retaking = True
        self.force()
        if self._snap_pending is None:  # (none could be asked for)
            self._retaking = False
            self._hand_over()

    def _hand_over(self) -> None:
        """No good snapshot to send here: another member serves the followers that need one
        (leadership to the most caught-up follower)."""
        core = self._core
        if core.role != Role.LEADER:
            return
        try:
            target = core.transfer(None, time.monotonic())
        except (NotLeader, ChangeRefused) as exc:
            log.error("no good snapshot to send, and leadership not handed over: %s", exc)
            return
        log.error("no good snapshot to send: handing leadership to %s", target)

    def start_send(self, address: str) -> None:
        """Stream the dump file to ``address`` (unless a transfer to it is under way)."""
        peer = self._transport.peer(address)
        task = self._sending.get(address)
        if task is not None and not task.done():
            return
        self._sending[address] = self._loop.create_task(self._send_snapshot(peer))

    def close(self) -> list[asyncio.Task[None]]:
        """Cancel the transfers under way; return their tasks."""
        tasks = list(self._sending.values())
        for task in tasks:
            task.cancel()
        return tasks

    async def _send_snapshot(self, peer: Peer) -> None:
        core, snapshots = self._core, self._snapshots
        ok = False
        index = 0
        link = os.path.join(self._config.journal_dir, f"sending-{os.getpid()}-{id(peer)}.snap")
        try:
            if snapshots is None or not os.path.exists(self._dump_file):
                log.error("%s needs a snapshot, but this node has none", peer.address)
                return
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            os.link(self._dump_file, link)  # a later snapshot may replace the dump meanwhile
            if not await self._verified(link, peer.address):
                return
            meta = json.loads(snapshots.engine_meta(link))
            index = meta["index"]
            size = os.path.getsize(link)
            log.info(
                "sending the snapshot at index %d (%.1f MB) to %s",
                meta["index"],
                size / 1e6,
                peer.address,
            )
            started = time.monotonic()
            reported = 0.0
            with open(link, "rb") as f:
                offset = 0
                while True:
                    chunk = f.read(_CHUNK)
                    last = f.tell() >= size
                    writer = peer.writer
                    if writer is None or core.role != Role.LEADER:
                        return
                    m = Message(
                        MsgType.SNAPSHOT,
                        core.term,
                        index=meta["index"],
                        log_term=meta["term"],
                        offset=offset,
                        flag=last,
                        data=chunk,
                    )
                    payload = encode_message(m)
                    writer.write(LEN.pack(len(payload)) + payload)
                    await writer.drain()
                    offset += len(chunk)
                    if size and offset / size - reported >= 0.25:
                        reported = offset / size
                        log.info("snapshot to %s: %.0f%%", peer.address, 100 * reported)
                    if last:
                        break
            ok = True
            log.info("snapshot sent to %s in %.1fs", peer.address, time.monotonic() - started)
        except (OSError, ConnectionError, ValueError) as exc:
            log.warning("sending the snapshot to %s failed: %s", peer.address, exc)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(link)
            # ok: written, not necessarily read (the follower's answers tell the core)
            core.snapshot_sent(peer.address, ok, time.monotonic(), index)

    async def _verified(self, link: str, address: str) -> bool:
        """Whether the dump (``link``, a hard link to it) verifies whole; a damaged one is
        reported once and replaced by a fresh snapshot."""
        snapshots = self._snapshots
        assert snapshots is not None
        st = os.stat(link)
        ident = (st.st_dev, st.st_ino)
        if ident == self._damaged:
            return False  # reported; a fresh one is on its way
        problem = await asyncio.to_thread(snapshots.verify, link)
        if problem is None:
            return True
        self._damaged = ident
        log.error(
            "not sending the snapshot to %s: %s; taking a fresh snapshot to replace it",
            address,
            problem.replace(link, self._dump_file),
        )
        self._retake()
        return False

    def on_chunk(self, m: Message) -> None:
        """A SNAPSHOT chunk from the leader (after the core stepped it)."""
        try:
            self._on_chunk(m)
        except Exception:
            log.exception("installing the leader's snapshot failed")
            self._incoming = None

    def _on_chunk(self, m: Message) -> None:
        core, snapshots = self._core, self._snapshots
        if m.term != core.term or core.role != Role.FOLLOWER:
            return
        tmp = self._dump_file + ".incoming"
        incoming = self._incoming
        if m.offset == 0:
            if incoming is not None:
                incoming[1].close()
            if snapshots is None:
                log.error("the leader sent a snapshot, but snapshots are off here")
                self._transport.send(m.src, Message(MsgType.SNAPSHOT_RESP, core.term, reject=True))
                return
            self._incoming = incoming = (m.src, open(tmp, "wb"), 0)
            log.info("receiving the leader's snapshot at index %d", m.index)
        if incoming is None or incoming[0] != m.src or incoming[2] != m.offset:
            return  # a chunk of a transfer that was restarted or abandoned
        f = incoming[1]
        f.write(m.data)
        self._incoming = (m.src, f, m.offset + len(m.data))
        if not m.flag:
            return
        self._incoming = None
        f.flush()
        os.fsync(f.fileno())
        f.close()
        if m.index <= core.commit:
            os.unlink(tmp)
            self._transport.send(
                m.src, Message(MsgType.SNAPSHOT_RESP, core.term, index=core.commit)
            )
            return
        assert snapshots is not None
        os.replace(tmp, self._dump_file)
        meta = json.loads(snapshots.load(self._dump_file))
        core.restore(meta["index"], meta["term"], meta["voters"], meta.get("learners", ()))
        self._on_installed(meta["index"])
        self._wal.rewrite(core.term, core.vote, core.commit, core.log)
        log.info("installed the leader's snapshot at index %d", meta["index"])
        self._transport.send(m.src, Message(MsgType.SNAPSHOT_RESP, core.term, index=meta["index"]))
