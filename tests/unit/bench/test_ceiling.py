"""The pure parts of the ceiling benchmarks: /proc and py-spy parsing, the activity roll-up,
the canned noop answers and the compare_etcd report. Nothing here starts a server or a load."""

from __future__ import annotations

import signal
import socket
import struct
from typing import Any

import pytest

from bench import compare_etcd, leader_profile, noop_kv
from bench.leader_profile import (
    APPLY,
    ENGINE,
    GRPC_LOOP,
    HANDLERS,
    OTHER,
    PROPOSE,
    SEGMENTS,
    WATCH,
    Frame,
    classify,
    parse_frame,
    parse_raw,
)
from nameserver.loadgen.procstats import parse_snmp_tcp, tcp_info_segments
from protos.etcdserverpb import rpc_pb2

# --------------------------------------------------------------------------- /proc/net/snmp

SNMP = """\
Ip: Forwarding DefaultTTL InReceives
Ip: 1 64 123
Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets \
CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors
Tcp: 1 200 120000 -1 86930 41227 45431 13639 0 43982865 43938360 45357 0 57800 0
Udp: InDatagrams NoPorts
Udp: 5 6
"""


def test_snmp_tcp_counters_by_name() -> None:
    tcp = parse_snmp_tcp(SNMP)
    assert tcp["InSegs"] == 43982865 and tcp["OutSegs"] == 43938360
    assert tcp["MaxConn"] == -1
    assert parse_snmp_tcp("Ip: a\nIp: 1\n") == {}


def test_tcp_info_segment_counters() -> None:
    info = bytes(136) + struct.pack("=II", 7, 9) + bytes(88)  # a 4.2+ kernel's tcp_info
    assert tcp_info_segments(info) == (7, 9)
    assert tcp_info_segments(bytes(104)) is None  # an old kernel's shorter struct


def test_tcp_info_of_a_real_connection_counts_both_directions() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        peer, _ = server.accept()
        with client, peer:
            before = tcp_info_segments(client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256))
            client.sendall(b"ping")
            assert peer.recv(4) == b"ping"
            peer.sendall(b"pong")
            assert client.recv(4) == b"pong"
            after = tcp_info_segments(client.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256))
    assert before is not None and after is not None
    assert after[0] - before[0] >= 1 and after[1] - before[1] >= 1


# --------------------------------------------------------------------------- py-spy


ROOT_FRAMES = (
    "_run_module_as_main (<frozen runpy>:198);<module> (nameserver/cli/__main__.py:7);"
    "run_serve (nameserver/cli/serve.py:103);run (nameserver/server.py:340);"
    "run (asyncio/runners.py:190);Runner.run (asyncio/runners.py:118)"
)
TICK = (
    "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);"
    "SyncObj._autoTickThread (pysyncobj/syncobj.py:593)"
)
APPLY_ROOT = (
    "Thread._bootstrap (threading.py:1002);Thread.run (threading.py:982);"
    "ReplicatedLog._run_apply (raftlog/log/apply.py:140);ReplicatedLog._apply_group (raftlog/log/apply.py:160)"
)


def stack(text: str) -> list[Frame]:
    return [parse_frame(p) for p in text.split(";")]


@pytest.mark.parametrize(
    ("frames", "category"),
    [
        # cygrpc/uvloop C code has no Python frame: the sample sits on the loop's frame
        (ROOT_FRAMES, GRPC_LOOP),
        (ROOT_FRAMES + ";wait (asyncio/tasks.py:428);_wait (asyncio/tasks.py:539)", GRPC_LOOP),
        # a Range handler's image lookup is the handler's (image/kv code defers to its caller)
        (
            ROOT_FRAMES + ";rpc.<locals>.wrapper (nameserver/grpc/status.py:71);"
            "KVService.Range (nameserver/kv/service.py:245);do_range (nameserver/kv/semantics.py:74);"
            "KvImage.get (nameserver/kv/records.py:223);PersistentSortedMap.get "
            "(nameserver/state/sortedmap.py:336)",
            HANDLERS,
        ),
        (
            ROOT_FRAMES + ";KVService.Put (nameserver/kv/service.py:260);"
            "NodeFacade.propose (nameserver/node.py:120);"
            "ReplicatedLog.propose (raftlog/log/group_commit.py:120);encode_batch (raftlog/entry.py:80)",
            PROPOSE,
        ),
        (
            TICK
            + ";ReplicatedLog._send_item.<locals>.on_proposed (raftlog/log/group_commit.py:166)",
            PROPOSE,
        ),
        (TICK + ";dumps (pysyncobj/pickle.py:12)", ENGINE),
        (TICK + ";PySyncObjEngine._on_tick (raftlog/pysyncobj_engine.py:200)", ENGINE),
        (
            TICK + ";ReplicatedLog._on_commit (raftlog/log/apply.py:121);Queue.put (queue.py:150)",
            APPLY,
        ),
        (
            APPLY_ROOT + ";MetadataStateMachine.apply (nameserver/state/machine.py:300);"
            "put (nameserver/kv/apply.py:120);PersistentSortedMap.set (nameserver/state/sortedmap.py:1)",
            APPLY,
        ),
        (APPLY_ROOT + ";SegmentLog.append (raftlog/segments.py:300)", SEGMENTS),
        (APPLY_ROOT + ";WatchHub.on_applied (nameserver/watch/hub.py:88)", WATCH),
        ("Thread._bootstrap (threading.py:1002);Condition.wait (threading.py:331)", OTHER),
    ],
)
def test_classify_by_the_frame_nearest_the_leaf(frames: str, category: str) -> None:
    assert classify(stack(frames)) == category


def test_parse_frame_keeps_qualified_names_and_paths() -> None:
    assert parse_frame("rpc.<locals>.wrapper (nameserver/grpc/status.py:71)") == Frame(
        "rpc.<locals>.wrapper", "nameserver/grpc/status.py"
    )
    assert parse_frame("<module> (<frozen runpy>:198)") == Frame("<module>", "<frozen runpy>")
    assert parse_frame("garbage") == Frame("garbage", "")


RAW = f"""\
thread (1300): MainThread;{ROOT_FRAMES} 30
thread (1300): MainThread;{ROOT_FRAMES};KVService.Put (nameserver/kv/service.py:260) 5
thread (1330): Thread-1 (_autoTickThread);{TICK};dumps (pysyncobj/pickle.py:12) 10
thread (1340): apply;{APPLY_ROOT};SegmentLog.append (raftlog/segments.py:300) 5
not a sample line
"""


def test_raw_parse_and_rollup() -> None:
    samples = parse_raw(RAW)
    assert [(s.tid, s.thread, s.count) for s in samples] == [
        ("1300", "MainThread", 30),
        ("1300", "MainThread", 5),
        ("1330", "Thread-1 (_autoTickThread)", 10),
        ("1340", "apply", 5),
    ]
    assert samples[0].frames[-1] == Frame("Runner.run", "asyncio/runners.py")
    roll = leader_profile.rollup(samples)
    assert roll["total"] == 50
    assert roll["by_category"] == {GRPC_LOOP: 30, HANDLERS: 5, ENGINE: 10, SEGMENTS: 5}
    assert list(roll["by_category"]) == [GRPC_LOOP, HANDLERS, ENGINE, SEGMENTS]  # CATEGORIES order
    assert roll["by_thread"] == {"MainThread": 35, "Thread-1 (_autoTickThread)": 10, "apply": 5}
    assert roll["top_leaves"][GRPC_LOOP] == [("Runner.run (asyncio/runners.py)", 30)]


DUMP = """\
Process 14538: /usr/bin/python -m nameserver.cli serve
Python v3.11.7 (/usr/bin/python3.11)

Thread 14538 (idle): "MainThread"
    Condition.wait (threading.py:331)
Thread 14552 (active+gil): "Thread-1 (_autoTickThread)"
    _serve (grpc/_server.py:1314)
Thread 0x7F00AB (idle): "apply"
"""


def test_pyspy_dump_names_threads_by_os_id() -> None:
    assert leader_profile.parse_pyspy_dump(DUMP) == {
        "14538": "MainThread",
        "14552": "Thread-1 (_autoTickThread)",
        "0x7F00AB": "apply",
    }


def test_task_stat_and_per_thread_cpu() -> None:
    # comm may hold spaces and parentheses; utime/stime are fields 14 and 15 of the line
    line = "1330 (weird ) name) S 1 2 3 4 5 6 7 8 9 10 150 50 0 0 20 0 12 0 100"
    assert leader_profile.parse_task_stat(line) == ("weird ) name", 200)
    before = {"1": ("python", 100), "2": ("event_engine", 10), "3": ("event_engine", 0)}
    after = {
        "1": ("python", 400),
        "2": ("event_engine", 60),
        "3": ("event_engine", 50),
        "4": ("python", 0),  # started inside the window, idle
    }
    names = {"1": "MainThread", "4": "apply"}
    rows = leader_profile.thread_cpu(before, after, names, seconds=2.0, clk_tck=100)
    assert [(r["thread"], r["threads"], r["cpu_pct"]) for r in rows] == [
        ("MainThread", 1, 150.0),
        ("event_engine", 2, 50.0),
        ("apply", 1, 0.0),
    ]
    assert leader_profile.per_put(rows[0]["cpu_s"], 1000) == 3000.0
    assert leader_profile.per_put(3.0, 0) is None


def _profile_report(pyspy: bool) -> dict[str, Any]:
    report: dict[str, Any] = {
        "date": "2026-11-22T11:00:00",
        "machine": {"nproc": 2, "cpu_model": "cpu", "kernel": "k", "python": "3.11"},
        "load_avg_start": [0.5, 0.4, 0.3],
        "op": "put",
        "clients": 64,
        "leader": "127.0.0.1:1",
        "names_note": "",
        "load": {"op": "put", "ops_per_s": 1000.0, "duration_s": 14, "tcp_in_segs_per_op": 4.5},
        "cpu_window": {"seconds": 2.0, "puts": 2000},
        "processes": [
            {
                "role": "leader",
                "pid": 7,
                "cpu_pct": 150.0,
                "threads": [
                    {"thread": "MainThread", "threads": 1, "cpu_s": 3.0, "cpu_pct": 150.0},
                    {"thread": "idle", "threads": 3, "cpu_s": 0.0, "cpu_pct": 0.0},
                ],
            }
        ],
    }
    if pyspy:
        report["pyspy"] = {
            "rate_hz": 100,
            "seconds": 2.0,
            "wall_s": 2.0,
            "puts": 1000,
            "rollup": leader_profile.rollup(parse_raw(RAW)),
        }
    else:
        report["pyspy_skipped"] = "py-spy is not on PATH"
    leader_profile._fill_rates(report)
    return report


def test_profile_report_rates_and_markdown() -> None:
    report = _profile_report(pyspy=True)
    assert report["cpu_window"]["puts_per_s"] == 1000.0
    assert report["processes"][0]["us_per_put"] == 1500.0
    spy = report["pyspy"]
    assert spy["gil_busy_pct"] == 25.0  # 50 samples of 100 Hz x 2 s
    assert spy["us_per_sample_per_put"] == pytest.approx(10.0)  # 10 ms per sample / 1000 puts
    md = leader_profile.markdown(report)
    assert "| MainThread | 1 | 150.0 | 1500 |" in md
    assert "| (idle threads) | 3 | 0 | 0 |" in md
    assert f"| {GRPC_LOOP} | 60.0% | 300 |" in md
    assert "--nonblocking" in md


def test_profile_report_without_pyspy_says_so() -> None:
    md = leader_profile.markdown(_profile_report(pyspy=False))
    assert "Not recorded: py-spy is not on PATH." in md


# --------------------------------------------------------------------------- noop_kv


def test_canned_answers_are_well_formed_and_revisions_move() -> None:
    kv = noop_kv.CannedKV(value_size=8, client_url="http://127.0.0.1:1")
    first = kv.put(rpc_pb2.PutRequest(key=b"a", value=b"1")).header.revision
    assert kv.put(rpc_pb2.PutRequest(key=b"b")).header.revision == first + 1
    got = kv.range(rpc_pb2.RangeRequest(key=b"zz"))
    assert got.count == 1 and got.kvs[0].key == b"zz" and got.kvs[0].value == b"v" * 8
    assert got.header.revision == first + 1
    assert kv.range(rpc_pb2.RangeRequest(key=b"zz", count_only=True)).kvs == []
    txn = kv.txn(
        rpc_pb2.TxnRequest(
            success=[
                rpc_pb2.RequestOp(request_put=rpc_pb2.PutRequest(key=b"c")),
                rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest(key=b"c")),
            ]
        )
    )
    assert txn.succeeded and txn.header.revision == first + 2
    assert [r.WhichOneof("response") for r in txn.responses] == ["response_put", "response_range"]
    read_only = kv.txn(
        rpc_pb2.TxnRequest(success=[rpc_pb2.RequestOp(request_range=rpc_pb2.RangeRequest())])
    )
    assert read_only.header.revision == first + 2  # no put, no new revision
    status = kv.status()
    assert status.leader == status.header.member_id == noop_kv.MEMBER_ID
    assert kv.member_list().members[0].clientURLs == ["http://127.0.0.1:1"]


@pytest.mark.parametrize(
    "argv",
    [
        ["--port", "0"],
        ["--port", "1", "--workers", "0"],
        ["--port", "1", "--mode", "x"],
        ["--port", "1", "--acceptors", "-1", "--methods", "table"],
        ["--port", "1", "--acceptors", "4"],  # the extra accepts need the one table
    ],
)
def test_noop_kv_rejects_bad_flags(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        noop_kv.main(argv)
    assert exc.value.code == 2
    assert "--" in capsys.readouterr().err


# --------------------------------------------------------------------------- compare_etcd


def _row(ops: float) -> dict[str, Any]:
    return {
        "ops_per_s": ops,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "client_cpu_us_per_op": 100.0,
        "server_cpu_us_per_op": 200.0,
        "tcp_in_segs_per_op": 4.1,
        "tcp_out_segs_per_op": 4.1,
        "tcp_client_to_server_segs_per_op": 1.0,
        "tcp_server_to_client_segs_per_op": 0.4,
        "errors": 0,
        "foreign_cpu_pct": 3.0,
    }


def test_ratios_name_each_pair_that_ran() -> None:
    entry = {"etcd": _row(8000), "metaledger": _row(2000), "grpc-aio-noop": _row(4000)}
    assert compare_etcd.ratios(entry) == {
        "metaledger / etcd": 0.25,
        "metaledger / grpc-aio-noop": 0.5,
        "grpc-aio-noop / etcd": 0.5,
    }
    assert compare_etcd.ratios({"etcd": {"failed": "x"}, "metaledger": _row(1)}) == {
        "metaledger / etcd": None
    }


def test_compare_tables_show_every_system_and_ratio() -> None:
    entry: dict[str, Any] = {
        "row": "put:64",
        "etcd": _row(8000),
        "metaledger": _row(2000),
        "grpc-sync-noop": {"failed": "timed out after 70s"},
    }
    entry["ratios"] = compare_etcd.ratios(entry)
    report = {"rows": [entry]}
    lines = compare_etcd.table(report).splitlines()
    assert lines[0] == (
        "| row | etcd ops/s | metaledger ops/s | grpc-sync-noop ops/s | metaledger / etcd "
        "| metaledger / grpc-sync-noop | grpc-sync-noop / etcd |"
    )
    assert lines[2] == "| put:64 | 8000 | 2000 | - | 0.25 | - | - |"
    detail = compare_etcd.detail_table(report)
    assert (
        "| put:64 | etcd | 8000 | 1.00 / 2.00 | 100 / 200 | 1.00 / 0.40 / 4.10 | 0 | 3 |" in detail
    )
    assert "| put:64 | grpc-sync-noop | failed: timed out after 70s |" in detail


@pytest.mark.parametrize("systems", ["etcd,redis", "metaledger,metaledger", "", "grpc-noop"])
def test_compare_rejects_unknown_systems(systems: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert compare_etcd.main(["--systems", systems]) == 2
    assert "grpc-aio-noop" in capsys.readouterr().err  # names the choices


def test_wait_quiet_is_bounded() -> None:
    assert compare_etcd.wait_quiet(1e9, 60.0, sample_s=0.05)["quiet_wait_s"] < 1.0  # quiet now
    never = compare_etcd.wait_quiet(-1.0, 0.2, sample_s=0.05)  # never quiet: gives up
    assert 0.2 <= never["quiet_wait_s"] < 2.0 and never["busy_before_pct"] >= 0


def test_interleave_starts_every_system_then_alternates_them_row_by_row(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    calls: list[str] = []

    class FakeCluster:
        def __init__(self, system: str) -> None:
            self.system, self.version, self.endpoints, self.leader = system, "v", ["e"], "e"

        def stop(self) -> None:
            calls.append(f"stop {self.system}")

    def fake_start(system: str, args: Any, workdir: Any) -> FakeCluster:
        calls.append(f"start {system}")
        return FakeCluster(system)

    def fake_row(row: Any, cluster: Any, args: Any, budget: float) -> dict[str, Any]:
        calls.append(f"{row.name} {cluster.system}")
        return _row(1000)

    monkeypatch.setattr(compare_etcd, "start_system", fake_start)
    monkeypatch.setattr(compare_etcd, "run_row", fake_row)
    monkeypatch.setattr(compare_etcd.shutil, "which", lambda name: f"/usr/bin/{name}")
    argv = ["--systems", "etcd,metaledger", "--rows", "put:64,put:64", "--quiet-below", "0"]
    before = signal.getsignal(signal.SIGTERM)
    assert compare_etcd.main([*argv, "--interleave", "--out-dir", str(tmp_path)]) == 0
    assert signal.getsignal(signal.SIGTERM) == before  # not left ignored: children inherit it
    rows = ["put:64 etcd", "put:64 metaledger"] * 2
    assert calls == ["start etcd", "start metaledger", *rows, "stop etcd", "stop metaledger"]
    (report,) = tmp_path.glob("*.md")
    assert "interleaved: all systems up at once" in report.read_text()
    report.unlink()
    calls.clear()
    assert compare_etcd.main([*argv, "--out-dir", str(tmp_path)]) == 0
    one_by_one = [
        [f"start {s}", f"put:64 {s}", f"put:64 {s}", f"stop {s}"] for s in ("etcd", "metaledger")
    ]
    assert calls == one_by_one[0] + one_by_one[1]
    (report,) = tmp_path.glob("*.md")
    assert "one system at a time" in report.read_text()
