"""A lock holder in a process of its own, so a test can freeze it (SIGSTOP) past its TTL.

    python -m tests.cluster.lock_holder ENDPOINTS NAME TTL_S

Takes the lock with ``Client.lock`` (lease kept alive in the background) and prints one JSON
line ``{"key", "token", "lease"}``. Then, per line on stdin ``write KEY VALUE``, it makes the
guarded write ``txn([held.is_owner()], success=[put KEY VALUE])`` and prints
``{"succeeded", "lost", "error"}``, where ``lost`` is whether its keeper found the lease gone
(it waits up to ``TTL_S`` seconds for that verdict after a failed write); per line
``commit JOB PARTITION POSITION`` it commits that replicator offset fenced by its lease and
lock token and prints ``{"committed", "error"}``. EOF ends it.
"""

from __future__ import annotations

import json
import sys

from nameserver.client import Client, ClientError, Op


def main(endpoints: str, name: str, ttl_s: int) -> int:
    with Client(endpoints.split(","), timeout_s=5.0) as client, client.lock(name, ttl_s) as held:
        hello = {"key": held.key.decode(), "token": held.token, "lease": held.lease_id}
        print(json.dumps(hello), flush=True)
        for line in sys.stdin:
            if line.startswith("commit "):
                _, job, partition, position = line.split()
                try:
                    client.offsets_commit(
                        job,
                        partition,
                        position.encode(),
                        lease_id=held.lease_id,
                        fencing_token=held.token,
                        position=int(position),
                    )
                    print(json.dumps({"committed": True, "error": ""}), flush=True)
                except ClientError as exc:
                    error = f"{type(exc).__name__}: {exc}"
                    print(json.dumps({"committed": False, "error": error}), flush=True)
                continue
            _, key, value = line.split()
            result = client.txn([held.is_owner()], success=[Op.put(key, value)])
            if not result.succeeded:
                held.lost.wait(ttl_s)
            answer = {
                "succeeded": result.succeeded,
                "lost": held.lost.is_set(),
                "error": held.keeper.error,
            }
            print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
