"""nameserver.client stands alone: importing it loads no server module and changes nothing in
the process; server processes still set gRPC core's environment before grpc is imported.

Each check runs in a fresh interpreter (a subprocess), so what this pytest process already
imported does not count.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nameserver.grpc.env import SERVER_GRPC_ENV

ROOT = Path(__file__).resolve().parents[4]  # the checkout (parents[3] is tests/)

#: what ``import nameserver.client`` may load of this project
ALLOWED = ("nameserver", "nameserver.client", "nameserver.remoting", "rmq.codec")

#: every name users imported from nameserver.client before it became a package
PUBLIC_NAMES = [
    "CLIENT_ID_METADATA", "SEQ_METADATA", "Aborted", "AlreadyExists", "Bytesish", "Cancelled",
    "Client", "ClientError", "Compare", "CompareOp", "CompareTarget", "Comparison", "DataLoss",
    "DeadlineExceeded", "DeleteResult", "FailedPrecondition", "Internal", "InvalidArgument",
    "KeyValue", "LeaderTransfer", "Member", "NodeStatus", "NotFound", "Op", "OutOfRange",
    "PermissionDenied", "PutResult", "RangeResult", "ResourceExhausted", "SortOrder",
    "SortTarget", "TxnResult", "Unauthenticated", "Unavailable", "Unimplemented", "UnknownError",
    "error_from_rpc", "normalize_peer_url", "prefix_range_end", "to_bytes",
]  # fmt: skip

#: every method Client had before it became a package
CLIENT_METHODS = [
    "close", "put", "get", "delete", "txn", "members", "member_add", "member_remove",
    "move_leader", "status", "status_all", "snapshot", "watch", "offsets_commit",
    "offsets_fetch", "offsets_list", "offsets_reset", "quota_set", "quota_list",
    "replica_register", "replica_heartbeat", "replica_alter_isr", "replica_elect",
    "replica_group", "replica_groups", "replica_set_policy", "route_get", "route_cluster_info",
    "route_topics", "route_topic_create", "route_topic_delete", "broker_unregister",
    "broker_heartbeat", "kvconfig_put", "kvconfig_get", "kvconfig_delete", "kvconfig_list",
    "lease_grant", "lease_revoke", "lease_time_to_live", "lease_leases",
    "lease_keep_alive_once", "keep_alive", "lock", "election",
]  # fmt: skip


def _run(code: str, env: dict[str, str] | None = None) -> Any:
    """Run ``code`` in a fresh interpreter (project root on sys.path, gRPC's variables
    unset unless ``env`` sets them); it prints one JSON value, returned."""
    base = {k: v for k, v in os.environ.items() if k not in SERVER_GRPC_ENV}
    base["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **(env or {})},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


_IMPORT_CLIENT = """
import json, os, sys
before = dict(os.environ)
import nameserver.client
from nameserver.client import *
import nameserver.client.cluster, nameserver.client.errors, nameserver.client.kv
import nameserver.client.leases, nameserver.client.locks, nameserver.client.offsets
import nameserver.client.replica_groups, nameserver.client.routing
import nameserver.client.transport, nameserver.client.watch
after = dict(os.environ)
print(json.dumps({
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                      ("nameserver", "raftlog", "snapshots", "broker", "replicator")),
    "changed": sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k)),
}))
"""


def test_importing_the_client_loads_no_server_module_and_changes_no_environment() -> None:
    got = _run(_IMPORT_CLIENT)
    stray = [
        m for m in got["modules"] if m not in ALLOWED and not m.startswith("nameserver.client.")
    ]
    assert stray == [], f"importing nameserver.client loaded {stray}"
    assert got["changed"] == [], f"importing nameserver.client changed {got['changed']}"


def test_every_public_name_and_method_is_still_there() -> None:
    import nameserver.client as client

    assert [n for n in PUBLIC_NAMES if not hasattr(client, n)] == []
    assert set(PUBLIC_NAMES) <= set(client.__all__)
    assert [m for m in CLIENT_METHODS if not callable(getattr(client.Client, m, None))] == []


# Records gRPC's variables at the moment `grpc` is first imported, then runs the entry point.
_SPY = """
import json, os, runpy, sys
NAMES = {names!r}
seen = {{}}
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "grpc" and not seen:
            seen.update({{n: os.environ.get(n) for n in NAMES}})
        return None
sys.meta_path.insert(0, Spy())
{entry}
print(json.dumps(seen))
"""

_ENTRIES = {
    # `metaledger serve` / `python -m nameserver.cli serve` (and `cluster up`'s nodes)
    "serve CLI": """
sys.argv = ["metaledger", "serve", "--help"]
try:
    runpy.run_module("nameserver.cli", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
""",
    # a program that runs a node through nameserver.server.run (tests/harness.py's fallback)
    "nameserver.server": "import nameserver.server",
}


@pytest.mark.parametrize("entry", sorted(_ENTRIES))
def test_a_server_process_sets_grpc_environment_before_importing_grpc(entry: str) -> None:
    code = _SPY.format(names=sorted(SERVER_GRPC_ENV), entry=_ENTRIES[entry])
    assert _run(code) == SERVER_GRPC_ENV


def test_the_environment_wins_over_the_server_defaults() -> None:
    code = _SPY.format(names=sorted(SERVER_GRPC_ENV), entry=_ENTRIES["serve CLI"])
    mine = {"GRPC_ENABLE_FORK_SUPPORT": "1", "GRPC_EXPERIMENTS": "-pollset_alternative"}
    assert _run(code, env=mine) == mine
