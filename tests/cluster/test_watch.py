"""Watch across failures on 3 real nodes (DESIGN.md §5): watchers following a prefix through a
leader kill (one on a surviving follower, one on the killed leader that resumes elsewhere),
and a watch from a compacted revision with the snapshot option converging to a fresh read."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nameserver.client import SNAPSHOT_END, Client, ClientError, Watch, WatchCompacted, WatchEvent
from tests.cluster.test_snapshots import SnapshotCluster
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.cluster


class Collector:
    """Consumes a Watch on a thread until closed."""

    def __init__(self, watch: Watch) -> None:
        self.watch = watch
        self.events: list[WatchEvent] = []
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for ev in self.watch:
                self.events.append(ev)
        except BaseException as exc:  # reported by the test
            self.error = exc

    def revisions(self) -> list[int]:
        return [e.revision for e in self.events if not e.snapshot_revision]

    def close(self) -> None:
        self.watch.close()
        self._thread.join(10)


def ordered(endpoints: list[str], first: int) -> list[str]:
    return endpoints[first:] + endpoints[:first]


def test_watchers_follow_a_prefix_through_a_leader_kill(cluster: Cluster) -> None:
    c = cluster
    leader = c.leader()
    follower = (leader + 1) % c.n
    writer = Client(ordered(c.endpoints, follower), timeout_s=10)
    start = writer.put("lk/start", "0").revision + 1
    on_follower = Client(ordered(c.endpoints, follower))
    on_leader = Client(ordered(c.endpoints, leader))
    collectors = [
        Collector(on_follower.watch("lk/", prefix=True, start_revision=start)),
        Collector(on_leader.watch("lk/", prefix=True, start_revision=start)),
    ]
    acked: list[int] = []
    stop = threading.Event()

    def write() -> None:
        i = 0
        while not stop.is_set():
            try:
                acked.append(writer.put(f"lk/{i:05d}", f"v{i}").revision)
                i += 1
            except ClientError as exc:
                if not exc.retriable:
                    raise
            time.sleep(0.005)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    try:
        wait_until(lambda: len(acked) >= 60, 30, "writes before the kill")
        c.kill(leader)
        before_kill = len(acked)
        wait_until(lambda: len(acked) >= before_kill + 60, 60, "writes after the kill")
    finally:
        stop.set()
        thread.join(30)
    last = acked[-1]
    try:
        for col in collectors:
            wait_until(
                lambda col=col: col.error is None and (col.revisions() or [0])[-1] >= last,
                60,
                lambda col=col: (
                    f"watcher stuck: error {col.error!r}, "
                    f"last {(col.revisions() or [0])[-1]} < {last}"
                ),
            )
    finally:
        for col in collectors:
            col.close()
    follower_revs, leader_revs = (col.revisions() for col in collectors)
    for revs in (follower_revs, leader_revs):
        assert revs == sorted(set(revs)), "every event once, in order"
        assert set(acked) <= set(revs), "every acknowledged write seen"
    cut = min(follower_revs[-1], leader_revs[-1])
    assert [r for r in follower_revs if r <= cut] == [r for r in leader_revs if r <= cut]
    assert collectors[1].watch.reconnects >= 1  # its node died: it resumed elsewhere
    for client in (writer, on_follower, on_leader):
        client.close()


@pytest.fixture
def compacting_cluster(tmp_path: Path) -> Iterator[SnapshotCluster]:
    c = SnapshotCluster(
        tmp_path / "cluster",
        3,
        ["--snapshot-every-items", "20", "--snapshot-keep", "1", "--segment-max-bytes", "4096"],
    )
    try:
        c.wait_ready(30)
        c.wait_announced(30)
        yield c
    finally:
        c.close()


def test_compacted_watch_with_snapshot_option_matches_a_fresh_read(
    compacting_cluster: SnapshotCluster,
) -> None:
    c = compacting_cluster
    client = Client(c.endpoints, timeout_s=10)
    for i in range(300):
        client.put(f"sn/{i % 40:02d}", f"v{i}")
        if i % 7 == 0:
            client.delete(f"sn/{(i * 3) % 40:02d}")

    def first_segment(node: int) -> int:
        segs = sorted(int(p.stem) for p in (c.data_dir(node) / "log").glob("*.seg"))
        return segs[0] if segs else 0

    wait_until(lambda: all(first_segment(i) > 10 for i in range(c.n)), 30, "segments deleted")
    with pytest.raises(WatchCompacted) as info:
        next(iter(client.watch("sn/", prefix=True, start_revision=2)))
    assert info.value.compact_revision > 2

    col = Collector(client.watch("sn/", prefix=True, start_revision=2, snapshot_if_compacted=True))
    try:
        wait_until(lambda: any(e.type == SNAPSHOT_END for e in col.events), 30, "snapshot")
        for i in range(20):  # changes after the snapshot
            client.put(f"sn/{i:02d}", f"after{i}")
            client.delete(f"sn/{39 - i:02d}")
        final = client.put("sn/zz", "end").revision
        wait_until(
            lambda: col.error is None and (col.revisions() or [0])[-1] >= final,
            30,
            lambda: f"events up to {final}: error {col.error!r}",
        )
    finally:
        col.close()
    view: dict[bytes, bytes] = {}
    snapshot: dict[bytes, bytes] = {}
    for ev in col.events:
        if ev.type == SNAPSHOT_END:
            view = snapshot
        elif ev.snapshot_revision:
            assert ev.kv is not None
            snapshot[ev.kv.key] = ev.kv.value
        elif ev.type == "PUT":
            assert ev.kv is not None
            view[ev.kv.key] = ev.kv.value
        else:
            assert ev.kv is not None
            view.pop(ev.kv.key, None)
    fresh = {kv.key: kv.value for kv in client.get("sn/", prefix=True).kvs}
    assert view == fresh
    client.close()
