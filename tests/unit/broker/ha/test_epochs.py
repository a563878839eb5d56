"""The epoch file and the consistent point (research/broker.md §6.3, EpochFileCache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.ha.epochs import EpochEntry, EpochFile, consistent_point, entry_for, parse, render
from broker.ha.errors import EpochFileError

E = EpochEntry


@pytest.mark.parametrize(
    ("local", "local_max", "master", "master_max", "point"),
    [
        # same history, slave behind / ahead inside the last epoch
        ([E(1, 0)], 300, [E(1, 0)], 500, 300),
        ([E(1, 0)], 500, [E(1, 0)], 300, 300),
        # the slave missed epoch 2 entirely: the common epoch 1 ends where the master's 2 starts
        ([E(1, 0)], 900, [E(1, 0), E(2, 600)], 1000, 600),
        # old master: local epoch 2 from X=600 with extra bytes; the new master has 3 from 700
        ([E(1, 0), E(2, 600)], 800, [E(1, 0), E(3, 700)], 1000, 600),
        # the new master copied part of epoch 2 before epoch 3 began
        ([E(1, 0), E(2, 600)], 800, [E(1, 0), E(2, 600), E(3, 650)], 1000, 650),
        # same epoch number but another start: not the same epoch, fall back to epoch 1
        ([E(1, 0), E(2, 600)], 800, [E(1, 0), E(2, 500)], 1000, 500),
        # nothing in common
        ([E(2, 100)], 300, [E(1, 0), E(3, 200)], 400, None),
        ([E(1, 0)], 300, [], 0, None),
        ([], 0, [E(1, 0)], 10, None),
    ],
)
def test_consistent_point_table(
    local: list[EpochEntry],
    local_max: int,
    master: list[EpochEntry],
    master_max: int,
    point: int | None,
) -> None:
    assert consistent_point(local, local_max, master, master_max) == point


def test_entry_for() -> None:
    entries = [E(1, 0), E(2, 600), E(5, 900)]
    assert entry_for(entries, 0) == (E(1, 0), 600)
    assert entry_for(entries, 899) == (E(2, 600), 900)
    assert entry_for(entries, 10**9) == (E(5, 900), None)
    assert entry_for([E(3, 100)], 50) is None


def test_text_format_with_crc() -> None:
    text = render([E(7, 7000), E(8, 8000)])
    lines = text.split("\n")
    assert lines[0] == "2" and lines[2:] == ["7-7000", "8-8000", ""]
    import zlib

    assert int(lines[1]) == zlib.crc32(b"7-7000\n8-8000\n") & 0x7FFFFFFF
    assert parse(text) == [E(7, 7000), E(8, 8000)]
    assert parse("1\n0\n3-5\n") == [E(3, 5)]  # CRC 0: unchecked
    for bad in ("2\n0\n3-5\n", "1\n12\n3-5\n", "1\n0\n3:5\n", "x\n0\n", "2\n0\n3-5\n2-9\n"):
        with pytest.raises(EpochFileError):
            parse(bad)


def test_append_persists_and_requires_larger_epoch_and_start(tmp_path: Path) -> None:
    path = str(tmp_path / "epochFileCheckpoint")
    f = EpochFile(path)
    assert f.entries == () and f.last_epoch == 0
    f.append(1, 0)
    f.append(2, 600)
    for epoch, start in ((2, 700), (3, 600), (1, 900)):
        with pytest.raises(EpochFileError):
            f.append(epoch, start)
    assert EpochFile(path).entries == (E(1, 0), E(2, 600))


def test_truncate_suffix_and_begin(tmp_path: Path) -> None:
    f = EpochFile(str(tmp_path / "ep"))
    f.append(1, 0)
    f.append(2, 600)
    f.append(3, 900)
    f.truncate_suffix(900)  # an entry starting at the cut holds nothing: dropped
    assert f.entries == (E(1, 0), E(2, 600))
    f.begin(4, 600)  # epoch 2 wrote nothing before the promotion at 600: replaced
    assert f.entries == (E(1, 0), E(4, 600))
    with pytest.raises(EpochFileError):
        f.begin(3, 1000)
    assert EpochFile(str(tmp_path / "ep")).entries == (E(1, 0), E(4, 600))


def test_a_damaged_file_falls_back_to_the_bak(tmp_path: Path) -> None:
    path = tmp_path / "ep"
    f = EpochFile(str(path))
    f.append(1, 0)
    f.append(2, 600)  # .bak holds the one-entry version
    assert parse((tmp_path / "ep.bak").read_text()) == [E(1, 0)]
    path.write_text(path.read_text().replace("600", "601"))  # CRC no longer matches
    assert EpochFile(str(path)).entries == (E(1, 0),)
    path.unlink()
    assert EpochFile(str(path)).entries == (E(1, 0),)
    (tmp_path / "ep.bak").write_text("garbage")
    path.write_text("1\n5\n1-0\n")
    with pytest.raises(EpochFileError, match="unreadable"):
        EpochFile(str(path))
