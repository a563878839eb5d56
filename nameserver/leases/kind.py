"""The ``lease`` record kind: etcd leases, registered in :mod:`nameserver.kinds`."""

from __future__ import annotations

from nameserver.leases.apply import apply_lease_entry
from nameserver.leases.records import Lease, LeaseDelta, LeasesImage, lease_key
from nameserver.state.consistency import LINEARIZABLE
from nameserver.state.registry import RecordKind


def lease_id_of(key: bytes) -> int:
    """The lease id of a record key (8 bytes big-endian, :func:`lease_key`)."""
    return int.from_bytes(key, "big", signed=True)


LEASE = RecordKind(
    name="lease",
    field="leases",
    empty=LeasesImage(),
    delta=LeaseDelta,
    decode=Lease.from_record,
    # a holder must never see a lease that the leader let expire
    consistency=LINEARIZABLE,
    items=lambda image: ((lease_key(i), lease) for i, lease in sorted(image.leases.items())),
    lookup=lambda image, key: image.get(lease_id_of(key)),
    key_of=lease_id_of,
    usage=lambda delta: (len(delta.base) + delta.key_delta, 0),  # keys only
    rules={"lease": apply_lease_entry},
)
