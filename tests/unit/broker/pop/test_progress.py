"""POP progress through metaledger's KV (a fake one): flush, load, and what a new master
hands out after a failover."""

from __future__ import annotations

import asyncio
from pathlib import Path

from broker.config import BrokerConfig
from broker.core import BrokerCore
from broker.pop.progress import KvPopProgress
from broker.pop.service import PopService
from broker.replication import Standalone
from broker.state.offsets import InMemoryOffsetStore
from broker.store import MessageStore
from broker.topics import TopicConfig, TopicTable
from nameserver.client import KeyValue, RangeResult, TxnResult
from rmq.message import StoredMessage


class FakeKv:
    """get(prefix) and txn(compares, puts) over a dict, with mod revisions checked."""

    def __init__(self) -> None:
        self.data: dict[bytes, tuple[bytes, int]] = {}
        self.rev = 1

    def get(self, key: str, prefix: bool = False) -> RangeResult:
        kvs = [
            KeyValue(k, v, rev, rev, 1, 0)
            for k, (v, rev) in sorted(self.data.items())
            if k.startswith(key.encode())
        ]
        return RangeResult(self.rev, kvs, False, len(kvs))

    def txn(self, compares: list[object], success: list[object] = ()) -> TxnResult:  # type: ignore[assignment]
        for c in compares:
            key, want = c.key, c.operand  # type: ignore[attr-defined]
            if self.data.get(key, (b"", 0))[1] != want:
                return TxnResult(self.rev, False, [])
        self.rev += 1
        for op in success:
            put = op.request.request_put  # type: ignore[attr-defined]
            self.data[put.key] = (put.value, self.rev)
        return TxnResult(self.rev, True, [])


class Slave(Standalone):
    def writable(self) -> str | None:
        return "slave"


def test_a_new_master_hands_out_what_was_in_flight_and_not_what_was_acked(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        kv = FakeKv()
        config = BrokerConfig(broker_name="b", data_dir=str(tmp_path), listen_port=10911)
        store = MessageStore(str(tmp_path / "store"))
        topics = TopicTable(None)
        topics.put(TopicConfig("T", 1, 1))
        offsets = InMemoryOffsetStore()
        core = BrokerCore(config, store, Standalone(), topics, offsets)
        for i in range(6):
            await core.put(StoredMessage("T", f"m{i}".encode()))
        old = PopService(core, str(tmp_path / "old"), "b", KvPopProgress(kv, "b"))  # type: ignore[arg-type]
        got = await old.pop("G", "T", 0, 5, 60_000)
        for i in (0, 1, 3):
            await old.ack("G", "T", got[i].handle)
        await old.flush()
        assert kv.data[b"/brokers/b/pop/G/T/0"][0] == b'{"low":2,"next":5,"acked":[3]}'
        await old.ack("G", "T", got[4].handle)  # the last second before the failover: lost
        old.close()

        core.replication = Slave()  # a slave does not write its stale books to metaledger
        stale = PopService(core, str(tmp_path / "stale"), "b", KvPopProgress(kv, "b"))  # type: ignore[arg-type]
        await stale.load()
        stale.table.books[("G", "T", 0)].pass_over(9)
        await stale.flush()
        assert kv.data[b"/brokers/b/pop/G/T/0"][0] == b'{"low":2,"next":5,"acked":[3]}'
        stale.close()
        core.replication = Standalone()

        new = PopService(core, str(tmp_path / "new"), "b", KvPopProgress(kv, "b"))  # type: ignore[arg-type]
        assert await new.load() == 1
        again = await new.pop("G", "T", 0, 32, 60_000)
        assert [(p.message.body, p.attempt) for p in again] == [
            (b"m2", 2),
            (b"m4", 2),
            (b"m5", 1),
        ]
        assert offsets.load("G", "T", 0) == 2
        await new.ack("G", "T", again[0].handle)
        await new.flush()
        assert kv.data[b"/brokers/b/pop/G/T/0"][0] == b'{"low":4,"next":6,"acked":[]}'
        new.close()
        core.close()
        store.close()

    asyncio.run(main())


def test_low_is_raised_only(tmp_path: Path) -> None:
    kv = FakeKv()
    p = KvPopProgress(kv, "b")  # type: ignore[arg-type]
    p.flush({("G", "T", 0): (5, 9, [7])})
    other = KvPopProgress(kv, "b")  # type: ignore[arg-type]
    other.flush({("G", "T", 0): (3, 4, [])})  # behind: kept as it is
    assert other.load_all() == {("G", "T", 0): (5, 9, [7])}
    kv.data[b"/brokers/b/pop/G/T/1"] = (b"not json", 1)
    assert p.load_all() == {("G", "T", 0): (5, 9, [7])}
