"""Byte flips in a stopped member's change-log segments, in a real 3-node cluster (issue 14).

A flipped length field in the middle of the newest segment makes its frame run past the
end of the file; it used to be cut off as a torn tail, with every later synced record. It
is corruption (a valid frame follows): the member exits non-zero naming the file, the
byte and how to recover, and changes nothing; wiped and restarted with the same command,
it catches up. The torn-tail side (nothing valid after the bad frame) is covered by
tests/unit/raftlog/test_segments.py and tests/property/test_segments_property.py.
"""

from __future__ import annotations

import shutil
import struct

import pytest

from raftlog import SegmentConfig, SegmentLog
from snapshots import HEADER_BYTES
from tests.faults.inject import Writer, assert_acknowledged_everywhere, flip_byte
from tests.harness import Cluster

pytestmark = [pytest.mark.cluster, pytest.mark.faults]


def _frames(data: bytes) -> list[int]:
    """Frame positions of a segment, walking the length fields."""
    out, pos = [], HEADER_BYTES
    while pos + 8 <= len(data):
        (length,) = struct.unpack_from("<I", data, pos)
        if pos + 8 + length > len(data):
            break
        out.append(pos)
        pos += 8 + length
    return out


def test_flipped_length_in_the_newest_segment_stops_the_member_and_it_rejoins_wiped(
    cluster: Cluster,
) -> None:
    leader = cluster.leader()
    victim = next(i for i in cluster.running() if i != leader)
    with Writer(cluster, b"seg/", value_bytes=128, max_puts=300) as writer:
        writer.wait_acked(300, 60)
    cluster.wait_converged()
    assert cluster.stop(victim) == 0, cluster.log_tail(victim)
    segments = sorted((cluster.data_dir(victim) / "log").glob("*.seg"))
    assert segments, "no change-log segment written"
    newest = segments[-1]
    frames = _frames(newest.read_bytes())
    assert len(frames) >= 20, f"{newest} holds only {len(frames)} records"
    at = frames[len(frames) // 2]
    flip_byte(newest, at + 3)  # the length's high byte: the frame runs past the end
    corrupted = newest.read_bytes()

    before = len(cluster.log_text(victim))
    cluster.start(victim)
    rc = cluster.wait_exit(victim, 30)
    output = cluster.log_text(victim)[before:]
    assert rc != 0, f"the member started on a corrupt segment\n{output[-3000:]}"
    named = [line for line in output.splitlines() if str(newest) in line]
    assert any(f"at byte {at}:" in line for line in named), f"{at} not named: {named}"
    assert any('"Recovering a member"' in line for line in named), named
    assert "torn tail" not in output, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert newest.read_bytes() == corrupted, "the corrupt segment was changed"

    shutil.rmtree(cluster.data_dir(victim))
    cluster.start(victim)
    cluster.wait_ready(60)
    assert_acknowledged_everywhere(cluster, writer.acked, [0, 1, 2])


def test_half_written_last_frame_is_cut_and_re_derived(cluster: Cluster) -> None:
    """A power cut that wrote the last frame's header but not its data (here: its last
    byte flipped, a whole frame with a bad CRC and nothing after it) is a torn tail: the
    member cuts it off, re-derives the record from the Raft log and serves the same image
    as the others."""
    leader = cluster.leader()
    victim = next(i for i in cluster.running() if i != leader)
    with Writer(cluster, b"torn/", value_bytes=128, max_puts=100) as writer:
        writer.wait_acked(100, 60)
    cluster.wait_converged()
    assert cluster.stop(victim) == 0, cluster.log_tail(victim)
    newest = sorted((cluster.data_dir(victim) / "log").glob("*.seg"))[-1]
    data = newest.read_bytes()
    at = _frames(data)[-1]
    assert at + 8 + struct.unpack_from("<I", data, at)[0] == len(data)
    cut = struct.unpack_from("<QI", data, at + 8)
    flip_byte(newest, len(data) - 1)

    before = len(cluster.log_text(victim))
    cluster.start(victim)
    cluster.wait_ready(60)
    with Writer(cluster, b"after/", max_puts=20) as more:
        more.wait_acked(20, 60)
    assert_acknowledged_everywhere(cluster, {**writer.acked, **more.acked}, [0, 1, 2])
    output = cluster.log_text(victim)[before:]
    assert f"{newest}: torn tail at byte {at} (CRC mismatch; no valid frame follows)" in output
    assert cluster.stop(victim) == 0, cluster.log_tail(victim)
    with SegmentLog.open(cluster.data_dir(victim) / "log", SegmentConfig()) as log:
        assert cut in {(r.offset, r.sub) for r in log.read_from(cut[0])}, "not re-derived"
