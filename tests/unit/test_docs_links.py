"""The user documentation (README.md, docs/*.md) stays inside the repository and about today.

Every markdown link must resolve to a file or folder of the repository (and, with a
``#fragment``, to a heading of that markdown file); a link may leave the repository only to
the few public references in ``ALLOWED_URLS``. Every backticked repository path
(`nameserver/cli/exitcodes.py`, `bench/results/....md`) must exist. And the documents must
not speak of the project's development history (``HISTORY_PATTERNS``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

#: Public references a document may link to (none is needed today).
ALLOWED_URLS: frozenset[str] = frozenset()

#: Words that speak of how the project was built rather than what it is.
HISTORY_PATTERNS = [
    r"\bissues? \d+",
    r"\bround \d+",
    r"\b(this|that|each|every|next|last|previous|earlier|later) round\b",
    r"\bnext issue",
    r"\blater issues?",
    r"\bsessions? \d+",
    r"\bthis session",
    r"\bthrowaway",
    r"\bpass marks?",
    r"\bDESIGN(\.md)?\s*§",
    r"\.\./shared",
]

_FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.M | re.S)
_LINK = re.compile(r"(?<!\!)\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def _prose(text: str) -> str:
    """The text without its fenced code blocks (commands are not links)."""
    return _FENCE.sub("", text)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown file (a repeated heading gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    out: set[str] = set()
    for m in _HEADING.finditer(_prose(path.read_text(encoding="utf-8"))):
        slug = _slug(m.group(1))
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def links(path: Path) -> list[str]:
    return _LINK.findall(_prose(path.read_text(encoding="utf-8")))


def link_problem(doc: Path, target: str) -> str | None:
    """Why ``target`` (a link in ``doc``) does not resolve inside the repository, or None."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # a scheme: http, https, mailto, file
        if target in ALLOWED_URLS:
            return None
        return "leaves the repository (not in ALLOWED_URLS)"
    file_part, _, fragment = target.partition("#")
    dest = doc if not file_part else (doc.parent / file_part).resolve()
    if dest != ROOT and ROOT not in dest.parents:
        return "leaves the repository"
    if not dest.exists():
        return "does not exist"
    if fragment and dest.suffix == ".md" and fragment not in anchors(dest):
        return f"has no heading #{fragment}"
    return None


def _top_level() -> set[str]:
    return {p.name for p in ROOT.iterdir() if not p.name.startswith(".") or p.name == ".ci"}


_FILE_SUFFIXES = (".md", ".py", ".sh", ".proto", ".toml", ".yml", ".yaml", ".json", ".txt")


def repo_paths(path: Path) -> list[str]:
    """Backticked spans that name a path: they start with a top-level entry of the
    repository and hold a '/' (or are that entry), or they end like a source or document
    file and hold a '/'. Spans with a placeholder (``<``, ``*``, ``…``) or a space are not
    paths."""
    top = _top_level()
    found = []
    for span in _CODE.findall(_prose(path.read_text(encoding="utf-8"))):
        span = span.strip()
        if re.search(r"[\s<>*{}…|$\[\]]", span) or span.startswith(("./", "/", "-", "~")):
            continue
        span = re.split(r"::|:(?=\d)", span)[0]  # path::name or path:line
        first = span.split("/", 1)[0]
        if first in top and ("/" in span or (ROOT / span).is_file()):
            found.append(span)
        elif "/" in span and span.endswith(_FILE_SUFFIXES):
            found.append(span)
    return found


def path_problem(span: str) -> str | None:
    """Why a backticked path does not name something in the repository, or None. A path
    that does not start at the root may be relative to a top-level package
    (``routing/records.py`` in ``nameserver/``)."""
    dest = (ROOT / span).resolve()
    if dest != ROOT and ROOT not in dest.parents:
        return "leaves the repository"
    if dest.exists():
        return None
    if span.split("/", 1)[0] not in _top_level() and any(
        (d / span).exists() for d in ROOT.iterdir() if d.is_dir()
    ):
        return None
    return "does not exist"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves_inside_the_repository(doc: Path) -> None:
    bad = [
        f"{target}: {why}"
        for target in links(doc)
        if (why := link_problem(doc, target)) is not None
    ]
    assert not bad, f"{doc.relative_to(ROOT)}: broken links:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_backticked_repository_path_exists(doc: Path) -> None:
    bad = [f"{p}: {why}" for p in repo_paths(doc) if (why := path_problem(p)) is not None]
    assert not bad, f"{doc.relative_to(ROOT)}: bad paths:\n" + "\n".join(bad)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_development_history(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    hits = [
        f"line {text.count(chr(10), 0, m.start()) + 1}: {m.group(0)!r}"
        for pattern in HISTORY_PATTERNS
        for m in re.finditer(pattern, text, re.I)
    ]
    assert not hits, f"{doc.relative_to(ROOT)} speaks of development history: {hits}"


def test_the_documents_exist() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in DOCS}
    assert {
        "README.md",
        "docs/operations.md",
        "docs/semantics.md",
        "docs/performance.md",
        "docs/architecture.md",
    } <= names


# The checker itself, on small inputs.


def test_slug_follows_github() -> None:
    assert _slug("Metrics and `/health`") == "metrics-and-health"
    assert _slug("A local cluster: `cluster up` and `cluster restart`") == (
        "a-local-cluster-cluster-up-and-cluster-restart"
    )
    assert _slug("Performance against etcd") == "performance-against-etcd"


def test_checker_refuses_links_out_of_the_repository(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "operations.md"
    assert link_problem(doc, "../../shared/DESIGN.md") == "leaves the repository"
    assert link_problem(doc, "https://example.com/") is not None
    assert link_problem(doc, "semantics.md") is None
    assert link_problem(doc, "../README.md#try-it") is None
    assert link_problem(doc, "../README.md#no-such-heading") == "has no heading #no-such-heading"
    assert link_problem(doc, "../research/pysyncobj.md") == "does not exist"


def test_checker_finds_links_and_paths_outside_code_blocks(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "See [ops](docs/operations.md) and `nameserver/cli/exitcodes.py:12`, not `DIR/n<i>.log`,\n"
        "`research/pysyncobj.md`, `../shared/DESIGN.md`, `routing/records.py`.\n"
        "```\n[skipped](nowhere.md) `bench/nowhere.py`\n```\n",
        encoding="utf-8",
    )
    assert links(doc) == ["docs/operations.md"]
    paths = repo_paths(doc)
    assert paths == [
        "nameserver/cli/exitcodes.py",
        "research/pysyncobj.md",
        "../shared/DESIGN.md",
        "routing/records.py",
    ]
    assert [path_problem(p) for p in paths] == [
        None,
        "does not exist",
        "leaves the repository",
        None,
    ]


def test_the_exit_code_table_in_operations_md_is_exitcodes_py() -> None:
    """docs/operations.md lists every exit code with the meaning `metaledger --help` prints."""
    from nameserver.cli.exitcodes import MEANINGS, ExitCode

    text = (ROOT / "docs" / "operations.md").read_text()
    for code in ExitCode:
        assert f"| {int(code)} | {code.name} | {MEANINGS[code]} |" in text, code.name


def test_the_readme_stays_short() -> None:
    """The README is the front door: what it is, the two commands, an example per surface,
    today's numbers. Details belong in docs/."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").count("\n")
    assert lines < 250, f"README.md has {lines} lines: move details to docs/"
