"""Shipped code explains itself: no references a reader of this repository cannot follow.

A comment or docstring in a shipped package may cite a source (RocketMQ's ``CommitLog.java``,
Redis's ``rdb.c``, etcd-io/raft), a document of this repository (``docs/broker.md``), or state
the fact plainly. It may not point at the project's tracker ("issue 17 item 5"), at notes that
live outside the repository ("research/broker.md §6.2", "DESIGN.md §3", "STYLE.md 4",
"seed 004", "trap 6") or at private source aliases ("J4", "J5": say "RocketMQ 4.9's").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("rmq", "raftlog", "snapshots", "nameserver", "broker", "replicator")

#: What a newcomer cannot follow, each with what to write instead.
PATTERNS: dict[str, re.Pattern[str]] = {
    "tracker issue (say what it means)": re.compile(r"\bissues? ?#?\d+", re.I),
    "seed N (name RocketMQ's replication mode or its source)": re.compile(r"\bseeds? ?#?\d+", re.I),
    "trap N (state the fact, cite the source)": re.compile(r"\btraps? ?#?\d+", re.I),
    "research note (outside the repository)": re.compile(r"research/|\bresearch (note|§)", re.I),
    "DESIGN.md (outside the repository: docs/architecture.md)": re.compile(r"\bDESIGN\.md"),
    "STYLE.md (outside the repository: say the rule)": re.compile(r"\bSTYLE(\.md)? ?§?\d"),
    "J4/J5 (say RocketMQ 4.9's / RocketMQ 5's)": re.compile(r"\bJ[45]\b"),
}

#: Files that may still match, each with why. Being rewritten elsewhere is the only reason
#: today: drop an entry as soon as its file is clean (a stale entry fails below).
ALLOWED: dict[str, str] = {}


def shipped_files() -> list[Path]:
    """Every Python file of the shipped packages but generated protobuf code."""
    return sorted(
        path
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "_pb2" not in path.name
    )


def findings(path: Path) -> list[str]:
    """``line: text  [what]`` for every match in one file."""
    out: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        for what, pattern in PATTERNS.items():
            if pattern.search(line):
                out.append(f"{number}: {line.strip()}  [{what}]")
    return out


def test_the_scan_sees_the_packages() -> None:
    files = shipped_files()
    assert len(files) > 100
    assert {f.relative_to(ROOT).parts[0] for f in files} == set(PACKAGES)


@pytest.mark.parametrize(
    ("text", "bad"),
    [
        ("needAckNums (seed 004)", True),
        ("strings (trap 6)", True),
        ("Issue 19 item 2: workers hold leases", True),
        ("research/broker.md §6.2", True),
        ("(research note §3.6)", True),
        ("(DESIGN.md §5)", True),
        ("(STYLE.md 4)", True),
        ("J5 ``CommitLog.needHandleHA``", True),
        ("RocketMQ 5's ``CommitLog.needHandleHA``", False),
        ("--source is a seed node", False),
        ("random.Random(spec.seed)", False),
        ("leonchen83/redis-replicator#27", False),
        ("h11 style", False),
        ("docs/operations.md, Durability", False),
    ],
)
def test_patterns(text: str, bad: bool) -> None:
    assert any(p.search(text) for p in PATTERNS.values()) is bad


def test_no_tracker_or_outside_references() -> None:
    bad: list[str] = []
    for path in shipped_files():
        rel = path.relative_to(ROOT).as_posix()
        if rel in ALLOWED:
            continue
        bad += [f"{rel}:{finding}" for finding in findings(path)]
    assert not bad, "references a newcomer cannot follow:\n" + "\n".join(bad)


def test_allow_list_is_not_stale() -> None:
    stale = [rel for rel in ALLOWED if not (ROOT / rel).exists() or not findings(ROOT / rel)]
    assert not stale, f"clean now, remove from ALLOWED: {stale}"
