"""etcd's lock and election recipes, server-side (the gRPC services ``v3lockpb.Lock`` and
``v3electionpb.Election`` in :mod:`nameserver.locks.service` call them).

They are etcd's client recipes (``clientv3/concurrency`` ``mutex.go`` and ``election.go``) run
inside the server, so that a client needs one RPC and no Watch:

* a contender's key is ``name + "/" + "%x" % lease``, created with the lease by a txn only if
  absent (``create_revision == 0``), so asking again with the same lease finds the same key;
* the holder (the leader) is the key with the lowest ``create_revision`` under ``name + "/"``;
* a waiter waits until every key under the prefix created before its own is deleted (released,
  resigned, or gone with its lease); meanwhile it sleeps on this node's apply progress
  (``ReplicatedLog.wait_applied``) and re-checks the image, which is enough because every
  deletion is an applied entry;
* a Lock or Campaign that ends before it succeeds (the client's deadline or cancel, an error)
  deletes its waiter key, so it never holds the lock later by surprise.

**Fencing.** The ownership key's ``create_revision`` is the fencing token: it is unique, it only
grows from one holder to the next, and a write guarded by ``Compare.create(key) == token`` in a
txn fails once the holder lost the key (its lease expired, it unlocked or resigned), even if the
same lease takes the lock again (a new key has a new create revision). LockResponse carries the
key and, as in etcd, the header of the read that saw the lock acquired; clients read the key's
create revision (the Python client does, and returns it as ``HeldLock.token``). An election's
LeaderKey carries it as ``rev``; Proclaim and Resign are txns guarded by it, so a stale
LeaderKey gets etcd's ``election: not leader`` (FAILED_PRECONDITION). Unlike etcd's recipe, a
Resign with a stale LeaderKey fails too (etcd deletes nothing and reports success).

Every read here is linearizable: the first through a read barrier, and later ones from this
node's image after its own write or after a newer entry was applied here.

Errors (as gRPC status, messages start with etcd's text):
``"leader" field must be provided`` and an empty name or key (INVALID_ARGUMENT),
a lock or campaign without a lease (INVALID_ARGUMENT: etcd would grant a 60 s lease that nobody
keeps alive), an unknown lease (NOT_FOUND ``etcdserver: requested lease not found``),
``election: no leader`` (NOT_FOUND), ``election: not leader`` and a lease that expired while
waiting (FAILED_PRECONDITION ``mutex: session is expired`` / ``election: session is expired``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from nameserver.errors import FailedPrecondition, InvalidArgument
from nameserver.kv.records import KeyValue
from nameserver.state.image import MetadataImage
from protos import records_pb2
from protos.etcdserverpb import (
    rpc_pb2,
)
from raftlog import Entry, UnknownOutcomeError

if TYPE_CHECKING:
    from nameserver.node import NodeFacade

log = logging.getLogger(__name__)

NOT_LEADER = "election: not leader"
NO_LEADER = "election: no leader"
MISSING_LEADER_KEY = '"leader" field must be provided'
#: How long one wait on apply progress lasts before it is simply renewed (no deadline given).
WAIT_SLICE_S = 30.0


def owner_key(name: bytes, lease: int) -> bytes:
    """The contender key of ``lease`` in lock/election ``name`` (etcd: ``pfx + "/" + "%x"``)."""
    return name + b"/" + b"%x" % lease


def _prefix_range(name: bytes) -> tuple[bytes, bytes]:
    """``[name/, name0)``: every key under ``name + "/"`` ("0" is the byte after "/")."""
    return name + b"/", name + b"0"


def first_created(
    image: MetadataImage, name: bytes, max_create_rev: int | None = None
) -> KeyValue | None:
    """The key under ``name/`` created first (the holder), or, with ``max_create_rev``, the one
    created last at or below it (the key a waiter waits for, etcd's ``waitDeletes``). A bound
    of 0 is a bound (none is): a store counting etcd's way from revision 0 gives its first key
    revision 1."""
    start, end = _prefix_range(name)
    found: KeyValue | None = None
    for kv in image.kv.range(start, end):
        if max_create_rev is not None:
            if kv.create_revision <= max_create_rev and (
                found is None or kv.create_revision > found.create_revision
            ):
                found = kv
        elif found is None or kv.create_revision < found.create_revision:
            found = kv
    return found


def require_name(name: bytes, what: str) -> None:
    if not name:
        raise InvalidArgument(f"etcdserver: key is not provided ({what}: name must not be empty)")


def require_lease_id(lease: int, what: str) -> None:
    if lease <= 0:
        raise InvalidArgument(
            f"lease: {what} needs the ID of a granted lease (lease: {lease}); grant one first"
        )


class Coordinator:
    """The recipes' steps on one node: guarded txns through the log and waits on apply."""

    def __init__(self, node: NodeFacade) -> None:
        self.node = node
        self._cleanups: set[asyncio.Task[None]] = set()

    async def txn(self, request: rpc_pb2.TxnRequest) -> tuple[rpc_pb2.TxnResponse, int]:
        """Propose a txn (no client de-duplication identity: one RPC proposes several)."""
        applied = await self.node.propose(
            Entry(type="txn", value=records_pb2.TxnOperation(txn=request).SerializeToString()),
            None,
        )
        resp = rpc_pb2.TxnResponse()
        resp.CopyFrom(applied.result)
        return resp, resp.header.revision  # the store revision after it (apply's stamp)

    async def create_if_absent(
        self, key: bytes, value: bytes, lease: int
    ) -> tuple[int, bytes | None, int]:
        """etcd's first step: put ``key`` with ``lease`` unless it exists. Returns the txn's
        revision, the key's value if it existed (else None) and the key's create revision."""
        put = rpc_pb2.PutRequest(key=key, value=value, lease=lease)
        get = rpc_pb2.RangeRequest(key=key)
        resp, revision = await self.guarded(
            key,
            0,
            rpc_pb2.RequestOp(request_put=put),
            rpc_pb2.RequestOp(request_range=get),
        )
        if resp.succeeded:
            return revision, None, revision
        found = resp.responses[0].response_range.kvs[0]
        return revision, found.value, found.create_revision

    async def guarded(
        self,
        key: bytes,
        create_rev: int,
        op: rpc_pb2.RequestOp,
        otherwise: rpc_pb2.RequestOp | None = None,
    ) -> tuple[rpc_pb2.TxnResponse, int]:
        """Run ``op`` only if ``key`` has create revision ``create_rev`` (0: does not exist;
        else: ownership), ``otherwise`` if not."""
        cmp = rpc_pb2.Compare(
            key=key,
            target=rpc_pb2.Compare.CREATE,
            result=rpc_pb2.Compare.EQUAL,
            create_revision=create_rev,
        )
        req = rpc_pb2.TxnRequest(
            compare=[cmp], success=[op], failure=[otherwise] if otherwise is not None else []
        )
        return await self.txn(req)

    async def next_image(self, seen_offset: int) -> tuple[int, MetadataImage]:
        """Wait until this node applied something after ``seen_offset``; return the new apply
        offset and an image at least that new (the image is published before the offset moves,
        so reading the offset first never misses a change)."""
        try:
            await self.node.log.wait_applied(seen_offset + 1, WAIT_SLICE_S)
        except UnknownOutcomeError:
            pass  # nothing applied for a while: look again (the RPC's deadline cancels us)
        return self.node.log.apply_offset, self.node.state.image

    async def wait_deletes(self, name: bytes, my_key: bytes, my_rev: int) -> MetadataImage:
        """Wait until no key under ``name/`` created before ``my_rev`` is left; fail if
        ``my_key`` itself vanished meanwhile (its lease expired)."""
        seen = self.node.log.apply_offset
        image = self.node.state.image  # already holds our own txn: linearizable from here
        while True:
            mine = image.kv.get(my_key)
            if mine is None or mine.create_revision != my_rev:
                raise FailedPrecondition(
                    "mutex: session is expired (the key "
                    f"{my_key.decode('utf-8', 'backslashreplace')} vanished with its lease)",
                )
            if first_created(image, name, my_rev - 1) is None:
                return image
            seen, image = await self.next_image(seen)

    def cleanup(self, key: bytes, create_rev: int) -> None:
        """Delete a waiter's key after its RPC ended without success, in a task of its own
        (the handler itself is being cancelled); only the same incarnation of the key."""
        op = rpc_pb2.RequestOp(request_delete_range=rpc_pb2.DeleteRangeRequest(key=key))

        async def run() -> None:
            try:
                await self.guarded(key, create_rev, op)
            except Exception as exc:  # the lease will remove it at the latest
                log.warning("could not delete abandoned waiter key %r: %s", key, exc)

        task = asyncio.get_running_loop().create_task(run())
        self._cleanups.add(task)
        task.add_done_callback(self._cleanups.discard)
