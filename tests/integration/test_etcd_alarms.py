"""Alarms, NOSPACE and defragment side by side: the same etcdctl commands against a real
etcd 3.4 and a metaledger node, both started with the same small ``--quota-backend-bytes``
(etcd's own e2e test, ``ctl_v3_alarm_test.go``: thirteen 4 KiB pages).

Each step compares the exit code and the output with member ids, endpoints and
revisions normalised (they legitimately differ). etcd's size is its bolt file's,
metaledger's its image's (``nameserver.cluster.nospace``), so the number of puts that fit
differs: the test fills each until its first refusal, then compares from there.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from protos.etcdserverpb import rpc_pb2, rpc_pb2_grpc
from tests.etcd_harness import EtcdServer, etcdctl
from tests.harness import running_cluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
    pytest.mark.skipif(shutil.which("etcd") is None, reason="etcd is not installed"),
]

QUOTA_BYTES = 13 * 4096  # etcd's e2e alarm test: the bolt minimum working set and a bit
CHUNK = "b" * 4096
SPACE_EXCEEDED = "Error: etcdserver: mvcc: database space exceeded"


def normalise(text: str, endpoint: str) -> str:
    text = text.replace(endpoint, "EP")
    text = re.sub(r"memberID:\d+", "memberID:ID", text)
    text = re.sub(r'"memberID":\d+', '"memberID":ID', text)
    text = re.sub(r"compacted revision \d+", "compacted revision REV", text)
    return text


def outcome(endpoint: str, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """(exit code, stdout, the ``Error:`` lines of stderr), normalised; etcdctl's
    retry-interceptor warnings (JSON log lines) are left out."""
    done = etcdctl(endpoint, *args, stdin=stdin)
    errors = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    return (
        done.returncode,
        normalise(done.stdout, endpoint),
        normalise("\n".join(errors), endpoint),
    )


def revision(endpoint: str) -> int:
    done = etcdctl(endpoint, "get", "nothing", "-w", "json")
    assert done.returncode == 0, done.stderr
    return int(json.loads(done.stdout)["header"]["revision"])


def errors_column(endpoint: str) -> str:
    """The last column of ``etcdctl endpoint status`` (StatusResponse.errors: the alarms);
    the others (id, version, size, raft indexes) legitimately differ."""
    code, out, err = outcome(endpoint, "endpoint", "status")
    assert code == 0, err
    return out.rstrip("\n").split(", ")[-1]


def fill_until_refused(endpoint: str, limit: int = 200) -> int:
    """Puts of 4 KiB until the first refusal (under new keys: etcd's e2e test overwrites
    one key, which grows etcd's history but not metaledger's image)."""
    for i in range(limit):
        code, _, err = outcome(endpoint, "put", f"2nd_test/{i}", CHUNK)
        if code != 0:
            assert err == SPACE_EXCEEDED, err
            return i
    raise AssertionError(f"{endpoint}: {limit} puts of 4 KiB and no NOSPACE")


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(etcd endpoint, metaledger endpoint), both with the small quota."""
    quota = f"--quota-backend-bytes={QUOTA_BYTES}"
    with (
        EtcdServer(tmp_path / "etcd", extra=[quota]) as etcd,
        running_cluster(tmp_path / "ml", 1, extra_args=[quota]) as ml,
    ):
        etcd.wait_ready()
        ml.wait_announced()  # its client URL is in the member list (defrag --cluster)
        yield etcd.endpoint, "http://" + ml.endpoints[0]


def both(pair: tuple[str, str], *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """The same command against both; asserts the outcomes are equal and returns it."""
    etcd, ml = (outcome(ep, *args, stdin=stdin) for ep in pair)
    assert ml == etcd, f"etcdctl {' '.join(args)}:\n etcd:       {etcd}\n metaledger: {ml}"
    return ml


def test_no_alarm_list_and_disarm_print_nothing(pair: tuple[str, str]) -> None:
    assert both(pair, "alarm", "list") == (0, "", "")
    assert both(pair, "alarm", "disarm") == (0, "", "")
    assert both(pair, "alarm", "list", "-w", "json") == (0, "{}\n", "")
    assert both(pair, "alarm", "list", "unexpected")[0] != 0


def test_nospace_refuses_growing_writes_until_space_is_freed_and_disarmed(
    pair: tuple[str, str],
) -> None:
    assert both(pair, "put", "1st_test", "a" * 64) == (0, "OK\n", "")
    for endpoint in pair:
        assert fill_until_refused(endpoint) >= 1
    assert both(pair, "alarm", "list") == (0, "memberID:ID alarm:NOSPACE \n", "")
    listed = both(pair, "alarm", "list", "-w", "json")[1]
    assert listed == '{"alarms":[{"memberID":ID,"alarm":1}]}\n', listed
    # growing writes are refused; reads, deletes and compaction are not
    assert both(pair, "put", "3rd_test", "a" * 64) == (1, "", SPACE_EXCEEDED)
    assert both(pair, "lease", "grant", "60") == (
        1,
        "",
        "Error: failed to grant lease (etcdserver: mvcc: database space exceeded)",
    )
    assert both(pair, "txn", stdin="\nput t v\n\n\n") == (1, "", SPACE_EXCEEDED)
    # a put in the branch not taken still makes the txn a growing write (etcd's costTxn)
    cas = 'value("1st_test") = "x"\n\nput t v\n\nget 1st_test\n\n'
    assert both(pair, "txn", stdin=cas) == (1, "", SPACE_EXCEEDED)
    assert both(pair, "del", "absent") == (0, "0\n", "")
    assert both(pair, "get", "1st_test") == (0, "1st_test\n" + "a" * 64 + "\n", "")
    assert both(pair, "txn", stdin="\nget 1st_test\n\n\n")[0] == 0
    assert [errors_column(ep) for ep in pair] == ["memberID:ID alarm:NOSPACE "] * 2
    for endpoint in pair:  # how many keys fitted differs
        code, out, _ = outcome(endpoint, "del", "--prefix", "2nd_test/")
        assert code == 0 and int(out) >= 1, out
    # make space as etcd's e2e test does, then disarm
    etcd_rev, ml_rev = (revision(ep) for ep in pair)
    etcd_compact = outcome(pair[0], "compaction", "--physical", str(etcd_rev))
    ml_compact = outcome(pair[1], "compaction", "--physical", str(ml_rev))
    assert ml_compact == etcd_compact == (0, "compacted revision REV\n", "")
    assert both(pair, "defrag") == (0, "Finished defragmenting etcd member[EP]\n", "")
    assert both(pair, "alarm", "disarm") == (0, "memberID:ID alarm:NOSPACE \n", "")
    assert both(pair, "alarm", "list") == (0, "", "")
    assert both(pair, "put", "4th_test", "a" * 64) == (0, "OK\n", "")
    assert [errors_column(ep) for ep in pair] == [""] * 2


def test_defrag_of_every_member_prints_as_etcd(pair: tuple[str, str]) -> None:
    assert both(pair, "defrag", "--cluster") == (
        0,
        "Finished defragmenting etcd member[EP]\n",
        "",
    )


def test_etcdctl_snapshot_save_and_status_agree_on_both(
    pair: tuple[str, str], tmp_path: Path
) -> None:
    """``etcdctl snapshot save`` works against both and streams etcd's format from both:
    ``etcdctl snapshot status`` reads each file;
    ``metaledger snapshot save`` still writes metaledger's own format, which
    ``metaledger snapshot inspect`` reads (docs/operations.md)."""
    assert both(pair, "put", "snap/key", "value") == (0, "OK\n", "")
    statuses = []
    for endpoint, name in zip(pair, ("etcd.db", "ml.db"), strict=True):
        path = tmp_path / name
        done = etcdctl(endpoint, "snapshot", "save", str(path))
        assert done.returncode == 0, done.stderr
        status = etcdctl(endpoint, "snapshot", "status", str(path), "-w", "json")
        assert status.returncode == 0, status.stderr
        statuses.append(json.loads(status.stdout))
    assert statuses[1]["totalKey"] > 0 and statuses[1]["totalSize"] > 0
    own = tmp_path / "ml.snap"
    saved = subprocess.run(
        [
            sys.executable,
            "-m",
            "nameserver.cli",
            "snapshot",
            "save",
            str(own),
            "--endpoints",
            pair[1],
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert saved.returncode == 0, saved.stderr
    inspect = subprocess.run(
        [sys.executable, "-m", "nameserver.cli", "snapshot", "inspect", "--verify", str(own)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert inspect.returncode == 0, inspect.stderr
    assert re.search(r"^kv +1 +[0-9a-f]{32}$", inspect.stdout, re.M), inspect.stdout
    assert re.search(r"^verified +yes$", inspect.stdout, re.M), inspect.stdout


def test_the_alarm_rpc_answers_as_etcd(pair: tuple[str, str]) -> None:
    """What etcdctl cannot send: ACTIVATE (of member 0; of type NONE), a second ACTIVATE,
    GET of one type, DEACTIVATE of an alarm not raised; answers compared with etcd's, the
    header's presence included (etcd sets none). (Not member 0 with type NONE: etcd 3.4
    panics on it, an empty bolt key.)"""
    get, act, deact = (
        rpc_pb2.AlarmRequest.GET,
        rpc_pb2.AlarmRequest.ACTIVATE,
        rpc_pb2.AlarmRequest.DEACTIVATE,
    )
    nospace, none = rpc_pb2.NOSPACE, rpc_pb2.NONE
    steps = [
        (get, 0, none),
        (act, 0, nospace),
        (act, 0, nospace),
        (act, 7, none),
        (get, 0, rpc_pb2.CORRUPT),
        (get, 0, nospace),
        (get, 0, none),
        (deact, 5, nospace),
        (deact, 0, nospace),
        (deact, 7, none),
        (get, 0, none),
    ]
    answers = []
    for endpoint in pair:
        with grpc.insecure_channel(endpoint.removeprefix("http://")) as channel:
            stub = rpc_pb2_grpc.MaintenanceStub(channel)
            got = []
            for action, member, alarm in steps:
                resp = stub.Alarm(
                    rpc_pb2.AlarmRequest(action=action, memberID=member, alarm=alarm), timeout=10
                )
                alarms = sorted((a.memberID, a.alarm) for a in resp.alarms)
                got.append((resp.HasField("header"), alarms))
            answers.append(got)
    etcd, ml = answers
    assert ml == etcd
    assert [alarms for _, alarms in ml] == [
        [],
        [(0, 1)],
        [(0, 1)],
        [(7, 0)],
        [],
        [(0, 1)],
        [(0, 1), (7, 0)],
        [],
        [(0, 1)],
        [(7, 0)],
        [],
    ]


def test_overwriting_one_key_fills_the_quota_with_history_until_compacted(
    pair: tuple[str, str],
) -> None:
    """etcd's e2e alarm test as it is: one key overwritten, so only the history grows
    (metaledger counts the past versions its index holds); compaction frees it."""
    for endpoint in pair:
        fitted = 0
        while (done := outcome(endpoint, "put", "2nd_test", CHUNK))[0] == 0:
            fitted += 1
            assert fitted < 200, f"{endpoint}: 200 overwrites of 4 KiB and no NOSPACE"
        assert done[2] == SPACE_EXCEEDED and fitted >= 2, (done, fitted)
    assert both(pair, "alarm", "list") == (0, "memberID:ID alarm:NOSPACE \n", "")
    assert both(pair, "put", "3rd_test", "a") == (1, "", SPACE_EXCEEDED)
    for endpoint in pair:
        assert outcome(endpoint, "compaction", "--physical", str(revision(endpoint)))[0] == 0
    assert both(pair, "defrag") == (0, "Finished defragmenting etcd member[EP]\n", "")
    assert both(pair, "alarm", "disarm") == (0, "memberID:ID alarm:NOSPACE \n", "")
    assert both(pair, "put", "3rd_test", "a") == (0, "OK\n", "")
    assert both(pair, "put", "2nd_test", CHUNK) == (0, "OK\n", "")


def test_corrupt_refuses_writes_serves_reads_until_disarmed_as_etcd(
    pair: tuple[str, str],
) -> None:
    """CORRUPT raised through the Alarm RPC (etcd's corruption check raises it the same
    way): writes answer "etcdserver: corrupt cluster" (etcd's applierV3Corrupt), reads are
    still served, `alarm disarm` lets writes through again."""
    assert both(pair, "put", "k", "v") == (0, "OK\n", "")
    for endpoint in pair:
        with grpc.insecure_channel(endpoint.removeprefix("http://")) as channel:
            stub = rpc_pb2_grpc.MaintenanceStub(channel)
            me = stub.Status(rpc_pb2.StatusRequest(), timeout=10).header.member_id
            stub.Alarm(
                rpc_pb2.AlarmRequest(
                    action=rpc_pb2.AlarmRequest.ACTIVATE, memberID=me, alarm=rpc_pb2.CORRUPT
                ),
                timeout=10,
            )
    corrupt = "Error: etcdserver: corrupt cluster"
    assert both(pair, "alarm", "list") == (0, "memberID:ID alarm:CORRUPT \n", "")
    assert both(pair, "put", "k", "w") == (1, "", corrupt)
    assert both(pair, "del", "k")[0] == 1
    assert both(pair, "txn", stdin="\n\nput k w\n\n")[0] == 1
    assert both(pair, "lease", "grant", "60")[0] == 1
    assert both(pair, "get", "k", "--print-value-only") == (0, "v\n", "")
    assert both(pair, "get", "k", "--print-value-only", "--consistency=s") == (0, "v\n", "")
    assert errors_column(pair[0]) == errors_column(pair[1])
    assert both(pair, "alarm", "disarm") == (0, "memberID:ID alarm:CORRUPT \n", "")
    assert both(pair, "put", "k", "w") == (0, "OK\n", "")
