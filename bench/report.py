"""Where benchmark results go, and the one writer every script in ``bench/`` uses.

A run writes two files side by side under :data:`RESULTS_DIR` (or ``--out-dir``)::

    <name>-<date>.json   the whole report dict (indented, for tools and later comparisons)
    <name>-<date>.md     its tables and the words a reader needs

``<date>`` is the report's ``"date"`` (local time at the start, :func:`timestamp`) with ``-``
for ``:``, e.g. ``compare_etcd-2026-11-26T10-02-34``, so the files sort by time. Each report
also carries :func:`machine`, so a number can be read against the box that made it.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import platform
from pathlib import Path
from typing import Any

__all__ = ["RESULTS_DIR", "fmt", "machine", "pyplot", "result_stem", "timestamp", "write_report"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def timestamp() -> str:
    """Now in local time, as a report's ``"date"``: ``2026-11-26T10:02:34``."""
    return dt.datetime.now().strftime("%Y-%m-%dT%H:%M:%S")


def result_stem(name: str, date: str, out_dir: Path = RESULTS_DIR) -> Path:
    """``out_dir/<name>-<date>`` (``:`` as ``-``), without suffix; ``out_dir`` is created."""
    out_dir.mkdir(parents=True, exist_ok=True)
    return out_dir / f"{name}-{date.replace(':', '-')}"


def write_report(
    name: str, report: dict[str, Any], markdown: str, out_dir: Path = RESULTS_DIR
) -> tuple[Path, Path]:
    """Write ``report`` as ``<name>-<date>.json`` and ``markdown`` as ``.md``; return both paths.

    ``<date>`` is ``report["date"]``.
    """
    stem = result_stem(name, report["date"], Path(out_dir))
    json_path, md_path = stem.with_suffix(".json"), stem.with_suffix(".md")
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(markdown.rstrip("\n") + "\n")
    return json_path, md_path


def machine() -> dict[str, Any]:
    """The machine a report was made on: CPU count and model, kernel, Python, and the build
    (``compiled``: the mypyc build's modules are in place, ``scripts/build_mypyc.sh``)."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model or platform.processor(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "build": "compiled" if _compiled() else "pure Python",
    }


def _compiled() -> bool:
    """Whether the first module ``scripts/mypyc_modules.txt`` lists has its .so beside it."""
    root = Path(__file__).resolve().parents[1]
    with contextlib.suppress(OSError):
        lines = (ln.strip() for ln in (root / "scripts/mypyc_modules.txt").read_text().splitlines())
        first = next((root / ln for ln in lines if ln and not ln.startswith("#")), None)
        return first is not None and any(first.parent.glob(first.stem + ".cpython-*.so"))
    return False


def fmt(value: Any, spec: str = ".0f") -> str:
    """A table cell: ``value`` formatted by ``spec``, ``-`` for None, never ``-0``."""
    if value is None:
        return "-"
    text = format(value, spec)
    return text[1:] if text.startswith("-") and not text.strip("-0.") else text


def pyplot() -> Any:
    """``matplotlib.pyplot`` drawing to files only (the Agg backend), or None without
    matplotlib (``pip install -e .[bench]``)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
