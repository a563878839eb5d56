"""Which worker replicates which source queue: live members, rendezvous assignment, and a
fenced claim per queue.

Workers hold leases; queues are spread over the live workers of a job and moved when one
dies; a paused worker that lost its lease can neither send nor commit
(docs/rocketmq-replicator.md, "Workers, leases and queue claims"). Three pieces:

- :class:`Membership` joins the job: a lease kept alive by a background keeper and the key
  ``/replicators/rocketmq/<job>/workers/<worker>`` attached to it, so a dead worker leaves by
  itself within the TTL. :meth:`Membership.check` (before every send and commit) fails once
  the keeper lost the lease *or* the local deadline (last renewal sent + TTL) passed, like
  :meth:`replicator.lease.ActiveRole.check`: a worker paused past its TTL stops before it
  sends anything.
- :func:`assignment` spreads partitions (``topic/broker/queue``) over the live workers by
  rendezvous (highest random weight) hashing: every worker computes the same answer from the
  same member list, and when a worker leaves only its partitions move.
- :meth:`Membership.claim` makes ownership exclusive whatever the member lists say: a txn
  creates ``/replicators/rocketmq/<job>/claims/<partition>`` on the worker's lease only if
  it is absent. The claim key's create revision is the :class:`~replicator.lease.Fence` token
  of that partition's offset commits; the ``Offsets`` service accepts the create revision of a
  key attached to the commit's lease as its token, and refuses a token older than the one
  that last committed. A newer claim has a higher revision, so the worker that took a
  partition over commits after the old one, and the old one (lease gone: NOT_FOUND; claim
  gone: its token is no longer a key of its lease, FAILED_PRECONDITION) cannot.

The keys go away with the lease (revoked by :meth:`Membership.leave`, or expired), and with
them every claim of the worker.
"""

from __future__ import annotations

import contextlib
import hashlib

from nameserver.client import (
    Client,
    ClientError,
    Compare,
    KeepAlive,
    LeaseLost,
    NotFound,
    Op,
    RangeResult,
)
from replicator.lease import Fence, lease_deadline

__all__ = [
    "PREFIX",
    "Membership",
    "assignment",
    "claim_key",
    "workers_prefix",
]

PREFIX = "/replicators/rocketmq"


def workers_prefix(job: str) -> bytes:
    return f"{PREFIX}/{job}/workers/".encode()


def claim_key(job: str, partition: str) -> bytes:
    return f"{PREFIX}/{job}/claims/{partition}".encode()


def _weight(worker: str, partition: str) -> int:
    digest = hashlib.blake2b(f"{worker}\0{partition}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assignment(workers: list[str], partitions: list[str], me: str) -> list[str]:
    """The partitions ``me`` owns among ``workers`` (rendezvous hashing; in the order of
    ``partitions``): each partition goes to the worker with the highest weight
    ``blake2b(worker, partition)``, ties to the greater name. Pure and deterministic across
    processes; empty when ``me`` is not a member."""
    members = sorted(set(workers))
    if me not in members:
        return []
    return [p for p in partitions if max(members, key=lambda w: (_weight(w, p), w)) == me]


class Membership:
    """One worker of a job (see the module docstring). ``join()`` first; ``check()`` before
    every send and commit; ``claim()`` a partition before replicating it; ``leave()`` at the
    end (its claims go with its lease)."""

    def __init__(self, client: Client, job: str, worker: str, ttl_s: int = 10) -> None:
        if not job or not worker or "/" in worker:
            raise ValueError(f"job {job!r} and worker {worker!r}: non-empty, worker without '/'")
        self.client = client
        self.job = job
        self.worker = worker
        self.ttl_s = ttl_s
        self.key = workers_prefix(job) + worker.encode()
        self._keeper: KeepAlive | None = None
        self._claims: dict[str, Fence] = {}
        self._fence: Fence | None = None
        self.lost_reason: str | None = None

    # ----------------------------------------------------------------- membership

    def join(self) -> None:
        """Grant a lease, keep it alive, and put the worker key on it. A key of the same
        name left by an earlier process of this worker is taken over (attached to the new
        lease); claims settle who replicates what."""
        if self._keeper is not None:
            raise ValueError(f"worker {self.worker!r} already joined job {self.job!r}")
        self.lost_reason = None
        lease = self.client.lease_grant(self.ttl_s)
        try:
            keeper = self.client.keep_alive(lease.id, on_lost=self._lost).start()
        except BaseException:
            with contextlib.suppress(ClientError):
                self.client.lease_revoke(lease.id)
            raise
        try:
            self.client.put(self.key, self.worker, lease=lease.id)
        except BaseException:
            keeper.stop()
            with contextlib.suppress(ClientError):
                self.client.lease_revoke(lease.id)
            raise
        self._keeper = keeper
        got = self.client.get(self.key)
        revision = got.kvs[0].create_revision if got.kvs else 0
        self._fence = Fence(lease.id, revision, self.key)

    @property
    def fence(self) -> Fence:
        """The worker key's fence (guards what this worker publishes, e.g. its status)."""
        self.check()
        assert self._fence is not None
        return self._fence

    def _lost(self, why: str) -> None:
        self.lost_reason = why

    @property
    def lease_id(self) -> int:
        if self._keeper is None:
            raise LeaseLost(f"worker {self.worker!r} has not joined job {self.job!r}")
        return self._keeper.lease_id

    def check(self) -> None:
        """Raise LeaseLost unless this worker's lease is certainly alive."""
        self.expires_at()

    def expires_at(self) -> float:
        """``time.monotonic()`` from which :meth:`check` fails unless the lease is renewed
        (LeaseLost when it fails already): with it the claims may be gone, and a pass ends
        (:func:`replicator.lease.watch_lease`)."""
        where = f"worker {self.worker!r} of job {self.job!r}"
        if self._keeper is None:
            raise LeaseLost(f"{where}: not a member (join first)")
        return lease_deadline(self._keeper, where)

    @property
    def alive(self) -> bool:
        try:
            self.check()
        except LeaseLost:
            return False
        return True

    def workers(self) -> list[str]:
        """The live workers of the job (any member's view), sorted."""
        prefix = workers_prefix(self.job)
        got = self.client.get(prefix, prefix=True, keys_only=True)
        return sorted(kv.key[len(prefix) :].decode(errors="replace") for kv in got.kvs)

    def mine(self, partitions: list[str]) -> list[str]:
        """The partitions this worker should replicate now (:func:`assignment`)."""
        return assignment(self.workers(), partitions, self.worker)

    def leave(self) -> None:
        """Stop renewing and revoke the lease: the worker key and every claim go with it."""
        keeper, self._keeper = self._keeper, None
        self._claims.clear()
        if keeper is None:
            return
        keeper.stop()
        with contextlib.suppress(ClientError):  # expired already, or unreachable: it expires
            self.client.lease_revoke(keeper.lease_id)

    # ----------------------------------------------------------------- claims

    def claim(self, partition: str) -> Fence | None:
        """Claim ``partition`` on this worker's lease: its Fence (the claim key's create
        revision as the token), or None while another worker holds it. Claiming a partition
        this worker already holds returns the same Fence. LeaseLost when the lease is gone."""
        self.check()
        lease = self.lease_id
        key = claim_key(self.job, partition)
        try:
            r = self.client.txn(
                [Compare.create(key) == 0],
                success=[Op.put(key, self.worker, lease=lease), Op.get(key)],
                failure=[Op.get(key)],
            )
        except NotFound as exc:  # the server expired (or someone revoked) the lease
            raise LeaseLost(f"worker {self.worker!r} of job {self.job!r}: {exc}") from exc
        read = r.responses[-1]
        assert isinstance(read, RangeResult)
        kv = read.kvs[0] if read.kvs else None
        if kv is None or kv.lease != lease:
            self._claims.pop(partition, None)
            return None
        fence = Fence(lease, kv.create_revision, key)
        self._claims[partition] = fence
        return fence

    def claims(self) -> dict[str, Fence]:
        """The partitions this worker claimed (and has not released), with their fences."""
        return dict(self._claims)

    def holder(self, partition: str) -> str | None:
        """The worker holding ``partition``'s claim now (any member's view), None if free."""
        got = self.client.get(claim_key(self.job, partition))
        return got.kvs[0].value.decode(errors="replace") if got.kvs else None

    def release(self, partition: str) -> None:
        """Give ``partition`` up (after its last commit): its claim key is deleted if it is
        still this worker's claim."""
        fence = self._claims.pop(partition, None)
        if fence is None:
            return
        with contextlib.suppress(ClientError):  # gone with the lease already
            self.client.txn([fence.is_owner()], success=[Op.delete(fence.key)])
