"""QueueCheckpoint: the commit record, its bounded offset-sync history, and translate()."""

from __future__ import annotations

import itertools
import json

import pytest

from nameserver.client import CommittedOffset, OffsetList
from replicator.rocketmq.checkpoint import (
    MAX_SYNCS,
    RECENT_SYNCS,
    CheckpointError,
    QueueCheckpoint,
    load_checkpoints,
    source_topic,
    translate,
)


def test_the_record_round_trips_and_is_versioned_json() -> None:
    c = QueueCheckpoint(120, dismissed=2, dest_topic="T-copy")
    c.record_sync(0, 100, 5000)
    c.record_sync(3, 101, 7)
    raw = c.encode()
    assert json.loads(raw) == {
        "v": 1,
        "next": 120,
        "dismissed": 2,
        "dest_topic": "T-copy",
        "syncs": {"0": [[100, 5000]], "3": [[101, 7]]},
        "feeds": [0, 3],
    }
    assert QueueCheckpoint.decode(raw) == c


def test_an_operator_reset_to_a_bare_offset_reads_as_a_checkpoint() -> None:
    assert QueueCheckpoint.decode(b"42") == QueueCheckpoint(42)


@pytest.mark.parametrize(
    ("doc", "field", "words"),
    [
        (b"{not json", "", "not JSON"),
        (b"[1, 2]", "", "not a JSON object or integer"),
        (b"-1", "next", "an integer in"),
        (b'{"v": 2, "next": 1}', "v", "version 2 is not 1"),
        (b'{"next": 1}', "v", "version None"),
        (b'{"v": 1}', "next", "missing"),
        (b'{"v": 1, "next": "7"}', "next", "an integer in"),
        (b'{"v": 1, "next": true}', "next", "an integer in"),
        (b'{"v": 1, "next": 1, "dismissed": -3}', "dismissed", "an integer in"),
        (b'{"v": 1, "next": 1, "dest_topic": 5}', "dest_topic", "a string"),
        (b'{"v": 1, "next": 1, "nxet": 1}', "nxet", "unknown field"),
        (b'{"v": 1, "next": 1, "syncs": []}', "syncs", "an object"),
        (b'{"v": 1, "next": 1, "syncs": {"a": []}}', "syncs.a", "queue index"),
        (b'{"v": 1, "next": 1, "syncs": {"0": 5}}', "syncs.0", "a list"),
        (b'{"v": 1, "next": 1, "syncs": {"0": [[1]]}}', "syncs.0[0]", "pair"),
        (b'{"v": 1, "next": 1, "syncs": {"0": [[1, -2]]}}', "syncs.0[0]", "an integer in"),
        (b'{"v": 1, "next": 1, "syncs": {"1": [[1, 5], [2, 5]]}}', "syncs.1[1]", "not above 5"),
        (b'{"v": 1, "next": 1, "feeds": {}}', "feeds", "a list"),
        (b'{"v": 1, "next": 1, "feeds": [0, "1"]}', "feeds[1]", "an integer in"),
    ],
)
def test_decode_names_the_bad_field(doc: bytes, field: str, words: str) -> None:
    with pytest.raises(CheckpointError, match=words) as info:
        QueueCheckpoint.decode(doc)
    assert info.value.field == field
    if field:
        assert repr(field) in str(info.value)


def test_too_many_syncs_are_refused_on_decode() -> None:
    pairs = [[i, i] for i in range(MAX_SYNCS + 1)]
    doc = json.dumps({"v": 1, "next": 0, "syncs": {"0": pairs}}).encode()
    with pytest.raises(CheckpointError, match="at most 32") as info:
        QueueCheckpoint.decode(doc)
    assert info.value.field == "syncs.0"


def test_a_late_sync_is_dropped() -> None:
    c = QueueCheckpoint(0)
    assert c.record_sync(0, 10, 100)
    assert not c.record_sync(0, 9, 99)  # a completion that came late
    assert not c.record_sync(0, 11, 100)
    assert c.record_sync(1, 9, 99)  # another destination queue: its own history
    assert c.syncs == {0: [(10, 100)], 1: [(9, 99)]}
    with pytest.raises(ValueError, match="dest_offset"):
        c.record_sync(0, 1, -1)


def test_history_keeps_the_newest_exactly_the_oldest_and_thins_the_rest() -> None:
    c = QueueCheckpoint(0)
    for i in range(10_000):
        c.record_sync(0, i, 2 * i)
        h = c.syncs[0]
        assert len(h) <= MAX_SYNCS
        assert h[0] == (0, 0)
        recent = list(range(max(0, i - RECENT_SYNCS + 1), i + 1))
        assert [s for s, _ in h[-len(recent) :]] == recent
    older = [s for s, _ in c.syncs[0][: -RECENT_SYNCS + 1]]
    ages = [9999 - s for s in older]
    # spaced out with age: the span covered is the whole history, and the gap to the next
    # older sync grows (within a factor) with the age
    assert len(older) == MAX_SYNCS - RECENT_SYNCS + 1
    gaps = [b - a for a, b in itertools.pairwise(older)]
    assert gaps[0] > gaps[-1] * 4, (older, gaps)
    assert all(g <= age for g, age in zip(gaps, ages[1:], strict=False))


def test_resume_offset_takes_the_newest_sync_before_the_group_offset() -> None:
    c = QueueCheckpoint(0)
    for s, d in [(3, 10), (5, 11), (9, 12)]:
        c.record_sync(0, s, d)
    assert c.resume_offset(0, 3) is None  # nothing before 3 is known: unknown
    assert c.resume_offset(0, 4) == 11  # consumed 0..3: message 3 is at 10
    assert c.resume_offset(0, 6) == 12  # exact: a sync at g - 1
    assert c.resume_offset(0, 9) == 12  # 6..8 went elsewhere or are after 11
    assert c.resume_offset(0, 100) == 13
    assert c.resume_offset(1, 100) is None


def test_translate_takes_the_min_over_the_source_queues_feeding_a_dest_queue() -> None:
    a = QueueCheckpoint(0, dest_topic="D")
    b = QueueCheckpoint(0, dest_topic="D")
    a.record_sync(0, 4, 40)
    a.record_sync(1, 5, 7)
    b.record_sync(0, 2, 41)
    b.record_sync(2, 3, 3)
    ckpts = {"T/b0/0": a, "T/b0/1": b}
    assert translate({"T/b0/0": 5, "T/b0/1": 4}, ckpts) == {0: 41, 1: None, 2: 4}
    assert translate({"T/b0/0": 6, "T/b0/1": 4}, ckpts) == {0: 41, 1: 8, 2: 4}
    assert translate({"T/b0/0": 6, "T/b0/1": 2}, ckpts) == {0: None, 1: 8, 2: None}
    # the group never consumed T/b0/1: unknown wherever that queue feeds
    assert translate({"T/b0/0": 6}, ckpts) == {0: None, 1: 8, 2: None}
    with pytest.raises(ValueError, match="several destination topics"):
        translate({}, {"T/b0/0": a, "U/b0/0": QueueCheckpoint(0, dest_topic="E")})


def test_a_fed_queue_without_a_usable_sync_is_unknown() -> None:
    """Queue 1 of the source sent its first message into destination queue 0, but the sync
    is not committed yet: queue 0 of the other source must not decide alone."""
    a = QueueCheckpoint(0, dest_topic="D", feeds=[0, 1])
    a.record_sync(0, 9, 50)
    b = QueueCheckpoint(0, dest_topic="D")
    b.feed(q for q in (1, 0))  # any iterable
    assert b.feeds == [0, 1] and b.syncs == {}
    ckpts = {"T/b/0": a, "T/b/1": b}
    assert translate({"T/b/0": 10, "T/b/1": 0}, ckpts) == {0: None, 1: None}
    assert translate({"T/b/0": 10}, {"T/b/0": a}) == {0: 51, 1: None}
    decoded = QueueCheckpoint.decode(b.encode())
    assert decoded.feeds == [0, 1]
    # every queue with a sync is fed, whatever the record says
    assert QueueCheckpoint(0, syncs={2: [(1, 1)]}, feeds=[0]).feeds == [0, 2]


def test_source_topic() -> None:
    assert source_topic("TopicA/broker-a/3") == "TopicA"


class Lister:
    def __init__(self, offsets: dict[str, bytes]) -> None:
        self.offsets = offsets
        self.jobs: list[str] = []

    def offsets_list(self, job: str, prefix: bool = False) -> OffsetList:
        self.jobs.append(job)
        rows = [
            CommittedOffset(job, p, raw, 0, 1, 1, 1, 1, 1, 1, 0) for p, raw in self.offsets.items()
        ]
        return OffsetList(rows, 9, "linearizable")


def test_load_checkpoints_reads_the_job_and_names_a_bad_partition() -> None:
    good = QueueCheckpoint(7, dest_topic="D")
    good.record_sync(0, 6, 60)
    lister = Lister({"T/b/0": good.encode(), "T/b/1": b"3"})
    assert load_checkpoints(lister, "job1") == {"T/b/0": good, "T/b/1": QueueCheckpoint(3)}
    assert lister.jobs == ["job1"]
    bad = Lister({"T/b/0": good.encode(), "T/b/1": b'{"v": 1, "next": -1}'})
    with pytest.raises(CheckpointError, match=r"partition 'T/b/1'") as info:
        load_checkpoints(bad, "job1")
    assert info.value.field == "next"
