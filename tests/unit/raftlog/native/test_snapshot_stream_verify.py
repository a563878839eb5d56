"""raftlog.native.snapshot_stream: a leader never streams a damaged snapshot (§7).

The leader's dump is checked whole before a byte of it goes to a follower. A damaged one
is reported once (an ERROR naming the file and the byte), never sent, and replaced by a
fresh snapshot, which is then sent; when no fresh one can be taken, the leader hands
leadership to another member, which serves the follower. The core is a real
:class:`RaftCore` elected on the simulated network of
:mod:`tests.unit.raftlog.native.test_core`; the snapshot hooks, the connection and the
log file are fakes, so no socket is opened.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

import pytest

from raftlog.native.config import NativeConfig
from raftlog.native.core import RaftCore, Role
from raftlog.native.messages import MsgType, decode_message
from raftlog.native.snapshot_stream import SnapshotStream
from raftlog.native.transport import LEN, Peer
from tests.unit.raftlog.native.test_core import Sim, elect

GOOD = b"good snapshot bytes"


class Hooks:
    """The engine's snapshot hooks: a file verifies when it starts with ``GOOD``."""

    def __init__(self, core: RaftCore) -> None:
        self.core = core
        self.verified: list[str] = []
        self.taken: list[int] = []
        self.next_state = "idle"

    def take(self, raft_index: int, engine_meta: bytes) -> None:
        self.taken.append(raft_index)
        self.next_state = "writing"

    def state(self) -> str:
        state = self.next_state
        if state in ("done", "failed"):
            self.next_state = "idle"
        return state

    def load(self, path: str) -> bytes:
        raise AssertionError("a leader loads nothing")

    def engine_meta(self, path: str) -> bytes:
        core = self.core
        meta = {"index": core.snap_index, "term": core.snap_term, "voters": list(core.voters)}
        return json.dumps(meta).encode()

    def verify(self, path: str) -> str | None:
        self.verified.append(path)
        with open(path, "rb") as f:
            if f.read().startswith(GOOD):
                return None
        return f"{path}: corrupt snapshot at byte 7: record 1 of 3: CRC mismatch"


class Writer:
    """A peer connection's writer: what was written to it."""

    def __init__(self) -> None:
        self.data = bytearray()

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        return None

    def messages(self) -> list[Any]:
        out, pos = [], 0
        while pos < len(self.data):
            (n,) = LEN.unpack_from(self.data, pos)
            pos += LEN.size
            out.append(decode_message(bytes(self.data[pos : pos + n])))
            pos += n
        return out


class Transport:
    def __init__(self) -> None:
        self.peers: dict[str, Peer] = {}

    def peer(self, address: str) -> Peer:
        if address not in self.peers:
            peer = Peer(address)
            peer.writers[0] = Writer()  # type: ignore[assignment]
            self.peers[address] = peer
        return self.peers[address]


class Wal:
    def rewrite(self, *args: object) -> None:
        return None


def leader_stream(tmp_path: Path) -> tuple[SnapshotStream, Hooks, RaftCore, str, Writer]:
    sim = Sim(["a", "b", "c"])
    leader = elect(sim)
    for i in range(5):
        sim.propose(b"x%d" % i)
    sim.run(0.3)
    core = sim.cores[leader]
    follower = next(n for n in sim.cores if n != leader)
    hooks = Hooks(core)
    transport = Transport()
    config = NativeConfig(
        node_id=leader,
        peers={n: f"127.0.0.1:{1000 + i}" for i, n in enumerate(sim.cores)},
        journal_dir=str(tmp_path),
        snapshot_every_items=20,
    )
    stream = SnapshotStream(
        config,
        asyncio.get_running_loop(),
        core,
        Wal(),  # type: ignore[arg-type]
        hooks,
        str(tmp_path / "dump.snap"),
        transport,  # type: ignore[arg-type]
        lambda index: None,
    )
    writer = transport.peer(follower).writer
    assert isinstance(writer, Writer)
    return stream, hooks, core, follower, writer


async def send(stream: SnapshotStream, to: str) -> None:
    stream.start_send(to)
    await asyncio.gather(*stream._sending.values())


def put_dump(tmp_path: Path, data: bytes) -> None:
    """A new dump file (a new inode, as publishing a snapshot links one)."""
    tmp = tmp_path / "new.snap"
    tmp.write_bytes(data)
    os.replace(tmp, tmp_path / "dump.snap")


def test_a_damaged_dump_is_not_sent_and_a_fresh_snapshot_replaces_it(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> None:
        stream, hooks, core, follower, writer = leader_stream(tmp_path)
        put_dump(tmp_path, b"g00d snapshot bytes, one flipped")
        with caplog.at_level(logging.ERROR, logger="raftlog.native.snapshot_stream"):
            await send(stream, follower)
        assert writer.data == b""  # not one chunk of it
        errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1, errors
        assert str(tmp_path / "dump.snap") in errors[0] and "at byte 7" in errors[0], errors
        assert "sending-" not in errors[0]  # the dump's name, not the link's
        assert hooks.taken == [core.delivered]  # a fresh snapshot, asked for at once

        # asked again (the core retries after a failed transfer): not checked or sent again
        caplog.clear()
        await send(stream, follower)
        assert writer.data == b"" and len(hooks.verified) == 1
        assert not [r for r in caplog.records if r.levelno == logging.ERROR]

        # the fresh snapshot is written and published: that one is checked and sent
        put_dump(tmp_path, GOOD + b" after the retake")
        hooks.next_state = "done"
        stream.poll()
        assert core.role == Role.LEADER and not core.transfer_to
        await send(stream, follower)
        assert len(hooks.verified) == 2
        chunks = writer.messages()
        assert [m.type for m in chunks] == [MsgType.SNAPSHOT]
        assert chunks[0].data == GOOD + b" after the retake" and chunks[0].flag

    asyncio.run(run())


def test_a_good_dump_is_sent_after_one_check(tmp_path: Path) -> None:
    async def run() -> None:
        stream, hooks, _core, follower, writer = leader_stream(tmp_path)
        put_dump(tmp_path, GOOD)
        await send(stream, follower)
        assert len(hooks.verified) == 1 and hooks.taken == []
        assert [m.data for m in writer.messages()] == [GOOD]

    asyncio.run(run())


def test_no_fresh_snapshot_hands_leadership_to_another_member(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def run() -> None:
        stream, hooks, core, follower, writer = leader_stream(tmp_path)
        put_dump(tmp_path, b"damaged")
        await send(stream, follower)
        assert hooks.taken
        with caplog.at_level(logging.ERROR, logger="raftlog.native.snapshot_stream"):
            hooks.next_state = "failed"  # the fresh snapshot could not be written
            stream.poll()
        assert core.transfer_to and core.transfer_to != core.me
        assert any("handing leadership" in r.getMessage() for r in caplog.records)
        await send(stream, follower)
        assert writer.data == b""  # still never the damaged one

    asyncio.run(run())
