"""A store seeded from an etcd 3.4 snapshot counts revisions as etcd does from its first entry
(nameserver/etcd_snapshot.py, nameserver/kv/revision.py): the seeded image carries the store
counter at etcd's revision, so the member record a node writes on its first start, the
leader's switch entry and any other request that changes no key keep etcd's revision, and a
put moves it by one, wherever the entries land. Seeded with ``offset_revisions`` the store
counts by log offset until a switch, as before (``snapshot restore --from-etcd
--offset-revisions``; the flag alone, for a metaledger snapshot, is refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nameserver import cli
from nameserver.cli.exitcodes import ExitCode
from nameserver.cluster.records import Member
from nameserver.etcd_snapshot import from_etcd_image, seed_from_etcd
from nameserver.kinds import REGISTRY
from nameserver.kv.revision import count_entry
from nameserver.state.image import MetadataImage
from nameserver.state.machine import MetadataStateMachine, image_from_records
from raftlog import Entry
from snapshots import read_snapshot_columns
from snapshots.etcdfmt import EtcdImage, KeyRevision, write_etcd_snapshot
from tests.property.test_kv_history_property import put

REVISION = 14
ETCD = EtcdImage(
    keys=(
        KeyRevision(2, 0, b"a", b"1", 2, 2, 1),
        KeyRevision(3, 0, b"a", b"2", 2, 3, 2),
        KeyRevision(9, 0, b"b", b"x", 9, 9, 1),
        KeyRevision(REVISION, 0, b"c", tombstone=True),  # etcd's last request deleted a key
    ),
    consistent_index=30,  # etcd's raft index: more entries than revisions
    cluster_version="3.4.0",
)


def member_record(name: str) -> Entry:
    """The entry a node proposes on its first start (``Server._announce``)."""
    me = Member(name, 0xABC, f"http://127.0.0.1:{len(name)}", ("http://127.0.0.1:1",))
    return Entry("member", me.id.encode(), me.to_record())


class Seeded:
    """A state machine over a seeded image, fed entries at the offsets after it."""

    def __init__(self, image: MetadataImage) -> None:
        self.machine = MetadataStateMachine(image)
        self.offset = image.offset

    def step(self, entry: Entry) -> MetadataImage:
        self.offset += 1
        self.machine.apply(self.offset, 1, [entry])
        self.machine.publish()
        return self.machine.image


def _seeded_dir(tmp_path: Path, etcd: EtcdImage, offset_revisions: bool = False) -> MetadataImage:
    """Seed a data dir from ``etcd`` as ``snapshot restore --from-etcd`` does, and restore its
    image as a node starting on it does."""
    path = tmp_path / "etcd.db"
    path.write_bytes(write_etcd_snapshot(etcd))
    data_dir = tmp_path / "data"
    seed_from_etcd(str(path), str(data_dir), offset_revisions=offset_revisions)
    (snap,) = (data_dir / "snap").iterdir()
    columns = read_snapshot_columns(snap)
    return image_from_records(columns, columns.info.last_offset, 0, REGISTRY)


def test_member_records_after_a_seeded_image_keep_etcds_revision(tmp_path: Path) -> None:
    image = _seeded_dir(tmp_path, ETCD)
    assert image.offset == REVISION and image.revision == REVISION
    assert image.store_rev.revision == REVISION  # counts etcd's way before any entry
    n = Seeded(image)
    for name in ("n0", "n1", "n2"):  # every member's record, before any switch
        assert n.step(member_record(name)).revision == REVISION
    assert n.step(Entry("noop")).revision == REVISION
    assert n.step(count_entry()).revision == REVISION  # the leader's switch: nothing
    assert n.step(count_entry(untouched=n.offset - 1)).revision == REVISION
    after = n.step(put(b"new", b"v"))
    assert after.revision == REVISION + 1  # a put moves it, by one
    kv = after.kv.get(b"new")
    assert kv is not None and (kv.create_revision, kv.mod_revision) == (REVISION + 1,) * 2
    assert n.step(member_record("n3")).revision == REVISION + 1
    assert n.step(put(b"a", b"3")).revision == REVISION + 2
    assert n.offset == REVISION + 9  # offsets went on numbering every request


def test_an_image_seeded_with_offset_revisions_counts_by_offset_until_switched(
    tmp_path: Path,
) -> None:
    image = _seeded_dir(tmp_path, ETCD, offset_revisions=True)
    assert image.revision == REVISION and image.store_rev.revision == -1
    n = Seeded(image)
    assert n.step(member_record("n0")).revision == REVISION + 1  # every offset a revision
    assert n.step(count_entry()).revision == REVISION + 1  # switched: from where it was
    assert n.step(member_record("n1")).revision == REVISION + 1
    assert n.step(put(b"new", b"v")).revision == REVISION + 2


def test_a_seeded_empty_etcd_store_numbers_its_first_put_2_as_etcd() -> None:
    empty = EtcdImage(keys=(), consistent_index=4, cluster_version="3.4.0")
    image = image_from_records(from_etcd_image(empty), empty.revision, 0, REGISTRY)
    assert image.revision == 1  # an empty etcd store's revision
    n = Seeded(image)
    assert n.step(member_record("n0")).revision == 1
    assert n.step(put(b"k", b"v")).revision == 2


def test_the_cli_seeds_etcds_count_unless_told_and_refuses_the_flag_without_from_etcd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "etcd.db"
    path.write_bytes(write_etcd_snapshot(ETCD))
    for flags, counts in (((), "etcd"), (("--offset-revisions",), "offset")):
        data_dir = tmp_path / counts
        argv = ["snapshot", "restore", "--from-etcd", str(path), "--data-dir", str(data_dir)]
        assert cli.main([*argv, *flags, "-w", "json"]) == ExitCode.OK
        doc = json.loads(capsys.readouterr().out)
        assert (doc["revision"], doc["revisions"]) == (REVISION, counts)
        (snap,) = (data_dir / "snap").iterdir()
        assert ("revision" in read_snapshot_columns(snap).columns) == (counts == "etcd")
    # a metaledger snapshot keeps its store's count: the flag is refused, nothing written
    argv = ["snapshot", "restore", str(path), "--data-dir", str(tmp_path / "own")]
    assert cli.main([*argv, "--offset-revisions"]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "metaledger: snapshot restore: --offset-revisions is for --from-etcd (a metaledger "
        "snapshot keeps the count its store had)"
    ]
    assert not (tmp_path / "own").exists()
