"""The console's Leases, locks and elections page in a real browser (headless Chromium
through selenium) against a real 3-node cluster: its TTLs, key counts, holders, fencing
tokens and leader values are what the client answers, the TTLs count down, leases page 100 at
a time, and the page loads without a console error. Screenshots go to the test's tmp dir (and
to $METALEDGER_CONSOLE_SCREENSHOTS, for docs/console.md).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client
from nameserver.client.locks import acquire
from tests.console_harness import ConsoleProcess, browser_errors, chrome, have_browser, screenshot
from tests.harness import Cluster, running_cluster, wait_until

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.integration,
    pytest.mark.skipif(not have_browser(), reason="chromium and chromedriver are not installed"),
]

SHOTS = "screenshots"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-pages")


@pytest.fixture(scope="module")
def cluster(root: Path) -> Iterator[Cluster]:
    with running_cluster(root / "cluster", n=3) as c:
        c.wait_announced()
        yield c


@pytest.fixture(scope="module")
def client(cluster: Cluster) -> Iterator[Client]:
    with Client(cluster.endpoints, timeout_s=10) as c:
        yield c


@pytest.fixture(scope="module")
def console(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "console", cluster.endpoints)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def driver(root: Path) -> Iterator[Any]:
    d = chrome(root)
    yield d
    d.quit()


def _cells(driver: Any, css: str) -> list[str]:
    from selenium.webdriver.common.by import By

    return [td.text for td in driver.find_elements(By.CSS_SELECTOR, f"{css} td")]


def _seconds(text: str) -> int:
    return int(text.removesuffix(" s"))


def test_leases_locks_and_elections_are_what_the_client_answers(
    client: Client, console: ConsoleProcess, driver: Any, root: Path
) -> None:
    from selenium.webdriver.common.by import By

    lease = client.lease_grant(120)
    client.put("svc/orders/a", "1", lease=lease.id)
    client.put("svc/orders/b", "2", lease=lease.id)
    for _ in range(150):
        client.lease_grant(600)
    waiter_lease = client.lease_grant(120).id
    election = client.election("elect/brokers")
    leader = election.campaign("10.0.0.1:10911", ttl_s=30)
    with client.lock("locks/jobs", ttl_s=30) as held:
        waiter = threading.Thread(
            target=acquire, args=(client, "locks/jobs", waiter_lease, 60), daemon=True
        )
        waiter.start()
        wait_until(
            lambda: client.get("locks/jobs/", prefix=True, count_only=True).count == 2,
            20,
            "a waiter",
        )

        driver.get(console.url + "/leases")
        row = f"#leases tr[data-lease='{lease.id:x}']"
        wait_until(lambda: len(_cells(driver, row)) == 5, 20, "the lease's row")
        cells = _cells(driver, row)
        ttl = client.lease_time_to_live(lease.id, keys=True)
        assert cells[1] == f"{ttl.granted_ttl_s} s"
        assert abs(_seconds(cells[2]) - ttl.ttl_s) <= 2
        assert cells[3] == str(len(ttl.keys)) == "2"
        assert cells[4] == "svc/orders/a, svc/orders/b"
        # the remaining TTL counts down on the page
        first = _seconds(cells[2])
        wait_until(lambda: _seconds(_cells(driver, row)[2]) < first, 10, "the TTL to count down")
        total = len(client.lease_leases())
        assert _text(driver, "#ltotal") == f"({total} live, 100 shown)"
        driver.find_element(By.ID, "lmore").click()
        wait_until(
            lambda: _text(driver, "#ltotal") == f"({total} live, {total} shown)", 20, "page 2"
        )

        wait_until(lambda: len(_cells(driver, "#locks tr[data-name='locks/jobs']")) == 6, 20, "")
        jobs = _cells(driver, "#locks tr[data-name='locks/jobs']")
        assert jobs[1] == held.key.decode() and jobs[2] == f"{held.lease_id:x}"
        assert jobs[3] == str(held.token) and jobs[5] == "1"
        brokers = _cells(driver, "#locks tr[data-name='elect/brokers']")
        got = election.leader()
        assert got is not None
        assert brokers[3] == str(leader.rev) == str(got.create_revision)
        assert brokers[4] == got.value.decode() == "10.0.0.1:10911"
        driver.execute_script("window.scrollTo(0, 0)")
        screenshot(driver, root / SHOTS, "leases")
        assert browser_errors(driver) == []
    waiter.join(30)
    assert not waiter.is_alive()
    client.lease_revoke(waiter_lease)
    election.resign()


def test_locks_under_a_prefix_and_bad_cursors(console: ConsoleProcess) -> None:
    for path in ("/api/leases?cursor=zz", "/api/leases?limit=0", "/api/locks?cursor=q"):
        status, body = console.get(path)
        assert status == 400 and body["error"] and "Traceback" not in body["error"], path
    status, body = console.get("/api/locks?prefix=nothing-here/")
    assert status == 200 and body["locks"] == [] and body["next"] is None


def _text(driver: Any, css: str) -> str:
    from selenium.webdriver.common.by import By

    return str(driver.find_element(By.CSS_SELECTOR, css).text)
