"""What each replicator job is doing, readable by anyone: ``metaledger replicate status``.

The active worker of a job publishes a small JSON document every second under
``/replicators/<kind>/<job>/status`` in metaledger's KV, attached to its election lease (so
it vanishes with the worker) and guarded by its leader key (so a worker that lost the job
cannot overwrite its successor's). The status command reads the prefix; it needs no
connection to the worker itself. The checkpoint is not here: it is the fenced ``Offsets``
record, read from there.
"""

from __future__ import annotations

import json
import time
from typing import Any

from nameserver.client import Client, Op
from replicator.lease import Fence

__all__ = ["PREFIX", "StatusPublisher", "read_statuses", "status_key"]

PREFIX = "/replicators/"


def status_key(kind: str, job: str) -> str:
    return f"{PREFIX}{kind}/{job}/status"


class StatusPublisher:
    def __init__(self, client: Client, kind: str, job: str) -> None:
        self.client = client
        self.kind = kind
        self.job = job
        self.key = status_key(kind, job)

    def publish(self, fence: Fence, status: dict[str, Any]) -> bool:
        """Put the status (with ``kind``, ``job`` and the time) if ``fence`` still owns the
        job; False when it does not (nothing written)."""
        doc = {"kind": self.kind, "job": self.job, "updated": time.time(), **status}
        value = json.dumps(doc, separators=(",", ":"), sort_keys=True)
        r = self.client.txn(
            [fence.is_owner()], success=[Op.put(self.key, value, lease=fence.lease_id)]
        )
        return r.succeeded


def read_statuses(client: Client, kind: str = "", job: str = "") -> list[dict[str, Any]]:
    """Every published status (of ``kind``, of ``job``), ordered by kind and job."""
    prefix = PREFIX + (f"{kind}/" if kind else "")
    out = []
    for kv in client.get(prefix, prefix=True).kvs:
        if not kv.key.endswith(b"/status"):
            continue
        try:
            doc = json.loads(kv.value)
        except ValueError:
            continue
        if isinstance(doc, dict) and (not job or doc.get("job") == job):
            out.append(doc)
    return sorted(out, key=lambda d: (str(d.get("kind")), str(d.get("job"))))
