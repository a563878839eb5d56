"""The replica link against a real redis-server 7.0.15 (research §3): the handshake matrix,
offsets equal to ``master_repl_offset``, the acked offset the master reports, the stream after
a diskless sync, and PSYNC resuming with ``+CONTINUE``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from replicator.redis.driver import ReplicaLink
from replicator.redis.errors import AuthError
from replicator.redis.protocol import (
    Continue,
    Event,
    FullSync,
    RdbBegin,
    RdbChunk,
    RdbEnd,
    ReplicaConfig,
    StreamCommand,
)
from tests.redis_harness import RedisServer

pytestmark = [pytest.mark.integration]

FAST = {"repl-diskless-sync-delay": "0"}


async def until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll without blocking the loop the link runs on."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")


class Session:
    """A link whose consumer records every event; the sink "confirms" what was consumed,
    unless a test pins ``confirmed`` to hold the ACK back."""

    def __init__(self, server: RedisServer, config: ReplicaConfig) -> None:
        self.server = server
        self.events: list[Event] = []
        self.consumed = 0
        self.confirmed: int | None = None
        # a small spool memory: a stuck consumer's backlog goes to disk (the spill file)
        self.link = ReplicaLink(
            "127.0.0.1",
            server.port,
            self.consume,
            self.confirm,
            config,
            spool_memory_bytes=64 * 1024,
        )
        self.task: asyncio.Task[None] | None = None

    async def consume(self, event: Event) -> None:
        self.events.append(event)
        if isinstance(event, FullSync):
            self.consumed = event.offset
        elif isinstance(event, StreamCommand):
            assert event.start == self.consumed, "commands are contiguous"
            self.consumed = event.end

    def confirm(self) -> int:
        return self.consumed if self.confirmed is None else self.confirmed

    async def __aenter__(self) -> Session:
        self.task = asyncio.create_task(self.link.run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.link.close()
        assert self.task is not None
        await asyncio.wait_for(self.task, 10)

    def commands(self) -> list[list[bytes]]:
        return [e.argv for e in self.events if isinstance(e, StreamCommand)]

    def rdb(self) -> bytes:
        return b"".join(e.data for e in self.events if isinstance(e, RdbChunk))

    def info(self) -> dict[str, Any]:
        info: dict[str, Any] = self.server.client().info("replication")
        return info

    def master_acked(self) -> int | None:
        slave = self.info().get("slave0")
        return None if not slave else int(slave["offset"])

    async def caught_up(self, timeout: float = 15.0) -> int:
        """Until we consumed exactly master_repl_offset and the master shows it as acked."""
        await until(
            lambda: self.consumed == self.info()["master_repl_offset"],
            timeout,
            "our offset to reach master_repl_offset",
        )
        offset = self.consumed
        await until(
            lambda: self.master_acked() == offset, timeout, f"the master to show ACK {offset}"
        )
        return offset


async def full_sync_then_writes(server: RedisServer, config: ReplicaConfig) -> Session:
    r = server.client()
    r.set(b"before", b"1")
    async with Session(server, config) as s:
        await until(lambda: any(isinstance(e, RdbEnd) for e in s.events), 30, "the RDB")
        r.set(b"after", b"2")
        r.rpush(b"list", b"a", b"b\r\n")
        offset = await s.caught_up()
        assert s.link.acked == offset
    return s


@pytest.mark.parametrize("capa_psync2", [True, False])
@pytest.mark.parametrize("capa_eof", [True, False])
@pytest.mark.parametrize("diskless", [True, False])
def test_handshake_matrix(
    tmp_path: Path, diskless: bool, capa_eof: bool, capa_psync2: bool
) -> None:
    config = {**FAST, "repl-diskless-sync": "yes" if diskless else "no"}
    with RedisServer(tmp_path, config=config) as server:
        replica = ReplicaConfig(capa_eof=capa_eof, capa_psync2=capa_psync2, listening_port=7000)
        s = asyncio.run(full_sync_then_writes(server, replica))
        kinds = [type(e) for e in s.events]
        assert kinds[:2] == [FullSync, RdbBegin]
        begin = s.events[1]
        assert isinstance(begin, RdbBegin)
        # a master falls back to a disk payload for a replica without capa eof
        assert (begin.size is None) == (diskless and capa_eof)
        rdb = s.rdb()
        assert rdb.startswith(b"REDIS0010") and b"before" in rdb
        if begin.size is not None:
            assert len(rdb) == begin.size
        assert s.commands() == [
            [b"SELECT", b"0"],
            [b"SET", b"after", b"2"],
            [b"RPUSH", b"list", b"a", b"b\r\n"],
        ]


def test_keepalive_newlines_of_the_diskless_delay_are_skipped(tmp_path: Path) -> None:
    with RedisServer(tmp_path, config={"repl-diskless-sync-delay": "2"}) as server:
        s = asyncio.run(full_sync_then_writes(server, ReplicaConfig()))
        assert s.link.protocol.keepalives >= 1  # one a second before +FULLRESYNC


def test_keepalive_newlines_of_a_slow_disk_bgsave_are_skipped(tmp_path: Path) -> None:
    config = {"repl-diskless-sync": "no", "rdb-key-save-delay": "1000"}
    with RedisServer(tmp_path, config=config) as server:
        r = server.client()
        r.mset({b"k%d" % i: b"v" for i in range(2500)})  # ~2.5 s of BGSAVE
        s = asyncio.run(full_sync_then_writes(server, ReplicaConfig()))
        assert s.link.protocol.keepalives >= 1  # between +FULLRESYNC and $<len>
        assert b"k2499" in s.rdb()


def test_requirepass(tmp_path: Path) -> None:
    with RedisServer(tmp_path, config={**FAST, "requirepass": "s3cret"}) as server:
        asyncio.run(full_sync_then_writes(server, ReplicaConfig(password="s3cret")))
        with pytest.raises(AuthError) as wrong:
            asyncio.run(run_to_end(server, ReplicaConfig(password="nope")))
        assert wrong.value.step == "AUTH"
        with pytest.raises(AuthError) as missing:
            asyncio.run(run_to_end(server, ReplicaConfig()))
        assert missing.value.step == "PING"


def test_minimal_acl_user(tmp_path: Path) -> None:
    """``+psync +replconf +ping`` is enough (research §3.1 derived it; this probes it), and
    each of the three is needed: without it, that step is refused with NOPERM."""
    with RedisServer(tmp_path, config=FAST) as server:
        r = server.client()
        r.execute_command("ACL", "SETUSER", "repl", "on", ">pw", "+psync", "+replconf", "+ping")
        asyncio.run(full_sync_then_writes(server, ReplicaConfig(username="repl", password="pw")))
        for missing, step in [("psync", "PSYNC"), ("replconf", "REPLCONF capa"), ("ping", "PING")]:
            grants = [f"+{c}" for c in ("psync", "replconf", "ping") if c != missing]
            r.execute_command("ACL", "SETUSER", f"no{missing}", "on", ">pw", *grants)
            with pytest.raises(AuthError) as e:
                asyncio.run(
                    run_to_end(server, ReplicaConfig(username=f"no{missing}", password="pw"))
                )
            assert e.value.step == step and "NOPERM" in e.value.reply
        with pytest.raises(AuthError) as wrong:
            asyncio.run(run_to_end(server, ReplicaConfig(username="repl", password="bad")))
        assert wrong.value.step == "AUTH" and "WRONGPASS" in wrong.value.reply


async def run_to_end(server: RedisServer, config: ReplicaConfig) -> None:
    async def ignore(event: Event) -> None:
        pass

    link = ReplicaLink("127.0.0.1", server.port, ignore, lambda: 0, config)
    await asyncio.wait_for(link.run(), 15)


def test_acks_only_the_confirmed_offset(tmp_path: Path) -> None:
    async def scenario(server: RedisServer) -> None:
        r = server.client()
        async with Session(server, ReplicaConfig()) as s:
            await until(lambda: any(isinstance(e, RdbEnd) for e in s.events), 30, "the RDB")
            base = await s.caught_up()
            s.confirmed = base  # the sink holds everything from now on
            for i in range(20):
                r.set(b"k%d" % i, b"x" * 100)
            await until(lambda: s.consumed == s.info()["master_repl_offset"], 15, "all writes read")
            await asyncio.sleep(2.5)  # two ACK periods: the master must still see `base`
            assert s.master_acked() == base and s.link.acked == base
            middle = [e for e in s.events if isinstance(e, StreamCommand)][-10].end
            s.confirmed = middle
            await until(lambda: s.master_acked() == middle, 5, f"ACK {middle}")
            assert s.link.acked == middle
            s.confirmed = None
            await s.caught_up()

    with RedisServer(tmp_path, config=FAST) as server:
        asyncio.run(scenario(server))


def test_getack_is_answered_at_once_with_the_confirmed_offset(tmp_path: Path) -> None:
    async def scenario(server: RedisServer) -> None:
        r = server.client()
        async with Session(server, ReplicaConfig()) as s:
            await until(lambda: any(isinstance(e, RdbEnd) for e in s.events), 30, "the RDB")
            base = await s.caught_up()
            # From here on only a GETACK answer can move the master's view of our offset.
            s.link.ack_interval_s = 60
            await asyncio.sleep(1.2)  # the timer's pending 1-second tick passes
            s.confirmed = base
            r.set(b"w", b"1")
            await until(lambda: s.consumed == s.info()["master_repl_offset"], 5, "the write")
            assert s.master_acked() == base
            s.confirmed = None  # the sink confirmed the write
            # WAIT sends REPLCONF GETACK *, and returns as soon as our answer covers the write
            started = time.monotonic()
            replicas = await asyncio.to_thread(r.execute_command, "WAIT", 1, 5000)
            assert replicas == 1 and time.monotonic() - started < 1.0
            assert [b"REPLCONF", b"GETACK", b"*"] in s.commands()
            assert s.master_acked() == s.link.acked and s.link.acked is not None
            assert s.link.acked > base

    with RedisServer(tmp_path, config=FAST) as server:
        asyncio.run(scenario(server))


@pytest.mark.parametrize("capa_psync2", [True, False])
def test_psync_continue_resumes_without_select(tmp_path: Path, capa_psync2: bool) -> None:
    async def scenario(server: RedisServer) -> None:
        r1 = server.client(db=1)
        async with Session(server, ReplicaConfig()) as first:
            await until(lambda: any(isinstance(e, RdbEnd) for e in first.events), 30, "the RDB")
            r1.set(b"a", b"1")
            offset = await first.caught_up()
        sync = first.events[0]
        assert isinstance(sync, FullSync)
        r1.set(b"b", b"2")  # while no replica is connected: kept in the backlog
        r1.incr(b"n")
        resume = ReplicaConfig(resume=(sync.replid, offset), capa_psync2=capa_psync2)
        async with Session(server, resume) as second:
            second.consumed = offset
            await second.caught_up()
        # +CONTINUE <replid> to a psync2 replica, a bare +CONTINUE otherwise (research §3.2)
        assert second.events[0] == Continue(sync.replid if capa_psync2 else None)
        assert second.link.protocol.replid == sync.replid
        assert second.commands() == [[b"SET", b"b", b"2"], [b"INCRBY", b"n", b"1"]]
        first_cmd = second.events[1]
        assert isinstance(first_cmd, StreamCommand) and first_cmd.start == offset

    with RedisServer(tmp_path, config=FAST) as server:
        asyncio.run(scenario(server))


def test_a_blocked_consumer_neither_stops_the_acks_nor_the_reading(tmp_path: Path) -> None:
    """The sink is stuck for 5 s while the master writes: the ACK timer keeps the link alive
    under ``repl-timeout 3`` with the confirmed offset, and the reader keeps draining."""

    async def scenario(server: RedisServer) -> None:
        r = server.client()
        async with Session(server, ReplicaConfig()) as s:
            await until(lambda: any(isinstance(e, RdbEnd) for e in s.events), 30, "the RDB")
            base = await s.caught_up()
            gate = asyncio.Event()
            consume = s.link.consumer

            async def stuck(event: Event) -> None:
                await gate.wait()
                await consume(event)

            s.link.consumer = stuck  # the consumer task picks it up at its next event
            for i in range(200):
                r.set(b"k%d" % i, b"x" * 1000)
            master_offset = s.info()["master_repl_offset"]
            await until(lambda: s.link.protocol.offset == master_offset, 10, "all bytes read")
            assert s.link.pending_events >= 199
            assert s.link.spooled_bytes > 100_000  # 200 kB of writes: most of it on disk
            await asyncio.sleep(5)
            assert s.task is not None and not s.task.done(), "the link survived repl-timeout"
            assert s.master_acked() == base
            gate.set()
            await s.caught_up()
            assert len(s.commands()) >= 201

    with RedisServer(tmp_path, config={**FAST, "repl-timeout": "3"}) as server:
        asyncio.run(scenario(server))
