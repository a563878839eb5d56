"""Removing change-log segments covered by a snapshot happens off the commit path: the
snapshot writer thread calls SegmentLog.delete_before, and appends never wait for the
files to be removed (issue 3: 50-90 ms apply stalls after each big snapshot)."""

from __future__ import annotations

import threading
from pathlib import Path
from unittest import mock

from raftlog import SegmentConfig, SegmentLog

SMALL = SegmentConfig(segment_max_bytes=4096, fsync_policy="never")


def test_appends_go_on_while_segment_files_are_removed(tmp_path: Path) -> None:
    with SegmentLog.open(tmp_path, SMALL) as log:
        for offset in range(1, 401):
            log.append(offset, 0, b"x" * 100)
        segments = log.segments()
        assert len(segments) > 3
        appended = threading.Event()

        def append_meanwhile() -> None:
            log.append(401, 0, b"during the removal")
            appended.set()

        real_unlink = Path.unlink

        def slow_unlink(path: Path, missing_ok: bool = False) -> None:
            if path.suffix == ".seg" and not appended.is_set():
                threading.Thread(target=append_meanwhile).start()
                # with the log's lock held here, this append would wait forever
                assert appended.wait(5), "an append waited for a segment file's removal"
            real_unlink(path, missing_ok=missing_ok)

        with mock.patch.object(Path, "unlink", slow_unlink):
            removed = log.delete_before(segments[-1].first_offset)
        assert removed == len(segments) - 1 and appended.is_set()
        assert [r.offset for r in log.read_from(0)][-1] == 401
        assert not any(s.path.exists() for s in segments[:-1])
