"""A live move from a real etcd 3.4 into metaledger with ``etcdctl make-mirror``.

``etcdctl make-mirror`` (started here, stopped by its PID) copies every key of a real etcd
into a metaledger node, then follows etcd's watch: keys written, overwritten and deleted in
etcd while it runs arrive too, until metaledger holds what etcd holds (values; the
revisions are metaledger's own, as make-mirror writes each key anew: a snapshot seed,
``metaledger snapshot restore --from-etcd``, keeps etcd's).
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.etcd_harness import ETCDCTL, EtcdServer, etcdctl
from tests.harness import Cluster, wait_until

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        shutil.which("etcd") is None or shutil.which("etcdctl") is None,
        reason="etcd 3.4 and etcdctl are not installed",
    ),
]


def _ok(endpoint: str, *args: str) -> str:
    done = etcdctl(endpoint, *args)
    assert done.returncode == 0, f"etcdctl {' '.join(args)}: {done.stderr}"
    return done.stdout


def _values(endpoint: str) -> dict[bytes, bytes]:
    doc: dict[str, Any] = json.loads(_ok(endpoint, "get", "", "--prefix", "-w", "json"))
    return {
        base64.b64decode(kv["key"]): base64.b64decode(kv.get("value", ""))
        for kv in doc.get("kvs", ())
    }


def test_make_mirror_moves_a_live_etcd_into_metaledger(tmp_path: Path) -> None:
    node = Cluster(tmp_path / "ml", n=1)
    mirror: subprocess.Popen[str] | None = None
    try:
        node.wait_ready(20)
        ml = node.endpoints[0]
        with EtcdServer(tmp_path / "etcd") as etcd:
            etcd.wait_ready()
            ep = etcd.endpoint
            for i in range(20):
                _ok(ep, "put", f"app/{i:02d}", f"v{i}")
            env = {k: v for k, v in os.environ.items() if not k.startswith("ETCDCTL_")}
            env["ETCDCTL_API"] = "3"
            mirror = subprocess.Popen(
                [ETCDCTL, f"--endpoints={ep}", "make-mirror", ml],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
            )
            wait_until(lambda: len(_values(ml)) == 20, 30, "make-mirror copied the first 20 keys")
            # while it runs: new keys, overwrites and deletes follow
            for i in range(20, 30):
                _ok(ep, "put", f"app/{i:02d}", f"v{i}")
            _ok(ep, "put", "app/00", "changed")
            _ok(ep, "del", "app/01")
            _ok(ep, "del", "app/1", "--prefix")
            want = _values(ep)
            wait_until(lambda: _values(ml) == want, 30, "metaledger holds what etcd holds")
    finally:
        if mirror is not None:
            mirror.terminate()
            try:
                mirror.wait(timeout=10)
            except subprocess.TimeoutExpired:
                mirror.kill()
                mirror.wait(timeout=10)
        node.close()
    assert want[b"app/00"] == b"changed" and b"app/01" not in want and b"app/15" not in want
    assert len(want) == 30 - 1 - 10
