"""Two etcd clients' own test suites, run unchanged against metaledger: every test passes.

- **python-etcd3** (kragniz/python-etcd3): the suite of its GitHub master (92 tests) with the
  client it tests there (newer than the last release on PyPI, 0.12.0), vendored in
  tests/thirdparty/python-etcd3 (its README says from where). It runs with pytest against a
  3-node cluster laid out as the suite's own runner lays out etcd, in two runs as that runner's
  two settings need (:mod:`tests.etcd_client_suites`; the first in two shards at once, on two
  clusters: the tests that mostly sleep and the others). One setting is ours, in a conftest
  beside the suite: its ``@given`` tests try 20 examples, not 100 (each example is a client
  and two or three ``etcdctl`` runs; the suite's own sleeps take over a minute already).
- **microsoft/etcd3** (``etcd3`` on npm, pinned in tests/js/package.json): the package ships
  no tests, so they are vendored in tests/thirdparty/microsoft-etcd3 (its README says from
  where). They are compiled with the pinned TypeScript against the package's own ``lib/``
  and run with mocha against one node serving TLS (``ETCD_ADDR``); the suite reads its
  certificates from ``src/test/certs``, which this test makes fresh for the run.

Both run at once: the python-etcd3 run starts in the background when the module's tests
start, and its test waits for it. Each suite writes JUnit XML, read here test by test:
every test passed, named one by one (python-etcd3's against the ``def test_`` of its
source); the only ones not run are those upstream skips in its source (``UPSTREAM_SKIPS``).
A failure that etcd 3.4 shares would have to be shown here by running the same suite
against a real etcd 3.4 before it could be excused by name; there is none.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from protos.etcdserverpb import rpc_pb2
from tests import etcd_client_suites
from tests.harness import REPO_ROOT
from tests.tls_harness import Pki, TlsCluster

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]

#: python-etcd3's client and suite, as vendored
PY_TREE = REPO_ROOT / "tests" / "thirdparty" / "python-etcd3"
#: how many tests each suite has, all passing
PY_TESTS = 92
JS_TESTS = 155
#: tests the suite's own source skips (``it.skip``), and so are reported but never run
UPSTREAM_SKIPS = frozenset(
    {
        "watch() network interruptions::is resilient to network interruptions",
        "watch() network interruptions::replays historical updates",
    }
)
JS_DIR = REPO_ROOT / "tests" / "js"
JS_TESTS_DIR = REPO_ROOT / "tests" / "thirdparty" / "microsoft-etcd3" / "test"
#: the suite registers and loads a profile of its own at import ("default": no deadline),
#: which inherits this one's settings, loaded first
PY_CONFTEST = """\
from hypothesis import settings

settings.register_profile("metaledger-ci", max_examples=20)
settings.load_profile("metaledger-ci")
"""


@dataclass
class Outcome:
    """A suite's JUnit XML, test by test: ``name -> passed|failed|skipped`` and messages."""

    results: dict[str, str] = field(default_factory=dict)
    messages: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, path: Path) -> Outcome:
        out = cls()
        for case in ET.parse(path).iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}"
            status = "passed"
            for child in case:
                if child.tag in ("failure", "error", "skipped"):
                    status = "skipped" if child.tag == "skipped" else "failed"
                    out.messages[name] = (child.get("message") or child.text or "")[:500]
                    break
            out.results[name] = status
        return out

    def named(self, status: str) -> set[str]:
        return {n for n, s in self.results.items() if s == status}

    def check(self, suite: str, expected: int, skips: frozenset[str] = frozenset()) -> None:
        """``expected`` tests passed, none failed, only ``skips`` were skipped."""
        bad = sorted(n for n, s in self.results.items() if s != "passed" and n not in skips)
        summary = "\n".join(
            [f"{suite}: {len(self.named('passed'))}/{len(self.results)} passed"]
            + [f"  {self.results[n]}: {n}: {self.messages.get(n, '')}" for n in bad]
        )
        assert not bad, summary
        assert self.named("skipped") <= skips, summary
        assert len(self.named("passed")) == expected, summary


# ------------------------------------------------------------------ python-etcd3


def python_etcd3_suite(dest: Path) -> Path:
    """The vendored python-etcd3 tree (the client and its ``tests/``) copied to ``dest``, with
    the pytest configuration it runs under."""
    root = dest / "python-etcd3"
    shutil.copytree(PY_TREE, root, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(PY_CONFTEST)
    return root


def python_etcd3_test_ids() -> set[str]:
    """The vendored suite's tests as JUnit names them (``tests.test_etcd3.Class::test``), read
    from its source: every ``def test_`` of each top-level ``class Test*``."""
    tree = ast.parse((PY_TREE / "tests" / "test_etcd3.py").read_text(encoding="utf-8"))
    return {
        f"tests.test_etcd3.{cls.name}::{fn.name}"
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name.startswith("Test")
        for fn in cls.body
        if isinstance(fn, ast.FunctionDef) and fn.name.startswith("test_")
    }


@dataclass
class BackgroundRun:
    """The python-etcd3 suite running in its namespaces (:mod:`tests.etcd_client_suites`):
    one process (and cluster) per shard, at once, each with its output file."""

    procs: list[subprocess.Popen[bytes]]
    out_dir: Path
    outputs: list[Path]

    def outcome(self) -> Outcome:
        """Every run's results (:data:`tests.etcd_client_suites.RUNS`) as one."""
        merged = Outcome()
        for name, _ in etcd_client_suites.RUNS:
            one = Outcome.read(self.out_dir / f"{name}.xml")
            assert not merged.results.keys() & one.results.keys(), f"{name}: run twice"
            merged.results.update(one.results)
            merged.messages.update(one.messages)
        return merged

    def wait(self, timeout_s: float) -> int:
        """Every shard's end (within ``timeout_s`` in all): the first nonzero exit code."""
        deadline = time.monotonic() + timeout_s
        codes = [p.wait(max(0.0, deadline - time.monotonic())) for p in self.procs]
        return next((c for c in codes if c), 0)

    def stop(self) -> None:
        """Kill them: unshare ignores SIGTERM while it waits, and with ``--kill-child`` its
        SIGKILL ends the namespace's first process, and so every process in it."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


def can_unshare() -> bool:
    return os.geteuid() == 0 and shutil.which("unshare") is not None


@pytest.fixture(scope="module", autouse=True)
def python_etcd3_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[BackgroundRun | None]:
    """Starts the python-etcd3 run first (when its test is selected), so that it runs while
    the microsoft/etcd3 suite does."""
    wanted = any(item.name == "test_python_etcd3_suite" for item in request.session.items)
    if not wanted or not can_unshare() or shutil.which("etcdctl") is None:
        yield None
        return
    tmp = tmp_path_factory.mktemp("python-etcd3")
    root = python_etcd3_suite(tmp)
    run = BackgroundRun([], tmp, [])
    try:
        for i, runs in enumerate(etcd_client_suites.SHARDS):
            output = tmp / f"runner-{i}.log"
            with open(output, "wb") as out:
                run.procs.append(
                    subprocess.Popen(
                        etcd_client_suites.argv(root, tmp, runs),
                        cwd=REPO_ROOT,
                        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                    )
                )
            run.outputs.append(output)
        yield run
    finally:
        run.stop()


# ------------------------------------------------------------------ microsoft/etcd3


def microsoft_etcd3_suite(work: Path) -> Path:
    """The vendored tests compiled beside the npm package's ``lib/`` in ``work``, with fresh
    certificates where the suite reads them; returns ``work``."""
    modules = JS_DIR / "node_modules"
    lib = work / "lib"
    (lib / "test").mkdir(parents=True)
    (work / "node_modules").symlink_to(modules)
    for entry in (modules / "etcd3" / "lib").iterdir():
        (lib / entry.name).symlink_to(entry)
    for ts in JS_TESTS_DIR.glob("*.ts"):
        shutil.copy(ts, lib / "test" / ts.name)
    pki = Pki.make(work / "pki", nodes=0)
    certs = work / "src" / "test" / "certs"
    (certs / "certs").mkdir(parents=True)
    (certs / "private").mkdir()
    shutil.copy(pki.ca(), certs / "certs" / "ca.crt")
    shutil.copy(pki.cert("server"), certs / "certs" / "etcd0.localhost.crt")
    shutil.copy(pki.key("server"), certs / "private" / "etcd0.localhost.key")
    # upstream's compiler options, compiling lib/test in place (upstream: src -> lib)
    tsconfig = {
        "compilerOptions": {
            "sourceMap": True,
            "module": "commonjs",
            "target": "ES2018",
            "lib": ["ES2018"],
            "types": ["chai-as-promised", "chai-subset", "mocha", "node"],
            "experimentalDecorators": True,
            "strictNullChecks": True,
            "skipLibCheck": True,
        },
        "include": ["lib/test"],
    }
    (work / "tsconfig.json").write_text(json.dumps(tsconfig))
    done = subprocess.run(
        ["node", str(modules / "typescript" / "bin" / "tsc"), "-p", str(work)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"tsc:\n{done.stdout}{done.stderr}"
    return work


@pytest.mark.skipif(
    shutil.which("node") is None or not (JS_DIR / "node_modules" / "etcd3" / "lib").is_dir(),
    reason="etcd3 is not installed (scripts/test.sh runs npm ci --prefix tests/js)",
)
def test_microsoft_etcd3_suite(tmp_path: Path) -> None:
    work = microsoft_etcd3_suite(tmp_path / "suite")
    pki = Pki(work / "pki")
    xml, log = tmp_path / "microsoft-etcd3.xml", tmp_path / "microsoft-etcd3.log"
    cluster = TlsCluster(tmp_path / "cluster", 1, pki, pki.serve_flags(auth=False), start=False)
    failed = True
    try:
        cluster.start(0)
        cluster.wait_ready(30)
        version = cluster.maintenance(0).Status(rpc_pb2.StatusRequest(), timeout=5).version
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("ETCDCTL_")}
        env.update(ETCD_ADDR=cluster.endpoints[0], ETCD_VERSION=version)
        with open(log, "wb") as out:
            subprocess.run(
                [
                    *("node", str(JS_DIR / "node_modules" / "mocha" / "bin" / "mocha.js")),
                    *("--require", str(work / "lib" / "test" / "_setup.js")),
                    *("--timeout", "10000", "--exit", "--reporter", "xunit"),
                    *("--reporter-option", f"output={xml}"),
                    str(work / "lib" / "test" / "*.test.js"),
                ],
                cwd=work,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=600,
            )
        failed = False
    finally:
        cluster.close(failed=failed)
    assert xml.exists(), log.read_text(errors="replace")[-3000:]
    Outcome.read(xml).check("microsoft/etcd3", JS_TESTS, UPSTREAM_SKIPS)


# the python-etcd3 run started with the module; its test comes last, to wait for it
@pytest.mark.skipif(not can_unshare(), reason="the suite runs in namespaces (unshare, as root)")
@pytest.mark.timeout(600)
def test_python_etcd3_suite(python_etcd3_run: BackgroundRun | None) -> None:
    run = python_etcd3_run
    assert run is not None
    shards = sorted(name for shard in etcd_client_suites.SHARDS for name in shard)
    assert shards == sorted(name for name, _ in etcd_client_suites.RUNS), "each run in one shard"
    code = run.wait(600)
    logs = [*run.outputs, *(run.out_dir / f"{name}.log" for name, _ in etcd_client_suites.RUNS)]
    if not all((run.out_dir / f"{name}.xml").exists() for name, _ in etcd_client_suites.RUNS):
        tails = [p.read_text(errors="replace")[-3000:] for p in logs if p.exists()]
        pytest.fail(f"no results (exit {code}):\n" + "\n".join(tails))
    outcome = run.outcome()
    outcome.check("python-etcd3", PY_TESTS)
    ids = python_etcd3_test_ids()
    assert len(ids) == PY_TESTS
    assert outcome.named("passed") == ids, sorted(ids ^ outcome.named("passed"))
