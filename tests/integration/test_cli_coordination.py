"""``metaledger lease …``, ``metaledger lock`` and ``metaledger elect`` against a real 3-node
cluster: the happy paths, exit codes and etcdctl-like output, and bad input (unknown or expired
leases, TTL 0 or negative, an unparsable lease ID, elect without a proposal)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from nameserver.cli.exitcodes import ExitCode
from nameserver.client import Client, DeadlineExceeded
from tests.harness import Cluster, wait_until

pytestmark = pytest.mark.integration

WORKTREE = Path(__file__).resolve().parents[2]


def _cmd(c: Cluster, args: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    env = {**os.environ, "PYTHONPATH": str(WORKTREE), "METALEDGER_ENDPOINTS": ",".join(c.endpoints)}
    return [sys.executable, "-m", "nameserver.cli", *args], env


def ml(c: Cluster, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    cmd, env = _cmd(c, args)
    return subprocess.run(
        cmd, cwd=WORKTREE, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@contextmanager
def ml_background(c: Cluster, *args: str) -> Iterator[subprocess.Popen[str]]:
    """A running ``metaledger`` command; SIGKILLed if the test left it running."""
    cmd, env = _cmd(c, args)
    proc = subprocess.Popen(
        cmd, cwd=WORKTREE, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    return proc.wait(20)


def grant(c: Cluster, ttl_s: int) -> int:
    out = ml(c, "lease", "grant", str(ttl_s))
    m = re.fullmatch(
        rf"lease ([0-9a-f]+) granted with TTL\({ttl_s}s\), fencing token (\d+)\n", out.stdout
    )
    assert out.returncode == 0 and m, out
    return int(m.group(1), 16)


def test_lease_commands(module_cluster: Cluster) -> None:
    c = module_cluster
    lease = grant(c, 30)
    with Client(c.endpoints) as client:
        client.put("cli-lease/k", "v", lease=lease)
    ttl = ml(c, "lease", "ttl", f"{lease:x}", "--keys")
    assert ttl.returncode == 0
    assert re.fullmatch(
        rf"lease {lease:x} granted with TTL\(30s\), remaining\((\d+)s\), "
        r"attached keys\(\[cli-lease/k\]\)\n",
        ttl.stdout,
    ), ttl.stdout
    doc = json.loads(ml(c, "lease", "ttl", f"{lease:x}", "-w", "json").stdout)
    assert doc["id"] == f"{lease:x}" and doc["granted_ttl"] == 30 and 0 < doc["ttl"] <= 30
    once = ml(c, "lease", "keep-alive", "--once", f"{lease:x}")
    assert once.stdout == f"lease {lease:x} keepalived with TTL(30)\n", once
    listed = ml(c, "lease", "list", "-w", "json")
    assert f"{lease:x}" in json.loads(listed.stdout)["leases"]
    assert f"{lease:x}\n" in ml(c, "lease", "list").stdout
    revoked = ml(c, "lease", "revoke", f"{lease:x}")
    assert revoked.returncode == 0 and revoked.stdout == f"lease {lease:x} revoked\n"
    with Client(c.endpoints) as client:
        assert client.get("cli-lease/k").kvs == []


def test_lease_bad_input(module_cluster: Cluster) -> None:
    c = module_cluster
    for ttl in ("0", "-5", "ten"):
        bad = ml(c, "lease", "grant", ttl)
        assert bad.returncode == ExitCode.USAGE, bad
        assert "argument TTL" in bad.stderr, bad.stderr
    bad_id = ml(c, "lease", "revoke", "xyz")
    assert bad_id.returncode == ExitCode.USAGE and "not a hexadecimal lease ID" in bad_id.stderr
    for action in (("revoke",), ("keep-alive", "--once"), ("keep-alive",)):
        unknown = ml(c, "lease", *action, "1234abcd")
        assert unknown.returncode == ExitCode.NOT_FOUND, (action, unknown)
        assert "requested lease not found" in unknown.stderr, unknown.stderr
    ttl = ml(c, "lease", "ttl", "1234abcd")
    assert ttl.returncode == ExitCode.NOT_FOUND and "already expired" in ttl.stdout


def test_keep_alive_on_an_expired_lease_is_not_found(module_cluster: Cluster) -> None:
    c = module_cluster
    lease = grant(c, 1)
    wait_until(
        lambda: ml(c, "lease", "ttl", f"{lease:x}").returncode == ExitCode.NOT_FOUND,
        20,
        "the lease expires",
        0.2,
    )
    expired = ml(c, "lease", "keep-alive", "--once", f"{lease:x}")
    assert expired.returncode == ExitCode.NOT_FOUND
    assert f"lease {lease:x} expired or was revoked" in expired.stderr, expired.stderr


def test_keep_alive_keeps_a_lease_past_its_ttl_until_ctrl_c(module_cluster: Cluster) -> None:
    c = module_cluster
    lease = grant(c, 2)
    with ml_background(c, "lease", "keep-alive", f"{lease:x}") as proc, Client(c.endpoints) as cl:
        assert proc.stdout is not None
        for _ in range(8):  # one renewal every TTL/3: 8 take over 4 s, twice the TTL
            assert proc.stdout.readline() == f"lease {lease:x} keepalived with TTL(2)\n"
        assert cl.lease_time_to_live(lease).exists
        assert stop(proc) == ExitCode.OK
        cl.lease_revoke(lease)


def test_lock_runs_a_command_holding_the_lock(module_cluster: Cluster, tmp_path: Path) -> None:
    c = module_cluster
    out = tmp_path / "env"
    script = f'echo "$METALEDGER_LOCK_KEY $METALEDGER_LOCK_TOKEN" > "{out}"; exit 3'
    done = ml(c, "lock", "cli-lock/a", "--ttl", "5", "--", "sh", "-c", script)
    assert done.returncode == 3, done  # the command's own status
    key, token = out.read_text().split()
    assert re.fullmatch(r"cli-lock/a/[0-9a-f]+", key)
    with Client(c.endpoints) as client:
        assert client.get("cli-lock/a/", prefix=True).kvs == []  # released
        with client.lock("cli-lock/a", ttl_s=5, timeout_s=10) as held:
            assert held.token > int(token)  # tokens grow from one holder to the next


def test_lock_without_a_command_holds_until_ctrl_c(module_cluster: Cluster) -> None:
    c = module_cluster
    with ml_background(c, "lock", "cli-lock/b", "--ttl", "3") as proc, Client(c.endpoints) as cl:
        assert proc.stdout is not None
        key = proc.stdout.readline().strip()
        token = int(proc.stdout.readline().removeprefix("fencing token "))
        kv = cl.get(key).kvs[0]
        assert kv.create_revision == token
        with pytest.raises(DeadlineExceeded):  # held past its 3 s TTL: kept alive
            with cl.lock("cli-lock/b", ttl_s=3, timeout_s=5):
                pass
        assert stop(proc) == ExitCode.OK
        assert cl.get("cli-lock/b/", prefix=True).kvs == []
    bad = ml(c, "lock", "cli-lock/c", "--ttl", "0")
    assert bad.returncode == ExitCode.USAGE and "argument --ttl" in bad.stderr
    missing = ml(c, "lock", "cli-lock/c", "--", "/nonexistent/command")
    assert missing.returncode == ExitCode.ERROR and "cannot run" in missing.stderr


def test_elect_and_listen(module_cluster: Cluster) -> None:
    c = module_cluster
    with ml_background(c, "elect", "--listen", "cli-elect/a") as listener:
        assert listener.stdout is not None
        with ml_background(c, "elect", "cli-elect/a", "first", "--ttl", "3") as one:
            assert one.stdout is not None
            key = one.stdout.readline().strip()
            assert one.stdout.readline() == "first\n"
            assert listener.stdout.readline().strip() == key
            assert listener.stdout.readline() == "first\n"
            with ml_background(c, "elect", "cli-elect/a", "second") as two:
                assert two.stdout is not None
                assert stop(one) == ExitCode.OK  # resigns: the second campaigner leads
                key2 = two.stdout.readline().strip()
                assert key2 != key and two.stdout.readline() == "second\n"
                assert listener.stdout.readline().strip() == key2
                assert listener.stdout.readline() == "second\n"
                assert stop(two) == ExitCode.OK
        assert stop(listener) == ExitCode.OK
    for args in (("cli-elect/b",), ("--listen", "cli-elect/b", "proposal")):
        bad = ml(c, "elect", *args)
        assert bad.returncode == ExitCode.USAGE and "proposal" in bad.stderr, bad
