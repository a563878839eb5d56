"""The ``quota`` record kind: limits per record type, registered in :mod:`nameserver.kinds`.

Its guard (:class:`~nameserver.quotas.apply.QuotaGuard`) checks every request against
the limits of the kinds that declare ``usage``; quotas themselves have no quota.
"""

from __future__ import annotations

from nameserver.quotas.apply import QuotaGuard, apply_quota_entry
from nameserver.quotas.records import Quota, QuotaDelta, QuotasImage
from nameserver.state.consistency import LINEARIZABLE
from nameserver.state.registry import RecordKind

QUOTA = RecordKind(
    name="quota",
    field="quotas",
    empty=QuotasImage(),
    delta=QuotaDelta,
    decode=Quota.from_record,
    # limits and usage are read to decide what may still be written
    consistency=LINEARIZABLE,
    items=lambda image: ((t.encode(), q) for t, q in sorted(image.quotas.items())),
    lookup=lambda image, key: image.get(key.decode()),
    key_of=bytes.decode,
    rules={"quota": apply_quota_entry},
    guard=QuotaGuard(),
)
