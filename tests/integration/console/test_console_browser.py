"""The web console in a real browser (headless Chromium through selenium) against a real
3-node cluster: each page loads without a console error, its numbers are the client's, a
value edited on the Keys page is what ``etcdctl get`` returns, a write to a read-only console
changes nothing, and the Cluster page keeps working while the leader is killed. Screenshots
of each page go to the test's tmp dir (and to $METALEDGER_CONSOLE_SCREENSHOTS, for
docs/console.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, NodeStatus
from tests.console_harness import (  # noqa: F401  (the shared fixtures)
    BROWSER_MARKS,
    ConsoleProcess,
    browser_errors,
    screenshot,
    shared_blank_page,
    shared_client,
    shared_cluster,
    shared_driver,
    table,
)
from tests.console_harness import text as _text
from tests.etcd_harness import etcdctl
from tests.harness import Cluster, wait_until

pytestmark = BROWSER_MARKS

SHOTS = "screenshots"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console")


@pytest.fixture(scope="module")
def console_rw(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "rw", cluster.endpoints, "--allow-writes")
    yield c
    c.stop()


@pytest.fixture(scope="module")
def console_ro(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "ro", cluster.endpoints[:1])
    yield c
    c.stop()


def _rows(driver: Any) -> dict[str, list[str]]:
    from selenium.webdriver.common.by import By

    out = {}
    for tr in driver.find_elements(By.CSS_SELECTOR, "#members tbody tr"):
        cells = [td.text for td in tr.find_elements(By.TAG_NAME, "td")]
        out[cells[0]] = cells
    return out


def _open_key(driver: Any, console: ConsoleProcess, key: str, value: str) -> None:
    """The Keys page at ``key``'s parent, with ``key`` clicked and its value shown."""
    from selenium.webdriver.common.by import By

    parent = key.rsplit("/", 1)[0] + "/"
    driver.get(f"{console.url}/keys?prefix={parent}")
    wait_until(
        lambda: driver.find_element(By.CSS_SELECTOR, f"#entries li[data-key='{key}']"),
        20,
        "the key",
    ).click()
    wait_until(lambda: _text(driver, "#vbody") == value, 20, "the value")


def _page_equals_status(driver: Any, client: Client) -> bool:
    """The member rows and the leader/term on the page are what Admin.Status says now."""
    before = _rows(driver), _text(driver, "#leader"), _text(driver, "#term")
    answers = [a for a in client.status_all() if isinstance(a, NodeStatus)]
    rows, leader, term = before
    if len(rows) != 3 or len(answers) != 3:
        return False
    for s in answers:
        cells = rows.get(s.id)
        want = [s.role, str(s.term), str(s.end_offset), str(s.commit_offset), str(s.apply_offset)]
        if cells is None or cells[3:8] != want:
            return False
    lead = next(s for s in answers if s.role == "leader")
    return leader == lead.id and term == str(lead.term)


def test_cluster_page_shows_what_status_answers(
    cluster: Cluster, client: Client, console_rw: ConsoleProcess, driver: Any, root: Path
) -> None:
    cluster.wait_converged()
    driver.get(console_rw.url + "/")
    wait_until(lambda: _page_equals_status(driver, client), 20, "the page to show the status")
    # the chart has samples to draw (the console samples every 0.5 s)
    wait_until(
        lambda: len(console_rw.get("/api/cluster/samples?seconds=60")[1]["t"]) >= 2,
        20,
        "two samples",
    )
    assert driver.execute_script("return document.querySelector('#chart canvas') !== null")
    assert _text(driver, "#alarms") == "none"
    screenshot(driver, root / SHOTS, "cluster")
    assert browser_errors(driver) == []


def test_keys_page_browses_searches_and_shows_history(
    client: Client, console_rw: ConsoleProcess, driver: Any, root: Path
) -> None:
    from selenium.webdriver.common.by import By

    for i in range(300):
        client.put(f"app/a/{i:04d}", f"v{i}")
    client.put("app/b/x", "plain text")
    for n in range(3):
        client.put("app/c", json.dumps({"replicas": n, "name": "orders"}))
    driver.get(console_rw.url + "/keys?prefix=app/")
    wait_until(
        lambda: (
            [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#entries li")]
            == ["a/", "b/", "c"]
        ),
        20,
        "the three children of app/",
    )
    driver.find_element(By.CSS_SELECTOR, "#entries li[data-key='app/c']").click()
    wait_until(lambda: '"replicas": 2' in _text(driver, "#vbody"), 20, "the JSON view")
    wait_until(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#history tbody tr")) == 3,
        20,
        "three versions in the history",
    )
    screenshot(driver, root / SHOTS, "keys")
    # a directory of 300 keys pages 100 at a time
    driver.find_element(By.CSS_SELECTOR, "#entries li[data-key='app/a/']").click()
    wait_until(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#entries li")) == 100, 20, "a page"
    )
    driver.find_element(By.ID, "more").click()
    wait_until(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#entries li")) == 200, 20, "2 pages"
    )
    # search by value
    driver.find_element(By.ID, "up").click()
    wait_until(lambda: _text(driver, "#prefix") == "app/", 20, "back at app/")
    driver.find_element(By.ID, "q").send_keys("plain")
    driver.find_element(By.CSS_SELECTOR, "#by option[value='value']").click()
    driver.find_element(By.CSS_SELECTOR, "#search button").click()
    wait_until(
        lambda: (
            [
                e.get_attribute("data-key")
                for e in driver.find_elements(By.CSS_SELECTOR, "#entries li")
            ]
            == ["app/b/x"]
        ),
        20,
        "the search's one match",
    )
    screenshot(driver, root / SHOTS, "keys-search")
    assert browser_errors(driver) == []


def test_a_value_edited_in_the_console_is_what_etcdctl_gets(
    cluster: Cluster, client: Client, console_rw: ConsoleProcess, driver: Any
) -> None:
    from selenium.webdriver.common.by import By

    client.put("app/edit", "before")
    _open_key(driver, console_rw, "app/edit", "before")
    box = driver.find_element(By.ID, "newvalue")
    box.clear()
    box.send_keys("after, from the browser")
    driver.find_element(By.ID, "save").click()
    alert = wait_until(lambda: driver.switch_to.alert, 10, "the confirmation")
    assert "app/edit" in alert.text  # it names what it changes
    alert.accept()
    wait_until(lambda: "saved app/edit" in _text(driver, "#message"), 20, "saved")
    got = etcdctl(cluster.endpoints[0], "get", "app/edit", "--print-value-only")
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "after, from the browser"
    # dismissing the confirmation changes nothing
    box = driver.find_element(By.ID, "newvalue")
    box.clear()
    box.send_keys("never")
    driver.find_element(By.ID, "save").click()
    wait_until(lambda: driver.switch_to.alert, 10, "the confirmation").dismiss()
    assert client.get("app/edit").kvs[0].value == b"after, from the browser"
    assert browser_errors(driver) == []


def test_a_read_only_console_changes_nothing(
    cluster: Cluster, client: Client, console_ro: ConsoleProcess, driver: Any
) -> None:
    from selenium.webdriver.common.by import By

    client.put("app/ro", "kept")
    _open_key(driver, console_ro, "app/ro", "kept")
    assert not driver.find_element(By.ID, "editor").is_displayed()
    assert _text(driver, "#mode") == "read-only"
    # a write sent anyway (as a page of an older console would) is refused
    status, body = console_ro.request(
        "/api/keys/put", {"key": "app/ro", "value": "changed", "confirm": "app/ro"}
    )
    assert status == 403 and "read-only" in body["error"]
    status, body = console_ro.request("/api/keys/delete", {"key": "app/ro", "confirm": "app/ro"})
    assert status == 403
    got = etcdctl(cluster.endpoints[0], "get", "app/ro", "--print-value-only")
    assert got.stdout.strip() == "kept"
    # bad input gets a clear message, never a traceback
    for path in (
        "/api/keys/value",
        "/api/keys/list?limit=x",
        "/api/keys/list?cursor=zz",
        "/api/keys/search?prefix=app/&q=",
        "/api/cluster?cluster=nope",
        "/api/keys/value?key=app/ro&revision=-1",
    ):
        status, body = console_ro.get(path)
        assert 400 <= status < 500, (path, status, body)
        assert body["error"] and "Traceback" not in body["error"], path
    assert "Traceback" not in console_ro.log()
    assert browser_errors(driver) == []


def _tail_rows(driver: Any) -> list[list[str]]:
    return table(driver, "#tailrows")


def test_the_keys_page_tails_a_prefix_live(
    cluster: Cluster, client: Client, console_rw: ConsoleProcess, driver: Any, root: Path
) -> None:
    from selenium.webdriver.common.by import By

    client.put("tail/before", "written before the tail")
    driver.get(console_rw.url + "/keys?prefix=tail/")
    wait_until(lambda: driver.find_elements(By.CSS_SELECTOR, "#entries li"), 20, "the listing")
    driver.find_element(By.ID, "tail").click()
    wait_until(lambda: _text(driver, "#tailstate").startswith("of tail/ from"), 20, "the tail")
    tail_id = driver.find_element(By.ID, "tail").get_attribute("data-tail")
    a = client.put("tail/a", "from the client").revision
    put = etcdctl(cluster.endpoints[1], "put", "tail/b", "from etcdctl")
    assert put.returncode == 0, put.stderr
    b = client.get("tail/b").kvs[0].mod_revision
    gone = client.delete("tail/a").revision
    client.put("elsewhere/x", "not under the prefix")
    want = [
        [str(gone), "DELETE", "tail/a", ""],
        [str(b), "PUT", "tail/b", "from etcdctl"],
        [str(a), "PUT", "tail/a", "from the client"],
    ]
    wait_until(lambda: _tail_rows(driver) == want, 20, lambda: f"the tail: {_tail_rows(driver)}")
    screenshot(driver, root / SHOTS, "keys-tail")
    status, body = console_rw.get(f"/api/keys/tail?id={tail_id}&after=0")
    assert status == 200 and body["open"] == 1 and body["next"] == 3
    # the tail ends when the page goes
    driver.get(console_rw.url + "/")
    wait_until(
        lambda: console_rw.get(f"/api/keys/tail?id={tail_id}")[0] == 404, 30, "the tail closed"
    )
    # at most 16 open: one more is refused with a clear message
    opened = []
    for _ in range(16):
        status, body = console_rw.request("/api/keys/tail/open?prefix=tail/", {})
        assert status == 200, body
        opened.append(body["id"])
    status, body = console_rw.request("/api/keys/tail/open?prefix=tail/", {})
    assert status == 400 and "16 live tails are open already" in body["error"]
    for tail in opened:
        assert console_rw.request(f"/api/keys/tail/close?id={tail}", {}) == (200, {"closed": True})
    assert browser_errors(driver) == []


def test_the_cluster_page_keeps_working_while_the_leader_is_killed(
    cluster: Cluster, console_rw: ConsoleProcess, driver: Any, root: Path
) -> None:
    driver.get(console_rw.url + "/")
    wait_until(lambda: _text(driver, "#leader") not in ("", "(none)"), 20, "a leader")
    old = cluster.leader()
    old_name = _text(driver, "#leader")
    cluster.kill(old)
    wait_until(
        lambda: (
            _text(driver, "#leader") not in ("", "(none)", old_name)
            and "down" in _rows(driver)[old_name][3]
        ),
        30,
        "a new leader on the page and the old one down",
    )
    screenshot(driver, root / SHOTS, "cluster-leader-killed")
    assert browser_errors(driver) == []
    cluster.start(old)
    cluster.wait_ready(30)


@pytest.mark.integration
def test_a_console_without_a_cluster_says_so(tmp_path: Path, driver: Any) -> None:
    from tests.harness import free_ports

    nowhere = f"127.0.0.1:{free_ports(1)[0]}"
    c = ConsoleProcess(tmp_path, [nowhere])
    try:
        driver.get(c.url + "/")
        wait_until(lambda: "unreachable" in _text(driver, "#message"), 20, "the banner")
        screenshot(driver, tmp_path / SHOTS, "unreachable")
        assert [line for line in c.log().splitlines() if "unreachable" in line].__len__() == 1
        assert browser_errors(driver) == []
    finally:
        c.stop()
