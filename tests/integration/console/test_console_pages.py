"""The console's Leases, locks and elections and Users and roles pages, and its logins, in a
real browser (headless Chromium through selenium) against a real 3-node cluster: TTLs, key
counts, holders, fencing tokens and leader values are what the client answers and TTLs count
down; users, roles and permissions are what etcdctl answers, a read-only console changes none
and a confirmed change on a read-write one is made; with auth on, a page without a login says
so, a login (kept in an HttpOnly cookie) makes every call run as that user, and what the user
may not do shows etcd's message. Every page loads without a console error. Screenshots go to
the test's tmp dir (and to $METALEDGER_CONSOLE_SCREENSHOTS, for docs/console.md).
"""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nameserver.client import Client, Permission, prefix_range_end
from nameserver.client.locks import acquire
from tests.console_harness import (  # noqa: F401  (the shared fixtures)
    BROWSER_MARKS,
    ConsoleProcess,
    browser_errors,
    screenshot,
    shared_blank_page,
    shared_client,
    shared_cluster,
    shared_driver,
)
from tests.console_harness import table as _table
from tests.console_harness import text as _text
from tests.etcd_harness import etcdctl_ok
from tests.harness import Cluster, wait_until

pytestmark = BROWSER_MARKS

SHOTS = "screenshots"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("console-pages")


@pytest.fixture(scope="module")
def console(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "console", cluster.endpoints)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def console_rw(root: Path, cluster: Cluster) -> Iterator[ConsoleProcess]:
    c = ConsoleProcess(root / "console-rw", cluster.endpoints, "--allow-writes")
    yield c
    c.stop()


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


def test_users_and_roles_are_what_etcdctl_answers(
    cluster: Cluster,
    client: Client,
    console: ConsoleProcess,
    console_rw: ConsoleProcess,
    driver: Any,
    root: Path,
) -> None:
    from selenium.webdriver.common.by import By

    at = cluster.endpoints[0]
    etcdctl_ok(at, "role", "add", "app-rw")
    etcdctl_ok(at, "role", "grant-permission", "app-rw", "readwrite", "app/", "--prefix")
    etcdctl_ok(at, "role", "grant-permission", "app-rw", "read", "cfg")
    etcdctl_ok(at, "user", "add", "alice:alice-pw")
    etcdctl_ok(at, "user", "grant-role", "alice", "app-rw")
    driver.get(console.url + "/users")
    wait_until(lambda: ["alice", "app-rw"] in _table(driver, "#users"), 20, "alice's row")
    assert "Roles: app-rw" in etcdctl_ok(at, "user", "get", "alice")
    assert _text(driver, "#authstate") == "disabled"
    rows = [r for r in _table(driver, "#roles") if r[0] in ("app-rw", "")]
    assert rows == [["app-rw", "READWRITE", "prefix app/", "app0"], ["", "READ", "cfg", ""]]
    assert client.role_get("app-rw") == [
        Permission("READWRITE", b"app/", prefix_range_end(b"app/")),
        Permission("READ", b"cfg", b""),
    ]
    # read-only: no form, and a change sent anyway is refused
    assert not driver.find_element(By.ID, "changer").is_displayed()
    status, body = console.request(
        "/api/users/change", {"action": "role_add", "name": "ops", "confirm": "ops"}
    )
    assert status == 403 and "read-only" in body["error"]
    assert "ops" not in client.role_list()
    screenshot(driver, root / SHOTS, "users")
    assert browser_errors(driver) == []
    # read-write: a change confirmed in the browser is made; a dismissed one is not
    driver.get(console_rw.url + "/users")
    wait_until(lambda: driver.find_element(By.ID, "changer").is_displayed(), 20, "the form")
    driver.find_element(By.CSS_SELECTOR, "#action option[value='role_add']").click()
    driver.find_element(By.ID, "cname").send_keys("ops")
    driver.find_element(By.ID, "apply").click()
    wait_until(lambda: driver.switch_to.alert, 10, "the confirmation").dismiss()
    assert "ops" not in client.role_list()
    driver.find_element(By.ID, "apply").click()
    alert = wait_until(lambda: driver.switch_to.alert, 10, "the confirmation")
    assert "add the role ops" in alert.text
    alert.accept()
    wait_until(lambda: any(r[0] == "ops" for r in _table(driver, "#roles")), 20, "the new role")
    assert "ops" in etcdctl_ok(at, "role", "list").split()
    assert browser_errors(driver) == []


def test_keys_diff_export_and_import(
    cluster: Cluster, client: Client, console_rw: ConsoleProcess, driver: Any, root: Path
) -> None:
    from selenium.webdriver.common.by import By

    client.put("tx/cfg", "replicas: 2\nname: orders\n")
    client.put("tx/cfg", "replicas: 3\nname: orders\n")
    client.put("tx/bin", b"\xff\x00")
    client.put("tx/plain", "text")
    driver.get(console_rw.url + "/keys?prefix=tx/")
    wait_until(
        lambda: driver.find_element(By.CSS_SELECTOR, "#entries li[data-key='tx/cfg']"), 20, "key"
    ).click()
    wait_until(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#history button.diffnow")) == 2,
        20,
        "two versions",
    )
    driver.find_elements(By.CSS_SELECTOR, "#history button.diffnow")[1].click()
    wait_until(lambda: "+replicas: 3" in _text(driver, "#diff"), 20, "the diff")
    assert "-replicas: 2" in _text(driver, "#diff")
    screenshot(driver, root / SHOTS, "keys-diff")
    # the export link is the endpoint's; its document is what etcdctl gets
    href = driver.find_element(By.ID, "export").get_attribute("href")
    assert href.endswith("/api/keys/export?prefix=tx%2F&cluster=default")
    status, doc = console_rw.get("/api/keys/export?prefix=tx/")
    assert status == 200
    want = {kv.key: kv.value for kv in client.get("tx/", prefix=True).kvs}
    got = {
        (kv["key"].encode() if "key" in kv else base64.b64decode(kv["key_b64"])): (
            kv["value"].encode() if "value" in kv else base64.b64decode(kv["value_b64"])
        )
        for kv in doc["kvs"]
    }
    assert got == want and len(got) == 3
    path = root / "export-tx.json"
    path.write_text(json.dumps(doc))
    # import it back after the prefix is deleted: dismissed changes nothing, accepted writes
    client.delete("tx/", prefix=True)
    driver.get(console_rw.url + "/keys?prefix=tx/")
    wait_until(lambda: driver.find_element(By.ID, "importer").is_displayed(), 20, "the importer")
    driver.find_element(By.ID, "importfile").send_keys(str(path))
    driver.find_element(By.ID, "import").click()
    wait_until(lambda: driver.switch_to.alert, 10, "the confirmation").dismiss()
    assert client.get("tx/", prefix=True, count_only=True).count == 0
    driver.find_element(By.ID, "import").click()
    alert = wait_until(lambda: driver.switch_to.alert, 10, "the confirmation")
    assert "Import 3 keys under tx/" in alert.text
    alert.accept()
    wait_until(lambda: "imported 3 keys" in _text(driver, "#message"), 20, "imported")
    assert {kv.key: kv.value for kv in client.get("tx/", prefix=True).kvs} == want
    got_cfg = etcdctl_ok(cluster.endpoints[0], "get", "tx/cfg", "--print-value-only")
    assert got_cfg == "replicas: 3\nname: orders\n\n"
    # a read-only console imports nothing
    status, body = console_rw.request("/api/keys/import", {"document": doc, "confirm": "x"})
    assert status == 400 and "must name the prefix" in body["error"]
    assert browser_errors(driver) == []


def test_with_auth_on_a_login_makes_every_call_run_as_that_user(
    cluster: Cluster, client: Client, console_rw: ConsoleProcess, driver: Any, root: Path
) -> None:
    from selenium.webdriver.common.by import By

    at = cluster.endpoints[0]
    client.put("app/visible", "to alice")
    client.put("other/hidden", "not to alice")
    etcdctl_ok(at, "user", "add", "root:root-pw")
    etcdctl_ok(at, "user", "grant-role", "root", "root")
    etcdctl_ok(at, "auth", "enable")
    try:
        driver.get(console_rw.url + "/keys?prefix=app/")
        wait_until(lambda: "auth is on: log in" in _text(driver, "#message"), 20, "the banner")
        screenshot(driver, root / SHOTS, "login")
        # a wrong password is refused with etcd's message
        driver.find_element(By.ID, "login-user").send_keys("alice")
        driver.find_element(By.ID, "login-password").send_keys("wrong")
        driver.find_element(By.CSS_SELECTOR, "#login button").click()
        wait_until(lambda: "authentication failed" in _text(driver, "#message"), 20, "refused")
        box = driver.find_element(By.ID, "login-password")
        box.clear()
        box.send_keys("alice-pw")
        driver.find_element(By.CSS_SELECTOR, "#login button").click()
        wait_until(lambda: _text(driver, "#auth").startswith("as alice"), 20, "logged in")
        wait_until(
            lambda: (
                "app/visible"
                in [
                    e.get_attribute("data-key")
                    for e in driver.find_elements(By.CSS_SELECTOR, "#entries li")
                ]
            ),
            20,
            "alice's keys",
        )
        cookie = next(c for c in driver.get_cookies() if c["name"] == "metaledger_console_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert "metaledger_console_session" not in driver.execute_script("return document.cookie")
        # what alice may not read: etcd's message, not a traceback
        driver.get(console_rw.url + "/keys?prefix=other/")
        wait_until(lambda: "permission denied" in _text(driver, "#message"), 20, "refused")
        driver.get(console_rw.url + "/users")
        wait_until(lambda: "permission denied" in _text(driver, "#message"), 20, "refused")
        assert "Traceback" not in _text(driver, "#message")
        browser_errors(driver)  # the refused calls' 403s are the page's own log lines
        driver.find_element(By.ID, "logout").click()
        wait_until(lambda: "auth is on: log in" in _text(driver, "#message"), 20, "logged out")
        assert "Traceback" not in console_rw.log()
    finally:
        etcdctl_ok(at, "auth", "disable", user="root:root-pw")
