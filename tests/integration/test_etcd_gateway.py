"""etcd's JSON gateway side by side with a real etcd 3.4: the ``curl`` examples of etcd's
``Documentation/dev-guide/api_grpc_gateway.md`` (put, range, range with a prefix, watch,
txn, auth enable + authenticate + a request with the token, refused requests) and the
lease calls, run with the real ``curl`` against etcd's client port and metaledger's HTTP
port (``--listen-metrics``, where metaledger serves the gateway), answering the same JSON.

Normalised before comparing: ``cluster_id``, ``member_id`` and ``raft_term`` (each
cluster's own), the token (random) and a lease's remaining TTL. Revisions are compared as they
are: metaledger counts them as etcd does (lease and auth writes keep the store revision; an
empty store is at revision 1).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.etcd_harness import EtcdServer
from tests.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("etcd") is None or shutil.which("curl") is None,
        reason="etcd 3.4 and curl are not installed",
    ),
]

CURL = shutil.which("curl") or "/usr/bin/curl"
#: the documented calls, in order: (path, body)
KV: list[tuple[str, str]] = [
    ("/v3/kv/put", '{"key": "Zm9v", "value": "YmFy"}'),
    ("/v3/kv/range", '{"key": "Zm9v"}'),
    ("/v3/kv/range", '{"key": "Zm9v", "range_end": "Zm9w"}'),
    (
        "/v3/kv/txn",
        '{"compare":[{"target":"CREATE","key":"Zm9v","createRevision":"2"}],'
        '"success":[{"requestPut":{"key":"Zm9v","value":"YmFy"}}]}',
    ),
    ("/v3/kv/range", '{"key": "Zm9v", "keys_only": true}'),
    ("/v3/kv/deleterange", '{"key": "Zm9v", "prev_kv": true}'),
    ("/v3/kv/range", '{"key": "@@"}'),  # refused: not base64
    ("/v3/kv/range", "[]"),  # refused: not an object
]
LEASE_AND_AUTH: list[tuple[str, str]] = [
    ("/v3/lease/grant", '{"TTL": 30, "ID": 4242}'),
    ("/v3/lease/timetolive", '{"ID": 4242, "keys": true}'),
    ("/v3/lease/leases", "{}"),
    ("/v3/lease/keepalive", '{"ID": 4242}'),
    ("/v3/lease/revoke", '{"ID": 4242}'),
    ("/v3/lease/revoke", '{"ID": 4242}'),  # refused: not found
    ("/v3/kv/lease/timetolive", '{"ID": 4242}'),
    ("/v3/auth/user/add", '{"name": "root", "password": "pass"}'),
    ("/v3/auth/role/add", '{"name": "root"}'),
    ("/v3/auth/user/grant", '{"user": "root", "role": "root"}'),
    ("/v3/auth/enable", "{}"),
]
AFTER_AUTH: list[tuple[str, str]] = [
    ("/v3/kv/put", '{"key": "Zm9v", "value": "YmFy"}'),  # refused: no token
    ("/v3/auth/authenticate", '{"name": "root", "password": "bad"}'),  # refused
]
WITH_TOKEN: list[tuple[str, str]] = [
    ("/v3/kv/put", '{"key": "Zm9v", "value": "YmFy"}'),
    ("/v3/kv/range", '{"key": "Zm9v"}'),
    ("/v3/auth/user/list", "{}"),
    ("/v3/auth/disable", "{}"),
]


def curl(url: str, body: str, *flags: str) -> tuple[int, Any]:
    """(HTTP status, parsed JSON answer; for a stream, its lines) of ``curl -X POST``."""
    done = subprocess.run(
        [CURL, "-s", "-X", "POST", "-w", "\n%{http_code}", *flags, url, "-d", body],
        capture_output=True,
        text=True,
        timeout=30,
    )
    text, _, status = done.stdout.rpartition("\n")
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    return int(status), lines[0] if len(lines) == 1 else lines


def normalise(value: Any) -> Any:
    if isinstance(value, list | tuple):
        return type(value)(normalise(v) for v in value)
    if not isinstance(value, dict):
        return value
    out = {}
    for k, v in value.items():
        if k in ("cluster_id", "member_id", "raft_term", "token"):
            v = f"<{k}>"
        elif k == "TTL" and isinstance(v, str) and 0 < int(v) <= 30:
            v = "<ttl>"
        out[k] = normalise(v)
    return out


def run_sequence(base: str) -> list[Any]:
    answers: list[Any] = []
    for path, body in KV:
        answers.append((path, curl(base + path, body)))
    answers.append(("watch", watch_sequence(base)))
    for path, body in LEASE_AND_AUTH:
        answers.append((path, curl(base + path, body)))
    for path, body in AFTER_AUTH:
        answers.append((path, curl(base + path, body)))
    _, auth = curl(base + "/v3/auth/authenticate", '{"name": "root", "password": "pass"}')
    answers.append(("authenticate", normalise(auth)))
    for path, body in WITH_TOKEN:
        answers.append((path, curl(base + path, body, "-H", f"Authorization: {auth['token']}")))
    return [(path, normalise(answer)) for path, answer in answers]


class CurlWatch:
    """``curl -N POST /v3/watch`` in the background; its lines read as they come (a read
    waits at most for curl's own ``--max-time``)."""

    def __init__(self, url: str, body: str) -> None:
        self.proc = subprocess.Popen(
            [CURL, "-s", "-N", "--max-time", "30", "-X", "POST", url, "-d", body],
            stdout=subprocess.PIPE,
            text=True,
        )

    def next(self) -> Any:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        assert line, f"the watch ended (curl exited {self.proc.poll()})"
        return json.loads(line)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def watch_sequence(base: str) -> list[Any]:
    watch = CurlWatch(base + "/v3/watch", '{"create_request": {"key":"Zm9v"} }')
    try:
        seen = [watch.next()]  # created
        curl(base + "/v3/kv/put", '{"key": "Zm9v", "value": "YmFy"}')
        seen.append(watch.next())
        curl(base + "/v3/kv/deleterange", '{"key": "Zm9v"}')
        seen.append(watch.next())
    finally:
        watch.stop()
    return list(normalise(seen))


def test_the_documented_curl_calls_answer_as_etcd_does(tmp_path: Path) -> None:
    with EtcdServer(tmp_path / "etcd") as etcd, Cluster(tmp_path / "ml", n=1) as ml:
        ml.wait_ready(30)  # ... and its store counts revisions etcd's way
        ours = f"http://127.0.0.1:{ml.nodes[0].metrics_port}"
        # the node's member record applied
        wait_until(
            lambda: "clientURLs" in json.dumps(curl(ours + "/v3/cluster/member/list", "{}")),
            15,
            "the member record is not applied",
        )
        ours = f"http://127.0.0.1:{ml.nodes[0].metrics_port}"
        expected = run_sequence(etcd.endpoint)
        got = run_sequence(ours)
        for want, have in zip(expected, got, strict=True):
            assert have == want
        watch = dict(expected)["watch"]
        assert watch[1]["result"]["events"][0]["kv"]["value"] == "YmFy"
        assert watch[2]["result"]["events"][0]["type"] == "DELETE"
