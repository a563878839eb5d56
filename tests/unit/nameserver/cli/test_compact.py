"""``metaledger compact`` checks its inputs before anything runs: an ``--upto`` past the log,
a directory without segments, a malformed cluster id, a base snapshot of another cluster are
one-line errors with exit code 2 and nothing written; the cluster id and the last term are
found from the segments' data dir. Segments are written by raftlog's SegmentLog, laid out as
a node lays out its data dir (``log/``, ``snap/``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from nameserver import cli
from nameserver.cli.exitcodes import ExitCode
from nameserver.startup import Identity, write_identity
from protos.records_pb2 import Effect
from raftlog import SegmentConfig, SegmentLog
from snapshots import SnapshotMeta, inspect, snapshot_name, write_snapshot
from snapshots.compaction import log_end

CLUSTER = "00c0ffee00c0ffee"
OTHER = "0badbeef0badbeef"


def make_data_dir(
    root: Path,
    last: int = 130,
    snapshot_at: int | None = None,
    segment_bytes: int = 2048,
    first: int = 1,
) -> Path:
    """A node-like data dir: offsets first..last in ``log/`` (term 1 up to 100, then 2), rolled
    into several small segments, and a snapshot of CLUSTER in ``snap/`` if asked."""
    data = root / "node"
    config = SegmentConfig(segment_max_bytes=segment_bytes, index_every_bytes=256)
    with SegmentLog.open(data / "log", config) as log:
        for offset in range(first, last + 1):
            effect = Effect(type="kv", key=b"k%d" % (offset % 17), value=b"v%d" % offset, count=1)
            effect.term = 1 if offset <= 100 else 2
            log.append(offset, 0, effect.SerializeToString())
        log.sync()
    (data / "raft").mkdir()
    if snapshot_at is not None:
        (data / "snap").mkdir()
        records = [
            ("kv", b"k%d" % (o % 17), b"v%d" % o) for o in range(snapshot_at - 16, snapshot_at + 1)
        ]
        write_snapshot(
            data / "snap" / snapshot_name(snapshot_at),
            SnapshotMeta(CLUSTER, snapshot_at, 1),
            records,
        )
    return data


def compact(*argv: str) -> int:
    return cli.main(["compact", "--no-progress", *argv])


def error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("metaledger: compact: ")
    return lines[0]


def test_log_end_reads_the_last_segments_tail(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path)
    end = log_end(data / "log")
    assert end.segments > 2 and (end.last_offset, end.last_term) == (130, 2)
    assert end.first_offset == 1
    assert log_end(data) == (0, None, None, 0)  # the data dir itself holds no segment files
    # a torn tail of the last segment ends the log at the last whole record
    last_seg = sorted((data / "log").glob("*.seg"))[-1]
    with open(last_seg, "ab") as f:
        f.write(b"\x40\x00\x00\x00garbage")
    assert log_end(data / "log").last_offset == 130


def test_upto_past_the_last_record_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = make_data_dir(tmp_path)
    out = tmp_path / "out.snap"
    argv = ["--segments", str(data / "log"), "--cluster-id", CLUSTER, "--out", str(out)]
    assert compact(*argv, "--upto", "99999") == ExitCode.USAGE  # spark engine: never started
    assert error_line(capsys) == (
        f"metaledger: compact: --upto 99999 is past the end of the change log in "
        f"{data / 'log'}: its last record is at offset 130"
    )
    assert not out.exists()
    assert compact(*argv, "--upto", "130", "--engine", "local") == ExitCode.OK
    assert inspect(out).last_offset == 130


def test_upto_up_to_the_base_snapshot_is_allowed_past_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A base snapshot newer than every record (the offsets after changed nothing) may be
    compacted at its own offset."""
    data = make_data_dir(tmp_path, last=40)
    base = tmp_path / "base.snap"
    write_snapshot(base, SnapshotMeta(CLUSTER, 45, 3), [("kv", b"a", b"1")])
    argv = ["--segments", str(data / "log"), "--base-snapshot", str(base), "--engine", "local"]
    assert compact(*argv, "--upto", "45", "--out", str(tmp_path / "o.snap")) == ExitCode.OK
    capsys.readouterr()
    assert compact(*argv, "--upto", "46", "--out", str(tmp_path / "p.snap")) == ExitCode.USAGE
    assert error_line(capsys) == (
        f"metaledger: compact: --upto 46 is past the end of the change log in {data / 'log'}: "
        "its last record is at offset 40 and the base snapshot's offset is 45"
    )
    assert not (tmp_path / "p.snap").exists()


def test_a_dir_without_segments_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "out.snap"
    argv = ["--cluster-id", CLUSTER, "--upto", "5", "--out", str(out)]
    assert compact("--segments", str(empty), *argv) == ExitCode.USAGE
    assert error_line(capsys) == (
        f"metaledger: compact: --segments {empty} holds no change-log segments "
        "(<first-offset>.seg files); give a node's data dir or its log/ directory"
    )
    assert compact("--segments", str(tmp_path / "missing"), *argv) == ExitCode.USAGE
    assert error_line(capsys).endswith("missing: not a directory")
    assert not out.exists()


def test_a_data_dir_is_read_from_its_log_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case: --segments pointed at the data dir used to write an empty snapshot
    "0 records at offset 119 term 0"; now its log/ is read, and said so."""
    data = make_data_dir(tmp_path)
    out = tmp_path / "out.snap"
    code = compact(
        "--segments", str(data), "--upto", "119", "--cluster-id", CLUSTER, "--out", str(out),
        "--engine", "local", "-w", "json",
    )  # fmt: skip
    assert code == ExitCode.OK
    err = capsys.readouterr().err
    assert f"{data} is a node's data dir; reading its change log in {data / 'log'}" in err
    info = inspect(out)
    assert (info.last_offset, info.last_term, info.record_count) == (119, 2, 17)


@pytest.mark.parametrize(
    "bad", ["nothex", "00c0ffee", "00c0ffee00c0ffee00", "00c0ffee00c0ffeg", ""]
)
def test_a_malformed_cluster_id_is_a_usage_error(
    tmp_path: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--segments", str(tmp_path), "--upto", "5", "--out", str(tmp_path / "o.snap")]
    assert compact(*argv, "--cluster-id", bad) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert f"argument --cluster-id: {bad!r} is not a cluster id (16 hex digits" in err
    assert "Traceback" not in err


def test_cluster_id_is_case_insensitive() -> None:
    args = cli.build_parser().parse_args(
        [
            "compact",
            "--segments",
            "d",
            "--upto",
            "1",
            "--out",
            "o",
            "--cluster-id",
            "00C0FFEE00C0FFEE",
        ]
    )
    assert args.cluster_id == CLUSTER


def test_a_base_snapshot_of_another_cluster_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = make_data_dir(tmp_path, snapshot_at=60)
    base = tmp_path / "base.snap"
    write_snapshot(base, SnapshotMeta(OTHER, 50, 1), [("kv", b"a", b"1")])
    out = tmp_path / "out.snap"
    argv = ["--segments", str(data / "log"), "--upto", "120", "--out", str(out)]
    assert compact(*argv, "--base-snapshot", str(base)) == ExitCode.USAGE
    assert error_line(capsys) == (
        f"metaledger: compact: --base-snapshot {base} is of cluster {OTHER}, but the segments "
        f"(by {data.resolve() / 'snap' / snapshot_name(60)}) of cluster {CLUSTER}"
    )
    # against --cluster-id as well, with no data dir to go by
    bare = tmp_path / "bare"
    (data / "log").rename(bare)
    argv = ["--segments", str(bare), "--upto", "120", "--out", str(out)]
    assert compact(*argv, "--base-snapshot", str(base), "--cluster-id", CLUSTER) == ExitCode.USAGE
    assert error_line(capsys) == (
        f"metaledger: compact: --cluster-id is of cluster {CLUSTER}, but --base-snapshot "
        f"{base} of cluster {OTHER}"
    )
    assert not out.exists()


def test_cluster_id_and_term_come_from_the_data_dir(tmp_path: Path) -> None:
    data = make_data_dir(tmp_path, snapshot_at=60)
    out = tmp_path / "out.snap"
    argv = ["--segments", str(data / "log"), "--out", str(out), "--engine", "local"]
    assert compact(*argv, "--upto", "90") == ExitCode.OK
    info = inspect(out)
    assert (info.cluster_id, info.last_offset, info.last_term) == (CLUSTER, 90, 1)
    assert compact(*argv, "--upto", "125") == ExitCode.OK
    assert inspect(out).last_term == 2  # the term of the record at 125
    # a node that has written no snapshot yet: the engine's dump is read instead
    (data / "snap" / snapshot_name(60)).rename(data / "raft" / "dump.snap")
    assert compact(*argv, "--upto", "125") == ExitCode.OK
    assert inspect(out).cluster_id == CLUSTER


def test_no_cluster_id_anywhere_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = make_data_dir(tmp_path)  # no snapshot written yet
    out = tmp_path / "out.snap"
    assert compact("--segments", str(data / "log"), "--upto", "50", "--out", str(out)) == 2
    assert error_line(capsys) == (
        f"metaledger: compact: no cluster id: {data / 'log'} is not in a node's data dir that "
        "records one, and there is no --base-snapshot; give --cluster-id (16 hex digits, as "
        "`metaledger status -w json` shows it)"
    )
    assert not out.exists()


def test_a_missing_base_snapshot_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = make_data_dir(tmp_path)
    argv = ["--segments", str(data / "log"), "--upto", "50", "--out", str(tmp_path / "o")]
    assert compact(*argv, "--base-snapshot", str(tmp_path / "nope.snap")) == ExitCode.ERROR
    assert error_line(capsys) == (
        f"metaledger: compact: {tmp_path / 'nope.snap'}: No such file or directory"
    )


def test_help_says_where_the_cluster_id_comes_from(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compact", "--help"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert "cluster id comes from" in out and "<data-dir>/snap/" in out
    assert "exit codes:" in out and "DESIGN" not in out


def test_a_log_whose_start_is_in_a_snapshot_needs_the_base(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Segments deleted after the node's snapshot at 60 (or a member seeded from it): the
    segments alone would miss every key written before offset 61."""
    data = make_data_dir(tmp_path, snapshot_at=60, first=61)
    snap = data.resolve() / "snap" / snapshot_name(60)
    out = tmp_path / "out.snap"
    argv = ["--segments", str(data / "log"), "--out", str(out), "--engine", "local"]
    assert compact(*argv, "--upto", "120") == ExitCode.USAGE
    assert error_line(capsys) == (
        f"metaledger: compact: the change log in {data / 'log'} starts at offset 61; the state "
        f"before it is in the node's snapshots: give --base-snapshot {snap}"
    )
    assert compact(*argv, "--upto", "50") == ExitCode.USAGE
    assert error_line(capsys) == (
        f"metaledger: compact: the change log in {data / 'log'} starts at offset 61, and "
        "the node's oldest snapshot is at offset 60, past --upto 50: the state at 50 cannot "
        "be built from this data dir"
    )
    assert not out.exists()
    assert compact(*argv, "--upto", "120", "--base-snapshot", str(snap)) == ExitCode.OK
    assert inspect(out).record_count == 17


def test_an_error_on_a_data_dir_is_still_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = make_data_dir(tmp_path)
    argv = ["--segments", str(data), "--cluster-id", CLUSTER, "--out", str(tmp_path / "o")]
    assert compact(*argv, "--upto", "131") == ExitCode.USAGE
    assert "its last record is at offset 130" in error_line(capsys)


def test_a_damaged_segment_is_exit_1_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = make_data_dir(tmp_path)
    first = sorted((data / "log").glob("*.seg"))[0]
    raw = bytearray(first.read_bytes())
    raw[200] ^= 0xFF  # inside a frame of an older segment: corruption, not a torn tail
    first.write_bytes(bytes(raw))
    out = tmp_path / "out.snap"
    argv = ["--segments", str(data / "log"), "--cluster-id", CLUSTER, "--out", str(out)]
    assert compact(*argv, "--upto", "120", "--engine", "local") == ExitCode.ERROR
    assert f"{first}" in error_line(capsys)
    assert not out.exists()


def test_cluster_id_comes_from_the_identity_file_first(tmp_path: Path) -> None:
    """What a node records in its data dir on its first start (``identity.json``) names the
    cluster even before the node has written a snapshot."""
    data = make_data_dir(tmp_path)
    write_identity(str(data), Identity(node_id="n0", cluster_id=CLUSTER, cluster_token="t"))
    out = tmp_path / "out.snap"
    argv = ["--segments", str(data), "--upto", "77", "--out", str(out), "--engine", "local"]
    assert compact(*argv) == ExitCode.OK
    assert (inspect(out).cluster_id, inspect(out).last_term) == (CLUSTER, 1)
    base = tmp_path / "base.snap"
    write_snapshot(base, SnapshotMeta(OTHER, 50, 1), [("kv", b"a", b"1")])
    assert compact(*argv, "--base-snapshot", str(base)) == ExitCode.USAGE
