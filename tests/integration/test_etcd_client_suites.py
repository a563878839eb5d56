"""Two etcd clients' own test suites, run unchanged against metaledger: every test passes.

- **python-etcd3** (``etcd3`` on PyPI): its released suite ships in the source distribution
  (``tests/test_etcd3.py`` beside the client), which this test fetches with ``pip download``
  (checked against its SHA-256, cached in pytest's cache) and runs with pytest against a
  3-node cluster laid out as the suite's own runner lays out etcd
  (:mod:`tests.etcd_client_suites`). Two settings are ours, in a conftest beside the suite:
  Hypothesis's check against function-scoped fixtures in ``@given`` tests is off (the suite
  pins Hypothesis 4.56.3, which had none), and its ``@given`` tests try 20 examples, not 100
  (each example is an ``etcdctl`` run; the suite's own sleeps take over a minute already).
- **microsoft/etcd3** (``etcd3`` on npm, pinned in tests/js/package.json): the package ships
  no tests, so they are vendored in tests/thirdparty/microsoft-etcd3 (its README says from
  where). They are compiled with the pinned TypeScript against the package's own ``lib/``
  and run with mocha against one node serving TLS (``ETCD_ADDR``); the suite reads its
  certificates from ``src/test/certs``, which this test makes fresh for the run.

Both run at once: the python-etcd3 run starts in the background when the module's tests
start, and its test waits for it. Each suite writes JUnit XML, read here test by test:
every test passed; the only ones not run are those upstream skips in its source
(``UPSTREAM_SKIPS``). A failure that etcd 3.4 shares would have to be shown here by running
the same suite against a real etcd 3.4 before it could be excused by name; there is none.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
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

#: the python-etcd3 source distribution whose suite (and client) runs
PY_VERSION = "0.12.0"
PY_SDIST_SHA256 = "89a704cb389bf0a010a1fa050ce19342d23bf6371ebda1c21cfe8ff3ed488726"
#: how many tests each suite has, all passing
PY_TESTS = 82
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
PY_CONFTEST = """\
from hypothesis import HealthCheck, settings

settings.register_profile(
    "metaledger-ci",
    max_examples=20,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
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


def python_etcd3_suite(cache: Path, dest: Path) -> Path:
    """The released python-etcd3 source tree (the client and its ``tests/``) in ``dest``,
    from its source distribution, with the pytest configuration it runs under."""
    sdist = cache / f"etcd3-{PY_VERSION}.tar.gz"
    if not sdist.exists() or hashlib.sha256(sdist.read_bytes()).hexdigest() != PY_SDIST_SHA256:
        subprocess.run(
            [
                *(sys.executable, "-m", "pip", "download", "--quiet"),
                *("--disable-pip-version-check", "--no-deps"),
                *("--no-binary", ":all:", "--dest", str(cache), f"etcd3=={PY_VERSION}"),
            ],
            check=True,
            timeout=300,
        )
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    assert digest == PY_SDIST_SHA256, f"{sdist}: sha256 {digest}, expected {PY_SDIST_SHA256}"
    with tarfile.open(sdist) as tar:
        tar.extractall(dest, filter="data")
    root = dest / f"etcd3-{PY_VERSION}"
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(PY_CONFTEST)
    return root


@dataclass
class BackgroundRun:
    """The python-etcd3 suite running in its namespaces (:mod:`tests.etcd_client_suites`)."""

    proc: subprocess.Popen[bytes]
    xml: Path
    log: Path
    output: Path

    def wait(self, timeout_s: float) -> int:
        return self.proc.wait(timeout_s)

    def stop(self) -> None:
        """Kill it: unshare ignores SIGTERM while it waits, and with ``--kill-child`` its
        SIGKILL ends the namespace's first process, and so every process in it."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


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
    cache = getattr(request.config, "cache", None)  # none under -p no:cacheprovider
    root = python_etcd3_suite(Path(cache.mkdir("python-etcd3-sdist")) if cache else tmp, tmp)
    xml, log, output = tmp / "python-etcd3.xml", tmp / "python-etcd3.log", tmp / "runner.log"
    with open(output, "wb") as out:
        proc = subprocess.Popen(
            etcd_client_suites.argv(root, xml, log),
            cwd=REPO_ROOT,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    run = BackgroundRun(proc, xml, log, output)
    try:
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
    code = run.wait(600)
    if not run.xml.exists():
        tails = [p.read_text(errors="replace")[-3000:] for p in (run.output, run.log) if p.exists()]
        pytest.fail(f"no results (exit {code}):\n" + "\n".join(tails))
    Outcome.read(run.xml).check("python-etcd3", PY_TESTS)
