"""The one place that lists the server's record kinds (:mod:`nameserver.state.registry`).

A new record type is a ``RecordKind`` declared beside its domain (``<domain>/kind.py``:
records, apply rules, consistency, quota accounting) and one line in :data:`KINDS`. The
order is the snapshot order and the order types are listed in (watch and quota errors).

The state machinery (``nameserver/state/``) never imports this module: the server's wiring
passes :data:`REGISTRY` to it (``nameserver/server.py``: the restored image, and with it the
state machine, the node's reads and the watch hub), and so do the tools and tests that make
images. The imports run one way: this module, the domains' kinds, the machinery.
"""

from __future__ import annotations

from nameserver.auth.kind import AUTH
from nameserver.cluster.kind import ALARM, MEMBER
from nameserver.kv.kind import KV, MVCC, REVISION_KIND
from nameserver.leases.kind import LEASE
from nameserver.offsets.kind import OFFSET
from nameserver.quotas.kind import QUOTA
from nameserver.replica_groups.kind import REPLICA_GROUP
from nameserver.routing.kind import BROKER, KVCONFIG, TOPIC
from nameserver.state.consistency import EVENTUAL, LINEARIZABLE
from nameserver.state.registry import RecordKind, Registry

KINDS: tuple[RecordKind, ...] = (
    KV,
    MEMBER,
    LEASE,
    OFFSET,
    QUOTA,
    REPLICA_GROUP,
    BROKER,
    TOPIC,
    KVCONFIG,
    ALARM,
    MVCC,
    AUTH,
    REVISION_KIND,
)

#: Reads that are not of one record type, and their consistency.
READS = {
    # ownership keys (etcd v3lock / v3election) decide who may act
    "lock": LINEARIZABLE,
    "election": LINEARIZABLE,
    # route queries (RIP-18): as the route record types
    "routing": EVENTUAL,
}

REGISTRY = Registry(KINDS, READS)
