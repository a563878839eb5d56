"""A real ``metaledger console`` process and a headless Chromium to look at it.

The console is found through the ``metaledger.commands`` entry point; an install made before
the console existed lacks it, so its process gets a throwaway ``*.dist-info`` on its
PYTHONPATH declaring exactly that entry point (what ``pip install -e .`` writes), as the
broker's tests do. The browser is Debian's ``chromium`` driven through ``chromedriver`` by
selenium, headless, with the page's console log kept (``browser_errors``).

The browser modules share one 3-node cluster, one client of it and one browser per session
(the fixtures ``cluster``, ``client`` and ``driver``; each module imports ``shared_cluster``,
``shared_client``, ``shared_driver`` and ``shared_blank_page``, which pytest registers under
their names): what a module leaves behind is its own prefixes and roles, the leader it killed
is back and ready, auth is off again, the browser on a blank page. Each module keeps its own
``root`` (tmp dir) and consoles.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client
from tests.harness import (
    REPO_ROOT,
    Cluster,
    command_plugin_path,
    free_ports,
    running_cluster,
    wait_until,
)

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ENTRY_POINT = "console = console.cli:register"
#: set to a folder (docs/images) to copy each screenshot there too
DOCS_IMAGES_ENV = "METALEDGER_CONSOLE_SCREENSHOTS"


def have_browser() -> bool:
    return all(os.access(p, os.X_OK) for p in (CHROMIUM, CHROMEDRIVER))


#: what every browser module is marked with (its ``pytestmark``, plus its own)
BROWSER_MARKS = [
    pytest.mark.cluster,
    pytest.mark.integration,
    pytest.mark.skipif(not have_browser(), reason="chromium and chromedriver are not installed"),
    pytest.mark.skipif(shutil.which("etcdctl") is None, reason="etcdctl is not installed"),
]


class ConsoleProcess:
    """``metaledger console`` in its own session, stopped by its PID."""

    def __init__(self, root: Path, endpoints: list[str], *extra: str) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = root / f"console-{self.port}.log"
        env = dict(os.environ)
        paths = [str(REPO_ROOT), command_plugin_path(root, ENTRY_POINT), env.get("PYTHONPATH", "")]
        env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
        env["PYTHONUNBUFFERED"] = "1"
        argv = [
            sys.executable, "-m", "nameserver.cli", "console",
            "--listen", f"127.0.0.1:{self.port}", "--endpoints", ",".join(endpoints),
            "--sample-every", "0.5", *extra,
        ]  # fmt: skip
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            wait_until(self._answers, 30, f"the console at {self.url} answering")
        except BaseException:
            self.stop()
            raise

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"console exited {self.proc.returncode}:\n{self.log()}")
        try:
            self.get("/api/clusters")
            return True
        except OSError:
            return False

    def get(self, path: str) -> tuple[int, Any]:
        """``(status, JSON body)`` of a GET, errors included."""
        return self.request(path)

    def request(self, path: str, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method="POST" if data else "GET")
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def chrome(download_dir: Path) -> Any:
    """A headless Chromium session (selenium's ``webdriver.Chrome``) keeping console logs."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for arg in (
        "--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
        "--window-size=1280,900", f"--user-data-dir={download_dir / 'chrome-profile'}",
    ):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)


def browser_errors(driver: Any) -> list[str]:
    """The page's console errors since the last call (SEVERE entries)."""
    return [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def screenshot(driver: Any, out_dir: Path, name: str) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"console-{name}.png"
    driver.save_screenshot(str(path))
    docs = os.environ.get(DOCS_IMAGES_ENV)
    if docs:
        Path(docs).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(docs) / path.name)
    return path


def text(driver: Any, css: str) -> str:
    """The text of the element ``css`` names."""
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)


def table(driver: Any, css: str) -> list[list[str]]:
    """The cells of each body row of the table ``css`` names."""
    from selenium.webdriver.common.by import By

    return [
        [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        for tr in driver.find_elements(By.CSS_SELECTOR, f"{css} tbody tr")
    ]


# ---- the fixtures the browser modules share (one of each per session) ---------------------


@pytest.fixture(scope="session", name="cluster")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-node cluster for every browser module (announced: the Cluster page lists all)."""
    with running_cluster(tmp_path_factory.mktemp("console-cluster"), n=3) as c:
        c.wait_announced()
        yield c


@pytest.fixture(scope="session", name="client")
def shared_client(cluster: Cluster) -> Iterator[Client]:
    with Client(cluster.endpoints, timeout_s=10) as c:
        yield c


@pytest.fixture(scope="session", name="driver")
def shared_driver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    d = chrome(tmp_path_factory.mktemp("chrome"))
    yield d
    d.quit()


@pytest.fixture(scope="module", autouse=True, name="blank_page_between_modules")
def shared_blank_page(driver: Any) -> Iterator[None]:
    """The shared browser leaves each module on a blank page, its console log drained: the
    page a module's last test left would go on polling a console the module stopped, and
    its refused requests would count as the next module's console errors."""
    browser_errors(driver)
    yield
    driver.get("about:blank")
    browser_errors(driver)
