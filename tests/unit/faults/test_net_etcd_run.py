"""tests/faults/net/etcd_run.py without namespaces or processes: etcd's flags, the rows of
the per-fault table, and what fails a run of each target."""

from __future__ import annotations

from pathlib import Path

from tests.faults.net.etcd_run import etcd_args, fault_rows, judged, table
from tests.faults.net.run import Phase, RunResult


def result(recovery_s: list[float | None], anomalies: list[str], gap_s: float) -> RunResult:
    phase = Phase("split", "split n1 | n0,n2", 10.0, 20.0, recovery_s, 400, len(anomalies), gap_s)
    return RunResult(7, 400, 150, 3, anomalies, [phase], gap_s, 12.0, 5.0, 5.0)


def test_etcd_members_listen_on_their_namespace_address_with_metaledger_s_ports() -> None:
    args = etcd_args(1, "10.77.1.12", Path("/d/n1"), "n0=http://a,n1=http://b", "tok")
    assert "--listen-client-urls=http://10.77.1.12:2379" in args
    assert "--listen-peer-urls=http://10.77.1.12:2380" in args
    assert "--initial-cluster=n0=http://a,n1=http://b" in args
    assert "--name=n1" in args and "--initial-cluster-state=new" in args


def test_a_fault_s_row_names_when_the_last_member_served_again() -> None:
    (row,) = fault_rows("etcd", result([0.4, 1.25, 0.9], [], 2.0))
    assert row["all_serving_s"] == 1.25 and row["ops"] == 400 and row["longest_gap_s"] == 2.0
    (row,) = fault_rows("etcd", result([0.4, None, 0.9], [], 2.0))
    assert row["all_serving_s"] is None


def test_the_table_puts_metaledger_before_etcd_for_each_fault() -> None:
    rows = fault_rows("etcd", result([1.0], [], 6.5)) + fault_rows(
        "metaledger", result([0.5], [], 1.0)
    )
    lines = table(rows).splitlines()
    assert lines[2].startswith("| 7 | split | metaledger | 400 | 0 | 1.0 | 0.5 |")
    assert lines[3].startswith("| 7 | split | etcd | 400 | 0 | 6.5 | 1.0 |")


def test_etcd_is_judged_by_its_anomalies_alone_metaledger_by_every_check() -> None:
    slow = result([6.0, 1.0, 1.0], [], 6.5)
    assert judged("etcd", slow) == []
    assert len(judged("metaledger", slow)) == 2
    stale = result([1.0], ["lin/1/0: no linearization of its 9 operations"], 1.0)
    assert judged("etcd", stale) == [
        "not linearizable: lin/1/0: no linearization of its 9 operations"
    ]
