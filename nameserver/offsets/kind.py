"""The ``offset`` record kind: replicator offsets, registered in :mod:`nameserver.kinds`."""

from __future__ import annotations

from nameserver.offsets.apply import apply_offset_entry
from nameserver.offsets.records import CommittedOffset, OffsetDelta, OffsetsImage
from nameserver.state.consistency import LINEARIZABLE
from nameserver.state.registry import RecordKind

OFFSET = RecordKind(
    name="offset",
    field="offsets",
    empty=OffsetsImage(),
    delta=OffsetDelta,
    decode=CommittedOffset.from_record,
    # a standby resumes from the newest checkpoint, never an older one
    consistency=LINEARIZABLE,
    items=lambda image: image.data.items(),
    lookup=lambda image, key: image.get(key),
    usage=lambda delta: (
        len(delta.base) + delta.key_delta,
        delta.base.value_bytes + delta.byte_delta,
    ),
    rules={"offset": apply_offset_entry},
)
