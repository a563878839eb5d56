"""The store revision as etcd 3.4 counts it (nameserver/kv/revision.py): until a
``count_revisions`` entry, every offset is a revision (as metaledger always counted); from
it on, only a request that changes keys moves it, every change of a request shares it, and
its counter record leads the request's effects, so the change log, the kv history (live and
rebuilt), snapshots and watch replay all read the same revisions."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nameserver.kinds import REGISTRY
from nameserver.kv.history import KvHistory
from nameserver.kv.history_rebuild import rebuild
from nameserver.kv.mvcc import Compacted, FutureRevision
from nameserver.kv.records import KeyValue, StoreRevision
from nameserver.kv.revision import (
    COUNT_REVISIONS,
    REVISION,
    count_entry,
    counted_revision,
    revision_of,
)
from nameserver.leases.expiry import lease_entry
from nameserver.state.image import MetadataDelta, MetadataImage
from nameserver.state.machine import (
    CapturedImage,
    MetadataStateMachine,
    image_from_records,
    image_records,
)
from nameserver.watch.hub import Watcher, WatchHub
from protos import records_pb2
from protos.etcdserverpb import kv_pb2
from protos.etcdserverpb import rpc_pb2 as pb
from raftlog import Change, Effect, Entry
from snapshots import SnapshotMeta, write_snapshot
from tests.property.test_kv_history_property import compact, delete, put
from tests.unit.nameserver.kv.test_history_rebuild import Segments


def grant(lease_id: int) -> Entry:
    op = records_pb2.LeaseOperation()
    op.grant.id, op.grant.ttl_s = lease_id, 60
    return lease_entry(op, lease_id)


def revoke(lease_id: int) -> Entry:
    op = records_pb2.LeaseOperation()
    op.revoke.id = lease_id
    return lease_entry(op, lease_id)


def put_leased(key: bytes, lease_id: int) -> Entry:
    op = records_pb2.KvOperation(put=pb.PutRequest(key=key, value=b"l", lease=lease_id))
    return Entry("kv", key, op.SerializeToString())


def txn_entry(req: pb.TxnRequest) -> Entry:
    return Entry("txn", value=records_pb2.TxnOperation(txn=req).SerializeToString())


def two_puts() -> Entry:
    ops = [pb.RequestOp(request_put=pb.PutRequest(key=k, value=b"t")) for k in (b"t1", b"t2")]
    return txn_entry(pb.TxnRequest(success=ops))


def failing_txn() -> Entry:
    cmp = pb.Compare(key=b"a", target=pb.Compare.VALUE, result=pb.Compare.EQUAL, value=b"no")
    ops = [pb.RequestOp(request_put=pb.PutRequest(key=b"never", value=b"x"))]
    return txn_entry(pb.TxnRequest(compare=[cmp], success=ops))


class Node:
    """A state machine with its kv history and change log, fed as the apply thread does."""

    def __init__(self) -> None:
        self.machine = MetadataStateMachine.empty(REGISTRY)
        self.history = KvHistory(
            self.machine.image, lambda: self.machine.image, retained_from=lambda: self.retained
        )
        self.offset = 0
        self.retained = 0
        self.log: list[tuple[int, Effect]] = []  # the change log
        self.images: list[MetadataImage] = [self.machine.image]

    def step(self, entry: Entry) -> tuple[list[Effect], Any]:
        self.offset += 1
        before = CapturedImage(self.machine.image)
        try:
            effects, result = self.machine.apply(self.offset, 1, [entry])
        except Exception as exc:  # a rejected request: a no-op at its offset
            effects, result = [], exc
        self.machine.publish()
        self.log.extend((self.offset, e) for e in effects)
        self.history.on_applied(before, self.offset, [Change(self.offset, 1, 0, effects)])
        self.images.append(self.machine.image)
        return effects, result

    @property
    def image(self) -> MetadataImage:
        return self.machine.image


def test_a_store_counts_by_offset_until_the_switch_and_etcds_way_after() -> None:
    n = Node()
    n.step(put(b"a", b"1"))
    n.step(grant(7))
    assert n.image.revision == n.image.offset == 2  # every offset a revision
    effects, _ = n.step(put(b"a", b"2"))
    assert [e.type for e in effects] == ["kv"]  # nothing more in the change log
    assert n.image.kv.get(b"a").mod_revision == 3  # type: ignore[union-attr]

    effects, _ = n.step(Entry(COUNT_REVISIONS))  # offset 4: counts from revision 3
    assert n.image.revision == 3 and n.image.offset == 4
    assert [e.type for e in effects] == [REVISION]
    assert n.step(Entry(COUNT_REVISIONS))[0] == []  # again: nothing

    expected = [
        (put(b"a", b"3"), 4),  # a put moves it
        (grant(8), 4),  # lease requests keep it
        (put_leased(b"l", 8), 5),
        (delete(b"missing", b""), 5),  # a delete that deletes nothing keeps it
        (failing_txn(), 5),  # a txn that writes nothing keeps it
        (two_puts(), 6),  # one revision for every change of a txn
        (revoke(7), 6),  # a revoke with no keys keeps it
        (revoke(8), 7),  # one that deletes its keys moves it
        (delete(b"t1", b""), 8),
    ]
    for entry, revision in expected:
        effects, result = n.step(entry)
        assert n.image.revision == revision, entry
        assert n.image.offset == n.offset
        kv_changes = [e for e in effects if e.type == "kv"]
        if kv_changes:  # the counter leads the request's effects, or a put carrying it
            first = effects[0]
            assert first.type == REVISION or (
                first.type == "kv"
                and not first.delete
                and KeyValue.from_record(first.value).mod_revision == revision
            )
            assert [e.type for e in effects].count(REVISION) == (first.type == REVISION)
            assert revision_of(n.offset, effects) == revision
        else:
            assert all(e.type != REVISION for e in effects)
        header = getattr(result, "header", None)
        if header is not None:  # kv and txn answers say the store revision after them
            assert header.revision == revision, entry
    assert n.image.kv.get(b"a").mod_revision == 4  # type: ignore[union-attr]
    t2 = n.image.kv.get(b"t2")
    assert t2 is not None and t2.create_revision == t2.mod_revision == 6
    assert n.image.kv.get(b"l") is None


def test_compaction_is_checked_against_the_store_revision_and_keeps_it() -> None:
    n = Node()
    n.step(Entry(COUNT_REVISIONS))  # revision 0 at offset 1
    for i in range(3):
        n.step(put(b"k", b"%d" % i))
        n.step(grant(100 + i))
    assert n.image.revision == 3 and n.offset == 7
    _, result = n.step(compact(4))
    assert isinstance(result, FutureRevision)
    effects, _ = n.step(compact(3))
    assert [e.type for e in effects] == [REVISION, "mvcc"]
    assert revision_of(n.offset, effects) == 3
    assert n.image.revision == 3 and n.image.mvcc.compact_revision == 3
    assert n.history.compact_revision_at(3) == 3


def test_a_leaders_switch_entry_has_etcds_floor_and_an_old_one_none() -> None:
    new = Node()
    new.step(count_entry())  # the first entry: an empty etcd store is at revision 1
    assert new.image.revision == 1
    assert new.step(put(b"k", b"v"))[1].header.revision == 2  # etcd's first put: 2
    old = Node()
    old.step(Entry(COUNT_REVISIONS))  # written before the floor: counts from 0, as it did
    assert old.image.revision == 0
    later = Node()
    for entry in [put(b"a", b"0"), grant(1), put(b"a", b"1"), count_entry()]:
        later.step(entry)
    assert later.image.revision == 3  # past the floor: the last offset, as before


def test_a_switch_entry_saying_the_store_is_untouched_starts_at_the_floor() -> None:
    """A new cluster's members' records take offsets before the switch: an entry whose
    leader saw no key change up to the offset before it starts at 1 all the same (etcd's
    first put: 2); one that says so of an earlier offset (something came between) starts
    where the rule without it does."""
    new = Node()
    for lease_id in (1, 2, 3):
        new.step(grant(lease_id))  # the member and bootstrap records' stand-ins
    new.step(count_entry(untouched=3))
    assert new.image.revision == 1
    assert new.step(put(b"k", b"v"))[1].header.revision == 2
    assert replayed(new).store_rev == new.image.store_rev  # the change log says the same
    late = Node()
    for lease_id in (1, 2, 3):
        late.step(grant(lease_id))
    late.step(count_entry(untouched=2))  # offset 3 came between the look and the entry
    assert late.image.revision == 3
    assert late.step(put(b"k", b"v"))[1].header.revision == 4


def test_the_leader_claims_an_untouched_store_only_from_its_history() -> None:
    from nameserver.cluster.revision_switch import RevisionSwitch

    n = Node()
    switch = RevisionSwitch.__new__(RevisionSwitch)
    switch.node = SimpleNamespace(history=n.history)  # type: ignore[assignment]
    n.step(grant(1))
    n.step(grant(2))
    assert switch.untouched() == 2
    n.step(put(b"k", b"v"))
    n.step(delete(b"k", b""))
    assert not n.image.kv.data and switch.untouched() is None  # deleted, not untouched
    switch.node = SimpleNamespace(history=None)  # type: ignore[assignment]
    assert switch.untouched() is None


def replayed(n: Node) -> MetadataImage:
    """The image the change log rebuilds, record by record (a restart's replay)."""
    delta = MetadataDelta(MetadataImage.empty(REGISTRY))
    for _, eff in n.log:
        delta.replay(eff.type, eff.key, eff.value, eff.delete)
    return delta.build()


def counted_node() -> Node:
    n = Node()
    for entry in [put(b"a", b"0"), grant(1), Entry(COUNT_REVISIONS), put(b"a", b"1"), grant(2)]:
        n.step(entry)
    for i in range(12):
        n.step(
            [put(b"k%d" % (i % 3), b"v%d" % i), grant(10 + i), delete(b"k%d" % (i % 2), b"")][i % 3]
        )
    return n


def test_the_change_log_and_snapshots_carry_the_revision() -> None:
    n = counted_node()
    image = n.image
    assert image.revision < image.offset
    again = replayed(n)
    assert again.revision >= 0 and again.store_rev == image.store_rev
    assert dict(again.kv.data.items()) == dict(image.kv.data.items())
    restored = image_from_records(image_records(image), image.offset, 1, REGISTRY)
    assert restored.revision == image.revision and restored.offset == image.offset
    # an image from before the counter is restored counting by offset, as before
    legacy = n.images[2]
    assert image_from_records(image_records(legacy), 2, 1, REGISTRY).revision == 2


def with_counter_records(log: list[tuple[int, Effect]]) -> list[tuple[int, Effect]]:
    """``log`` as the version before wrote it: the counter's record leading every request
    of a counting store that changed keys, a put first too."""
    out: list[tuple[int, Effect]] = []
    counting, seen = False, set()
    for offset, eff in log:
        if eff.type == REVISION:
            counting = True
        elif counting and offset not in seen and eff.type == "kv" and not eff.delete:
            rev = KeyValue.from_record(eff.value).mod_revision
            out.append((offset, Effect(REVISION, b"store", StoreRevision(rev).to_record())))
        seen.add(offset)
        out.append((offset, eff))
    return out


def test_a_put_carries_the_revision_and_both_change_logs_replay_alike() -> None:
    """A put leading its request's effects has no counter record before it (its
    mod_revision is the revision); a change log written before, with one, replays to the
    same image, and its readers take the same revision of every offset."""
    n = counted_node()
    new_log = n.log
    old_log = with_counter_records(new_log)
    assert len(old_log) > len(new_log)  # the records this version no longer writes
    images = []
    for log in (new_log, old_log):
        delta = MetadataDelta(MetadataImage.empty(REGISTRY))
        for _, eff in log:
            delta.replay(eff.type, eff.key, eff.value, eff.delete)
        images.append(delta.build())
    for image in images:
        assert image.store_rev == n.image.store_rev and image.revision == n.image.revision
        assert dict(image.kv.data.items()) == dict(n.image.kv.data.items())
        assert image.leases == n.image.leases

    def revisions(log: list[tuple[int, Effect]]) -> dict[int, int]:
        by_offset: dict[int, list[Effect]] = {}
        for offset, eff in log:
            by_offset.setdefault(offset, []).append(eff)
        return {o: revision_of(o, effs) for o, effs in by_offset.items()}

    assert revisions(new_log) == revisions(old_log)


def model(n: Node) -> dict[int, dict[bytes, bytes]]:
    """Every revision's keys, from the images after each offset."""
    out: dict[int, dict[bytes, bytes]] = {}
    for image in n.images:
        out[image.revision] = {kv.key: kv.value for kv in image.kv.range(b"\x00", b"\x00")}
    return out


def mixed_node() -> Node:
    """A store that counts by offset, switches, then takes every kind of request that keeps
    or moves the counter (a compaction among them)."""
    n = Node()
    for entry in [put(b"a", b"0"), grant(1), put(b"b", b"0"), Entry(COUNT_REVISIONS)]:
        n.step(entry)
    for entry in [
        put(b"a", b"1"),
        grant(8),
        put_leased(b"l", 8),
        two_puts(),
        failing_txn(),
        delete(b"missing", b""),
        revoke(8),
        put(b"t1", b"2"),
        compact(n.image.revision + 2),
        delete(b"t1", b""),
        put(b"a", b"2"),
        grant(9),
        put(b"c", b"1"),
    ]:
        n.step(entry)
    return n


def test_the_apply_path_follows_the_count_as_the_records_say() -> None:
    """The kv history after apply takes each request's revision from the counter before
    its group (``counted_revision``), not from its records (``revision_of``, what a reader
    of the change log does): both agree at every offset, and a history fed groups of any
    size reads every revision as the images had it."""
    n = mixed_node()
    by_offset: dict[int, list[Effect]] = {}
    for offset, eff in n.log:
        by_offset.setdefault(offset, []).append(eff)
    for offset in range(1, n.offset + 1):
        effects = by_offset.get(offset, [])
        counter = n.images[offset - 1].store_rev.revision
        rev, after = counted_revision(counter, offset, effects)
        assert rev == revision_of(offset, effects), offset
        assert after == n.images[offset].store_rev.revision, offset
    states = model(n)
    for size in (1, 2, 3, 5, n.offset):
        history = KvHistory(n.images[0], lambda: n.image)
        for start in range(1, n.offset + 1, size):
            offsets = range(start, min(start + size, n.offset + 1))
            changes = [Change(o, 1, 0, by_offset[o]) for o in offsets if o in by_offset]
            before = CapturedImage(n.images[start - 1])
            history.on_applied(before, offsets[-1], changes)
        assert history.floor == n.image.mvcc.compact_revision > 0
        for rev in range(history.floor, n.image.revision + 1):
            got = {kv.key: kv.value for kv in history.view(rev).range(b"\x00", b"\x00")}
            assert got == states[rev], (size, rev)


def test_the_history_reads_every_revision_and_the_retention_point_is_a_revision() -> None:
    n = counted_node()
    states = model(n)
    current = n.image.revision
    for rev in range(1, current + 1):
        got = {kv.key: kv.value for kv in n.history.view(rev).range(b"\x00", b"\x00")}
        assert got == states[rev], rev
    # the change log drops offsets below 12: the floor is the revision there, not 11
    n.retained = 12
    n.step(grant(99))
    floor = n.images[11].revision
    assert n.history.floor == floor < 11
    got = {kv.key: kv.value for kv in n.history.view(floor).range(b"\x00", b"\x00")}
    assert got == states[floor]


def test_a_rebuilt_history_reads_the_revisions_of_the_change_log(tmp_path: Path) -> None:
    n = counted_node()
    states = model(n)
    records = [(o, e.encode()) for o, e in n.log]
    history = KvHistory(n.image, lambda: n.image)
    store = SimpleNamespace(list=list)
    rebuild(history, n.image, store, Segments(records, 1))  # type: ignore[arg-type]
    for rev in range(1, n.image.revision + 1):
        got = {kv.key: kv.value for kv in history.view(rev).range(b"\x00", b"\x00")}
        assert got == states[rev], rev
    # from a snapshot taken after the switch: its counter is the floor
    base = n.images[9]
    path = tmp_path / "base.snap"
    write_snapshot(
        path, SnapshotMeta(cluster_id="c", last_offset=9, last_term=1), CapturedImage(base).records
    )
    info = SimpleNamespace(path=path, last_offset=9)
    history = KvHistory(n.image, lambda: n.image)
    store = SimpleNamespace(list=lambda: [info])
    rebuild(history, n.image, store, Segments(records, 10))  # type: ignore[arg-type]
    assert history.floor == base.revision
    for rev in range(base.revision, n.image.revision + 1):
        got = {kv.key: kv.value for kv in history.view(rev).range(b"\x00", b"\x00")}
        assert got == states[rev], rev
    with pytest.raises(Compacted):
        history.check(base.revision - 1, n.image.revision)


class ChangeLog:
    """The hub's history over a node's change log, with a floor."""

    def __init__(self, n: Node, first: int = 1) -> None:
        self.n = n
        self.first = first

    def floor(self, delivered: int) -> int:
        return self.first

    def changes(self, start: int, upto: int) -> Any:
        if start < self.first:
            raise Compacted(self.first)
        return ((o, e) for o, e in self.n.log if start <= o <= upto)

    def base(self, before: int, type_: str, key: bytes, end: bytes | None) -> Any:
        return 0, {}


class Sink:
    def __init__(self) -> None:
        self.responses: list[pb.WatchResponse] = []
        self.events: list[tuple[int, bytes, int]] = []

    def send(self, response: pb.WatchResponse) -> None:
        self.responses.append(response)

    def send_events(self, w: Watcher, events: list[Any], header_revision: int) -> None:
        self.events.extend((e.type, e.kv.key, e.revision) for e in events)


def watch_from(n: Node, start: int, first: int = 1) -> Sink:
    sink = Sink()

    async def main() -> None:
        hub = WatchHub(
            ChangeLog(n, first),
            lambda: n.image,
            n.offset,
            lambda rev: pb.ResponseHeader(revision=rev),
            1 << 20,
        )
        hub.attach(asyncio.get_running_loop())
        w = Watcher(1, sink, b"\x00", b"\x00")
        hub.start(w, start)
        if w.replay is not None:
            await w.replay

    asyncio.run(main())
    return sink


def test_watch_replay_counts_in_store_revisions() -> None:
    n = counted_node()
    want: list[tuple[int, bytes, int]] = []
    for offset, eff in n.log:
        if eff.type == "kv":
            rev = revision_of(offset, [e for o, e in n.log if o == offset])
            kind = kv_pb2.Event.DELETE if eff.delete else kv_pb2.Event.PUT
            want.append((kind, eff.key, rev))
    revs = [r for _, _, r in want]
    assert revs == sorted(revs) and revs[-1] == n.image.revision
    for start in (1, 3, revs[len(revs) // 2], n.image.revision):
        sink = watch_from(n, start)
        assert sink.events == [w for w in want if w[2] >= start], start
        assert not sink.responses  # nothing compacted
    # the change log starts at offset 10: what was at or after offset 10's revision is
    # there; a start below it is compacted at the first revision the log still holds
    first_rev = next(
        revision_of(o, [e]) for o, e in n.log if o >= 10 and e.type in (REVISION, "kv")
    )
    later = [w for w in want if w[2] >= first_rev]
    assert watch_from(n, first_rev, first=10).events == later
    sink = watch_from(n, first_rev - 1, first=10)
    assert not sink.events and sink.responses[0].compact_revision == first_rev


def test_a_key_value_record_keeps_its_revisions_through_the_counter() -> None:
    n = counted_node()
    for kv in n.image.kv.range(b"\x00", b"\x00"):
        assert isinstance(kv, KeyValue)
        assert kv.create_revision <= kv.mod_revision <= n.image.revision


def test_a_request_rolled_back_after_its_changes_keeps_the_revision() -> None:
    """A put over the kv quota is refused after apply made it: the counter it took rolls
    back with it, and nothing of it reaches the change log."""
    n = Node()
    n.step(Entry(COUNT_REVISIONS))
    q = records_pb2.QuotaRecord(record_type="kv", max_keys=1)
    n.step(Entry(type="quota", key=b"kv", value=q.SerializeToString()))
    n.step(put(b"a", b"1"))
    assert n.image.revision == 1
    effects, result = n.step(put(b"b", b"1"))
    assert isinstance(result, Exception) and effects == []
    assert n.image.revision == 1 and n.image.kv.get(b"b") is None
    n.step(put(b"a", b"2"))
    assert n.image.revision == 2
    assert n.image.kv.get(b"a").mod_revision == 2  # type: ignore[union-attr]
